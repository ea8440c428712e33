/*
 * Outbound HTTP: libcurl's multi-socket API on the worker's libuv loop. See
 * include/net/omnigate/http_client.h.
 *
 * curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and when to wake it up
 * (CURLMOPT_TIMERFUNCTION); we watch each socket with one uv_poll_t and wake curl with
 * curl_multi_socket_action, then collect finished transfers from curl_multi_info_read.
 * A request rides on its easy handle through CURLOPT_PRIVATE.
 *
 * Two descriptor hazards shape the socket code. uv_poll_t must be closed while its fd is
 * still open: libuv removes the fd from epoll at close time, and if the number has already
 * been reused (by curl's next connection or by an accepted client), it would silently
 * unregister the wrong socket. curl normally announces CURL_POLL_REMOVE before it closes a
 * socket, but not on every path (a connection evicted from a full cache, for one), so we
 * also close sockets ourselves (CURLOPT_CLOSESOCKETFUNCTION) and retire the poll handle
 * first. And poll handles are found by fd in our own table rather than through
 * curl_multi_assign: that call is refused inside curl's callbacks on some libcurl versions,
 * and a stale socketp handed back for a reused fd would point at freed memory.
 */
#include "omnigate/http_client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/socket.h>

#include <curl/curl.h>

#include "og_build.h"
#include "omnigate/addrguard.h"
#include "omnigate/util.h"

_Static_assert(OG_HC_ERRBUF == CURL_ERROR_SIZE, "errbuf must be CURL_ERROR_SIZE bytes");

enum { R_IDLE = 0, R_RUNNING, R_DEFERRED };

/* One watched curl socket. Lives in its own allocation, freed in its close_cb, because a
 * closing poll handle outlives the moment curl forgets the socket. */
typedef struct hc_sock {
    uv_poll_t poll;
    og_hc_t *hc;
    curl_socket_t fd;
    int events;   /* what curl asked us to watch; 0 while it wants nothing (a kept-alive idle connection) */
    int watching; /* what the poll handle watches (0: stopped) */
    bool conn; /* a connection socket opened through opensocket_cb (curl closes it through closesocket_cb) */
} hc_sock_t;

typedef og_hc_kind_t hc_kind_t;

typedef struct hc_easy {
    CURL *e;
    hc_kind_t kind;
} hc_easy_t;

struct og_hc {
    uv_loop_t *loop;
    og_log_t *log;
    CURLM *multi;
    uv_timer_t timer; /* curl's own timeout (CURLMOPT_TIMERFUNCTION) */
#if OG_TEST_ROUTES
    int fail_starts; /* og_hc_test_fail_start */
#endif
    uv_timer_t defer; /* runs deferred completions, then the teardown when closing */
    /* The live (not closing) poll handle of each curl socket, indexed by fd. */
    hc_sock_t **by_fd;
    size_t nby_fd;
    og_hc_req_t *inflight; /* doubly linked through prev/next */
    /* Finished easy handles kept with their options (not reset): a request of the same kind
     * (hc_kind_t: one channel's requests all are) sets only its URL, body and headers. */
    hc_easy_t easy_pool[OG_HC_EASY_POOL];
    int neasy;
    og_hc_req_t *dq_head, *dq_tail; /* completions waiting for the defer timer */
    int handles;                    /* uv handles not yet through their close_cb */
    bool closing;                   /* og_hc_close was called */
    bool torn_down;                 /* curl is gone and every handle is closing */
    void (*closed)(void *arg);
    void *closed_arg;
};

static bool curl_ready;

const char *og_hc_result_name(og_hc_result_t r)
{
    switch (r) {
    case OG_HC_OK:
        return "ok";
    case OG_HC_TIMEOUT:
        return "timeout";
    case OG_HC_UNREACHABLE:
        return "unreachable";
    case OG_HC_TOO_LARGE:
        return "too_large";
    case OG_HC_ERROR:
        return "error";
    case OG_HC_CANCELLED:
        return "cancelled";
    case OG_HC_BLOCKED:
        return "blocked";
    }
    return "?";
}

