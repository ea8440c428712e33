/*
 * JSON-lines logger. See include/base/omnigate/log.h.
 */
#include "omnigate/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* How a buffered logger writes its descriptor without blocking (log.h). */
enum { HOW_WRITE, HOW_SEND, HOW_NOWAIT, HOW_POLLED };

_Static_assert(OG_LOG_LINE <= PIPE_BUF, "a line must fit one atomic pipe write");

static void init_unbuffered(og_log_t *l, og_log_level_t level, int fd)
{
    *l = (og_log_t){.level = level, .fd = fd, .pid = (int)getpid(), .own_fd = -1, .wait_fd = -1};
}

bool og_log_init(og_log_t *l, og_log_level_t level, bool buffered)
{
    if (buffered)
        return og_log_open(l, level, STDERR_FILENO);
    init_unbuffered(l, level, STDERR_FILENO);
    return true;
}

/* The descriptor a buffered logger writes. */
static int out_fd(const og_log_t *l)
{
    return l->own_fd >= 0 ? l->own_fd : l->fd;
}

/* For a pipe without RWF_NOWAIT, or a terminal: our own non-blocking description of the same
 * file, or else a poll before each write. Sets l->how and l->own_fd. */
static void fall_back(og_log_t *l)
{
    struct stat st;
    char path[40];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", l->fd);
    l->own_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (l->own_fd >= 0)
        l->how = HOW_WRITE;
    else if (fstat(l->fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))
        l->how = HOW_POLLED;
    else
        l->how = HOW_WRITE;
}

/* Chooses how to write l->fd without blocking and without changing anything another process
 * shares (log.h). */
static void choose_output(og_log_t *l)
{
    struct stat st;
    l->how = HOW_WRITE;
    if (fstat(l->fd, &st) != 0)
        return;
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
        l->whole = true;
        return;
    }
    if (S_ISSOCK(st.st_mode))
        l->how = HOW_SEND;
    else if (S_ISFIFO(st.st_mode))
        l->how = HOW_NOWAIT; /* until the kernel says it cannot (write_some) */
    else
        fall_back(l);
}

bool og_log_open(og_log_t *l, og_log_level_t level, int fd)
{
    init_unbuffered(l, level, fd);
    l->buf = malloc(OG_LOG_BUF);
    if (l->buf == NULL)
        return false;
    l->buffered = true;
    choose_output(l);
    /* An epoll set holding only the output: it polls readable when the output has room, and
     * a loop can watch it without touching the output's own flags (libuv's uv_poll_init
     * would set O_NONBLOCK on what it watches). Room is the pipe's or the terminal's, so
     * watching fd serves own_fd too. A regular file is refused (EPERM): it never fills. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep >= 0) {
        struct epoll_event ev = {.events = EPOLLOUT};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0)
            l->wait_fd = ep;
        else
            close(ep);
    }
    return true;
}

int og_log_wait_fd(const og_log_t *l)
{
    return l->wait_fd;
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
    clock_gettime(CLOCK_REALTIME, &ts);
    og_time_rfc3339_ms((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, out);
}

void og_time_rfc3339_ms(int64_t ms, char out[32])
{
    struct tm tm;
    time_t sec = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    gmtime_r(&sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms - (int64_t)sec * 1000));
}

/* Days from 1970-01-01 to the given date of the proleptic Gregorian calendar (negative
 * before), by counting in 400-year eras that start on March 1st (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;                                   /* [0, 399] */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

bool og_time_parse_rfc3339(const char *s, int64_t *ms)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    size_t i;
    for (i = 0; shape[i]; i++) {
        char c = s[i];
        if (shape[i] == 'd' ? (c < '0' || c > '9')
                            : (shape[i] == 'T' ? (c != 'T' && c != 't') : c != shape[i]))
            return false;
    }
    int year = digits(s, 4), month = digits(s + 5, 2), day = digits(s + 8, 2);
    int hour = digits(s + 11, 2), min = digits(s + 14, 2), sec = digits(s + 17, 2);
    if (month < 1 || month > 12 || hour > 23 || min > 59 || sec > 60)
        return false;
    bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    if (day < 1 || day > month_days[month - 1] + (month == 2 && leap))
        return false;
    const char *p = s + i;
    int64_t frac_ns = 0;
    if (*p == '.') {
        p++;
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 9)
            return false;
        frac_ns = digits(p, (int)n);
        for (size_t k = n; k < 9; k++)
            frac_ns *= 10;
        p += n;
    }
    int offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        if (p[1] != '\0')
            return false;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[1] >= '0' && p[1] <= '2' && p[2] >= '0' &&
               p[2] <= '9' && p[3] == ':' && p[4] >= '0' && p[4] <= '5' && p[5] >= '0' && p[5] <= '9' &&
               digits(p + 1, 2) <= 23) {
        offset_min = (digits(p + 1, 2) * 60 + digits(p + 4, 2)) * (*p == '-' ? -1 : 1);
    } else {
        return false;
    }
    /* A leap second (:60) is the first millisecond of the next minute. */
    int64_t secs = days_from_civil(year, month, day) * 86400 + hour * 3600 + min * 60 + sec - offset_min * 60;
    *ms = secs * 1000 + (frac_ns + 999999) / 1000000;
    return true;
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

