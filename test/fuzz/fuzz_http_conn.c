/*
 * Fuzzes the HTTP connection core (src/net/http_conn.c) through a fake transport that keeps the
 * contract of og_http_io_t: bytes are fed only while the core reads, the timer fires only when
 * armed, the close completes with og_http_conn_io_closed, nothing calls back into the core from
 * inside an io callback.
 *
 * An input is the bytes a client sends, optionally followed by CTL_SEP and control bytes that
 * script the rest of the world, one step each (low 3 bits the step, high 5 bits its argument):
 * how many bytes the next read delivers, whether the handler answers at once or holds the
 * request, answering a held request, the peer's EOF, the timer firing, a slow socket and its
 * drain, the worker draining or closing, the socket going away. The first control byte picks the
 * limits. Without control bytes everything is fed in one read and answered at once. After the
 * script, whatever is left is fed and answered, and the connection is closed, so every input
 * ends with the connection released exactly once.
 *
 * Checked on the way: the per-state counts of og_http_shared_t.conns stay exact, the io calls
 * follow the state (no read or write after close, a disarmed timer while handling), one request
 * at most is with the handler, every request the handler got is finished once, and every write
 * is one well-formed response whose Content-Length matches its body and whose header lines
 * hold no stray CR or LF.
 */
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "omnigate/http.h"

#define CTL_SEP "\n#ctl#\n"

enum { OP_FEED, OP_MODE, OP_ANSWER, OP_EOF, OP_TIMER, OP_SOCKET, OP_WORKER, OP_GONE };

typedef struct fake {
    og_http_conn_t c;
    og_http_shared_t shared;
    const uint8_t *in; /* client bytes not yet delivered */
    size_t in_len;
    bool peer_eof;     /* the client closed its side: nothing more is delivered */
    bool reading;      /* what io->read last said */
    uint64_t timer_ms; /* armed timer, 0 when disarmed */
    bool close_asked;  /* io->close was called */
    bool gone;         /* og_http_conn_io_closed was called */
    int releases;
    bool slow;      /* writes stay in the backlog until the socket drains */
    size_t backlog; /* bytes written but not yet "sent" */
    bool async;     /* the handler holds requests instead of answering them */
    uint8_t answer; /* how the next answer looks */
    og_http_req_t *held;
    unsigned handled, handled_done, done;
    bool said_close; /* a response said Connection: close */
    uint64_t clock_us;
} fake_t;

#define FAKE(c) ((fake_t *)(c)->data)

static const char date_value[] = "Sun, 06 Nov 1994 08:49:37 GMT";

/* ---- checks --------------------------------------------------------------------------------- */

static bool is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* One write must be exactly one response: status line, header lines, blank line, body. */
static void check_response(fake_t *f, const char *p, size_t len)
{
    FUZZ_CHECK(len > 12 && memcmp(p, "HTTP/1.1 ", 9) == 0);
    int status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    FUZZ_CHECK(status >= 100 && status <= 599 && p[12] == ' ');
    const char *end = NULL;
    for (size_t i = 0; i + 4 <= len && end == NULL; i++)
        if (memcmp(p + i, "\r\n\r\n", 4) == 0)
            end = p + i;
    FUZZ_CHECK(end != NULL);
    size_t body_len = len - (size_t)(end + 4 - p);
    if (status == 100) { /* "HTTP/1.1 100 Continue\r\n\r\n": no header, no body */
        FUZZ_CHECK(body_len == 0 && (const char *)memchr(p, '\n', len) == end + 1);
        return;
    }
    long content_length = -1;
    bool close = false;
    const char *line = (const char *)memchr(p, '\n', len) + 1;
    while (line < end + 2) {
        const char *eol = memchr(line, '\r', (size_t)(end + 2 - line));
        FUZZ_CHECK(eol != NULL && eol[1] == '\n');
        FUZZ_CHECK(memchr(line, '\n', (size_t)(eol - line)) == NULL);
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        FUZZ_CHECK(colon != NULL && colon > line && colon[1] == ' ');
        for (const char *q = line; q < colon; q++)
            FUZZ_CHECK(is_tchar((unsigned char)*q));
        size_t nlen = (size_t)(colon - line), vlen = (size_t)(eol - colon - 2);
        if (nlen == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
            FUZZ_CHECK(content_length == -1);
            content_length = strtol(colon + 2, NULL, 10);
        }
        if (nlen == 10 && strncasecmp(line, "Connection", 10) == 0 && vlen == 5 &&
            memcmp(colon + 2, "close", 5) == 0)
            close = true;
        line = eol + 2;
    }
    FUZZ_CHECK(content_length >= 0);
    /* HEAD, 204 and 304 answers keep their Content-Length but send no body. */
    const og_http_req_t *req = f->c.req; /* the request being answered */
    bool no_body = (req != NULL && req->method == HTTP_HEAD) || status == 204 || status == 304;
    FUZZ_CHECK(body_len == (no_body ? 0 : (size_t)content_length));
    if (close)
        f->said_close = true;
}

