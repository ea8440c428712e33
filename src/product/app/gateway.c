/*
 * The gateway app: the route table of `omnigate serve` and the per-worker state behind it.
 * Responsible for wiring modules into a worker; not for what any route does.
 */
#include "omnigate/app/gateway.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "omnigate/app/ctx.h"
#include "omnigate/callbacks/status_sweep.h"
#include "omnigate/consent/consent.h"
#include "omnigate/consent/consent_api.h"
#include "omnigate/costs/rates_api.h"
#include "omnigate/costs/usage.h"
#include "omnigate/costs/usage_api.h"
#include "omnigate/queue/message_api.h"
#include "omnigate/queue/release.h"
#include "omnigate/tenants/admin.h"
#include "omnigate/steps/fallback.h"
#include "omnigate/ids.h"
#include "omnigate/http_client.h"
#include "omnigate/logs/logs_api.h"
#include "omnigate/messaging/nowa.h"
#include "omnigate/ops.h"
#include "omnigate/messaging/otp.h"
#include "omnigate/static/static_files.h"
#include "omnigate/messaging/send.h"
#include "omnigate/messaging/sms.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/steps/pending_sweep.h"
#include "omnigate/app/testhooks.h"
#include "omnigate/util.h"
#include "omnigate/queue/batch_api.h"
#include "omnigate/qr/sessions.h"
#include "omnigate/templates/sync.h"
#include "omnigate/templates/template_api.h"
#include "omnigate/tenant_webhooks/webhook_api.h"
#include "omnigate/callbacks/webhooks_in.h"
#include "omnigate/tenant_webhooks/webhooks_out.h"
#include "omnigate/http_metrics.h"

