/*
 * JSON-lines logger. See include/base/omnigate/log.h.
 */
#include "omnigate/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void og_log_init(og_log_t *l, og_log_level_t level, bool buffered)
{
    l->level = level;
    l->fd = STDERR_FILENO;
    l->pid = (int)getpid();
    l->buffered = buffered;
    l->len = 0;
}

bool og_log_level_parse(const char *s, og_log_level_t *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (og_log_level_t)i;
            return true;
        }
    }
    return false;
}

void og_time_rfc3339(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

const char *og_log_escape(char *buf, size_t buflen, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len && o + 7 < buflen; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            buf[o++] = '\\';
            buf[o++] = 'u';
            buf[o++] = '0';
            buf[o++] = '0';
            buf[o++] = hex[ch >> 4];
            buf[o++] = hex[ch & 15];
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o] = '\0';
    return buf;
}

static void write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere to report a failing stderr */
        }
        p += n;
        len -= (size_t)n;
    }
}

void og_log_flush(og_log_t *l)
{
    if (l->len > 0) {
        write_all(l->fd, l->buf, l->len);
        l->len = 0;
    }
}

void og_log(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
{
    if (!og_log_enabled(l, level))
        return;
    char line[4096];
    char now[32];
    og_time_rfc3339(now);
    int n = snprintf(line, sizeof(line), "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\",\"pid\":%d", now,
                     level_names[level], msg, l->pid);
    if (fields_fmt != NULL && n > 0 && (size_t)n < sizeof(line) - 3) {
        line[n++] = ',';
        va_list ap;
        va_start(ap, fields_fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 2, fields_fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
        if ((size_t)n > sizeof(line) - 3)
            n = (int)sizeof(line) - 3;
    }
    line[n++] = '}';
    line[n++] = '\n';
    if (!l->buffered) {
        write_all(l->fd, line, (size_t)n);
        return;
    }
    if (l->len + (size_t)n > sizeof(l->buf))
        og_log_flush(l);
    memcpy(l->buf + l->len, line, (size_t)n);
    l->len += (size_t)n;
}