/* The state the core is in and what it last told the transport agree. */
static void check_conn(fake_t *f)
{
    if (f->releases > 0) {
        for (int s = 0; s < OG_CONN_NSTATES; s++)
            FUZZ_CHECK(f->shared.conns[s] == 0);
        return;
    }
    og_http_conn_t *c = &f->c;
    size_t total = 0;
    for (int s = 0; s < OG_CONN_NSTATES; s++)
        total += f->shared.conns[s];
    FUZZ_CHECK(total == 1 && f->shared.conns[c->state] == 1);
    const og_http_limits_t *l = &f->shared.limits;
    switch (c->state) {
    case OG_CONN_IDLE:
        FUZZ_CHECK(f->timer_ms == l->idle_timeout_ms && f->held == NULL && !f->close_asked);
        break;
    case OG_CONN_HEADERS:
        FUZZ_CHECK(f->timer_ms == l->header_timeout_ms && f->held == NULL && !f->close_asked);
        break;
    case OG_CONN_BODY:
        FUZZ_CHECK(f->timer_ms == l->body_timeout_ms && f->held == NULL && !f->close_asked);
        break;
    case OG_CONN_HANDLING:
        /* A sync handler has answered before the core returns: only a held request waits. */
        FUZZ_CHECK(f->held != NULL && f->timer_ms == 0 && !f->reading && !f->close_asked);
        break;
    case OG_CONN_CLOSING:
        FUZZ_CHECK(f->close_asked && !f->gone && f->timer_ms == 0 && !f->reading);
        break;
    case OG_CONN_CLOSED:
        FUZZ_CHECK(f->gone && f->held != NULL);
        break;
    }
    if (!f->gone)
        FUZZ_CHECK(c->reading == f->reading);
    if (f->said_close)
        FUZZ_CHECK(f->close_asked || f->gone);
}

/* ---- the fake transport --------------------------------------------------------------------- */

static void io_write(og_http_conn_t *c, char *data, size_t len)
{
    fake_t *f = FAKE(c);
    FUZZ_CHECK(f->releases == 0 && !f->close_asked && !f->gone && !f->said_close);
    check_response(f, data, len);
    if (f->slow)
        f->backlog += len;
    free(data);
}

/* The transport's writev: the core's head and its lent body, checked as one response. */
static void io_write2(og_http_conn_t *c, char *head, size_t hlen, const char *body, size_t blen)
{
    char *data = malloc(hlen + blen);
    FUZZ_CHECK(data != NULL);
    memcpy(data, head, hlen);
    memcpy(data + hlen, body, blen);
    free(head);
    io_write(c, data, hlen + blen);
}

static void io_read(og_http_conn_t *c, bool on)
{
    fake_t *f = FAKE(c);
    FUZZ_CHECK(f->releases == 0 && !f->gone && f->reading != on);
    FUZZ_CHECK(!on || !f->close_asked);
    f->reading = on;
}

static void io_timer(og_http_conn_t *c, uint64_t ms)
{
    fake_t *f = FAKE(c);
    FUZZ_CHECK(f->releases == 0 && !f->gone);
    FUZZ_CHECK(ms == 0 || !f->close_asked);
    f->timer_ms = ms;
}

static size_t io_backlog(og_http_conn_t *c)
{
    return FAKE(c)->backlog;
}

static void io_close(og_http_conn_t *c, bool linger)
{
    fake_t *f = FAKE(c);
    FUZZ_CHECK(f->releases == 0 && !f->gone && !f->close_asked);
    FUZZ_CHECK(f->timer_ms == 0); /* reading stops once the core returns (process) */
    f->close_asked = true;
}