uv_loop_t *og_hc_loop(og_hc_t *hc)
{
    return hc->loop;
}

og_log_t *og_hc_log(og_hc_t *hc)
{
    return hc->log;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* Appends the printf-style line to *list: formatted on the stack (a longer line in an
 * allocation of its own), then copied once into the list libcurl sends; the copy here may hold
 * a credential, so it is wiped. */
static bool list_add(struct curl_slist **list, const char *fmt, va_list ap)
{
    char buf[512], *h = buf;
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    if (n >= 0 && (size_t)n >= sizeof(buf))
        n = vasprintf(&h, fmt, again);
    va_end(again);
    if (n < 0)
        return false;
    struct curl_slist *l = curl_slist_append(*list, h);
    explicit_bzero(h, (size_t)n);
    if (h != buf)
        free(h);
    if (l == NULL)
        return false;
    *list = l;
    return true;
}

bool og_hc_req_add_header(og_hc_req_t *r, const char *fmt, ...)
{
    if (r->nheaders >= OG_HC_MAX_HEADERS)
        return false;
    va_list ap;
    va_start(ap, fmt);
    struct curl_slist *l = r->headers;
    bool ok = list_add(&l, fmt, ap);
    va_end(ap);
    r->headers = l;
    if (ok)
        r->nheaders++;
    return ok;
}

/* Line i of the first n lines of list l, or NULL when i is not one of them. */
static const char *nth_line(const struct curl_slist *l, int n, int i)
{
    if (i < 0 || i >= n)
        return NULL;
    for (; l != NULL && i > 0; i--)
        l = l->next;
    return l != NULL ? l->data : NULL;
}

const char *og_hc_req_header(const og_hc_req_t *r, int i)
{
    return nth_line(r->headers, r->nheaders, i);
}

/* A shared list starts with "Expect:" (no 100-continue round trip before bodies over 1 KiB), so
 * that a request naming one needs no line of its own for it. */
struct og_hc_headers {
    struct curl_slist *list;
    int n; /* lines added, "Expect:" not counted */
};

bool og_hc_headers_add(og_hc_headers_t **hp, const char *fmt, ...)
{
    og_hc_headers_t *h = *hp;
    if (h == NULL) {
        if ((h = calloc(1, sizeof(*h))) == NULL)
            return false;
        if ((h->list = curl_slist_append(NULL, "Expect:")) == NULL) {
            free(h);
            return false;
        }
        *hp = h;
    }
    if (h->n >= OG_HC_MAX_HEADERS)
        return false;
    va_list ap;
    va_start(ap, fmt);
    bool ok = list_add(&h->list, fmt, ap);
    va_end(ap);
    if (ok)
        h->n++;
    return ok;
}

const char *og_hc_headers_line(const og_hc_headers_t *h, int i)
{
    return h != NULL ? nth_line(h->list->next, h->n, i) : NULL; /* after its "Expect:" */
}

void og_hc_headers_free(og_hc_headers_t *h)
{
    if (h != NULL) {
        curl_slist_free_all(h->list);
        free(h);
    }
}

/* Ends the loan of r's shared lines to its own list (make_easy), so that freeing r's list
 * frees only its own lines. */
static void unlink_shared(og_hc_req_t *r)
{
    if (r->linked != NULL) {
        ((struct curl_slist *)r->linked)->next = NULL;
        r->linked = NULL;
    }
}

static void wipe_free(char *s, size_t len)
{
    if (s != NULL) {
        explicit_bzero(s, len);
        free(s);
    }
}

void og_hc_req_clear(og_hc_req_t *r)
{
    free(r->url);
    unlink_shared(r);
    curl_slist_free_all(r->headers);
    wipe_free(r->body, r->body_len);
    free(r->user);
    if (r->password != NULL)
        wipe_free(r->password, strlen(r->password));
    free(r->resp);
    memset(r, 0, sizeof(*r));
}

static void inflight_add(og_hc_t *hc, og_hc_req_t *r)
{
    r->prev = NULL;
    r->next = hc->inflight;
    if (hc->inflight != NULL)
        hc->inflight->prev = r;
    hc->inflight = r;
}

static void inflight_remove(og_hc_t *hc, og_hc_req_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        hc->inflight = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void defer_cb(uv_timer_t *t);

/* Queues r for completion from the defer timer. */
static void defer(og_hc_t *hc, og_hc_req_t *r)
{
    r->state = R_DEFERRED;
    r->next = NULL;
    if (hc->dq_tail != NULL)
        hc->dq_tail->next = r;
    else
        hc->dq_head = r;
    hc->dq_tail = r;
    if (!uv_is_active((uv_handle_t *)&hc->defer))
        uv_timer_start(&hc->defer, defer_cb, 0, 0);
}

static void finish(og_hc_req_t *r)
{
    r->latency_us = (uv_hrtime() - r->start_ns) / 1000;
    r->state = R_IDLE;
    r->hc = NULL;
    r->done(r);
}

/* Detaches r's easy handle from curl; the connection goes back to the cache if reusable. */
static void release_easy(og_hc_t *hc, og_hc_req_t *r)
{
    if (r->easy != NULL) {
        curl_multi_remove_handle(hc->multi, r->easy);
        if (hc->neasy < OG_HC_EASY_POOL && !hc->closing) {
            hc->easy_pool[hc->neasy++] = (hc_easy_t){r->easy, r->kind};
        } else {
            curl_easy_cleanup(r->easy);
        }
        r->easy = NULL;
    }
    unlink_shared(r);
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    og_hc_req_t *r = userdata;
    size_t n = size * nmemb;
    size_t cap = r->max_response ? r->max_response : OG_HC_MAX_RESPONSE;
    if (n > cap - r->resp_len) {
        r->over_cap = true;
        return 0; /* anything but n aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (r->drop_body) {
        r->resp_len += n;
        return n;
    }
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t want = r->resp_cap ? r->resp_cap : 1024;
        while (want < r->resp_len + n + 1)
            want *= 2;
        if (want > cap + 1)
            want = cap + 1;
        char *p = realloc(r->resp, want);
        if (p == NULL)
            return 0;
        r->resp = p;
        r->resp_cap = want;
    }
    memcpy(r->resp + r->resp_len, ptr, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    return n;
}

/* ---- sockets ------------------------------------------------------------------------------- */

/* The poll handle of fd, made (not started) if it has none. NULL when out of memory or libuv
 * refuses the socket. */
static hc_sock_t *sock_get(og_hc_t *hc, curl_socket_t fd)
{
    if ((size_t)fd >= hc->nby_fd) {
        size_t n = hc->nby_fd ? hc->nby_fd : 64;
        while (n <= (size_t)fd)
            n *= 2;
        hc_sock_t **t = realloc(hc->by_fd, n * sizeof(*t));
        if (t == NULL)
            return NULL;
        memset(t + hc->nby_fd, 0, (n - hc->nby_fd) * sizeof(*t));
        hc->by_fd = t;
        hc->nby_fd = n;
    }
    hc_sock_t *k = hc->by_fd[fd];
    if (k != NULL)
        return k;
    if ((k = calloc(1, sizeof(*k))) == NULL)
        return NULL;
    int rc = uv_poll_init_socket(hc->loop, &k->poll, fd);
    if (rc != 0) {
        if (hc->log != NULL)
            og_log(hc->log, OG_LOG_ERROR, "http client cannot watch a socket", "\"fd\":%d,\"error\":\"%s\"",
                   (int)fd, uv_strerror(rc));
        free(k);
        return NULL;
    }
    k->hc = hc;
    k->fd = fd;
    hc->handles++;
    hc->by_fd[fd] = k;
    return k;
}

/* curl asks us for each socket it is about to connect, with the address its resolver gave. Its
 * poll handle is made here, marked as a connection socket's (kept between transfers, see
 * socket_cb). For public_only requests a name that resolves inside the network is refused like
 * a literal: a refused address makes curl try the host's next one; when none is left the
 * transfer fails (CURLE_COULDNT_CONNECT) and complete() reports OG_HC_BLOCKED. */
static curl_socket_t opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    og_hc_req_t *r = clientp;
    if (r->kind.public_only && (purpose != CURLSOCKTYPE_IPCXN || og_addr_class(&a->addr) != OG_ADDR_PUBLIC)) {
        r->blocked = true;
        return CURL_SOCKET_BAD;
    }
    curl_socket_t fd = socket(a->family, a->socktype, a->protocol);
    if (fd < 0)
        return CURL_SOCKET_BAD;
    hc_sock_t *k = sock_get(r->hc, fd);
    if (k == NULL) {
        close(fd);
        return CURL_SOCKET_BAD; /* curl fails the transfer */
    }
    k->conn = true;
    return fd;
}

/* One uv handle finished closing; the last one, after the teardown, frees hc. */
static void handle_gone(og_hc_t *hc)
{
    if (--hc->handles == 0 && hc->torn_down) {
        void (*closed)(void *) = hc->closed;
        void *arg = hc->closed_arg;
        free(hc->by_fd);
        free(hc);
        if (closed != NULL)
            closed(arg);
    }
}

static void sock_closed(uv_handle_t *h)
{
    hc_sock_t *k = container_of((uv_poll_t *)h, hc_sock_t, poll);
    og_hc_t *hc = k->hc;
    free(k);
    handle_gone(hc);
}

/* Stops watching fd. Must run while fd is still open (see the top of this file). */
static void sock_retire(og_hc_t *hc, curl_socket_t fd)
{
    if (fd < 0 || (size_t)fd >= hc->nby_fd || hc->by_fd[fd] == NULL)
        return;
    hc_sock_t *k = hc->by_fd[fd];
    hc->by_fd[fd] = NULL;
    uv_close((uv_handle_t *)&k->poll, sock_closed);
}

static void check_done(og_hc_t *hc);

static void poll_cb(uv_poll_t *p, int status, int events)
{
    hc_sock_t *k = container_of(p, hc_sock_t, poll);
    og_hc_t *hc = k->hc;
    if (k->events == 0) {
        /* An idle kept-alive connection became readable (the server closed it, most likely):
         * nothing for curl now, which checks a connection before it reuses one. */
        uv_poll_stop(&k->poll);
        k->watching = 0;
        return;
    }
    int flags = 0;
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
    } else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    int running;
    /* k may be retired (not freed: that waits for its close_cb) during this call. */
    curl_multi_socket_action(hc->multi, k->fd, flags, &running);
    /* On POLLERR libuv has stopped the handle, but curl still counts on it being watched
     * (it only calls socket_cb when what it wants changes): watch again unless curl let go. */
    if (status < 0 && k->fd < (curl_socket_t)hc->nby_fd && hc->by_fd[k->fd] == k) {
        k->watching = k->events;
        if (k->events)
            uv_poll_start(&k->poll, k->events, poll_cb);
    }
    check_done(hc);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    og_hc_t *hc = userp;
    hc_sock_t *k = fd >= 0 && (size_t)fd < hc->nby_fd ? hc->by_fd[fd] : NULL;
    if (what == CURL_POLL_REMOVE) {
        /* A connection socket's handle is kept, watching for reads: curl lets go of a kept-alive
         * connection after each transfer and wants it read again on the next one, and
         * uv_poll_start costs two epoll_ctl calls even with the same events (libuv forgets the
         * registration when a handle stops). It goes when curl closes the socket
         * (closesocket_cb). Other sockets (the resolver's) curl closes itself: retired now. */
        if (k != NULL && !k->conn) {
            sock_retire(hc, fd);
        } else if (k != NULL) {
            k->events = 0;
            if (k->watching != 0 && k->watching != UV_READABLE) {
                uv_poll_start(&k->poll, UV_READABLE, poll_cb);
                k->watching = UV_READABLE;
            }
        }
        return 0;
    }
    if (fd < 0 || (k == NULL && (k = sock_get(hc, fd)) == NULL))
        return -1; /* curl fails the transfers on this socket */
    int events = 0;
    if (what & CURL_POLL_IN)
        events |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        events |= UV_WRITABLE;
    k->events = events;
    if (k->watching != events) {
        uv_poll_start(&k->poll, events, poll_cb);
        k->watching = events;
    }
    return 0;
}

/* curl closes every connection socket through here, on every path, cache evictions and
 * curl_multi_cleanup included: retire the poll handle while the fd is still ours. */
static int closesocket_cb(void *clientp, curl_socket_t fd)
{
    og_hc_t *hc = clientp;
    sock_retire(hc, fd);
    return close(fd);
}

static void timer_fired(uv_timer_t *t)
{
    og_hc_t *hc = container_of(t, og_hc_t, timer);
    int running;
    curl_multi_socket_action(hc->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(hc);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    og_hc_t *hc = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&hc->timer);
    else /* 0 means "as soon as possible": next loop turn, never from inside curl */
        uv_timer_start(&hc->timer, timer_fired, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- completion ---------------------------------------------------------------------------- */

static og_hc_result_t map_code(og_hc_req_t *r, CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return OG_HC_OK;
    case CURLE_OPERATION_TIMEDOUT: {
        /* The connect timeout (at most 5 s) fires before the request timeout: that host is
         * unreachable rather than slow. */
        long timeout = r->timeout_ms ? r->timeout_ms : OG_HC_DEFAULT_TIMEOUT;
        uint64_t elapsed_ms = (uv_hrtime() - r->start_ns) / 1000000;
        return elapsed_ms + 1 < (uint64_t)timeout ? OG_HC_UNREACHABLE : OG_HC_TIMEOUT;
    }
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
        return r->over_cap || rc == CURLE_FILESIZE_EXCEEDED ? OG_HC_TOO_LARGE : OG_HC_ERROR;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return OG_HC_UNREACHABLE;
    default:
        return OG_HC_ERROR;
    }
}

static void complete(og_hc_t *hc, CURL *easy, CURLcode rc)
{
    og_hc_req_t *r = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    r->http_status = status;
    curl_off_t retry_after = 0;
    if (curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK && retry_after > 0)
        r->retry_after_s = retry_after > 86400 * 7 ? 86400 * 7 : (long)retry_after;
    r->result = map_code(r, rc);
    if (r->result != OG_HC_OK && r->blocked && status == 0) {
        r->result = OG_HC_BLOCKED;
        snprintf(r->errbuf, sizeof(r->errbuf), "every address of the host is a non-public one");
    } else if (r->result == OG_HC_TOO_LARGE) {
        snprintf(r->errbuf, sizeof(r->errbuf), "response body over %zu bytes",
                 r->max_response ? r->max_response : (size_t)OG_HC_MAX_RESPONSE);
    } else if (r->result == OG_HC_OK) {
        r->errbuf[0] = '\0';
    } else if (r->errbuf[0] == '\0') {
        snprintf(r->errbuf, sizeof(r->errbuf), "%s", curl_easy_strerror(rc));
    }
    if (r->result != OG_HC_OK) {
        free(r->resp); /* a partial body means nothing */
        r->resp = NULL;
        r->resp_len = r->resp_cap = 0;
    }
    inflight_remove(hc, r);
    release_easy(hc, r);
    finish(r);
}

static void check_done(og_hc_t *hc)
{
    CURLMsg *msg;
    int left;
    /* A done callback may close hc: that only queues work for the defer timer, and removes
     * the other transfers (with their messages) from the multi handle, so looping is safe. */
    while ((msg = curl_multi_info_read(hc->multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE)
            complete(hc, msg->easy_handle, msg->data.result);
    }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

og_hc_t *og_hc_new(uv_loop_t *loop, og_log_t *log)
{
    if (!curl_ready) {
        /* Process-wide and not thread-safe on every libcurl; workers are single-threaded
         * processes, so the first client of the process does it once. */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return NULL;
        curl_ready = true;
    }
    /* Without an asynchronous resolver (threaded or c-ares), curl resolves a provider's host
     * name with a blocking getaddrinfo inside curl_multi_socket_action: on the worker's loop. */
    if (!(curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_ASYNCHDNS)) {
        if (log != NULL)
            og_log(log, OG_LOG_ERROR, "libcurl has no asynchronous resolver (CURL_VERSION_ASYNCHDNS)",
                   "\"libcurl\":\"%s\"", curl_version_info(CURLVERSION_NOW)->version);
        return NULL;
    }
    og_hc_t *hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return NULL;
    hc->loop = loop;
    hc->log = log;
    hc->multi = curl_multi_init();
    if (hc->multi == NULL) {
        free(hc);
        return NULL;
    }
    curl_multi_setopt(hc->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(hc->multi, CURLMOPT_SOCKETDATA, hc);
    curl_multi_setopt(hc->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(hc->multi, CURLMOPT_TIMERDATA, hc);
    curl_multi_setopt(hc->multi, CURLMOPT_MAXCONNECTS, (long)OG_HC_MAX_CACHED_CONNS);
    /* No per-host or total cap on live connections: over HTTP/1.1 a connection carries one
     * request at a time, so a cap would queue attempts inside curl behind slow ones. */
    curl_multi_setopt(hc->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    curl_multi_setopt(hc->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    uv_timer_init(loop, &hc->timer);
    uv_timer_init(loop, &hc->defer);
    hc->handles = 2;
    return hc;
}

static hc_kind_t kind_of(const og_hc_req_t *r)
{
    const char *method = r->method ? r->method : "GET";
    return (hc_kind_t){.timeout_ms = r->timeout_ms > 0 ? r->timeout_ms : OG_HC_DEFAULT_TIMEOUT,
                       .cap = r->max_response ? r->max_response : OG_HC_MAX_RESPONSE,
                       .method = method,
                       .body = strcmp(method, "GET") != 0 && (r->body != NULL || strcmp(method, "POST") == 0),
                       .auth = r->user != NULL,
                       .public_only = r->public_only,
                       .https_only = r->https_only};
}

static bool same_kind(const hc_kind_t *a, const hc_kind_t *b)
{
    return a->timeout_ms == b->timeout_ms && a->cap == b->cap && strcmp(a->method, b->method) == 0 &&
           a->body == b->body && a->auth == b->auth && a->public_only == b->public_only &&
           a->https_only == b->https_only;
}

/* The options of a kind of request, on a handle fresh from curl_easy_init or reset. */
static bool set_kind(og_hc_t *hc, CURL *e, const hc_kind_t *k)
{
    long connect_timeout = k->timeout_ms < OG_HC_CONNECT_TIMEOUT ? k->timeout_ms : OG_HC_CONNECT_TIMEOUT;
    bool ok = true;
    ok &= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, k->https_only ? "https" : "http,https") == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, k->timeout_ms) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK; /* ignore http_proxy & co. */
    ok &= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_USERAGENT, "omnigate/" OG_VERSION) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb) == CURLE_OK;
    /* A receive buffer of 1 KiB instead of libcurl's 16: provider answers are a few hundred
     * bytes, and every request in flight holds one (issue 20: memory per send in flight). A
     * larger answer only takes more reads. */
    ok &= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)OG_HC_RECV_BUFFER) == CURLE_OK;
    /* Refuses an announced Content-Length over the cap before reading the body; write_cb
     * enforces the cap on chunked or unannounced bodies. */
    ok &= curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)k->cap) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, closesocket_cb) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, hc) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb) == CURLE_OK;
    /* TLS peer and host verification stay at libcurl's default: on. */
    if (strcmp(k->method, "GET") == 0)
        ok &= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    else if (strcmp(k->method, "POST") != 0)
        ok &= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, k->method) == CURLE_OK;
    if (k->auth)
        ok &= curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) == CURLE_OK;
    return ok;
}

