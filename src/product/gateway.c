/*
 * The gateway app: the route table of `omnigate serve` and the per-worker state behind it.
 * Responsible for wiring modules into a worker; not for what any route does.
 */
#include "omnigate/gateway.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "omnigate/admin.h"
#include "omnigate/fallback.h"
#include "omnigate/ids.h"
#include "omnigate/http_client.h"
#include "omnigate/logs_api.h"
#include "omnigate/nowa.h"
#include "omnigate/ops.h"
#include "omnigate/otp.h"
#include "omnigate/pages.h"
#include "omnigate/send.h"
#include "omnigate/store.h"
#include "omnigate/sweep.h"
#include "omnigate/testhooks.h"
#include "omnigate/util.h"
#include "omnigate/webhook_api.h"
#include "omnigate/webhooks_in.h"
#include "omnigate/webhooks_out.h"

#define SWEEP_MS 250

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
    {"PUT", "/admin/tenants/{id}/webhook", og_wh_admin_put},
    {"GET", "/admin/tenants/{id}/webhook", og_wh_admin_get},
    {"DELETE", "/admin/tenants/{id}/webhook", og_wh_admin_delete},
    {"POST", "/admin/tenants/{id}/webhook/rotate-secret", og_wh_admin_rotate},
    {"GET", "/admin/tenants/{id}/webhook/deliveries", og_wh_admin_deliveries},
    {"POST", "/admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry", og_wh_admin_retry},
    {"GET", "/console", og_pages_serve},
    {"GET", "/console/app.js", og_pages_serve},
    {"GET", "/console/app.css", og_pages_serve},
    {"POST", "/api/omni/send", og_send_omni},
    {"POST", "/api/sms/send", og_sms_send},
    {"POST", "/api/sms/otp/send", og_otp_send},
    {"POST", "/api/sms/otp/verify", og_otp_verify},
    {"GET", "/api/omni/logs", og_logs_omni},
    {"GET", "/api/sms/logs", og_logs_sms},
    {"GET", "/api/sms/otp/logs", og_logs_otp},
    {"GET", "/api/webhooks/deliveries", og_wh_deliveries},
    {"POST", "/api/webhooks/deliveries/{id}/retry", og_wh_retry},
    {"GET", "/webhooks/meta", og_webhook_meta_verify},
    {"POST", "/webhooks/meta", og_webhook_meta, OG_WEBHOOK_MAX_BODY},
    {"POST", "/webhooks/twilio", og_webhook_twilio, OG_WEBHOOK_MAX_BODY},
    {"POST", "/webhooks/waha", og_webhook_waha, OG_WEBHOOK_MAX_BODY},
    {"GET", "/openapi.json", og_pages_serve},
};

/* ---- the status sweep (worker 0 of each instance) ------------------------------------------
 * A status committed while its attempt's insert was in flight stays unmatched (neither
 * transaction saw the other); every 250 ms og_status_sweep adopts such statuses (a failed status
 * adopted this way also moves a delivery-based fallback on), prunes week-old
 * unmatched ones and reports how many recent ones still wait (sql/005_delivery_status.sql). */

static void swept(og_db_op_t *op, og_db_status_t st)
{
    og_gw_t *gw = container_of(op, og_gw_t, sweep_op);
    if (st == OG_DB_OK && op->res[0] != NULL && PQntuples(op->res[0]) == 1 && gw->w->m != NULL)
        og_metrics_gauge(&gw->w->m->statuses_waiting, strtoull(PQgetvalue(op->res[0], 0, 0), NULL, 10));
    og_db_op_clear(op);
    gw->sweeping = false;
}

