/*
 * Pages of a list, as every list of the API reads them (API.md §4): the `limit` parameter, the
 * refusal of unknown query parameters, and the answer {"items": [...], "nextCursor"} spliced
 * from a statement's (cursor, item JSON) rows. Used by the logs, the webhook deliveries, the
 * admin tenant list and the command line. Responsible for those rules; not for any list's
 * statement or filters.
 */
#ifndef OMNIGATE_LOGS_PAGE_H
#define OMNIGATE_LOGS_PAGE_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "omnigate/error.h"
#include "omnigate/http.h"

#define OG_PAGE_DEFAULT_LIMIT 50
#define OG_PAGE_MAX_LIMIT     500

/* False with `err` (422 validation_failed, field = the name) when the query string has a
 * parameter not in the NULL-terminated `known`. */
bool og_page_check_params(const char *query, size_t len, const char *const *known, og_err_t *err);

/* The `limit` parameter: OG_PAGE_DEFAULT_LIMIT when absent; false with `err` unless it is an
 * integer from 1 to OG_PAGE_MAX_LIMIT. */
bool og_page_limit(const char *query, size_t len, int *limit, og_err_t *err);

/* Answers 200 with a page of a list (the logs, webhook deliveries): {"success": true,
 * "message", "data": {"items": [...], "nextCursor"}}. `r` holds up to limit + 1 page rows
 * (cursor, item JSON text: `-- row page` of sql/queries/logs.sql, OG_PAGE_* of store.h): the
 * items are spliced in as they are, without parsing; with more than
 * `limit` rows, nextCursor is the cursor column of the last item shown, which must need no JSON
 * escaping (a reference, a number), else null. Answers 503 when out of memory. */
void og_page_answer(og_http_req_t *req, const PGresult *r, int limit, const char *message);

/* That answer's body alone (malloc'd, *len its length; NULL when out of memory), for the
 * command line's pages (app/cli.c). */
char *og_page_body(const PGresult *r, int limit, const char *message, size_t *len);

#endif
