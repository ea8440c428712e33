/*
 * Admin API (API.md §5): tenants and their tokens, behind the admin token. Every answer
 * masks tenant secrets; a token is shown once, at creation. Settings secrets are sealed before
 * every write and opened (to be masked, or merged) after every read, with the tenant's id as
 * associated data: a new tenant's id is therefore chosen here, before its settings are sealed.
 * GET /admin/tenants pages like the logs (logs/page.h: the same limit, cursor and answer shape),
 * newest first, its cursor the last tenant id of the page.
 * Saving settings whose whatsapp_meta numbers name a wabaId (a new tenant's, or a PATCH that
 * changes the numbers) makes the template sync of those WABAs due now in the same write
 * (templates/sync.h), and wakes this worker's steps once it committed.
 * The tenant's own token routes (API.md §23, scope keys) and GET /api/tenant run the same
 * operations for the tenant of the caller's token instead of the tenant of the path: one reading
 * of a token creation's body, one statement, one answer for both; a tenant's token grants at most
 * its own scopes.
 * Responsible for these routes' validation and answers; the SQL is in sql/queries/tenants.sql
 * and tokens.sql.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/tenants/admin.h"
#include "omnigate/app/ctx.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/logs/page.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/store.h"
#include "omnigate/templates/sync.h"
#include "omnigate/token.h"
#include "omnigate/util.h"

#define MAX_NAME_CHARS    OG_ADMIN_MAX_NAME_CHARS
#define MAX_PATCH_RETRIES 5

typedef enum {
    A_TENANT_LIST,
    A_TENANT_CREATE,
    A_TENANT_GET,
    A_TENANT_PATCH_READ,
    A_TENANT_PATCH_WRITE,
    A_TOKEN_CREATE,
    A_TOKEN_LIST,
    A_TOKEN_REVOKE,
    A_TENANT_SELF
} admin_kind_t;

/* One request in flight, an admin route's or a tenant route's (API.md §23): owns its parameters
 * until the database answers. */
typedef struct admin_op {
    og_db_op_t op;
    /* A tenant route: the caller's token, authenticated with `op`; then `id` is its tenant's and
     * auth.scopes the most a token it creates may have. Unused (tenant NULL) on admin routes. */
    og_auth_req_t auth;
    og_http_req_t *req;
    og_gw_t *gw;
    admin_kind_t kind;
    char id[37];
    char token_id[37];
    char *name;           /* strdup'd */
    og_admin_list_t list; /* GET /admin/tenants: the page asked for */
    char *settings_text;  /* json_dumps'd */
    const char *unified;  /* "true" / "false" / NULL */
    json_t *patch;        /* PATCH settings (merge patch), owned */
    /* The settings being saved when their WABAs' template sync is to be due now (a new
     * tenant's, or a PATCH that changes the Meta numbers), owned; NULL: no sync. */
    json_t *sync_settings;
    char *wabas;  /* tpl_sync_schedule's text[] of WABA ids, malloc'd */
    bool syncing; /* the write carries tpl_sync_schedule: wake the steps after COMMIT */
    int tries;
    char token[64];
    char prefix[16];
    char hash[65];
    char scopes[OG_SCOPE_CSV_MAX];
    char xmin[24];     /* row version read by a PATCH, "" when none */
    og_seal_key_t key; /* seals and opens settings secrets (settings.h) */
} admin_op_t;

static void admin_op_free(admin_op_t *a)
{
    og_db_op_clear(&a->op);
    og_tenant_release(a->auth.tenant);
    free(a->name);
    free(a->settings_text);
    json_decref(a->patch);
    json_decref(a->sync_settings);
    free(a->wabas);
    OPENSSL_cleanse(a->token, sizeof(a->token));
    og_seal_key_clear(&a->key);
    free(a);
}

static void db_failed(admin_op_t *a, og_db_status_t st)
{
    og_answer_db_failure(a->req, &a->gw->w->log, &a->op, st, "admin query failed", "database unavailable");
}

