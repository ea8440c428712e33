/*
 * The template catalogue's sync from Meta. See include/product/omnigate/templates/sync.h; the
 * SQL is tpl_replace and tpl_sync_schedule in sql/queries/templates.sql.
 *
 * A reading (og_tpl_fetch_t) is one HTTP request at a time on the worker's client, reused page
 * after page: its done callback parses the page, keeps the templates and either asks for the
 * next page or completes. The step of a (tenant, WABA):
 *   load    the tenant's settings (tenant_get), secrets opened;
 *   decide  no whatsapp_meta number of the tenant names the WABA any more -> close, nothing
 *           more (the tenant removed it; saving it again makes a new step);
 *   read    every page of the WABA's listing;
 *   write   read: tpl_replace + close + the next sync after OMNIGATE_TEMPLATE_SYNC_S;
 *           failed: close + the next try after OG_TPL_SYNC_RETRY_S, and a warning;
 * always in one transaction with og_jobs_close_stmt, so a holder whose lease was taken over
 * records nothing.
 */
#include "omnigate/templates/sync.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/messaging/budget.h"
#include "omnigate/providers/provider.h"
#include "omnigate/store.h"
#include "omnigate/templates/render.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/util.h"

#define LABEL "Meta"

/* ---- a tenant's WABAs ----------------------------------------------------------------------- */

static const json_t *meta_numbers(const json_t *settings)
{
    return json_object_get(json_object_get(json_object_get(settings, "channels"), "whatsapp_meta"),
                           "numbers");
}

/* Keeps number's token for `w` unless an earlier number gave one. */
static void take_token(og_tpl_waba_t *w, const char *number, const og_settings_wa_number_t *wa)
{
    if (w->access_token == NULL && wa->access_token != NULL) {
        w->access_token = wa->access_token;
        w->number = number;
    }
}

int og_tpl_wabas(const json_t *settings, og_tpl_waba_t *out, int max)
{
    int n = 0;
    const char *number;
    json_t *num;
    /* json_object_foreach wants a non-const object; it only reads it. */
    json_object_foreach((json_t *)meta_numbers(settings), number, num)
    {
        og_settings_wa_number_t wa;
        if (!og_settings_wa_number(settings, "whatsapp_meta", number, &wa) || wa.waba_id == NULL ||
            wa.waba_id[0] == '\0')
            continue;
        int i = 0;
        while (i < n && strcmp(out[i].waba_id, wa.waba_id) != 0)
            i++;
        if (i < n) {
            take_token(&out[i], number, &wa);
            continue;
        }
        if (n == max)
            return -1;
        out[n++] = (og_tpl_waba_t){.waba_id = wa.waba_id, .access_token = wa.access_token, .number = number};
    }
    return n;
}

bool og_tpl_waba_find(const json_t *settings, const char *waba_id, og_tpl_waba_t *out)
{
    bool found = false;
    const char *number;
    json_t *num;
    json_object_foreach((json_t *)meta_numbers(settings), number, num)
    {
        og_settings_wa_number_t wa;
        if (!og_settings_wa_number(settings, "whatsapp_meta", number, &wa) || wa.waba_id == NULL ||
            strcmp(wa.waba_id, waba_id) != 0)
            continue;
        if (!found)
            *out = (og_tpl_waba_t){.waba_id = wa.waba_id, .access_token = wa.access_token, .number = number};
        else
            take_token(out, number, &wa);
        found = true;
    }
    return found;
}

