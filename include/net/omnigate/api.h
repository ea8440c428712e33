/*
 * API conventions of API.md §0: the JSON envelope {"success","message","data"[,"error"]}
 * and the error answers. Responsible for shaping and sending JSON answers, and for the one
 * table that gives each error code (error.h) its HTTP status; not for deciding which answer
 * a request gets (handlers) or for HTTP framing (http.h).
 */
#ifndef OMNIGATE_API_H
#define OMNIGATE_API_H

#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/http.h"

/* The HTTP status of an error code: the table of API.md §0 plus the codes of §2-§6. 500 for
 * NULL or a code the table does not know (a bug: a code must be added to the table). */
int og_api_status(const char *code);

/* Sends {"success": status < 400, "message": message, "data": data or null}.
 * Steals the reference to `data` (may be NULL). `extra` headers are added as given. */
void og_api_reply(og_http_req_t *req, int status, const char *message, json_t *data,
                  const og_http_header_t *extra, size_t nextra);

/* Sends the failure envelope for `err` with the status og_api_status gives its code, and
 * "error": {"code", "field"?, "details"?}. Steals `details` and `data` (either may be NULL).
 * Adds the headers the status needs: 401 -> WWW-Authenticate: Bearer; 503 -> Retry-After: 1
 * unless `extra` has one. */
void og_api_send_error(og_http_req_t *req, const og_err_t *err, json_t *details, json_t *data,
                       const og_http_header_t *extra, size_t nextra);

/* Shorthand: og_err_fail + og_api_send_error with no details, data or extra headers. */
void og_api_error(og_http_req_t *req, const char *code, const char *field, const char *message);

/* Most headers og_api_reply / og_api_send_error send besides the ones og_http_respond adds;
 * extra headers beyond this are dropped. */
#define OG_API_MAX_HEADERS 8

/* Builds the envelope text the two senders send (for tests and non-HTTP callers): with `err`
 * NULL the success/reply shape, else the failure shape with "error". Steals `data` and
 * `details` (either may be NULL). Returns malloc'd compact JSON (free with free()) and its
 * length in `*len`, or NULL when out of memory. */
char *og_api_envelope(int status, const char *message, json_t *data, const og_err_t *err, json_t *details,
                      size_t *len);

/* The envelope written straight into `w` (jw.h) around a data object the caller writes
 * between the two calls, for the hot paths that build no tree: og_api_envelope_open writes
 * {"success","message","data": and og_api_envelope_close the "error" object of `err` (when
 * not NULL: code and field) and the closing brace. The same text as og_api_envelope. */
struct og_jw;
void og_api_envelope_open(struct og_jw *w, int status, const char *message);
void og_api_envelope_close(struct og_jw *w, const og_err_t *err);

/* Fills `out` (room for `outcap`) with `extra` plus the headers an error `status` needs
 * (401: WWW-Authenticate: Bearer; 503: Retry-After: 1 unless `extra` has a Retry-After, in
 * any case). Returns the number written. */
size_t og_api_error_headers(int status, const og_http_header_t *extra, size_t nextra, og_http_header_t *out,
                            size_t outcap);

#endif
