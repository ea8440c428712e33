/*
 * The routes of tenant webhooks (API.md §12). See include/product/omnigate/tenant_webhooks/webhook_api.h.
 *
 * The secret is generated here (webhooks.h), sealed with the tenant's id as associated data
 * before it reaches the database, and opened only to be shown once (creation, rotation) or
 * masked. It never reaches a log line: the admin routes log nothing of their bodies.
 *
 * The tenant's own routes of its webhook (API.md §23: GET/PUT/DELETE /api/webhook, POST
 * /api/webhook/rotate-secret, scope keys) run the admin routes' code for the tenant of the caller's
 * token instead of the tenant of the path: the same bodies, statements and answers.
 *
 * The admin mirrors of the tenant's delivery routes (GET /admin/tenants/{id}/webhook/deliveries,
 * POST /admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry; API.md §17) run the tenant
 * routes' code with the admin token and the tenant of the path instead of a tenant token.
 */
#include "omnigate/tenant_webhooks/webhook_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/tenants/admin.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/app/ctx.h"
#include "omnigate/json.h"
#include "omnigate/logs/tenant_page.h"
#include "omnigate/store.h"
#include "omnigate/tenant_webhooks/webhooks.h"
#include "omnigate/util.h"

json_t *og_wh_row_json(const PGresult *r, int row, const og_seal_key_t *key, const char *tenant_id,
                       bool reveal)
{
    char secret[OG_WH_SECRET_LEN + 1] = "", masked[OG_WH_MASKED_MAX] = "";
    if (og_wh_secret_open(key, tenant_id, PQgetvalue(r, row, OG_WH_SECRET), secret) && !reveal)
        og_wh_secret_mask(secret, masked);
    json_t *events = json_loads(PQgetvalue(r, row, OG_WH_EVENTS), 0, NULL);
    bool enabled = PQgetisnull(r, row, OG_WH_DISABLED);
    json_t *j = json_pack(
        "{s:s,s:o,s:s,s:b,s:o,s:o,s:s,s:s}", "url", PQgetvalue(r, row, OG_WH_URL), "events",
        events ? events : json_array(), "secret", reveal ? secret : masked, "enabled", enabled, "disabledAt",
        enabled ? json_null() : json_string(PQgetvalue(r, row, OG_WH_DISABLED)), "disabledReason",
        enabled ? json_null() : json_string(PQgetvalue(r, row, OG_WH_DISABLED_REASON)), "createdAt",
        PQgetvalue(r, row, OG_WH_CREATED), "updatedAt", PQgetvalue(r, row, OG_WH_UPDATED));
    OPENSSL_cleanse(secret, sizeof(secret));
    return j;
}

/* ---- the webhook itself: admin routes and the tenant's own ------------------------------------ */

typedef enum { W_PUT, W_GET, W_DELETE, W_ROTATE } wh_conf_kind_t;

/* One request about a tenant's webhook in flight, an admin route's or the tenant's own (API.md
 * §23): owns its parameters until the database answers. */
typedef struct wh_conf {
    og_db_op_t op;
    /* A tenant route: the caller's token, authenticated with `op`; then `id` is its tenant's.
     * Unused (tenant NULL) on admin routes. */
    og_auth_req_t auth;
    og_http_req_t *req;
    og_gw_t *gw;
    wh_conf_kind_t kind;
    char id[37]; /* lower case, as PostgreSQL prints it: the associated data of the seal */
    char *url;
    char events[OG_WH_EVENTS_LIT];
    char secret[OG_WH_SECRET_LEN + 1];
    char *sealed;
    og_seal_key_t key;
} wh_conf_t;

static void conf_free(wh_conf_t *a)
{
    og_db_op_clear(&a->op);
    og_tenant_release(a->auth.tenant);
    free(a->url);
    free(a->sealed);
    OPENSSL_cleanse(a->secret, sizeof(a->secret));
    og_seal_key_clear(&a->key);
    free(a);
}

