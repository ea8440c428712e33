/*
 * The template routes (API.md §18): GET /api/whatsapp/templates (scope send) and the admin's
 * GET /admin/tenants/{id}/templates, pages of the catalogue entries of the tenant's WABAs with
 * the filters name, status and language; POST /admin/tenants/{id}/templates/sync, which reads
 * every WABA of the tenant from Meta now and answers {"synced": N} (502 provider_error when
 * Meta fails; the old catalogue is kept). Responsible for those routes; not for the catalogue's
 * SQL (sql/queries/templates.sql) or Meta's listing (sync.h).
 *
 * The lists read through the write pool (gw->db), not the log routes' read pool: a catalogue
 * page is a few hundred rows found by index, never a scan, and an admin who has just synced or
 * a status Meta has just changed must show in the next page, which a replica behind the read
 * pool would not promise. The list is not part of the unified API (API.md §1): a tenant whose
 * plan locks the unified API still lists its templates.
 */
#ifndef OMNIGATE_TEMPLATES_TEMPLATE_API_H
#define OMNIGATE_TEMPLATES_TEMPLATE_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* The longest cursor of a page: "name/language/wabaId" at their longest (settings.h). */
#define OG_TPL_CURSOR_MAX (512 + 1 + 15 + 1 + 32)

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/ctx.h). */
void og_tpl_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tpl_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tpl_admin_sync(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
