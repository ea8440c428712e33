/*
 * Unit tests of the outbound HTTP client (src/net/http_client.c) over real loopback sockets: each
 * test runs one uv loop holding both the client and a tiny HTTP/1.1 server (uv_tcp on
 * 127.0.0.1:0) that answers canned responses, counts connections and records what it got.
 * Every test ends by closing both and asserting uv_loop_close() == 0: no handle leaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "omnigate/http_client.h"

/* ---- the loopback server ------------------------------------------------------------------ */

typedef enum {
    SRV_RESPOND,       /* answer every request with srv->response (keep-alive) */
    SRV_ECHO_PATH,     /* answer 200 with the request path as the body */
    SRV_SILENT,        /* read requests, never answer */
    SRV_CLOSE,         /* close every connection as soon as it is accepted */
    SRV_RESPOND_CLOSE, /* answer with srv->response, then close the connection */
} srv_mode_t;

typedef struct server server_t;

typedef struct sconn {
    uv_tcp_t tcp;
    server_t *srv;
    char *buf;
    size_t len, cap;
    struct sconn *next, *prev;
    bool closing;
} sconn_t;

struct server {
    uv_tcp_t listener;
    int port;
    srv_mode_t mode;
    const char *response; /* raw bytes, NUL-terminated */
    size_t response_len;  /* 0: strlen(response) */
    int accepts;
    int requests; /* complete requests received */
    char last_request[8192];
    size_t last_request_len;   /* bytes kept in last_request */
    size_t last_request_total; /* its full size */
    sconn_t *conns;
};

typedef struct wreq {
    uv_write_t w;
    char *data;
} wreq_t;

static void sconn_closed(uv_handle_t *h)
{
    sconn_t *c = h->data;
    free(c->buf);
    free(c);
}

static void sconn_close(sconn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, sconn_closed);
}

static void written(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    free(wr->data);
    free(wr);
}

static void sconn_write(sconn_t *c, const char *data, size_t len)
{
    wreq_t *wr = malloc(sizeof(*wr));
    wr->data = malloc(len);
    memcpy(wr->data, data, len);
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)len);
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, written) != 0) {
        free(wr->data);
        free(wr);
    }
}

/* Handles every complete request in c->buf. */
static void sconn_process(sconn_t *c)
{
    server_t *s = c->srv;
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (end == NULL)
            return;
        size_t head = (size_t)(end - c->buf) + 4;
        size_t body = 0;
        for (char *p = c->buf; p < end; p++) {
            if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "Content-Length:", 15) == 0)
                body = strtoul(p + 15, NULL, 10);
        }
        if (c->len < head + body)
            return;
        size_t n = head + body;
        s->requests++;
        s->last_request_total = n;
        s->last_request_len = n < sizeof(s->last_request) - 1 ? n : sizeof(s->last_request) - 1;
        memcpy(s->last_request, c->buf, s->last_request_len);
        s->last_request[s->last_request_len] = '\0';
        if (s->mode == SRV_RESPOND || s->mode == SRV_RESPOND_CLOSE) {
            sconn_write(c, s->response, s->response_len ? s->response_len : strlen(s->response));
        } else if (s->mode == SRV_ECHO_PATH && strncmp(c->buf, "GET /hang", 9) != 0) {
            char *sp1 = memchr(c->buf, ' ', head);
            char *sp2 = sp1 ? memchr(sp1 + 1, ' ', head - (size_t)(sp1 + 1 - c->buf)) : NULL;
            int plen = sp1 && sp2 ? (int)(sp2 - sp1 - 1) : 0;
            char out[512];
            int m = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%.*s", plen,
                             plen, sp1 ? sp1 + 1 : "");
            sconn_write(c, out, (size_t)m);
        }
        memmove(c->buf, c->buf + n, c->len - n);
        c->len -= n;
        if (s->mode == SRV_RESPOND_CLOSE) {
            sconn_close(c);
            return;
        }
    }
}

