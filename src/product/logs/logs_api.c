/*
 * GET /api/omni/logs, /api/sms/logs, /api/sms/otp/logs (API.md §4, §16): one tenant's records,
 * newest first, in pages. The cursor is the last reference of the previous page: references
 * are time-ordered and unique per tenant, so "reference < cursor" pages through every record
 * exactly once even while new ones arrive, whatever the filters. since and until become
 * references too, so every page is a range of references read through one index in order
 * (sql/queries/logs.sql, docs/logs.md). Responsible for the query parameters, the choice of
 * the statement and the page; the SQL (which builds each item's JSON) is in sql/queries.
 *
 * Pages are read through the worker's read pool (gw->rdb: its own connections, possibly a
 * replica, with OMNIGATE_LOG_QUERY_TIMEOUT_MS as statement_timeout), never the write path's, so
 * a slow page delays no send (API.md §16, docs/persistence.md). Authentication still reads
 * through the write path: a revoked token must not pass on a lagging replica.
 *
 * The admin mirrors (GET /admin/tenants/{id}/omni/logs and the others, API.md §17) are the same
 * pages for any tenant behind the admin token: the same parsing, statements and answer, with the
 * tenant's existence read in the same round trip (404 for an unknown one). The unified log's
 * mirror answers while the tenant's plan locks the unified API: the lock is the tenant's, not
 * the admin's. `omnigate admin logs` (cli.c) runs the same pages synchronously.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/logs/logs_api.h"
#include "omnigate/logs/page.h"
#include "omnigate/app/ctx.h"
#include "omnigate/ids.h"
#include "omnigate/log.h"
#include "omnigate/phone.h"
#include "omnigate/router.h"
#include "omnigate/store.h"

OG_M_SCALAR(
    og_logs_metrics_block, "omnigate_log_query_timeouts_total", OG_M_COUNTER,
    "Log queries the server cancelled at OMNIGATE_LOG_QUERY_TIMEOUT_MS (answered 503 query_timeout).");

/* The filters that pick an index, in the order they rank (logs_page). */
enum { F_REFERENCE, F_TO, F_STATUS, F_4, F__COUNT };

struct logs_kind {
    /* The statement reading a page by each filter (F_*), and by time when none is given. */
    int by[F__COUNT];
    int by_time;
    int by_status_and_4; /* status with the 4th filter, or -1: checked on the status's rows */
    bool unified;
    const char *filter4;               /* name of the 4th filter: "channel" or "source" */
    const char *const *filter4_values; /* allowed values */
    const char *const *status_values;  /* allowed status values */
};
typedef struct logs_kind logs_kind_t;

static const char *const channels[] = {"whatsapp_qr", "whatsapp_meta", "sms", NULL};
static const char *const sources[] = {"sms", "omni", "otp", NULL};
static const char *const omni_status[] = {"pending",   "sent",     "failed",      "unknown",
                                          "delivered", "read",     "undelivered", "queued",
                                          "scheduled", "canceled", "expired",     NULL};
static const char *const sms_status[] = {"sent", "failed", "delivered", "read", "undelivered", NULL};
static const char *const otp_status[] = {"pending", "verified",   "expired", "locked",
                                         "failed",  "superseded", NULL};

static const logs_kind_t kinds[] = {
    {{OG_Q_LOGS_OMNI_REFERENCE, OG_Q_LOGS_OMNI_TO, OG_Q_LOGS_OMNI_STATUS, OG_Q_LOGS_OMNI_CHANNEL},
     OG_Q_LOGS_OMNI,
     OG_Q_LOGS_OMNI_STATUS_CHANNEL,
     true,
     "channel",
     channels,
     omni_status},
    {{OG_Q_LOGS_SMS_REFERENCE, OG_Q_LOGS_SMS_TO, OG_Q_LOGS_SMS_STATUS, OG_Q_LOGS_SMS_SOURCE},
     OG_Q_LOGS_SMS,
     -1,
     false,
     "source",
     sources,
     sms_status},
    {{OG_Q_LOGS_OTP_REFERENCE, OG_Q_LOGS_OTP_TO, OG_Q_LOGS_OTP_STATUS, -1},
     OG_Q_LOGS_OTP,
     -1,
     false,
     NULL,
     NULL,
     otp_status},
};

typedef struct logs_op {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    char tenant_id[37]; /* admin mirrors: the tenant in the path */
    og_logs_query_t q;
} logs_op_t;

