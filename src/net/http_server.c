/*
 * Transport for the HTTP core on libuv. See include/net/omnigate/http_server.h. Closing
 * lingers when asked: after the shutdown it reads and discards what the peer still sends, so
 * the peer sees our final answer, not a reset.
 *
 * Lifetime: a connection owns a uv_tcp_t and a uv_timer_t embedded in one struct. It is
 * freed in release(), which the core calls once both handles are closed and no request is
 * in flight; until then a handler may still answer into it (the answer is dropped).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "omnigate/http_server.h"
#include "omnigate/util.h"

#define LINGER_MS              2000
#define FIRST_REQUEST_GRACE_MS 1000

struct og_server_conn {
    og_http_conn_t http; /* first: og_http_conn_t * converts back with container_of */
    uv_tcp_t tcp;
    uv_timer_t timer;
    og_server_t *srv;
    og_server_conn_t *prev, *next;
    int open_handles; /* handles not yet through their close_cb */
    bool closing;     /* uv_close or uv_shutdown issued */
    bool linger;      /* after shutdown: read and discard until EOF or LINGER_MS */
    bool lingering;
    /* The connection asked not to be read (io_read off: a request is being handled), but libuv
     * still reads: stopping and starting a stream's reads costs two epoll_ctl calls each time
     * (libuv forgets the registration), twice per request. Most clients send nothing more
     * before the answer; the first read that comes anyway stops reading for real and is handed
     * over, and the connection keeps it until it wants it (og_http_conn_feed). */
    bool read_paused;
    bool read_stopped; /* uv_read_stop done */
};

typedef struct write_op {
    uv_write_t req;
    char *data;
} write_op_t;

#define conn_of_http(c) container_of((c), og_server_conn_t, http)

static void close_handles(og_server_conn_t *sc);

/* ---- io callbacks for the core ---------------------------------------------------------- */

static void on_write(uv_write_t *wr, int status)
{
    write_op_t *op = container_of(wr, write_op_t, req);
    og_server_conn_t *sc = wr->data;
    free(op->data);
    free(op);
    if (sc->closing)
        return;
    if (status < 0) {
        og_http_conn_close(&sc->http);
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&sc->tcp) == 0)
        og_http_conn_drained(&sc->http);
}

/* A write failed (the peer reset, or out of memory): the socket is of no more use. The core
 * hears of it through og_http_conn_io_closed once the handles are closed, never from inside
 * io_write: the core may be in the middle of answering (og_http_io_t allows no synchronous
 * call back), and closing it there would free the request it is answering. */
static void write_failed(og_server_conn_t *sc, char *data)
{
    free(data);
    sc->closing = true;
    close_handles(sc);
}

/* Queues data[done..len) (data is ours) behind what the socket did not take at once. */
static void queue_write(og_server_conn_t *sc, char *data, size_t done, size_t len)
{
    write_op_t *op = malloc(sizeof(*op));
    if (op == NULL) {
        write_failed(sc, data);
        return;
    }
    op->data = data;
    op->req.data = sc;
    uv_buf_t buf = uv_buf_init(data + done, (unsigned)(len - done));
    if (uv_write(&op->req, (uv_stream_t *)&sc->tcp, &buf, 1, on_write) != 0) {
        free(op);
        write_failed(sc, data);
    }
}

static void io_write(og_http_conn_t *c, char *data, size_t len)
{
    og_server_conn_t *sc = conn_of_http(c);
    if (sc->closing) {
        free(data);
        return;
    }
    uv_buf_t buf = uv_buf_init(data, (unsigned)len);
    int n = uv_try_write((uv_stream_t *)&sc->tcp, &buf, 1);
    if (n == (int)len) {
        free(data);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        write_failed(sc, data);
        return;
    }
    queue_write(sc, data, n > 0 ? (size_t)n : 0, len);
}

/* Head and body in one writev; only a rest the socket did not take is copied (into one buffer
 * with what is left of the head) and queued. */