/* A handle for `r`: a pooled one prepared for the same kind of request if there is one (only
 * the URL, body, headers, credentials and r's own pointers are set), else a pooled or new one
 * set up from scratch. */
static CURL *make_easy(og_hc_t *hc, og_hc_req_t *r)
{
    r->kind = kind_of(r);
    CURL *e = NULL;
    bool prepared = false;
    for (int i = hc->neasy - 1; i >= 0 && i >= hc->neasy - 8; i--) { /* the most recent few */
        if (same_kind(&hc->easy_pool[i].kind, &r->kind)) {
            e = hc->easy_pool[i].e;
            hc->easy_pool[i] = hc->easy_pool[--hc->neasy];
            prepared = true;
            break;
        }
    }
    if (e == NULL && hc->neasy > 0) {
        e = hc->easy_pool[--hc->neasy].e;
        curl_easy_reset(e);
    }
    if (e == NULL && (e = curl_easy_init()) == NULL)
        return NULL;
    /* The request's own lines, then the shared ones (lent for the transfer: unlink_shared),
     * which start with "Expect:"; without shared ones, "Expect:" ends its own: no
     * "Expect: 100-continue" round trip before bodies over 1 KiB. */
    unlink_shared(r);
    struct curl_slist *list = r->headers;
    if (r->shared_headers != NULL) {
        struct curl_slist *shared = r->shared_headers->list;
        if (list != NULL) {
            struct curl_slist *t = list;
            while (t->next != NULL)
                t = t->next;
            t->next = shared;
            r->linked = t;
        } else {
            list = shared;
        }
    } else if (!r->expect_off) {
        struct curl_slist *l = curl_slist_append(r->headers, "Expect:");
        if (l == NULL)
            goto fail;
        list = r->headers = l;
        r->expect_off = true;
    }

    bool ok = prepared || set_kind(hc, e, &r->kind);
    ok &= curl_easy_setopt(e, CURLOPT_URL, r->url) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_PRIVATE, r) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_HTTPHEADER, list) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf) == CURLE_OK;
    ok &= curl_easy_setopt(e, CURLOPT_WRITEDATA, r) == CURLE_OK;
    if (r->kind.body) {
        ok &= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len) == CURLE_OK;
        ok &= curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "") == CURLE_OK;
    }
    ok &= curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, r) == CURLE_OK;
    if (r->kind.auth) {
        ok &= curl_easy_setopt(e, CURLOPT_USERNAME, r->user) == CURLE_OK;
        ok &= curl_easy_setopt(e, CURLOPT_PASSWORD, r->password ? r->password : "") == CURLE_OK;
    }
    if (!ok)
        goto fail;
    return e;