static bool one_of(const char *v, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(v, *set) == 0)
            return true;
    return false;
}

/* Reads every query parameter; false with `err` set on the first bad one. */
bool og_logs_query_parse(og_logs_query_t *l, og_logs_kind_t kind, const char *query, size_t query_len,
                         og_err_t *err)
{
    memset(l, 0, sizeof(*l));
    l->kind = &kinds[kind];
    /* The other log's 4th filter is unknown here: channel on the SMS log is a typo of source. */
    const char *known[] = {"limit",  "cursor",         "to",
                           "status", "reference",      "since",
                           "until",  l->kind->filter4, l->kind->unified ? "batchId" : NULL,
                           NULL};
    if (!og_page_check_params(query, query_len, known, err) ||
        !og_page_limit(query, query_len, &l->limit, err))
        return false;
    snprintf(l->limit_s, sizeof(l->limit_s), "%d", l->limit + 1); /* one more: is there a next page? */

    struct {
        const char *name;
        char *dst;
        size_t cap;
    } fields[] = {{"cursor", l->cursor, sizeof(l->cursor)},
                  {"to", l->to, sizeof(l->to)},
                  {"status", l->status, sizeof(l->status)},
                  {"reference", l->reference, sizeof(l->reference)},
                  {"since", l->since, sizeof(l->since)},
                  {"until", l->until, sizeof(l->until)},
                  {l->kind->filter4, l->filter4, sizeof(l->filter4)},
                  {l->kind->unified ? "batchId" : NULL, l->batch, sizeof(l->batch)}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (fields[i].name == NULL)
            continue;
        int n = og_query_param(query, query_len, fields[i].name, fields[i].dst, fields[i].cap);
        if (n == -1) {
            fields[i].dst[0] = '\0';
            continue;
        }
        if (n <= 0)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, fields[i].name, "%s is empty or malformed",
                               fields[i].name);
    }
    if (l->cursor[0] && !og_ids_reference_valid(l->cursor))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "cursor", "cursor is not one this API returned");
    if (l->reference[0] && !og_ids_reference_valid(l->reference))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "reference", "reference must look like kf_...");
    if (l->batch[0] && !og_ids_batch_valid(l->batch))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "batchId", "batchId must look like kb_...");
    if (l->to[0] && !og_phone_e164_valid(l->to))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "to",
                           "to must be an E.164 number (+ and 8-15 digits)");
    if (l->status[0] && !one_of(l->status, l->kind->status_values))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "status", "unknown status");
    if (l->filter4[0] && !one_of(l->filter4, l->kind->filter4_values))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, l->kind->filter4, "unknown %s", l->kind->filter4);
    int64_t since = 0, until = (int64_t)OG_IDS_TIME_MAX + 1;
    if (l->since[0] && !og_time_parse_rfc3339(l->since, &since))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "since", "since must be an RFC 3339 time");
    if (l->until[0] && !og_time_parse_rfc3339(l->until, &until))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "until", "until must be an RFC 3339 time");
    /* A record's time is its reference's (when the gateway made it), to the millisecond. */
    og_ids_reference_floor(l->lo, since < 0 ? 0 : (uint64_t)since);
    og_ids_reference_floor(l->hi, until < 0 ? 0 : (uint64_t)until);
    if (l->cursor[0] && strcmp(l->cursor, l->hi) < 0)
        memcpy(l->hi, l->cursor, sizeof(l->hi));
    return true;
}

static const char *opt(const char *s)
{
    return s[0] ? s : NULL;
}

/* Answers a page that failed: 503 query_timeout when the server cancelled it (its statement
 * timeout), 503 unavailable when it could not be run or a replica cancelled it for a conflict
 * with recovery (class 40: worth retrying), else 500. */
static void page_failed(logs_op_t *l, og_db_op_t *op, og_db_status_t st)
{
    og_http_req_t *req = l->req;
    og_worker_t *w = l->gw->w;
    if (st == OG_DB_ERROR && og_db_cancelled(op)) {
        if (l->gw->log_query_timeouts != NULL)
            og_metrics_add(l->gw->log_query_timeouts, 1);
        og_log(&w->log, OG_LOG_WARN, "logs query cancelled", "\"requestId\":\"%s\",\"timeoutMs\":%d",
               req->request_id, w->cfg->log_query_timeout_ms);
        og_api_error(req, OG_E_QUERY_TIMEOUT, NULL,
                     "the log query took too long and was cancelled: narrow it or retry");
    } else {
        /* A replica cancelling a read for a recovery conflict (class 40) is worth a retry. */
        bool retry = st == OG_DB_ERROR && strncmp(op->sqlstate, "40", 2) == 0;
        og_answer_db_failure(req, &w->log, op, retry ? OG_DB_UNAVAILABLE : st, "logs query failed",
                             "database unavailable");
    }
}