/* The stored settings of tenant row `row`, their secrets opened; NULL when unreadable. */
static json_t *opened_settings(admin_op_t *a, PGresult *r, int row)
{
    json_t *settings = json_loads(PQgetvalue(r, row, OG_TENANT_SETTINGS), 0, NULL);
    if (settings != NULL)
        og_settings_open(settings, &a->key, PQgetvalue(r, row, OG_TENANT_ID), &a->gw->w->log);
    return settings;
}

/* Seals the secrets of `settings` for tenant `id` and keeps its text as the value to store.
 * False when out of memory. */
static bool seal_for_store(admin_op_t *a, json_t *settings, const char *id)
{
    free(a->settings_text);
    a->settings_text =
        og_settings_seal(settings, &a->key, id) >= 0 ? json_dumps(settings, JSON_COMPACT) : NULL;
    return a->settings_text != NULL;
}

static json_t *tenant_json(admin_op_t *a, PGresult *r, int row)
{
    json_t *settings = opened_settings(a, r, row);
    json_t *masked = settings ? og_settings_mask(settings) : json_object();
    json_decref(settings);
    return json_pack("{s:s,s:s,s:b,s:o,s:s,s:s}", "id", PQgetvalue(r, row, OG_TENANT_ID), "name",
                     PQgetvalue(r, row, OG_TENANT_NAME), "unifiedApiEnabled",
                     PQgetvalue(r, row, OG_TENANT_UNIFIED)[0] == 't', "settings", masked, "createdAt",
                     PQgetvalue(r, row, OG_TENANT_CREATED), "updatedAt",
                     PQgetvalue(r, row, OG_TENANT_UPDATED));
}

static json_t *nullable(PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? json_null() : json_string(PQgetvalue(r, row, col));
}

static json_t *scopes_json(const char *csv)
{
    json_t *arr = json_array();
    while (*csv) {
        size_t n = strcspn(csv, ",");
        json_array_append_new(arr, json_stringn(csv, n));
        csv += n;
        if (*csv == ',')
            csv++;
    }
    return arr;
}

static json_t *token_json(PGresult *r, int row)
{
    return json_pack("{s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", PQgetvalue(r, row, OG_TOKEN_ID), "name",
                     PQgetvalue(r, row, OG_TOKEN_NAME), "prefix", PQgetvalue(r, row, OG_TOKEN_PREFIX),
                     "scopes", scopes_json(PQgetvalue(r, row, OG_TOKEN_SCOPES)), "createdAt",
                     PQgetvalue(r, row, OG_TOKEN_CREATED), "lastUsedAt", nullable(r, row, OG_TOKEN_LAST_USED),
                     "revokedAt", nullable(r, row, OG_TOKEN_REVOKED));
}

/* GET /api/tenant: who is calling (API.md §23, docs/api-decisions.md). */
static json_t *self_json(admin_op_t *a, PGresult *r)
{
    char scopes[OG_SCOPE_CSV_MAX];
    og_scope_csv(a->auth.scopes, scopes);
    return json_pack("{s:s,s:s,s:b,s:o}", "id", PQgetvalue(r, 0, OG_TENANT_ID), "name",
                     PQgetvalue(r, 0, OG_TENANT_NAME), "unifiedApiEnabled",
                     PQgetvalue(r, 0, OG_TENANT_UNIFIED)[0] == 't', "scopes", scopes_json(scopes));
}

static void submit(admin_op_t *a);

static void patch_write(admin_op_t *a, PGresult *current);