static void sconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    sconn_t *c = h->data;
    if (c->cap - c->len < 65536) {
        c->cap = c->cap * 2 + 65536;
        c->buf = realloc(c->buf, c->cap);
    }
    *b = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void sconn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    sconn_t *c = st->data;
    if (n < 0) {
        sconn_close(c);
        return;
    }
    c->len += (size_t)n;
    sconn_process(c);
}

static void on_accept(uv_stream_t *l, int status)
{
    server_t *s = l->data;
    assert_int_equal(status, 0);
    sconn_t *c = calloc(1, sizeof(*c));
    c->srv = s;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    s->accepts++;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    if (s->mode == SRV_CLOSE) {
        sconn_close(c);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, sconn_alloc, sconn_read);
}

static void server_start(server_t *s, uv_loop_t *loop, srv_mode_t mode, const char *response)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->response = response;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 0, &addr);
    assert_int_equal(uv_tcp_init(loop, &s->listener), 0);
    s->listener.data = s;
    assert_int_equal(uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 256, on_accept), 0);
    struct sockaddr_in got;
    int len = sizeof(got);
    assert_int_equal(uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len), 0);
    s->port = ntohs(got.sin_port);
}

static void server_stop(server_t *s)
{
    while (s->conns)
        sconn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, NULL);
}

/* ---- the test environment ----------------------------------------------------------------- */

typedef struct env {
    uv_loop_t loop;
    og_log_t log;
    server_t srv;
    og_hc_t *hc;
    uv_timer_t tick; /* keeps uv_run(ONCE) returning while we wait */
    int dones;
    int closed_calls;
} env_t;

typedef struct treq {
    og_hc_req_t r;
    env_t *env;
    int done_calls;
    int order; /* completion order, 1-based */
    void (*then)(struct treq *t);
} treq_t;

static void tick(uv_timer_t *t) {}

static env_t *env_new(srv_mode_t mode, const char *response)
{
    env_t *e = calloc(1, sizeof(*e));
    assert_int_equal(uv_loop_init(&e->loop), 0);
    og_log_init(&e->log, OG_LOG_ERROR, false);
    server_start(&e->srv, &e->loop, mode, response);
    e->hc = og_hc_new(&e->loop, &e->log);
    assert_non_null(e->hc);
    uv_timer_init(&e->loop, &e->tick);
    uv_timer_start(&e->tick, tick, 20, 20);
    return e;
}

static void hc_closed(void *arg)
{
    env_t *e = arg;
    e->closed_calls++;
}

