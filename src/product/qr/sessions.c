/*
 * QR sessions. See include/product/omnigate/qr/sessions.h; the SQL is sql/queries/qr_sessions.sql
 * and sql/027_qr_sessions.sql.
 *
 * One request: the caller (a tenant token with keys, or the admin token and the path's tenant),
 * then the tenant's row (what the gateway knows of the session, and for the admin the tenant's
 * settings), then at most three calls to WAHA's session API (devlikeapro/waha
 * src/api/sessions.controller.ts, src/api/auth.controller.ts):
 *   start:  POST /api/sessions {"name","start":true,"config":{"webhooks":[...]}}; 422 (it exists):
 *           PUT /api/sessions/{name} {"name","config"} then POST /api/sessions/{name}/start (a 422
 *           there: it runs already, GET /api/sessions/{name} says how)
 *   stop:   POST /api/sessions/{name}/stop       logout: POST /api/sessions/{name}/logout
 *   qr:     GET /api/{name}/auth/qr, Accept: image/png
 * then, but for the QR, the status WAHA answered written (qr_session_put) and the session
 * answered as GET shows it. A session.status event coming later is the truth (sql/027).
 */
#include "omnigate/qr/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/app/errors.h"
#include "omnigate/http_client.h"
#include "omnigate/ids.h"
#include "omnigate/log.h"
#include "omnigate/phone.h"
#include "omnigate/logs/tenant_page.h"
#include "omnigate/providers/provider.h"
#include "omnigate/seal.h"
#include "omnigate/store.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/tenants/settings.h"

/* The events the session's webhook asks for (API.md §23): inbound messages, acks, its status. */
static const char *const hook_events[] = {"message", "message.ack", "session.status"};

static const char *const statuses[] = {"STOPPED", "STARTING", OG_QR_SCAN_QR_CODE, OG_QR_WORKING, "FAILED"};

bool og_qr_session_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > OG_QR_SESSION_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

bool og_qr_status_valid(const char *s)
{
    for (size_t i = 0; s != NULL && i < sizeof(statuses) / sizeof(statuses[0]); i++)
        if (strcmp(s, statuses[i]) == 0)
            return true;
    return false;
}

typedef enum { QS_GET, QS_QR, QS_START, QS_STOP, QS_LOGOUT } qs_kind_t;

/* The call to WAHA in flight. */
typedef enum { CALL_CREATE, CALL_UPDATE, CALL_START, CALL_STATUS, CALL_STOP, CALL_LOGOUT, CALL_QR } call_t;

/* Each call's method and path: /api/{before}{the session's name, when named}{after}. The name
 * is letters, digits, '_' and '-' (og_qr_session_name_valid): safe in a path. */
typedef struct waha_call {
    const char *method, *before;
    bool named;
    const char *after;
} waha_call_t;

static const waha_call_t waha_calls[] = {
    [CALL_CREATE] = {"POST", "sessions", false, ""},
    [CALL_UPDATE] = {"PUT", "sessions/", true, ""},
    [CALL_START] = {"POST", "sessions/", true, "/start"},
    [CALL_STATUS] = {"GET", "sessions/", true, ""},
    [CALL_STOP] = {"POST", "sessions/", true, "/stop"},
    [CALL_LOGOUT] = {"POST", "sessions/", true, "/logout"},
    [CALL_QR] = {"GET", "", true, "/auth/qr"},
};

/* One request in flight: owns everything below until it is answered. */
typedef struct qs {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_db_op_t op;
    og_hc_req_t hc;
    qs_kind_t kind;
    call_t call;
    char tenant_id[37];
    char name[OG_QR_SESSION_NAME_MAX + 1];
    json_t *settings;           /* a reference: the token's tenant's, or read (and opened) for the admin */
    og_provider_account_t acct; /* the tenant's own server (strings of settings), or all zero */
    char status[16];            /* what WAHA said, to write */
    char number[24];            /* the account linked ("+digits"), or "" */
    char call_ms[24];           /* when the call WAHA answered was sent (ms since the epoch) */
    char answer_ms[24];         /* when its answer came */
} qs_t;

