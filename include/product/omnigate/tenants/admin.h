/*
 * The admin API (API.md §5): tenants and their tokens, behind OMNIGATE_ADMIN_TOKEN. Every
 * answer masks tenant secrets; a token is shown once, at creation. Also the tenant's own token
 * routes (API.md §23, a tenant token with scope keys), which answer as the admin's do for the
 * caller's tenant, and GET /api/tenant. Responsible for these routes' validation and answers; not
 * for the SQL (store.h) or the settings document (settings.h). The command-line twin is cli.h.
 */
#ifndef OMNIGATE_TENANTS_ADMIN_H
#define OMNIGATE_TENANTS_ADMIN_H

#include "omnigate/app/ctx.h"
#include "omnigate/http.h"
#include "omnigate/error.h"
#include "omnigate/router.h"

#define OG_ADMIN_MAX_NAME_CHARS 200

/* A page of the tenant list asked for (GET /admin/tenants, `omnigate admin list-tenants`). */
typedef struct og_admin_list {
    int limit;
    char limit_s[12];                           /* limit + 1, the statement's parameter */
    char cursor[37];                            /* the last tenant id of the previous page, or "" */
    char name[4 * OG_ADMIN_MAX_NAME_CHARS + 1]; /* part of the name to look for, or "" */
} og_admin_list_t;

/* Reads the query string of a tenant list: limit and cursor as the logs have them
 * (logs_api.h), and name; false with `err` (422) on the first bad one. */
bool og_admin_list_query(const char *query, size_t len, og_admin_list_t *out, og_err_t *err);

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */
/* For an admin route: the admin token, and a database configured; false after answering (401,
 * 503). */
bool og_admin_db(og_http_req_t *req, og_gw_t *gw);

void og_admin_tenant_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_tenant_patch(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_admin_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* The tenant's own (scope keys): GET/POST /api/tokens and DELETE /api/tokens/{id}, the same bodies
 * and answers as the admin routes above for the caller's tenant; a token of another tenant is
 * 404, and a creation asking for a scope the caller's token lacks 403 insufficient_scope. */
void og_tenant_token_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tenant_token_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_tenant_token_revoke(og_http_req_t *req, const og_route_match_t *m, void *ctx);
/* GET /api/tenant (any tenant token): {"id", "name", "unifiedApiEnabled", "scopes"}, the last the
 * calling token's. */
void og_tenant_self(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
