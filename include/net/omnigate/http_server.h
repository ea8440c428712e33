/*
 * The transport of the HTTP core on libuv: one SO_REUSEPORT listener, the connections it
 * accepted, reads into one shared buffer, writes (uv_try_write first, a queued uv_write for
 * the rest), a timer per connection, and closing (shutdown after the queued writes, then an
 * optional linger). Responsible for sockets; not for HTTP framing (http.h) or for the loop's
 * lifetime and drain policy (worker.h), which owns an og_server_t and hears from it through
 * conn_gone.
 */
#ifndef OMNIGATE_HTTP_SERVER_H
#define OMNIGATE_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "omnigate/http.h"
#include "omnigate/http_metrics.h"
#include "omnigate/log.h"

#define OG_READ_BUF (64 * 1024)

typedef struct og_server_conn og_server_conn_t;
typedef struct og_server og_server_t;

struct og_server {
    uv_loop_t *loop;
    og_http_shared_t *http; /* the HTTP core's shared settings and handler, owned by the caller */
    og_log_t *log;
    og_http_metrics_t *m; /* or NULL: no metrics */
    /* Called after a connection is released (its handles closed, no request in flight), so
     * that a draining owner can tell when the last one is gone. */
    void (*conn_gone)(og_server_t *s, void *arg);
    void *arg;

    uv_tcp_t listener;
    bool listening;
    /* Every connection not yet released. Intrusive doubly linked list. */
    og_server_conn_t *conns;
    size_t nconns;
    uint64_t next_conn_id;

    /* One read buffer for the whole loop: libuv calls alloc, read and read_cb back to back
     * per stream, and the HTTP core copies whatever it keeps. */
    char read_buf[OG_READ_BUF];
};

/* Sets s up on `loop`; nothing is opened until og_server_listen. */
void og_server_init(og_server_t *s, uv_loop_t *loop, og_http_shared_t *http, og_log_t *log,
                    og_http_metrics_t *m, void (*conn_gone)(og_server_t *s, void *arg), void *arg);

/* Binds host:port with SO_REUSEPORT and listens. 0 or a negative libuv/errno code; on failure
 * the listener handle, if it was initialised, is closed. */
int og_server_listen(og_server_t *s, const char *host, int port);

/* Takes the accept queue (its connections are served), then closes the listener. Idempotent. */
void og_server_stop_listening(og_server_t *s);

/* Closes connections with no request in progress and nothing unread in their socket. */
void og_server_close_idle(og_server_t *s);

/* Connections with no request in progress (for the idle-connections gauge). */
size_t og_server_count_idle(const og_server_t *s);

#endif
