/*
 * Structured logging: one JSON object per line on stderr. Responsible for formatting and
 * emitting; callers decide what is worth a line and must never pass secrets.
 *
 * Two modes. Unbuffered (supervisor, CLI, tools): every line is written at once with blocking
 * writes; those processes have nothing else to do. Buffered (a worker): lines are collected in
 * a bounded buffer (OG_LOG_BUF) and written without ever blocking: at the end of the loop turn
 * that logged them (og_log_due, checked from the worker's uv_check), but for bulk lines (the
 * access log, og_log_bulk), which wait as nginx's buffered access log does: until
 * OG_LOG_FLUSH_BYTES wait or the worker's 100 ms timer flushes them. So the access log costs
 * a write per 32 KiB rather than per loop turn, every other line is out within the turn, and
 * a stalled log reader (journald, a container runtime that stopped reading its pipe) cannot
 * stall the loop. When the output is full the lines wait in the
 * buffer; when the buffer is full too, new lines are dropped and counted (og_log_t.dropped,
 * `omnigate_log_lines_dropped_total`), and the first line that fits again is preceded by a
 * "log lines dropped" line saying how many were lost there.
 *
 * How a buffered logger writes without blocking, by what its descriptor is, never changing the
 * descriptor's flags: O_NONBLOCK on the inherited stderr (or on a dup of it, which shares the
 * open file description) would also make the supervisor, the other workers and whatever else
 * holds that pipe (a shell, the next program of a script) see EAGAIN.
 *   - a socket (journald's stream): send(2) with MSG_DONTWAIT, per call.
 *   - a pipe (a container runtime, `| tee`): pwritev2(2) with RWF_NOWAIT, per call.
 *   - a terminal or another character device (/dev/null), or a pipe on a kernel that refuses
 *     RWF_NOWAIT on pipes (EOPNOTSUPP): a new open file description of the same file, opened
 *     through /proc/self/fd/N with O_NONBLOCK, which is ours alone. If that is refused too (no
 *     /proc, no permission), each write is preceded by a poll(2) with no timeout and is at
 *     most PIPE_BUF bytes, which a pipe that polls writable takes at once unless another
 *     writer fills it in between (then the write waits for the reader: the one case left
 *     that can block).
 *   - a regular file: plain write(2); it never says EAGAIN.
 * Every write is whole lines of at most PIPE_BUF bytes, which a pipe takes atomically, so no
 * other process's line is ever torn into ours; a regular file takes the whole buffer in one
 * write (each write(2) of a shared file description is placed whole). A pipe with less room
 * than a chunk is offered one line, which may still fit. A socket or terminal may take part of a
 * write: the rest stays at the head of the buffer and goes first next time. A worker waits for
 * a full output with og_log_wait_fd (an epoll descriptor watching the output for room) rather
 * than by retrying.
 */
#ifndef OMNIGATE_LOG_H
#define OMNIGATE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { OG_LOG_ERROR = 0, OG_LOG_WARN = 1, OG_LOG_INFO = 2, OG_LOG_DEBUG = 3 } og_log_level_t;

#define OG_LOG_BUF  (256 * 1024) /* a buffered logger's bound, per process */
#define OG_LOG_LINE 4096         /* the longest line; longer ones are cut */
/* A buffered logger is due for a write once this many bytes wait (og_log_due). */
#define OG_LOG_FLUSH_BYTES (32 * 1024)

typedef struct og_log {
    og_log_level_t level;
    int fd; /* the output (stderr): the caller's, never closed or changed by the logger */
    int pid;
    bool buffered; /* false: every line is written at once (supervisor, CLI) */
    /* Buffered only. */
    int how;          /* how fd is written without blocking (log.c) */
    int own_fd;       /* our own non-blocking description of fd, written instead of it, or -1 */
    int wait_fd;      /* og_log_wait_fd, or -1 */
    bool blocked;     /* the last write found the output full */
    bool whole;       /* the output takes any size in one write (a regular file) */
    bool urgent;      /* a line other than a bulk one waits: due at once (og_log_due) */
    char *buf;        /* OG_LOG_BUF bytes, owned */
    size_t len;       /* bytes waiting in buf; may start with the rest of a partly written line */
    uint64_t dropped; /* lines dropped since og_log_init (the buffer was full, or the output failed) */
    uint64_t gap;     /* of which not yet announced by a "log lines dropped" line */
    /* The second of the last line's time, formatted once per second ("YYYY-MM-DDTHH:MM:SS"). */
    long long time_sec;
    char time_text[20];
} og_log_t;