/* Chooses the statement of a page and binds its parameters (sql/queries/logs.sql): the range
 * and the limit, then the highest-ranked filter given, which picks the index the page is read
 * by, and the filters ranked below it, checked on the rows that index gives. The ranks follow
 * how few rows a filter leaves: one reference, one number's records, one status, one channel
 * or source. Status with channel is the exception: neither bounds the other, so its statement
 * reads both indexes in order and merges them. */
void og_logs_query_stmt(const og_logs_query_t *l, const char *tenant_id, og_db_call_t *c)
{
    const logs_kind_t *k = l->kind;
    const char *f[F__COUNT] = {opt(l->reference), opt(l->to), opt(l->status), opt(l->filter4)};
    int lead = 0;
    while (lead < F__COUNT && f[lead] == NULL)
        lead++;
    int stmt = lead == F__COUNT ? k->by_time : k->by[lead];
    if (lead == F_STATUS && f[F_4] != NULL && k->by_status_and_4 >= 0)
        stmt = k->by_status_and_4;
    /* The filters from the leading one down, those the statement takes: the status statement
     * of the unified log takes no channel, which has a statement of its own. */
    const char *ref = f[F_REFERENCE], *to = f[F_TO], *status = f[F_STATUS], *f4 = f[F_4];
#define RANGE .tenant_id = tenant_id, .lo = l->lo, .hi = l->hi, .limit = l->limit_s
    /* A batch (API.md §20) ranks above them all: at most OMNIGATE_BATCH_MAX messages. */
    if (l->batch[0]) {
        og_q_logs_omni_batch(c, &(og_q_logs_omni_batch_t){RANGE, .batch_id = l->batch, .reference = ref,
                                                          .to = to, .status = status, .channel = f4});
        return;
    }
    switch (stmt) {
    case OG_Q_LOGS_OMNI:
        og_q_logs_omni(c, &(og_q_logs_omni_t){RANGE});
        break;
    case OG_Q_LOGS_OMNI_REFERENCE:
        og_q_logs_omni_reference(c, &(og_q_logs_omni_reference_t){RANGE, .reference = ref, .to = to,
                                                                  .status = status, .channel = f4});
        break;
    case OG_Q_LOGS_OMNI_TO:
        og_q_logs_omni_to(c, &(og_q_logs_omni_to_t){RANGE, .to = to, .status = status, .channel = f4});
        break;
    case OG_Q_LOGS_OMNI_STATUS:
        og_q_logs_omni_status(c, &(og_q_logs_omni_status_t){RANGE, .status = status});
        break;
    case OG_Q_LOGS_OMNI_STATUS_CHANNEL:
        og_q_logs_omni_status_channel(
            c, &(og_q_logs_omni_status_channel_t){RANGE, .status = status, .channel = f4});
        break;
    case OG_Q_LOGS_OMNI_CHANNEL:
        og_q_logs_omni_channel(c, &(og_q_logs_omni_channel_t){RANGE, .channel = f4});
        break;
    case OG_Q_LOGS_SMS:
        og_q_logs_sms(c, &(og_q_logs_sms_t){RANGE});
        break;
    case OG_Q_LOGS_SMS_REFERENCE:
        og_q_logs_sms_reference(c, &(og_q_logs_sms_reference_t){RANGE, .reference = ref, .to = to,
                                                                .status = status, .source = f4});
        break;
    case OG_Q_LOGS_SMS_TO:
        og_q_logs_sms_to(c, &(og_q_logs_sms_to_t){RANGE, .to = to, .status = status, .source = f4});
        break;
    case OG_Q_LOGS_SMS_STATUS:
        og_q_logs_sms_status(c, &(og_q_logs_sms_status_t){RANGE, .status = status, .source = f4});
        break;
    case OG_Q_LOGS_SMS_SOURCE:
        og_q_logs_sms_source(c, &(og_q_logs_sms_source_t){RANGE, .source = f4});
        break;
    case OG_Q_LOGS_OTP:
        og_q_logs_otp(c, &(og_q_logs_otp_t){RANGE});
        break;
    case OG_Q_LOGS_OTP_REFERENCE:
        og_q_logs_otp_reference(
            c, &(og_q_logs_otp_reference_t){RANGE, .reference = ref, .to = to, .status = status});
        break;
    case OG_Q_LOGS_OTP_TO:
        og_q_logs_otp_to(c, &(og_q_logs_otp_to_t){RANGE, .to = to, .status = status});
        break;
    case OG_Q_LOGS_OTP_STATUS:
        og_q_logs_otp_status(c, &(og_q_logs_otp_status_t){RANGE, .status = status});
        break;
    }
#undef RANGE
}

