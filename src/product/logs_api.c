/*
 * GET /api/omni/logs, /api/sms/logs, /api/sms/otp/logs (API.md §4): one tenant's records,
 * newest first, in pages. The cursor is the last reference of the previous page: references
 * are time-ordered and unique per tenant, so "reference < cursor" pages through every record
 * exactly once even while new ones arrive. Responsible for the query parameters and the page;
 * the SQL (which builds each item's JSON) is in store.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/answer.h"
#include "omnigate/api.h"
#include "omnigate/auth.h"
#include "omnigate/logs_api.h"
#include "omnigate/gateway.h"
#include "omnigate/ids.h"
#include "omnigate/phone.h"
#include "omnigate/router.h"
#include "omnigate/store.h"

#define LOGS_DEFAULT_LIMIT 50
#define LOGS_MAX_LIMIT     500

typedef struct logs_kind {
    int stmt;
    bool unified;
    const char *filter4;               /* name of the 4th filter: "channel" or "source" */
    const char *const *filter4_values; /* allowed values */
    const char *const *status_values;  /* allowed status values */
} logs_kind_t;

static const char *const channels[] = {"whatsapp_qr", "whatsapp_meta", "sms", NULL};
static const char *const sources[] = {"sms", "omni", "otp", NULL};
static const char *const omni_status[] = {"pending",   "sent", "failed",      "unknown",
                                          "delivered", "read", "undelivered", NULL};
static const char *const sms_status[] = {"sent", "failed", "delivered", "read", "undelivered", NULL};
static const char *const otp_status[] = {"pending", "verified",   "expired", "locked",
                                         "failed",  "superseded", NULL};

static const logs_kind_t kinds[] = {
    {OG_Q_LOGS_OMNI, true, "channel", channels, omni_status},
    {OG_Q_LOGS_SMS, false, "source", sources, sms_status},
    {OG_Q_LOGS_OTP, false, NULL, NULL, otp_status},
};

typedef struct logs_op {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_db_op_t op;
    og_gw_t *gw;
    const logs_kind_t *kind;
    int limit;
    char limit_s[8];
    char to[20], status[16], filter4[16], reference[32], since[40], until[40], cursor[32];
} logs_op_t;

static bool one_of(const char *v, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(v, *set) == 0)
            return true;
    return false;
}

/* RFC 3339 date-time, strictly: 2026-11-22T14:05:25Z, optional fraction, Z or ±hh:mm. */
static bool rfc3339_valid(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t i;
    for (i = 0; shape[i]; i++) {
        char c = s[i];
        if (shape[i] == 'd' ? (c < '0' || c > '9')
                            : (shape[i] == 'T' ? (c != 'T' && c != 't') : c != shape[i]))
            return false;
    }
    int month = (s[5] - '0') * 10 + (s[6] - '0'), day = (s[8] - '0') * 10 + (s[9] - '0');
    int hour = (s[11] - '0') * 10 + (s[12] - '0'), min = (s[14] - '0') * 10 + (s[15] - '0');
    int sec = (s[17] - '0') * 10 + (s[18] - '0');
    if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
        return false;
    const char *p = s + i;
    if (*p == '.') {
        p++;
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 9)
            return false;
        p += n;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] == '\0';
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[1] >= '0' && p[1] <= '2' && p[2] >= '0' &&
        p[2] <= '9' && p[3] == ':' && p[4] >= '0' && p[4] <= '5' && p[5] >= '0' && p[5] <= '9')
        return true;
    return false;
}

