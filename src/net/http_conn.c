/*
 * HTTP/1.1 connection core without sockets. See include/net/omnigate/http.h.
 *
 * The parser callbacks only record (STYLE.md §5). Two of them pause llhttp so that the
 * decisions happen in process(), after llhttp_execute returns: on_headers_complete (limits,
 * Expect, request id, body timer) and on_message_complete (dispatch). While a request is
 * with the handler nothing further is parsed: the unparsed bytes of the current read are
 * copied into a stash and reading stops, so pipelined requests are answered in order and a
 * client that sends faster than we answer is bounded by one read buffer.
 */
#include "omnigate/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "omnigate/api.h"

#define OG_MAX_HEADERS 100

/* What a paused llhttp_execute stopped for. */
enum { EV_NONE, EV_HEADERS, EV_MESSAGE };

/* Per-request parsing state kept on the connection: which header field/value we are in. */
enum { HS_NONE, HS_FIELD, HS_VALUE };

/* The errors the core answers itself (malformed, too slow, too large), by their codes (api.h). */
static const struct core_error {
    const og_errcode_t *code;
    const char *message;
} core_errors[] = {
    {OG_E_BAD_REQUEST, "malformed HTTP request"},
    {OG_E_REQUEST_TIMEOUT, "request not received in time"},
    {OG_E_PAYLOAD_TOO_LARGE, "request body over the limit"},
    {OG_E_HEADERS_TOO_LARGE, "request line and headers over the limit"},
};

static void process(og_http_conn_t *c);
static void finish(og_http_conn_t *c, og_http_req_t *req, bool close_after, bool linger);

/* ---- connection state: changed here only (STYLE.md §4) ---------------------------------- */

/* The legal moves, [from][to]; the enum in http.h says what each state means. Besides the
 * forward move of its row, every state before CLOSING may go to CLOSING (og_http_conn_close,
 * an error answer, an answer with Connection: close), and every state but CLOSED to CLOSED
 * (og_http_conn_io_closed: the transport is gone). Any other move is a bug in this file. */
static const bool conn_moves[OG_CONN_NSTATES][OG_CONN_NSTATES] = {
    /* on_message_begin: the first byte of a request */
    [OG_CONN_IDLE] = {[OG_CONN_HEADERS] = true, [OG_CONN_CLOSING] = true, [OG_CONN_CLOSED] = true},
    /* headers_done */
    [OG_CONN_HEADERS] = {[OG_CONN_BODY] = true, [OG_CONN_CLOSING] = true, [OG_CONN_CLOSED] = true},
    /* message_done: the request goes to the handler */
    [OG_CONN_BODY] = {[OG_CONN_HANDLING] = true, [OG_CONN_CLOSING] = true, [OG_CONN_CLOSED] = true},
    /* finish: answered, the connection is kept alive */
    [OG_CONN_HANDLING] = {[OG_CONN_IDLE] = true, [OG_CONN_CLOSING] = true, [OG_CONN_CLOSED] = true},
    [OG_CONN_CLOSING] = {[OG_CONN_CLOSED] = true},
};

static const char *const state_names[OG_CONN_NSTATES] = {
    [OG_CONN_IDLE] = "idle",         [OG_CONN_HEADERS] = "headers", [OG_CONN_BODY] = "body",
    [OG_CONN_HANDLING] = "handling", [OG_CONN_CLOSING] = "closing", [OG_CONN_CLOSED] = "closed",
};

/* Moves `c` to `to` and keeps the shared per-state counts exact. An impossible move means the
 * core lost track of a connection: stop loudly rather than serve on a broken one. */
static void conn_set_state(og_http_conn_t *c, og_http_conn_state_t to)
{
    og_http_conn_state_t from = c->state;
    if (!conn_moves[from][to]) {
        fprintf(stderr, "http_conn: connection %llu: impossible state change %s -> %s\n",
                (unsigned long long)c->id, state_names[from], state_names[to]);
        abort();
    }
    c->shared->conns[from]--;
    c->shared->conns[to]++;
    c->shared->conn_moves++;
    c->state = to;
}

