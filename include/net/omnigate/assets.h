/*
 * Static files carried in the binary (src/tools/embed_assets.py turns files into a table of
 * og_asset_t at build time): the console's page and scripts, the OpenAPI document.
 * Responsible for finding an asset by its URL path and answering it with its validators and
 * the security headers a page needs; not for which files are embedded (the app's meson list)
 * or for routing (the app's route table names each path).
 */
#ifndef OMNIGATE_ASSETS_H
#define OMNIGATE_ASSETS_H

#include <stddef.h>

#include "omnigate/http.h"

typedef struct og_asset {
    const char *path;          /* URL path, e.g. "/console"; NULL ends a table */
    const char *ctype;         /* Content-Type */
    const char *etag;          /* strong validator, quoted */
    const unsigned char *data; /* followed by a NUL not counted in len */
    size_t len;
} og_asset_t;

/* The asset of `table` (ended by a NULL path) served at exactly path[0..len), or NULL. */
const og_asset_t *og_asset_find(const og_asset_t *table, const char *path, size_t len);

/* Answers `req` with `a`: 200 with the body, or 304 without it when If-None-Match names its
 * ETag; HEAD-free (GET routes only). Headers: ETag, Cache-Control: no-cache (revalidate on
 * every load, so a new binary's page is never mixed with an old script), and for every asset
 * a strict Content-Security-Policy (same origin only, no inline script or style, no framing),
 * X-Content-Type-Options: nosniff and Referrer-Policy: no-referrer. */
void og_asset_respond(og_http_req_t *req, const og_asset_t *a);

#endif