fail:
    unlink_shared(r);
    curl_easy_cleanup(e);
    return NULL;
}

static void reset_results(og_hc_req_t *r)
{
    r->result = OG_HC_OK;
    r->http_status = 0;
    free(r->resp);
    r->resp = NULL;
    r->resp_len = r->resp_cap = 0;
    r->latency_us = 0;
    r->errbuf[0] = '\0';
    r->over_cap = false;
    r->blocked = false;
    r->retry_after_s = 0;
    r->easy = NULL;
}

#if OG_TEST_ROUTES
void og_hc_test_fail_start(og_hc_t *hc, int count)
{
    hc->fail_starts = count;
}

int og_hc_test_fail_left(const og_hc_t *hc)
{
    return hc->fail_starts;
}

static bool test_fail_start(og_hc_t *hc)
{
    if (hc->fail_starts <= 0)
        return false;
    hc->fail_starts--;
    return true;
}
#else
#define test_fail_start(hc) false
#endif

int og_hc_complete_later(og_hc_t *hc, og_hc_req_t *r, og_hc_result_t result, const char *why)
{
    if (hc->torn_down || r->state != R_IDLE || test_fail_start(hc))
        return -1;
    reset_results(r);
    r->start_ns = uv_hrtime();
    r->hc = hc;
    r->result = result;
    snprintf(r->errbuf, sizeof(r->errbuf), "%s", why ? why : "");
    defer(hc, r);
    return 0;
}

