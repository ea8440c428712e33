/*
 * The HTTP server's metric block. See include/net/omnigate/http_metrics.h.
 */
#include "omnigate/http_metrics.h"

#include <stddef.h>

#include "omnigate/router.h"

#define AS_INT(s)  s,
#define AS_TEXT(s) #s,
static const int statuses[OG_HTTP_M_STATUSES - 1] = {OG_HTTP_M_STATUS_LIST(AS_INT)};
static const char *const status_labels[OG_HTTP_M_STATUSES] = {OG_HTTP_M_STATUS_LIST(AS_TEXT) "other"};

static int status_index(int status)
{
    for (int i = 0; i < OG_HTTP_M_STATUSES - 1; i++)
        if (statuses[i] == status)
            return i;
    return OG_HTTP_M_STATUSES - 1; /* "other" */
}

void og_http_metrics_request(og_http_metrics_t *m, int route_index, int status, uint64_t duration_us)
{
    if (m == NULL)
        return;
    int r = route_index >= 0 && route_index < OG_HTTP_M_ROUTES ? route_index : OG_HTTP_M_ROUTES;
    og_metrics_add(&m->requests[r][status_index(status)], 1);
    og_metrics_observe(&m->request_us[r], &og_m_latency_s, duration_us);
}

void og_http_metrics_loop_lag(og_http_metrics_t *m, uint64_t lag_us, uint64_t window_max_us)
{
    if (m == NULL)
        return;
    og_metrics_observe(&m->loop_lag_us, &og_m_latency_s, lag_us);
    og_metrics_gauge(&m->loop_lag_max_us, window_max_us);
}

/* Route i of the app's table (ctx: its og_router_t); the last index is every other route. */
static bool route_label(const void *ctx, int i, const char *v[2])
{
    const og_router_t *r = ctx;
    if (r != NULL && i < (int)r->nroutes && i < OG_HTTP_M_ROUTES) {
        v[0] = r->routes[i].method;
        v[1] = r->routes[i].pattern;
        return true;
    }
    v[0] = v[1] = "-";
    return i == OG_HTTP_M_ROUTES;
}

static const og_m_dim_t routes = {OG_HTTP_M_ROUTES + 1, {"method", "route"}, NULL, route_label};
static const og_m_dim_t status = {OG_HTTP_M_STATUSES, {"status", NULL}, status_labels, NULL};

#define F(field) offsetof(og_http_metrics_t, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_http_requests_total", OG_M_COUNTER, &routes, &status, F(requests), OG_M_SUM, NULL, true,
     "HTTP requests answered, by route and status."},
    {"omnigate_http_request_duration_seconds", OG_M_HISTOGRAM, &routes, NULL, F(request_us), OG_M_SUM,
     &og_m_latency_s, true, "Time from the first byte of a request to its response being queued, by route."},
    OG_M_SUMMED("omnigate_http_connections_accepted_total", OG_M_COUNTER, F(accepted),
                "Client connections accepted."),
    OG_M_SUMMED("omnigate_http_connections_open", OG_M_GAUGE, F(conns_open), "Client connections open."),
    OG_M_SUMMED("omnigate_http_connections_idle", OG_M_GAUGE, F(conns_idle),
                "Client connections idle in keep-alive (sampled every second)."),
    OG_M_SUMMED("omnigate_log_lines_dropped_total", OG_M_COUNTER, F(log_dropped),
                "Log lines a worker dropped because its log output (stderr) was full and so was its 256 KiB "
                "buffer; the log marks each gap with a \"log lines dropped\" line."),
    {"omnigate_loop_lag_seconds", OG_M_HISTOGRAM, NULL, NULL, F(loop_lag_us), OG_M_SUM, &og_m_latency_s,
     false,
     "How late a timer due every 100 ms runs in each worker: time the loop was busy and could not "
     "answer (one sample per tick)."},
    {"omnigate_loop_lag_max_seconds", OG_M_GAUGE, NULL, NULL, F(loop_lag_max_us), OG_M_MAX, &og_m_latency_s,
     false, "The largest loop lag of any worker in the last 10 seconds."},
    {"omnigate_workers", OG_M_GAUGE, NULL, NULL, 0, OG_M_SLOTS, NULL, false,
     "Worker processes of this instance."},
    {"omnigate_draining", OG_M_GAUGE, NULL, NULL, F(draining), OG_M_ANY, NULL, false,
     "1 while the instance drains after SIGTERM, else 0."},
};

const og_m_block_t og_http_metrics_block = OG_M_BLOCK(og_http_metrics_t, metrics);