static void on_sweep(uv_timer_t *t)
{
    og_gw_t *gw = container_of(t, og_gw_t, sweep_timer);
    if (gw->sweeping || !og_db_ready(gw->db))
        return;
    gw->sweeping = true;
    gw->sweep_op = (og_db_op_t){.nstmts = 1, .write = true, .done = swept};
    gw->sweep_op.stmts[0].stmt = OG_Q_STATUS_SWEEP;
    og_db_submit(gw->db, &gw->sweep_op);
}

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
        og_db_set_metrics(gw->db, w->m);
        const char *read_url =
            w->cfg->database_read_url != NULL ? w->cfg->database_read_url : w->cfg->database_url;
        gw->rdb = og_db_new_reader(&w->loop, &w->log, read_url, w->cfg->db_read_pool, w->cfg->db_timeout_ms,
                                   w->cfg->log_query_timeout_ms, og_store_stmts, OG_Q__COUNT);
        if (gw->rdb == NULL)
            return -1;
        og_db_set_metrics(gw->rdb, w->m);
    }
    gw->hc = og_hc_new(&w->loop, &w->log);
    if (gw->hc == NULL)
        return -1;
    og_hc_set_metrics(gw->hc, w->m);
    if (!og_providers_init(&gw->prov, gw->hc, w->cfg))
        return -1;
    gw->auth = og_auth_new(&w->loop, gw->db, &w->log, w->cfg->secret, w->cfg->auth_ttl_ms);
    if (gw->auth == NULL)
        return -1;
    og_rl_init(&gw->rl, w->cfg->workers);
    og_auth_set_rate_limit(gw->auth, &gw->rl, w->m);
    if (gw->db != NULL) {
        /* Leases name the worker: host, pid and a random tag (pids repeat across hosts). */
        char host[64] = "", owner[96];
        uint32_t tag;
        gethostname(host, sizeof(host) - 1);
        og_ids_random(&tag, sizeof(tag));
        snprintf(owner, sizeof(owner), "%.63s:%d:%08x", host, (int)getpid(), tag);
        gw->nowa = og_nowa_new(&w->loop, gw->db, w->cfg->not_on_whatsapp_ttl_s);
        if (gw->nowa == NULL)
            return -1;
        gw->jobs = og_jobs_new(&w->loop, gw->db, &w->log, w->m, owner, w->index == 0);
        if (gw->jobs == NULL || og_fallback_register(gw) != 0 || og_sweep_register(gw) != 0 ||
            (gw->whout = og_whout_start(gw)) == NULL)
            return -1;
        og_jobs_start(gw->jobs);
    }
    if (gw->db != NULL && w->index == 0) {
        uv_timer_init(&w->loop, &gw->sweep_timer);
        uv_timer_start(&gw->sweep_timer, on_sweep, SWEEP_MS, SWEEP_MS);
        uv_unref((uv_handle_t *)&gw->sweep_timer);
        gw->sweep_started = true;
    }
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

static void sweep_closed(uv_handle_t *h)
{
    gw_piece_closed(container_of((uv_timer_t *)h, og_gw_t, sweep_timer));
}

static void close_rest(og_gw_t *gw);

static void jobs_closed(void *arg)
{
    close_rest(arg);
}

static void gw_stop(og_worker_t *w)
{
    og_gw_t *gw = w->app_data;
    if (gw == NULL)
        return;
    gw->closing = 1;
    /* Steps first: a running step still needs the pool and the HTTP client to end. */
    if (gw->jobs != NULL) {
        og_jobs_close(gw->jobs, jobs_closed, gw);
        return;
    }
    close_rest(gw);
}

static void close_rest(og_gw_t *gw)
{
    if (gw->whout != NULL) { /* after the steps: no run uses its HTTP client any more */
        gw->closing++;
        og_whout_close(gw->whout, gw_piece_closed, gw);
        gw->whout = NULL;
    }
    if (gw->sweep_started) {
        gw->closing++;
        uv_close((uv_handle_t *)&gw->sweep_timer, sweep_closed);
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
    return NULL;
}

const og_app_t og_gateway_app = {
    .routes = routes,
    .nroutes = sizeof(routes) / sizeof(routes[0]),
    .start = gw_start,
    .stop = gw_stop,
    .not_ready = gw_not_ready,
};
