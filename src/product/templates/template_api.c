/*
 * The template routes. See include/product/omnigate/templates/template_api.h; the SQL is
 * tpl_list and tpl_replace in sql/queries/templates.sql, Meta's listing templates/sync.c.
 *
 * The lists page like the logs (logs/tenant_page.h: limit, unknown parameters, the admin
 * mirror, the answer), ordered
 * by name, language and WABA; the cursor is the last item's "name/language/wabaId", checked
 * strictly before it reaches the statement (three parts of the catalogue's characters, no
 * more). The sync reads the tenant, then each of its WABAs from Meta in turn on the worker's
 * HTTP client, and replaces every catalogue read in one write only once all were read: a WABA
 * Meta fails for leaves every catalogue as it was.
 */
#include "omnigate/templates/template_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/app/errors.h"
#include "omnigate/json.h"
#include "omnigate/logs/tenant_page.h"
#include "omnigate/store.h"
#include "omnigate/templates/sync.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/tenants/settings.h"

#define STATUS_MAX 32 /* a template status as Meta spells them: APPROVED, PENDING_DELETION, ... */

/* ---- the lists ------------------------------------------------------------------------------- */

typedef struct tpl_list {
    og_tenant_page_t page; /* first: the shared steps of a tenant's list (logs/tenant_page.h) */
    char name[OG_SETTINGS_TEMPLATE_NAME_MAX + 1];
    char status[STATUS_MAX + 1];
    char language[OG_SETTINGS_LANGUAGE_MAX + 1];
    char cursor[OG_TPL_CURSOR_MAX + 1];
} tpl_list_t;

static bool status_valid(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= STATUS_MAX && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == n;
}

static bool digits(const char *s, size_t n)
{
    return n > 0 && n <= OG_SETTINGS_PHONE_ID_MAX && strspn(s, "0123456789") == n;
}

/* A cursor this API returned: "name/language/wabaId", each part of the catalogue's form. */
static bool cursor_valid(const char *c)
{
    size_t n = strlen(c);
    if (n == 0 || n > OG_TPL_CURSOR_MAX ||
        strspn(c, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/") != n)
        return false;
    const char *s1 = strchr(c, '/');
    const char *s2 = s1 != NULL ? strchr(s1 + 1, '/') : NULL;
    if (s2 == NULL || strchr(s2 + 1, '/') != NULL)
        return false;
    char name[OG_SETTINGS_TEMPLATE_NAME_MAX + 2], language[OG_SETTINGS_LANGUAGE_MAX + 2];
    size_t nl = (size_t)(s1 - c), ll = (size_t)(s2 - s1 - 1);
    if (nl >= sizeof(name) || ll >= sizeof(language))
        return false;
    memcpy(name, c, nl);
    name[nl] = '\0';
    memcpy(language, s1 + 1, ll);
    language[ll] = '\0';
    return og_settings_template_name_valid(name) && og_settings_template_language_valid(language) &&
           digits(s2 + 1, strlen(s2 + 1));
}

/* The list's own parameters: the filters and the cursor. */
static bool parse_list(og_tenant_page_t *p, og_err_t *err)
{
    tpl_list_t *l = (tpl_list_t *)p;
    const og_http_req_t *req = p->req;
    if (!og_tenant_page_filter(req, "name", l->name, sizeof(l->name), og_settings_template_name_valid,
                               "a template name: 1-512 of a-z, 0-9 and _", err) ||
        !og_tenant_page_filter(req, "status", l->status, sizeof(l->status), status_valid,
                               "a template status as Meta spells it (APPROVED, PAUSED, ...)", err) ||
        !og_tenant_page_filter(req, "language", l->language, sizeof(l->language),
                               og_settings_template_language_valid, "a language code such as en or en_US",
                               err))
        return false;
    int n = og_query_param(req->query, req->query_len, "cursor", l->cursor, sizeof(l->cursor));
    if (n == -1)
        l->cursor[0] = '\0';
    else if (n <= 0 || !cursor_valid(l->cursor))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "cursor", "cursor is not one this API returned");
    return true;
}

static const char *opt(const char *s)
{
    return s[0] ? s : NULL;
}

static void bind_list(og_tenant_page_t *p, og_db_call_t *call, const char *tenant_id)
{
    tpl_list_t *l = (tpl_list_t *)p;
    og_q_tpl_list(call, &(og_q_tpl_list_t){.tenant_id = tenant_id,
                                           .name = opt(l->name),
                                           .status = opt(l->status),
                                           .language = opt(l->language),
                                           .after = opt(l->cursor),
                                           .limit = p->limit_s});
}

static const char *const list_params[] = {"limit", "cursor", "name", "status", "language", NULL};
/* Scope send, not locked by the plan: not a route of the unified API (API.md §1). */
static const og_tenant_page_kind_t list_kind = {.what = "templates",
                                                .size = sizeof(tpl_list_t),
                                                .params = list_params,
                                                .scope = OG_SCOPE_SEND,
                                                .parse = parse_list,
                                                .bind = bind_list};

void og_tpl_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_serve(req, ctx, &list_kind);
}

