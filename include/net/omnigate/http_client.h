/*
 * Outbound HTTP on a worker's loop: libcurl's multi-socket API driven by libuv (one uv_poll_t
 * per curl socket, one uv_timer_t for curl's timeout), with connection reuse, a per-request
 * timeout and a bounded response. Responsible for moving one request and its answer; not
 * for what either means (the provider adapters in src/product/providers/ decide that).
 *
 * One og_hc_t per worker. A request is one og_hc_req_t owned by the caller: fill it, start
 * it, and its done callback runs exactly once, always later from the loop (never from inside
 * og_hc_start). After done the client no longer touches the req: done may clear, reuse or
 * free it. Nothing here blocks the loop (libcurl's threaded resolver does the DNS).
 */
#ifndef OMNIGATE_HTTP_CLIENT_H
#define OMNIGATE_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "og_build.h"

#include "omnigate/log.h"

#define OG_HC_MAX_HEADERS      8
#define OG_HC_MAX_RESPONSE     (256 * 1024) /* default response cap, bytes */
#define OG_HC_RECV_BUFFER      1024         /* libcurl's receive buffer per request (its minimum), bytes */
#define OG_HC_DEFAULT_TIMEOUT  10000        /* ms, when a req leaves timeout_ms at 0 */
#define OG_HC_CONNECT_TIMEOUT  5000         /* ms, at most; never above the request timeout */
#define OG_HC_MAX_CACHED_CONNS 2048         /* idle connections kept for reuse (per worker) */
#define OG_HC_EASY_POOL        128          /* finished easy handles kept (reset) for reuse */
#define OG_HC_ERRBUF           256          /* == CURL_ERROR_SIZE */

typedef struct og_hc og_hc_t;
typedef struct og_hc_req og_hc_req_t;

typedef enum og_hc_result {
    OG_HC_OK = 0,      /* an HTTP answer arrived (any status: see http_status) */
    OG_HC_TIMEOUT,     /* no complete answer within timeout_ms */
    OG_HC_UNREACHABLE, /* DNS, connect (refused or timed out), TLS, reset, send or receive error */
    OG_HC_TOO_LARGE,   /* the answer's body is over the cap */
    OG_HC_ERROR,       /* anything else: a malformed answer, a bad URL, out of memory */
    OG_HC_CANCELLED,   /* og_hc_close ran while the request was in flight */
    OG_HC_BLOCKED,     /* public_only: every address of the host was refused (addrguard.h) */
} og_hc_result_t;

/* Private: what a prepared easy handle was last set up for, beside the options every request
 * has (http_client.c). A request of the same kind reuses it without setting these again. */
typedef struct og_hc_kind {
    long timeout_ms;
    size_t cap;
    const char *method; /* the request's (static) method string */
    bool body, auth;
    bool public_only, https_only;
} og_hc_kind_t;

struct og_hc_req {
    /* Request, filled by the caller. Strings are owned by the req (malloc'd) and freed by
     * og_hc_req_clear; body and password are wiped first since they may hold secrets. */
    const char *method; /* static string: "POST", "GET", ...; NULL: "GET" */
    char *url;          /* http:// or https:// only */
    /* The "Name: value" lines added by og_hc_req_add_header, as the struct curl_slist * libcurl
     * sends: made once, not copied again when the request starts (og_hc_req_header reads
     * them). */
    void *headers;
    int nheaders;
    /* Lines sent after the request's own, shared with other requests (og_hc_headers_add); not
     * owned: they must outlive the request. NULL: none. */
    const struct og_hc_headers *shared_headers;
    char *body; /* sent as is; NULL: no body */
    size_t body_len;
    char *user, *password; /* HTTP Basic auth when user != NULL */
    long timeout_ms;       /* whole request; 0: OG_HC_DEFAULT_TIMEOUT */
    size_t max_response;   /* body cap in bytes; 0: OG_HC_MAX_RESPONSE */
    /* For URLs a tenant chose (API.md §12). public_only: connect only to public addresses,
     * judged by addrguard.h on each address curl is about to connect to, after DNS (a request
     * whose every address is refused completes OG_HC_BLOCKED). Connections are reused within
     * one og_hc_t: give such requests a client of their own, or a connection opened for a
     * request without the check could carry them. https_only: refuse http:// (OG_HC_ERROR).
     * drop_body: the body is read up to max_response and kept nowhere (resp stays NULL,
     * resp_len counts it); a longer one ends the transfer as OG_HC_TOO_LARGE, http_status
     * still set. */
    bool public_only;
    bool https_only;
    bool drop_body;
    void (*done)(og_hc_req_t *r);
    void *arg;