static void admin_done(og_db_op_t *op, og_db_status_t st)
{
    admin_op_t *a = op->arg;
    if (st != OG_DB_OK) {
        db_failed(a, st);
        admin_op_free(a);
        return;
    }
    PGresult *r = op->res[0];
    int rows = r ? PQntuples(r) : 0;
    switch (a->kind) {
    case A_TENANT_LIST: {
        int shown = rows > a->list.limit ? a->list.limit : rows;
        json_t *items = json_array();
        for (int i = 0; i < shown; i++)
            json_array_append_new(items, tenant_json(a, r, i));
        json_t *next =
            rows > a->list.limit ? json_string(PQgetvalue(r, shown - 1, OG_TENANT_ID)) : json_null();
        og_api_reply(a->req, 200, "tenants", json_pack("{s:o,s:o}", "items", items, "nextCursor", next), NULL,
                     0);
        break;
    }
    case A_TENANT_CREATE:
        og_api_reply(a->req, 201, "tenant created", tenant_json(a, r, 0), NULL, 0);
        if (a->syncing)
            og_jobs_wake(a->gw->jobs);
        break;
    case A_TENANT_GET:
    case A_TENANT_SELF:
        if (rows == 0)
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such tenant");
        else
            og_api_reply(a->req, 200, "tenant",
                         a->kind == A_TENANT_GET ? tenant_json(a, r, 0) : self_json(a, r), NULL, 0);
        break;
    case A_TENANT_PATCH_READ:
        if (rows == 0) {
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such tenant");
            break;
        }
        patch_write(a, r);
        return; /* a is either resubmitted or answered and freed */
    case A_TENANT_PATCH_WRITE:
        if (rows == 1) {
            og_api_reply(a->req, 200, "tenant updated", tenant_json(a, r, 0), NULL, 0);
            if (a->syncing)
                og_jobs_wake(a->gw->jobs);
        } else if (a->patch != NULL && ++a->tries < MAX_PATCH_RETRIES) {
            /* Someone changed the tenant between our read and write: merge again. */
            a->kind = A_TENANT_PATCH_READ;
            og_db_op_clear(&a->op);
            submit(a);
            return;
        } else if (a->patch != NULL) {
            og_api_error(a->req, OG_E_CONFLICT, NULL, "the tenant kept changing; try again");
        } else {
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such tenant");
        }
        break;
    case A_TOKEN_CREATE: {
        PGresult *t = op->res[1];
        if (rows == 1) {
            json_t *data = token_json(r, 0);
            json_object_set_new(data, "token", json_string(a->token));
            json_object_del(data, "lastUsedAt");
            json_object_del(data, "revokedAt");
            og_api_reply(a->req, 201, "token created: it is shown only this once", data, NULL, 0);
        } else if (t != NULL && PQntuples(t) == 1) {
            og_api_error(a->req, OG_E_UNIFIED_API_LOCKED, NULL,
                         "the tenant's plan locks the unified API: enable it before generating a token");
        } else {
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such tenant");
        }
        break;
    }
    case A_TOKEN_LIST: {
        if (op->res[1] == NULL || PQntuples(op->res[1]) == 0) {
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such tenant");
            break;
        }
        json_t *items = json_array();
        for (int i = 0; i < rows; i++)
            json_array_append_new(items, token_json(r, i));
        og_api_reply(a->req, 200, "tokens", json_pack("{s:o}", "items", items), NULL, 0);
        break;
    }
    case A_TOKEN_REVOKE:
        if (rows == 0)
            og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such token");
        else
            og_api_reply(a->req, 200, "token revoked", token_json(r, 0), NULL, 0);
        break;
    }
    admin_op_free(a);
}

/* Adds at op->stmts[n] the statement that makes the template sync of a->sync_settings' WABAs
 * due now, if any (templates/sync.h); returns how many statements it added, or -1 when out of
 * memory: the save must not commit without it, since a WABA's periodic sync is the step this
 * statement makes. */
static int sync_stmt(admin_op_t *a, og_db_op_t *op, int n)
{
    a->syncing = false;
    if (a->sync_settings == NULL || a->settings_text == NULL)
        return 0;
    /* Every WABA id is in the settings' text: the literal is never longer. */
    size_t cap = strlen(a->settings_text) + 3;
    free(a->wabas);
    if ((a->wabas = malloc(cap)) == NULL)
        return -1;
    a->syncing = og_tpl_sync_schedule_stmt(op, n, a->id, a->sync_settings, a->wabas, cap) == 1;
    return a->syncing ? 1 : 0;
}