void og_tpl_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_tenant_page_admin(req, m, ctx, &list_kind);
}

/* ---- the sync -------------------------------------------------------------------------------- */

#define NUMBERS_FIELD "settings.channels.whatsapp_meta.numbers"

/* One POST .../templates/sync in flight: the tenant's WABAs, read one after the other. */
typedef struct tpl_sync {
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    char id[37];
    json_t *settings; /* opened: wabas[] borrow from it */
    og_tpl_waba_t wabas[OG_TPL_SYNC_MAX_WABAS];
    int nwabas;
    int next; /* the WABA being read */
    og_tpl_fetch_t fetch;
    char *json[OG_TPL_SYNC_MAX_WABAS]; /* each WABA's templates, as read */
} tpl_sync_t;

static void sync_free(tpl_sync_t *s)
{
    og_db_op_clear(&s->op);
    og_tpl_fetch_clear(&s->fetch);
    for (int i = 0; i < OG_TPL_SYNC_MAX_WABAS; i++)
        free(s->json[i]);
    json_decref(s->settings);
    free(s);
}

static void replaced(og_db_op_t *op, og_db_status_t st)
{
    tpl_sync_t *s = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(s->req, &s->gw->w->log, op, st, "templates sync: recording failed",
                             "database unavailable: no catalogue was replaced");
        sync_free(s);
        return;
    }
    long long synced = 0;
    for (int i = 0; i < op->nstmts; i++)
        if (op->res[i] != NULL && PQntuples(op->res[i]) == 1)
            synced += strtoll(PQgetvalue(op->res[i], 0, OG_C_TPL_REPLACE_SYNCED), NULL, 10);
    og_api_reply(s->req, 200, "templates synced", json_pack("{s:I}", "synced", (json_int_t)synced), NULL, 0);
    sync_free(s);
}

/* Every WABA was read: one write replaces all of their catalogues. */
static void replace_all(tpl_sync_t *s)
{
    og_db_op_t *op = &s->op;
    og_db_op_clear(op);
    for (int i = 0; i < s->nwabas; i++)
        og_q_tpl_replace(&op->stmts[i],
                         &(og_q_tpl_replace_t){.waba_id = s->wabas[i].waba_id, .templates = s->json[i]});
    op->nstmts = s->nwabas;
    op->write = true;
    op->done = replaced;
    op->arg = s;
    og_db_submit(s->gw->db, op);
}

static void fetched(og_tpl_fetch_t *f);

static void read_next(tpl_sync_t *s)
{
    if (s->next == s->nwabas) {
        replace_all(s);
        return;
    }
    const og_tpl_waba_t *w = &s->wabas[s->next];
    s->fetch.done = fetched;
    s->fetch.arg = s;
    og_tpl_fetch_start(&s->fetch, s->gw->hc, s->gw->w->cfg, w->waba_id, w->access_token);
}

