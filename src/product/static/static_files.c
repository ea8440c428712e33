/*
 * The files the gateway serves from its binary (static/static_files.h).
 */
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/static/static_files.h"

void og_static_serve(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const og_asset_t *a = req->route ? og_asset_find(og_assets, req->route, strlen(req->route)) : NULL;
    if (a == NULL) {
        og_api_error(req, OG_E_NOT_FOUND, NULL, "no such page");
        return;
    }
    og_asset_respond(req, a);
}
