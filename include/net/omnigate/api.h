/*
 * API conventions of API.md §0: the JSON envelope {"success","message","data"[,"error"]}
 * and the error answers. Responsible for shaping and sending JSON answers, for what an error
 * code is (struct og_errcode: its name and HTTP status) and for the codes the HTTP core itself
 * answers (OG_API_ERRCODES below); not for the product's codes (omnigate/app/errors.h) or the
 * simulator's (test/sim/sim.h), for deciding which answer a request gets (handlers) or for HTTP
 * framing (http.h).
 */
#ifndef OMNIGATE_API_H
#define OMNIGATE_API_H

#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/http.h"

/* An error code: the snake_case name sent as error.code and the HTTP status it answers with.
 * Each code is one constant object, written once in its owner's X-macro list as
 * X(symbol, name, status) and declared with OG_ERRCODE_EXTERN in the owner's header, defined
 * with OG_ERRCODE_DEFINE in its .c. A symbol is an array of one, so it is passed without `&`;
 * codes are compared by address, never by name. src/tools/errcodes.py reads the lists for the
 * OpenAPI document and its checks. */
struct og_errcode {
    const char *name;
    int status;
};

#define OG_ERRCODE_EXTERN(sym, name, status) extern const og_errcode_t sym[1];
#define OG_ERRCODE_DEFINE(sym, name, status) const og_errcode_t sym[1] = {{name, status}};

/* The codes the HTTP core answers: its JSON bodies (json.h), the router (router.h), the
 * operations routes (ops.h), and the answers the connection core gives itself (http_conn.c:
 * bad_request, request_timeout, payload_too_large and headers_too_large, by these symbols).
 * internal_error is also what an error recorded without a code answers. */
#define OG_API_ERRCODES(X)                                                                                   \
    X(OG_E_INVALID_JSON, "invalid_json", 400)                                                                \
    X(OG_E_BAD_REQUEST, "bad_request", 400)                                                                  \
    X(OG_E_NOT_FOUND, "not_found", 404)                                                                      \
    X(OG_E_METHOD_NOT_ALLOWED, "method_not_allowed", 405)                                                    \
    X(OG_E_REQUEST_TIMEOUT, "request_timeout", 408)                                                          \
    X(OG_E_PAYLOAD_TOO_LARGE, "payload_too_large", 413)                                                      \
    X(OG_E_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", 415)                                            \
    X(OG_E_VALIDATION_FAILED, "validation_failed", 422)                                                      \
    X(OG_E_UNKNOWN_FIELD, "unknown_field", 422)                                                              \
    X(OG_E_HEADERS_TOO_LARGE, "headers_too_large", 431)                                                      \
    X(OG_E_INTERNAL_ERROR, "internal_error", 500)                                                            \
    X(OG_E_UNAVAILABLE, "unavailable", 503)
OG_API_ERRCODES(OG_ERRCODE_EXTERN)

/* The HTTP status of an error code: its own, or 500 for NULL (an error never recorded: a bug). */
int og_api_status(const og_errcode_t *code);

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
void og_api_error(og_http_req_t *req, const og_errcode_t *code, const char *field, const char *message);

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
