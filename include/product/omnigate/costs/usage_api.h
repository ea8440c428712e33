/*
 * Usage (API.md §22): GET /api/usage (scope logs), its admin mirror for one tenant
 * (/admin/tenants/{id}/usage) and for every tenant (/admin/usage). Responsible for the query's
 * parameters and the answer; the totals are kept by the database (sql/024_usage.sql) and read
 * by usage_get (sql/queries/usage.sql), never from the logs.
 *
 * Parameters: since and until (RFC 3339; by default the last 30 days up to now) select the
 * UTC days from since's to until's, both included (the totals are per day: a time of day
 * selects its whole day), at most OG_USAGE_MAX_DAYS; groupBy = day (the default), channel, or
 * day,channel. Anything else is 422 naming the parameter.
 */
#ifndef OMNIGATE_COSTS_USAGE_API_H
#define OMNIGATE_COSTS_USAGE_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

#define OG_USAGE_DEFAULT_DAYS 30
#define OG_USAGE_MAX_DAYS     400 /* a year and a month on either side */

void og_usage_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_usage_admin_tenant(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_usage_admin_all(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