/* The core is done with `c` (CLOSED, nothing in flight): it leaves the counts, then the
 * transport frees it. */
static void conn_release(og_http_conn_t *c)
{
    c->shared->conns[c->state]--;
    c->io->release(c);
}

/* ---- small helpers ---------------------------------------------------------------------- */

static inline og_http_conn_t *conn_of(llhttp_t *p)
{
    return (og_http_conn_t *)p->data;
}

static void set_reading(og_http_conn_t *c, bool on)
{
    if (c->reading != on) {
        c->reading = on;
        c->io->read(c, on);
    }
}

static void req_free(og_http_req_t *req)
{
    if (req == NULL)
        return;
    free(req->hbuf);
    free(req->hoff);
    free(req->headers);
    free(req->body);
    free(req->resp_hdrs);
    free(req);
}

static og_http_req_t *req_new(og_http_conn_t *c)
{
    og_http_req_t *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->conn = c;
    req->route = "-";
    req->route_index = -1;
    req->method_str = "-";
    req->start_us = c->shared->now_us(c->shared->ctx);
    return req;
}

/* Appends header bytes, enforcing the request line + headers limit. */
static int hbuf_append(og_http_conn_t *c, const char *at, size_t len)
{
    og_http_req_t *req = c->req;
    if (len == 0) /* llhttp reports empty spans too; hbuf may still be NULL (no offset on NULL) */
        return HPE_OK;
    size_t counted = req->hlen + len + 4 * req->nheaders;
    if (counted > c->shared->limits.max_header_bytes) {
        c->reject_status = 431;
        return HPE_USER;
    }
    if (req->hlen + len > req->hcap) {
        size_t cap = req->hcap ? req->hcap : 512;
        while (cap < req->hlen + len)
            cap *= 2;
        char *n = realloc(req->hbuf, cap);
        if (n == NULL)
            return HPE_USER;
        req->hbuf = n;
        req->hcap = cap;
    }
    memcpy(req->hbuf + req->hlen, at, len);
    req->hlen += len;
    return HPE_OK;
}

/* Trailer fields (after a chunked body) are dropped: the header array and the buffer it points
 * into were made final at headers_done, and no route reads trailers. Their bytes still count
 * against the header limit (hlen grows, nothing is stored), so a client cannot stream them
 * for ever. */
static int trailer_bytes(og_http_conn_t *c, size_t len)
{
    og_http_req_t *req = c->req;
    if (req->hlen + len + 4 * req->nheaders > c->shared->limits.max_header_bytes) {
        c->reject_status = 431;
        return HPE_USER;
    }
    req->hlen += len;
    return HPE_OK;
}

/* ---- llhttp callbacks: record only ------------------------------------------------------ */

static int on_message_begin(llhttp_t *p)
{
    og_http_conn_t *c = conn_of(p);
    if (c->req == NULL) {
        c->req = req_new(c);
        if (c->req == NULL)
            return HPE_USER;
    }
    c->hstate = HS_NONE;
    c->url_len = 0;
    conn_set_state(c, OG_CONN_HEADERS);
    c->io->timer(c, c->shared->limits.header_timeout_ms);
    return HPE_OK;
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    og_http_conn_t *c = conn_of(p);
    c->url_len += len;
    return hbuf_append(c, at, len);
}

/* RFC 9110 token characters. llhttp 8.1 (Debian's) lets a space before the colon through;
 * "Host : x" is a request-smuggling vector, so header names are checked here too. */
