/*
 * Metrics in shared memory, summed at scrape. See include/base/omnigate/metrics.h.
 *
 * Every metric is one row of `metrics`: its name, type, help, the label dimensions of its
 * slot field and how the slots combine. The exposition and the list in docs/operations.md
 * are both walks of that table, so neither can name a metric the other does not.
 */
#include "omnigate/metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const int statuses[OG_M_STATUSES - 1] = {200, 201, 204, 400, 401, 403, 404, 405, 409, 410,
                                                413, 415, 422, 429, 431, 500, 502, 503, 504};

/* A histogram's buckets: upper bounds in the base unit (seconds, operations) but the last
 * (+Inf), and what a recorded value is divided by to be in that unit. */
typedef struct buckets {
    double le[OG_M_BUCKETS - 1];
    double divisor;
} buckets_t;

/* Latencies are recorded in µs and exposed in seconds. */
static const buckets_t latency_s = {
    {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, 1e6};
static const buckets_t batch_ops = {{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}, 1};

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
    og_metrics_gauge(&s->db_read_queue, 0);
    og_metrics_gauge(&s->db_read_connected, 0);
    og_metrics_gauge(&s->conns_open, 0);
    og_metrics_gauge(&s->conns_idle, 0);
    og_metrics_gauge(&s->draining, 0);
    og_metrics_gauge(&s->loop_lag_max_us, 0);
    for (int i = 0; i < OG_M_CHANNELS; i++)
        og_metrics_gauge(&s->circuit_state[i], 0);
    og_metrics_gauge(&s->wh_outbox_depth, 0);
    og_metrics_gauge(&s->wh_outbox_oldest_us, 0);
    og_metrics_gauge(&s->wh_disabled, 0);
}

static inline uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void observe(og_m_hist_t *h, const buckets_t *bk, uint64_t v)
{
    int b = 0;
    double x = (double)v / bk->divisor;
    while (b < OG_M_BUCKETS - 1 && x > bk->le[b])
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
    observe(&s->request_us[r], &latency_s, duration_us);
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
    observe(&s->attempt_us[channel], &latency_s, latency_us);
}

void og_metrics_callback(og_metrics_slot_t *s, og_channel_t ch, og_m_callback_t outcome, uint64_t n)
{
    if (s != NULL && (unsigned)ch < OG_M_CHANNELS && (unsigned)outcome < OG_M_CB__COUNT && n > 0)
        og_metrics_add(&s->callbacks[ch][outcome], n);
}

int og_metrics_step_kind(const char *name)
{
    for (int i = 0; i < OG_M_STEP_KINDS; i++)
        if (strcmp(og_metrics_step_kinds[i], name) == 0)
            return i;
    return -1;
}

void og_metrics_step(og_metrics_slot_t *s, int kind, bool ok)
{
    if (s != NULL && kind >= 0 && kind < OG_M_STEP_KINDS)
        og_metrics_add(ok ? &s->steps_done[kind] : &s->steps_failed[kind], 1);
}

void og_metrics_step_lag(og_metrics_slot_t *s, uint64_t lag_ms)
{
    if (s != NULL)
        observe(&s->step_lag, &latency_s, lag_ms * 1000);
}

void og_metrics_loop_lag(og_metrics_slot_t *s, uint64_t lag_us, uint64_t window_max_us)
{
    if (s == NULL)
        return;
    observe(&s->loop_lag_us, &latency_s, lag_us);
    og_metrics_gauge(&s->loop_lag_max_us, window_max_us);
}

void og_metrics_webhook_try(og_metrics_slot_t *s, int http_status, og_m_wh_outcome_t outcome)
{
    if (s == NULL)
        return;
    int cls = http_status >= 200 && http_status < 600 ? http_status / 100 - 2 : OG_M_WH_CLASSES - 1;
    og_metrics_add(&s->wh_tries[cls], 1);
    og_metrics_add(&s->wh_deliveries[outcome], 1);
}

void og_metrics_db_batch(og_metrics_slot_t *s, uint64_t ops, uint64_t commit_us)
{
    if (s == NULL)
        return;
    observe(&s->db_batch_ops, &batch_ops, ops);
    observe(&s->db_commit_us, &latency_s, commit_us);
}

