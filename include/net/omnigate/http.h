/*
 * HTTP/1.1 connection core, without sockets ("sans-IO"): feed it bytes, it parses requests
 * with llhttp, enforces the limits and timeouts of API.md, dispatches one request at a time
 * to the handler, serializes the responses in order and tells its transport what to do
 * (write, pause/resume reading, arm the timer, close). Responsible for HTTP framing and
 * connection state; not for sockets (http_server.c), routing (router.c) or JSON (api.c).
 */
#ifndef OMNIGATE_HTTP_H
#define OMNIGATE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

typedef struct og_http_conn og_http_conn_t;
typedef struct og_http_req og_http_req_t;

typedef struct og_http_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} og_http_header_t;

/* Limits and timeouts shared by every connection of a worker. */
typedef struct og_http_limits {
    size_t max_header_bytes; /* request line + headers; over it: 431 and close */
    size_t max_body_bytes;   /* decoded body; over it: 413 and close, excess never buffered */
    uint64_t header_timeout_ms;
    uint64_t body_timeout_ms;
    uint64_t idle_timeout_ms;
    size_t max_write_backlog; /* stop parsing further pipelined requests above this many unsent bytes */
} og_http_limits_t;

/* What the transport does for the core. Every call is made from inside an og_http_conn_*
 * function; none may call back into the core synchronously. */
typedef struct og_http_io {
    /* Queue `len` bytes of `data` for writing; the core gives up ownership of the malloc'd
     * buffer, which the transport frees once written (or on failure). */
    void (*write)(og_http_conn_t *c, char *data, size_t len);
    /* Start (true) or stop (false) delivering bytes with og_http_conn_feed. */
    void (*read)(og_http_conn_t *c, bool on);
    /* Arm the connection's single timer to fire in `ms`, or disarm it when `ms` is 0. */
    void (*timer)(og_http_conn_t *c, uint64_t ms);
    /* Bytes queued but not yet written to the socket. */
    size_t (*backlog)(og_http_conn_t *c);
    /* Close the connection once queued writes are flushed; `linger` asks to read and
     * discard what the peer still sends for a short while so it sees the final response
     * rather than a reset. The transport then calls og_http_conn_io_closed. */
    void (*close)(og_http_conn_t *c, bool linger);
    /* The core is finished with the connection: free everything that owns it. Called once,
     * after og_http_conn_io_closed and once no request is in flight. */
    void (*release)(og_http_conn_t *c);
    /* Optional (NULL: the core joins the two and calls write). A response's head and body
     * written together (one writev) without joining them: `head` is given up as with write;
     * `body` is only lent for the call, so the transport copies whatever of it it cannot write
     * at once. */
    void (*write2)(og_http_conn_t *c, char *head, size_t head_len, const char *body, size_t body_len);
} og_http_io_t;

/* Called once per complete request (headers and body). The handler must eventually call
 * og_http_respond exactly once, now or later (from another callback); until it does the
 * connection parses nothing further. */
typedef void (*og_http_handler_fn)(og_http_req_t *req, void *ctx);

/* Called when a request finishes (response queued, or the connection died first), with the
 * numbers the access log needs. */
typedef void (*og_http_done_fn)(const og_http_req_t *req, void *ctx);

/* A connection's state. Only conn_set_state in http_conn.c changes it, and only along the
 * moves of the table there: each request goes IDLE -> HEADERS -> BODY -> HANDLING -> IDLE;
 * any of these may go to CLOSING (the core closes) or straight to CLOSED (the transport is
 * gone); CLOSING goes only to CLOSED, and CLOSED nowhere. */
typedef enum og_http_conn_state {
    OG_CONN_IDLE,     /* between requests, nothing received: idle timeout */
    OG_CONN_HEADERS,  /* receiving request line and headers: header timeout */
    OG_CONN_BODY,     /* headers in, receiving the body (if any): body timeout */
    OG_CONN_HANDLING, /* a complete request is with the handler; reading paused */
    OG_CONN_CLOSING,  /* closing: final response (if any) queued, transport asked to close */
    OG_CONN_CLOSED,   /* transport closed; waiting for the in-flight request, if any */
} og_http_conn_state_t;

#define OG_CONN_NSTATES (OG_CONN_CLOSED + 1)

/* Everything a worker's connections share. Owned by the worker. */
typedef struct og_http_shared {
    og_http_limits_t limits;
    og_http_handler_fn handler;
    og_http_done_fn done;
    void *ctx;                      /* passed to handler and done */
    bool draining;                  /* set by the worker: responses say Connection: close */
    uint64_t (*now_us)(void *ctx);  /* monotonic clock in µs, for request durations */
    const char *(*date)(void *ctx); /* current IMF-fixdate for the Date header, or NULL */
    /* The body limit of one request, asked once its headers are in (a route may accept more
     * than limits.max_body_bytes, e.g. provider webhooks); NULL: always limits.max_body_bytes. */
    size_t (*body_limit)(const og_http_req_t *req, void *ctx);
    char rid_prefix[24]; /* random per worker start: generated request ids are prefix + counter */
    uint64_t rid_seq;
    /* The connections sharing this struct, by state, kept exact by the core: one counts from
     * og_http_conn_init until the core hands it to io->release. */
    size_t conns[OG_CONN_NSTATES];
    uint64_t conn_moves; /* state changes so far */
} og_http_shared_t;