/* Blocking: the unbuffered mode. */
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

/* Writes at most len bytes without blocking. Returns the bytes written, 0 when the output is
 * full, -1 when it failed for good (the reader is gone). */
static ssize_t write_some(og_log_t *l, const char *p, size_t len)
{
    for (;;) {
        ssize_t n;
        int fd = out_fd(l);
        if (l->how == HOW_SEND) {
            n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else if (l->how == HOW_NOWAIT) {
            struct iovec iov = {(void *)p, len};
            n = pwritev2(fd, &iov, 1, -1, RWF_NOWAIT);
            if (n < 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
                fall_back(l); /* a kernel without RWF_NOWAIT on pipes, or without pwritev2 */
                continue;
            }
        } else {
            if (l->how == HOW_POLLED) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                int r = poll(&pfd, 1, 0);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r == 0)
                    return 0;
            }
            n = write(fd, p, len);
        }
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

/* The next write from offset `from`: whole lines (the first one possibly the rest of a partly
 * written line) up to PIPE_BUF bytes, at least one line; everything to a regular file. */
static size_t next_chunk(const og_log_t *l, size_t from)
{
    if (l->whole)
        return l->len - from;
    size_t n = from;
    while (n < l->len) {
        const char *nl = memchr(l->buf + n, '\n', l->len - n);
        size_t end = nl != NULL ? (size_t)(nl - l->buf) + 1 : l->len;
        if (n > from && end - from > PIPE_BUF)
            break;
        n = end;
    }
    return n - from;
}

static uint64_t count_lines(const char *p, size_t len)
{
    uint64_t n = 0;
    for (const char *e = p + len; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++)
        n++;
    return n;
}

bool og_log_flush(og_log_t *l)
{
    if (!l->buffered)
        return true;
    size_t done = 0;
    ssize_t n = 1;
    while (done < l->len) {
        size_t chunk = next_chunk(l, done);
        n = write_some(l, l->buf + done, chunk);
        if (n == 0 && !l->whole) {
            /* A pipe takes a write of up to PIPE_BUF whole or not at one: with less room than
             * the chunk, a single line may still fit. */
            const char *nl = memchr(l->buf + done, '\n', chunk);
            size_t one = nl != NULL ? (size_t)(nl - (l->buf + done)) + 1 : chunk;
            if (one < chunk)
                n = write_some(l, l->buf + done, one);
        }
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (n < 0) {
        /* The output failed for good (its reader is gone): nobody will read these. */
        uint64_t lost = count_lines(l->buf + done, l->len - done);
        l->dropped += lost;
        l->gap += lost;
        done = l->len;
    }
    l->blocked = done < l->len;
    memmove(l->buf, l->buf + done, l->len - done);
    l->len -= done;
    if (l->len == 0)
        l->urgent = false;
    return !l->blocked;
}

void og_log_close(og_log_t *l, int wait_ms)
{
    if (!l->buffered)
        return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!og_log_flush(l) && l->wait_fd >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = wait_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pfd = {.fd = l->wait_fd, .events = POLLIN};
        if (left <= 0 || (poll(&pfd, 1, (int)left) < 0 && errno != EINTR))
            break;
    }
    uint64_t dropped = l->dropped + count_lines(l->buf, l->len);
    og_log_forget(l);
    l->dropped = dropped;
}

void og_log_forget(og_log_t *l)
{
    if (!l->buffered)
        return;
    free(l->buf);
    if (l->wait_fd >= 0)
        close(l->wait_fd);
    if (l->own_fd >= 0)
        close(l->own_fd);
    init_unbuffered(l, l->level, l->fd);
}

/* og_time_rfc3339 with the date and time of day formatted once per second (per logger). */
static void log_time(og_log_t *l, char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if ((long long)ts.tv_sec != l->time_sec || l->time_text[0] == '\0') {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(l->time_text, sizeof(l->time_text), "%Y-%m-%dT%H:%M:%S", &tm);
        l->time_sec = (long long)ts.tv_sec;
    }
    int ms = (int)(ts.tv_nsec / 1000000);
    memcpy(out, l->time_text, 19);
    out[19] = '.';
    out[20] = (char)('0' + ms / 100);
    out[21] = (char)('0' + ms / 10 % 10);
    out[22] = (char)('0' + ms % 10);
    out[23] = 'Z';
    out[24] = '\0';
}

/* Formats one line into line[OG_LOG_LINE], newline included; returns its length. */
static size_t format(og_log_t *l, char *line, og_log_level_t level, const char *msg, const char *fields_fmt,
                     va_list ap) __attribute__((format(printf, 5, 0)));
static size_t format(og_log_t *l, char *line, og_log_level_t level, const char *msg, const char *fields_fmt,
                     va_list ap)
{
    const size_t size = OG_LOG_LINE;
    char now[32];
    log_time(l, now);
    int n = snprintf(line, size, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\",\"pid\":%d", now,
                     level_names[level], msg, l->pid);
    if (n < 0)
        n = 0;
    if ((size_t)n > size - 3)
        n = (int)size - 3;
    if (fields_fmt != NULL && (size_t)n < size - 3) {
        line[n++] = ',';
        int m = vsnprintf(line + n, size - (size_t)n - 2, fields_fmt, ap);
        if (m > 0)
            n += m;
        if ((size_t)n > size - 3)
            n = (int)size - 3;
    }
    line[n++] = '}';
    line[n++] = '\n';
    return (size_t)n;
}

static size_t format_f(og_log_t *l, char *line, og_log_level_t level, const char *msg, const char *fields_fmt,
                       ...) __attribute__((format(printf, 5, 6)));
static size_t format_f(og_log_t *l, char *line, og_log_level_t level, const char *msg, const char *fields_fmt,
                       ...)
{
    va_list ap;
    va_start(ap, fields_fmt);
    size_t n = format(l, line, level, msg, fields_fmt, ap);
    va_end(ap);
    return n;
}

/* Buffers a line, after the announcement of a gap if lines were dropped before it. */
static void append(og_log_t *l, const char *line, size_t n)
{
    char note[OG_LOG_LINE];
    size_t nn = 0;
    if (l->gap > 0)
        nn =
            format_f(l, note, OG_LOG_WARN, "log lines dropped", "\"lines\":%llu", (unsigned long long)l->gap);
    /* A full buffer is flushed at once, unless the output was full a moment ago: then only
     * the loop's next flush (or its wait on og_log_wait_fd) tries again, not every line. */
    if (l->len + nn + n > OG_LOG_BUF && !l->blocked)
        og_log_flush(l);
    if (l->len + nn + n > OG_LOG_BUF) {
        l->dropped++;
        l->gap++;
        return;
    }
    memcpy(l->buf + l->len, note, nn);
    memcpy(l->buf + l->len + nn, line, n);
    l->len += nn + n;
    l->gap = 0;
}

static void vlog(og_log_t *l, og_log_level_t level, bool bulk, const char *msg, const char *fields_fmt,
                 va_list ap) __attribute__((format(printf, 5, 0)));
static void vlog(og_log_t *l, og_log_level_t level, bool bulk, const char *msg, const char *fields_fmt,
                 va_list ap)
{
    char line[OG_LOG_LINE];
    size_t n = format(l, line, level, msg, fields_fmt, ap);
    if (l->buffered) {
        append(l, line, n);
        l->urgent |= !bulk;
    } else {
        write_all(l->fd, line, n);
    }
}

void og_log(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
{
    if (!og_log_enabled(l, level))
        return;
    va_list ap;
    va_start(ap, fields_fmt);
    vlog(l, level, false, msg, fields_fmt, ap);
    va_end(ap);
}

void og_log_bulk(og_log_t *l, og_log_level_t level, const char *msg, const char *fields_fmt, ...)
{
    if (!og_log_enabled(l, level))
        return;
    va_list ap;
    va_start(ap, fields_fmt);
    vlog(l, level, true, msg, fields_fmt, ap);
    va_end(ap);
}
