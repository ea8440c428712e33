/*
 * A worker process: one libuv loop, one SO_REUSEPORT listening socket, its connections and
 * everything they share. This struct is the only mutable state of the process (STYLE.md);
 * every module reaches it through its own pointer. Responsible for the loop's lifetime
 * (start, drain, stop); not for HTTP framing (http_conn.c) or sockets (http_server.c).
 */
#ifndef OMNIGATE_WORKER_H
#define OMNIGATE_WORKER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <uv.h>

#include "omnigate/config.h"
#include "omnigate/http.h"
#include "omnigate/log.h"
#include "omnigate/router.h"

#define OG_READ_BUF (64 * 1024)

typedef struct og_server_conn og_server_conn_t;

typedef struct og_worker {
    uv_loop_t loop;
    const og_config_t *cfg;
    int index; /* 0..workers-1, stable across restarts of this slot */
    og_log_t log;
    og_http_shared_t http;
    og_router_t router;

    uv_tcp_t listener;
    bool listening;
    uv_signal_t sig_term, sig_int;
    uv_timer_t drain_timer;
    uv_check_t flush_check; /* flushes the log buffer once per loop turn */
    bool draining;
    int exit_code;

    /* Connections, for drain and accounting. Intrusive doubly linked list. */
    og_server_conn_t *conns;
    size_t nconns;
    uint64_t next_conn_id;

    /* One read buffer for the whole loop: libuv calls alloc, read and read_cb back to back
     * per stream, and the HTTP core copies whatever it keeps. */
    char read_buf[OG_READ_BUF];

    time_t date_sec;
    char date[40];
} og_worker_t;

/* Runs worker `index` until it has drained after SIGTERM/SIGINT. Returns the exit code. */
int og_worker_run(const og_config_t *cfg, int index);

/* Starts graceful drain: stop accepting, /readyz 503, close idle connections, finish the rest. */
void og_worker_drain(og_worker_t *w);

/* Transport (http_server.c). */
int og_server_listen(og_worker_t *w);
void og_server_stop_listening(og_worker_t *w);
void og_server_close_idle(og_worker_t *w);
/* Called by the transport when a connection is released; lets a draining worker finish. */
void og_worker_conn_gone(og_worker_t *w);

/* Routes of the operational endpoints (ops.c). */
extern const og_route_t og_ops_routes[];
extern const size_t og_ops_nroutes;

#endif
