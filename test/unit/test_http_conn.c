/*
 * Unit tests of the HTTP connection core (src/net/http_conn.c) without sockets: a fake transport
 * records what the core writes, whether it reads, its timer and its close.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/http.h"

typedef struct fake {
    og_http_conn_t c;
    og_http_shared_t shared;
    char *out;
    size_t out_len, out_cap;
    bool reading;
    uint64_t timer_ms;
    int closes;
    bool linger;
    int releases;
    size_t backlog;
    bool async; /* handler keeps requests instead of answering */
    og_http_req_t *held[8];
    int nheld;
    int handled;
    int done;
    char last_body[256];
    char last_path[256];
} fake_t;

#define FAKE(c) ((fake_t *)(c)->data)

static void f_write(og_http_conn_t *c, char *data, size_t len)
{
    fake_t *f = FAKE(c);
    if (f->out_len + len + 1 > f->out_cap) {
        f->out_cap = (f->out_len + len + 1) * 2;
        f->out = realloc(f->out, f->out_cap);
    }
    memcpy(f->out + f->out_len, data, len);
    f->out_len += len;
    f->out[f->out_len] = '\0';
    free(data);
}
static void f_read(og_http_conn_t *c, bool on)
{
    FAKE(c)->reading = on;
}
static void f_timer(og_http_conn_t *c, uint64_t ms)
{
    FAKE(c)->timer_ms = ms;
}
static size_t f_backlog(og_http_conn_t *c)
{
    return FAKE(c)->backlog;
}
static void f_close(og_http_conn_t *c, bool linger)
{
    FAKE(c)->closes++;
    FAKE(c)->linger = linger;
}
static void f_release(og_http_conn_t *c)
{
    FAKE(c)->releases++;
}

/* As the server's transport: head and lent body apart (f_write then copies the body). */
static void f_write2(og_http_conn_t *c, char *head, size_t hlen, const char *body, size_t blen)
{
    f_write(c, head, hlen);
    char *copy = malloc(blen);
    memcpy(copy, body, blen);
    f_write(c, copy, blen);
}

static const og_http_io_t fake_io = {f_write, f_read, f_timer, f_backlog, f_close, f_release, f_write2};

static uint64_t f_now(void *ctx)
{
    return 1000;
}

static void f_handler(og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    f->handled++;
    snprintf(f->last_path, sizeof(f->last_path), "%.*s", (int)req->path_len, req->path);
    snprintf(f->last_body, sizeof(f->last_body), "%.*s", (int)req->body_len, req->body);
    if (f->async) {
        f->held[f->nheld++] = req;
        return;
    }
    char body[600];
    int n = snprintf(body, sizeof(body), "%s %.*s %zu", req->method_str, (int)req->path_len, req->path,
                     req->body_len);
    og_http_respond(req, 200, NULL, 0, "text/plain", body, (size_t)n);
}

static void f_done(const og_http_req_t *req, void *ctx)
{
    ((fake_t *)ctx)->done++;
}

static fake_t *fake_new(void)
{
    fake_t *f = calloc(1, sizeof(*f));
    f->shared.limits = (og_http_limits_t){.max_header_bytes = 16384,
                                          .max_body_bytes = 65536,
                                          .header_timeout_ms = 10000,
                                          .body_timeout_ms = 30000,
                                          .idle_timeout_ms = 60000,
                                          .max_write_backlog = 1 << 20};
    f->shared.handler = f_handler;
    f->shared.done = f_done;
    f->shared.ctx = f;
    f->shared.now_us = f_now;
    strcpy(f->shared.rid_prefix, "t-");
    og_http_conn_init(&f->c, &f->shared, &fake_io, 1);
    f->c.data = f;
    og_http_conn_start(&f->c);
    return f;
}

static void fake_free(fake_t *f)
{
    if (f->releases == 0) {
        og_http_conn_close(&f->c);
        og_http_conn_io_closed(&f->c);
    }
    free(f->out);
    free(f);
}