/* ---- the metric table ------------------------------------------------------------------------ */

typedef enum { M_COUNTER, M_GAUGE, M_HISTOGRAM } metric_type_t;

static const char *const type_names[] = {
    [M_COUNTER] = "counter", [M_GAUGE] = "gauge", [M_HISTOGRAM] = "histogram"};

/* A label dimension: one index of a slot field's array, and the labels that name each index. */
typedef enum {
    DIM_NONE,
    DIM_ROUTE,
    DIM_STATUS,
    DIM_CHANNEL,
    DIM_OUTCOME,
    DIM_PROVIDER,
    DIM_CALLBACK,
    DIM_STEP_KIND,
    DIM_WH_OUTCOME,
    DIM_WH_CLASS
} dim_t;

static const struct dim {
    int n;                 /* indexes */
    const char *labels[2]; /* label names, for the docs */
} dims[] = {
    [DIM_NONE] = {1, {NULL, NULL}},
    [DIM_ROUTE] = {OG_M_ROUTES + 1, {"method", "route"}}, /* the last index is every other route */
    [DIM_STATUS] = {OG_M_STATUSES, {"status", NULL}},
    [DIM_CHANNEL] = {OG_M_CHANNELS, {"channel", NULL}},
    [DIM_OUTCOME] = {OG_M_OUTCOMES, {"outcome", NULL}},
    [DIM_PROVIDER] = {OG_M_CHANNELS, {"provider", NULL}},
    [DIM_CALLBACK] = {OG_M_CB__COUNT, {"outcome", NULL}},
    [DIM_STEP_KIND] = {OG_M_STEP_KINDS, {"kind", NULL}},
    [DIM_WH_OUTCOME] = {OG_M_WH__COUNT, {"outcome", NULL}},
    [DIM_WH_CLASS] = {OG_M_WH_CLASSES, {"class", NULL}},
};

static const char *const wh_outcomes[OG_M_WH__COUNT] = {
    [OG_M_WH_DELIVERED] = "delivered", [OG_M_WH_RETRYING] = "retrying", [OG_M_WH_EXHAUSTED] = "exhausted"};
static const char *const wh_classes[OG_M_WH_CLASSES] = {"2xx", "3xx", "4xx", "5xx", "none"};

const char *const og_metrics_step_kinds[OG_M_STEP_KINDS] = {"fallback", "webhook", "sweep"};

static const char *const callback_outcomes[OG_M_CB__COUNT] = {
    [OG_M_CB_APPLIED] = "applied",
    [OG_M_CB_DUPLICATE] = "duplicate",
    [OG_M_CB_UNKNOWN_MESSAGE] = "unknown_message",
    [OG_M_CB_BAD_SIGNATURE] = "bad_signature",
    [OG_M_CB_BAD_BODY] = "bad_body",
};

/* How the slots' values of a series make the instance's value. */
typedef enum {
    FOLD_SUM,   /* the sum */
    FOLD_ANY,   /* 1 if any slot is non-zero, else 0 */
    FOLD_MAX,   /* the largest */
    FOLD_SLOTS, /* the number of slots; reads no field */
} fold_t;

/* One metric. Its slot field is an array [rows][cols] of uint64_t, or of og_m_hist_t for a
 * histogram (DIM_NONE: no such index); each index present in the exposition is one series. */
typedef struct metric {
    const char *name;
    metric_type_t type;
    dim_t rows, cols;
    size_t offset; /* of the field in og_metrics_slot_t */
    fold_t fold;
    const buckets_t *buckets; /* histograms: bounds and unit; a counter or gauge: its unit, or NULL */
    bool sparse;              /* omit zero series (count zero for a histogram): there would be many */
    const char *help;
} metric_t;

#define SLOT(field) offsetof(og_metrics_slot_t, field)
/* A counter or gauge of one series, the sum of the slots' `field`. */
// clang-format off
#define SUMMED(name, type, field, help) \
    {name, type, DIM_NONE, DIM_NONE, SLOT(field), FOLD_SUM, NULL, false, help}