static void qs_free(qs_t *q)
{
    og_db_op_clear(&q->op);
    og_hc_req_clear(&q->hc);
    og_tenant_release(q->auth.tenant);
    json_decref(q->settings);
    free(q);
}

static void fail(qs_t *q, const og_errcode_t *code, const char *message)
{
    og_api_error(q->req, code, NULL, message);
    qs_free(q);
}

/* The server of the tenant's sessions: its own, else the configured one. NULL after answering. */
typedef struct server {
    const char *base_url, *api_key, *hook_secret;
} server_t;

static bool server_of(qs_t *q, server_t *s)
{
    const og_config_t *cfg = q->gw->w->cfg;
    if (og_settings_provider_account(q->settings, OG_CH_WHATSAPP_QR, &q->acct)) {
        if (q->acct.sealed) {
            fail(q, OG_E_CONFLICT,
                 "the tenant's whatsapp_qr server apiKey or webhookSecret does not open with this "
                 "OMNIGATE_SECRET (changed since it was stored?): set them again");
            return false;
        }
        *s = (server_t){q->acct.base_url, q->acct.secret, q->acct.hook_secret};
    } else {
        *s = (server_t){cfg->qr_base_url, cfg->qr_api_key, cfg->qr_webhook_secret};
    }
    if (s->base_url == NULL || s->base_url[0] == '\0') {
        fail(q, OG_E_CONFLICT, "no WAHA server: the tenant has none and OMNIGATE_QR_BASE_URL is not set");
        return false;
    }
    if (s->api_key != NULL && s->api_key[0] != '\0' && !og_provider_header_safe(s->api_key)) {
        fail(q, OG_E_CONFLICT, "the WAHA server's API key has characters a key cannot have");
        return false;
    }
    return true;
}

/* The body of a create (with `start`) or an update: the session's webhook, pointed back at the
 * gateway and signed with the server's webhook secret. NULL after answering. */
static char *session_body(qs_t *q, const server_t *s, bool create)
{
    const og_config_t *cfg = q->gw->w->cfg;
    if (cfg->public_url == NULL || cfg->public_url[0] == '\0') {
        fail(q, OG_E_CONFLICT, "OMNIGATE_PUBLIC_URL is not set: WAHA could not call the gateway's webhooks");
        return NULL;
    }
    if (s->hook_secret == NULL || s->hook_secret[0] == '\0') {
        fail(q, OG_E_CONFLICT,
             "the WAHA server has no webhook secret (the tenant's webhookSecret, or "
             "OMNIGATE_QR_WEBHOOK_SECRET): the gateway accepts no unsigned event");
        return NULL;
    }
    char *url = og_provider_url(cfg->public_url, "/webhooks/waha");
    json_t *events = json_array();
    for (size_t i = 0; i < sizeof(hook_events) / sizeof(hook_events[0]); i++)
        json_array_append_new(events, json_string(hook_events[i]));
    json_t *hook =
        json_pack("{s:s?,s:o,s:{s:s}}", "url", url, "events", events, "hmac", "key", s->hook_secret);
    json_t *body = json_pack("{s:s,s:{s:[o]}}", "name", q->name, "config", "webhooks", hook);
    if (body != NULL && create)
        json_object_set_new(body, "start", json_true());
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    free(url);
    if (text == NULL)
        fail(q, OG_E_UNAVAILABLE, "out of memory");
    return text;
}

static void waha_done(og_hc_req_t *r);

