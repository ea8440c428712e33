/*
 * The files the gateway serves from its binary (pages.h).
 */
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/pages.h"

void og_pages_serve(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const og_asset_t *a = req->route ? og_asset_find(og_assets, req->route, strlen(req->route)) : NULL;
    if (a == NULL) {
        og_api_error(req, "not_found", NULL, "no such page");
        return;
    }
    og_asset_respond(req, a);
}