/* sync_stmt after the write's first statement; false after answering 503 (out of memory). */
static bool add_sync_stmt(admin_op_t *a, og_db_op_t *op)
{
    int k = sync_stmt(a, op, 1);
    if (k < 0) {
        og_api_error(a->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        admin_op_free(a);
        return false;
    }
    op->nstmts += k;
    return true;
}

static void submit(admin_op_t *a)
{
    og_db_op_t *op = &a->op;
    op->done = admin_done;
    op->arg = a;
    op->write = false;
    switch (a->kind) {
    case A_TENANT_LIST:
        op->nstmts = 1;
        og_q_tenants_list(&op->stmts[0],
                          &(og_q_tenants_list_t){.cursor = a->list.cursor[0] ? a->list.cursor : NULL,
                                                 .name = a->list.name[0] ? a->list.name : NULL,
                                                 .limit = a->list.limit_s});
        break;
    case A_TENANT_CREATE:
        op->nstmts = 1;
        og_q_tenant_insert(&op->stmts[0], &(og_q_tenant_insert_t){.name = a->name,
                                                                  .unified = a->unified,
                                                                  .settings = a->settings_text,
                                                                  .id = a->id});
        if (!add_sync_stmt(a, op))
            return;
        op->write = true;
        break;
    case A_TENANT_GET:
    case A_TENANT_PATCH_READ:
    case A_TENANT_SELF:
        op->nstmts = 1;
        og_q_tenant_get(&op->stmts[0], &(og_q_tenant_get_t){.tenant_id = a->id});
        break;
    case A_TENANT_PATCH_WRITE:
        op->nstmts = 1;
        og_q_tenant_update(&op->stmts[0], &(og_q_tenant_update_t){.tenant_id = a->id,
                                                                  .name = a->name,
                                                                  .unified = a->unified,
                                                                  .settings = a->settings_text,
                                                                  .xmin = a->xmin[0] ? a->xmin : NULL});
        if (!add_sync_stmt(a, op))
            return;
        op->write = true;
        break;
    case A_TOKEN_CREATE:
        op->nstmts = 2;
        og_q_token_insert(&op->stmts[0], &(og_q_token_insert_t){.tenant_id = a->id,
                                                                .name = a->name,
                                                                .prefix = a->prefix,
                                                                .hash = a->hash,
                                                                .scopes = a->scopes});
        og_q_tenant_unified(&op->stmts[1], &(og_q_tenant_unified_t){.tenant_id = a->id});
        op->write = true;
        break;
    case A_TOKEN_LIST:
        op->nstmts = 2;
        og_q_token_list(&op->stmts[0], &(og_q_token_list_t){.tenant_id = a->id});
        og_q_tenant_unified(&op->stmts[1], &(og_q_tenant_unified_t){.tenant_id = a->id});
        break;
    case A_TOKEN_REVOKE:
        op->nstmts = 1;
        og_q_token_revoke(&op->stmts[0], &(og_q_token_revoke_t){.tenant_id = a->id, .token_id = a->token_id});
        op->write = true;
        break;
    }
    og_db_submit(a->gw->db, op);
}

/* True unless `before` and `after` have the same whatsapp_meta numbers. */
static bool meta_numbers_changed(const json_t *before, const json_t *after)
{
    const json_t *b =
        json_object_get(json_object_get(json_object_get(before, "channels"), "whatsapp_meta"), "numbers");
    const json_t *n =
        json_object_get(json_object_get(json_object_get(after, "channels"), "whatsapp_meta"), "numbers");
    return b == NULL || n == NULL ? b != n : !json_equal(b, n);
}

/* The stored settings with the patch merged in, validated; then the conditional update. */
static void patch_write(admin_op_t *a, PGresult *current)
{
    /* Merged on the opened settings, so a masked secret sent back compares with the clear one. */
    json_t *stored = opened_settings(a, current, 0);
    json_t *merged = stored ? og_settings_merge_patch(stored, a->patch) : NULL;
    json_decref(stored);
    og_err_t err = {0};
    if (merged == NULL || !og_settings_validate(merged, &err) ||
        !seal_for_store(a, merged, PQgetvalue(current, 0, OG_TENANT_ID))) {
        if (err.code == NULL)
            og_err_fail(&err, OG_E_INTERNAL_ERROR, NULL, "cannot merge settings");
        json_decref(merged);
        og_api_send_error(a->req, &err, NULL, NULL, NULL, 0);
        admin_op_free(a);
        return;
    }
    /* The Meta numbers changed (one added, a wabaId or a token set): their catalogues are read
     * now rather than at the next periodic sync. Compared opened, as merged. */
    json_t *before = opened_settings(a, current, 0);
    json_decref(a->sync_settings);
    a->sync_settings = meta_numbers_changed(before, merged) ? json_incref(merged) : NULL;
    json_decref(before);
    json_decref(merged);
    snprintf(a->xmin, sizeof(a->xmin), "%s", PQgetvalue(current, 0, OG_TENANT_XMIN));
    og_db_op_clear(&a->op);
    a->kind = A_TENANT_PATCH_WRITE;
    submit(a);
}

/* ---- request parsing -------------------------------------------------------------------- */

bool og_admin_db(og_http_req_t *req, og_gw_t *gw)
{
    if (!og_auth_admin(req, gw->w->cfg->admin_token))
        return false;
    if (gw->db == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "no database configured");
        return false;
    }
    return true;
}