static void conf_done(og_db_op_t *op, og_db_status_t st)
{
    wh_conf_t *a = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(a->req, &a->gw->w->log, op, st, "webhook query failed", "database unavailable");
        conf_free(a);
        return;
    }
    PGresult *r = op->res[0];
    if (PQntuples(r) == 0) {
        og_api_error(a->req, OG_E_NOT_FOUND, NULL,
                     a->kind == W_PUT ? "no such tenant" : "the tenant has no webhook");
        conf_free(a);
        return;
    }
    bool created = a->kind == W_PUT && PQgetvalue(r, 0, OG_WH_INSERTED)[0] == 't';
    bool reveal = created || a->kind == W_ROTATE;
    const char *message = a->kind == W_GET      ? "webhook"
                          : a->kind == W_DELETE ? "webhook deleted"
                          : reveal              ? "the webhook's secret is shown only this once"
                                                : "webhook updated";
    og_api_reply(a->req, 200, message, og_wh_row_json(r, 0, &a->key, a->id, reveal), NULL, 0);
    conf_free(a);
}

static wh_conf_t *conf_new(og_http_req_t *req, og_gw_t *gw, wh_conf_kind_t kind)
{
    wh_conf_t *a = calloc(1, sizeof(*a));
    if (a == NULL || !og_wh_seal_key(&a->key, gw->w->cfg->secret)) {
        free(a);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    a->req = req;
    a->gw = gw;
    a->kind = kind;
    return a;
}

/* A new secret, sealed for the tenant into a->sealed. False when out of memory. */
static bool new_secret(wh_conf_t *a)
{
    og_wh_secret_new(a->secret);
    a->sealed = og_seal(&a->key, a->id, a->secret, strlen(a->secret));
    return a->sealed != NULL;
}

/* Answers a request refused before its statement, and frees it. */
static void conf_refuse(wh_conf_t *a, const og_err_t *err)
{
    og_api_send_error(a->req, err, NULL, NULL, NULL, 0);
    conf_free(a);
}

/* Reads the request of kind a->kind about the webhook of tenant a->id and submits its statement,
 * or answers why not: the one body of these routes, whoever calls. */
static void conf_start(wh_conf_t *a)
{
    static const char *const allowed[] = {"url", "events", NULL};
    const og_config_t *cfg = a->gw->w->cfg;
    og_http_req_t *req = a->req;
    og_db_op_t *op = &a->op;
    og_err_t err = {0};
    switch (a->kind) {
    case W_PUT: {
        const char *url = NULL;
        json_t *body = og_json_decode_body(req, allowed, &err);
        if (body == NULL || !og_json_get_string(body, "url", true, &url, &err) ||
            !og_wh_url_check(url, cfg->webhook_allow_http, cfg->webhook_allow_private, &err) ||
            !og_wh_events_parse(json_object_get(body, "events"), a->events, &err)) {
            json_decref(body);
            conf_refuse(a, &err);
            return;
        }
        a->url = strdup(url);
        json_decref(body);
        if (a->url == NULL || !new_secret(a)) {
            og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
            conf_refuse(a, &err);
            return;
        }
        og_q_wh_put(
            &op->stmts[0],
            &(og_q_wh_put_t){.tenant_id = a->id, .url = a->url, .events = a->events, .secret = a->sealed});
        break;
    }
    case W_GET:
        og_q_wh_get(&op->stmts[0], &(og_q_wh_get_t){.tenant_id = a->id});
        break;
    case W_DELETE:
        og_q_wh_delete(&op->stmts[0], &(og_q_wh_delete_t){.tenant_id = a->id});
        break;
    case W_ROTATE:
        if (req->body_len > 0) {
            og_err_fail(&err, OG_E_VALIDATION_FAILED, NULL, "rotate-secret takes no body");
            conf_refuse(a, &err);
            return;
        }
        if (!new_secret(a)) {
            og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
            conf_refuse(a, &err);
            return;
        }
        og_q_wh_rotate(&op->stmts[0], &(og_q_wh_rotate_t){.tenant_id = a->id, .secret = a->sealed});
        break;
    }
    op->nstmts = 1;
    op->write = a->kind != W_GET;
    op->done = conf_done;
    op->arg = a;
    og_db_submit(a->gw->db, op);
}

/* An admin route: the admin token, the tenant of the path. */
static void admin_serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, wh_conf_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    if (!og_admin_db(req, gw))
        return;
    char id[37];
    if (!og_route_param(m, "id", id, sizeof(id)) || !og_store_uuid_valid(id)) {
        og_api_error(req, OG_E_NOT_FOUND, NULL, "no such tenant");
        return;
    }
    wh_conf_t *a = conf_new(req, gw, kind);
    if (a == NULL)
        return;
    for (size_t i = 0; i < sizeof(id); i++)
        a->id[i] = id[i] >= 'A' && id[i] <= 'F' ? (char)(id[i] - 'A' + 'a') : id[i];
    conf_start(a);
}

