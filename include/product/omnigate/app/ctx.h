/*
 * The app context: the per-worker state every feature of `omnigate serve` shares (database
 * pools, auth cache, outbound HTTP, provider state, rate-limit buckets, durable steps), in
 * w->app_data. Features include this header, never the route table (app/gateway.h): only the
 * gateway knows every feature, so no feature module includes another through the app.
 * Responsible for the struct; not for making or closing it (app/gateway.c does both).
 */
#ifndef OMNIGATE_APP_CTX_H
#define OMNIGATE_APP_CTX_H

#include "omnigate/db.h"
#include "omnigate/ids.h"
#include "omnigate/jobs.h"
#include "omnigate/providers/provider.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/tenants/ratelimit.h"
#include "omnigate/worker.h"

struct og_whout;
struct og_nowa;
struct og_status_sweep;
struct og_callbacks_metrics;
struct og_tpl_cache;
struct og_queue;
struct og_consent;

/* Per-worker state of the gateway, in w->app_data. */
typedef struct og_gw {
    og_worker_t *w;
    og_db_t *db; /* NULL when OMNIGATE_DATABASE_URL is unset */
    /* Log queries only (docs/persistence.md): a read pool on OMNIGATE_DATABASE_READ_URL, else on
     * OMNIGATE_DATABASE_URL; NULL exactly when db is. Anything that must see its own writes
     * (auth, idempotency, OTP, sends, admin) stays on db. */
    og_db_t *rdb;
    og_jobs_t *jobs; /* durable steps of this worker, NULL without a database */
    struct og_whout
        *whout; /* tenant webhooks out (tenant_webhooks/webhooks_out.h), NULL without a database */
    og_auth_t *auth;
    struct og_hc *hc;     /* outbound HTTP to the providers */
    og_providers_t prov;  /* what attempts need: hc, the configuration, the circuit breakers */
    struct og_nowa *nowa; /* numbers not on WhatsApp (messaging/nowa.h); NULL without a database */
    og_rl_t rl;           /* per-tenant rate limit buckets of this worker */
    og_ids_pool_t ids;    /* random bytes of this worker's references (ids.h) */
    /* WhatsApp template catalogue entries (templates/catalogue.h); NULL without a database. */
    struct og_tpl_cache *tpl;
    /* The release of queued messages (queue/release.h); NULL without a database. */
    struct og_queue *queue;
    /* The copy of consent and WhatsApp windows (consent/consent.h); NULL without a database. */
    struct og_consent *consent;
    /* Worker 0 with a database only: the status sweep (callbacks/status_sweep.h). */
    struct og_status_sweep *status_sweep;
    int closing; /* pieces still closing in the gateway's stop */

    /* The metric blocks, in the worker's slot, of the features that keep no state of their own
     * (NULL: no metrics), found once when the app starts. */
    struct og_callbacks_metrics *callbacks_m; /* callbacks/webhooks_in.h */
    uint64_t *nowa_skips;                     /* messaging/send.h */
    uint64_t *log_query_timeouts;             /* logs/logs_api.h */
} og_gw_t;

/* The app context of a route's or a step's ctx (the og_worker_t serving og_gateway_app). */
static inline og_gw_t *og_gw(void *ctx)
{
    return ((og_worker_t *)ctx)->app_data;
}

#endif
