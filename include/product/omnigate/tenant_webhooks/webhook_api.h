/*
 * The HTTP routes of tenant webhooks (API.md §12). Admin (admin token):
 * PUT/GET/DELETE /admin/tenants/{id}/webhook and POST /admin/tenants/{id}/webhook/rotate-secret,
 * the secret shown only when created or rotated and masked otherwise; the tenant's own twins
 * (API.md §23, scope keys) GET/PUT/DELETE /api/webhook and POST /api/webhook/rotate-secret, the
 * same bodies and answers for the tenant of the caller's token. Tenant (scope logs):
 * GET /api/webhooks/deliveries and POST /api/webhooks/deliveries/{id}/retry, a tenant seeing
 * only its own deliveries. Responsible for these routes' validation and answers; not for the
 * webhook rules (webhooks.h), the SQL (store.h) or delivering (webhooks_out.h).
 */
#ifndef OMNIGATE_TENANT_WEBHOOKS_WEBHOOK_API_H
#define OMNIGATE_TENANT_WEBHOOKS_WEBHOOK_API_H

#include <jansson.h>
#include <libpq-fe.h>

#include "omnigate/http.h"
#include "omnigate/router.h"
#include "omnigate/seal.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */
void og_wh_admin_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_admin_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_admin_rotate(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_tenant_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_tenant_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_tenant_rotate(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_deliveries(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_retry(og_http_req_t *req, const og_route_match_t *m, void *ctx);
/* Their admin mirrors for any tenant (API.md §17): GET /admin/tenants/{id}/webhook/deliveries,
 * POST /admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry. */
void og_wh_admin_deliveries(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_wh_admin_retry(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* The answer's data for row `row` of a webhook result (OG_WH_* columns of store.h) of tenant
 * `tenant_id`: {"url", "events", "secret", "enabled", "disabledAt", "disabledReason",
 * "createdAt", "updatedAt"}, the secret opened with `key` and shown in full when `reveal`,
 * else masked ("whsec_****" and its last 4 characters; "" when it does not open). Also used by
 * `omnigate admin`. */
json_t *og_wh_row_json(const PGresult *r, int row, const og_seal_key_t *key, const char *tenant_id,
                       bool reveal);

#endif