/* Calls WAHA; answers (and frees q) when the call cannot be made. */
static void call_waha(qs_t *q, call_t call)
{
    server_t s;
    if (!server_of(q, &s))
        return;
    og_hc_req_clear(&q->hc);
    q->call = call;
    snprintf(q->call_ms, sizeof(q->call_ms), "%llu", (unsigned long long)og_ids_now_ms());
    og_hc_req_t *r = &q->hc;
    const waha_call_t *c = &waha_calls[call];
    r->url = og_provider_url(s.base_url, "/api/%s%s%s", c->before, c->named ? q->name : "", c->after);
    r->method = c->method;
    if (call == CALL_CREATE || call == CALL_UPDATE) {
        /* Into r only once made: NULL means q (and r in it) was freed with the answer. */
        char *body = session_body(q, &s, call == CALL_CREATE);
        if (body == NULL)
            return;
        r->body = body;
        r->body_len = strlen(body);
    }
    bool ok = r->url != NULL &&
              og_hc_req_add_header(r, "Accept: %s", call == CALL_QR ? "image/png" : "application/json");
    if (ok && r->body != NULL)
        ok = og_hc_req_add_header(r, "Content-Type: application/json");
    if (ok && s.api_key != NULL && s.api_key[0] != '\0')
        ok = og_hc_req_add_header(r, "X-Api-Key: %s", s.api_key);
    if (!ok) {
        fail(q, OG_E_UNAVAILABLE, "out of memory");
        return;
    }
    r->timeout_ms = OG_QR_CALL_TIMEOUT_MS;
    r->max_response = OG_QR_PNG_MAX;
    r->done = waha_done;
    r->arg = q;
    if (og_hc_start(q->gw->hc, r) != 0)
        fail(q, OG_E_UNAVAILABLE, "the WAHA call could not start");
}

static void put_done(og_db_op_t *op, og_db_status_t st)
{
    qs_t *q = op->arg;
    if (st != OG_DB_OK)
        og_answer_db_failure(
            q->req, &q->gw->w->log, op, st, "recording a QR session failed",
            "database unavailable: WAHA has the change, the gateway learns it from WAHA's events");
    else if (PQntuples(op->res[0]) != 1) { /* never expected: the upsert returns its row */
        og_log(&q->gw->w->log, OG_LOG_ERROR, "recording a QR session returned no row", "\"session\":\"%s\"",
               q->name);
        og_api_error(q->req, OG_E_INTERNAL_ERROR, NULL,
                     "the session was recorded but could not be read back");
    } else
        og_answer_raw(q->req, 200, "session", PQgetvalue(op->res[0], 0, OG_C_QR_SESSION_PUT_SESSION), NULL);
    qs_free(q);
}

/* Writes what WAHA answered (q->status, q->number), then answers the session. */
static void put(qs_t *q, bool keep_number)
{
    og_db_op_t *op = &q->op;
    og_db_op_clear(op);
    og_q_qr_session_put(&op->stmts[0], &(og_q_qr_session_put_t){.tenant_id = q->tenant_id,
                                                                .name = q->name,
                                                                .status = q->status,
                                                                .number = q->number[0] ? q->number : NULL,
                                                                .keep = keep_number ? "true" : "false",
                                                                .at_ms = q->call_ms,
                                                                .answered_ms = q->answer_ms});
    op->nstmts = 1;
    op->write = true;
    op->done = put_done;
    op->arg = q;
    og_db_submit(q->gw->db, op);
}

/* The status and linked number of a session object WAHA answered ({"status", "me": {"id":
 * "<digits>@c.us"}}); `dflt` when it names no status we know. */
static void read_session(qs_t *q, const og_hc_req_t *r, const char *dflt)
{
    json_t *j = r->resp != NULL ? json_loadb(r->resp, r->resp_len, 0, NULL) : NULL;
    const char *st = json_string_value(json_object_get(j, "status"));
    snprintf(q->status, sizeof(q->status), "%s", og_qr_status_valid(st) ? st : dflt);
    char digits[OG_PHONE_SENDER_SIZE];
    q->number[0] = '\0';
    if (og_phone_wa_user(json_string_value(json_object_get(json_object_get(j, "me"), "id")), digits))
        snprintf(q->number, sizeof(q->number), "+%s", digits);
    json_decref(j);
}