static const og_route_t routes[] = {
    OG_OPS_ROUTES,
    OG_TESTHOOK_ROUTES{"GET", "/admin/tenants", og_admin_tenant_list},
    {"POST", "/admin/tenants", og_admin_tenant_create},
    {"GET", "/admin/tenants/{id}", og_admin_tenant_get},
    {"PATCH", "/admin/tenants/{id}", og_admin_tenant_patch},
    {"POST", "/admin/tenants/{id}/tokens", og_admin_token_create},
    {"GET", "/admin/tenants/{id}/tokens", og_admin_token_list},
    {"DELETE", "/admin/tenants/{id}/tokens/{tokenId}", og_admin_token_revoke},
    {"GET", "/admin/tenants/{id}/omni/logs", og_admin_logs_omni},
    {"GET", "/admin/tenants/{id}/sms/logs", og_admin_logs_sms},
    {"GET", "/admin/tenants/{id}/otp/logs", og_admin_logs_otp},
    {"GET", "/admin/tenants/{id}/batches/{batchId}", og_batch_admin_get},
    {"PUT", "/admin/tenants/{id}/webhook", og_wh_admin_put},
    {"GET", "/admin/tenants/{id}/webhook", og_wh_admin_get},
    {"DELETE", "/admin/tenants/{id}/webhook", og_wh_admin_delete},
    {"POST", "/admin/tenants/{id}/webhook/rotate-secret", og_wh_admin_rotate},
    {"GET", "/admin/tenants/{id}/webhook/deliveries", og_wh_admin_deliveries},
    {"POST", "/admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry", og_wh_admin_retry},
    {"GET", "/admin/tenants/{id}/templates", og_tpl_admin_list},
    {"POST", "/admin/tenants/{id}/templates/sync", og_tpl_admin_sync},
    {"GET", "/admin/tenants/{id}/inbound", og_inbound_admin_list},
    {"GET", "/admin/tenants/{id}/whatsapp/sessions/{name}", og_qr_session_admin_get},
    {"GET", "/admin/tenants/{id}/whatsapp/sessions/{name}/qr", og_qr_session_admin_qr},
    {"POST", "/admin/tenants/{id}/whatsapp/sessions/{name}/start", og_qr_session_admin_start},
    {"POST", "/admin/tenants/{id}/whatsapp/sessions/{name}/stop", og_qr_session_admin_stop},
    {"POST", "/admin/tenants/{id}/whatsapp/sessions/{name}/logout", og_qr_session_admin_logout},
    {"GET", "/admin/tenants/{id}/suppressions", og_suppression_admin_list},
    {"GET", "/admin/tenants/{id}/recipients/{to}", og_recipient_admin_get},
    {"GET", "/admin/rates", og_rates_admin_get},
    {"PUT", "/admin/rates", og_rates_admin_put, OG_RATES_MAX_BODY},
    {"GET", "/admin/usage", og_usage_admin_all},
    {"GET", "/admin/tenants/{id}/usage", og_usage_admin_tenant},
    {"GET", "/api/usage", og_usage_get},
    {"GET", "/console", og_static_serve},
    {"GET", "/console/app.js", og_static_serve},
    {"GET", "/console/app.css", og_static_serve},
    {"POST", "/api/omni/send", og_send_omni},
    {"POST", "/api/sms/send", og_sms_send},
    {"POST", "/api/sms/otp/send", og_otp_send},
    {"POST", "/api/sms/otp/verify", og_otp_verify},
    {"GET", "/api/omni/logs", og_logs_omni},
    {"GET", "/api/omni/messages/{reference}", og_queue_message_get},
    {"POST", "/api/omni/messages/{reference}/cancel", og_queue_message_cancel},
    {"GET", "/api/omni/queue", og_queue_list},
    {"POST", "/api/omni/batches", og_batch_create, OG_BATCH_MAX_BODY},
    {"GET", "/api/omni/batches/{batchId}", og_batch_get},
    {"POST", "/api/omni/batches/{batchId}/cancel", og_batch_cancel},
    {"GET", "/api/sms/logs", og_logs_sms},
    {"GET", "/api/sms/otp/logs", og_logs_otp},
    {"GET", "/api/webhooks/deliveries", og_wh_deliveries},
    {"POST", "/api/webhooks/deliveries/{id}/retry", og_wh_retry},
    {"GET", "/api/tenant", og_tenant_self},
    {"GET", "/api/tokens", og_tenant_token_list},
    {"POST", "/api/tokens", og_tenant_token_create},
    {"DELETE", "/api/tokens/{id}", og_tenant_token_revoke},
    {"GET", "/api/webhook", og_wh_tenant_get},
    {"PUT", "/api/webhook", og_wh_tenant_put},
    {"DELETE", "/api/webhook", og_wh_tenant_delete},
    {"POST", "/api/webhook/rotate-secret", og_wh_tenant_rotate},
    {"GET", "/api/whatsapp/templates", og_tpl_list},
    {"GET", "/api/whatsapp/sessions/{name}", og_qr_session_get},
    {"GET", "/api/whatsapp/sessions/{name}/qr", og_qr_session_qr},
    {"POST", "/api/whatsapp/sessions/{name}/start", og_qr_session_start},
    {"POST", "/api/whatsapp/sessions/{name}/stop", og_qr_session_stop},
    {"POST", "/api/whatsapp/sessions/{name}/logout", og_qr_session_logout},
    {"GET", "/api/inbound", og_inbound_list},
    {"GET", "/api/suppressions", og_suppression_list},
    {"PUT", "/api/suppressions/{to}", og_suppression_put},
    {"DELETE", "/api/suppressions/{to}", og_suppression_delete},
    {"GET", "/api/recipients/{to}", og_recipient_get},
    {"GET", "/webhooks/meta", og_webhook_meta_verify},
    {"POST", "/webhooks/meta", og_webhook_meta, OG_WEBHOOK_MAX_BODY},
    {"POST", "/webhooks/twilio", og_webhook_twilio, OG_WEBHOOK_MAX_BODY},
    {"POST", "/webhooks/twilio/inbound", og_webhook_twilio_inbound, OG_WEBHOOK_MAX_BODY},
    {"POST", "/webhooks/waha", og_webhook_waha, OG_WEBHOOK_MAX_BODY},
    {"GET", "/openapi.json", og_static_serve},
};
/* Every route gets its own label in the request metrics (http_metrics.h). */
_Static_assert(sizeof(routes) / sizeof(routes[0]) <= OG_HTTP_M_ROUTES, "raise OG_HTTP_M_ROUTES");

/* The kinds of durable steps the features register (og_jobs_register), which the steps metrics
 * label by; each is its feature's constant. A kind missing here would run uncounted. */
static const char *const step_kind_names[] = {OG_FALLBACK_STEP_KIND, OG_WHOUT_STEP_KIND,
                                              OG_PENDING_SWEEP_STEP_KIND, OG_TPL_SYNC_STEP_KIND};
static const og_jobs_kinds_t step_kinds = {sizeof(step_kind_names) / sizeof(step_kind_names[0]),
                                           step_kind_names};

/* The metric blocks of every layer the gateway uses, in exposition order after the HTTP
 * server's (worker.h). */
