/*
 * The tenant log routes (API.md §4): GET /api/omni/logs, /api/sms/logs, /api/sms/otp/logs,
 * one tenant's records newest first, in cursor pages. Responsible for the query parameters and
 * the page; not for the SQL that builds each item (store.h), nor for the process's own log
 * lines (log.h).
 */
#ifndef OMNIGATE_LOGS_API_H
#define OMNIGATE_LOGS_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (gateway.h). */
void og_logs_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_sms(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_logs_otp(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