static bool is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return true;
    return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    og_http_conn_t *c = conn_of(p);
    og_http_req_t *req = c->req;
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)at[i]))
            return HPE_USER;
    if (c->state == OG_CONN_BODY)
        return trailer_bytes(c, len);
    if (c->hstate != HS_FIELD) {
        if (req->nheaders == OG_MAX_HEADERS) {
            c->reject_status = 431;
            return HPE_USER;
        }
        if (req->nheaders * 4 + 4 > req->hoff_cap) {
            size_t cap = req->hoff_cap ? req->hoff_cap * 2 : 64;
            uint32_t *n = realloc(req->hoff, cap * sizeof(*n));
            if (n == NULL)
                return HPE_USER;
            req->hoff = n;
            req->hoff_cap = cap;
        }
        uint32_t *h = req->hoff + req->nheaders * 4;
        h[0] = (uint32_t)req->hlen;
        h[1] = 0;
        h[2] = (uint32_t)req->hlen;
        h[3] = 0;
        req->nheaders++;
        c->hstate = HS_FIELD;
    }
    int rc = hbuf_append(c, at, len);
    req->hoff[(req->nheaders - 1) * 4 + 1] += (uint32_t)len;
    return rc;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    og_http_conn_t *c = conn_of(p);
    if (c->state == OG_CONN_BODY)
        return trailer_bytes(c, len);
    og_http_req_t *req = c->req;
    uint32_t *h = req->hoff + (req->nheaders - 1) * 4;
    if (c->hstate != HS_VALUE) {
        h[2] = (uint32_t)req->hlen;
        h[3] = 0;
        c->hstate = HS_VALUE;
    }
    int rc = hbuf_append(c, at, len);
    h[3] += (uint32_t)len;
    return rc;
}

static int on_headers_complete(llhttp_t *p)
{
    og_http_conn_t *c = conn_of(p);
    c->event = EV_HEADERS;
    return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    og_http_conn_t *c = conn_of(p);
    og_http_req_t *req = c->req;
    size_t max = req->max_body;
    if (req->body_len + len > max) {
        c->reject_status = 413;
        return HPE_USER;
    }
    if (req->body_len + len + 1 > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap : 1024;
        while (cap < req->body_len + len + 1)
            cap *= 2;
        if (cap > max + 1)
            cap = max + 1;
        char *n = realloc(req->body, cap);
        if (n == NULL)
            return HPE_USER;
        req->body = n;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, at, len);
    req->body_len += len;
    return HPE_OK;
}

