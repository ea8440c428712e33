/*
 * Metrics in shared memory, summed at scrape. See include/base/omnigate/metrics.h.
 */
#include "omnigate/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const int statuses[OG_M_STATUSES - 1] = {200, 201, 204, 400, 401, 403, 404, 405, 409, 410,
                                                413, 415, 422, 429, 431, 500, 502, 503, 504};

/* Upper bounds of the buckets but the last (+Inf). */
static const double latency_le_s[OG_M_BUCKETS - 1] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,    0.25,  0.5,    1,     2.5,  5,     10};
static const double batch_le[OG_M_BUCKETS - 1] = {1,   2,   4,   8,    16,   32,   64,
                                                  128, 256, 512, 1024, 2048, 4096, 8192};

bool og_metrics_map(og_metrics_t *m, int workers)
{
    m->slots = NULL;
    m->nslots = 0;
    if (workers < 1 || workers > OG_M_MAX_WORKERS)
        return false;
    void *p = mmap(NULL, sizeof(og_metrics_slot_t) * (size_t)workers, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    m->slots = p;
    m->nslots = workers;
    return true;
}

void og_metrics_unmap(og_metrics_t *m)
{
    if (m->slots != NULL)
        munmap(m->slots, sizeof(og_metrics_slot_t) * (size_t)m->nslots);
    m->slots = NULL;
    m->nslots = 0;
}

void og_metrics_slot_start(og_metrics_slot_t *s, uint64_t pid)
{
    if (s == NULL)
        return;
    og_metrics_gauge(&s->pid, pid);
    og_metrics_gauge(&s->db_queue, 0);
    og_metrics_gauge(&s->db_connected, 0);
    og_metrics_gauge(&s->conns_open, 0);
    og_metrics_gauge(&s->conns_idle, 0);
    og_metrics_gauge(&s->draining, 0);
}

static inline uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void observe(og_m_hist_t *h, const double *le, double scale, uint64_t v)
{
    int b = 0;
    double x = (double)v / scale;
    while (b < OG_M_BUCKETS - 1 && x > le[b])
        b++;
    og_metrics_add(&h->bucket[b], 1);
    og_metrics_add(&h->sum, v);
    og_metrics_add(&h->count, 1);
}

static int status_index(int status)
{
    for (int i = 0; i < OG_M_STATUSES - 1; i++)
        if (statuses[i] == status)
            return i;
    return OG_M_STATUSES - 1; /* "other" */
}

void og_metrics_request(og_metrics_slot_t *s, int route_index, int status, uint64_t duration_us)
{
    if (s == NULL)
        return;
    int r = route_index >= 0 && route_index < OG_M_ROUTES ? route_index : OG_M_ROUTES;
    og_metrics_add(&s->requests[r][status_index(status)], 1);
    observe(&s->request_us[r], latency_le_s, 1e6, duration_us);
}

void og_metrics_attempt(og_metrics_slot_t *s, int channel, const char *outcome, uint64_t latency_us)
{
    if (s == NULL || channel < 0 || channel >= OG_M_CHANNELS)
        return;
    int o = OG_M_OUTCOMES - 1;
    for (int i = 0; i < OG_M_OUTCOMES; i++)
        if (outcome != NULL && strcmp(og_attempt_outcomes[i], outcome) == 0) {
            o = i;
            break;
        }
    og_metrics_add(&s->attempts[channel][o], 1);
    observe(&s->attempt_us[channel], latency_le_s, 1e6, latency_us);
}

void og_metrics_db_batch(og_metrics_slot_t *s, uint64_t ops, uint64_t commit_us)
{
    if (s == NULL)
        return;
    observe(&s->db_batch_ops, batch_le, 1, ops);
    observe(&s->db_commit_us, latency_le_s, 1e6, commit_us);
}

/* ---- rendering ----------------------------------------------------------------------------- */

typedef struct out {
    char *buf;
    size_t len, cap;
    bool oom;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *b = realloc(o->buf, cap);
        if (b == NULL) {
            o->oom = true;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
}

static void header(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sum_hist(og_m_hist_t *dst, const og_m_hist_t *src)
{
    for (int b = 0; b < OG_M_BUCKETS; b++)
        dst->bucket[b] += get(&src->bucket[b]);
    dst->sum += get(&src->sum);
    dst->count += get(&src->count);
}

/* One histogram series: cumulative buckets, _sum (scaled to the base unit), _count. */
static void hist(out_t *o, const char *name, const char *labels, const og_m_hist_t *h, const double *le,
                 double scale)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int b = 0; b < OG_M_BUCKETS; b++) {
        cum += h->bucket[b];
        if (b < OG_M_BUCKETS - 1)
            put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, le[b], (unsigned long long)cum);
        else
            put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
    }
    put(o, "%s_sum%s%s%s %.6f\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "",
        (double)h->sum / scale);
    put(o, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "",
        (unsigned long long)h->count);
}