// clang-format off
static const og_m_reg_t metric_blocks[] = {
    {&og_providers_metrics_block, NULL},    /* providers/provider.h */
    {&og_db_metrics_block, NULL},           /* db_metrics.h: both pools */
    {&og_callbacks_metrics_block, NULL},    /* callbacks/webhooks_in.h */
    {&og_send_metrics_block, NULL},         /* messaging/send.h */
    {&og_status_sweep_metrics_block, NULL}, /* callbacks/status_sweep.h */
    {&og_jobs_metrics_block, &step_kinds},  /* jobs.h */
    {&og_whout_metrics_block, NULL},        /* tenant_webhooks/webhooks_out.h */
    {&og_logs_metrics_block, NULL},         /* logs/logs_api.h */
    {&og_auth_metrics_block, NULL},         /* tenants/auth.h: the rate limit */
    {&og_queue_metrics_block, NULL},        /* queue/release.h */
    {&og_consent_metrics_block, NULL},      /* consent/consent.h */
};
// clang-format on

static int gw_start(og_worker_t *w)
{
    og_gw_t *gw = calloc(1, sizeof(*gw));
    if (gw == NULL)
        return -1;
    gw->w = w;
    w->app_data = gw;
    if (w->cfg->database_url != NULL) {
        gw->db = og_db_new(&w->loop, &w->log, w->cfg->database_url, w->cfg->db_pool, w->cfg->db_timeout_ms,
                           og_store_stmts, OG_Q__COUNT);
        if (gw->db == NULL || !og_db_set_listener(gw->db, w->cfg->db_listen, w->cfg->database_listen_url))
            return -1;
        og_db_set_prepared(gw->db, w->cfg->db_prepared);
        og_db_set_metrics(gw->db, og_worker_metrics(w, &og_db_metrics_block));
        og_usage_tally_init(gw->db); /* the sync sends' usage, once per write batch (API.md §22) */
        const char *read_url =
            w->cfg->database_read_url != NULL ? w->cfg->database_read_url : w->cfg->database_url;
        gw->rdb = og_db_new_reader(&w->loop, &w->log, read_url, w->cfg->db_read_pool, w->cfg->db_timeout_ms,
                                   w->cfg->log_query_timeout_ms, og_store_stmts, OG_Q__COUNT);
        if (gw->rdb == NULL)
            return -1;
        og_db_set_metrics(gw->rdb, og_worker_metrics(w, &og_db_metrics_block));
    }
    gw->hc = og_hc_new(&w->loop, &w->log);
    if (gw->hc == NULL)
        return -1;
    if (!og_providers_init(&gw->prov, gw->hc, w->cfg))
        return -1;
    gw->prov.m = og_worker_metrics(w, &og_providers_metrics_block);
    gw->callbacks_m = og_worker_metrics(w, &og_callbacks_metrics_block);
    gw->nowa_skips = og_worker_metrics(w, &og_send_metrics_block);
    gw->log_query_timeouts = og_worker_metrics(w, &og_logs_metrics_block);
    gw->auth = og_auth_new(&w->loop, gw->db, &w->log, w->cfg->secret, w->cfg->auth_ttl_ms);
    if (gw->auth == NULL)
        return -1;
    og_rl_init(&gw->rl, w->cfg->workers);
    og_auth_set_rate_limit(gw->auth, &gw->rl, og_worker_metrics(w, &og_auth_metrics_block));
    if (gw->db != NULL) {
        /* Leases name the worker: host, pid and a random tag (pids repeat across hosts). */
        char host[64] = "", owner[96];
        uint32_t tag;
        gethostname(host, sizeof(host) - 1);
        og_ids_random(&tag, sizeof(tag));
        snprintf(owner, sizeof(owner), "%.63s:%d:%08x", host, (int)getpid(), tag);
        gw->nowa = og_nowa_new(&w->loop, gw->db, w->cfg->not_on_whatsapp_ttl_s);
        gw->tpl = og_tpl_cache_new(&w->loop, gw->db);
        if (gw->nowa == NULL || gw->tpl == NULL)
            return -1;
        gw->jobs = og_jobs_new(&w->loop, gw->db, &w->log, og_worker_metrics(w, &og_jobs_metrics_block),
                               &step_kinds, owner, w->index == 0);
        if (gw->jobs == NULL || og_fallback_register(gw) != 0 || og_sweep_register(gw) != 0 ||
            og_tpl_sync_register(gw) != 0 || (gw->whout = og_whout_start(gw)) == NULL)
            return -1;
        og_jobs_start(gw->jobs);
        if ((gw->consent = og_consent_start(gw, w->index == 0)) == NULL)
            return -1;
        if ((gw->queue = og_queue_start(gw, w->index == 0)) == NULL)
            return -1;
    }
    if (gw->db != NULL && w->index == 0 && (gw->status_sweep = og_status_sweep_start(gw)) == NULL)
        return -1;
    return 0;
}