static admin_op_t *admin_op_alloc(og_http_req_t *req, og_gw_t *gw, admin_kind_t kind)
{
    admin_op_t *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    a->req = req;
    a->gw = gw;
    a->kind = kind;
    og_settings_key(&a->key, gw->w->cfg->secret);
    return a;
}

static admin_op_t *admin_op_new(og_http_req_t *req, void *ctx, admin_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    return og_admin_db(req, gw) ? admin_op_alloc(req, gw, kind) : NULL;
}

/* A new tenant id: a random (version 4) UUID, lower-case as PostgreSQL prints it. */
static void new_tenant_id(char out[37])
{
    unsigned char b[16];
    og_ids_random(b, sizeof(b));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 15];
    }
    *p = '\0';
}

/* Reads route parameter `name` as a UUID into buf; answers 404 otherwise. */
static bool uuid_param(admin_op_t *a, const og_route_match_t *m, const char *name, char buf[37],
                       const char *what)
{
    if (!og_route_param(m, name, buf, 37) || !og_store_uuid_valid(buf)) {
        og_api_error(a->req, OG_E_NOT_FOUND, NULL, what);
        return false;
    }
    return true;
}

static bool name_field(json_t *body, const char *field, bool required, size_t max_chars, char **out,
                       og_err_t *err)
{
    const char *name = NULL;
    if (!og_json_get_string(body, field, required, &name, err))
        return false;
    if (name == NULL)
        return true;
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        chars += (*p & 0xC0) != 0x80;
    if ((required && chars == 0) || chars > max_chars)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s must be %s%zu characters", field,
                           required ? "1-" : "at most ", max_chars);
    *out = strdup(name);
    return *out != NULL || og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
}

/* Answers a request refused while reading its body, and frees everything it took. */
static void reject(admin_op_t *a, json_t *body, const og_err_t *err)
{
    json_decref(body);
    og_api_send_error(a->req, err, NULL, NULL, NULL, 0);
    admin_op_free(a);
}

bool og_admin_list_query(const char *q, size_t len, og_admin_list_t *out, og_err_t *err)
{
    static const char *const known[] = {"limit", "cursor", "name", NULL};
    if (!og_page_check_params(q, len, known, err) || !og_page_limit(q, len, &out->limit, err))
        return false;
    snprintf(out->limit_s, sizeof(out->limit_s), "%d", out->limit + 1); /* one more: a next page? */
    int n = og_query_param(q, len, "cursor", out->cursor, sizeof(out->cursor));
    if (n == -1)
        out->cursor[0] = '\0';
    else if (n <= 0 || !og_store_uuid_valid(out->cursor))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "cursor", "cursor is not one this API returned");
    n = og_query_param(q, len, "name", out->name, sizeof(out->name));
    if (n == -1)
        out->name[0] = '\0';
    else if (n <= 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "name", "name must be 1-%d characters of UTF-8",
                           OG_ADMIN_MAX_NAME_CHARS);
    return true;
}

void og_admin_tenant_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_op_t *a = admin_op_new(req, ctx, A_TENANT_LIST);
    if (a == NULL)
        return;
    og_err_t err = {0};
    if (!og_admin_list_query(req->query, req->query ? req->query_len : 0, &a->list, &err)) {
        reject(a, NULL, &err);
        return;
    }
    submit(a);
}