// clang-format on

/* The exposition, in this order, and the list in docs/operations.md (`omnigate metrics-markdown`). */
static const metric_t metrics[] = {
    {"omnigate_http_requests_total", M_COUNTER, DIM_ROUTE, DIM_STATUS, SLOT(requests), FOLD_SUM, NULL, true,
     "HTTP requests answered, by route and status."},
    {"omnigate_http_request_duration_seconds", M_HISTOGRAM, DIM_ROUTE, DIM_NONE, SLOT(request_us), FOLD_SUM,
     &latency_s, true, "Time from the first byte of a request to its response being queued, by route."},
    {"omnigate_provider_attempts_total", M_COUNTER, DIM_CHANNEL, DIM_OUTCOME, SLOT(attempts), FOLD_SUM, NULL,
     false, "Provider attempts by channel and outcome (sent or the attempt error code)."},
    {"omnigate_provider_attempt_duration_seconds", M_HISTOGRAM, DIM_CHANNEL, DIM_NONE, SLOT(attempt_us),
     FOLD_SUM, &latency_s, false,
     "Provider attempt latency (request sent to answer classified), by channel."},
    {"omnigate_db_batch_operations", M_HISTOGRAM, DIM_NONE, DIM_NONE, SLOT(db_batch_ops), FOLD_SUM,
     &batch_ops, false, "Operations per group-committed write transaction."},
    {"omnigate_db_commit_duration_seconds", M_HISTOGRAM, DIM_NONE, DIM_NONE, SLOT(db_commit_us), FOLD_SUM,
     &latency_s, false, "Write batch latency: sent to PostgreSQL until its COMMIT answered."},
    {"omnigate_status_callbacks_total", M_COUNTER, DIM_PROVIDER, DIM_CALLBACK, SLOT(callbacks), FOLD_SUM,
     NULL, false,
     "Provider status callbacks (API.md §10): statuses applied, duplicate or for an unknown message id, and "
     "requests refused for a bad signature or body."},
    {"omnigate_circuit_state", M_GAUGE, DIM_CHANNEL, DIM_NONE, SLOT(circuit_state), FOLD_MAX, NULL, false,
     "Circuit breaker of each channel (API.md §13), the worst of the workers': 0 closed, 1 half-open, 2 "
     "open."},
    {"omnigate_circuit_transitions_total", M_COUNTER, DIM_CHANNEL, DIM_NONE, SLOT(circuit_transitions),
     FOLD_SUM, NULL, false, "Circuit breaker state changes, by channel, all workers."},
    {"omnigate_circuit_refused_total", M_COUNTER, DIM_CHANNEL, DIM_NONE, SLOT(circuit_refused), FOLD_SUM,
     NULL, false, "Attempts failed at once (provider_unavailable) because the channel's circuit was open."},
    SUMMED("omnigate_not_on_whatsapp_skips_total", M_COUNTER, not_on_whatsapp_skips,
           "Sends that skipped the WhatsApp channels because the number is remembered as not on WhatsApp."),
    SUMMED(
        "omnigate_statuses_waiting", M_GAUGE, statuses_waiting,
        "Statuses received in the last 10 minutes still waiting for their attempt (sampled every second)."),
    {"omnigate_steps_done_total", M_COUNTER, DIM_STEP_KIND, DIM_NONE, SLOT(steps_done), FOLD_SUM, NULL, false,
     "Durable steps finished and closed, by kind."},
    {"omnigate_steps_failed_total", M_COUNTER, DIM_STEP_KIND, DIM_NONE, SLOT(steps_failed), FOLD_SUM, NULL,
     false, "Durable steps whose run failed (left to be claimed again when the lease expires), by kind."},
    {"omnigate_step_lag_seconds", M_HISTOGRAM, DIM_NONE, DIM_NONE, SLOT(step_lag), FOLD_SUM, &latency_s,
     false, "How late steps are claimed: claim time minus due time."},
    SUMMED("omnigate_steps_running", M_GAUGE, steps_running, "Durable steps running now."),
    SUMMED("omnigate_steps_due", M_GAUGE, steps_due,
           "Durable steps due and not running, all instances (sampled every few seconds)."),
    {"omnigate_webhook_deliveries_total", M_COUNTER, DIM_WH_OUTCOME, DIM_NONE, SLOT(wh_deliveries), FOLD_SUM,
     NULL, false,
     "Tenant webhook tries by what they made of their delivery: delivered, retrying (failed, another try "
     "scheduled) or exhausted (no try left, or the webhook was disabled)."},
    {"omnigate_webhook_tries_total", M_COUNTER, DIM_WH_CLASS, DIM_NONE, SLOT(wh_tries), FOLD_SUM, NULL, false,
     "Tenant webhook tries by the class of their HTTP status (none: timeout, connection error or blocked "
     "address)."},
    {"omnigate_webhook_outbox_depth", M_GAUGE, DIM_NONE, DIM_NONE, SLOT(wh_outbox_depth), FOLD_MAX, NULL,
     false,
     "Webhook events not delivered yet and still to be tried, all instances (sampled every 2 seconds)."},
    {"omnigate_webhook_outbox_oldest_seconds", M_GAUGE, DIM_NONE, DIM_NONE, SLOT(wh_outbox_oldest_us),
     FOLD_MAX, &latency_s, false,
     "Age of the oldest webhook event not delivered yet and still to be tried (sampled)."},
    {"omnigate_webhooks_disabled", M_GAUGE, DIM_NONE, DIM_NONE, SLOT(wh_disabled), FOLD_MAX, NULL, false,
     "Tenant webhooks disabled by a 410 or by 5 days of failures (sampled)."},
    SUMMED("omnigate_db_timeouts_total", M_COUNTER, db_timeouts,
           "Database deadlines missed (OMNIGATE_DB_TIMEOUT_MS): a connection with no answer dropped, or an "
           "operation that waited too long for a connection failed."),
    SUMMED("omnigate_db_batch_retries_total", M_COUNTER, db_retries,
           "Write batches that failed and were retried op by op."),
    SUMMED("omnigate_db_merged_operations_total", M_COUNTER, db_merged,
           "Write operations whose first statement ran in one statement with others of its batch "
           "(a set form: one insert for all the batch's pending messages, one completion)."),
    SUMMED("omnigate_db_queue_depth", M_GAUGE, db_queue, "Database operations waiting for a connection."),
    SUMMED("omnigate_db_connections_ready", M_GAUGE, db_connected,
           "Database connections ready, all workers (the write path's pool: sends, OTPs, statuses, admin)."),
    SUMMED("omnigate_db_read_queue_depth", M_GAUGE, db_read_queue,
           "Log queries waiting for a free read connection (OMNIGATE_DB_READ_POOL per worker)."),
    SUMMED("omnigate_db_read_connections_ready", M_GAUGE, db_read_connected,
           "Read connections ready (log queries; on OMNIGATE_DATABASE_READ_URL when set), all workers."),
    SUMMED("omnigate_log_query_timeouts_total", M_COUNTER, log_query_timeouts,
           "Log queries the server cancelled at OMNIGATE_LOG_QUERY_TIMEOUT_MS (answered 503 query_timeout)."),
    SUMMED("omnigate_http_connections_accepted_total", M_COUNTER, accepted, "Client connections accepted."),
    SUMMED("omnigate_http_connections_open", M_GAUGE, conns_open, "Client connections open."),
    SUMMED("omnigate_http_connections_idle", M_GAUGE, conns_idle,
           "Client connections idle in keep-alive (sampled every second)."),
    SUMMED("omnigate_rate_limited_total", M_COUNTER, rate_limited,
           "Tenant requests refused by the rate limit (429)."),
    SUMMED("omnigate_log_lines_dropped_total", M_COUNTER, log_dropped,
           "Log lines a worker dropped because its log output (stderr) was full and so was its 256 KiB "
           "buffer; the log marks each gap with a \"log lines dropped\" line."),
    {"omnigate_loop_lag_seconds", M_HISTOGRAM, DIM_NONE, DIM_NONE, SLOT(loop_lag_us), FOLD_SUM, &latency_s,
     false,
     "How late a timer due every 100 ms runs in each worker: time the loop was busy and could not "
     "answer (one sample per tick)."},
    {"omnigate_loop_lag_max_seconds", M_GAUGE, DIM_NONE, DIM_NONE, SLOT(loop_lag_max_us), FOLD_MAX,
     &latency_s, false, "The largest loop lag of any worker in the last 10 seconds."},
    {"omnigate_workers", M_GAUGE, DIM_NONE, DIM_NONE, 0, FOLD_SLOTS, NULL, false,
     "Worker processes of this instance."},
    {"omnigate_draining", M_GAUGE, DIM_NONE, DIM_NONE, SLOT(draining), FOLD_ANY, NULL, false,
     "1 while the instance drains after SIGTERM, else 0."},
};

