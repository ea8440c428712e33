/*
 * Metrics: per-worker counters, gauges and histograms in one shared memory area the
 * supervisor maps before forking (MAP_SHARED | MAP_ANONYMOUS). Each worker writes only its own
 * slot (single writer: plain relaxed loads and stores, no locks, no atomic read-modify-write);
 * whichever worker answers GET /metrics sums every slot, so a scrape sees the whole instance.
 * Labels are bounded: route patterns of the app's table, a fixed set of statuses, the three
 * channels and the attempt outcomes of API.md §2. No per-tenant, per-token or per-recipient
 * label exists. Responsible for recording and the Prometheus text format; not for deciding
 * what to record (the callers).
 */
#ifndef OMNIGATE_METRICS_H
#define OMNIGATE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "omnigate/channel.h"

#define OG_M_ROUTES      64 /* route table entries that get their own label; then "-" */
#define OG_M_STATUSES    20
#define OG_M_BUCKETS     15 /* histogram buckets, +Inf included */
#define OG_M_CHANNELS    OG_CH__COUNT
#define OG_M_OUTCOMES    OG_ATTEMPT_OUTCOMES
#define OG_M_MAX_WORKERS 256

/* The kinds of durable steps (jobs.h), for labels: each registered kind is one of these. */
#define OG_M_STEP_KINDS 3
extern const char *const og_metrics_step_kinds[OG_M_STEP_KINDS]; /* fallback, webhook, sweep */

/* What became of a provider's status callback (API.md §10), counted per status for the first
 * three and per request for the last two. */
typedef enum og_m_callback {
    OG_M_CB_APPLIED,         /* a new status of one of our attempts or SMS records */
    OG_M_CB_DUPLICATE,       /* a repeat: changed nothing */
    OG_M_CB_UNKNOWN_MESSAGE, /* no attempt has that message id (yet): kept, waiting */
    OG_M_CB_BAD_SIGNATURE,   /* a request refused with 401 */
    OG_M_CB_BAD_BODY,        /* a request refused with 400 */
    OG_M_CB__COUNT
} og_m_callback_t;

/* Tenant webhook deliveries (API.md §12): what a try made of its delivery, and the try's HTTP
 * status class (none: no HTTP answer: timeout, connection error, blocked address). */
typedef enum og_m_wh_outcome {
    OG_M_WH_DELIVERED,
    OG_M_WH_RETRYING, /* failed, another try is scheduled */
    OG_M_WH_EXHAUSTED,
    OG_M_WH__COUNT
} og_m_wh_outcome_t;
#define OG_M_WH_CLASSES 5 /* 2xx, 3xx, 4xx, 5xx, none */

typedef struct og_m_hist {
    uint64_t bucket[OG_M_BUCKETS]; /* non-cumulative counts; rendered cumulative */
    uint64_t sum;                  /* in the histogram's unit (µs, or operations) */
    uint64_t count;
} og_m_hist_t;

/* One worker's slot. Counters only grow (a replaced worker continues its slot's counters);
 * gauges are set by the worker that owns the slot and zeroed when it starts. */
typedef struct og_metrics_slot {
    uint64_t pid;
    uint64_t requests[OG_M_ROUTES + 1][OG_M_STATUSES];
    og_m_hist_t request_us[OG_M_ROUTES + 1];
    uint64_t attempts[OG_M_CHANNELS][OG_M_OUTCOMES];
    og_m_hist_t attempt_us[OG_M_CHANNELS];
    og_m_hist_t db_batch_ops;
    og_m_hist_t db_commit_us;
    uint64_t callbacks[OG_M_CHANNELS][OG_M_CB__COUNT]; /* by the provider of the channel */
    uint64_t steps_done[OG_M_STEP_KINDS];
    uint64_t steps_failed[OG_M_STEP_KINDS];
    og_m_hist_t step_lag; /* claim time - due time, in µs like the other latencies */
    uint64_t db_retries;
    uint64_t db_merged;   /* ops whose first statement ran in its batch's set form (src/data/db/) */
    uint64_t db_timeouts; /* OMNIGATE_DB_TIMEOUT_MS: connections dropped and queued ops failed */
    uint64_t rate_limited;
    uint64_t log_query_timeouts;
    uint64_t log_dropped;                        /* log lines the worker's logger dropped (log.h) */
    uint64_t circuit_transitions[OG_M_CHANNELS]; /* breaker state changes (breaker.h) */
    uint64_t circuit_refused[OG_M_CHANNELS];     /* attempts failed at once by an open circuit */
    uint64_t not_on_whatsapp_skips;              /* sends that skipped WhatsApp for a remembered number */
    uint64_t wh_deliveries[OG_M_WH__COUNT];
    uint64_t wh_tries[OG_M_WH_CLASSES];
    og_m_hist_t loop_lag_us; /* how late the worker's lag timer ran (worker.h) */
    /* gauges */
    uint64_t statuses_waiting; /* set by the worker that sweeps (gateway.c) */
    uint64_t steps_running;
    uint64_t steps_due; /* set by the worker that samples it (jobs.c) */
    uint64_t db_queue;
    uint64_t db_connected;
    uint64_t db_read_queue; /* the read pool's (log queries): db.h og_db_new_reader */
    uint64_t db_read_connected;
    uint64_t conns_open;
    uint64_t conns_idle;
    uint64_t draining;
    uint64_t accepted;
    uint64_t loop_lag_max_us;              /* the largest loop lag of the worker's recent window (worker.h) */
    uint64_t circuit_state[OG_M_CHANNELS]; /* 0 closed, 1 half-open, 2 open (breaker.h) */
    /* Set by the worker that samples the outbox (webhooks_out.c). */
    uint64_t wh_outbox_depth;
    uint64_t wh_outbox_oldest_us;
    uint64_t wh_disabled;
} og_metrics_slot_t;

