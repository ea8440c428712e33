/*
 * Request-body decoding on jansson: Content-Type check (unsupported_media_type), strict JSON
 * (invalid_json: syntax, invalid UTF-8, NUL in strings, duplicate keys, nesting deeper than
 * 16, not an object) and unknown-field rejection (unknown_field). Plus typed field getters that
 * produce validation_failed naming the field. Responsible for turning bytes into a validated
 * json_t; not for business rules, nor for the HTTP status of its errors (api.h).
 */
#ifndef OMNIGATE_JSON_H
#define OMNIGATE_JSON_H

#include <stdbool.h>
#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/http.h"

#define OG_JSON_MAX_DEPTH 16

/* Decodes the body of `req` as a JSON object whose keys must all be in `allowed` (a
 * NULL-terminated list; NULL allows any key). Returns a new reference, or NULL with `err`
 * filled (unsupported_media_type, invalid_json, unknown_field). */
json_t *og_json_decode_body(const og_http_req_t *req, const char *const *allowed, og_err_t *err);

/* Same on a raw buffer and Content-Type value (ctype may be NULL: treated as missing). */
json_t *og_json_decode(const char *ctype, size_t ctype_len, const char *body, size_t body_len,
                       const char *const *allowed, og_err_t *err);

/* False with unknown_field in `err` when the object `obj` has a key not in `allowed` (a
 * NULL-terminated list): the first one, named "<path>.<key>" (just the key when `path` is NULL,
 * as for a body), cut to fit err->field. */
bool og_json_known_keys(const json_t *obj, const char *const *allowed, const char *path, og_err_t *err);

/* Depth of a JSON value: scalars 0, [] / {} 1, [[1]] 2, ... */
int og_json_depth(const json_t *v);

/* Typed getters. Each returns true on success. A missing optional field leaves `*out`
 * untouched and returns true; a missing required field or a wrong type returns false with
 * validation_failed naming the field. */
bool og_json_get_string(json_t *obj, const char *name, bool required, const char **out, og_err_t *err);
bool og_json_get_int(json_t *obj, const char *name, bool required, long long min, long long max,
                     long long *out, og_err_t *err);
bool og_json_get_bool(json_t *obj, const char *name, bool required, bool *out, og_err_t *err);

#endif
