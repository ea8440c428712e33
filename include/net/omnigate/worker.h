/*
 * A worker process: one libuv loop, one SO_REUSEPORT listening socket, its connections and
 * everything they share. This struct is the only mutable state of the process (STYLE.md);
 * every module reaches it through its own pointer. Responsible for the loop's lifetime
 * (start, drain, stop); not for HTTP framing (http.h) or sockets (http_server.h).
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
#include "omnigate/http_server.h"
#include "omnigate/http_metrics.h"
#include "omnigate/log.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

typedef struct og_worker og_worker_t;

/* Loop lag (omnigate_loop_lag_seconds): sampled every OG_LAG_TICK_MS; the gauge
 * omnigate_loop_lag_max_seconds is the largest sample of the last OG_LAG_WINDOW_S seconds. */
#define OG_LAG_TICK_MS  100
#define OG_LAG_WINDOW_S 10

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
    /* The metric blocks of the app and of the layers it uses (metrics.h), in exposition order
     * after the worker's own (http_metrics.h); each module finds its block with
     * og_worker_metrics. May be empty. */
    const og_m_reg_t *metrics;
    size_t nmetrics;
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
    og_http_metrics_t *m;        /* the HTTP server's block in this worker's slot, or NULL */
    uv_timer_t sample_timer;     /* samples gauges (idle connections) once a second */

    og_server_t server; /* the listener and the connections */
    uv_signal_t sig_term, sig_int;
    uv_timer_t drain_timer;
    uv_timer_t delay_timer; /* OMNIGATE_DRAIN_DELAY_MS: still accepting, /readyz 503 */
    uv_check_t flush_check; /* flushes the log buffer when og_log_due says so */
    /* Watches og_log_wait_fd while the log output is full: started when a flush leaves lines
     * behind, stopped when a flush empties the buffer. */
    uv_poll_t log_poll;
    bool log_poll_ready;       /* initialized (the logger has a wait descriptor) */
    bool log_waiting;          /* started */
    uint64_t log_dropped_seen; /* the part of log.dropped already added to the metrics slot */
    /* Loop lag: a timer due every OG_LAG_TICK_MS measures how late it runs. */
    uv_timer_t lag_timer;
    uint64_t lag_due_ms;                  /* when it is due, in loop time (uv_now) */
    uint64_t lag_max_us[OG_LAG_WINDOW_S]; /* the largest lag of each second of the window */
    uint64_t lag_sec;                     /* the second the newest entry is for */
    bool draining;
    bool app_stopped;
    int exit_code;

    time_t date_sec;
    char date[40];
};

/* Registers the metric blocks of a worker serving `app` in m (before it is mapped): the HTTP
 * server's, its route labels from `routes` (app's table, which must outlive the workers; NULL
 * for the list of metrics alone), then the app's. False when one cannot be (metrics.h). */
bool og_worker_register_metrics(og_metrics_t *m, const og_app_t *app, const og_router_t *routes);

/* Block b in this worker's slot, or NULL (no metrics, or b not registered). A module looks its
 * block up once when the app starts and records through the typed pointer. */
void *og_worker_metrics(const og_worker_t *w, const og_m_block_t *b);

/* Runs worker `index` of `app` until it has drained after SIGTERM/SIGINT. Returns the exit code. */
int og_worker_run(const og_config_t *cfg, const og_app_t *app, int index, const og_metrics_t *metrics);

/* Starts graceful drain: /readyz 503 and every response says Connection: close at once; after
 * OMNIGATE_DRAIN_DELAY_MS stop accepting (taking the accept queue first), close idle
 * connections, finish the rest. */
void og_worker_drain(og_worker_t *w);

#endif
