/*
 * GET /api/usage and its admin mirrors. See include/product/omnigate/costs/usage_api.h.
 */
#include "omnigate/costs/usage_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/ids.h"
#include "omnigate/log.h"
#include "omnigate/logs/page.h"
#include "omnigate/logs/tenant_page.h"
#include "omnigate/store.h"
#include "omnigate/tenants/admin.h"
#include "omnigate/tenants/auth.h"

#define DAY_MS 86400000LL

typedef struct usage_req {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_db_op_t op;
    char tenant_id[37]; /* the admin mirror's; "" with the token's or for every tenant */
    char since[16], until[16];
    char group[16];
} usage_req_t;

static void req_free(usage_req_t *r)
{
    og_db_op_clear(&r->op);
    og_tenant_release(r->auth.tenant);
    free(r);
}

/* The UTC day of `ms` as YYYY-MM-DD. */
static void day_of(int64_t ms, char out[16])
{
    time_t s = (time_t)((ms >= 0 ? ms : ms - (DAY_MS - 1)) / DAY_MS * (DAY_MS / 1000));
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(out, 16, "%Y-%m-%d", &tm);
}

/* A time parameter into *ms; keeps *ms when absent. */
static bool time_param(const og_http_req_t *req, const char *name, int64_t *ms, og_err_t *err)
{
    char buf[64];
    int n = og_query_param(req->query, req->query_len, name, buf, sizeof(buf));
    if (n == -1)
        return true;
    if (n < 0 || !og_time_parse_rfc3339(buf, ms))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name,
                           "%s must be an RFC 3339 time (2026-11-26T00:00:00Z)", name);
    return true;
}

static bool parse(usage_req_t *r, og_err_t *err)
{
    static const char *const known[] = {"since", "until", "groupBy", NULL};
    const og_http_req_t *req = r->req;
    if (!og_page_check_params(req->query, req->query_len, known, err))
        return false;
    int64_t until = (int64_t)og_ids_now_ms(), since = INT64_MIN;
    if (!time_param(req, "until", &until, err))
        return false;
    if (!time_param(req, "since", &since, err))
        return false;
    if (since == INT64_MIN)
        since = until - OG_USAGE_DEFAULT_DAYS * DAY_MS;
    if (since > until)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "since", "since must not be after until");
    if (until - since > (int64_t)OG_USAGE_MAX_DAYS * DAY_MS)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "since", "a range is at most %d days",
                           OG_USAGE_MAX_DAYS);
    day_of(since, r->since);
    day_of(until, r->until);
    int n = og_query_param(req->query, req->query_len, "groupBy", r->group, sizeof(r->group));
    if (n == -1)
        snprintf(r->group, sizeof(r->group), "day");
    else if (n < 0 || (strcmp(r->group, "day") != 0 && strcmp(r->group, "channel") != 0 &&
                       strcmp(r->group, "day,channel") != 0))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "groupBy",
                           "groupBy must be day, channel or day,channel");
    return true;
}

static void done(og_db_op_t *op, og_db_status_t st)
{
    usage_req_t *r = op->arg;
    if (st != OG_DB_OK)
        og_answer_db_failure(r->req, &r->gw->w->log, op, st, "reading usage failed", "database unavailable");
    else if (PQgetisnull(op->res[0], 0, OG_C_USAGE_GET_USAGE)) /* the admin mirror's tenant */
        og_api_error(r->req, OG_E_NOT_FOUND, NULL, "no such tenant");
    else
        og_answer_raw(r->req, 200, "usage", PQgetvalue(op->res[0], 0, OG_C_USAGE_GET_USAGE), NULL);
    req_free(r);
}

static void submit(usage_req_t *r, const char *tenant_id)
{
    og_db_op_t *op = &r->op;
    og_db_op_clear(op);
    og_q_usage_get(&op->stmts[0],
                   &(og_q_usage_get_t){
                       .tenant_id = tenant_id, .since = r->since, .until = r->until, .group_by = r->group});
    op->nstmts = 1;
    op->done = done;
    op->arg = r;
    og_db_submit(r->gw->db, op);
}

/* The request with its parameters read; NULL after answering. */
static usage_req_t *req_new(og_http_req_t *req, og_gw_t *gw)
{
    usage_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    r->gw = gw;
    r->req = req;
    og_err_t err = {0};
    if (!parse(r, &err)) {
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        req_free(r);
        return NULL;
    }
    return r;
}

static void authed(og_auth_req_t *a)
{
    usage_req_t *r = (usage_req_t *)a;
    if (a->tenant == NULL) {
        req_free(r);
        return;
    }
    submit(r, a->tenant->id);
}

void og_usage_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    usage_req_t *r = req_new(req, gw);
    if (r == NULL)
        return;
    r->auth.req = req;
    r->auth.scope = OG_SCOPE_LOGS;
    r->auth.done = authed;
    r->auth.op = &r->op;
    og_auth_tenant(gw->auth, &r->auth);
}

void og_usage_admin_tenant(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_tenant_page_admin_tenant(req, m, gw, id))
        return;
    usage_req_t *r = req_new(req, gw);
    if (r == NULL)
        return;
    memcpy(r->tenant_id, id, sizeof(r->tenant_id));
    submit(r, r->tenant_id);
}

void og_usage_admin_all(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    if (!og_admin_db(req, gw))
        return;
    usage_req_t *r = req_new(req, gw);
    if (r != NULL)
        submit(r, NULL);
}