void og_admin_tenant_create(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"name", "unifiedApiEnabled", "settings", NULL};
    admin_op_t *a = admin_op_new(req, ctx, A_TENANT_CREATE);
    if (a == NULL)
        return;
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, allowed, &err);
    bool unified = false;
    if (body == NULL || !name_field(body, "name", true, MAX_NAME_CHARS, &a->name, &err) ||
        !og_json_get_bool(body, "unifiedApiEnabled", false, &unified, &err))
        goto fail;
    json_t *settings = json_object_get(body, "settings");
    new_tenant_id(a->id);
    if (settings == NULL || json_is_null(settings)) {
        json_t *defaults = og_settings_defaults();
        a->settings_text = json_dumps(defaults, JSON_COMPACT);
        json_decref(defaults);
    } else {
        if (!og_settings_validate(settings, &err))
            goto fail;
        if (!seal_for_store(a, settings, a->id)) {
            og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
            goto fail;
        }
        a->sync_settings = json_incref(settings); /* its wabaIds: the sync is due at once */
    }
    a->unified = unified ? "true" : "false";
    json_decref(body);
    submit(a);
    return;
fail:
    reject(a, body, &err);
}

/* A request with no body about the tenant in the path. */
static void submit_for_tenant(og_http_req_t *req, const og_route_match_t *m, void *ctx, admin_kind_t kind)
{
    admin_op_t *a = admin_op_new(req, ctx, kind);
    if (a == NULL)
        return;
    if (!uuid_param(a, m, "id", a->id, "no such tenant")) {
        admin_op_free(a);
        return;
    }
    submit(a);
}

void og_admin_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    submit_for_tenant(req, m, ctx, A_TENANT_GET);
}

void og_admin_tenant_patch(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"name", "unifiedApiEnabled", "settings", NULL};
    admin_op_t *a = admin_op_new(req, ctx, A_TENANT_PATCH_WRITE);
    if (a == NULL)
        return;
    if (!uuid_param(a, m, "id", a->id, "no such tenant")) {
        admin_op_free(a);
        return;
    }
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, allowed, &err);
    bool unified = false;
    bool has_unified = body != NULL && json_object_get(body, "unifiedApiEnabled") != NULL;
    if (body == NULL || !name_field(body, "name", false, MAX_NAME_CHARS, &a->name, &err) ||
        !og_json_get_bool(body, "unifiedApiEnabled", false, &unified, &err))
        goto fail;
    if (a->name != NULL && a->name[0] == '\0') {
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "name", "name must be 1-%d characters", MAX_NAME_CHARS);
        goto fail;
    }
    if (has_unified)
        a->unified = unified ? "true" : "false";
    json_t *settings = json_object_get(body, "settings");
    if (settings != NULL) {
        if (!json_is_object(settings)) {
            og_err_fail(&err, OG_E_VALIDATION_FAILED, "settings",
                        "settings must be an object (applied as a JSON merge patch)");
            goto fail;
        }
        a->patch = json_incref(settings);
        a->kind = A_TENANT_PATCH_READ;
    }
    json_decref(body);
    submit(a);
    return;
fail:
    reject(a, body, &err);
}

/* Reads the body of a token creation (API.md §5) into a: its name, and its scopes (default
 * OG_SCOPE_DEFAULT), none of them beyond `ceiling` (403 insufficient_scope: a tenant's token grants
 * at most its own scopes, API.md §23); then makes the token. False after answering and freeing a. */
