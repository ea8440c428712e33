/*
 * Unit tests of the buffered logger (src/base/log.c): it never blocks on a full output, drops
 * and counts what does not fit, and writes what it kept whole and in order once the output
 * has room again. A logger that blocked would hang here: main arms an alarm for that.
 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "omnigate/log.h"

#define PAD 150

typedef struct out {
    char *data;
    size_t len, cap;
} out_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void log_seq(og_log_t *l, int seq)
{
    char pad[PAD + 1];
    memset(pad, 'x', PAD);
    pad[PAD] = '\0';
    og_log(l, OG_LOG_INFO, "line", "\"seq\":%d,\"pad\":\"%s\"", seq, pad);
}

/* Logs numbered lines, flushing after every ten as the worker's loop would, until `extra`
 * lines have been dropped. Returns how many were kept (lines 0..kept-1); each call must
 * return at once. */
static int fill(og_log_t *l, int extra)
{
    int seq = 0;
    double worst = 0;
    while (l->dropped < (uint64_t)extra) {
        double t0 = now_s();
        log_seq(l, seq++);
        if (seq % 10 == 0)
            og_log_flush(l);
        double t = now_s() - t0;
        worst = t > worst ? t : worst;
        assert_true(seq < 1000000);
    }
    assert_true(worst < 0.05);
    return seq - extra;
}

/* Reads everything the reader end holds now (it is non-blocking). */
static void drain(int fd, out_t *o)
{
    for (;;) {
        if (o->cap - o->len < 65536) {
            o->cap = o->cap * 2 + 65536;
            o->data = realloc(o->data, o->cap);
            assert_non_null(o->data);
        }
        ssize_t n = read(fd, o->data + o->len, o->cap - o->len - 1);
        if (n <= 0)
            break;
        o->len += (size_t)n;
    }
    o->data[o->len] = '\0';
}

/* Reads while the logger empties as the worker does it: flush, and when lines are left wait
 * for the wait descriptor (or here, for something to read), until nothing is left. */
static void drain_all(og_log_t *l, int rd, out_t *o)
{
    for (int i = 0; i < 100000; i++) {
        drain(rd, o);
        if (og_log_flush(l)) {
            drain(rd, o);
            return;
        }
        struct pollfd p[2] = {{.fd = og_log_wait_fd(l), .events = POLLIN}, {.fd = rd, .events = POLLIN}};
        assert_true(poll(p, 2, 1000) > 0);
    }
    fail_msg("the logger never emptied");
}

/* Every line is one whole JSON object of ours; the numbered ones run 0..kept-1 in order.
 * Returns the "lines" of the "log lines dropped" line, or 0 if there is none. */
static uint64_t check_lines(const out_t *o, int kept)
{
    int next = 0;
    uint64_t gap = 0;
    for (char *line = o->data, *nl; line < o->data + o->len; line = nl + 1) {
        nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        assert_true(strncmp(line, "{\"time\":\"", 9) == 0);
        assert_int_equal(nl[-1], '}');
        const char *s = strstr(line, "\"seq\":");
        if (s != NULL) {
            assert_int_equal(atoi(s + 6), next);
            assert_non_null(strstr(line, "\"}"));
            next++;
        } else if (strstr(line, "\"msg\":\"log lines dropped\"") != NULL) {
            gap = strtoull(strstr(line, "\"lines\":") + 8, NULL, 10);
        } else if (strstr(line, "\"msg\":\"after\"") == NULL) {
            fail_msg("unexpected line %s", line);
        }
        *nl = '\n';
    }
    assert_int_equal(next, kept);
    return gap;
}

static int flags_of(int fd)
{
    return fcntl(fd, F_GETFL);
}

/* On a pipe nobody reads, og_log returns at once; once the pipe (64 KiB) and the buffer
 * (256 KiB) are full, each further line is counted as dropped; a flush says lines wait, and
 * the wait descriptor is not ready. The caller's descriptor stays blocking. */