static void io_write2(og_http_conn_t *c, char *head, size_t hlen, const char *body, size_t blen)
{
    og_server_conn_t *sc = conn_of_http(c);
    if (sc->closing) {
        free(head);
        return;
    }
    uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)hlen), uv_buf_init((char *)body, (unsigned)blen)};
    int n = uv_try_write((uv_stream_t *)&sc->tcp, bufs, 2);
    if (n >= 0 && (size_t)n == hlen + blen) {
        free(head);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        write_failed(sc, head);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0, rest = hlen + blen - done;
    char *data = malloc(rest);
    if (data == NULL) {
        write_failed(sc, head);
        return;
    }
    if (done < hlen) {
        memcpy(data, head + done, hlen - done);
        memcpy(data + hlen - done, body, blen);
    } else {
        memcpy(data, body + (done - hlen), rest);
    }
    free(head);
    queue_write(sc, data, 0, rest);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    og_server_conn_t *sc = h->data;
    *buf = uv_buf_init(sc->srv->read_buf, sizeof(sc->srv->read_buf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    og_server_conn_t *sc = s->data;
    if (sc->lingering) {
        if (nread < 0)
            close_handles(sc);
        return;
    }
    if (sc->read_paused && nread != 0 && !sc->read_stopped) {
        uv_read_stop(s);
        sc->read_stopped = true;
    }
    if (nread > 0)
        og_http_conn_feed(&sc->http, buf->base, (size_t)nread);
    else if (nread == UV_EOF)
        og_http_conn_eof(&sc->http);
    else if (nread < 0)
        og_http_conn_close(&sc->http);
}

static void io_read(og_http_conn_t *c, bool on)
{
    og_server_conn_t *sc = conn_of_http(c);
    if (sc->closing)
        return;
    sc->read_paused = !on;
    if (on && sc->read_stopped) {
        sc->read_stopped = false;
        uv_read_start((uv_stream_t *)&sc->tcp, on_alloc, on_read);
    }
}

static void on_timer(uv_timer_t *t)
{
    og_server_conn_t *sc = t->data;
    if (sc->lingering)
        close_handles(sc);
    else
        og_http_conn_timeout(&sc->http);
}

static void io_timer(og_http_conn_t *c, uint64_t ms)
{
    og_server_conn_t *sc = conn_of_http(c);
    if (sc->closing)
        return;
    if (ms == 0)
        uv_timer_stop(&sc->timer);
    else
        uv_timer_start(&sc->timer, on_timer, ms, 0);
}

static size_t io_backlog(og_http_conn_t *c)
{
    og_server_conn_t *sc = conn_of_http(c);
    return uv_stream_get_write_queue_size((uv_stream_t *)&sc->tcp);
}

static void on_handle_closed(uv_handle_t *h)
{
    og_server_conn_t *sc = h->data;
    if (--sc->open_handles == 0)
        og_http_conn_io_closed(&sc->http);
}

static void close_handles(og_server_conn_t *sc)
{
    if (sc->open_handles == 2 && !uv_is_closing((uv_handle_t *)&sc->tcp)) {
        uv_close((uv_handle_t *)&sc->tcp, on_handle_closed);
        uv_close((uv_handle_t *)&sc->timer, on_handle_closed);
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    og_server_conn_t *sc = req->data;
    free(req);
    if (status < 0 || !sc->linger || uv_is_closing((uv_handle_t *)&sc->tcp)) {
        close_handles(sc);
        return;
    }
    /* Read and discard for a while: closing with unread data makes the kernel send a reset,
     * which can destroy the final answer before the peer reads it. */
    sc->lingering = true;
    uv_timer_start(&sc->timer, on_timer, LINGER_MS, 0);
    if (uv_read_start((uv_stream_t *)&sc->tcp, on_alloc, on_read) != 0)
        close_handles(sc);
}

static void io_close(og_http_conn_t *c, bool linger)
{
    og_server_conn_t *sc = conn_of_http(c);
    if (sc->closing)
        return;
    sc->closing = true;
    sc->linger = linger;
    uv_timer_stop(&sc->timer);
    uv_read_stop((uv_stream_t *)&sc->tcp);
    /* uv_shutdown runs after the queued writes, so the final response goes out first. Its
     * request is allocated here, not kept in every connection. Without memory, or when the
     * shutdown cannot start, the connection closes at once (the queued writes are dropped). */
    uv_shutdown_t *sd = malloc(sizeof(*sd));
    if (sd == NULL) {
        close_handles(sc);
        return;
    }
    sd->data = sc;
    if (uv_shutdown(sd, (uv_stream_t *)&sc->tcp, on_shutdown) != 0) {
        free(sd);
        close_handles(sc);
    }
}

static void io_release(og_http_conn_t *c)
{
    og_server_conn_t *sc = conn_of_http(c);
    og_server_t *s = sc->srv;
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        s->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    s->nconns--;
    if (s->m != NULL)
        og_metrics_gauge(&s->m->conns_open, s->nconns);
    free(sc);
    if (s->conn_gone != NULL)
        s->conn_gone(s, s->arg);
}

static const og_http_io_t server_io = {
    .write = io_write,
    .read = io_read,
    .timer = io_timer,
    .backlog = io_backlog,
    .close = io_close,
    .release = io_release,
    .write2 = io_write2,
};

/* ---- listener --------------------------------------------------------------------------- */

/* A new connection struct on the server's list, its handles initialised; NULL on OOM. */
static og_server_conn_t *conn_new(og_server_t *s)
{
    og_server_conn_t *sc = calloc(1, sizeof(*sc));
    if (sc == NULL)
        return NULL;
    sc->srv = s;
    uv_tcp_init(s->loop, &sc->tcp);
    uv_timer_init(s->loop, &sc->timer);
    sc->tcp.data = sc;
    sc->timer.data = sc;
    sc->open_handles = 2;
    sc->read_stopped = true; /* not reading yet: og_http_conn_start turns it on */
    og_http_conn_init(&sc->http, s->http, &server_io, ++s->next_conn_id);
    sc->http.data = sc;
    sc->next = s->conns;
    if (s->conns)
        s->conns->prev = sc;
    s->conns = sc;
    s->nconns++;
    if (s->m != NULL) {
        og_metrics_gauge(&s->m->conns_open, s->nconns);
        og_metrics_add(&s->m->accepted, 1);
    }
    return sc;
}

static void on_connection(uv_stream_t *server, int status)
{
    og_server_t *s = server->data;
    if (status < 0) {
        og_log(s->log, OG_LOG_WARN, "accept failed", "\"error\":\"%s\"", uv_strerror(status));
        return;
    }
    og_server_conn_t *sc = conn_new(s);
    if (sc == NULL)
        return;
    if (uv_accept(server, (uv_stream_t *)&sc->tcp) != 0) {
        og_http_conn_close(&sc->http);
        return;
    }
    uv_tcp_nodelay(&sc->tcp, 1);
    og_http_conn_start(&sc->http);
}

void og_server_init(og_server_t *s, uv_loop_t *loop, og_http_shared_t *http, og_log_t *log,
                    og_http_metrics_t *m, void (*conn_gone)(og_server_t *s, void *arg), void *arg)
{
    memset(s, 0, offsetof(og_server_t, read_buf));
    s->loop = loop;
    s->http = http;
    s->log = log;
    s->m = m;
    s->conn_gone = conn_gone;
    s->arg = arg;
}

int og_server_listen(og_server_t *s, const char *host, int port)
{
    struct sockaddr_storage ss;
    int rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
    if (rc != 0)
        rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
    if (rc != 0)
        return rc;
    /* libuv 1.44 has no SO_REUSEPORT flag: make the socket ourselves, then hand it over. */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    socklen_t sl = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    if ((rc = uv_tcp_open(&s->listener, fd)) != 0)
        close(fd); /* not the handle's yet */
    else
        rc = uv_listen((uv_stream_t *)&s->listener, 4096, on_connection);
    if (rc != 0) {
        uv_close((uv_handle_t *)&s->listener, NULL);
        return rc;
    }
    s->listening = true;
    return 0;
}

/* Closing a listener resets the connections still in its accept queue, whose requests may
 * already sit in their socket buffers. Accept them all first (they are served, answered with
 * Connection: close while draining), then close. */
void og_server_stop_listening(og_server_t *s)
{
    if (!s->listening)
        return;
    s->listening = false;
    uv_os_fd_t lfd;
    if (uv_fileno((uv_handle_t *)&s->listener, &lfd) == 0) {
        for (;;) {
            int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                break; /* EAGAIN: the queue is empty; anything else: nothing more to take */
            }
            og_server_conn_t *sc = conn_new(s);
            if (sc == NULL) {
                close(fd);
                continue;
            }
            if (uv_tcp_open(&sc->tcp, fd) != 0) {
                close(fd);
                og_http_conn_close(&sc->http);
                continue;
            }
            uv_tcp_nodelay(&sc->tcp, 1);
            og_http_conn_start(&sc->http);
        }
    }
    uv_close((uv_handle_t *)&s->listener, NULL);
}

/* Closes connections with no request in progress. One whose next request has already reached
 * the socket buffer is not idle: it is left to be read and answered (with Connection: close). */
void og_server_close_idle(og_server_t *s)
{
    og_server_conn_t *sc = s->conns;
    while (sc != NULL) {
        og_server_conn_t *next = sc->next;
        uv_os_fd_t fd;
        char byte;
        if (og_http_conn_is_idle(&sc->http) && !(uv_fileno((uv_handle_t *)&sc->tcp, &fd) == 0 &&
                                                 recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0)) {
            /* A connection that has not sent its first request yet was accepted a moment ago
             * (the accept queue is taken at drain): its client is about to send, so closing it
             * now would drop that request. It gets a short grace instead; its request is
             * answered with Connection: close, or the timer closes it. */
            if (sc->http.requests == 0)
                uv_timer_start(&sc->timer, on_timer, FIRST_REQUEST_GRACE_MS, 0);
            else
                og_http_conn_close(&sc->http);
        }
        sc = next;
    }
}

size_t og_server_count_idle(const og_server_t *s)
{
    size_t n = 0;
    for (og_server_conn_t *sc = s->conns; sc != NULL; sc = sc->next)
        n += og_http_conn_is_idle(&sc->http);
    return n;
}
