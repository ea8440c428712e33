/*
 * Shared answers. See include/product/omnigate/app/answer.h.
 */
#include "omnigate/app/answer.h"

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
        og_api_error(req, OG_E_INTERNAL_ERROR, NULL, "database error");
    } else {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, unavailable);
    }
}