static void test_full_pipe_never_blocks(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int before = flags_of(p[1]);
    og_log_t l;
    assert_true(og_log_open(&l, OG_LOG_INFO, p[1]));
    fill(&l, 100);
    assert_true(l.len > OG_LOG_BUF - OG_LOG_LINE);
    assert_int_equal(l.dropped, 100);
    for (int i = 0; i < 50; i++)
        log_seq(&l, 1000000 + i);
    assert_int_equal(l.dropped, 150);
    assert_false(og_log_flush(&l));
    assert_true(og_log_wait_fd(&l) >= 0);
    struct pollfd pfd = {.fd = og_log_wait_fd(&l), .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(flags_of(p[1]), before);
    og_log_close(&l, 0);
    assert_true(l.dropped > 150); /* what was still buffered is lost too */
    /* The pipe took what it could, in whole lines. */
    assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    out_t o = {0};
    drain(p[0], &o);
    assert_true(o.len >= 32768);
    assert_int_equal(o.data[o.len - 1], '\n');
    free(o.data);
    close(p[0]);
    close(p[1]);
}

/* A connected TCP pair on loopback with the smallest buffers: sends are taken in part. */
static void tcp_pair(int sv[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int small = 1;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    assert_int_equal(setsockopt(ls, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 1), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(sv[0] >= 0);
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    assert_int_equal(connect(sv[0], (struct sockaddr *)&a, sizeof(a)), 0);
    sv[1] = accept(ls, NULL, NULL);
    assert_true(sv[1] >= 0);
    close(ls);
}

/* Logs into `wr` (which nobody reads) until `extra` lines were dropped, then reads `rd` while
 * the logger empties: the kept lines come out whole and in order, then a line saying how many
 * were dropped, then the next line. The caller's descriptor keeps its flags throughout. */
static void stall_then_read(int wr, int rd, int extra)
{
    int before = flags_of(wr);
    og_log_t l;
    assert_true(og_log_open(&l, OG_LOG_INFO, wr));
    int kept = fill(&l, extra);
    assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
    out_t o = {0};
    drain_all(&l, rd, &o);
    og_log(&l, OG_LOG_INFO, "after", NULL);
    drain_all(&l, rd, &o);
    assert_int_equal(check_lines(&o, kept), extra);
    assert_int_equal(l.dropped, extra);
    assert_int_equal(flags_of(wr), before);
    og_log_close(&l, 0);
    free(o.data);
    close(wr);
    close(rd);
}

/* A pipe: after the reader drains it, the kept lines come out whole and in order. */
static void test_kept_lines_come_out_whole_in_order(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    stall_then_read(p[1], p[0], 37);
}

/* On a socket that takes a few hundred bytes at a time (loopback TCP with the smallest
 * buffers, so most sends are taken in part), nothing blocks and the lines still come out
 * whole and in order: the rest of a part-written line goes first. */
static void test_socket_part_writes_keep_lines_whole(void **state)
{
    int sv[2];
    tcp_pair(sv);
    stall_then_read(sv[0], sv[1], 5);
}

/* A terminal (a pty in raw mode, so lines pass unchanged): the logger writes its own
 * non-blocking description of it (reopened through /proc), and the lines come out whole and
 * in order. */
static void test_terminal_through_own_description(void **state)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(master >= 0);
    assert_int_equal(grantpt(master), 0);
    assert_int_equal(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    assert_true(slave >= 0);
    struct termios t;
    assert_int_equal(tcgetattr(slave, &t), 0);
    cfmakeraw(&t);
    assert_int_equal(tcsetattr(slave, TCSANOW, &t), 0);
    stall_then_read(slave, master, 5);
}

/* A reader that is gone: lines are dropped and counted, nothing blocks or raises SIGPIPE. */
static void test_reader_gone_drops(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    og_log_t l;
    assert_true(og_log_open(&l, OG_LOG_INFO, p[1]));
    close(p[0]);
    for (int i = 0; i < 3; i++)
        log_seq(&l, i);
    assert_true(og_log_flush(&l));
    assert_int_equal(l.dropped, 3);
    og_log_close(&l, 1000);
    close(p[1]);
}

/* og_log_close waits (at most its bound) for a reader that catches up, and writes the rest. */
static void test_close_writes_the_rest(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    og_log_t l;
    assert_true(og_log_open(&l, OG_LOG_INFO, p[1]));
    for (int i = 0; i < 3; i++)
        log_seq(&l, i);
    og_log_close(&l, 1000);
    assert_int_equal(l.dropped, 0);
    assert_false(l.buffered);
    assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    out_t o = {0};
    drain(p[0], &o);
    check_lines(&o, 3);
    free(o.data);
    close(p[0]);
    close(p[1]);
}

/* RFC 3339 times to milliseconds, rounded up: known answers (offsets, fractions, the leap
 * day and second, before 1970) and what is refused (malformed, or no such date). */
static void test_time_parse_rfc3339(void **state)
{
    static const struct {
        const char *s;
        int64_t ms;
    } ok[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"2025-11-25T14:25:25.123Z", INT64_C(1764080725123)},
        {"2025-11-25t14:25:25.123z", INT64_C(1764080725123)},
        {"2025-11-25T14:25:25.1230Z", INT64_C(1764080725123)},
        {"2025-11-25T14:25:25.1231Z", INT64_C(1764080725124)},
        {"2025-11-25T14:25:25.122000001Z", INT64_C(1764080725123)},
        {"2025-11-25T14:25:25Z", INT64_C(1764080725000)},
        {"2025-11-25T15:55:25.123+01:30", INT64_C(1764080725123)},
        {"2025-11-25T09:25:25.123-05:00", INT64_C(1764080725123)},
        {"1969-12-31T23:59:59.999Z", -1},
        {"1969-12-31T23:59:59.9991Z", 0},
        {"2000-02-29T00:00:00Z", INT64_C(951782400000)},
        {"2024-02-29T12:00:00Z", INT64_C(1709208000000)},
        {"2016-12-31T23:59:60Z", INT64_C(1483228800000)},
        {"0001-01-01T00:00:00Z", INT64_C(-62135596800000)},
        {"9999-12-31T23:59:59.999Z", INT64_C(253402300799999)},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t ms = 42;
        if (!og_time_parse_rfc3339(ok[i].s, &ms) || ms != ok[i].ms)
            fail_msg("%s: got %lld", ok[i].s, (long long)ms);
    }
    static const char *const bad[] = {
        "",
        "2026-11-22",
        "2026-11-22T14:05:25",
        "2026-11-22 14:05:25Z",
        "2026-11-22T14:05:25.Z",
        "2026-11-22T14:05:25.1234567891Z",
        "2026-11-22T14:05:25ZZ",
        "2026-11-22T24:00:00Z",
        "2026-11-22T14:60:00Z",
        "2026-11-22T14:05:61Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-11-22T14:05:25+24:00",
        "2026-11-22T14:05:25+05:60",
        "2026-11-22T14:05:25+0500",
        "2026-11-22T14:05:25+05:00x",
        "+2026-11-22T14:05:25Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 0;
        if (og_time_parse_rfc3339(bad[i], &ms))
            fail_msg("%s: accepted as %lld", bad[i], (long long)ms);
    }
}

/* Bulk lines (the access log's) wait for 32 KiB or the owner's timer; any other line makes the
 * logger due at once; a flush that empties the buffer makes it not due again. A pipe with less
 * room than a chunk still takes single lines until it is full. */
static void test_bulk_lines_wait_other_lines_are_due(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    og_log_t l;
    assert_true(og_log_open(&l, OG_LOG_INFO, p[1]));
    og_log_bulk(&l, OG_LOG_INFO, "access", "\"n\":%d", 1);
    assert_true(l.len > 0);
    assert_false(og_log_due(&l));
    og_log(&l, OG_LOG_INFO, "database connected", NULL);
    assert_true(og_log_due(&l));
    assert_true(og_log_flush(&l));
    assert_false(og_log_due(&l));
    for (int i = 0; l.len < OG_LOG_FLUSH_BYTES; i++) {
        assert_false(og_log_due(&l));
        og_log_bulk(&l, OG_LOG_INFO, "access", "\"n\":%d", i);
    }
    assert_true(og_log_due(&l));
    /* A pipe of one page with a line in it: no 4 KiB chunk fits, lines still do. */
    assert_true(fcntl(p[1], F_SETPIPE_SZ, 4096) >= 4096);
    out_t o = {0};
    assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    drain(p[0], &o);
    free(o.data);
    assert_int_equal(write(p[1], "x\n", 2), 2);
    assert_false(og_log_flush(&l));
    int queued = 0;
    assert_int_equal(ioctl(p[0], FIONREAD, &queued), 0);
    assert_true(queued > 4096 - 200);
    og_log_forget(&l);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    alarm(60); /* a logger that blocks fails the run instead of hanging it */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_pipe_never_blocks),
        cmocka_unit_test(test_kept_lines_come_out_whole_in_order),
        cmocka_unit_test(test_socket_part_writes_keep_lines_whole),
        cmocka_unit_test(test_terminal_through_own_description),
        cmocka_unit_test(test_reader_gone_drops),
        cmocka_unit_test(test_close_writes_the_rest),
        cmocka_unit_test(test_time_parse_rfc3339),
        cmocka_unit_test(test_bulk_lines_wait_other_lines_are_due),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