#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

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

/* The name of a sample line: `name_suffix{labels}`, without braces when there are no labels. */
static void sample_name(out_t *o, const char *name, const char *suffix, const char *labels)
{
    if (labels[0] != '\0')
        put(o, "%s%s{%s}", name, suffix, labels);
    else
        put(o, "%s%s", name, suffix);
}

/* One histogram series: cumulative buckets, _sum (scaled to the base unit), _count. */
static void hist(out_t *o, const char *name, const char *labels, const og_m_hist_t *h, const buckets_t *bk)
{
    uint64_t cum = 0;
    char with_le[400];
    for (int b = 0; b < OG_M_BUCKETS; b++) {
        cum += h->bucket[b];
        const char *sep = labels[0] ? "," : "";
        if (b < OG_M_BUCKETS - 1)
            snprintf(with_le, sizeof(with_le), "%s%sle=\"%g\"", labels, sep, bk->le[b]);
        else
            snprintf(with_le, sizeof(with_le), "%s%sle=\"+Inf\"", labels, sep);
        sample_name(o, name, "_bucket", with_le);
        put(o, " %llu\n", (unsigned long long)cum);
    }
    sample_name(o, name, "_sum", labels);
    put(o, " %.6f\n", (double)h->sum / bk->divisor);
    sample_name(o, name, "_count", labels);
    put(o, " %llu\n", (unsigned long long)h->count);
}

