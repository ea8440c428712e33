/*
 * Answers shared by the routes: what a route says when its database operation failed, and an
 * answer whose data PostgreSQL wrote. Responsible for the mapping (API.md §0) and the log line,
 * so every route says the same.
 */
#ifndef OMNIGATE_APP_ANSWER_H
#define OMNIGATE_APP_ANSWER_H

#include <libpq-fe.h>

#include "omnigate/api.h"
#include "omnigate/db.h"
#include "omnigate/http.h"
#include "omnigate/log.h"

/* Answers `req` for an operation that ended with `st` (not OG_DB_OK): OG_DB_ERROR with a
 * SQLSTATE of a rule the schema checks (class OG: a tenant's rate card in another currency,
 * answer.c lists them) answers that rule's error; any other OG_DB_ERROR (the server refused a
 * statement: a bug or a broken schema, not worth retrying) logs `what` with the request id,
 * sqlstate and error and answers 500 internal_error; OG_DB_UNAVAILABLE answers
 * 503 unavailable with `unavailable` as the message (e.g. "database unavailable: nothing was
 * sent"), which clients retry. */
void og_answer_db_failure(og_http_req_t *req, og_log_t *log, const og_db_op_t *op, og_db_status_t st,
                          const char *what, const char *unavailable);

/* Answers `status` in the envelope (api.h) with `data`, JSON text PostgreSQL made, inserted as
 * is; `err` (or NULL) is the error object of a failure. 503 unavailable when out of memory. */
void og_answer_raw(og_http_req_t *req, int status, const char *message, const char *data,
                   const og_err_t *err);

#endif
