/*
 * Pages of a list. See include/product/omnigate/logs/page.h.
 */
#include "omnigate/logs/page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/router.h"
#include "omnigate/store.h"

bool og_page_check_params(const char *q, size_t len, const char *const *known, og_err_t *err)
{
    /* Unknown parameters are refused like unknown body fields: a typo must not widen a query. */
    size_t left = q ? len : 0;
    while (left > 0) {
        size_t n = 0;
        while (n < left && q[n] != '&')
            n++;
        size_t k = 0;
        while (k < n && q[k] != '=')
            k++;
        if (k > 0) {
            bool ok = false;
            for (const char *const *name = known; *name && !ok; name++)
                ok = strlen(*name) == k && memcmp(*name, q, k) == 0;
            if (!ok) {
                char name[64];
                snprintf(name, sizeof(name), "%.*s", (int)(k < 60 ? k : 60), q);
                return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "unknown query parameter %s", name);
            }
        }
        q += n;
        left -= n;
        if (left > 0) {
            q++;
            left--;
        }
    }
    return true;
}

bool og_page_limit(const char *query, size_t len, int *limit, og_err_t *err)
{
    char buf[64];
    int n = og_query_param(query, len, "limit", buf, sizeof(buf));
    *limit = OG_PAGE_DEFAULT_LIMIT;
    if (n == -1)
        return true;
    char *end = NULL;
    long v = n > 0 ? strtol(buf, &end, 10) : 0;
    if (n <= 0 || *end != '\0' || buf[0] == '+' || buf[0] == '-' || v < 1 || v > OG_PAGE_MAX_LIMIT)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "limit", "limit must be an integer from 1 to %d",
                           OG_PAGE_MAX_LIMIT);
    *limit = (int)v;
    return true;
}

char *og_page_body(const PGresult *r, int limit, const char *message, size_t *len_out)
{
    int rows = PQntuples(r);
    int shown = rows > limit ? limit : rows;
    const char *cursor = rows > limit ? PQgetvalue(r, shown - 1, OG_PAGE_CURSOR) : NULL;
    size_t len = strlen(message) + 96 + (cursor ? strlen(cursor) : 0);
    for (int i = 0; i < shown; i++)
        len += (size_t)PQgetlength(r, i, OG_PAGE_ITEM) + 1;
    char *body = malloc(len);
    if (body == NULL)
        return NULL;
    size_t n = (size_t)sprintf(body, "{\"success\":true,\"message\":\"%s\",\"data\":{\"items\":[", message);
    for (int i = 0; i < shown; i++) {
        if (i > 0)
            body[n++] = ',';
        size_t k = (size_t)PQgetlength(r, i, OG_PAGE_ITEM);
        memcpy(body + n, PQgetvalue(r, i, OG_PAGE_ITEM), k);
        n += k;
    }
    n += (size_t)(cursor ? sprintf(body + n, "],\"nextCursor\":\"%s\"}}", cursor)
                         : sprintf(body + n, "],\"nextCursor\":null}}"));
    *len_out = n;
    return body;
}

void og_page_answer(og_http_req_t *req, const PGresult *r, int limit, const char *message)
{
    size_t n = 0;
    char *body = og_page_body(r, limit, message, &n);
    if (body == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    og_http_respond(req, 200, NULL, 0, "application/json", body, n);
    free(body);
}