/* The labels of index i of dimension d (empty for DIM_NONE); false when that index is no
 * series (a route the app does not have). */
static bool dim_labels(dim_t d, int i, const og_metrics_routes_t *routes, char *buf, size_t n)
{
    const char *method, *pattern;
    switch (d) {
    case DIM_NONE:
        buf[0] = '\0';
        return true;
    case DIM_ROUTE:
        if (i < (int)routes->n && i < OG_M_ROUTES) {
            routes->label(routes->ctx, (size_t)i, &method, &pattern);
            snprintf(buf, n, "method=\"%s\",route=\"%s\"", method, pattern);
            return true;
        }
        snprintf(buf, n, "method=\"-\",route=\"-\"");
        return i == OG_M_ROUTES;
    case DIM_STATUS:
        if (i < OG_M_STATUSES - 1)
            snprintf(buf, n, "status=\"%d\"", statuses[i]);
        else
            snprintf(buf, n, "status=\"other\"");
        return true;
    case DIM_CHANNEL:
        snprintf(buf, n, "channel=\"%s\"", og_channel_name((og_channel_t)i));
        return true;
    case DIM_OUTCOME:
        snprintf(buf, n, "outcome=\"%s\"", og_attempt_outcomes[i]);
        return true;
    case DIM_PROVIDER:
        snprintf(buf, n, "provider=\"%s\"", og_channel_provider((og_channel_t)i));
        return true;
    case DIM_CALLBACK:
        snprintf(buf, n, "outcome=\"%s\"", callback_outcomes[i]);
        return true;
    case DIM_STEP_KIND:
        snprintf(buf, n, "kind=\"%s\"", og_metrics_step_kinds[i]);
        return true;
    case DIM_WH_OUTCOME:
        snprintf(buf, n, "outcome=\"%s\"", wh_outcomes[i]);
        return true;
    case DIM_WH_CLASS:
        snprintf(buf, n, "class=\"%s\"", wh_classes[i]);
        return true;
    }
    return false;
}

