/*
 * Shared answers. See include/product/omnigate/answer.h.
 */
#include "omnigate/answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"

void og_answer_db_failure(og_http_req_t *req, og_log_t *log, const og_db_op_t *op, og_db_status_t st,
                          const char *what, const char *unavailable)
{
    if (st == OG_DB_ERROR) {
        og_log(log, OG_LOG_ERROR, what, "\"requestId\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"",
               req->request_id, op->sqlstate, op->error);
        og_api_error(req, "internal_error", NULL, "database error");
    } else {
        og_api_error(req, "unavailable", NULL, unavailable);
    }
}

void og_answer_page(og_http_req_t *req, const PGresult *r, int limit, const char *message)
{
    int rows = PQntuples(r);
    int shown = rows > limit ? limit : rows;
    const char *cursor = rows > limit ? PQgetvalue(r, shown - 1, 0) : NULL;
    size_t len = strlen(message) + 96 + (cursor ? strlen(cursor) : 0);
    for (int i = 0; i < shown; i++)
        len += (size_t)PQgetlength(r, i, 1) + 1;
    char *body = malloc(len);
    if (body == NULL) {
        og_api_error(req, "unavailable", NULL, "out of memory");
        return;
    }
    size_t n = (size_t)sprintf(body, "{\"success\":true,\"message\":\"%s\",\"data\":{\"items\":[", message);
    for (int i = 0; i < shown; i++) {
        if (i > 0)
            body[n++] = ',';
        size_t k = (size_t)PQgetlength(r, i, 1);
        memcpy(body + n, PQgetvalue(r, i, 1), k);
        n += k;
    }
    n += (size_t)(cursor ? sprintf(body + n, "],\"nextCursor\":\"%s\"}}", cursor)
                         : sprintf(body + n, "],\"nextCursor\":null}}"));
    og_http_respond(req, 200, NULL, 0, "application/json", body, n);
    free(body);
}