int og_tpl_sync_schedule_stmt(og_db_op_t *op, int n, const char *tenant_id, const json_t *settings, char *lit,
                              size_t litlen)
{
    if (settings == NULL || litlen < 3)
        return 0;
    size_t len = 0;
    lit[len++] = '{';
    const char *number;
    json_t *num;
    json_object_foreach((json_t *)meta_numbers(settings), number, num)
    {
        const char *waba = json_string_value(json_object_get(num, "wabaId"));
        size_t wl = waba != NULL ? strlen(waba) : 0;
        /* Validated settings hold digits only: nothing a literal would need to quote. A WABA of
         * several numbers is listed again: tpl_sync_schedule takes each once. */
        if (wl == 0 || strspn(waba, "0123456789") != wl)
            continue;
        if (len + 1 + wl + 2 > litlen)
            return 0;
        if (len > 1)
            lit[len++] = ',';
        memcpy(lit + len, waba, wl);
        len += wl;
    }
    if (len == 1)
        return 0;
    lit[len++] = '}';
    lit[len] = '\0';
    og_q_tpl_sync_schedule(
        &op->stmts[n], &(og_q_tpl_sync_schedule_t){.tenant_id = tenant_id, .waba_ids = lit, .delay_s = "0"});
    return 1;
}

/* ---- reading one WABA's listing ------------------------------------------------------------- */

void og_tpl_fetch_clear(og_tpl_fetch_t *f)
{
    void (*done)(og_tpl_fetch_t *) = f->done;
    void *arg = f->arg;
    og_hc_req_clear(&f->req);
    if (f->token != NULL) {
        OPENSSL_cleanse(f->token, strlen(f->token));
        free(f->token);
    }
    json_decref(f->items);
    free(f->after);
    free(f->json);
    memset(f, 0, sizeof(*f));
    f->done = done;
    f->arg = arg;
}

