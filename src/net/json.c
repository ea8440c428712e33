/*
 * Request-body decoding and typed field getters. See include/net/omnigate/json.h.
 *
 * All parsing is jansson's: json_loadb already rejects invalid UTF-8, "\u0000" in strings
 * (no JSON_ALLOW_NUL) and trailing bytes; JSON_REJECT_DUPLICATES adds duplicate keys. What
 * is left here is the Content-Type check, the shape (object, depth) and the key whitelist.
 */
#include "omnigate/json.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "omnigate/api.h"

/* True when the media type of a Content-Type value (before any ';' parameters, without
 * surrounding blanks, any case) is application/json. */
static bool is_json_media_type(const char *ct, size_t len)
{
    const char *semi = memchr(ct, ';', len);
    size_t end = semi != NULL ? (size_t)(semi - ct) : len;
    size_t start = 0;
    while (start < end && (ct[start] == ' ' || ct[start] == '\t'))
        start++;
    while (end > start && (ct[end - 1] == ' ' || ct[end - 1] == '\t'))
        end--;
    static const char want[] = "application/json";
    return end - start == sizeof(want) - 1 && strncasecmp(ct + start, want, sizeof(want) - 1) == 0;
}

int og_json_depth(const json_t *v)
{
    int max = 0;
    if (json_is_object(v)) {
        const char *key;
        json_t *child;
        /* json_object_foreach wants a non-const object; we only read. */
        json_object_foreach((json_t *)v, key, child)
        {
            int d = og_json_depth(child);
            max = d > max ? d : max;
        }
        return max + 1;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *child;
        json_array_foreach(v, i, child)
        {
            int d = og_json_depth(child);
            max = d > max ? d : max;
        }
        return max + 1;
    }
    return 0;
}

static bool key_allowed(const char *const *allowed, const char *key)
{
    for (; *allowed != NULL; allowed++)
        if (strcmp(*allowed, key) == 0)
            return true;
    return false;
}

bool og_json_known_keys(const json_t *obj, const char *const *allowed, const char *path, og_err_t *err)
{
    /* jansson keeps object keys in insertion order, which for a parsed body is the order of the
     * body: the first unknown key the client wrote is the one reported. */
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value)
    {
        if (key_allowed(allowed, key))
            continue;
        char field[sizeof(err->field)];
        snprintf(field, sizeof(field), "%s%s%s", path != NULL ? path : "", path != NULL ? "." : "", key);
        return og_err_fail(err, OG_E_UNKNOWN_FIELD, field, "unknown field \"%s\"", field);
    }
    return true;
}

json_t *og_json_decode(const char *ctype, size_t ctype_len, const char *body, size_t body_len,
                       const char *const *allowed, og_err_t *err)
{
    if (ctype == NULL || !is_json_media_type(ctype, ctype_len)) {
        og_err_fail(err, OG_E_UNSUPPORTED_MEDIA_TYPE, NULL, "Content-Type must be application/json");
        return NULL;
    }
    if (body == NULL || body_len == 0) {
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "request body is empty; a JSON object is required");
        return NULL;
    }
    json_error_t jerr;
    /* JSON_DECODE_ANY: a scalar body gets "must be a JSON object" below rather than a
     * parser message about expecting '[' or '{'. */
    json_t *root = json_loadb(body, body_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "invalid JSON: %s (line %d, column %d, byte %d)", jerr.text,
                    jerr.line, jerr.column, jerr.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "body must be a JSON object");
        goto fail;
    }
    if (og_json_depth(root) > OG_JSON_MAX_DEPTH) {
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "JSON nesting is deeper than %d levels", OG_JSON_MAX_DEPTH);
        goto fail;
    }
    if (allowed != NULL && !og_json_known_keys(root, allowed, NULL, err))
        goto fail;
    return root;
fail:
    json_decref(root);
    return NULL;
}

json_t *og_json_decode_body(const og_http_req_t *req, const char *const *allowed, og_err_t *err)
{
    size_t len = 0;
    const char *ctype = og_http_req_header(req, "content-type", &len);
    return og_json_decode(ctype, len, req->body, req->body_len, allowed, err);
}

/* Looks up `name`; false with validation_failed when it is required and missing. `*v` is NULL when absent. */
static bool lookup(json_t *obj, const char *name, bool required, json_t **v, og_err_t *err)
{
    *v = json_object_get(obj, name);
    if (*v == NULL && required)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s is required", name);
    return true;
}

bool og_json_get_string(json_t *obj, const char *name, bool required, const char **out, og_err_t *err)
{
    json_t *v;
    if (!lookup(obj, name, required, &v, err))
        return false;
    if (v == NULL)
        return true;
    if (!json_is_string(v))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s must be a string", name);
    *out = json_string_value(v);
    return true;
}

bool og_json_get_int(json_t *obj, const char *name, bool required, long long min, long long max,
                     long long *out, og_err_t *err)
{
    json_t *v;
    if (!lookup(obj, name, required, &v, err))
        return false;
    if (v == NULL)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s must be an integer between %lld and %lld",
                           name, min, max);
    *out = json_integer_value(v);
    return true;
}

bool og_json_get_bool(json_t *obj, const char *name, bool required, bool *out, og_err_t *err)
{
    json_t *v;
    if (!lookup(obj, name, required, &v, err))
        return false;
    if (v == NULL)
        return true;
    if (!json_is_boolean(v))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s must be true or false", name);
    *out = json_is_true(v);
    return true;
}