static void feed(fake_t *f, const char *s)
{
    og_http_conn_feed(&f->c, s, strlen(s));
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static const char post_req[] = "POST /echo?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                               "Content-Length: 11\r\n\r\n{\"a\":\"bcd\"}";

/* A plain GET is answered with status line, Content-Length and X-Request-Id; the connection stays open. */
static void test_simple_get(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(f->handled, 1);
    assert_non_null(strstr(f->out, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(f->out, "Content-Length: 14\r\n"));
    assert_non_null(strstr(f->out, "X-Request-Id: t-1\r\n"));
    assert_null(strstr(f->out, "Connection: close"));
    assert_true(strstr(f->out, "\r\n\r\nGET /healthz 0") != NULL);
    assert_int_equal(f->closes, 0);
    assert_true(f->reading);
    assert_int_equal(f->timer_ms, 60000); /* back to the idle timeout */
    assert_int_equal(f->done, 1);
    fake_free(f);
}

/* Splitting a request at any byte gives exactly the same single answer. */
static void test_every_split_point(void **state)
{
    fake_t *ref = fake_new();
    feed(ref, post_req);
    assert_int_equal(ref->handled, 1);
    assert_string_equal(ref->last_body, "{\"a\":\"bcd\"}");
    size_t len = strlen(post_req);
    for (size_t i = 1; i < len; i++) {
        fake_t *f = fake_new();
        og_http_conn_feed(&f->c, post_req, i);
        assert_int_equal(f->handled, 0);
        og_http_conn_feed(&f->c, post_req + i, len - i);
        assert_int_equal(f->handled, 1);
        assert_string_equal(f->last_path, "/echo");
        assert_string_equal(f->last_body, "{\"a\":\"bcd\"}");
        assert_int_equal(f->out_len, ref->out_len);
        assert_int_equal(f->closes, 0);
        fake_free(f);
    }
    fake_free(ref);
}

/* A request fed one byte at a time is answered once, after its last byte. */
static void test_one_byte_at_a_time(void **state)
{
    fake_t *f = fake_new();
    size_t len = strlen(post_req);
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(f->handled, 0);
        og_http_conn_feed(&f->c, post_req + i, 1);
    }
    assert_int_equal(f->handled, 1);
    assert_string_equal(f->last_body, "{\"a\":\"bcd\"}");
    assert_int_equal(count(f->out, "HTTP/1.1 200"), 1);
    fake_free(f);
}

/* Pipelined requests in one read are answered in order. */
static void test_pipelined_in_order(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n");
    assert_int_equal(f->handled, 3);
    char *a = strstr(f->out, "GET /a 0"), *b = strstr(f->out, "GET /b 0"), *c = strstr(f->out, "GET /c 0");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_true(a < b && b < c);
    assert_non_null(strstr(f->out, "X-Request-Id: t-3\r\n"));
    fake_free(f);
}

/* While a request is with the handler, later pipelined ones wait (stashed, reading off) and run after the
 * answer. */
static void test_pipelined_async_waits(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
    assert_int_equal(f->handled, 1);
    assert_false(f->reading);
    assert_int_equal(f->out_len, 0);
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "one", 3);
    assert_int_equal(f->handled, 2);
    assert_string_equal(f->last_path, "/b");
    assert_false(f->reading);
    og_http_respond(f->held[1], 200, NULL, 0, NULL, "two", 3);
    assert_true(f->reading);
    char *one = strstr(f->out, "one"), *two = strstr(f->out, "two");
    assert_true(one != NULL && two != NULL && one < two);
    fake_free(f);
}

/* Headers over the limit: 431 headers_too_large, then a lingering close. */
static void test_headers_too_large(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\nX-Big: ");
    char big[20 * 1024];
    memset(big, 'a', sizeof(big));
    og_http_conn_feed(&f->c, big, sizeof(big));
    assert_non_null(strstr(f->out, "HTTP/1.1 431 "));
    assert_non_null(strstr(f->out, "\"headers_too_large\""));
    assert_non_null(strstr(f->out, "Connection: close"));
    assert_int_equal(f->closes, 1);
    assert_true(f->linger);
    assert_int_equal(f->handled, 0);
    fake_free(f);
}

/* More than 100 header lines is also 431. */
static void test_too_many_headers(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++)
        feed(f, "A: b\r\n");
    assert_non_null(strstr(f->out, "HTTP/1.1 431 "));
    fake_free(f);
}

