/*
 * The gateway app served by `omnigate serve`: its route table and the per-worker state the
 * routes share (database pool, auth cache, outbound HTTP, rate-limit buckets). Responsible
 * for wiring; not for any one route (send.h, otp.h, logs_api.h, admin.h).
 */
#ifndef OMNIGATE_GATEWAY_H
#define OMNIGATE_GATEWAY_H

#include "omnigate/auth.h"
#include "omnigate/db.h"
#include "omnigate/jobs.h"
#include "omnigate/provider.h"
#include "omnigate/ratelimit.h"
#include "omnigate/worker.h"

extern const og_app_t og_gateway_app;

/* Per-worker state of the gateway, in w->app_data. */
typedef struct og_gw {
    og_worker_t *w;
    og_db_t *db; /* NULL when OMNIGATE_DATABASE_URL is unset */
    /* Log queries only (docs/persistence.md): a read pool on OMNIGATE_DATABASE_READ_URL, else on
     * OMNIGATE_DATABASE_URL; NULL exactly when db is. Anything that must see its own writes
     * (auth, idempotency, OTP, sends, admin) stays on db. */
    og_db_t *rdb;
    og_jobs_t *jobs;        /* durable steps of this worker, NULL without a database */
    struct og_whout *whout; /* tenant webhooks out (webhooks_out.h), NULL without a database */
    og_auth_t *auth;
    struct og_hc *hc;     /* outbound HTTP to the providers */
    og_providers_t prov;  /* what attempts need: hc, the configuration, the circuit breakers */
    struct og_nowa *nowa; /* numbers not on WhatsApp (nowa.h); NULL without a database */
    og_rl_t rl;           /* per-tenant rate limit buckets of this worker */
    int closing;          /* handles still closing in gateway stop */
    /* Worker 0 only: the status sweep (gateway.c). */
    uv_timer_t sweep_timer;
    bool sweep_started;
    bool sweeping; /* sweep_op in flight */
    og_db_op_t sweep_op;
} og_gw_t;

static inline og_gw_t *og_gw(void *ctx)
{
    return ((og_worker_t *)ctx)->app_data;
}

#endif
