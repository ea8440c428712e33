/*
 * The tenant log routes (API.md §4): GET /api/omni/logs, /api/sms/logs, /api/sms/otp/logs,
 * one tenant's records newest first, in cursor pages, and their admin mirrors for any tenant
 * (API.md §17: GET /admin/tenants/{id}/omni/logs, .../sms/logs, .../otp/logs). Responsible
 * for the query parameters, the choice of statement and the page; not for the SQL that builds
 * each item (store.h), nor for the process's own log lines (log.h). The paging rules (limit,
 * unknown parameters) are shared with the admin tenant list (admin.c) and the command line
 * (cli.c), so every page of the API reads the same way.
 */
#ifndef OMNIGATE_LOGS_LOGS_API_H
#define OMNIGATE_LOGS_LOGS_API_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "omnigate/db.h"
#include "omnigate/error.h"
#include "omnigate/http.h"
#include "omnigate/ids.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

/* The log routes' metric block (metrics.h): one counter, of queries cancelled at their
 * timeout. The app registers it and keeps it in its context (app/ctx.h). */
extern const og_m_block_t og_logs_metrics_block;

typedef enum { OG_LOGS_OMNI, OG_LOGS_SMS, OG_LOGS_OTP } og_logs_kind_t;

/* One page asked of a log: its query parameters, checked. */
typedef struct og_logs_query {
    const struct logs_kind *kind;
    int limit;
    char limit_s[12]; /* limit + 1, as the statement's parameter */
    char to[20], status[16], filter4[16], reference[32], since[40], until[40], cursor[32];
    char batch[32]; /* the unified log's batchId (API.md §20), or "" */
    char lo[OG_IDS_REFERENCE_SIZE], hi[OG_IDS_REFERENCE_SIZE]; /* the page's range: lo <= reference < hi */
} og_logs_query_t;

/* Reads the query string of a page of log `kind` into `q`; false with `err` on the first bad
 * parameter (API.md §4). */
bool og_logs_query_parse(og_logs_query_t *q, og_logs_kind_t kind, const char *query, size_t len,
                         og_err_t *err);

/* Binds into `c` the statement (OG_Q_LOGS_*) that reads the page of `q` for `tenant_id`, its
 * parameters pointing into q and tenant_id. */
void og_logs_query_stmt(const og_logs_query_t *q, const char *tenant_id, og_db_call_t *c);

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */
void og_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
