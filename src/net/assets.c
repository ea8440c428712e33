/*
 * Static files carried in the binary: lookup by URL path and the answer (assets.h).
 */
#include <string.h>

#include "omnigate/assets.h"

/* Everything from this origin only; nothing inline, no plugins, no framing, no forms posted
 * elsewhere. connect-src covers the page's fetch() calls to the API. */
#define OG_ASSET_CSP                                                                                         \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "          \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const og_asset_t *og_asset_find(const og_asset_t *table, const char *path, size_t len)
{
    for (const og_asset_t *a = table; a->path != NULL; a++)
        if (strlen(a->path) == len && memcmp(a->path, path, len) == 0)
            return a;
    return NULL;
}

/* True when the If-None-Match header lists `etag` (or is "*"). */
static int etag_matches(const og_http_req_t *req, const char *etag)
{
    size_t len = 0;
    const char *v = og_http_req_header(req, "if-none-match", &len);
    if (v == NULL)
        return 0;
    size_t elen = strlen(etag);
    for (size_t i = 0; i < len;) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < len && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        const char *t = v + start;
        size_t tlen = end - start;
        if (tlen >= 2 && t[0] == 'W' && t[1] == '/') { /* weak comparison (RFC 9110 13.1.2) */
            t += 2;
            tlen -= 2;
        }
        if ((tlen == 1 && t[0] == '*') || (tlen == elen && memcmp(t, etag, elen) == 0))
            return 1;
    }
    return 0;
}

void og_asset_respond(og_http_req_t *req, const og_asset_t *a)
{
    const og_http_header_t h[] = {
        {"ETag", 4, a->etag, strlen(a->etag)},
        {"Cache-Control", 13, "no-cache", 8},
        {"Content-Security-Policy", 23, OG_ASSET_CSP, sizeof(OG_ASSET_CSP) - 1},
        {"X-Content-Type-Options", 22, "nosniff", 7},
        {"Referrer-Policy", 15, "no-referrer", 11},
    };
    if (etag_matches(req, a->etag))
        og_http_respond(req, 304, h, sizeof(h) / sizeof(h[0]), NULL, NULL, 0);
    else
        og_http_respond(req, 200, h, sizeof(h) / sizeof(h[0]), a->ctype, (const char *)a->data, a->len);
}
