/*
 * A tenant's list and its admin mirror. See include/product/omnigate/logs/tenant_page.h.
 */
#include "omnigate/logs/tenant_page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/logs/page.h"
#include "omnigate/store.h"

static void page_free(og_tenant_page_t *p)
{
    og_db_op_clear(&p->op);
    og_tenant_release(p->auth.tenant);
    free(p);
}

static void page_done(og_db_op_t *op, og_db_status_t st)
{
    og_tenant_page_t *p = op->arg;
    char what[96];
    snprintf(what, sizeof(what), "%s query failed", p->kind->what);
    if (st != OG_DB_OK)
        og_answer_db_failure(p->req, &p->gw->w->log, op, st, what, "database unavailable");
    /* The admin mirror reads the tenant after the page: none is a 404, not an empty page. */
    else if (op->nstmts == 2 && (op->res[1] == NULL || PQntuples(op->res[1]) == 0))
        og_api_error(p->req, OG_E_NOT_FOUND, NULL, "no such tenant");
    else /* the items are JSON already; the kind's cursor needs no escaping */
        og_page_answer(p->req, op->res[0], p->limit, p->kind->what);
    page_free(p);
}

/* Sends the page for `tenant_id` (living as long as p), with the tenant's existence when
 * `check_tenant`. */
static void page_submit(og_tenant_page_t *p, const char *tenant_id, bool check_tenant)
{
    og_db_op_t *op = &p->op;
    op->nstmts = 1;
    p->kind->bind(p, &op->stmts[0], tenant_id);
    if (check_tenant) {
        op->nstmts = 2;
        og_q_tenant_unified(&op->stmts[1], &(og_q_tenant_unified_t){.tenant_id = tenant_id});
    }
    op->done = page_done;
    op->arg = p;
    og_db_submit(p->gw->db, op);
}

static void page_authed(og_auth_req_t *a)
{
    og_tenant_page_t *p = (og_tenant_page_t *)a;
    if (a->tenant == NULL) {
        free(p);
        return;
    }
    page_submit(p, a->tenant->id, false);
}

/* A page request with its parameters checked; NULL when answered already (422, 503). */
static og_tenant_page_t *page_new(og_http_req_t *req, og_gw_t *gw, const og_tenant_page_kind_t *kind)
{
    og_tenant_page_t *p = calloc(1, kind->size);
    if (p == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    p->gw = gw;
    p->req = req;
    p->kind = kind;
    og_err_t err = {0};
    size_t len = req->query ? req->query_len : 0;
    /* Paged like the logs: the same limit and unknown-parameter rules. */
    bool ok = og_page_check_params(req->query, len, kind->params, &err) &&
              og_page_limit(req->query, len, &p->limit, &err) && kind->parse(p, &err);
    if (!ok) {
        free(p);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return NULL;
    }
    snprintf(p->limit_s, sizeof(p->limit_s), "%d", p->limit + 1); /* one more: is there a next page? */
    return p;
}

void og_tenant_page_serve(og_http_req_t *req, void *ctx, const og_tenant_page_kind_t *kind)
{
    og_gw_t *gw = og_gw(ctx);
    og_tenant_page_t *p = page_new(req, gw, kind);
    if (p == NULL)
        return;
    p->auth.req = req;
    p->auth.scope = kind->scope;
    p->auth.done = page_authed;
    p->auth.op = &p->op;
    og_auth_tenant(gw->auth, &p->auth);
}

bool og_tenant_page_admin_tenant(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, char id[37])
{
    if (!og_auth_admin_tenant(req, m, gw->w->cfg->admin_token, id))
        return false;
    if (gw->db == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "no database configured");
        return false;
    }
    return true;
}

void og_tenant_page_admin(og_http_req_t *req, const og_route_match_t *m, void *ctx,
                          const og_tenant_page_kind_t *kind)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    og_tenant_page_t *p = page_new(req, gw, kind);
    if (p == NULL)
        return;
    memcpy(p->tenant_id, id, sizeof(id));
    page_submit(p, p->tenant_id, true);
}

bool og_tenant_page_filter(const og_http_req_t *req, const char *name, char *buf, size_t cap,
                           bool (*valid)(const char *), const char *rule, og_err_t *err)
{
    int n = og_query_param(req->query, req->query_len, name, buf, cap);
    if (n == -1) {
        buf[0] = '\0';
        return true;
    }
    if (n <= 0 || !valid(buf))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s must be %s", name, rule);
    return true;
}