/* Closes client, server and timer, runs the loop dry, and proves nothing leaked. */
static void env_free(env_t *e)
{
    if (e->hc != NULL)
        og_hc_close(e->hc, hc_closed, e);
    server_stop(&e->srv);
    uv_close((uv_handle_t *)&e->tick, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    if (e->hc != NULL)
        assert_int_equal(e->closed_calls, 1);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    free(e);
}

static void run_until(env_t *e, int *counter, int want, uint64_t max_ms)
{
    uv_update_time(&e->loop);
    uint64_t deadline = uv_now(&e->loop) + max_ms;
    while (*counter < want && uv_now(&e->loop) < deadline)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_int_equal(*counter, want);
}

static void treq_done(og_hc_req_t *r)
{
    treq_t *t = (treq_t *)r;
    t->done_calls++;
    t->order = ++t->env->dones;
    if (t->then)
        t->then(t);
}

static void treq_init(treq_t *t, env_t *e, const char *path)
{
    memset(t, 0, sizeof(*t));
    t->env = e;
    assert_true(asprintf(&t->r.url, "http://127.0.0.1:%d%s", e->srv.port, path) > 0);
    t->r.method = "GET";
    t->r.timeout_ms = 5000;
    t->r.done = treq_done;
}

static const char ok_hello[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
    "{\"hello\":\"world\"}";

/* ---- tests -------------------------------------------------------------------------------- */

/* A 200 with a body arrives with its status, exact body and a plausible latency; done is never
 * called from inside og_hc_start, and a second start of a req in flight is refused. */
static void ok_with_body(void **state)
{
    env_t *e = env_new(SRV_RESPOND, ok_hello);
    treq_t t;
    treq_init(&t, e, "/x");
    assert_int_equal(og_hc_start(e->hc, &t.r), 0);
    assert_int_equal(t.done_calls, 0);
    assert_int_equal(og_hc_start(e->hc, &t.r), -1); /* already in flight: refused */
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.done_calls, 1);
    assert_int_equal(t.r.result, OG_HC_OK);
    assert_int_equal(t.r.http_status, 200);
    assert_int_equal(t.r.resp_len, 17);
    assert_string_equal(t.r.resp, "{\"hello\":\"world\"}");
    assert_string_equal(t.r.errbuf, "");
    assert_true(t.r.latency_us > 0);
    assert_true(t.r.latency_us < 2000000);
    assert_int_equal(e->srv.accepts, 1);
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* The request on the wire: method, path, headers, Basic auth, exact body, and no
 * "Expect: 100-continue" (which libcurl adds to large bodies, costing a round trip or a
 * 1 s wait on servers that ignore it). */
static void request_bytes_on_the_wire(void **state)
{
    env_t *e = env_new(SRV_RESPOND, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    treq_t t;
    treq_init(&t, e, "/2010-04-01/Accounts/AC1/Messages.json");
    t.r.method = "POST";
    const size_t len = 2 * 1024 * 1024;
    char *body = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)('a' + i % 26);
    memcpy(body, "To=%2B1&", 8);
    body[len] = '\0';
    t.r.body = body;
    t.r.body_len = len;
    t.r.user = strdup("AC1");
    t.r.password = strdup("s3cret");
    assert_true(og_hc_req_add_header(&t.r, "X-Test: %d", 42));
    assert_true(og_hc_req_add_header(&t.r, "Content-Type: application/x-www-form-urlencoded"));
    og_hc_start(e->hc, &t.r);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_OK);
    assert_int_equal(t.r.http_status, 201);
    assert_null(t.r.resp);
    assert_int_equal(t.r.resp_len, 0);
    assert_true(t.r.latency_us < 900000); /* no 1 s Expect wait */

    const char *req = e->srv.last_request;
    assert_int_equal(strncmp(req, "POST /2010-04-01/Accounts/AC1/Messages.json HTTP/1.1\r\n", 54), 0);
    assert_non_null(strstr(req, "\r\nAuthorization: Basic QUMxOnMzY3JldA==\r\n")); /* AC1:s3cret */
    assert_non_null(strstr(req, "\r\nX-Test: 42\r\n"));
    assert_non_null(strstr(req, "\r\nContent-Type: application/x-www-form-urlencoded\r\n"));
    assert_non_null(strstr(req, "\r\nContent-Length: 2097152\r\n"));
    assert_non_null(strstr(req, "\r\nUser-Agent: omnigate/"));
    const char *sep = strstr(req, "\r\n\r\n");
    assert_non_null(sep);
    assert_null(memmem(req, (size_t)(sep - req), "Expect:", 7));
    size_t head = (size_t)(sep + 4 - req);
    assert_int_equal(e->srv.last_request_total - head, len);
    assert_memory_equal(sep + 4, body, e->srv.last_request_len - head);
    og_hc_req_clear(&t.r);
    env_free(e);
}

static void start_second(treq_t *t)
{
    treq_t *second = (treq_t *)t->r.arg;
    assert_int_equal(og_hc_start(t->env->hc, &second->r), 0);
}

/* Two sequential requests to one server travel on one TCP connection (one accept), the
 * second started from the first's done callback. */
static void connection_reuse(void **state)
{
    env_t *e = env_new(SRV_RESPOND, ok_hello);
    treq_t a, b;
    treq_init(&a, e, "/a");
    treq_init(&b, e, "/b");
    a.then = start_second;
    a.r.arg = &b;
    og_hc_start(e->hc, &a.r);
    run_until(e, &e->dones, 2, 5000);
    assert_int_equal(a.r.result, OG_HC_OK);
    assert_int_equal(b.r.result, OG_HC_OK);
    assert_int_equal(b.r.http_status, 200);
    assert_string_equal(b.r.resp, "{\"hello\":\"world\"}");
    assert_int_equal(e->srv.requests, 2);
    assert_int_equal(e->srv.accepts, 1);

    /* A third one a few loop turns later still finds the cached connection. */
    treq_t c;
    treq_init(&c, e, "/c");
    og_hc_start(e->hc, &c.r);
    run_until(e, &e->dones, 3, 5000);
    assert_int_equal(c.r.result, OG_HC_OK);
    assert_int_equal(e->srv.accepts, 1);
    og_hc_req_clear(&a.r);
    og_hc_req_clear(&b.r);
    og_hc_req_clear(&c.r);
    env_free(e);
}

/* A server that answers "Connection: close" and closes: curl closes its socket itself and the
 * next request opens a new connection, most likely on the same descriptor number, while the
 * old poll handle is still closing. Both requests succeed. */
static void connection_close_then_new_connection(void **state)
{
    env_t *e =
        env_new(SRV_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
    treq_t a, b;
    treq_init(&a, e, "/a");
    treq_init(&b, e, "/b");
    a.then = start_second;
    a.r.arg = &b;
    og_hc_start(e->hc, &a.r);
    run_until(e, &e->dones, 2, 5000);
    assert_int_equal(a.r.result, OG_HC_OK);
    assert_int_equal(b.r.result, OG_HC_OK);
    assert_string_equal(b.r.resp, "ok");
    assert_int_equal(e->srv.accepts, 2);
    og_hc_req_clear(&a.r);
    og_hc_req_clear(&b.r);
    env_free(e);
}

static void start_later(uv_timer_t *timer)
{
    treq_t *t = timer->data;
    assert_int_equal(og_hc_start(t->env->hc, &t->r), 0);
}

/* A kept-alive connection that the server closes while it sits in curl's cache: the next
 * request finds it dead, curl closes that socket and opens a new one within the same call,
 * normally on the same descriptor number while the old poll handle is still closing. The
 * request succeeds on a second connection. */
static void dead_cached_connection_is_replaced(void **state)
{
    env_t *e = env_new(SRV_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    treq_t a, b;
    treq_init(&a, e, "/a");
    treq_init(&b, e, "/b");
    og_hc_start(e->hc, &a.r);
    run_until(e, &a.done_calls, 1, 5000);
    assert_int_equal(a.r.result, OG_HC_OK);
    uv_timer_t later;
    uv_timer_init(&e->loop, &later);
    later.data = &b;
    uv_timer_start(&later, start_later, 100, 0); /* the server's FIN has arrived by then */
    run_until(e, &b.done_calls, 1, 5000);
    assert_int_equal(b.r.result, OG_HC_OK);
    assert_int_equal(b.r.http_status, 200);
    assert_string_equal(b.r.resp, "ok");
    assert_int_equal(e->srv.accepts, 2);
    uv_close((uv_handle_t *)&later, NULL);
    og_hc_req_clear(&a.r);
    og_hc_req_clear(&b.r);
    env_free(e);
}

typedef struct chain {
    treq_t t;
    int left; /* requests still to start after the current one */
    int ok;
} chain_t;

/* Shared header lines (og_hc_headers_add) go out after a request's own, with or without own
 * lines, and again when the same request is started a second time; a body over 1 KiB still
 * goes without "Expect: 100-continue" (the shared list carries "Expect:"). The list is lent,
 * not taken: it reads the same afterwards, and freeing the requests and then the list frees
 * everything once (the sanitized builds check). */
static void shared_headers(void **state)
{
    env_t *e = env_new(SRV_RESPOND, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    og_hc_headers_t *h = NULL;
    assert_true(og_hc_headers_add(&h, "Content-Type: application/json"));
    assert_true(og_hc_headers_add(&h, "X-Api-Key: %s", "k-123"));
    char body[2048];
    memset(body, 'a', sizeof(body));
    treq_t a, b;
    treq_init(&a, e, "/own");
    treq_init(&b, e, "/none");
    for (treq_t *t = &a; t != NULL; t = t == &a ? &b : NULL) {
        t->r.method = "POST";
        t->r.body = malloc(sizeof(body));
        memcpy(t->r.body, body, sizeof(body));
        t->r.body_len = sizeof(body);
        t->r.shared_headers = h;
    }
    assert_true(og_hc_req_add_header(&a.r, "Authorization: Bearer %s", "tok"));
    treq_t *order[] = {&a, &b, &a};
    for (int i = 0; i < 3; i++) {
        treq_t *t = order[i];
        assert_int_equal(og_hc_start(e->hc, &t->r), 0);
        run_until(e, &e->dones, i + 1, 5000);
        assert_int_equal(t->r.http_status, 201);
        const char *req = e->srv.last_request;
        const char *sep = strstr(req, "\r\n\r\n");
        assert_non_null(sep);
        assert_non_null(strstr(req, "\r\nContent-Type: application/json\r\n"));
        assert_non_null(strstr(req, "\r\nX-Api-Key: k-123\r\n"));
        assert_true((strstr(req, "\r\nAuthorization: Bearer tok\r\n") != NULL) == (t == &a));
        assert_null(memmem(req, (size_t)(sep - req), "Expect:", 7));
    }
    assert_string_equal(og_hc_req_header(&a.r, 0), "Authorization: Bearer tok");
    assert_null(og_hc_req_header(&a.r, 1));
    assert_string_equal(og_hc_headers_line(h, 0), "Content-Type: application/json");
    assert_string_equal(og_hc_headers_line(h, 1), "X-Api-Key: k-123");
    assert_null(og_hc_headers_line(h, 2));
    og_hc_req_clear(&a.r);
    og_hc_req_clear(&b.r);
    og_hc_headers_free(h);
    env_free(e);
}

static void chain_next(treq_t *t)
{
    chain_t *c = (chain_t *)t;
    if (t->r.result == OG_HC_OK && t->r.http_status == 200 && t->r.resp != NULL &&
        strcmp(t->r.resp, "ok") == 0)
        c->ok++;
    if (c->left-- > 0) {
        free(t->r.resp);
        t->r.resp = NULL;
        assert_int_equal(og_hc_start(t->env->hc, &t->r), 0);
    }
}

/* Descriptor churn: 20 chains of 5 sequential requests against a server that closes every
 * connection ("Connection: close"). Sockets close and open in the same loop turns, so new
 * curl sockets keep landing on descriptor numbers whose poll handles are still closing;
 * a poll handle retired after its fd was reused would unregister a live socket and stall
 * a chain. All 100 requests succeed, on 100 connections. */
static void descriptor_churn(void **state)
{
    env_t *e =
        env_new(SRV_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
    chain_t c[20];
    for (int i = 0; i < 20; i++) {
        treq_init(&c[i].t, e, "/churn");
        c[i].t.then = chain_next;
        c[i].left = 4;
        c[i].ok = 0;
        og_hc_start(e->hc, &c[i].t.r);
    }
    run_until(e, &e->dones, 100, 10000);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(c[i].ok, 5);
        assert_int_equal(c[i].t.done_calls, 5);
        og_hc_req_clear(&c[i].t.r);
    }
    assert_int_equal(e->srv.accepts, 100);
    env_free(e);
}

/* A server that accepts and reads but never answers: OG_HC_TIMEOUT after timeout_ms, not
 * before and not much later, with no status. */
static void silent_server_times_out(void **state)
{
    env_t *e = env_new(SRV_SILENT, NULL);
    treq_t t;
    treq_init(&t, e, "/slow");
    t.r.timeout_ms = 300;
    og_hc_start(e->hc, &t.r);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_TIMEOUT);
    assert_int_equal(t.r.http_status, 0);
    assert_null(t.r.resp);
    assert_true(t.r.latency_us >= 300000);
    /* Fired by its own timeout, well before run_until gives up (5 s): a loaded machine may run
     * the timer late, so no tighter upper bound. */
    assert_true(t.r.latency_us < 4000000);
    assert_int_equal(e->srv.requests, 1);
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* A server that closes the connection at once: OG_HC_UNREACHABLE. */
static void closed_connection_is_unreachable(void **state)
{
    env_t *e = env_new(SRV_CLOSE, NULL);
    treq_t t;
    treq_init(&t, e, "/x");
    og_hc_start(e->hc, &t.r);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_UNREACHABLE);
    assert_int_equal(t.r.http_status, 0);
    assert_true(t.r.errbuf[0] != '\0');
    assert_int_equal(e->srv.accepts, 1);
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* A port with nothing listening (a bound, non-listening socket holds it): connection refused,
 * OG_HC_UNREACHABLE, quickly. */
static void refused_port_is_unreachable(void **state)
{
    env_t *e = env_new(SRV_RESPOND, ok_hello);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    treq_t t;
    treq_init(&t, e, "/");
    free(t.r.url);
    assert_true(asprintf(&t.r.url, "http://127.0.0.1:%d/", ntohs(a.sin_port)) > 0);
    og_hc_start(e->hc, &t.r);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_UNREACHABLE);
    assert_int_equal(t.r.http_status, 0);
    assert_non_null(strstr(t.r.errbuf, "onnect"));
    assert_true(t.r.latency_us < 1000000);
    close(fd);
    og_hc_req_clear(&t.r);
    env_free(e);
}

static char *big_response(size_t body, bool chunked)
{
    char head[128];
    int h = chunked ? snprintf(head, sizeof(head),
                               "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n", body)
                    : snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", body);
    char *r = malloc((size_t)h + body + 16);
    memcpy(r, head, (size_t)h);
    memset(r + h, 'x', body);
    size_t n = (size_t)h + body;
    if (chunked) {
        memcpy(r + n, "\r\n0\r\n\r\n", 7);
        n += 7;
    }
    r[n] = '\0';
    return r;
}

/* Bodies over the 256 KiB cap end in OG_HC_TOO_LARGE (announced by Content-Length or not),
 * with the status kept and no partial body; a body of exactly the cap is fine. */
static void response_size_cap(void **state)
{
    struct {
        size_t body;
        bool chunked;
        og_hc_result_t want;
    } cases[] = {
        {OG_HC_MAX_RESPONSE + 1, false, OG_HC_TOO_LARGE},
        {300 * 1024, true, OG_HC_TOO_LARGE},
        {OG_HC_MAX_RESPONSE, false, OG_HC_OK},
        {OG_HC_MAX_RESPONSE, true, OG_HC_OK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *resp = big_response(cases[i].body, cases[i].chunked);
        env_t *e = env_new(SRV_RESPOND, resp);
        treq_t t;
        treq_init(&t, e, "/big");
        og_hc_start(e->hc, &t.r);
        run_until(e, &e->dones, 1, 5000);
        assert_int_equal(t.r.result, cases[i].want);
        assert_int_equal(t.r.http_status, 200);
        if (cases[i].want == OG_HC_OK) {
            assert_int_equal(t.r.resp_len, cases[i].body);
            assert_int_equal(strlen(t.r.resp), cases[i].body);
        } else {
            assert_null(t.r.resp);
            assert_int_equal(t.r.resp_len, 0);
            assert_non_null(strstr(t.r.errbuf, "over 262144 bytes"));
        }
        og_hc_req_clear(&t.r);
        env_free(e);
        free(resp);
    }
}

/* 50 requests at once all complete, each with its own answer. */
static void fifty_concurrent(void **state)
{
    env_t *e = env_new(SRV_ECHO_PATH, NULL);
    treq_t t[50];
    for (int i = 0; i < 50; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/r/%d", i);
        treq_init(&t[i], e, path);
        assert_int_equal(og_hc_start(e->hc, &t[i].r), 0);
    }
    assert_int_equal(e->dones, 0);
    run_until(e, &e->dones, 50, 10000);
    for (int i = 0; i < 50; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/r/%d", i);
        assert_int_equal(t[i].done_calls, 1);
        assert_int_equal(t[i].r.result, OG_HC_OK);
        assert_int_equal(t[i].r.http_status, 200);
        assert_string_equal(t[i].r.resp, path);
        og_hc_req_clear(&t[i].r);
    }
    assert_int_equal(e->srv.requests, 50);
    assert_true(e->srv.accepts >= 1 && e->srv.accepts <= 50);
    env_free(e);
}

static void start_while_closing(treq_t *t)
{
    treq_t *late = (treq_t *)t->r.arg;
    if (late != NULL)
        assert_int_equal(og_hc_start(t->env->hc, &late->r), 0);
}

/* og_hc_close with requests in flight: every done runs exactly once, later, with
 * OG_HC_CANCELLED (a request started from one of those callbacks too), closed runs once, and
 * the loop closes cleanly. */
static void close_with_requests_in_flight(void **state)
{
    env_t *e = env_new(SRV_SILENT, NULL);
    treq_t t[5], late;
    for (int i = 0; i < 5; i++) {
        treq_init(&t[i], e, "/never");
        og_hc_start(e->hc, &t[i].r);
    }
    treq_init(&late, e, "/late");
    t[0].then = start_while_closing;
    t[0].r.arg = &late;
    run_until(e, &e->srv.requests, 5, 5000);
    assert_int_equal(e->dones, 0);

    og_hc_close(e->hc, hc_closed, e);
    assert_int_equal(e->dones, 0); /* never from inside og_hc_close */
    server_stop(&e->srv);
    uv_close((uv_handle_t *)&e->tick, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(t[i].done_calls, 1);
        assert_int_equal(t[i].r.result, OG_HC_CANCELLED);
        og_hc_req_clear(&t[i].r);
    }
    assert_int_equal(late.done_calls, 1);
    assert_int_equal(late.r.result, OG_HC_CANCELLED);
    og_hc_req_clear(&late.r);
    assert_int_equal(e->dones, 6);
    assert_int_equal(e->closed_calls, 1);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    free(e);
}

static void close_from_done(treq_t *t)
{
    treq_t *late = (treq_t *)t->r.arg;
    og_hc_close(t->env->hc, hc_closed, t->env);
    assert_int_equal(og_hc_start(t->env->hc, &late->r), 0);
    assert_int_equal(late->done_calls, 0);
}

/* Closing the client from inside a done callback is safe: the request still in flight and one
 * started right after the close both complete once with OG_HC_CANCELLED, closed runs once,
 * nothing leaks. */
static void close_from_inside_done(void **state)
{
    env_t *e = env_new(SRV_ECHO_PATH, NULL);
    treq_t a, hang, late;
    treq_init(&hang, e, "/hang");
    treq_init(&a, e, "/a");
    treq_init(&late, e, "/late");
    a.then = close_from_done;
    a.r.arg = &late;
    og_hc_start(e->hc, &hang.r);
    og_hc_start(e->hc, &a.r);
    run_until(e, &a.done_calls, 1, 5000);
    assert_int_equal(a.r.result, OG_HC_OK);
    assert_string_equal(a.r.resp, "/a");
    server_stop(&e->srv);
    uv_close((uv_handle_t *)&e->tick, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(a.done_calls, 1);
    assert_int_equal(hang.done_calls, 1);
    assert_int_equal(hang.r.result, OG_HC_CANCELLED);
    assert_int_equal(late.done_calls, 1);
    assert_int_equal(late.r.result, OG_HC_CANCELLED);
    assert_int_equal(e->closed_calls, 1);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    og_hc_req_clear(&a.r);
    og_hc_req_clear(&hang.r);
    og_hc_req_clear(&late.r);
    free(e);
}

/* og_hc_complete_later reports a failure from the loop, not from inside the call. */
static void complete_later_is_async(void **state)
{
    env_t *e = env_new(SRV_RESPOND, ok_hello);
    treq_t t;
    treq_init(&t, e, "/");
    assert_int_equal(og_hc_complete_later(e->hc, &t.r, OG_HC_ERROR, "nothing to send"), 0);
    assert_int_equal(t.done_calls, 0);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.done_calls, 1);
    assert_int_equal(t.r.result, OG_HC_ERROR);
    assert_string_equal(t.r.errbuf, "nothing to send");
    assert_int_equal(t.r.http_status, 0);
    assert_int_equal(e->srv.accepts, 0);
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* A malformed URL or a non-HTTP scheme fails with OG_HC_ERROR, asynchronously. */
static void bad_url_is_an_error(void **state)
{
    env_t *e = env_new(SRV_RESPOND, ok_hello);
    treq_t t;
    treq_init(&t, e, "/");
    free(t.r.url);
    t.r.url = strdup("file:///etc/passwd");
    og_hc_start(e->hc, &t.r);
    assert_int_equal(t.done_calls, 0);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_ERROR);
    assert_null(t.r.resp);
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* A 500 and a 404 are OG_HC_OK at this layer: the status and body are the adapter's to judge. */
static void error_statuses_are_answers(void **state)
{
    env_t *e = env_new(SRV_RESPOND, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy");
    treq_t t;
    treq_init(&t, e, "/");
    og_hc_start(e->hc, &t.r);
    run_until(e, &e->dones, 1, 5000);
    assert_int_equal(t.r.result, OG_HC_OK);
    assert_int_equal(t.r.http_status, 503);
    assert_string_equal(t.r.resp, "busy");
    og_hc_req_clear(&t.r);
    env_free(e);
}

/* og_hc_req_clear frees everything and zeroes the req, so it can be filled again. */
static void req_clear_zeroes(void **state)
{
    og_hc_req_t r = {0};
    r.url = strdup("http://127.0.0.1/");
    r.body = strdup("secret body");
    r.body_len = 11;
    r.user = strdup("u");
    r.password = strdup("p");
    for (int i = 0; i < OG_HC_MAX_HEADERS; i++)
        assert_true(og_hc_req_add_header(&r, "H%d: v", i));
    assert_false(og_hc_req_add_header(&r, "One: too many"));
    assert_string_equal(og_hc_req_header(&r, 3), "H3: v");
    assert_null(og_hc_req_header(&r, OG_HC_MAX_HEADERS));
    og_hc_req_clear(&r);
    og_hc_req_t zero;
    memset(&zero, 0, sizeof(zero));
    assert_memory_equal(&r, &zero, sizeof(r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ok_with_body),
        cmocka_unit_test(request_bytes_on_the_wire),
        cmocka_unit_test(shared_headers),
        cmocka_unit_test(connection_reuse),
        cmocka_unit_test(connection_close_then_new_connection),
        cmocka_unit_test(dead_cached_connection_is_replaced),
        cmocka_unit_test(descriptor_churn),
        cmocka_unit_test(silent_server_times_out),
        cmocka_unit_test(closed_connection_is_unreachable),
        cmocka_unit_test(refused_port_is_unreachable),
        cmocka_unit_test(response_size_cap),
        cmocka_unit_test(fifty_concurrent),
        cmocka_unit_test(close_with_requests_in_flight),
        cmocka_unit_test(close_from_inside_done),
        cmocka_unit_test(complete_later_is_async),
        cmocka_unit_test(bad_url_is_an_error),
        cmocka_unit_test(error_statuses_are_answers),
        cmocka_unit_test(req_clear_zeroes),
    };
    return cmocka_run_group_tests_name("http_client", tests, NULL, NULL);
}