static void io_release(og_http_conn_t *c)
{
    fake_t *f = FAKE(c);
    FUZZ_CHECK(f->releases == 0 && f->gone && c->req == NULL);
    f->releases++;
}

static const og_http_io_t fake_io = {io_write, io_read,    io_timer, io_backlog,
                                     io_close, io_release, io_write2};

/* ---- the worker's side ---------------------------------------------------------------------- */

static uint64_t now_us(void *ctx)
{
    fake_t *f = ctx;
    return f->clock_us += 137;
}

static const char *date(void *ctx)
{
    return date_value;
}

/* A route may raise the body limit (webhooks do): paths under /big get four times the default. */
static size_t body_limit(const og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    bool big = req->path_len >= 4 && memcmp(req->path, "/big", 4) == 0;
    return f->shared.limits.max_body_bytes * (big ? 4 : 1);
}

static void answer(fake_t *f, og_http_req_t *req)
{
    static const int statuses[] = {200, 201, 202, 204, 304, 400, 404, 409, 413, 422, 429, 500, 503};
    uint8_t a = f->answer;
    int status = statuses[a % (sizeof(statuses) / sizeof(statuses[0]))];
    if (a & 0x10)
        og_http_req_add_header(req, "X-RateLimit-Limit", "10");
    og_http_header_t extra[2] = {{"Retry-After", 11, "1", 1}, {"Location", 8, "/v1/x", 5}};
    if (a & 0x20) /* echo the body: the answer grows with the request */
        og_http_respond(req, status, extra, (a >> 6) % 3, "application/json", req->body, req->body_len);
    else
        og_http_respond(req, status, extra, (a >> 6) % 3, NULL, NULL, 0);
}

