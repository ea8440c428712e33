/*
 * The files the gateway serves from its binary (the console, the OpenAPI document): the
 * table src/tools/embed_assets.py generates from the list in src/meson.build, and the route
 * handler that answers them. A route table names each path with og_static_serve.
 */
#ifndef OMNIGATE_STATIC_STATIC_FILES_H
#define OMNIGATE_STATIC_STATIC_FILES_H

#include "omnigate/assets.h"
#include "omnigate/router.h"

extern const og_asset_t og_assets[];
extern const size_t og_assets_count;

/* Answers the embedded file whose URL path is the matched route's pattern; 404 not_found if
 * none is (a route without its file: a build list and route table out of step). */
void og_static_serve(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