/* Reads every query parameter; false with `err` set on the first bad one. */
static bool parse_query(const og_http_req_t *req, logs_op_t *l, og_err_t *err)
{
    static const char *const known[] = {"limit",  "cursor",    "to",    "status", "channel",
                                        "source", "reference", "since", "until",  NULL};
    /* Unknown parameters are refused like unknown body fields: a typo must not widen a query. */
    const char *q = req->query;
    size_t left = q ? req->query_len : 0;
    while (left > 0) {
        size_t n = 0;
        while (n < left && q[n] != '&')
            n++;
        size_t k = 0;
        while (k < n && q[k] != '=')
            k++;
        if (k > 0) {
            bool ok = false;
            for (const char *const *name = known; *name && !ok; name++)
                ok = strlen(*name) == k && memcmp(*name, q, k) == 0;
            bool own4 = l->kind->filter4 != NULL && strlen(l->kind->filter4) == k &&
                        memcmp(l->kind->filter4, q, k) == 0;
            bool other4 = (k == 7 && memcmp(q, "channel", 7) == 0) || (k == 6 && memcmp(q, "source", 6) == 0);
            if (!ok || (other4 && !own4)) {
                char name[64];
                snprintf(name, sizeof(name), "%.*s", (int)(k < 60 ? k : 60), q);
                return og_err_fail(err, "validation_failed", name, "unknown query parameter %s", name);
            }
        }
        q += n;
        left -= n;
        if (left > 0) {
            q++;
            left--;
        }
    }

    char buf[64];
    int n = og_query_param(req->query, req->query_len, "limit", buf, sizeof(buf));
    l->limit = LOGS_DEFAULT_LIMIT;
    if (n != -1) {
        char *end = NULL;
        long v = n > 0 ? strtol(buf, &end, 10) : 0;
        if (n <= 0 || *end != '\0' || buf[0] == '+' || buf[0] == '-' || v < 1 || v > LOGS_MAX_LIMIT)
            return og_err_fail(err, "validation_failed", "limit", "limit must be an integer from 1 to %d",
                               LOGS_MAX_LIMIT);
        l->limit = (int)v;
    }
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
                  {l->kind->filter4, l->filter4, sizeof(l->filter4)}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (fields[i].name == NULL)
            continue;
        n = og_query_param(req->query, req->query_len, fields[i].name, fields[i].dst, fields[i].cap);
        if (n == -1) {
            fields[i].dst[0] = '\0';
            continue;
        }
        if (n <= 0)
            return og_err_fail(err, "validation_failed", fields[i].name, "%s is empty or malformed",
                               fields[i].name);
    }
    if (l->cursor[0] && !og_ids_reference_valid(l->cursor))
        return og_err_fail(err, "validation_failed", "cursor", "cursor is not one this API returned");
    if (l->reference[0] && !og_ids_reference_valid(l->reference))
        return og_err_fail(err, "validation_failed", "reference", "reference must look like kf_...");
    if (l->to[0] && !og_phone_e164_valid(l->to))
        return og_err_fail(err, "validation_failed", "to", "to must be an E.164 number (+ and 8-15 digits)");
    if (l->status[0] && !one_of(l->status, l->kind->status_values))
        return og_err_fail(err, "validation_failed", "status", "unknown status");
    if (l->filter4[0] && !one_of(l->filter4, l->kind->filter4_values))
        return og_err_fail(err, "validation_failed", l->kind->filter4, "unknown %s", l->kind->filter4);
    if (l->since[0] && !rfc3339_valid(l->since))
        return og_err_fail(err, "validation_failed", "since", "since must be an RFC 3339 time");
    if (l->until[0] && !rfc3339_valid(l->until))
        return og_err_fail(err, "validation_failed", "until", "until must be an RFC 3339 time");
    return true;
}

static const char *opt(const char *s)
{
    return s[0] ? s : NULL;
}

static void page_done(og_db_op_t *op, og_db_status_t st)
{
    logs_op_t *l = op->arg;
    og_http_req_t *req = l->auth.req;
    if (st != OG_DB_OK) {
        og_answer_db_failure(req, &l->gw->w->log, op, st, "logs query failed", "database unavailable");
        goto out;
    }
    /* The rows are JSON already (built by the query), spliced into the envelope as they are;
     * the cursor is a reference (kf_ + Crockford base32): no character needs escaping. */
    og_answer_page(req, op->res[0], l->limit, "logs");
out:
    og_db_op_clear(op);
    og_tenant_release(l->auth.tenant);
    free(l);
}

static void authed(og_auth_req_t *a)
{
    logs_op_t *l = (logs_op_t *)a;
    if (a->tenant == NULL) {
        free(l);
        return;
    }
    og_db_op_t *op = &l->op;
    op->nstmts = 1;
    op->stmts[0].stmt = l->kind->stmt;
    const char **v = op->stmts[0].values;
    v[0] = a->tenant->id;
    v[1] = opt(l->to);
    v[2] = opt(l->status);
    v[3] = opt(l->filter4);
    v[4] = opt(l->reference);
    v[5] = opt(l->since);
    v[6] = opt(l->until);
    v[7] = opt(l->cursor);
    v[8] = l->limit_s;
    op->done = page_done;
    op->arg = l;
    og_db_submit(l->gw->db, op);
}

static void logs(og_http_req_t *req, void *ctx, const logs_kind_t *kind)
{
    og_gw_t *gw = og_gw(ctx);
    logs_op_t *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        og_api_error(req, "unavailable", NULL, "out of memory");
        return;
    }
    l->gw = gw;
    l->kind = kind;
    og_err_t err = {0};
    if (!parse_query(req, l, &err)) {
        free(l);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    l->auth.req = req;
    l->auth.scope = OG_SCOPE_LOGS;
    l->auth.unified = kind->unified;
    l->auth.done = authed;
    og_auth_tenant(gw->auth, &l->auth);
}

void og_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, &kinds[0]);
}

void og_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, &kinds[1]);
}

void og_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    logs(req, ctx, &kinds[2]);
}