static void waha_failed(qs_t *q, const og_hc_req_t *r)
{
    char msg[320];
    if (r->result != OG_HC_OK)
        snprintf(msg, sizeof(msg), "WAHA did not answer: %s", r->errbuf);
    else
        snprintf(msg, sizeof(msg), "WAHA answered %ld", r->http_status);
    fail(q, OG_E_PROVIDER_ERROR, msg);
}

static void waha_done(og_hc_req_t *r)
{
    qs_t *q = r->arg;
    long http = r->result == OG_HC_OK ? r->http_status : 0;
    snprintf(q->answer_ms, sizeof(q->answer_ms), "%llu", (unsigned long long)og_ids_now_ms());
    bool ok = http >= 200 && http < 300;
    switch (q->call) {
    case CALL_CREATE:
        if (http == 422) /* it exists (sessions.controller.ts: "already exists") */
            call_waha(q, CALL_UPDATE);
        else if (ok) {
            read_session(q, r, "STARTING");
            put(q, false);
        } else
            waha_failed(q, r);
        return;
    case CALL_UPDATE:
        if (ok)
            call_waha(q, CALL_START);
        else
            waha_failed(q, r);
        return;
    case CALL_START:
        if (http == 422) /* it runs already */
            call_waha(q, CALL_STATUS);
        else if (ok) {
            read_session(q, r, "STARTING");
            put(q, false);
        } else
            waha_failed(q, r);
        return;
    case CALL_STATUS:
        if (ok) {
            read_session(q, r, "STARTING");
            put(q, false);
        } else
            waha_failed(q, r);
        return;
    case CALL_STOP:
        if (ok || http == 404) { /* 404: not running */
            snprintf(q->status, sizeof(q->status), "%s", OG_QR_STOPPED);
            q->number[0] = '\0';
            put(q, true);
        } else
            waha_failed(q, r);
        return;
    case CALL_LOGOUT:
        if (ok || http == 404) {
            read_session(q, r, OG_QR_STOPPED);
            q->number[0] = '\0'; /* logged out: the next scan may link another account */
            put(q, false);
        } else
            waha_failed(q, r);
        return;
    case CALL_QR:
        if (ok && r->resp_len > 8 && memcmp(r->resp, "\x89PNG", 4) == 0) {
            static const og_http_header_t nostore[] = {{"Cache-Control", 13, "no-store", 8}};
            og_http_respond(q->req, 200, nostore, 1, "image/png", r->resp, r->resp_len);
            q->req = NULL;
            qs_free(q);
        } else if (http == 422 || http == 404) /* not waiting for a scan (auth.controller.ts) */
            fail(q, OG_E_SESSION_NOT_SCANNING, "the session is not waiting for a QR scan");
        else
            waha_failed(q, r);
        return;
    }
}

/* The tenant's row is read: the session is the tenant's, then what the route does. */
static void row_done(og_db_op_t *op, og_db_status_t st)
{
    qs_t *q = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(q->req, &q->gw->w->log, op, st, "reading a QR session failed",
                             "database unavailable");
        qs_free(q);
        return;
    }
    const PGresult *r = op->res[0];
    if (PQntuples(r) == 0) {
        fail(q, OG_E_NOT_FOUND, "no such tenant");
        return;
    }
    if (q->settings == NULL) { /* the admin's: read, secrets opened */
        og_seal_key_t key;
        q->settings = json_loads(PQgetvalue(r, 0, OG_C_QR_SESSION_GET_SETTINGS), 0, NULL);
        if (q->settings == NULL) {
            fail(q, OG_E_UNAVAILABLE, "out of memory");
            return;
        }
        og_settings_key(&key, q->gw->w->cfg->secret);
        og_settings_open(q->settings, &key, q->tenant_id, &q->gw->w->log);
        og_seal_key_clear(&key);
    }
    if (!og_settings_qr_session_used(q->settings, q->name)) {
        fail(q, OG_E_NOT_FOUND, "no whatsapp_qr number of the tenant uses this session");
        return;
    }
    bool known = !PQgetisnull(r, 0, OG_C_QR_SESSION_GET_SESSION);
    const char *session = PQgetvalue(r, 0, OG_C_QR_SESSION_GET_SESSION);
    switch (q->kind) {
    case QS_GET:
        if (!known)
            fail(q, OG_E_NOT_FOUND, "the gateway knows nothing of this session yet: start it");
        else {
            og_answer_raw(q->req, 200, "session", session, NULL);
            qs_free(q);
        }
        return;
    case QS_QR: {
        json_t *j = known ? json_loads(session, 0, NULL) : NULL;
        bool scanning = json_is_string(json_object_get(j, "status")) &&
                        strcmp(json_string_value(json_object_get(j, "status")), OG_QR_SCAN_QR_CODE) == 0;
        json_decref(j);
        if (!scanning)
            fail(q, OG_E_SESSION_NOT_SCANNING,
                 "the session is not waiting for a QR scan (its status is not SCAN_QR_CODE)");
        else
            call_waha(q, CALL_QR);
        return;
    }
    case QS_START:
        call_waha(q, CALL_CREATE);
        return;
    case QS_STOP:
        call_waha(q, CALL_STOP);
        return;
    case QS_LOGOUT:
        call_waha(q, CALL_LOGOUT);
        return;
    }
}

