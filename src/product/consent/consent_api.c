/*
 * Inbound messages, suppressions and recipients. See
 * include/product/omnigate/consent/consent_api.h; the SQL is sql/queries/inbound.sql.
 *
 * The lists page like the logs (logs/tenant_page.h). Inbound messages newest first, the cursor
 * the last one's id (digits); suppressions by number and kind, the cursor "+digits/kind". A
 * number in a path is E.164 ("%2B" or "+" before its digits, as a client may encode it).
 */
#include "omnigate/consent/consent_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/app/errors.h"
#include "omnigate/consent/consent.h"
#include "omnigate/json.h"
#include "omnigate/log.h"
#include "omnigate/logs/page.h"
#include "omnigate/logs/tenant_page.h"
#include "omnigate/phone.h"
#include "omnigate/smsenc.h"
#include "omnigate/store.h"
#include "omnigate/tenants/auth.h"

#define REASON_MAX 200 /* a suppression's reason, characters */

static const char *opt(const char *s)
{
    return s[0] ? s : NULL;
}

static bool channel_valid(const char *s)
{
    og_channel_t ch;
    return og_channel_parse(s, &ch);
}

static bool kind_valid(const char *s)
{
    unsigned k;
    return og_consent_kind_parse(s, &k);
}

static bool time_valid(const char *s)
{
    int64_t ms;
    return og_time_parse_rfc3339(s, &ms);
}

static bool digits_valid(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 19 && strspn(s, "0123456789") == n;
}

/* ---- GET /api/inbound ------------------------------------------------------------------------- */

typedef struct in_list {
    og_tenant_page_t page; /* first: the shared steps of a tenant's list */
    char from[20];
    char channel[16];
    char since[40], until[40];
    char since_ms[24], until_ms[24];
    char cursor[24];
} in_list_t;

static bool parse_inbound(og_tenant_page_t *p, og_err_t *err)
{
    in_list_t *l = (in_list_t *)p;
    const og_http_req_t *req = p->req;
    if (!og_tenant_page_filter(req, "from", l->from, sizeof(l->from), og_phone_e164_valid, "an E.164 number",
                               err) ||
        !og_tenant_page_filter(req, "channel", l->channel, sizeof(l->channel), channel_valid,
                               "whatsapp_qr, whatsapp_meta or sms", err) ||
        !og_tenant_page_filter(req, "since", l->since, sizeof(l->since), time_valid, "an RFC 3339 time",
                               err) ||
        !og_tenant_page_filter(req, "until", l->until, sizeof(l->until), time_valid, "an RFC 3339 time",
                               err) ||
        !og_tenant_page_filter(req, "cursor", l->cursor, sizeof(l->cursor), digits_valid,
                               "one this API returned", err))
        return false;
    int64_t ms;
    if (l->since[0] && og_time_parse_rfc3339(l->since, &ms))
        snprintf(l->since_ms, sizeof(l->since_ms), "%lld", (long long)ms);
    if (l->until[0] && og_time_parse_rfc3339(l->until, &ms))
        snprintf(l->until_ms, sizeof(l->until_ms), "%lld", (long long)ms);
    return true;
}

static void bind_inbound(og_tenant_page_t *p, og_db_call_t *call, const char *tenant_id)
{
    in_list_t *l = (in_list_t *)p;
    og_q_inbound_list(call, &(og_q_inbound_list_t){.tenant_id = tenant_id,
                                                   .from = opt(l->from),
                                                   .channel = opt(l->channel),
                                                   .since_ms = opt(l->since_ms),
                                                   .until_ms = opt(l->until_ms),
                                                   .after = opt(l->cursor),
                                                   .limit = p->limit_s});
}

static const char *const inbound_params[] = {"limit", "cursor", "from", "channel", "since", "until", NULL};
static const og_tenant_page_kind_t inbound_kind = {.what = "inbound messages",
                                                   .size = sizeof(in_list_t),
                                                   .params = inbound_params,
                                                   .scope = OG_SCOPE_LOGS,
                                                   .parse = parse_inbound,
                                                   .bind = bind_inbound};

void og_inbound_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_serve(req, ctx, &inbound_kind);
}

void og_inbound_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_admin(req, m, ctx, &inbound_kind);
}

/* ---- GET /api/suppressions -------------------------------------------------------------------- */

typedef struct sup_list {
    og_tenant_page_t page;
    char to[20];
    char kind[16];
    char cursor[40];
} sup_list_t;

/* A cursor this API returned: "+digits/kind". */
static bool sup_cursor_valid(const char *c)
{
    const char *slash = strchr(c, '/');
    char number[20];
    size_t n = slash != NULL ? (size_t)(slash - c) : 0;
    if (slash == NULL || n >= sizeof(number))
        return false;
    memcpy(number, c, n);
    number[n] = '\0';
    return og_phone_e164_valid(number) && kind_valid(slash + 1);
}

