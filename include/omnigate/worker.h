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

#include "og_build.h"
#include "omnigate/config.h"
#include "omnigate/http.h"
#include "omnigate/log.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

#define OG_READ_BUF (64 * 1024)

typedef struct og_server_conn og_server_conn_t;
typedef struct og_worker og_worker_t;

/* What a worker serves: a route table and the application state behind it. The gateway
 * (gateway.c) and the provider simulator (test/sim) are two apps on the same HTTP stack. */
typedef struct og_app {
    const og_route_t *routes;
    size_t nroutes;
    /* Called once the loop exists, before listening; may set w->app_data. Nonzero fails the
     * worker start. May be NULL. */
    int (*start)(og_worker_t *w);
    /* Called once when the worker has drained (or failed to start): close the app's handles
     * and free its state; the loop ends when the last handle is closed. May be NULL. */
    void (*stop)(og_worker_t *w);
    /* Why the app is not ready (e.g. "database unreachable"), or NULL when it is. /readyz
     * answers 503 with it. May be NULL. */
    const char *(*not_ready)(og_worker_t *w);
} og_app_t;

struct og_worker {
    uv_loop_t loop;
    const og_config_t *cfg;
    const og_app_t *app;
    void *app_data; /* owned by the app: set in app->start, freed in app->stop */
    int index;      /* 0..workers-1, stable across restarts of this slot */
    og_log_t log;
    og_http_shared_t http;
    og_router_t router;
    const og_metrics_t *metrics; /* every worker's slots (shared memory), or NULL */
    og_metrics_slot_t *m;        /* this worker's slot, or NULL */
    uv_timer_t sample_timer;     /* samples gauges (idle connections) once a second */

    uv_tcp_t listener;
    bool listening;
    uv_signal_t sig_term, sig_int;
    uv_timer_t drain_timer;
    uv_timer_t delay_timer; /* OMNIGATE_DRAIN_DELAY_MS: still accepting, /readyz 503 */
    uv_check_t flush_check; /* flushes the log buffer once per loop turn */
    bool draining;
    bool app_stopped;
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
};

/* Runs worker `index` of `app` until it has drained after SIGTERM/SIGINT. Returns the exit code. */
int og_worker_run(const og_config_t *cfg, const og_app_t *app, int index, const og_metrics_t *metrics);

/* Starts graceful drain: /readyz 503 and every response says Connection: close at once; after
 * OMNIGATE_DRAIN_DELAY_MS stop accepting (taking the accept queue first), close idle
 * connections, finish the rest. */
void og_worker_drain(og_worker_t *w);

/* Transport (http_server.c). */
int og_server_listen(og_worker_t *w);
void og_server_stop_listening(og_worker_t *w);
void og_server_close_idle(og_worker_t *w);
size_t og_server_count_idle(og_worker_t *w);
/* Called by the transport when a connection is released; lets a draining worker finish. */
void og_worker_conn_gone(og_worker_t *w);

/* Operational endpoints (ops.c), for apps' route tables: /healthz, /readyz, and the
 * /__test routes when built with -Dtest_routes=true (OG_OPS_TEST_ROUTES expands to them). */
void og_ops_healthz(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_readyz(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_metrics(og_http_req_t *req, const og_route_match_t *m, void *ctx);
#if OG_TEST_ROUTES
void og_ops_test_sleep(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_test_echo(og_http_req_t *req, const og_route_match_t *m, void *ctx);
#define OG_OPS_ROUTES                                                                                        \
    {"GET", "/healthz", og_ops_healthz}, {"GET", "/readyz", og_ops_readyz},                                  \
        {"GET", "/metrics", og_ops_metrics}, {"GET", "/__test/sleep", og_ops_test_sleep},                    \
    {                                                                                                        \
        "POST", "/__test/echo", og_ops_test_echo                                                             \
    }
#else
#define OG_OPS_ROUTES                                                                                        \
    {"GET", "/healthz", og_ops_healthz}, {"GET", "/readyz", og_ops_readyz},                                  \
    {                                                                                                        \
        "GET", "/metrics", og_ops_metrics                                                                    \
    }
#endif

#endif
