/*
 * Router: a static table of (method, pattern, handler). Patterns are literal segments and
 * "{name}" parameters ("/admin/tenants/{id}/tokens/{tokenId}"). Responsible for matching,
 * 404 not_found and 405 method_not_allowed with Allow; not for what handlers do.
 * HEAD is served by the GET route (the HTTP core omits the body).
 */
#ifndef OMNIGATE_ROUTER_H
#define OMNIGATE_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "omnigate/http.h"

#define OG_ROUTE_MAX_PARAMS 4

typedef struct og_route_match og_route_match_t;

typedef void (*og_route_fn)(og_http_req_t *req, const og_route_match_t *m, void *ctx);

typedef struct og_route {
    const char *method; /* "GET", "POST", "PATCH", "DELETE", ... */
    const char *pattern;
    og_route_fn fn;
    size_t max_body; /* largest request body this route accepts; 0: OMNIGATE_MAX_BODY_BYTES */
} og_route_t;

struct og_route_match {
    const og_route_t *route;
    int nparams;
    struct {
        const char *name; /* points into the pattern, not NUL-terminated at the '}' */
        size_t name_len;
        const char *value; /* points into the request path */
        size_t value_len;
    } params[OG_ROUTE_MAX_PARAMS];
};

typedef struct og_router {
    const og_route_t *routes;
    size_t nroutes;
} og_router_t;

typedef enum { OG_ROUTE_FOUND = 0, OG_ROUTE_NOT_FOUND = 404, OG_ROUTE_BAD_METHOD = 405 } og_route_result_t;

/* Matches `method` + `path` (no query). On 405, writes the comma-separated Allow value
 * ("GET, HEAD, POST") into `allow`. Exact segment match; a trailing slash is a different path. */
og_route_result_t og_router_match(const og_router_t *r, const char *method, const char *path, size_t path_len,
                                  og_route_match_t *m, char *allow, size_t allow_len);

/* Matches req, sets req->route (the pattern, or "-"), and calls the handler or answers
 * 404 not_found / 405 method_not_allowed (with Allow) in the JSON envelope. */
void og_router_dispatch(const og_router_t *r, og_http_req_t *req, void *ctx);

/* Copies route parameter `name`, percent-decoded ('+' stays '+'), into `buf` (NUL-terminated);
 * false if absent, too long or malformed (as for og_query_param). */
bool og_route_param(const og_route_match_t *m, const char *name, char *buf, size_t buflen);

/* Finds query parameter `name` in `query` (the part after '?', may be NULL), percent-decodes
 * it ('+' is a space) into `buf` (NUL-terminated). Returns the decoded length, -1 when the
 * parameter is absent, -2 when malformed (bad %xx, decodes to NUL or to invalid UTF-8) or longer than
 * buflen-1. Repeated parameters: the first wins. */
int og_query_param(const char *query, size_t query_len, const char *name, char *buf, size_t buflen);

/* One name=value pair of an application/x-www-form-urlencoded string (a query string or a
 * form body), still encoded: key and value point into the string. */
typedef struct og_form_pair {
    const char *key;
    size_t key_len;
    const char *value; /* NULL for a bare "name" without '=' */
    size_t value_len;
} og_form_pair_t;

/* The pair after s[*pos..len) (empty pairs skipped), advancing *pos; false at the end. */
bool og_form_next(const char *s, size_t len, size_t *pos, og_form_pair_t *p);

/* Percent-decodes s[0..n) as a form value ('+' is a space) into out (NUL-terminated). Returns
 * the length, or -2 on a bad escape, a decoded NUL, invalid UTF-8 or no room. */
int og_form_decode(const char *s, size_t n, char *out, size_t outlen);

#endif