static bool parse_suppressions(og_tenant_page_t *p, og_err_t *err)
{
    sup_list_t *l = (sup_list_t *)p;
    const og_http_req_t *req = p->req;
    return og_tenant_page_filter(req, "to", l->to, sizeof(l->to), og_phone_e164_valid, "an E.164 number",
                                 err) &&
           og_tenant_page_filter(req, "channel", l->kind, sizeof(l->kind), kind_valid, "sms or whatsapp",
                                 err) &&
           og_tenant_page_filter(req, "cursor", l->cursor, sizeof(l->cursor), sup_cursor_valid,
                                 "one this API returned", err);
}

static void bind_suppressions(og_tenant_page_t *p, og_db_call_t *call, const char *tenant_id)
{
    sup_list_t *l = (sup_list_t *)p;
    og_q_suppression_list(call, &(og_q_suppression_list_t){.tenant_id = tenant_id,
                                                           .to = opt(l->to),
                                                           .kind = opt(l->kind),
                                                           .after = opt(l->cursor),
                                                           .limit = p->limit_s});
}

static const char *const sup_params[] = {"limit", "cursor", "to", "channel", NULL};
static const og_tenant_page_kind_t sup_kind = {.what = "suppressions",
                                               .size = sizeof(sup_list_t),
                                               .params = sup_params,
                                               .scope = OG_SCOPE_SEND,
                                               .parse = parse_suppressions,
                                               .bind = bind_suppressions};

void og_suppression_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_serve(req, ctx, &sup_kind);
}

void og_suppression_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_admin(req, m, ctx, &sup_kind);
}

/* ---- one number: PUT and DELETE /api/suppressions/{to}, GET /api/recipients/{to} ---------------- */

typedef enum { ROUTE_PUT, ROUTE_DELETE, ROUTE_RECIPIENT } route_t;

typedef struct num_req {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_db_op_t op;
    route_t route;
    char tenant_id[37]; /* the admin mirror's, from the path */
    char to[20];
    char kinds[32]; /* a text[] literal */
    char *reason;
} num_req_t;

static void req_free(num_req_t *r)
{
    og_db_op_clear(&r->op);
    og_tenant_release(r->auth.tenant);
    free(r->reason);
    free(r);
}

static void num_done(og_db_op_t *op, og_db_status_t st)
{
    num_req_t *r = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(r->req, &r->gw->w->log, op, st,
                             r->route == ROUTE_RECIPIENT ? "reading a recipient failed"
                                                         : "changing consent failed",
                             "database unavailable");
        req_free(r);
        return;
    }
    const PGresult *res = op->res[0];
    if (r->route == ROUTE_RECIPIENT) {
        if (PQgetisnull(res, 0, OG_C_RECIPIENT_GET_RECIPIENT)) /* the admin mirror's tenant */
            og_api_error(r->req, OG_E_NOT_FOUND, NULL, "no such tenant");
        else
            og_answer_raw(r->req, 200, "recipient", PQgetvalue(res, 0, OG_C_RECIPIENT_GET_RECIPIENT), NULL);
    } else {
        char *data = NULL;
        if (asprintf(&data, "{\"to\":\"%s\",\"suppressed\":%s,\"changed\":%s}", r->to,
                     PQgetvalue(op->res[1], 0, OG_C_SUPPRESSION_KINDS_SUPPRESSED),
                     PQgetvalue(res, 0, OG_C_SUPPRESSION_CHANGE_CHANGED)) < 0)
            og_api_error(r->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        else
            og_answer_raw(r->req, 200, r->route == ROUTE_PUT ? "suppressed" : "unsuppressed", data, NULL);
        free(data);
    }
    req_free(r);
}

static void submit(num_req_t *r, const char *tenant)
{
    og_db_op_t *op = &r->op;
    og_db_op_clear(op);
    if (r->route == ROUTE_RECIPIENT) {
        og_q_recipient_get(&op->stmts[0], &(og_q_recipient_get_t){.tenant_id = tenant, .to = r->to});
    } else {
        og_q_suppression_change(&op->stmts[0],
                                &(og_q_suppression_change_t){.tenant_id = tenant,
                                                             .to = r->to,
                                                             .kinds = r->kinds,
                                                             .out = r->route == ROUTE_PUT ? "true" : "false",
                                                             .reason = r->reason});
        og_q_suppression_kinds(&op->stmts[1], &(og_q_suppression_kinds_t){.tenant_id = tenant, .to = r->to});
    }
    op->nstmts = r->route == ROUTE_RECIPIENT ? 1 : 2;
    op->write = r->route != ROUTE_RECIPIENT;
    op->done = num_done;
    op->arg = r;
    og_db_submit(r->gw->db, op);
}