/* A Content-Length over the limit is refused at the headers, before any body byte. */
static void test_body_too_large_by_length(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST /x HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n");
    assert_non_null(strstr(f->out, "HTTP/1.1 413 "));
    assert_non_null(strstr(f->out, "\"payload_too_large\""));
    assert_int_equal(f->closes, 1);
    assert_true(f->linger);
    size_t before = f->out_len;
    feed(f, "more body bytes are ignored");
    assert_int_equal(f->out_len, before);
    fake_free(f);
}

/* A chunked body is reassembled; chunk extensions and trailers are accepted. */
static void test_chunked_body(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nT: "
            "v\r\n\r\n");
    assert_int_equal(f->handled, 1);
    assert_string_equal(f->last_body, "Wikipedia");
    assert_non_null(strstr(f->out, "POST /c 9"));
    fake_free(f);
}

/* Trailer fields are dropped: the request keeps its own headers and path intact, even when the
 * trailer is longer than everything before it (found by test/fuzz/fuzz_http_conn.c). */
static void test_chunked_trailers_dropped(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f,
         "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Request-Id: keep-me\r\n\r\n4\r\nWiki\r\n0\r\n"
         "X-Trailer: ");
    char big[4000];
    memset(big, 't', sizeof(big));
    og_http_conn_feed(&f->c, big, sizeof(big));
    feed(f, "\r\nX-Other: v\r\n\r\n");
    assert_int_equal(f->handled, 1);
    og_http_req_t *req = f->held[0];
    assert_int_equal(req->nheaders, 2);
    assert_int_equal(req->path_len, 2);
    assert_memory_equal(req->path, "/c", 2);
    size_t len = 0;
    const char *rid = og_http_req_header(req, "x-request-id", &len);
    assert_non_null(rid);
    assert_int_equal(len, 7);
    assert_memory_equal(rid, "keep-me", 7);
    assert_null(og_http_req_header(req, "x-other", NULL));
    og_http_respond(req, 200, NULL, 0, NULL, "ok", 2);
    assert_non_null(strstr(f->out, "HTTP/1.1 200 OK\r\n"));
    fake_free(f);
}

/* The handler never ran, the answer starts with `status_line` and the connection is closing; then
 * frees `f`. */
