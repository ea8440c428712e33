/*
 * Answers shared by the routes: what a route says when its database operation failed.
 * Responsible for the mapping (API.md §0) and the log line, so every route says the same.
 */
#ifndef OMNIGATE_ANSWER_H
#define OMNIGATE_ANSWER_H

#include <libpq-fe.h>

#include "omnigate/db.h"
#include "omnigate/http.h"
#include "omnigate/log.h"

/* Answers `req` for an operation that ended with `st` (not OG_DB_OK): OG_DB_ERROR (the server
 * refused a statement: a bug or a broken schema, not worth retrying) logs `what` with the
 * request id, sqlstate and error and answers 500 internal_error; OG_DB_UNAVAILABLE answers
 * 503 unavailable with `unavailable` as the message (e.g. "database unavailable: nothing was
 * sent"), which clients retry. */
void og_answer_db_failure(og_http_req_t *req, og_log_t *log, const og_db_op_t *op, og_db_status_t st,
                          const char *what, const char *unavailable);

/* Answers 200 with a page of a list (the logs, webhook deliveries): {"success": true,
 * "message", "data": {"items": [...], "nextCursor"}}. `r` holds up to limit + 1 rows of (cursor,
 * item JSON text): the items are spliced in as they are, without parsing; with more than
 * `limit` rows, nextCursor is the cursor column of the last item shown, which must need no JSON
 * escaping (a reference, a number), else null. Answers 503 when out of memory. */
void og_answer_page(og_http_req_t *req, const PGresult *r, int limit, const char *message);

#endif