static void gw_piece_closed(void *arg)
{
    og_gw_t *gw = arg;
    if (--gw->closing == 0) {
        gw->w->app_data = NULL;
        if (gw->jobs != NULL)
            og_jobs_free(gw->jobs); /* the pool, and its LISTEN callback, are gone now */
        og_nowa_free(gw->nowa);
        og_tpl_cache_free(gw->tpl);   /* the pool is closed: no background read is in flight */
        og_providers_free(&gw->prov); /* the HTTP client is closed: no attempt is in flight */
        free(gw);
    }
}

static void auth_closed(void *arg)
{
    og_gw_t *gw = arg;
    if (gw->hc != NULL) {
        gw->closing++;
        og_hc_close(gw->hc, gw_piece_closed, gw);
        gw->hc = NULL;
    }
    if (gw->rdb != NULL) {
        gw->closing++;
        og_db_close(gw->rdb, gw_piece_closed, gw);
        gw->rdb = NULL;
    }
    /* The pool goes last: the auth module's final last_used_at batch rides on it. */
    if (gw->db != NULL) {
        gw->closing++;
        og_db_close(gw->db, gw_piece_closed, gw);
        gw->db = NULL;
    }
    gw_piece_closed(gw);
}

static void close_rest(og_gw_t *gw);

static void jobs_closed(void *arg)
{
    close_rest(arg);
}

/* Steps next: a running step still needs the pool and the HTTP client to end. */
static void close_jobs(og_gw_t *gw)
{
    if (gw->jobs != NULL) {
        og_jobs_close(gw->jobs, jobs_closed, gw);
        return;
    }
    close_rest(gw);
}

static void queue_closed(void *arg)
{
    og_gw_t *gw = arg;
    gw->queue = NULL;
    close_jobs(gw);
}

static void gw_stop(og_worker_t *w)
{
    og_gw_t *gw = w->app_data;
    if (gw == NULL)
        return;
    gw->closing = 1;
    /* The queue's releases first: they record their outcomes with the pool and take no more. */
    if (gw->queue != NULL) {
        og_queue_close(gw->queue, queue_closed, gw);
        return;
    }
    close_jobs(gw);
}

static void close_rest(og_gw_t *gw)
{
    if (gw->whout != NULL) { /* after the steps: no run uses its HTTP client any more */
        gw->closing++;
        og_whout_close(gw->whout, gw_piece_closed, gw);
        gw->whout = NULL;
    }
    if (gw->consent != NULL) { /* before the pool, which ends its read if one is in flight */
        gw->closing++;
        og_consent_close(gw->consent, gw_piece_closed, gw);
        gw->consent = NULL;
    }
    if (gw->status_sweep != NULL) { /* before the pool, which ends its operation if one is in flight */
        gw->closing++;
        og_status_sweep_close(gw->status_sweep, gw_piece_closed, gw);
        gw->status_sweep = NULL;
    }
    if (gw->auth != NULL) {
        og_auth_close(gw->auth, auth_closed, gw);
        gw->auth = NULL;
        return;
    }
    auth_closed(gw);
}

/* Ready means the write path works: an instance whose read connections (or replica) are down
 * still takes sends, and its log routes answer 503 meanwhile (docs/operations.md). */
static const char *gw_not_ready(og_worker_t *w)
{
    og_gw_t *gw = w->app_data;
    if (gw->db == NULL)
        return "no database configured";
    if (!og_db_ready(gw->db))
        return "database unreachable";
    if (!og_consent_ready(gw->consent))
        return "consent not loaded yet";
    return NULL;
}

const og_app_t og_gateway_app = {
    .routes = routes,
    .nroutes = sizeof(routes) / sizeof(routes[0]),
    .start = gw_start,
    .stop = gw_stop,
    .not_ready = gw_not_ready,
    .metrics = metric_blocks,
    .nmetrics = sizeof(metric_blocks) / sizeof(metric_blocks[0]),
};
