/*
 * Router and URL decoding. See include/net/omnigate/router.h.
 *
 * Routes are tried in table order and the first whose pattern and method match wins, so a
 * literal route that must beat a parameter route ("/x/new" before "/x/{id}") comes first.
 */
#include "omnigate/router.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "omnigate/api.h"

#define MAX_ALLOW 16

/* Matches one pattern against the path, recording parameters in `m`. */
static bool match_pattern(const char *pat, const char *path, size_t path_len, og_route_match_t *m)
{
    size_t pi = 0;
    const char *p = pat;
    m->nparams = 0;
    while (*p != '\0') {
        if (*p != '/' || pi >= path_len || path[pi] != '/')
            return false;
        p++;
        pi++;
        const char *pend = strchr(p, '/');
        if (pend == NULL)
            pend = p + strlen(p);
        size_t plen = (size_t)(pend - p);
        size_t seg = pi;
        while (pi < path_len && path[pi] != '/')
            pi++;
        size_t seglen = pi - seg;
        if (plen >= 2 && p[0] == '{' && p[plen - 1] == '}') {
            if (seglen == 0 || m->nparams >= OG_ROUTE_MAX_PARAMS)
                return false;
            m->params[m->nparams].name = p + 1;
            m->params[m->nparams].name_len = plen - 2;
            m->params[m->nparams].value = path + seg;
            m->params[m->nparams].value_len = seglen;
            m->nparams++;
        } else if (plen != seglen || memcmp(p, path + seg, plen) != 0) {
            return false;
        }
        p = pend;
    }
    return pi == path_len;
}

static void allow_add(const char **list, size_t *n, const char *method)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(list[i], method) == 0)
            return;
    if (*n < MAX_ALLOW)
        list[(*n)++] = method;
}

/* Joins the methods with ", ", stopping before a method that does not fit. */
static void allow_format(const char **list, size_t n, char *out, size_t outlen)
{
    size_t len = 0;
    if (outlen == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t need = strlen(list[i]) + (len ? 2 : 0);
        if (len + need >= outlen)
            break;
        len += (size_t)snprintf(out + len, outlen - len, "%s%s", len ? ", " : "", list[i]);
    }
}

og_route_result_t og_router_match(const og_router_t *r, const char *method, const char *path, size_t path_len,
                                  og_route_match_t *m, char *allow, size_t allow_len)
{
    const char *methods[MAX_ALLOW];
    size_t nmethods = 0;
    bool head = strcmp(method, "HEAD") == 0;
    og_route_match_t tmp;

    m->route = NULL;
    m->nparams = 0;
    for (size_t i = 0; i < r->nroutes; i++) {
        const og_route_t *rt = &r->routes[i];
        if (!match_pattern(rt->pattern, path, path_len, &tmp))
            continue;
        if (strcmp(rt->method, method) == 0 || (head && strcmp(rt->method, "GET") == 0)) {
            *m = tmp;
            m->route = rt;
            return OG_ROUTE_FOUND;
        }
        allow_add(methods, &nmethods, rt->method);
        if (strcmp(rt->method, "GET") == 0)
            allow_add(methods, &nmethods, "HEAD");
    }
    if (nmethods == 0)
        return OG_ROUTE_NOT_FOUND;
    if (allow != NULL)
        allow_format(methods, nmethods, allow, allow_len);
    return OG_ROUTE_BAD_METHOD;
}

void og_router_dispatch(const og_router_t *r, og_http_req_t *req, void *ctx)
{
    og_route_match_t m;
    char allow[128];
    const char *method = req->method_str != NULL ? req->method_str : "";
    switch (og_router_match(r, method, req->path, req->path_len, &m, allow, sizeof(allow))) {
    case OG_ROUTE_FOUND:
        req->route = m.route->pattern;
        req->route_index = (int)(m.route - r->routes);
        m.route->fn(req, &m, ctx);
        return;
    case OG_ROUTE_BAD_METHOD: {
        req->route = "-";
        og_err_t err;
        og_err_fail(&err, OG_E_METHOD_NOT_ALLOWED, NULL, "method %s is not allowed here; allowed: %s", method,
                    allow);
        og_http_header_t h = {"Allow", 5, allow, strlen(allow)};
        og_api_send_error(req, &err, NULL, NULL, &h, 1);
        return;
    }
    case OG_ROUTE_NOT_FOUND:
        break;
    }
    req->route = "-";
    og_api_error(req, OG_E_NOT_FOUND, NULL, "no such route");
}

/* Valid UTF-8 per RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into out (NUL-terminated); `plus` turns '+' into a space (query
 * strings). Returns the length, or -2 on a bad escape, a decoded NUL, invalid UTF-8 or a
 * result that does not fit in outlen - 1. */
static int pct_decode(const char *s, size_t n, bool plus, char *out, size_t outlen)
{
    size_t o = 0;
    if (outlen == 0)
        return -2;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (n - i < 3)
                return -2;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -2;
            c = (char)(h * 16 + l);
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == '\0' || o + 1 >= outlen)
            return -2;
        out[o++] = c;
    }
    out[o] = '\0';
    if (!utf8_valid((const unsigned char *)out, o) || o > (size_t)INT_MAX)
        return -2;
    return (int)o;
}

bool og_route_param(const og_route_match_t *m, const char *name, char *buf, size_t buflen)
{
    size_t nlen = strlen(name);
    for (int i = 0; i < m->nparams; i++) {
        if (m->params[i].name_len == nlen && memcmp(m->params[i].name, name, nlen) == 0)
            return pct_decode(m->params[i].value, m->params[i].value_len, false, buf, buflen) >= 0;
    }
    return false;
}

bool og_form_next(const char *s, size_t len, size_t *pos, og_form_pair_t *p)
{
    while (s != NULL && *pos < len) {
        const char *pair = s + *pos;
        const char *amp = memchr(pair, '&', len - *pos);
        size_t plen = amp != NULL ? (size_t)(amp - pair) : len - *pos;
        *pos += plen + 1;
        if (plen == 0)
            continue;
        const char *eq = memchr(pair, '=', plen);
        p->key = pair;
        p->key_len = eq != NULL ? (size_t)(eq - pair) : plen;
        p->value = eq != NULL ? eq + 1 : NULL;
        p->value_len = eq != NULL ? plen - p->key_len - 1 : 0;
        return true;
    }
    return false;
}

int og_form_decode(const char *s, size_t n, char *out, size_t outlen)
{
    return pct_decode(s, n, true, out, outlen);
}

int og_query_param(const char *query, size_t query_len, const char *name, char *buf, size_t buflen)
{
    char key[256];
    size_t pos = 0;
    og_form_pair_t p;
    while (og_form_next(query, query_len, &pos, &p)) {
        /* A key that does not decode cannot be the one asked for. */
        if (pct_decode(p.key, p.key_len, true, key, sizeof(key)) < 0 || strcmp(key, name) != 0)
            continue;
        if (p.value == NULL) {
            if (buflen == 0)
                return -2;
            buf[0] = '\0';
            return 0;
        }
        return pct_decode(p.value, p.value_len, true, buf, buflen);
    }
    return -1;
}