/* Initializes a logger on stderr. `buffered`: see above; needs og_log_close. Returns false when
 * a buffered logger could not be set up (no memory): it is then unbuffered. */
bool og_log_init(og_log_t *l, og_log_level_t level, bool buffered);

/* A buffered logger on `fd` (which stays the caller's). False on failure (no memory), with l
 * unbuffered on fd. */
bool og_log_open(og_log_t *l, og_log_level_t level, int fd);

/* Writes what is buffered, waiting at most wait_ms for a full output, then releases the
 * buffer and the descriptors the logger opened. The logger is unbuffered afterwards. */
void og_log_close(og_log_t *l, int wait_ms);

/* Releases the buffer and the descriptors the logger opened without writing anything: for a
 * child after fork, whose parent still owns the lines. The logger is unbuffered afterwards. */
void og_log_forget(og_log_t *l);

/* Parses "error" | "warn" | "info" | "debug"; returns false for anything else. */
bool og_log_level_parse(const char *s, og_log_level_t *out);

/* Writes {"time":..., "level":..., "msg": msg, "pid": pid[, <fields>]}. `fields_fmt` is a
 * printf format producing further JSON members without the leading comma ("\"conn\":%llu"),
 * or NULL. String values in fields must be escaped with og_log_escape. Never blocks when the
 * logger is buffered. */
void og_log(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline bool og_log_enabled(const og_log_t *l, og_log_level_t level)
{
    return level <= l->level;
}

/* og_log for a line that may wait for the buffer's flush by size or by time (og_log_due): the
 * access log's. The same as og_log on an unbuffered logger. */
void og_log_bulk(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes `s` JSON-escaped (without quotes) into buf (NUL-terminated, truncated to fit). */
const char *og_log_escape(char *buf, size_t buflen, const char *s, size_t len);

/* Writes out buffered lines as far as the output takes them without blocking. Returns true
 * when nothing is left, false when lines wait for room in the output (og_log_wait_fd). */
bool og_log_flush(og_log_t *l);

/* Whether a buffered logger should be flushed now rather than by its owner's timer: at least
 * OG_LOG_FLUSH_BYTES wait, or a line that is not a bulk one does. */
static inline bool og_log_due(const og_log_t *l)
{
    return l->len >= OG_LOG_FLUSH_BYTES || l->urgent;
}

/* A descriptor that polls readable when the output of a buffered logger may have room again,
 * for a loop to wait on after og_log_flush returned false; -1 when there is none (the output
 * is a regular file, which never fills, or epoll is unavailable: retry on the next turn). */
int og_log_wait_fd(const og_log_t *l);

/* Formats the current UTC time as RFC 3339 with milliseconds ("2026-11-22T14:05:25.123Z"). */
void og_time_rfc3339(char out[32]);

/* The same for a time in milliseconds since the epoch. */
void og_time_rfc3339_ms(int64_t ms, char out[32]);

/* Reads an RFC 3339 date-time, strictly ("2026-11-22T14:05:25Z", an optional fraction of up to
 * 9 digits, then Z or an offset +hh:mm / -hh:mm; T and Z in either case) into milliseconds
 * since the epoch, negative before 1970, rounded up to the millisecond: a time in whole
 * milliseconds is at or after `s` exactly when it is >= *ms, and before `s` exactly when it is
 * < *ms. False when `s` is malformed or names no date of the calendar (2026-02-30). */
bool og_time_parse_rfc3339(const char *s, int64_t *ms);

#endif