static int on_message_complete(llhttp_t *p)
{
    og_http_conn_t *c = conn_of(p);
    c->event = EV_MESSAGE;
    return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- request bookkeeping ---------------------------------------------------------------- */

static bool request_id_ok(const char *v, size_t len)
{
    if (len == 0 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = v[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '_' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

static void assign_request_id(og_http_conn_t *c, og_http_req_t *req)
{
    size_t len;
    const char *v = req->headers ? og_http_req_header(req, "x-request-id", &len) : NULL;
    if (v != NULL && request_id_ok(v, len)) {
        memcpy(req->request_id, v, len);
        req->request_id[len] = '\0';
    } else {
        snprintf(req->request_id, sizeof(req->request_id), "%s%llx", c->shared->rid_prefix,
                 (unsigned long long)++c->shared->rid_seq);
    }
}

/* Turns the recorded offsets into the public header array and splits the target. False on a
 * header without a name, which llhttp 8.1 lets through (": x") and RFC 9110 does not. */
static bool headers_finalize(og_http_conn_t *c, og_http_req_t *req)
{
    /* The header bytes stay with the request until its answer, through a slow provider's
     * wait: keep only what they need (most requests use under half of the first 512), before
     * anything points into them. A shrinking realloc that fails leaves them as they were. */
    if (req->hcap > req->hlen + 64) {
        char *n = realloc(req->hbuf, req->hlen + 1);
        if (n != NULL) {
            req->hbuf = n;
            req->hcap = req->hlen + 1;
        }
    }
    if (req->nheaders > 0) {
        req->headers = calloc(req->nheaders, sizeof(*req->headers));
        if (req->headers == NULL)
            return false;
        for (size_t i = 0; i < req->nheaders; i++) {
            const uint32_t *h = req->hoff + i * 4;
            if (h[1] == 0)
                return false;
            req->headers[i] = (og_http_header_t){req->hbuf + h[0], h[1], req->hbuf + h[2], h[3]};
        }
    }
    /* The offsets were for the parse only. */
    free(req->hoff);
    req->hoff = NULL;
    req->hoff_cap = 0;
    const char *url = req->hbuf;
    size_t url_len = c->url_len;
    const char *q = url_len ? memchr(url, '?', url_len) : NULL;
    req->path = url;
    req->path_len = q ? (size_t)(q - url) : url_len;
    if (q != NULL) {
        req->query = q + 1;
        req->query_len = url_len - req->path_len - 1;
    }
    req->method = (llhttp_method_t)llhttp_get_method(&c->parser);
    req->method_str = llhttp_method_name(req->method);
    req->http_minor = llhttp_get_http_minor(&c->parser);
    req->keep_alive = llhttp_should_keep_alive(&c->parser) && !c->parser.upgrade;
    return true;
}

const char *og_http_req_header(const og_http_req_t *req, const char *name, size_t *len)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; i < req->nheaders; i++) {
        const og_http_header_t *h = &req->headers[i];
        if (h->name_len == nlen && strncasecmp(h->name, name, nlen) == 0) {
            if (len)
                *len = h->value_len;
            return h->value;
        }
    }
    return NULL;
}

void og_http_req_drop_input(og_http_req_t *req)
{
    free(req->hbuf);
    free(req->headers);
    free(req->body);
    req->hbuf = NULL;
    req->headers = NULL;
    req->body = NULL;
    req->hlen = req->hcap = req->body_cap = 0;
    req->nheaders = 0;
    req->body_len = 0;
    req->path = "";
    req->path_len = 0;
    req->query = NULL;
    req->query_len = 0;
}

/* ---- responses -------------------------------------------------------------------------- */

const char *og_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

typedef struct out {
    char *p;
    size_t len;
} out_t;

static inline void put(out_t *o, const char *s, size_t n)
{
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

#define PUTS(o, lit) put((o), (lit), sizeof(lit) - 1)

static void put_header(out_t *o, const char *name, size_t nlen, const char *value, size_t vlen)
{
    put(o, name, nlen);
    PUTS(o, ": ");
    put(o, value, vlen);
    PUTS(o, "\r\n");
}

/* The response's head, and its body after it unless `body` is NULL (the caller writes it). */
static char *build_response(og_http_conn_t *c, og_http_req_t *req, int status, const og_http_header_t *extra,
                            size_t nextra, const char *ctype, const char *body, size_t body_len, bool close,
                            size_t *out_len)
{
    bool no_body = body == NULL || req->method == HTTP_HEAD || status == 204 || status == 304 || status < 200;
    const char *date = c->shared->date ? c->shared->date(c->shared->ctx) : NULL;
    size_t cap = 256 + (date ? strlen(date) : 0) + (ctype ? strlen(ctype) : 0) + strlen(req->request_id) +
                 (no_body ? 0 : body_len);
    for (size_t i = 0; i < nextra; i++)
        cap += extra[i].name_len + extra[i].value_len + 4;
    cap += req->resp_hdrs_len;
    out_t o = {malloc(cap), 0};
    if (o.p == NULL)
        return NULL;
    char line[64];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d ", status);
    put(&o, line, (size_t)n);
    const char *reason = og_http_reason(status);
    put(&o, reason, strlen(reason));
    PUTS(&o, "\r\n");
    if (date != NULL)
        put_header(&o, "Date", 4, date, strlen(date));
    if (ctype != NULL)
        put_header(&o, "Content-Type", 12, ctype, strlen(ctype));
    n = snprintf(line, sizeof(line), "%zu", body_len);
    put_header(&o, "Content-Length", 14, line, (size_t)n);
    put_header(&o, "X-Request-Id", 12, req->request_id, strlen(req->request_id));
    for (size_t i = 0; i < nextra; i++)
        put_header(&o, extra[i].name, extra[i].name_len, extra[i].value, extra[i].value_len);
    if (req->resp_hdrs_len > 0)
        put(&o, req->resp_hdrs, req->resp_hdrs_len);
    if (close)
        PUTS(&o, "Connection: close\r\n");
    else if (req->http_minor == 0)
        PUTS(&o, "Connection: keep-alive\r\n");
    PUTS(&o, "\r\n");
    if (!no_body && body_len > 0)
        put(&o, body, body_len);
    *out_len = o.len;
    return o.p;
}

bool og_http_req_add_header(og_http_req_t *req, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    if (nl + vl + 4 > OG_HTTP_RESP_HDRS - req->resp_hdrs_len || strpbrk(name, "\r\n:") != NULL ||
        strpbrk(value, "\r\n") != NULL)
        return false;
    if (req->resp_hdrs == NULL && (req->resp_hdrs = malloc(OG_HTTP_RESP_HDRS + 1)) == NULL)
        return false;
    char *p = req->resp_hdrs + req->resp_hdrs_len;
    memcpy(p, name, nl);
    memcpy(p + nl, ": ", 2);
    memcpy(p + nl + 2, value, vl);
    memcpy(p + nl + 2 + vl, "\r\n", 3);
    req->resp_hdrs_len += nl + vl + 4;
    return true;
}

void og_http_respond(og_http_req_t *req, int status, const og_http_header_t *extra, size_t nextra,
                     const char *ctype, const char *body, size_t body_len)
{
    og_http_conn_t *c = req->conn;
    bool alive = c->state == OG_CONN_HANDLING && !c->io_closed;
    bool close = !req->keep_alive || c->shared->draining || c->peer_eof;
    req->status = status;
    if (alive) {
        bool has_body =
            body_len > 0 && req->method != HTTP_HEAD && status != 204 && status != 304 && status >= 200;
        /* The head alone when the transport takes the body beside it (no copy of the body). */
        bool apart = has_body && c->io->write2 != NULL;
        size_t len;
        char *buf =
            build_response(c, req, status, extra, nextra, ctype, apart ? NULL : body, body_len, close, &len);
        if (buf == NULL) {
            close = true;
        } else if (apart) {
            req->bytes_out = len + body_len;
            c->io->write2(c, buf, len, body, body_len);
        } else {
            req->bytes_out = len;
            c->io->write(c, buf, len);
        }
    }
    finish(c, req, close, false);
}

/* Answers an error the core itself detects (malformed, too large, too slow) and closes. */
static void respond_error(og_http_conn_t *c, int status)
{
    og_http_req_t *req = c->req;
    if (req == NULL) {
        req = c->req = req_new(c);
        if (req == NULL) {
            og_http_conn_close(c);
            return;
        }
    }
    if (req->request_id[0] == '\0')
        assign_request_id(c, req);
    const struct core_error *e = &core_errors[0];
    for (size_t i = 0; i < sizeof(core_errors) / sizeof(core_errors[0]); i++)
        if (core_errors[i].code->status == status)
            e = &core_errors[i];
    status = e->code->status;
    req->status = status;
    if (!c->io_closed) {
        size_t len;
        char body[192];
        int n = snprintf(body, sizeof(body),
                         "{\"success\":false,\"message\":\"%s\",\"data\":null,\"error\":{\"code\":\"%s\"}}",
                         e->message, e->code->name);
        char *buf = build_response(c, req, status, NULL, 0, "application/json", body, (size_t)n, true, &len);
        if (buf != NULL) {
            req->bytes_out = len;
            c->io->write(c, buf, len);
        }
    }
    finish(c, req, true, true);
}

/* The request is answered (or its connection is gone): log it, free it, and move on. */
static void finish(og_http_conn_t *c, og_http_req_t *req, bool close_after, bool linger)
{
    req->duration_us = c->shared->now_us(c->shared->ctx) - req->start_us;
    if (c->shared->done != NULL)
        c->shared->done(req, c->shared->ctx);
    c->req = NULL;
    c->dispatched = false;
    c->requests++;
    req_free(req);

    if (c->io_closed) {
        conn_release(c); /* og_http_conn_io_closed made it CLOSED */
        return;
    }
    if (c->state == OG_CONN_CLOSING)
        return; /* og_http_conn_io_closed will release it */
    if (close_after) {
        conn_set_state(c, OG_CONN_CLOSING);
        c->io->timer(c, 0);
        set_reading(c, false);
        c->io->close(c, linger);
        return;
    }
    conn_set_state(c, OG_CONN_IDLE);
    c->io->timer(c, c->shared->limits.idle_timeout_ms);
    if (!c->feeding)
        process(c);
}

/* ---- the driver ------------------------------------------------------------------------- */

static void stash_drop(og_http_conn_t *c)
{
    free(c->stash);
    c->stash = NULL;
    c->stash_len = c->stash_off = 0;
}

static bool backlog_full(og_http_conn_t *c)
{
    return c->io->backlog(c) > c->shared->limits.max_write_backlog;
}

/* The headers are in: finalize them and decide about the body. */
static void headers_done(og_http_conn_t *c, size_t remaining)
{
    og_http_req_t *req = c->req;
    if (!headers_finalize(c, req)) {
        respond_error(c, 400);
        return;
    }
    assign_request_id(c, req);
    bool has_body = (c->parser.flags & F_CHUNKED) ||
                    ((c->parser.flags & F_CONTENT_LENGTH) && c->parser.content_length > 0);
    req->max_body = c->shared->body_limit != NULL ? c->shared->body_limit(req, c->shared->ctx)
                                                  : c->shared->limits.max_body_bytes;
    if ((c->parser.flags & F_CONTENT_LENGTH) && c->parser.content_length > req->max_body) {
        respond_error(c, 413);
        return;
    }
    if ((c->parser.flags & F_CONTENT_LENGTH) && c->parser.content_length > 0) {
        req->body_cap = c->parser.content_length + 1;
        req->body = malloc(req->body_cap);
        if (req->body == NULL) {
            respond_error(c, 413);
            return;
        }
    }
    size_t elen;
    const char *expect = og_http_req_header(req, "expect", &elen);
    if (expect != NULL && has_body && remaining == 0 && req->http_minor >= 1 && elen == 12 &&
        strncasecmp(expect, "100-continue", 12) == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        char *buf = malloc(sizeof(cont) - 1);
        if (buf != NULL) {
            memcpy(buf, cont, sizeof(cont) - 1);
            c->io->write(c, buf, sizeof(cont) - 1);
        }
    }
    conn_set_state(c, OG_CONN_BODY);
    c->io->timer(c, c->shared->limits.body_timeout_ms);
}

static void message_done(og_http_conn_t *c)
{
    og_http_req_t *req = c->req;
    if (req->body == NULL) {
        req->body = malloc(1);
        if (req->body == NULL) {
            respond_error(c, 400);
            return;
        }
    }
    req->body[req->body_len] = '\0';
    conn_set_state(c, OG_CONN_HANDLING);
    c->dispatched = true;
    c->io->timer(c, 0);
    c->shared->handler(req, c->shared->ctx);
}

/* Parses from `data` until it is used up or the connection must wait. Returns the bytes used. */
static size_t parse(og_http_conn_t *c, const char *data, size_t len)
{
    size_t off = 0;
    /* After a pause at the headers, llhttp must run again even with no bytes left: a request
     * without a body completes in states that consume nothing. */
    bool kick = false;
    while ((off < len || kick) &&
           (c->state == OG_CONN_IDLE || c->state == OG_CONN_HEADERS || c->state == OG_CONN_BODY)) {
        if (c->state == OG_CONN_IDLE && backlog_full(c))
            break;
        kick = false;
        c->event = EV_NONE;
        llhttp_errno_t e = llhttp_execute(&c->parser, data + off, len - off);
        size_t used = len - off;
        if (e != HPE_OK)
            used = (size_t)(llhttp_get_error_pos(&c->parser) - (data + off));
        if (c->req != NULL)
            c->req->bytes_in += used;
        off += used;
        if (e == HPE_PAUSED) {
            llhttp_resume(&c->parser);
            if (c->event == EV_HEADERS) {
                headers_done(c, len - off);
                kick = true;
            } else if (c->event == EV_MESSAGE)
                message_done(c);
        } else if (e == HPE_PAUSED_UPGRADE) {
            /* An Upgrade/CONNECT request was answered already; we speak nothing else. */
            og_http_conn_close(c);
            break;
        } else if (e != HPE_OK) {
            int status = c->reject_status ? c->reject_status : 400;
            respond_error(c, status);
            break;
        }
    }
    return off;
}

/* Runs the parser over the stash, then decides whether to read more. */
static void process(og_http_conn_t *c)
{
    c->feeding = true;
    if (c->stash != NULL) {
        c->stash_off += parse(c, c->stash + c->stash_off, c->stash_len - c->stash_off);
        if (c->stash_off == c->stash_len || c->state >= OG_CONN_CLOSING)
            stash_drop(c);
    }
    c->feeding = false;
    if (c->state >= OG_CONN_CLOSING)
        return;
    if (c->peer_eof && c->stash == NULL && c->state != OG_CONN_HANDLING) {
        og_http_conn_close(c);
        return;
    }
    set_reading(c, c->stash == NULL && c->state != OG_CONN_HANDLING && !backlog_full(c) && !c->peer_eof);
}

void og_http_conn_init(og_http_conn_t *c, og_http_shared_t *shared, const og_http_io_t *io, uint64_t id)
{
    memset(c, 0, sizeof(*c));
    llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
    c->parser.data = c;
    c->shared = shared;
    c->io = io;
    c->id = id;
    /* Born IDLE: the one assignment that is not a move, counted from here to conn_release. */
    c->state = OG_CONN_IDLE;
    shared->conns[OG_CONN_IDLE]++;
}

void og_http_conn_start(og_http_conn_t *c)
{
    c->io->timer(c, c->shared->limits.idle_timeout_ms);
    set_reading(c, true);
}

void og_http_conn_feed(og_http_conn_t *c, const char *data, size_t len)
{
    if (c->state >= OG_CONN_CLOSING || len == 0)
        return;
    size_t used = 0;
    /* Bytes can come while reading is off (the server stops lazily, http_server.c): kept. */
    if (c->stash == NULL && c->reading) {
        c->feeding = true;
        used = parse(c, data, len);
        c->feeding = false;
        if (c->state >= OG_CONN_CLOSING)
            return;
    }
    if (used < len) {
        /* Keep what we could not parse yet; reading stops until it is consumed. */
        size_t rest = len - used;
        size_t have = c->stash ? c->stash_len - c->stash_off : 0;
        char *n = malloc(have + rest);
        if (n == NULL) {
            og_http_conn_close(c);
            return;
        }
        if (have)
            memcpy(n, c->stash + c->stash_off, have);
        memcpy(n + have, data + used, rest);
        free(c->stash);
        c->stash = n;
        c->stash_len = have + rest;
        c->stash_off = 0;
    }
    process(c);
}

void og_http_conn_eof(og_http_conn_t *c)
{
    c->peer_eof = true;
    if (c->state >= OG_CONN_CLOSING)
        return;
    set_reading(c, false);
    if (c->state != OG_CONN_HANDLING && c->stash == NULL)
        og_http_conn_close(c);
}

void og_http_conn_timeout(og_http_conn_t *c)
{
    switch (c->state) {
    case OG_CONN_IDLE:
        og_http_conn_close(c);
        break;
    case OG_CONN_HEADERS:
    case OG_CONN_BODY:
        respond_error(c, 408);
        break;
    default:
        break;
    }
}

void og_http_conn_drained(og_http_conn_t *c)
{
    if (c->state == OG_CONN_IDLE && !c->feeding)
        process(c);
}

void og_http_conn_close(og_http_conn_t *c)
{
    if (c->state >= OG_CONN_CLOSING)
        return;
    if (c->req != NULL && !c->dispatched) {
        req_free(c->req);
        c->req = NULL;
    }
    stash_drop(c);
    conn_set_state(c, OG_CONN_CLOSING);
    c->io->timer(c, 0);
    set_reading(c, false);
    c->io->close(c, false);
}

void og_http_conn_io_closed(og_http_conn_t *c)
{
    if (c->io_closed)
        return;
    c->io_closed = true;
    c->reading = false;
    stash_drop(c);
    if (c->req != NULL && !c->dispatched) {
        req_free(c->req);
        c->req = NULL;
    }
    conn_set_state(c, OG_CONN_CLOSED);
    if (c->req == NULL)
        conn_release(c);
}

bool og_http_conn_is_idle(const og_http_conn_t *c)
{
    return c->state == OG_CONN_IDLE && c->req == NULL && c->stash == NULL;
}