static bool token_create_read(admin_op_t *a, unsigned ceiling)
{
    static const char *const allowed[] = {"name", "scopes", NULL};
    og_http_req_t *req = a->req;
    og_err_t err = {0};
    json_t *body = req->body_len == 0 ? json_object() : og_json_decode_body(req, allowed, &err);
    if (body == NULL || !name_field(body, "name", false, 100, &a->name, &err))
        goto fail;
    if (a->name == NULL && (a->name = strdup("")) == NULL) {
        og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
        goto fail;
    }
    json_t *scopes = json_object_get(body, "scopes");
    unsigned want = 0;
    if (scopes == NULL) {
        want = OG_SCOPE_DEFAULT;
    } else {
        if (!json_is_array(scopes) || json_array_size(scopes) == 0) {
            og_err_fail(&err, OG_E_VALIDATION_FAILED, "scopes",
                        "scopes must be a non-empty array of send, otp, logs, keys");
            goto fail;
        }
        size_t i;
        json_t *v;
        json_array_foreach(scopes, i, v)
        {
            unsigned bit = json_is_string(v) ? og_scope_bit(json_string_value(v), json_string_length(v)) : 0;
            if (bit == 0 || (want & bit)) {
                og_err_fail(&err, OG_E_VALIDATION_FAILED, "scopes",
                            "scopes must be distinct values of send, otp, logs, keys");
                goto fail;
            }
            want |= bit;
        }
    }
    unsigned beyond = want & ~ceiling;
    if (beyond != 0) {
        char names[OG_SCOPE_CSV_MAX];
        og_scope_csv(beyond, names);
        og_err_fail(&err, OG_E_INSUFFICIENT_SCOPE, "scopes",
                    "a token grants at most its own scopes: this one does not have %s", names);
        goto fail;
    }
    og_scope_csv(want, a->scopes);
    json_decref(body);
    og_token_generate(a->token);
    og_token_prefix(a->token, a->prefix);
    og_token_hash(a->gw->w->cfg->secret, a->token, strlen(a->token), a->hash);
    return true;
fail:
    reject(a, body, &err);
    return false;
}

void og_admin_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_op_t *a = admin_op_new(req, ctx, A_TOKEN_CREATE);
    if (a == NULL)
        return;
    if (!uuid_param(a, m, "id", a->id, "no such tenant")) {
        admin_op_free(a);
        return;
    }
    if (token_create_read(a, OG_SCOPE_ALL))
        submit(a);
}

void og_admin_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    submit_for_tenant(req, m, ctx, A_TOKEN_LIST);
}

void og_admin_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_op_t *a = admin_op_new(req, ctx, A_TOKEN_REVOKE);
    if (a == NULL)
        return;
    if (!uuid_param(a, m, "id", a->id, "no such tenant") ||
        !uuid_param(a, m, "tokenId", a->token_id, "no such token")) {
        admin_op_free(a);
        return;
    }
    submit(a);
}

/* ---- the tenant's own tokens (API.md §23) ------------------------------------------------- */

/* The caller's token is checked: the request runs as the admin route's would for its tenant. */
static void tenant_authed(og_auth_req_t *auth)
{
    admin_op_t *a = container_of(auth, admin_op_t, auth);
    if (auth->tenant == NULL) { /* answered */
        admin_op_free(a);
        return;
    }
    memcpy(a->id, auth->tenant->id, sizeof(a->id));
    if (a->kind == A_TOKEN_CREATE && !token_create_read(a, auth->scopes))
        return;
    if (a->kind == A_TOKEN_REVOKE && a->token_id[0] == '\0') {
        og_api_error(a->req, OG_E_NOT_FOUND, NULL, "no such token");
        admin_op_free(a);
        return;
    }
    submit(a);
}

/* A tenant route: the caller's token needs `scope`; the tenant is the token's. A token id of the
 * path that is no UUID names no token of the tenant: 404 once the caller is known, never before. */
static void tenant_serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, admin_kind_t kind,
                         unsigned scope)
{
    og_gw_t *gw = og_gw(ctx);
    admin_op_t *a = admin_op_alloc(req, gw, kind);
    if (a == NULL)
        return;
    if (kind == A_TOKEN_REVOKE &&
        (!og_route_param(m, "id", a->token_id, sizeof(a->token_id)) || !og_store_uuid_valid(a->token_id)))
        a->token_id[0] = '\0';
    a->auth.req = req;
    a->auth.scope = scope;
    a->auth.done = tenant_authed;
    a->auth.op = &a->op;
    og_auth_tenant(gw->auth, &a->auth);
}

void og_tenant_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, m, ctx, A_TOKEN_CREATE, OG_SCOPE_KEYS);
}

void og_tenant_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, m, ctx, A_TOKEN_LIST, OG_SCOPE_KEYS);
}

void og_tenant_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, m, ctx, A_TOKEN_REVOKE, OG_SCOPE_KEYS);
}

void og_tenant_self(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    tenant_serve(req, m, ctx, A_TENANT_SELF, 0);
}
