/*
 * The HTTP server's metric block (metrics.h): requests by route and status, connections, loop
 * lag, log lines dropped, drain and the number of workers. Every worker registers it before its
 * app's blocks (worker.h); the transport records connections (http_server.h), the worker the
 * rest. Responsible for the block's fields and metric table; not for when to record.
 */
#ifndef OMNIGATE_HTTP_METRICS_H
#define OMNIGATE_HTTP_METRICS_H

#include <stdint.h>

#include "omnigate/metrics.h"

#define OG_HTTP_M_ROUTES 96 /* route table entries that get their own label; then "-" */
/* The statuses that get their own label, in label order; every other status is "other". */
// clang-format off
#define OG_HTTP_M_STATUS_LIST(X) \
    X(200) X(201) X(204) X(400) X(401) X(403) X(404) X(405) X(409) X(410) \
    X(413) X(415) X(422) X(429) X(431) X(500) X(502) X(503) X(504)
// clang-format on
#define OG_HTTP_M_PLUS_ONE(s) +1
/* The labels of the status dimension: the list, then "other". */
#define OG_HTTP_M_STATUSES (OG_HTTP_M_STATUS_LIST(OG_HTTP_M_PLUS_ONE) + 1)

typedef struct og_http_metrics {
    uint64_t requests[OG_HTTP_M_ROUTES + 1][OG_HTTP_M_STATUSES];
    og_m_hist_t request_us[OG_HTTP_M_ROUTES + 1];
    uint64_t accepted;
    uint64_t log_dropped;    /* log lines the worker's logger dropped (log.h) */
    og_m_hist_t loop_lag_us; /* how late the worker's lag timer ran (worker.h) */
    /* gauges */
    uint64_t conns_open;
    uint64_t conns_idle;
    uint64_t loop_lag_max_us; /* the largest loop lag of the worker's recent window (worker.h) */
    uint64_t draining;
} og_http_metrics_t;

/* Its route labels name route i of the og_router_t (router.h) the block is registered with
 * (the app's table), by method and pattern. */
extern const og_m_block_t og_http_metrics_block;

/* Recording: each accepts a NULL block (no metrics) and does nothing then. A request answered
 * by route route_index (-1 or past OG_HTTP_M_ROUTES: "-") with `status`. */
void og_http_metrics_request(og_http_metrics_t *m, int route_index, int status, uint64_t duration_us);
/* One loop lag sample (µs), and the largest sample of the worker's recent window. */
void og_http_metrics_loop_lag(og_http_metrics_t *m, uint64_t lag_us, uint64_t window_max_us);

#endif