/* Ends the reading: ok, or a failure whose message is printf-style. */
static void fetch_end(og_tpl_fetch_t *f, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fetch_end(og_tpl_fetch_t *f, bool ok, const char *fmt, ...)
{
    f->ok = ok;
    if (!ok) { /* first: the message may be the request's own errbuf */
        char buf[sizeof(f->error)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        og_provider_copy_utf8(f->error, sizeof(f->error), buf);
    }
    og_hc_req_clear(&f->req);
    if (ok) {
        f->count = json_array_size(f->items);
        f->json = json_dumps(f->items, JSON_COMPACT);
        if (f->json == NULL) {
            f->ok = false;
            snprintf(f->error, sizeof(f->error), "out of memory");
        }
    }
    json_decref(f->items);
    f->items = NULL;
    if (f->token != NULL) {
        OPENSSL_cleanse(f->token, strlen(f->token));
        free(f->token);
        f->token = NULL;
    }
    free(f->after);
    f->after = NULL;
    f->done(f);
}

static void page_done(og_hc_req_t *req);

/* Asks for the next page (f->after, or the first); false when it could not be asked. */
static bool request_page(og_tpl_fetch_t *f, char *why, size_t whylen)
{
    og_hc_req_t *req = &f->req;
    memset(req, 0, sizeof(*req));
    const og_config_t *cfg = f->cfg;
    char *ver = og_provider_pct_encode(cfg->meta_api_version, strlen(cfg->meta_api_version));
    char *waba = og_provider_pct_encode(f->waba, strlen(f->waba));
    char *after = f->after != NULL ? og_provider_pct_encode(f->after, strlen(f->after)) : NULL;
    if (ver != NULL && waba != NULL && (f->after == NULL || after != NULL))
        req->url =
            og_provider_url(cfg->meta_base_url, "/%s/%s/message_templates?limit=%d%s%s", ver, waba,
                            OG_TPL_SYNC_PAGE, after != NULL ? "&after=" : "", after != NULL ? after : "");
    free(ver);
    free(waba);
    free(after);
    req->method = "GET";
    req->timeout_ms = cfg->attempt_timeout_ms; /* as an attempt's (0: the client's default) */
    req->max_response = OG_TPL_SYNC_PAGE_BYTES;
    req->done = page_done;
    req->arg = f;
    if (req->url == NULL || !og_hc_req_add_header(req, "Authorization: Bearer %s", f->token) ||
        !og_hc_req_add_header(req, "Accept: application/json")) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    if (og_hc_start(f->hc, req) != 0) {
        snprintf(why, whylen, "the HTTP client is closed: the worker is shutting down");
        return false;
    }
    return true;
}

/* Adds the templates of one page's `data` to f->items; false when `data` is no array. */
static bool keep_templates(og_tpl_fetch_t *f, const json_t *data)
{
    if (!json_is_array(data))
        return false;
    size_t i;
    json_t *t;
    json_array_foreach(data, i, t)
    {
        /* Names and languages are kept only in the form the routes and the cache rely on (no
         * quoting in literals or cursors); Meta gives no other. */
        if (!og_settings_template_name_valid(json_string_value(json_object_get(t, "name"))) ||
            !og_settings_template_language_valid(json_string_value(json_object_get(t, "language"))))
            continue;
        json_t *item = og_tpl_from_meta(t);
        if (item == NULL || json_array_append_new(f->items, item) != 0)
            return false;
    }
    return true;
}

static void page_done(og_hc_req_t *req)
{
    og_tpl_fetch_t *f = req->arg;
    f->http_status = req->http_status;
    switch (req->result) {
    case OG_HC_OK:
        break;
    case OG_HC_TIMEOUT:
        fetch_end(f, false, "no answer from " LABEL " in %ld ms", req->timeout_ms);
        return;
    case OG_HC_UNREACHABLE:
    case OG_HC_BLOCKED:
        fetch_end(f, false, "cannot reach " LABEL ": %s", req->errbuf);
        return;
    case OG_HC_TOO_LARGE:
        fetch_end(f, false, LABEL " answered a page over %u MiB", OG_TPL_SYNC_PAGE_BYTES >> 20);
        return;
    case OG_HC_CANCELLED:
        fetch_end(f, false, "cancelled: the worker is shutting down");
        return;
    case OG_HC_ERROR:
        fetch_end(f, false, "%s", req->errbuf);
        return;
    }
    long status = req->http_status;
    if (status < 200 || status >= 300) {
        /* Meta's error as a send's attempt reads it (providers/meta.c): its code, its words, and
         * a throttle or a refused token called so. */
        og_attempt_result_t r = {0};
        og_provider_meta.classify(status, req->resp, req->resp_len, &r);
        snprintf(f->provider_code, sizeof(f->provider_code), "%s", r.provider_code);
        fetch_end(f, false, "%s", r.error_message);
        return;
    }
    json_t *root = req->resp_len > 0 ? json_loadb(req->resp, req->resp_len, 0, NULL) : NULL;
    f->pages++;
    if (!json_is_object(root) || !keep_templates(f, json_object_get(root, "data"))) {
        json_decref(root);
        fetch_end(f, false, LABEL " answered HTTP %ld with a body that is not a template listing", status);
        return;
    }
    json_t *paging = json_object_get(root, "paging");
    const char *after = json_string_value(json_object_get(json_object_get(paging, "cursors"), "after"));
    bool more = json_is_string(json_object_get(paging, "next"));
    if (more && (after == NULL || after[0] == '\0' || strlen(after) > OG_TPL_SYNC_CURSOR_MAX)) {
        json_decref(root);
        fetch_end(f, false, LABEL " answered paging.next without a usable paging.cursors.after");
        return;
    }
    if (!more) {
        json_decref(root);
        fetch_end(f, true, NULL);
        return;
    }
    if (f->pages >= OG_TPL_SYNC_MAX_PAGES) {
        json_decref(root);
        fetch_end(f, false, "the WABA lists more than %d pages of %d templates", OG_TPL_SYNC_MAX_PAGES,
                  OG_TPL_SYNC_PAGE);
        return;
    }
    free(f->after);
    f->after = strdup(after);
    json_decref(root);
    og_hc_req_clear(req);
    char why[128];
    if (f->after == NULL) {
        fetch_end(f, false, "out of memory");
        return;
    }
    if (!request_page(f, why, sizeof(why)))
        fetch_end(f, false, "%s", why);
}

void og_tpl_fetch_start(og_tpl_fetch_t *f, og_hc_t *hc, const og_config_t *cfg, const char *waba_id,
                        const char *access_token)
{
    og_tpl_fetch_clear(f);
    f->hc = hc;
    f->cfg = cfg;
    snprintf(f->waba, sizeof(f->waba), "%s", waba_id != NULL ? waba_id : "");
    const char *why = NULL;
    if (cfg->meta_base_url == NULL || cfg->meta_base_url[0] == '\0')
        why = "OMNIGATE_META_BASE_URL is not set";
    else if (cfg->meta_api_version == NULL || cfg->meta_api_version[0] == '\0')
        why = "OMNIGATE_META_API_VERSION is not set";
    else if (f->waba[0] == '\0' || strspn(f->waba, "0123456789") != strlen(f->waba))
        why = "the WABA id is not digits";
    else if (access_token == NULL || access_token[0] == '\0')
        why = "no whatsapp_meta number of the WABA has an access token that opens with this OMNIGATE_SECRET: "
              "set the access token again";
    else if (!og_provider_header_safe(access_token))
        why = "the number's accessToken has characters a token cannot have";
    else if ((f->token = strdup(access_token)) == NULL || (f->items = json_array()) == NULL)
        why = "out of memory";
    char buf[128];
    if (why == NULL && request_page(f, buf, sizeof(buf)))
        return;
    if (why == NULL)
        why = buf;
    /* Nothing went out: fail from the loop, as an answer would. */
    char message[OG_HC_ERRBUF];
    snprintf(message, sizeof(message), "%s", why);
    og_hc_req_clear(&f->req);
    f->req.done = page_done;
    f->req.arg = f;
    if (og_hc_complete_later(hc, &f->req, OG_HC_ERROR, message) != 0) {
        f->req.result = OG_HC_ERROR;
        snprintf(f->req.errbuf, sizeof(f->req.errbuf), "%s", message);
        page_done(&f->req);
    }
}

/* ---- the step ------------------------------------------------------------------------------ */

typedef struct sync_run {
    og_db_op_t op;
    og_step_t *step;
    og_gw_t *gw;
    og_tpl_fetch_t fetch;
    char waba_lit[48]; /* "{id}", tpl_sync_schedule's $2 */
    char delay_s[16];
} sync_run_t;

static og_log_t *run_log(const sync_run_t *r)
{
    return &r->gw->w->log;
}

static void run_free(sync_run_t *r, bool ok)
{
    og_db_op_clear(&r->op);
    og_tpl_fetch_clear(&r->fetch);
    og_jobs_finish(r->step, ok);
    free(r);
}

static void written(og_db_op_t *op, og_db_status_t st)
{
    sync_run_t *r = op->arg;
    if (st != OG_DB_OK)
        og_log(run_log(r), st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN, "template sync: recording failed",
               "\"tenant\":\"%s\",\"wabaId\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"", r->step->tenant_id,
               r->step->reference, op->sqlstate, op->error);
    run_free(r, st == OG_DB_OK);
}

/* Submits the step's one write: `n` statements already in r->op, then the close and, when
 * `delay_s` >= 0, the next sync of the WABA that much later. */
static void finish_with(sync_run_t *r, int n, int delay_s)
{
    og_db_op_t *op = &r->op;
    n += og_jobs_close_stmt(r->step, op, n);
    if (delay_s >= 0) {
        snprintf(r->waba_lit, sizeof(r->waba_lit), "{%s}", r->step->reference);
        snprintf(r->delay_s, sizeof(r->delay_s), "%d", delay_s);
        og_q_tpl_sync_schedule(&op->stmts[n++], &(og_q_tpl_sync_schedule_t){.tenant_id = r->step->tenant_id,
                                                                            .waba_ids = r->waba_lit,
                                                                            .delay_s = r->delay_s});
    }
    op->nstmts = n;
    op->write = true;
    op->done = written;
    op->arg = r;
    og_db_submit(r->gw->db, op);
}

static void fetched(og_tpl_fetch_t *f)
{
    sync_run_t *r = f->arg;
    og_db_op_clear(&r->op);
    if (!f->ok) {
        char error[2 * sizeof(f->error)], code[80];
        og_log(
            run_log(r), OG_LOG_WARN, "template sync failed; tried again later",
            "\"tenant\":\"%s\",\"wabaId\":\"%s\",\"httpStatus\":%ld,\"providerCode\":\"%s\",\"error\":\"%s\","
            "\"retryInS\":%d",
            r->step->tenant_id, r->step->reference, f->http_status,
            og_log_escape(code, sizeof(code), f->provider_code, strlen(f->provider_code)),
            og_log_escape(error, sizeof(error), f->error, strlen(f->error)), OG_TPL_SYNC_RETRY_S);
        finish_with(r, 0, OG_TPL_SYNC_RETRY_S);
        return;
    }
    if (og_log_enabled(run_log(r), OG_LOG_DEBUG))
        og_log(run_log(r), OG_LOG_DEBUG, "template sync read the WABA",
               "\"tenant\":\"%s\",\"wabaId\":\"%s\",\"templates\":%zu,\"pages\":%d", r->step->tenant_id,
               r->step->reference, f->count, f->pages);
    og_q_tpl_replace(&r->op.stmts[0],
                     &(og_q_tpl_replace_t){.waba_id = r->step->reference, .templates = f->json});
    finish_with(r, 1, r->gw->w->cfg->template_sync_s);
}

static void loaded(og_db_op_t *op, og_db_status_t st)
{
    sync_run_t *r = op->arg;
    if (st != OG_DB_OK) {
        og_log(run_log(r), st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN, "template sync: loading failed",
               "\"tenant\":\"%s\",\"wabaId\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"", r->step->tenant_id,
               r->step->reference, op->sqlstate, op->error);
        run_free(r, false);
        return;
    }
    const PGresult *res = op->res[0];
    json_t *settings =
        PQntuples(res) == 1 ? json_loads(PQgetvalue(res, 0, OG_TENANT_SETTINGS), 0, NULL) : NULL;
    og_db_op_clear(op);
    if (settings != NULL) { /* the credentials are clear in memory only */
        og_seal_key_t key;
        og_settings_key(&key, r->gw->w->cfg->secret);
        og_settings_open(settings, &key, r->step->tenant_id, run_log(r));
        og_seal_key_clear(&key);
    }
    og_tpl_waba_t waba;
    const og_tpl_waba_t *mine =
        settings != NULL && og_tpl_waba_find(settings, r->step->reference, &waba) ? &waba : NULL;
    if (mine == NULL) {
        /* No number of the tenant names this WABA any more (or the tenant is gone): done. */
        json_decref(settings);
        finish_with(r, 0, -1);
        return;
    }
    r->fetch.done = fetched;
    r->fetch.arg = r;
    og_tpl_fetch_start(&r->fetch, r->gw->hc, r->gw->w->cfg, mine->waba_id, mine->access_token);
    json_decref(settings); /* the fetch copied what it needs */
}

static void run(og_step_t *step, void *arg)
{
    og_gw_t *gw = arg;
    sync_run_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_jobs_finish(step, false);
        return;
    }
    r->step = step;
    r->gw = gw;
    og_db_op_t *op = &r->op;
    og_q_tenant_get(&op->stmts[0], &(og_q_tenant_get_t){.tenant_id = step->tenant_id});
    op->nstmts = 1;
    op->done = loaded;
    op->arg = r;
    og_db_submit(gw->db, op);
}

int og_tpl_sync_register(og_gw_t *gw)
{
    /* The longest run: a page per attempt (each within OMNIGATE_ATTEMPT_TIMEOUT_MS) and the read
     * and the write around them: the send budget of that many attempts (messaging/budget.h). */
    int kind = og_jobs_register(gw->jobs, OG_TPL_SYNC_STEP_KIND,
                                og_send_budget_ms(gw->w->cfg, OG_TPL_SYNC_MAX_PAGES), run, gw);
    if (kind < 0)
        return -1;
    og_jobs_limit(gw->jobs, kind, OG_TPL_SYNC_CONCURRENCY);
    return 0;
}