static void read_row(qs_t *q)
{
    og_db_op_t *op = &q->op;
    og_db_op_clear(op);
    og_q_qr_session_get(&op->stmts[0], &(og_q_qr_session_get_t){.tenant_id = q->tenant_id, .name = q->name});
    op->nstmts = 1;
    op->done = row_done;
    op->arg = q;
    og_db_submit(q->gw->db, op);
}

static void authed(og_auth_req_t *a)
{
    qs_t *q = (qs_t *)a;
    if (a->tenant == NULL) { /* answered */
        qs_free(q);
        return;
    }
    memcpy(q->tenant_id, a->tenant->id, sizeof(q->tenant_id));
    q->settings = json_incref(a->tenant->settings);
    read_row(q);
}

/* The request of a route about session {name}; NULL after answering. */
static qs_t *qs_new(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, qs_kind_t kind)
{
    char name[OG_QR_SESSION_NAME_MAX + 2];
    if (!og_route_param(m, "name", name, sizeof(name)) || !og_qr_session_name_valid(name, strlen(name))) {
        og_api_error(req, OG_E_NOT_FOUND, NULL,
                     "no such session: a name is 1-64 letters, digits, '_' or '-'");
        return NULL;
    }
    qs_t *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    q->gw = gw;
    q->req = req;
    q->kind = kind;
    snprintf(q->name, sizeof(q->name), "%s", name);
    return q;
}

static void serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, qs_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    qs_t *q = qs_new(req, m, gw, kind);
    if (q == NULL)
        return;
    q->auth.req = req;
    q->auth.scope = OG_SCOPE_KEYS;
    q->auth.done = authed;
    q->auth.op = &q->op;
    og_auth_tenant(gw->auth, &q->auth);
}

static void serve_admin(og_http_req_t *req, const og_route_match_t *m, void *ctx, qs_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    qs_t *q = qs_new(req, m, gw, kind);
    if (q == NULL)
        return;
    memcpy(q->tenant_id, id, sizeof(q->tenant_id));
    read_row(q);
}

void og_qr_session_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, QS_GET);
}

void og_qr_session_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, QS_QR);
}

void og_qr_session_start(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, QS_START);
}

void og_qr_session_stop(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, QS_STOP);
}

void og_qr_session_logout(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, QS_LOGOUT);
}

void og_qr_session_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve_admin(req, m, ctx, QS_GET);
}

void og_qr_session_admin_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve_admin(req, m, ctx, QS_QR);
}

void og_qr_session_admin_start(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve_admin(req, m, ctx, QS_START);
}

void og_qr_session_admin_stop(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve_admin(req, m, ctx, QS_STOP);
}

void og_qr_session_admin_logout(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve_admin(req, m, ctx, QS_LOGOUT);
}