static void authed(og_auth_req_t *a)
{
    num_req_t *r = (num_req_t *)a;
    if (a->tenant == NULL) {
        req_free(r);
        return;
    }
    submit(r, a->tenant->id);
}

/* Kinds as a text[] literal from a mask. */
static void kinds_literal(char out[32], unsigned kinds)
{
    snprintf(out, 32, "{%s%s%s}", kinds & OG_CONSENT_SMS ? "sms" : "", kinds == OG_CONSENT_ALL ? "," : "",
             kinds & OG_CONSENT_WHATSAPP ? "whatsapp" : "");
}

/* PUT's body: {"channels": ["sms"|"whatsapp", ...], "reason"?}. */
static bool read_put(num_req_t *r, og_err_t *err)
{
    static const char *const fields[] = {"channels", "reason", NULL};
    json_t *body = og_json_decode_body(r->req, fields, err);
    if (body == NULL)
        return false;
    bool ok = true;
    json_t *chs = json_object_get(body, "channels");
    unsigned kinds = 0;
    if (!json_is_array(chs) || json_array_size(chs) == 0 || json_array_size(chs) > 2)
        ok = og_err_fail(err, OG_E_VALIDATION_FAILED, "channels",
                         "channels must be a non-empty array of sms and whatsapp");
    size_t i;
    json_t *v;
    json_array_foreach(ok ? chs : NULL, i, v)
    {
        unsigned k;
        if (!og_consent_kind_parse(json_string_value(v), &k) || (kinds & k)) {
            ok = og_err_fail(err, OG_E_VALIDATION_FAILED, "channels",
                             "channels[%zu] must be sms or whatsapp, each at most once", i);
            break;
        }
        kinds |= k;
    }
    const char *reason = NULL;
    size_t nchars = 0;
    if (ok)
        ok = og_json_get_string(body, "reason", false, &reason, err);
    if (ok && reason != NULL && (!og_text_validate(reason, strlen(reason), &nchars) || nchars > REASON_MAX))
        ok = og_err_fail(err, OG_E_VALIDATION_FAILED, "reason",
                         "reason must be 1-%d characters of valid UTF-8, not only whitespace", REASON_MAX);
    if (ok && reason != NULL && (r->reason = strdup(reason)) == NULL)
        ok = og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    kinds_literal(r->kinds, kinds);
    json_decref(body);
    return ok;
}

/* DELETE's query: channel=sms|whatsapp, or every kind without it. */
static bool read_delete(num_req_t *r, og_err_t *err)
{
    static const char *const known[] = {"channel", NULL};
    char kind[16];
    unsigned kinds = OG_CONSENT_ALL;
    if (!og_page_check_params(r->req->query, r->req->query_len, known, err) ||
        !og_tenant_page_filter(r->req, "channel", kind, sizeof(kind), kind_valid, "sms or whatsapp", err))
        return false;
    if (kind[0])
        og_consent_kind_parse(kind, &kinds);
    kinds_literal(r->kinds, kinds);
    return true;
}

/* The request of a route about one number; NULL after answering. */
static num_req_t *num_new(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, route_t route)
{
    num_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    r->gw = gw;
    r->req = req;
    r->route = route;
    og_err_t err = {0};
    bool ok = og_route_param(m, "to", r->to, sizeof(r->to)) && og_phone_e164_valid(r->to);
    if (!ok)
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "to", "to must be an E.164 number: + then 8-15 digits");
    else if (route == ROUTE_PUT)
        ok = read_put(r, &err);
    else if (route == ROUTE_DELETE)
        ok = read_delete(r, &err);
    if (!ok) {
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        req_free(r);
        return NULL;
    }
    return r;
}

static void serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, route_t route)
{
    og_gw_t *gw = og_gw(ctx);
    num_req_t *r = num_new(req, m, gw, route);
    if (r == NULL)
        return;
    r->auth.req = req;
    r->auth.scope = route == ROUTE_RECIPIENT ? OG_SCOPE_LOGS : OG_SCOPE_SEND;
    r->auth.done = authed;
    r->auth.op = &r->op;
    og_auth_tenant(gw->auth, &r->auth);
}

void og_suppression_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_PUT);
}

void og_suppression_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_DELETE);
}

void og_recipient_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_RECIPIENT);
}

void og_recipient_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    num_req_t *r = num_new(req, m, gw, ROUTE_RECIPIENT);
    if (r == NULL)
        return;
    memcpy(r->tenant_id, id, sizeof(r->tenant_id));
    submit(r, r->tenant_id);
}
