/*
 * A page of one tenant's list served twice: to the tenant's token (GET /api/...) and to the
 * admin for the tenant of the path (GET /admin/tenants/{id}/...), as the webhook deliveries and
 * the WhatsApp templates are. Responsible for the steps every such list shares: authentication,
 * the page's `limit` and unknown-parameter rules (logs/page.h), the one statement of the page,
 * the admin mirror's 404 for an unknown tenant, and the answer; not for a list's own filters
 * or statement (the kind gives them).
 */
#ifndef OMNIGATE_LOGS_TENANT_PAGE_H
#define OMNIGATE_LOGS_TENANT_PAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "omnigate/app/ctx.h"
#include "omnigate/db.h"
#include "omnigate/error.h"
#include "omnigate/http.h"
#include "omnigate/router.h"
#include "omnigate/tenants/auth.h"

typedef struct og_tenant_page og_tenant_page_t;

/* One list. */
typedef struct og_tenant_page_kind {
    const char *what;          /* "templates": the answer's message and the failure's log line */
    size_t size;               /* the list's own struct, which starts with an og_tenant_page_t */
    const char *const *params; /* every query parameter it knows, `limit` included */
    unsigned scope;            /* the tenant token's OG_SCOPE_* */
    /* Reads the list's own parameters from p->req into its struct; false with `err`. */
    bool (*parse)(og_tenant_page_t *p, og_err_t *err);
    /* Binds the page's statement for `tenant_id` (living as long as p) at `call`, with
     * p->limit_s (limit + 1: is there a next page?) as its limit; its rows are page rows
     * (logs/page.h). */
    void (*bind)(og_tenant_page_t *p, og_db_call_t *call, const char *tenant_id);
} og_tenant_page_kind_t;

/* The shared part of a list's request; the kind's struct starts with it. */
struct og_tenant_page {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    const og_tenant_page_kind_t *kind;
    char tenant_id[37]; /* the admin mirror's tenant, from the path */
    int limit;
    char limit_s[12];
};

/* Serves the tenant's page of `kind` to the request's tenant token. */
void og_tenant_page_serve(og_http_req_t *req, void *ctx, const og_tenant_page_kind_t *kind);

/* Serves the page of `kind` of the path's tenant ({id}) to the admin token. */
void og_tenant_page_admin(og_http_req_t *req, const og_route_match_t *m, void *ctx,
                          const og_tenant_page_kind_t *kind);

/* Query parameter `name` of a list into buf: "" when absent; false with `err` (422
 * validation_failed, field `name`: "<name> must be <rule>") when present but empty, malformed or
 * refused by `valid`. */
bool og_tenant_page_filter(const og_http_req_t *req, const char *name, char *buf, size_t cap,
                           bool (*valid)(const char *), const char *rule, og_err_t *err);

/* For an admin route about the path's tenant: the admin token and the id read into `id`, and a
 * database configured; false after answering (401, 404, 503). */
bool og_tenant_page_admin_tenant(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, char id[37]);

#endif
