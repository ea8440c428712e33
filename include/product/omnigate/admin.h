/*
 * The admin API (API.md §5): tenants and their tokens, behind OMNIGATE_ADMIN_TOKEN. Every
 * answer masks tenant secrets; a token is shown once, at creation. Responsible for the admin
 * routes' validation and answers; not for the SQL (store.h) or the settings document
 * (settings.h). The command-line twin is cli.h.
 */
#ifndef OMNIGATE_ADMIN_H
#define OMNIGATE_ADMIN_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (gateway.h). */
void og_admin_tenant_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_patch(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
