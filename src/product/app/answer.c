/*
 * Shared answers. See include/product/omnigate/app/answer.h.
 */
#include "omnigate/app/answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/errors.h"
#include "omnigate/jw.h"

/* The SQLSTATEs the schema raises for a rule of the API (class OG, never PostgreSQL's own), and
 * what each answers. sql/022_rates.sql raises OGC01 and OGC02. */
static const struct {
    const char *sqlstate;
    const og_errcode_t *code;
    const char *field;
    const char *message;
} rule_errors[] = {
    {"OGC01", OG_E_VALIDATION_FAILED, "settings.rates.currency",
     "the tenant's rate card must be in the global rate card's currency (GET /admin/rates)"},
    {"OGC02", OG_E_CONFLICT, "currency",
     "tenants have rate cards (settings.rates) in another currency: change theirs first"},
};

void og_answer_db_failure(og_http_req_t *req, og_log_t *log, const og_db_op_t *op, og_db_status_t st,
                          const char *what, const char *unavailable)
{
    for (size_t i = 0; st == OG_DB_ERROR && i < sizeof(rule_errors) / sizeof(rule_errors[0]); i++) {
        if (strcmp(op->sqlstate, rule_errors[i].sqlstate) == 0) {
            og_api_error(req, rule_errors[i].code, rule_errors[i].field, rule_errors[i].message);
            return;
        }
    }
    if (st == OG_DB_ERROR) {
        og_log(log, OG_LOG_ERROR, what, "\"requestId\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"",
               req->request_id, op->sqlstate, op->error);
        og_api_error(req, OG_E_INTERNAL_ERROR, NULL, "database error");
    } else {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, unavailable);
    }
}

void og_answer_raw(og_http_req_t *req, int status, const char *message, const char *data, const og_err_t *err)
{
    og_jw_t w;
    og_jw_init(&w, strlen(data) + 128);
    og_api_envelope_open(&w, status, message);
    og_jw_raw(&w, data, strlen(data));
    og_api_envelope_close(&w, err);
    size_t len;
    char *text = og_jw_finish(&w, &len);
    if (text == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    og_http_respond(req, status, NULL, 0, "application/json", text, len);
    free(text);
}