static void fetched(og_tpl_fetch_t *f)
{
    tpl_sync_t *s = f->arg;
    const char *waba = s->wabas[s->next].waba_id;
    if (!f->ok) {
        char errbuf[2 * sizeof(f->error)], code[80];
        og_log(&s->gw->w->log, OG_LOG_WARN, "templates sync failed",
               "\"requestId\":\"%s\",\"tenant\":\"%s\",\"wabaId\":\"%s\",\"httpStatus\":%ld,\"providerCode\":"
               "\"%s\","
               "\"error\":\"%s\"",
               s->req->request_id, s->id, waba, f->http_status,
               og_log_escape(code, sizeof(code), f->provider_code, strlen(f->provider_code)),
               og_log_escape(errbuf, sizeof(errbuf), f->error, strlen(f->error)));
        og_err_t err;
        og_err_fail(&err, OG_E_PROVIDER_ERROR, NULL, "reading the templates of WABA %s failed: %s", waba,
                    f->error);
        json_t *details = json_pack("{s:s,s:s}", "wabaId", waba, "error", f->error);
        if (details != NULL && f->http_status > 0)
            json_object_set_new(details, "httpStatus", json_integer(f->http_status));
        if (details != NULL && f->provider_code[0])
            json_object_set_new(details, "providerCode", json_string(f->provider_code));
        og_api_send_error(s->req, &err, details, NULL, NULL, 0);
        sync_free(s);
        return;
    }
    s->json[s->next] = f->json; /* kept for the write */
    f->json = NULL;
    og_tpl_fetch_clear(f);
    s->next++;
    read_next(s);
}

static void tenant_read(og_db_op_t *op, og_db_status_t st)
{
    tpl_sync_t *s = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(s->req, &s->gw->w->log, op, st, "templates sync: reading the tenant failed",
                             "database unavailable: nothing was synced");
        sync_free(s);
        return;
    }
    const PGresult *r = op->res[0];
    if (PQntuples(r) == 0) {
        og_api_error(s->req, OG_E_NOT_FOUND, NULL, "no such tenant");
        sync_free(s);
        return;
    }
    s->settings = json_loads(PQgetvalue(r, 0, OG_TENANT_SETTINGS), 0, NULL);
    if (s->settings == NULL) {
        og_api_error(s->req, OG_E_INTERNAL_ERROR, NULL, "the tenant's settings cannot be read");
        sync_free(s);
        return;
    }
    og_seal_key_t key;
    og_settings_key(&key, s->gw->w->cfg->secret);
    og_settings_open(s->settings, &key, PQgetvalue(r, 0, OG_TENANT_ID), &s->gw->w->log);
    og_seal_key_clear(&key);
    og_db_op_clear(op);
    s->nwabas = og_tpl_wabas(s->settings, s->wabas, OG_TPL_SYNC_MAX_WABAS);
    if (s->nwabas <= 0) {
        og_err_t err;
        if (s->nwabas == 0)
            og_err_fail(&err, OG_E_VALIDATION_FAILED, NUMBERS_FIELD,
                        "the tenant has no whatsapp_meta number with a wabaId: nothing to sync");
        else
            og_err_fail(&err, OG_E_VALIDATION_FAILED, NUMBERS_FIELD,
                        "the tenant's whatsapp_meta numbers name more than %d WABAs, more than one sync "
                        "replaces at once",
                        OG_TPL_SYNC_MAX_WABAS);
        og_api_send_error(s->req, &err, NULL, NULL, NULL, 0);
        sync_free(s);
        return;
    }
    for (int i = 0; i < s->nwabas; i++) {
        if (s->wabas[i].access_token == NULL) {
            char field[128];
            snprintf(field, sizeof(field), NUMBERS_FIELD ".%s.accessToken", s->wabas[i].number);
            og_api_error(s->req, OG_E_VALIDATION_FAILED, field, OG_SETTINGS_UNOPENED_MESSAGE);
            sync_free(s);
            return;
        }
    }
    read_next(s);
}

void og_tpl_admin_sync(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const none[] = {NULL};
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    if (req->body_len > 0) { /* nothing to say but an empty object */
        og_err_t err = {0};
        json_t *body = og_json_decode_body(req, none, &err);
        if (body == NULL) {
            og_api_send_error(req, &err, NULL, NULL, NULL, 0);
            return;
        }
        json_decref(body);
    }
    tpl_sync_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    /* Lower case, as PostgreSQL prints it: the associated data of the sealed secrets. */
    for (size_t i = 0; i < sizeof(id); i++)
        s->id[i] = id[i] >= 'A' && id[i] <= 'F' ? (char)(id[i] - 'A' + 'a') : id[i];
    s->gw = gw;
    s->req = req;
    og_db_op_t *op = &s->op;
    og_q_tenant_get(&op->stmts[0], &(og_q_tenant_get_t){.tenant_id = s->id});
    op->nstmts = 1;
    op->done = tenant_read;
    op->arg = s;
    og_db_submit(gw->db, op);
}
