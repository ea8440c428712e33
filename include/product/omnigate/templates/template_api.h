/*
 * The template routes (API.md §18): GET /api/whatsapp/templates (scope send) and the admin's
 * GET /admin/tenants/{id}/templates, pages of the catalogue entries of the tenant's WABAs with
 * the filters name, status and language; POST /admin/tenants/{id}/templates/sync, which reads
 * every WABA of the tenant from Meta now and answers {"synced": N} (502 provider_error when
 * Meta fails; the old catalogue is kept). Responsible for those routes; not for the catalogue's
 * SQL (sql/queries/templates.sql) or Meta's listing (sync.h).
 */
#ifndef OMNIGATE_TEMPLATES_TEMPLATE_API_H
#define OMNIGATE_TEMPLATES_TEMPLATE_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/ctx.h). */
void og_tpl_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tpl_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tpl_admin_sync(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