static void page_done(og_db_op_t *op, og_db_status_t st)
{
    logs_op_t *l = op->arg;
    og_http_req_t *req = l->req;
    if (st != OG_DB_OK) {
        page_failed(l, op, st);
        goto out;
    }
    /* An admin mirror reads the tenant's existence after the page (logs_tenant). */
    if (op->nstmts == 2 && (op->res[1] == NULL || PQntuples(op->res[1]) == 0)) {
        og_api_error(req, OG_E_NOT_FOUND, NULL, "no such tenant");
        goto out;
    }
    /* The rows are JSON already (built by the query), spliced into the envelope as they are;
     * the cursor is a reference (kf_ + Crockford base32): no character needs escaping. */
    og_page_answer(req, op->res[0], l->q.limit, "logs");
out:
    og_db_op_clear(op);
    og_tenant_release(l->auth.tenant);
    free(l);
}

/* Sends the page of l->q for `tenant_id` (which must live as long as l) to the read pool, with
 * the tenant's existence when `check_tenant`. */
static void submit_page(logs_op_t *l, const char *tenant_id, bool check_tenant)
{
    og_db_op_t *op = &l->op;
    op->nstmts = 1;
    og_logs_query_stmt(&l->q, tenant_id, &op->stmts[0]);
    if (check_tenant) {
        op->nstmts = 2;
        og_q_logs_tenant(&op->stmts[1], &(og_q_logs_tenant_t){.tenant_id = tenant_id});
    }
    op->done = page_done;
    op->arg = l;
    og_db_submit(l->gw->rdb, op);
}

static void authed(og_auth_req_t *a)
{
    logs_op_t *l = (logs_op_t *)a;
    if (a->tenant == NULL) {
        free(l);
        return;
    }
    submit_page(l, a->tenant->id, false);
}

/* A page request: its parameters checked (else answered 422 and NULL). */
static logs_op_t *logs_op_new(og_http_req_t *req, og_gw_t *gw, og_logs_kind_t kind)
{
    logs_op_t *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    l->gw = gw;
    l->req = req;
    og_err_t err = {0};
    if (!og_logs_query_parse(&l->q, kind, req->query, req->query ? req->query_len : 0, &err)) {
        free(l);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return NULL;
    }
    return l;
}

static void logs(og_http_req_t *req, void *ctx, og_logs_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    logs_op_t *l = logs_op_new(req, gw, kind);
    if (l == NULL)
        return;
    l->auth.req = req;
    l->auth.scope = OG_SCOPE_LOGS;
    l->auth.unified = l->q.kind->unified;
    l->auth.done = authed;
    l->auth.op = &l->op;
    og_auth_tenant(gw->auth, &l->auth);
}

/* The admin mirror: the admin token, then the tenant of the path (a malformed id is a tenant
 * that does not exist: 404), then the query parameters. */
static void admin_logs(og_http_req_t *req, const og_route_match_t *m, void *ctx, og_logs_kind_t kind)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_auth_admin_tenant(req, m, gw->w->cfg->admin_token, id))
        return;
    if (gw->rdb == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "no database configured");
        return;
    }
    logs_op_t *l = logs_op_new(req, gw, kind);
    if (l == NULL)
        return;
    memcpy(l->tenant_id, id, sizeof(id));
    submit_page(l, l->tenant_id, true);
}

void og_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, OG_LOGS_OMNI);
}

void og_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, OG_LOGS_SMS);
}

void og_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, OG_LOGS_OTP);
}

void og_admin_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_logs(req, m, ctx, OG_LOGS_OMNI);
}

void og_admin_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_logs(req, m, ctx, OG_LOGS_SMS);
}

void og_admin_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    admin_logs(req, m, ctx, OG_LOGS_OTP);
}