int og_hc_start(og_hc_t *hc, og_hc_req_t *r)
{
    if (hc->torn_down || r->state != R_IDLE || test_fail_start(hc)) /* closed, or r is in flight */
        return -1;
    if (hc->closing)
        return og_hc_complete_later(hc, r, OG_HC_CANCELLED, "the HTTP client is closing");
    if (r->url == NULL)
        return og_hc_complete_later(hc, r, OG_HC_ERROR, "no URL");
    reset_results(r);
    r->start_ns = uv_hrtime();
    r->hc = hc;
    CURL *e = make_easy(hc, r);
    if (e == NULL)
        return og_hc_complete_later(hc, r, OG_HC_ERROR, "cannot set up the request");
    r->easy = e;
    /* curl_multi_add_handle only arms the timer (timer_cb); the transfer starts from the
     * loop, so done can never run inside this call. */
    if (curl_multi_add_handle(hc->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        r->easy = NULL;
        unlink_shared(r);
        return og_hc_complete_later(hc, r, OG_HC_ERROR, "cannot add the request");
    }
    r->state = R_RUNNING;
    inflight_add(hc, r);
    return 0;
}

static void handle_closed(uv_handle_t *h)
{
    handle_gone(h->data);
}

/* Every request has been answered: let curl close its connections (closesocket_cb retires
 * their poll handles first), then close what is left. */
static void teardown(og_hc_t *hc)
{
    hc->torn_down = true;
    while (hc->neasy > 0)
        curl_easy_cleanup(hc->easy_pool[--hc->neasy].e);
    curl_multi_cleanup(hc->multi);
    hc->multi = NULL;
    for (size_t fd = 0; fd < hc->nby_fd; fd++)
        sock_retire(hc, (curl_socket_t)fd);
    hc->timer.data = hc;
    hc->defer.data = hc;
    uv_close((uv_handle_t *)&hc->timer, handle_closed);
    uv_close((uv_handle_t *)&hc->defer, handle_closed);
}

static void defer_cb(uv_timer_t *t)
{
    og_hc_t *hc = container_of(t, og_hc_t, defer);
    /* Completions queued by these done callbacks (a start while closing) run here too. */
    while (hc->dq_head != NULL) {
        og_hc_req_t *r = hc->dq_head;
        hc->dq_head = r->next;
        if (hc->dq_head == NULL)
            hc->dq_tail = NULL;
        r->next = NULL;
        finish(r);
    }
    if (hc->closing && !hc->torn_down)
        teardown(hc);
}

void og_hc_close(og_hc_t *hc, void (*closed)(void *arg), void *arg)
{
    if (hc->closing)
        return;
    hc->closing = true;
    hc->closed = closed;
    hc->closed_arg = arg;
    while (hc->inflight != NULL) {
        og_hc_req_t *r = hc->inflight;
        inflight_remove(hc, r);
        release_easy(hc, r);
        free(r->resp);
        r->resp = NULL;
        r->resp_len = r->resp_cap = 0;
        r->result = OG_HC_CANCELLED;
        snprintf(r->errbuf, sizeof(r->errbuf), "cancelled: the HTTP client is closing");
        defer(hc, r);
    }
    uv_timer_stop(&hc->timer);
    /* The teardown runs from the defer timer, after every cancelled done, so closing from
     * inside a done callback never frees curl under check_done's feet. */
    uv_timer_start(&hc->defer, defer_cb, 0, 0);
}

bool og_hc_url_parts(const char *url, char *scheme, size_t scheme_cap, char *host, size_t host_cap,
                     bool *credentials)
{
    CURLU *u = curl_url();
    char *sch = NULL, *h = NULL, *user = NULL, *pass = NULL;
    bool ok = u != NULL && curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &sch, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK && h[0] != '\0' &&
              strlen(sch) < scheme_cap && strlen(h) < host_cap;
    if (ok) {
        snprintf(scheme, scheme_cap, "%s", sch);
        snprintf(host, host_cap, "%s", h);
        *credentials = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
                       curl_url_get(u, CURLUPART_PASSWORD, &pass, 0) == CURLUE_OK;
    }
    curl_free(sch);
    curl_free(h);
    curl_free(user);
    curl_free(pass);
    curl_url_cleanup(u);
    return ok;
}
