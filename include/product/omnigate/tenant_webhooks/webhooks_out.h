/*
 * Tenant webhooks out (API.md §12): the runner of the durable `webhook` steps, one per tenant
 * with deliveries due (sql/011_webhooks_out.sql), and the outbox gauges. Responsible for trying
 * a tenant's due deliveries (Standard Webhooks signature, at most OG_WHOUT_INFLIGHT at once, the
 * SSRF guard, a bounded read of the answer), recording every try and scheduling the next by the
 * retry schedule; not for writing events (the triggers of sql/010), the webhook's rules
 * (webhooks.h) or its routes (webhook_api.h).
 *
 * The limit of OG_WHOUT_INFLIGHT deliveries in flight holds per tenant across every worker and
 * instance: a tenant's deliveries are tried only by the holder of its one step. Each worker runs
 * at most OG_WHOUT_RUNS such steps, so slow tenants never take every step slot from the
 * delivery-based fallback, and its requests go through an HTTP client of their own, so they
 * share neither connections nor a curl queue with the providers.
 */
#ifndef OMNIGATE_TENANT_WEBHOOKS_WEBHOOKS_OUT_H
#define OMNIGATE_TENANT_WEBHOOKS_WEBHOOKS_OUT_H

/* The step kind of a tenant's deliveries (og_jobs_register; the steps metrics' label), also the
 * NOTIFY og_steps payload that asks for one (sql/011). */
#define OG_WHOUT_STEP_KIND "webhook"

#include "omnigate/app/ctx.h"
#include "omnigate/metrics.h"

#define OG_WHOUT_INFLIGHT  8           /* deliveries in flight per tenant */
#define OG_WHOUT_RUNS      32          /* tenants served at once per worker */
#define OG_WHOUT_READ_MAX  (64 * 1024) /* bytes of an answer read before it is cut off */
#define OG_WHOUT_MAX_TRIES 8           /* the first try and 7 retries */

typedef struct og_whout og_whout_t;

/* Its metric block (metrics.h): tries by outcome and by HTTP status class, and the outbox
 * gauges. The app registers it (worker.h). */
extern const og_m_block_t og_whout_metrics_block;

/* Registers the `webhook` step kind on gw->jobs and sets up the module's state (its HTTP
 * client; on worker 0 the sampler of the outbox gauges). NULL when it cannot. */
og_whout_t *og_whout_start(og_gw_t *gw);

/* Closes the HTTP client and the sampler, after gw->jobs has closed (no step runs any more);
 * `closed` is called once everything is closed and the state freed. */
void og_whout_close(og_whout_t *wo, void (*closed)(void *arg), void *arg);

/* The delay before try `n` + 1 after `n` failed tries (1-7): 5 s, 5 min, 30 min, 2 h, 5 h,
 * 10 h, 10 h, divided by `divisor` (tests), plus up to 10% from `jitter` (0-65535), or the
 * answer's Retry-After when that is longer (only for 429 and 503). -1 after the last try. */
long long og_whout_retry_delay_ms(int n, int divisor, unsigned jitter, int http_status, long retry_after_s);

#endif
