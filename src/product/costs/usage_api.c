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
#include "omnigate/costs/rates.h"
#include "omnigate/ids.h"
#include "omnigate/jw.h"
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

/* ---- the answer ------------------------------------------------------------------------------ */

/* The counts of a row of usage_rows, and of a row of the answer (their sums). */
enum {
    C_MESSAGES,
    C_ATTEMPTS,
    C_ACCEPTED,
    C_DELIVERED,
    C_READ,
    C_FAILED,
    C_SEGMENTS,
    C_COST,
    C_WON,
    C_SAVINGS,
    NC
};

static const char *const count_names[] = {"messages", "attempts", "accepted", "delivered",
                                          "read",     "failed",   "segments"};
static const int count_cols[NC] = {OG_C_USAGE_ROWS_MESSAGES, OG_C_USAGE_ROWS_ATTEMPTS,
                                   OG_C_USAGE_ROWS_ACCEPTED, OG_C_USAGE_ROWS_DELIVERED,
                                   OG_C_USAGE_ROWS_READ,     OG_C_USAGE_ROWS_FAILED,
                                   OG_C_USAGE_ROWS_SEGMENTS, OG_C_USAGE_ROWS_COST_MICROS,
                                   OG_C_USAGE_ROWS_WON,      OG_C_USAGE_ROWS_SAVINGS_MICROS};

/* The channels' order in the answer. */
static const char *const channels[] = {"whatsapp_qr", "whatsapp_meta", "sms"};
#define NCH 3

static int channel_index(const char *ch)
{
    for (int i = 0; i < NCH; i++)
        if (strcmp(ch, channels[i]) == 0)
            return i;
    return -1; /* '': a day's messages */
}

/* An amount in `currency` (NULL: none, the amount null), as og_cost_write writes it. */
static void write_money(og_jw_t *w, const char *key, long long micros, const char *currency)
{
    og_cost_t c = {.micros = micros};
    if (currency != NULL)
        snprintf(c.currency, sizeof(c.currency), "%s", currency);
    og_cost_write(w, key, &c);
}

static void write_row(og_jw_t *w, const char *day, const char *channel, const long long *c,
                      const char *currency)
{
    og_jw_object(w);
    if (day != NULL)
        og_jw_kstring(w, "day", day);
    if (channel != NULL)
        og_jw_kstring(w, "channel", channel);
    for (int k = 0; k < C_COST; k++)
        og_jw_kint(w, count_names[k], c[k]);
    write_money(w, "cost", c[C_COST], currency);
    og_jw_object_end(w);
}

static long long count_at(const PGresult *r, int i, int k)
{
    return strtoll(PQgetvalue(r, i, count_cols[k]), NULL, 10);
}

/* The rows as groupBy asks, from usage_rows (by day, then channel, '' first): by day, a day's
 * messages are its '' row's and the rest its channels' sums; by channel, each channel's sums over
 * the days; by both, the channels' rows as they are. And the fallback figures. */
static char *answer(const usage_req_t *r, const PGresult *rows, const char *currency, size_t *len)
{
    bool by_day = strcmp(r->group, "channel") != 0, by_channel = strcmp(r->group, "day") != 0;
    long long ch_sums[NCH][NC] = {{0}}, day_sums[NC] = {0};
    og_jw_t w;
    og_jw_init(&w, 256 + (size_t)PQntuples(rows) * 200);
    og_jw_object(&w);
    og_jw_kstring(&w, "currency", currency);
    og_jw_key(&w, "rows");
    og_jw_array(&w);
    int n = PQntuples(rows);
    for (int i = 0; i < n; i++) {
        const char *day = PQgetvalue(rows, i, OG_C_USAGE_ROWS_DAY);
        int ch = channel_index(PQgetvalue(rows, i, OG_C_USAGE_ROWS_CHANNEL));
        long long c[NC];
        for (int k = 0; k < NC; k++)
            c[k] = count_at(rows, i, k);
        if (ch >= 0)
            for (int k = 0; k < NC; k++)
                ch_sums[ch][k] += c[k];
        if (by_day && by_channel) {
            if (ch >= 0)
                write_row(&w, day, channels[ch], c, currency);
        } else if (by_day) {
            for (int k = 0; k < NC; k++)
                day_sums[k] += k == C_MESSAGES ? (ch < 0 ? c[k] : 0) : c[k];
            if (i + 1 == n || strcmp(day, PQgetvalue(rows, i + 1, OG_C_USAGE_ROWS_DAY)) != 0) {
                write_row(&w, day, NULL, day_sums, currency);
                memset(day_sums, 0, sizeof(day_sums));
            }
        }
    }
    long long won = 0, savings = 0;
    for (int ch = 0; ch < NCH; ch++) {
        if (!by_day && (ch_sums[ch][C_MESSAGES] != 0 || ch_sums[ch][C_ATTEMPTS] != 0))
            write_row(&w, NULL, channels[ch], ch_sums[ch], currency);
        won += ch_sums[ch][C_WON];
        savings += ch_sums[ch][C_SAVINGS];
    }
    og_jw_array_end(&w);
    og_jw_key(&w, "fallback");
    og_jw_object(&w);
    og_jw_kint(&w, "messages", won);
    og_jw_key(&w, "wonBy");
    og_jw_object(&w);
    for (int ch = 0; ch < NCH; ch++)
        og_jw_kint(&w, channels[ch], ch_sums[ch][C_WON]);
    og_jw_object_end(&w);
    write_money(&w, "savings", savings, currency);
    og_jw_object_end(&w);
    og_jw_object_end(&w);
    return og_jw_finish(&w, len);
}

static void done(og_db_op_t *op, og_db_status_t st)
{
    usage_req_t *r = op->arg;
    const PGresult *cur = op->res[1];
    if (st != OG_DB_OK) {
        og_answer_db_failure(r->req, &r->gw->w->log, op, st, "reading usage failed", "database unavailable");
    } else if (PQgetvalue(cur, 0, OG_C_USAGE_CURRENCY_KNOWN)[0] != 't') { /* the admin mirror's tenant */
        og_api_error(r->req, OG_E_NOT_FOUND, NULL, "no such tenant");
    } else {
        const char *currency = PQgetisnull(cur, 0, OG_C_USAGE_CURRENCY_CURRENCY)
                                   ? NULL
                                   : PQgetvalue(cur, 0, OG_C_USAGE_CURRENCY_CURRENCY);
        char *data = answer(r, op->res[0], currency, NULL);
        if (data == NULL)
            og_api_error(r->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        else
            og_answer_raw(r->req, 200, "usage", data, NULL);
        free(data);
    }
    req_free(r);
}

static void submit(usage_req_t *r, const char *tenant_id)
{
    og_db_op_t *op = &r->op;
    og_db_op_clear(op);
    og_q_usage_rows(&op->stmts[0],
                    &(og_q_usage_rows_t){.tenant_id = tenant_id, .since = r->since, .until = r->until});
    og_q_usage_currency(&op->stmts[1], &(og_q_usage_currency_t){.tenant_id = tenant_id});
    op->nstmts = 2;
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