struct og_http_req {
    og_http_conn_t *conn; /* outlives the request; if its socket is gone the response is dropped */
    llhttp_method_t method;
    const char *method_str;
    const char *path; /* not NUL-terminated; percent-decoding is the router's business */
    size_t path_len;
    const char *query; /* after '?', not NUL-terminated; NULL when absent */
    size_t query_len;
    og_http_header_t *headers;
    size_t nheaders;
    char *body; /* NUL-terminated for convenience; body_len excludes the NUL */
    size_t body_len;
    int http_minor;
    bool keep_alive;
    char request_id[65];
    const char *route; /* route pattern for logs and metrics, set by the router ("-" if none) */
    int route_index;   /* index of the route in the router's table, -1 if none */
    int status;        /* set by og_http_respond */
    size_t bytes_in;   /* request line + headers + body bytes as received */
    size_t bytes_out;  /* response bytes queued */
    uint64_t start_us;
    uint64_t duration_us; /* set when the request is done */
    size_t max_body;      /* this request's body limit, set when its headers are in */
    void *user;           /* for the handler */
    /* Header lines ("Name: value\r\n") added to whatever response the request gets, e.g. by
     * middleware such as the rate limiter before the handler answers: NUL-terminated, at most
     * OG_HTTP_RESP_HDRS bytes, allocated by the first og_http_req_add_header (NULL before). */
    char *resp_hdrs;
    size_t resp_hdrs_len;

    /* private to http_conn.c */
    char *hbuf; /* request line and header bytes; headers/path point into it */
    size_t hlen, hcap;
    uint32_t *hoff; /* offsets during parsing: name_off, name_len, value_off, value_len per header */
    size_t hoff_cap;
    size_t body_cap;
};

struct og_http_conn {
    llhttp_t parser;
    og_http_conn_state_t state; /* read freely; changed only by conn_set_state (http_conn.c) */
    const og_http_io_t *io;
    og_http_shared_t *shared;
    og_http_req_t *req; /* being parsed or with the handler; NULL when idle */
    char *stash;        /* unparsed bytes held while a request is with the handler */
    size_t stash_len, stash_off;
    uint64_t id;       /* connection id for logs */
    unsigned requests; /* requests served on this connection */
    size_t url_len;    /* request-target bytes at the start of req->hbuf */
    int reject_status; /* set by parser callbacks: 413/431 found while parsing */
    int hstate;        /* which header part the parser is in (http_conn.c) */
    int event;         /* why llhttp_execute paused (http_conn.c) */
    bool dispatched;   /* req is with the handler: it owns the connection's lifetime too */
    bool peer_eof;     /* peer half-closed: finish the request in flight, then close */
    bool io_closed;
    bool reading;
    bool feeding; /* inside og_http_conn_feed: responses must not re-enter parsing */
    void *data;   /* for the transport */
};

/* Initializes `c` (caller-allocated, typically embedded in the transport's struct). */
void og_http_conn_init(og_http_conn_t *c, og_http_shared_t *shared, const og_http_io_t *io, uint64_t id);

/* Starts the connection: arms the idle timer and reading. */
void og_http_conn_start(og_http_conn_t *c);

/* Bytes received. The core parses what it can and keeps (copies) what it cannot handle yet;
 * the buffer is the caller's again on return. */
void og_http_conn_feed(og_http_conn_t *c, const char *data, size_t len);

/* The peer closed its side (EOF). */
void og_http_conn_eof(og_http_conn_t *c);

/* The connection's timer fired. */
void og_http_conn_timeout(og_http_conn_t *c);

/* Queued bytes went out; the core may resume parsing pipelined requests. */
void og_http_conn_drained(og_http_conn_t *c);

/* Close now (drain of an idle connection, write error, shutdown). Safe in any state. */
void og_http_conn_close(og_http_conn_t *c);

/* The transport has finished closing (after io->close or a socket error). */
void og_http_conn_io_closed(og_http_conn_t *c);

/* True when no request is being received or handled (a drain may close it). */
bool og_http_conn_is_idle(const og_http_conn_t *c);

/* Adds a header to whatever response `req` gets. False (nothing added) when the space for
 * such headers (OG_HTTP_RESP_HDRS bytes) is used up, the name/value contain CR or LF, or out
 * of memory. */
#define OG_HTTP_RESP_HDRS 160
bool og_http_req_add_header(og_http_req_t *req, const char *name, const char *value);

/* Returns the value of the first header named `name` (case-insensitive), or NULL. */
const char *og_http_req_header(const og_http_req_t *req, const char *name, size_t *len);

/* Frees the request's input (its target, header bytes and array, body) once the handler has
 * read all it needs, for a request that waits long for its answer (a send at a slow provider):
 * path, query, headers and body are empty from then on; the answer, its access-log line
 * (method, route, request id) and the connection work as before. */
void og_http_req_drop_input(og_http_req_t *req);

/* Sends the response to `req` and finishes it. Adds Date, Content-Length, X-Request-Id and
 * Connection headers itself. `extra` headers are written as given. `ctype` may be NULL when
 * there is no body. After this call `req` is gone. */
void og_http_respond(og_http_req_t *req, int status, const og_http_header_t *extra, size_t nextra,
                     const char *ctype, const char *body, size_t body_len);

/* Reason phrase for a status code ("OK", "Not Found", ...). */
const char *og_http_reason(int status);

#endif