static void assert_refused_and_free(fake_t *f, const char *status_line)
{
    assert_int_equal(f->handled, 0);
    assert_true(strncmp(f->out, status_line, strlen(status_line)) == 0);
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* A header line without a name (": x", which llhttp 8.1 accepts) is a malformed request: 400 and
 * close, the handler never runs (found by test/fuzz/fuzz_http_conn.c). */
static void test_empty_header_name(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\nA: b\r\n: x\r\n\r\n");
    assert_refused_and_free(f, "HTTP/1.1 400 ");
}

/* Trailers count against the header limit: endless trailer fields are cut off with 431. */
static void test_chunked_trailers_limited(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n0\r\n");
    for (int i = 0; i < 2000 && f->closes == 0; i++)
        feed(f, "X-Trailer: tttt\r\n");
    assert_refused_and_free(f, "HTTP/1.1 431 ");
}

/* A chunked body growing over the limit is cut off with 413. */
static void test_chunked_too_large(void **state)
{
    fake_t *f = fake_new();
    f->shared.limits.max_body_bytes = 8;
    feed(f, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
    assert_int_equal(f->handled, 0);
    assert_non_null(strstr(f->out, "HTTP/1.1 413 "));
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* A per-request body limit: 16 bytes for /small, 1 MiB for /big, the shared limit elsewhere. */
static size_t f_body_limit(const og_http_req_t *req, void *ctx)
{
    if (req->path_len == 4 && memcmp(req->path, "/big", 4) == 0)
        return 1 << 20;
    if (req->path_len == 6 && memcmp(req->path, "/small", 6) == 0)
        return 16;
    return ((fake_t *)ctx)->shared.limits.max_body_bytes;
}

/* The body_limit hook decides per request: a body over the shared limit is accepted on a route
 * that allows it, and one under the shared limit is refused (413) on a route that allows less,
 * by Content-Length and by chunks alike. */
static void test_body_limit_per_request(void **state)
{
    fake_t *f = fake_new();
    f->shared.body_limit = f_body_limit;
    size_t n = 100000; /* over the shared 65536 */
    char *req = malloc(n + 128);
    int h = snprintf(req, 128, "POST /big HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", n);
    memset(req + h, 'x', n);
    req[h + n] = '\0';
    feed(f, req);
    free(req);
    assert_int_equal(f->handled, 1);
    assert_non_null(strstr(f->out, "POST /big 100000"));
    fake_free(f);

    f = fake_new();
    f->shared.body_limit = f_body_limit;
    feed(f, "POST /x HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
    assert_non_null(strstr(f->out, "HTTP/1.1 413 "));
    fake_free(f);

    f = fake_new();
    f->shared.body_limit = f_body_limit;
    feed(f, "POST /small HTTP/1.1\r\nContent-Length: 17\r\n\r\n");
    assert_int_equal(f->handled, 0);
    assert_non_null(strstr(f->out, "HTTP/1.1 413 "));
    fake_free(f);

    f = fake_new();
    f->shared.body_limit = f_body_limit;
    feed(f, "POST /small HTTP/1.1\r\nTransfer-Encoding: "
            "chunked\r\n\r\n9\r\n123456789\r\n9\r\n123456789\r\n0\r\n\r\n");
    assert_int_equal(f->handled, 0);
    assert_non_null(strstr(f->out, "HTTP/1.1 413 "));
    fake_free(f);
}

/* A malformed request line gets 400 bad_request and the connection is closed. */
static void test_malformed_request_line(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GARBAGE\r\n\r\n");
    assert_non_null(strstr(f->out, "HTTP/1.1 400 "));
    assert_non_null(strstr(f->out, "\"bad_request\""));
    assert_int_equal(f->closes, 1);
    assert_int_equal(f->handled, 0);
    fake_free(f);
}

/* Content-Length together with Transfer-Encoding is refused (request smuggling). */
static void test_smuggling_cl_te(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_non_null(strstr(f->out, "HTTP/1.1 400 "));
    assert_int_equal(f->handled, 0);
    fake_free(f);
}

/* Expect: 100-continue gets the interim answer before the body is sent, then the final one. */
static void test_expect_continue(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    assert_string_equal(f->out, "HTTP/1.1 100 Continue\r\n\r\n");
    feed(f, "hi");
    assert_int_equal(f->handled, 1);
    assert_non_null(strstr(f->out, "HTTP/1.1 200 OK"));
    fake_free(f);
}

/* HTTP/1.0 without keep-alive is answered with Connection: close and closed. */
static void test_http10_closes(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET /old HTTP/1.0\r\n\r\n");
    assert_non_null(strstr(f->out, "Connection: close"));
    assert_int_equal(f->closes, 1);
    assert_false(f->linger);
    fake_free(f);
}

/* HTTP/1.0 with Connection: keep-alive stays open and says so. */
static void test_http10_keep_alive(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_non_null(strstr(f->out, "Connection: keep-alive"));
    assert_int_equal(f->closes, 0);
    fake_free(f);
}

/* Connection: close from an HTTP/1.1 client closes after the answer. */
static void test_connection_close(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(f->out, "Connection: close"));
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* The header timer starts at the first byte and is not extended by more bytes; firing gives 408 and close. */
static void test_header_timeout(void **state)
{
    fake_t *f = fake_new();
    assert_int_equal(f->timer_ms, 60000);
    feed(f, "GET / HTTP/1.1\r\n");
    assert_int_equal(f->timer_ms, 10000);
    f->timer_ms = 1; /* marker: a further byte must not re-arm */
    feed(f, "X");
    assert_int_equal(f->timer_ms, 1);
    og_http_conn_timeout(&f->c);
    assert_non_null(strstr(f->out, "HTTP/1.1 408 "));
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* The body timer replaces the header timer once headers are in. */
static void test_body_timeout(void **state)
{
    fake_t *f = fake_new();
    feed(f, "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    assert_int_equal(f->timer_ms, 30000);
    og_http_conn_timeout(&f->c);
    assert_non_null(strstr(f->out, "HTTP/1.1 408 "));
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* An idle keep-alive connection is closed silently at the idle timeout. */
static void test_idle_timeout(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\n\r\n");
    size_t before = f->out_len;
    og_http_conn_timeout(&f->c);
    assert_int_equal(f->out_len, before);
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* A peer that half-closes after its request still gets the answer, then the connection closes. */
static void test_eof_with_request_in_flight(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET /slow HTTP/1.1\r\n\r\n");
    og_http_conn_eof(&f->c);
    assert_int_equal(f->closes, 0);
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "late", 4);
    assert_non_null(strstr(f->out, "late"));
    assert_non_null(strstr(f->out, "Connection: close"));
    assert_int_equal(f->closes, 1);
    fake_free(f);
}

/* If the socket goes away while a handler works, its answer is dropped and the connection released once. */
static void test_socket_gone_while_handling(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET /slow HTTP/1.1\r\n\r\n");
    og_http_conn_close(&f->c);
    og_http_conn_io_closed(&f->c);
    assert_int_equal(f->releases, 0);
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "late", 4);
    assert_null(strstr(f->out ? f->out : "", "late"));
    assert_int_equal(f->releases, 1);
    assert_int_equal(f->done, 1);
    fake_free(f);
}

/* A valid inbound X-Request-Id is echoed; an invalid one is replaced by a generated id. */
static void test_request_id(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\nX-Request-Id: abc.DEF_12-3\r\n\r\n");
    assert_non_null(strstr(f->out, "X-Request-Id: abc.DEF_12-3\r\n"));
    f->out_len = 0;
    feed(f, "GET / HTTP/1.1\r\nX-Request-Id: bad id!\r\n\r\n");
    assert_non_null(strstr(f->out, "X-Request-Id: t-1\r\n"));
    fake_free(f);
}

/* HEAD answers carry the Content-Length of the body but not the body. */
static void test_head_has_no_body(void **state)
{
    fake_t *f = fake_new();
    feed(f, "HEAD /h HTTP/1.1\r\n\r\n");
    assert_non_null(strstr(f->out, "Content-Length: 9\r\n"));
    assert_true(f->out_len >= 4 && memcmp(f->out + f->out_len - 4, "\r\n\r\n", 4) == 0);
    fake_free(f);
}

/* While the write backlog is over the limit, pipelined requests wait; draining resumes them. */
static void test_write_backpressure(void **state)
{
    fake_t *f = fake_new();
    f->shared.limits.max_write_backlog = 100;
    f->async = true;
    feed(f, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
    assert_int_equal(f->handled, 1);
    f->backlog = 1000; /* the client is not reading */
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "a", 1);
    assert_int_equal(f->handled, 1);
    assert_false(f->reading);
    f->backlog = 0;
    og_http_conn_drained(&f->c);
    assert_int_equal(f->handled, 2);
    og_http_respond(f->held[1], 200, NULL, 0, NULL, "b", 1);
    assert_true(f->reading);
    fake_free(f);
}

/* Extra response headers are written as given. */
static void test_extra_headers(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET / HTTP/1.1\r\n\r\n");
    og_http_header_t h[] = {{"Allow", 5, "GET, HEAD", 9}};
    og_http_respond(f->held[0], 405, h, 1, "application/json", "{}", 2);
    assert_non_null(strstr(f->out, "HTTP/1.1 405 Method Not Allowed\r\n"));
    assert_non_null(strstr(f->out, "Allow: GET, HEAD\r\n"));
    fake_free(f);
}

/* Header lookup is case-insensitive and the query is split from the path. */
static void test_header_lookup_and_query(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET /p/q?a=1&b=2 HTTP/1.1\r\nContent-TYPE: text/x\r\n\r\n");
    og_http_req_t *r = f->held[0];
    size_t len;
    const char *v = og_http_req_header(r, "content-type", &len);
    assert_non_null(v);
    assert_int_equal(len, 6);
    assert_memory_equal(v, "text/x", 6);
    assert_int_equal(r->path_len, 4);
    assert_memory_equal(r->path, "/p/q", 4);
    assert_int_equal(r->query_len, 7);
    assert_memory_equal(r->query, "a=1&b=2", 7);
    og_http_respond(r, 204, NULL, 0, NULL, NULL, 0);
    fake_free(f);
}

/* A handler that drops the request's input keeps what the answer needs: the header bytes,
 * header array and body are freed (the sanitized builds would catch a later read of them) and
 * read as empty; the answer (its request id and extra headers included) goes out, the
 * access-log callback runs, and the next request on the connection is parsed as usual. */
static void test_drop_input(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, post_req);
    og_http_req_t *r = f->held[0];
    assert_int_equal(r->body_len, 11);
    assert_true(og_http_req_add_header(r, "RateLimit-Limit", "5"));
    og_http_req_drop_input(r);
    assert_null(og_http_req_header(r, "content-type", NULL));
    assert_int_equal(r->nheaders, 0);
    assert_int_equal(r->path_len, 0);
    assert_null(r->query);
    assert_null(r->body);
    assert_int_equal(r->body_len, 0);
    assert_string_equal(r->method_str, "POST");
    og_http_respond(r, 200, NULL, 0, "text/plain", "kept", 4);
    assert_non_null(strstr(f->out, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(f->out, "X-Request-Id: t-1\r\n"));
    assert_non_null(strstr(f->out, "RateLimit-Limit: 5\r\n"));
    assert_non_null(strstr(f->out, "\r\n\r\nkept"));
    assert_int_equal(f->done, 1);
    feed(f, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(f->handled, 2);
    assert_string_equal(f->last_path, "/next");
    og_http_respond(f->held[1], 204, NULL, 0, NULL, NULL, 0);
    assert_int_equal(f->done, 2);
    fake_free(f);
}

/* Asserts that f's connection is in `st` and that the shared counts hold it there and nowhere else. */
static void assert_in_state(const fake_t *f, og_http_conn_state_t st)
{
    assert_int_equal(f->c.state, st);
    for (int i = 0; i < OG_CONN_NSTATES; i++)
        assert_int_equal(f->shared.conns[i], i == (int)st ? 1 : 0);
}

/* Asserts that no connection is counted in any state (the one there was is released). */
static void assert_none_counted(const fake_t *f)
{
    for (int i = 0; i < OG_CONN_NSTATES; i++)
        assert_int_equal(f->shared.conns[i], 0);
}

/* The per-state counts follow a connection through a request's life, one counted move at a time,
 * and it leaves them when released. */
static void test_state_counts_through_a_request(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    assert_in_state(f, OG_CONN_IDLE);
    assert_int_equal(f->shared.conn_moves, 0);
    feed(f, "POST /s HTTP/1.1\r\nContent-Length: 5\r\n");
    assert_in_state(f, OG_CONN_HEADERS);
    feed(f, "\r\nab");
    assert_in_state(f, OG_CONN_BODY);
    feed(f, "cde");
    assert_in_state(f, OG_CONN_HANDLING);
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "ok", 2);
    assert_in_state(f, OG_CONN_IDLE);
    assert_int_equal(f->shared.conn_moves, 4);
    og_http_conn_close(&f->c);
    assert_in_state(f, OG_CONN_CLOSING);
    og_http_conn_io_closed(&f->c);
    assert_int_equal(f->c.state, OG_CONN_CLOSED);
    assert_int_equal(f->releases, 1);
    assert_none_counted(f);
    assert_int_equal(f->shared.conn_moves, 6);
    fake_free(f);
}

/* A connection whose socket goes away while its request is with the handler is counted CLOSED until
 * the answer lets the core release it. */
static void test_state_counts_closed_while_handling(void **state)
{
    fake_t *f = fake_new();
    f->async = true;
    feed(f, "GET /slow HTTP/1.1\r\n\r\n");
    assert_in_state(f, OG_CONN_HANDLING);
    og_http_conn_io_closed(&f->c);
    assert_in_state(f, OG_CONN_CLOSED);
    assert_int_equal(f->releases, 0);
    og_http_respond(f->held[0], 200, NULL, 0, NULL, "late", 4);
    assert_int_equal(f->releases, 1);
    assert_none_counted(f);
    assert_int_equal(f->shared.conn_moves, 4); /* idle, headers, body, handling, closed */
    fake_free(f);
}

/* Pipelined requests answered within one read each make the four moves of a request. */
static void test_state_counts_pipelined(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n");
    assert_int_equal(f->handled, 3);
    assert_in_state(f, OG_CONN_IDLE);
    assert_int_equal(f->shared.conn_moves, 12);
    fake_free(f);
}

/* An error the core answers itself (a header timeout here) moves the connection to CLOSING. */
static void test_state_counts_error_answer(void **state)
{
    fake_t *f = fake_new();
    feed(f, "GET / HTTP/1.1\r\n");
    assert_in_state(f, OG_CONN_HEADERS);
    og_http_conn_timeout(&f->c);
    assert_non_null(strstr(f->out, "HTTP/1.1 408 "));
    assert_in_state(f, OG_CONN_CLOSING);
    assert_int_equal(f->shared.conn_moves, 2);
    fake_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_get),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_one_byte_at_a_time),
        cmocka_unit_test(test_pipelined_in_order),
        cmocka_unit_test(test_pipelined_async_waits),
        cmocka_unit_test(test_headers_too_large),
        cmocka_unit_test(test_too_many_headers),
        cmocka_unit_test(test_body_too_large_by_length),
        cmocka_unit_test(test_chunked_body),
        cmocka_unit_test(test_chunked_trailers_dropped),
        cmocka_unit_test(test_chunked_trailers_limited),
        cmocka_unit_test(test_empty_header_name),
        cmocka_unit_test(test_chunked_too_large),
        cmocka_unit_test(test_body_limit_per_request),
        cmocka_unit_test(test_malformed_request_line),
        cmocka_unit_test(test_smuggling_cl_te),
        cmocka_unit_test(test_expect_continue),
        cmocka_unit_test(test_http10_closes),
        cmocka_unit_test(test_http10_keep_alive),
        cmocka_unit_test(test_connection_close),
        cmocka_unit_test(test_header_timeout),
        cmocka_unit_test(test_body_timeout),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_eof_with_request_in_flight),
        cmocka_unit_test(test_socket_gone_while_handling),
        cmocka_unit_test(test_request_id),
        cmocka_unit_test(test_drop_input),
        cmocka_unit_test(test_head_has_no_body),
        cmocka_unit_test(test_write_backpressure),
        cmocka_unit_test(test_extra_headers),
        cmocka_unit_test(test_header_lookup_and_query),
        cmocka_unit_test(test_state_counts_through_a_request),
        cmocka_unit_test(test_state_counts_closed_while_handling),
        cmocka_unit_test(test_state_counts_pipelined),
        cmocka_unit_test(test_state_counts_error_answer),
    };
    return cmocka_run_group_tests_name("http_conn", tests, NULL, NULL);
}