typedef struct og_metrics {
    og_metrics_slot_t *slots; /* shared mapping of nslots slots */
    int nslots;
} og_metrics_t;

/* Maps the shared area for `workers` slots (supervisor, before forking). False on failure;
 * the gateway then runs without metrics (/metrics answers 503). */
bool og_metrics_map(og_metrics_t *m, int workers);
void og_metrics_unmap(og_metrics_t *m);

/* Marks the slot as used by the calling process and zeroes its gauges. */
void og_metrics_slot_start(og_metrics_slot_t *s, uint64_t pid);

/* Recording: every function accepts a NULL slot (no metrics) and does nothing then. */
void og_metrics_request(og_metrics_slot_t *s, int route_index, int status, uint64_t duration_us);
/* channel: og_channel_t value; outcome: "sent" or an attempt error code of API.md §2. */
void og_metrics_attempt(og_metrics_slot_t *s, int channel, const char *outcome, uint64_t latency_us);
void og_metrics_db_batch(og_metrics_slot_t *s, uint64_t ops, uint64_t commit_us);
/* The index of step kind `name` in og_metrics_step_kinds, or -1. */
int og_metrics_step_kind(const char *name);
/* A step of kind index `kind` (-1: none) finished, well or not. */
void og_metrics_step(og_metrics_slot_t *s, int kind, bool ok);
/* A step was claimed lag_ms after it was due. */
void og_metrics_step_lag(og_metrics_slot_t *s, uint64_t lag_ms);
/* One loop lag sample (µs), and the largest sample of the worker's recent window. */
void og_metrics_loop_lag(og_metrics_slot_t *s, uint64_t lag_us, uint64_t window_max_us);
/* `n` status callbacks of channel ch's provider ended as `outcome`. */
void og_metrics_callback(og_metrics_slot_t *s, og_channel_t ch, og_m_callback_t outcome, uint64_t n);
/* A webhook try ended with HTTP status `http_status` (0: no answer) and left its delivery
 * `outcome`. */
void og_metrics_webhook_try(og_metrics_slot_t *s, int http_status, og_m_wh_outcome_t outcome);
/* A field of the caller's own slot: single writer, so a plain relaxed load and store. */
static inline void og_metrics_gauge(uint64_t *g, uint64_t v)
{
    __atomic_store_n(g, v, __ATOMIC_RELAXED);
}
static inline void og_metrics_add(uint64_t *c, uint64_t v)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

/* The route labels of the request metrics: label(ctx, i, ...) names route i of n by its method
 * and pattern. A callback, so that metrics need not know the router (a layer above). */
typedef struct og_metrics_routes {
    size_t n;
    void (*label)(const void *ctx, size_t i, const char **method, const char **pattern);
    const void *ctx;
} og_metrics_routes_t;

/* The Prometheus text exposition (version 0.0.4) of the sum of all slots, with route label i
 * as `routes` names it. Returns a malloc'd NUL-terminated string (caller frees) and its length,
 * or NULL on OOM. */
char *og_metrics_render(const og_metrics_t *m, const og_metrics_routes_t *routes, size_t *len);

/* The list of metrics as a Markdown table (name, type, labels, help), from the same table the
 * exposition is rendered from: `omnigate metrics-markdown`, spliced into docs/operations.md. */
void og_metrics_markdown(FILE *out);

#endif