static void handler(og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    og_http_conn_t *c = &f->c;
    FUZZ_CHECK(f->held == NULL && req->conn == c && c->req == req && c->state == OG_CONN_HANDLING);
    FUZZ_CHECK(f->timer_ms == 0); /* reading stops once the core returns (process) */
    FUZZ_CHECK(req->body != NULL && req->body[req->body_len] == '\0' && req->body_len <= req->max_body);
    FUZZ_CHECK(req->max_body ==
               (f->shared.body_limit != NULL ? body_limit(req, f) : f->shared.limits.max_body_bytes));
    FUZZ_CHECK(req->nheaders <= 100 && req->bytes_in >= req->path_len + req->body_len);
    for (size_t i = 0; i < req->nheaders; i++) {
        FUZZ_CHECK(req->headers[i].name_len > 0);
        for (size_t k = 0; k < req->headers[i].name_len; k++)
            FUZZ_CHECK(is_tchar((unsigned char)req->headers[i].name[k]));
    }
    size_t rid = strlen(req->request_id);
    FUZZ_CHECK(rid > 0 && rid <= 64 &&
               strspn(req->request_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                   rid);
    FUZZ_CHECK(req->method_str != NULL && req->user == NULL);
    req->user = f; /* marks a request the handler got, for done() */
    f->handled++;
    if (f->async)
        f->held = req;
    else
        answer(f, req);
}

static void done(const og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    f->done++;
    if (req->user == f)
        f->handled_done++;
    FUZZ_CHECK(req != f->held); /* a held request finishes only through its answer */
}

/* ---- the script ----------------------------------------------------------------------------- */

static void set_limits(fake_t *f, uint8_t config)
{
    bool small = config & 1;
    f->shared.limits = (og_http_limits_t){.max_header_bytes = small ? 200 : 16384,
                                          .max_body_bytes = small ? 48 : 65536,
                                          .header_timeout_ms = 10000,
                                          .body_timeout_ms = 30000,
                                          .idle_timeout_ms = 60000,
                                          .max_write_backlog = small ? 300 : 1 << 20};
    f->shared.body_limit = config & 2 ? body_limit : NULL;
    f->shared.date = config & 4 ? date : NULL;
}

static void feed(fake_t *f, size_t n)
{
    if (!f->reading || f->peer_eof || f->in_len == 0)
        return;
    n = n < f->in_len ? n : f->in_len;
    /* A copy of just these bytes: the core must not read past what it was given. */
    char *chunk = malloc(n);
    FUZZ_CHECK(chunk != NULL);
    memcpy(chunk, f->in, n);
    f->in += n;
    f->in_len -= n;
    og_http_conn_feed(&f->c, chunk, n);
    free(chunk);
}

static void answer_held(fake_t *f)
{
    og_http_req_t *req = f->held;
    if (req == NULL)
        return;
    f->held = NULL; /* the answer may dispatch the next pipelined request */
    answer(f, req);
}

static void step(fake_t *f, uint8_t b)
{
    unsigned arg = b >> 3;
    og_http_conn_t *c = &f->c;
    switch (b & 7) {
    case OP_FEED: /* 1-24 bytes, 32 bytes to 2 KiB, or all that is left */
        feed(f, arg < 24 ? arg + 1 : arg < 31 ? (size_t)32 << (arg - 24) : f->in_len);
        break;
    case OP_MODE:
        f->async = arg & 1;
        f->answer = (uint8_t)(arg >> 1) * 17;
        break;
    case OP_ANSWER:
        f->answer = (uint8_t)(b * 31);
        answer_held(f);
        break;
    case OP_EOF: /* an EOF is a read result: only while reading */
        if (f->reading && !f->peer_eof) {
            f->peer_eof = true;
            og_http_conn_eof(c);
        }
        break;
    case OP_TIMER:
        if (f->timer_ms != 0 && !f->gone) {
            f->timer_ms = 0; /* one-shot */
            og_http_conn_timeout(c);
        }
        break;
    case OP_SOCKET: /* the socket gets slow, or drains what was queued */
        f->slow = arg & 1;
        if ((arg & 2) && f->backlog > 0 && !f->close_asked && !f->gone) {
            f->backlog = 0;
            og_http_conn_drained(c);
        }
        break;
    case OP_WORKER:
        if (f->gone)
            break;
        if (arg & 1)
            f->shared.draining = true;
        else if (arg & 2 || og_http_conn_is_idle(c))
            og_http_conn_close(c); /* shutdown, or a drain closing an idle connection */
        break;
    case OP_GONE: /* the close completes, or the socket dies under the core */
        if (!f->gone && (f->close_asked || (arg & 1))) {
            f->gone = true;
            f->reading = false;
            og_http_conn_io_closed(c);
        }
        break;
    }
    check_conn(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *ctl = NULL;
    size_t nctl = 0;
    const uint8_t *sep = memmem(data, size, CTL_SEP, sizeof(CTL_SEP) - 1);
    if (sep != NULL) {
        ctl = sep + sizeof(CTL_SEP) - 1;
        nctl = (size_t)(data + size - ctl);
        size = (size_t)(sep - data);
    }
    fake_t *f = calloc(1, sizeof(*f));
    FUZZ_CHECK(f != NULL);
    f->in = data;
    f->in_len = size;
    f->shared =
        (og_http_shared_t){.handler = handler, .done = done, .ctx = f, .now_us = now_us, .rid_prefix = "fz-"};
    set_limits(f, nctl > 0 ? ctl[0] : 0);
    og_http_conn_init(&f->c, &f->shared, &fake_io, 1);
    f->c.data = f;
    og_http_conn_start(&f->c);
    check_conn(f);

    for (size_t i = 1; i < nctl && f->releases == 0; i++)
        step(f, ctl[i]);

    /* The rest of the conversation: the socket drains, what is left arrives, held requests are
     * answered. The socket is fast from here on; each round empties it, consumes input or answers
     * a request, so this ends. */
    while (f->releases == 0 && ((f->reading && !f->peer_eof && f->in_len > 0) || f->held != NULL ||
                                (f->backlog > 0 && !f->close_asked && !f->gone))) {
        step(f, OP_SOCKET | 2 << 3);
        feed(f, f->in_len);
        answer_held(f);
        check_conn(f);
    }
    if (f->releases == 0 && !f->gone) {
        og_http_conn_close(&f->c);
        check_conn(f);
        step(f, OP_GONE);
    }
    answer_held(f); /* a request still with the handler when the socket went */
    check_conn(f);
    FUZZ_CHECK(f->releases == 1);
    FUZZ_CHECK(f->handled_done == f->handled && f->done >= f->handled);
    free(f);
    return 0;
}