static void tenant_authed(og_auth_req_t *auth)
{
    wh_conf_t *a = container_of(auth, wh_conf_t, auth);
    if (auth->tenant == NULL) { /* answered */
        conf_free(a);
        return;
    }
    memcpy(a->id, auth->tenant->id, sizeof(a->id));
    conf_start(a);
}

/* A tenant route (API.md §23): a token with scope keys, the tenant of the token. */
static void tenant_serve(og_http_req_t *req, void *ctx, wh_conf_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    wh_conf_t *a = conf_new(req, gw, kind);
    if (a == NULL)
        return;
    a->auth.req = req;
    a->auth.scope = OG_SCOPE_KEYS;
    a->auth.done = tenant_authed;
    a->auth.op = &a->op;
    og_auth_tenant(gw->auth, &a->auth);
}

void og_wh_admin_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_serve(req, m, ctx, W_PUT);
}

void og_wh_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_serve(req, m, ctx, W_GET);
}

void og_wh_admin_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_serve(req, m, ctx, W_DELETE);
}

void og_wh_admin_rotate(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_serve(req, m, ctx, W_ROTATE);
}

void og_wh_tenant_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, ctx, W_PUT);
}

void og_wh_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, ctx, W_GET);
}

void og_wh_tenant_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, ctx, W_DELETE);
}

void og_wh_tenant_rotate(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, ctx, W_ROTATE);
}

/* ---- the tenant's deliveries ------------------------------------------------------------------ */

static const char *const statuses[] = {"pending", "failed", "delivered", "exhausted", NULL};

typedef struct wh_list {
    og_tenant_page_t page; /* first: the shared steps of a tenant's list (logs/tenant_page.h) */
    char status[16];
    char cursor[24];
} wh_list_t;

/* The list's own parameters: status and the cursor. */
static bool parse_list(og_tenant_page_t *p, og_err_t *err)
{
    wh_list_t *l = (wh_list_t *)p;
    const og_http_req_t *req = p->req;
    int n = og_query_param(req->query, req->query_len, "status", l->status, sizeof(l->status));
    if (n == 0 || n < -1)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "status", "status is empty or malformed");
    if (n == -1) {
        l->status[0] = '\0';
    } else {
        bool ok = false;
        for (const char *const *s = statuses; *s && !ok; s++)
            ok = strcmp(l->status, *s) == 0;
        if (!ok)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "status",
                               "status must be pending, failed, delivered or exhausted");
    }
    n = og_query_param(req->query, req->query_len, "cursor", l->cursor, sizeof(l->cursor));
    if (n == -1) {
        l->cursor[0] = '\0';
    } else if (n <= 0 || n > 18 || strspn(l->cursor, "0123456789") != (size_t)n || l->cursor[0] == '0') {
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "cursor", "cursor is not one this API returned");
    }
    return true;
}

/* The items are JSON already (og_webhook_item); the cursor is a decimal id. */
static void bind_list(og_tenant_page_t *p, og_db_call_t *call, const char *tenant_id)
{
    wh_list_t *l = (wh_list_t *)p;
    og_q_wh_deliveries(call, &(og_q_wh_deliveries_t){.tenant_id = tenant_id,
                                                     .status = l->status[0] ? l->status : NULL,
                                                     .cursor = l->cursor[0] ? l->cursor : NULL,
                                                     .limit = p->limit_s});
}