static void route_labels(char *buf, size_t n, const og_metrics_routes_t *routes, int r)
{
    const char *method, *pattern;
    if (r < (int)routes->n && r < OG_M_ROUTES) {
        routes->label(routes->ctx, (size_t)r, &method, &pattern);
        snprintf(buf, n, "method=\"%s\",route=\"%s\"", method, pattern);
    } else {
        snprintf(buf, n, "method=\"-\",route=\"-\"");
    }
}

char *og_metrics_render(const og_metrics_t *m, const og_metrics_routes_t *routes, size_t *len)
{
    out_t o = {.cap = 16384};
    o.buf = malloc(o.cap);
    if (o.buf == NULL)
        return NULL;
    o.buf[0] = '\0';
    int nr = (int)(routes->n < OG_M_ROUTES ? routes->n : OG_M_ROUTES);
    char labels[256];

    /* Requests by route and status. */
    header(&o, "omnigate_http_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (int r = 0; r <= OG_M_ROUTES; r++) {
        if (r >= nr && r != OG_M_ROUTES)
            continue;
        route_labels(labels, sizeof(labels), routes, r);
        for (int st = 0; st < OG_M_STATUSES; st++) {
            uint64_t v = 0;
            for (int w = 0; w < m->nslots; w++)
                v += get(&m->slots[w].requests[r][st]);
            if (v == 0)
                continue;
            if (st < OG_M_STATUSES - 1)
                put(&o, "omnigate_http_requests_total{%s,status=\"%d\"} %llu\n", labels, statuses[st],
                    (unsigned long long)v);
            else
                put(&o, "omnigate_http_requests_total{%s,status=\"other\"} %llu\n", labels,
                    (unsigned long long)v);
        }
    }
    header(&o, "omnigate_http_request_duration_seconds", "histogram",
           "Time from the first byte of a request to its response being queued, by route.");
    for (int r = 0; r <= OG_M_ROUTES; r++) {
        if (r >= nr && r != OG_M_ROUTES)
            continue;
        og_m_hist_t h = {0};
        for (int w = 0; w < m->nslots; w++)
            sum_hist(&h, &m->slots[w].request_us[r]);
        if (h.count == 0)
            continue;
        route_labels(labels, sizeof(labels), routes, r);
        hist(&o, "omnigate_http_request_duration_seconds", labels, &h, latency_le_s, 1e6);
    }

    /* Provider attempts. */
    header(&o, "omnigate_provider_attempts_total", "counter",
           "Provider attempts by channel and outcome (sent or the attempt error code).");
    for (int c = 0; c < OG_M_CHANNELS; c++)
        for (int k = 0; k < OG_M_OUTCOMES; k++) {
            uint64_t v = 0;
            for (int w = 0; w < m->nslots; w++)
                v += get(&m->slots[w].attempts[c][k]);
            put(&o, "omnigate_provider_attempts_total{channel=\"%s\",outcome=\"%s\"} %llu\n",
                og_channel_name((og_channel_t)c), og_attempt_outcomes[k], (unsigned long long)v);
        }
    header(&o, "omnigate_provider_attempt_duration_seconds", "histogram",
           "Provider attempt latency (request sent to answer classified), by channel.");
    for (int c = 0; c < OG_M_CHANNELS; c++) {
        og_m_hist_t h = {0};
        for (int w = 0; w < m->nslots; w++)
            sum_hist(&h, &m->slots[w].attempt_us[c]);
        snprintf(labels, sizeof(labels), "channel=\"%s\"", og_channel_name((og_channel_t)c));
        hist(&o, "omnigate_provider_attempt_duration_seconds", labels, &h, latency_le_s, 1e6);
    }

    /* Database. */
    og_m_hist_t batch = {0}, commit = {0};
    uint64_t queue = 0, connected = 0, retries = 0, open = 0, idle = 0, draining = 0, limited = 0,
             accepted = 0;
    for (int w = 0; w < m->nslots; w++) {
        const og_metrics_slot_t *s = &m->slots[w];
        sum_hist(&batch, &s->db_batch_ops);
        sum_hist(&commit, &s->db_commit_us);
        queue += get(&s->db_queue);
        connected += get(&s->db_connected);
        retries += get(&s->db_retries);
        open += get(&s->conns_open);
        idle += get(&s->conns_idle);
        draining += get(&s->draining);
        limited += get(&s->rate_limited);
        accepted += get(&s->accepted);
    }
    header(&o, "omnigate_db_batch_operations", "histogram",
           "Operations per group-committed write transaction.");
    hist(&o, "omnigate_db_batch_operations", "", &batch, batch_le, 1);
    header(&o, "omnigate_db_commit_duration_seconds", "histogram",
           "Write batch latency: sent to PostgreSQL until its COMMIT answered.");
    hist(&o, "omnigate_db_commit_duration_seconds", "", &commit, latency_le_s, 1e6);
    header(&o, "omnigate_db_batch_retries_total", "counter",
           "Write batches that failed and were retried op by op.");
    put(&o, "omnigate_db_batch_retries_total %llu\n", (unsigned long long)retries);
    header(&o, "omnigate_db_queue_depth", "gauge", "Database operations waiting for a connection.");
    put(&o, "omnigate_db_queue_depth %llu\n", (unsigned long long)queue);
    header(&o, "omnigate_db_connections_ready", "gauge", "Database connections ready, all workers.");
    put(&o, "omnigate_db_connections_ready %llu\n", (unsigned long long)connected);

    /* Connections and lifecycle. */
    header(&o, "omnigate_http_connections_accepted_total", "counter", "Client connections accepted.");
    put(&o, "omnigate_http_connections_accepted_total %llu\n", (unsigned long long)accepted);
    header(&o, "omnigate_http_connections_open", "gauge", "Client connections open.");
    put(&o, "omnigate_http_connections_open %llu\n", (unsigned long long)open);
    header(&o, "omnigate_http_connections_idle", "gauge",
           "Client connections idle in keep-alive (sampled every second).");
    put(&o, "omnigate_http_connections_idle %llu\n", (unsigned long long)idle);
    header(&o, "omnigate_rate_limited_total", "counter", "Tenant requests refused by the rate limit (429).");
    put(&o, "omnigate_rate_limited_total %llu\n", (unsigned long long)limited);
    header(&o, "omnigate_workers", "gauge", "Worker processes of this instance.");
    put(&o, "omnigate_workers %d\n", m->nslots);
    header(&o, "omnigate_draining", "gauge", "1 while the instance drains after SIGTERM, else 0.");
    put(&o, "omnigate_draining %d\n", draining > 0 ? 1 : 0);

    if (o.oom) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}
