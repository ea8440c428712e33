/*
 * The gateway app served by `omnigate serve`: its routes and per-worker state (database
 * pool, auth cache, outbound HTTP). Responsible for wiring; not for any one route.
 */
#ifndef OMNIGATE_GATEWAY_H
#define OMNIGATE_GATEWAY_H

#include "omnigate/auth.h"
#include "omnigate/db.h"
#include "omnigate/ratelimit.h"
#include "omnigate/worker.h"

extern const og_app_t og_gateway_app;

/* Per-worker state of the gateway, in w->app_data. */
typedef struct og_gw {
    og_worker_t *w;
    og_db_t *db; /* NULL when OMNIGATE_DATABASE_URL is unset */
    og_auth_t *auth;
    struct og_hc *hc; /* outbound HTTP to the providers */
    og_rl_t rl;       /* per-tenant rate limit buckets of this worker */
    int closing;      /* handles still closing in gateway stop */
} og_gw_t;

static inline og_gw_t *og_gw(void *ctx)
{
    return ((og_worker_t *)ctx)->app_data;
}

/* Admin routes (admin.c). */
void og_admin_tenant_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_patch(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* Unified send (send.c). */
void og_send_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* SMS and OTP (otp.c). */
void og_sms_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_otp_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_otp_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* Log routes (logs.c). */
void og_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