    /* Results, set before done is called. */
    og_hc_result_t result;
    long http_status; /* whenever a status line arrived (even on TIMEOUT/TOO_LARGE), else 0 */
    char *resp;       /* body, NUL-terminated, owned by the req; NULL when empty */
    size_t resp_len;
    uint64_t latency_us;       /* from og_hc_start to completion */
    long retry_after_s;        /* the answer's Retry-After in seconds (a date is converted), else 0 */
    char errbuf[OG_HC_ERRBUF]; /* what went wrong, for humans; "" on OG_HC_OK */

    /* private */
    og_hc_t *hc;
    void *easy;               /* CURL *, while in flight */
    bool expect_off;          /* headers end with "Expect:" (no 100-continue round trip) */
    void *linked;             /* the last of its own lines, lent the shared ones while in flight */
    og_hc_req_t *prev, *next; /* in flight: hc's in-flight list; deferred: hc's defer queue */
    uint64_t start_ns;
    size_t resp_cap;
    og_hc_kind_t kind; /* what its easy handle is set up for */
    int state;
    bool over_cap;
    bool blocked; /* public_only refused an address */
};

/* Creates the client of one worker's loop. `log` may be NULL. NULL on failure, and when
 * libcurl lacks an asynchronous resolver (logged to `log`): it would resolve host names with a
 * blocking getaddrinfo on the loop, so a gateway must not start with it. */
og_hc_t *og_hc_new(uv_loop_t *loop, og_log_t *log);

/* Sends r. r->done is called exactly once, later, from the loop, with r->result set; r must
 * stay valid until then. Returns 0, or -1 (and done is not called) only on misuse: r is
 * already in flight, or the client has finished closing. Between og_hc_close and its closed
 * callback a start completes with OG_HC_CANCELLED. */
int og_hc_start(og_hc_t *hc, og_hc_req_t *r);

/* Completes r later from the loop with `result` and `why` in errbuf, without sending
 * anything: for callers that must report a failure asynchronously. Same contract as
 * og_hc_start. */
int og_hc_complete_later(og_hc_t *hc, og_hc_req_t *r, og_hc_result_t result, const char *why);

#if OG_TEST_ROUTES
/* Test builds only: the next `count` calls of og_hc_start and og_hc_complete_later fail with
 * -1 as on misuse (done is not called), so that tests reach their callers' handling of it. */
void og_hc_test_fail_start(og_hc_t *hc, int count);
int og_hc_test_fail_left(const og_hc_t *hc);
#endif

/* Appends a "Name: value" header (printf-style). False when OG_HC_MAX_HEADERS are there already
 * or out of memory. */
bool og_hc_req_add_header(og_hc_req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The i-th header line added, or NULL past the last (tests, logs). */
const char *og_hc_req_header(const og_hc_req_t *r, int i);

/* Header lines made once and shared by many requests, such as those a provider channel sends
 * with every request (og_providers_init): a request names them in shared_headers instead of
 * adding copies of its own. og_hc_headers_add appends a printf-style line to *h, making the
 * list on the first call; false when out of memory or when OG_HC_MAX_HEADERS lines are there. */
typedef struct og_hc_headers og_hc_headers_t;
bool og_hc_headers_add(og_hc_headers_t **h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The i-th line added to h, or NULL past the last (h may be NULL). */
const char *og_hc_headers_line(const og_hc_headers_t *h, int i);

/* Frees h (NULL is fine); no request may name it any more. */
void og_hc_headers_free(og_hc_headers_t *h);

/* Frees what the req owns and zeroes all of it (done and arg included). Not while in flight. */
void og_hc_req_clear(og_hc_req_t *r);

/* The log given to og_hc_new (may be NULL). */
og_log_t *og_hc_log(og_hc_t *hc);

/* The loop given to og_hc_new. */
uv_loop_t *og_hc_loop(og_hc_t *hc);

/* Cancels every request in flight (each done is called once, from the loop, with
 * OG_HC_CANCELLED), closes the cached connections and every handle, then calls
 * closed(arg) from the loop and frees hc. Safe to call from inside a done callback. */
void og_hc_close(og_hc_t *hc, void (*closed)(void *arg), void *arg);

/* Splits an absolute URL as libcurl reads it: its scheme (lower case) and host (an IPv6
 * literal keeps its brackets) into the buffers, and whether it carries a user or password.
 * False when libcurl does not take it as a URL with a host, or a part does not fit. */
bool og_hc_url_parts(const char *url, char *scheme, size_t scheme_cap, char *host, size_t host_cap,
                     bool *credentials);

/* A short name for a result ("ok", "timeout", ...), for logs. */
const char *og_hc_result_name(og_hc_result_t r);

#endif