static const char *const list_params[] = {"limit", "cursor", "status", NULL};
static const og_tenant_page_kind_t list_kind = {.what = "webhook deliveries",
                                                .size = sizeof(wh_list_t),
                                                .params = list_params,
                                                .scope = OG_SCOPE_LOGS,
                                                .parse = parse_list,
                                                .bind = bind_list};

void og_wh_deliveries(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_serve(req, ctx, &list_kind);
}

void og_wh_admin_deliveries(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_admin(req, m, ctx, &list_kind);
}

typedef struct wh_retry_op {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    char id[40];
    char tenant_id[37]; /* admin mirror: the tenant of the path */
} wh_retry_op_t;

static void retry_done(og_db_op_t *op, og_db_status_t st)
{
    wh_retry_op_t *t = op->arg;
    og_http_req_t *req = t->req;
    if (st != OG_DB_OK) {
        og_answer_db_failure(req, &t->gw->w->log, op, st, "webhook retry failed", "database unavailable");
    } else {
        const char *outcome = PQgetvalue(op->res[0], 0, OG_C_WH_RETRY_OUTCOME);
        if (strcmp(outcome, "ok") == 0) {
            json_t *item = json_loads(PQgetvalue(op->res[0], 0, OG_C_WH_RETRY_ITEM), 0, NULL);
            og_api_reply(req, 200, "one more try is queued", item, NULL, 0);
            og_jobs_wake(t->gw->jobs);
        } else if (strcmp(outcome, "disabled") == 0) {
            og_api_error(req, OG_E_WEBHOOK_DISABLED, NULL,
                         "the tenant has no enabled webhook: set it again (PUT) before retrying");
        } else {
            og_api_error(req, OG_E_NOT_FOUND, NULL, "no such delivery");
        }
    }
    og_db_op_clear(op);
    og_tenant_release(t->auth.tenant);
    free(t);
}

static void retry_submit(wh_retry_op_t *t, const char *tenant_id)
{
    og_db_op_t *op = &t->op;
    op->nstmts = 1;
    og_q_wh_retry(&op->stmts[0], &(og_q_wh_retry_t){.tenant_id = tenant_id, .delivery_id = t->id});
    op->write = true;
    op->done = retry_done;
    op->arg = t;
    og_db_submit(t->gw->db, op);
}

static void retry_authed(og_auth_req_t *a)
{
    wh_retry_op_t *t = (wh_retry_op_t *)a;
    if (a->tenant == NULL) {
        free(t);
        return;
    }
    retry_submit(t, a->tenant->id);
}

/* A delivery id: "msg_" + 32 lower-case hex digits. */
static bool delivery_id_valid(const char *s)
{
    return strncmp(s, "msg_", 4) == 0 && strlen(s) == 36 && strspn(s + 4, "0123456789abcdef") == 32;
}

/* A retry with the delivery id of the path (param `name`); a malformed id is some other
 * tenant's as much as a missing one: 404 from the statement, after the token. */
static wh_retry_op_t *retry_new(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, const char *name)
{
    wh_retry_op_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    if (!og_route_param(m, name, t->id, sizeof(t->id)) || !delivery_id_valid(t->id))
        t->id[0] = '\0';
    t->gw = gw;
    t->req = req;
    return t;
}

void og_wh_retry(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    wh_retry_op_t *t = retry_new(req, m, gw, "id");
    if (t == NULL)
        return;
    t->auth.req = req;
    t->auth.scope = OG_SCOPE_LOGS;
    t->auth.done = retry_authed;
    t->auth.op = &t->op;
    og_auth_tenant(gw->auth, &t->auth);
}

/* An unknown tenant has no such delivery: 404 not_found from the same statement. */
void og_wh_admin_retry(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    wh_retry_op_t *t = retry_new(req, m, gw, "deliveryId");
    if (t == NULL)
        return;
    memcpy(t->tenant_id, id, sizeof(id));
    retry_submit(t, t->tenant_id);
}