static const void *field(const og_metrics_slot_t *s, size_t offset)
{
    return (const char *)s + offset;
}

/* Series i (row * cols + col) of metric d, folded over the slots. */
static uint64_t fold(const metric_t *d, const og_metrics_t *m, int i)
{
    if (d->fold == FOLD_SLOTS)
        return (uint64_t)m->nslots;
    uint64_t v = 0;
    for (int w = 0; w < m->nslots; w++) {
        uint64_t x = get((const uint64_t *)field(&m->slots[w], d->offset) + i);
        v = d->fold == FOLD_MAX ? (x > v ? x : v) : v + x;
    }
    return d->fold == FOLD_ANY ? v > 0 : v;
}

static void fold_hist(const metric_t *d, const og_metrics_t *m, int i, og_m_hist_t *h)
{
    for (int w = 0; w < m->nslots; w++) {
        const og_m_hist_t *src = (const og_m_hist_t *)field(&m->slots[w], d->offset) + i;
        for (int b = 0; b < OG_M_BUCKETS; b++)
            h->bucket[b] += get(&src->bucket[b]);
        h->sum += get(&src->sum);
        h->count += get(&src->count);
    }
}

static void series(out_t *o, const metric_t *d, const og_metrics_t *m, int i, const char *labels)
{
    if (d->type == M_HISTOGRAM) {
        og_m_hist_t h = {0};
        fold_hist(d, m, i, &h);
        if (!d->sparse || h.count > 0)
            hist(o, d->name, labels, &h, d->buckets);
        return;
    }
    uint64_t v = fold(d, m, i);
    if (d->sparse && v == 0)
        return;
    sample_name(o, d->name, "", labels);
    if (d->buckets != NULL)
        put(o, " %.6f\n", (double)v / d->buckets->divisor);
    else
        put(o, " %llu\n", (unsigned long long)v);
}

static void render_metric(out_t *o, const metric_t *d, const og_metrics_t *m,
                          const og_metrics_routes_t *routes)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, type_names[d->type]);
    int cols = dims[d->cols].n;
    /* The row's labels are cut at 255 bytes (a route pattern that long is no pattern). */
    char row[256], col[64], labels[sizeof(row) + sizeof(col) + 1];
    for (int r = 0; r < dims[d->rows].n; r++) {
        if (!dim_labels(d->rows, r, routes, row, sizeof(row)))
            continue;
        for (int c = 0; c < cols; c++) {
            dim_labels(d->cols, c, routes, col, sizeof(col));
            snprintf(labels, sizeof(labels), "%s%s%s", row, row[0] && col[0] ? "," : "", col);
            series(o, d, m, r * cols + c, labels);
        }
    }
}

char *og_metrics_render(const og_metrics_t *m, const og_metrics_routes_t *routes, size_t *len)
{
    out_t o = {.cap = 16384};
    o.buf = malloc(o.cap);
    if (o.buf == NULL)
        return NULL;
    o.buf[0] = '\0';
    for (size_t i = 0; i < NMETRICS; i++)
        render_metric(&o, &metrics[i], m, routes);
    if (o.oom) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}

void og_metrics_markdown(FILE *out)
{
    fprintf(out, "| Metric | Type | Labels | Meaning |\n");
    fprintf(out, "|---|---|---|---|\n");
    for (size_t i = 0; i < NMETRICS; i++) {
        const metric_t *d = &metrics[i];
        fprintf(out, "| `%s` | %s | ", d->name, type_names[d->type]);
        const char *sep = "";
        const dim_t both[2] = {d->rows, d->cols};
        for (int k = 0; k < 2; k++)
            for (int l = 0; l < 2 && dims[both[k]].labels[l] != NULL; l++) {
                fprintf(out, "%s`%s`", sep, dims[both[k]].labels[l]);
                sep = ", ";
            }
        fprintf(out, "%s | %s |\n", sep[0] ? "" : "(none)", d->help);
    }
}
