/*
 * Structured logging: one JSON object per line on stderr. Lines are buffered per process and
 * written with one write(2) per loop turn (og_log_flush) or when the buffer fills, so the
 * access log costs no syscall per request. Responsible for formatting and emitting; callers
 * decide what is worth a line and must never pass secrets.
 */
#ifndef OMNIGATE_LOG_H
#define OMNIGATE_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { OG_LOG_ERROR = 0, OG_LOG_WARN = 1, OG_LOG_INFO = 2, OG_LOG_DEBUG = 3 } og_log_level_t;

#define OG_LOG_BUF 32768

typedef struct og_log {
    og_log_level_t level;
    int fd;
    int pid;
    bool buffered; /* false: every line is written at once (supervisor, CLI) */
    size_t len;
    char buf[OG_LOG_BUF];
} og_log_t;

void og_log_init(og_log_t *l, og_log_level_t level, bool buffered);

/* Parses "error" | "warn" | "info" | "debug"; returns false for anything else. */
bool og_log_level_parse(const char *s, og_log_level_t *out);

/* Writes {"time":..., "level":..., "msg": msg, "pid": pid[, <fields>]}. `fields_fmt` is a
 * printf format producing further JSON members without the leading comma ("\"conn\":%llu"),
 * or NULL. String values in fields must be escaped with og_log_escape. */
void og_log(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline bool og_log_enabled(const og_log_t *l, og_log_level_t level)
{
    return level <= l->level;
}

/* Writes `s` JSON-escaped (without quotes) into buf (NUL-terminated, truncated to fit). */
const char *og_log_escape(char *buf, size_t buflen, const char *s, size_t len);

/* Writes out buffered lines. */
void og_log_flush(og_log_t *l);

/* Formats the current UTC time as RFC 3339 with milliseconds ("2026-11-22T14:05:25.123Z"). */
void og_time_rfc3339(char out[32]);

#endif
