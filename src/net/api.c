/*
 * JSON envelope and error answers. See include/net/omnigate/api.h.
 *
 * The envelope is built by one pure function (og_api_envelope) so it can be tested without a
 * connection; the senders only add headers and hand the text to og_http_respond.
 */
#include "omnigate/api.h"

#include "omnigate/jw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What is sent when the envelope itself cannot be built (out of memory). */
static const char oom_body[] = "{\"success\":false,\"message\":\"out of memory\",\"data\":null,"
                               "\"error\":{\"code\":\"unavailable\"}}";

OG_API_ERRCODES(OG_ERRCODE_DEFINE)

int og_api_status(const og_errcode_t *code)
{
    return code != NULL ? code->status : 500;
}

/* The name sent for `err`'s code: internal_error for an error recorded without one (a bug),
 * which og_api_status answers with 500. */
static const char *code_name(const og_err_t *err)
{
    return (err->code != NULL ? err->code : OG_E_INTERNAL_ERROR)->name;
}

/* A JSON string for `s`. Messages may quote client input (a JSON parser's "near '...'"), and
 * jansson refuses invalid UTF-8, so such a message is sent with its non-ASCII bytes replaced
 * rather than dropped. */
static json_t *message_string(const char *s)
{
    if (s == NULL)
        return json_string("");
    json_t *v = json_string(s);
    if (v != NULL)
        return v;
    char *copy = strdup(s);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    v = json_string(copy);
    free(copy);
    return v;
}

char *og_api_envelope(int status, const char *message, json_t *data, const og_err_t *err, json_t *details,
                      size_t *len)
{
    char *out = NULL;
    json_t *error = NULL;
    json_t *env = json_object();
    if (env == NULL)
        goto done;
    if (json_object_set_new(env, "success", json_boolean(status < 400)) != 0 ||
        json_object_set_new(env, "message", message_string(message)) != 0)
        goto done;
    /* set_new steals data even when it fails. */
    int rc = json_object_set_new(env, "data", data != NULL ? data : json_null());
    data = NULL;
    if (rc != 0)
        goto done;
    if (err != NULL) {
        error = json_object();
        if (error == NULL || json_object_set_new(error, "code", json_string(code_name(err))) != 0)
            goto done;
        if (err->field[0] != '\0' && json_object_set_new(error, "field", message_string(err->field)) != 0)
            goto done;
        if (details != NULL) {
            rc = json_object_set_new(error, "details", details);
            details = NULL;
            if (rc != 0)
                goto done;
        }
        rc = json_object_set_new(env, "error", error);
        error = NULL;
        if (rc != 0)
            goto done;
    }
    out = json_dumps(env, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (out != NULL && len != NULL)
        *len = strlen(out);
done:
    json_decref(error);
    json_decref(details);
    json_decref(data);
    json_decref(env);
    return out;
}

void og_api_envelope_open(og_jw_t *w, int status, const char *message)
{
    og_jw_object(w);
    og_jw_key(w, "success");
    og_jw_bool(w, status < 400);
    /* message_string's rule for bytes that are not UTF-8 is U+FFFD here: still valid JSON. */
    og_jw_kstring(w, "message", message != NULL ? message : "");
    og_jw_key(w, "data");
}

void og_api_envelope_close(og_jw_t *w, const og_err_t *err)
{
    if (err != NULL) {
        og_jw_key(w, "error");
        og_jw_object(w);
        og_jw_kstring(w, "code", code_name(err));
        if (err->field[0] != '\0')
            og_jw_kstring(w, "field", err->field);
        og_jw_object_end(w);
    }
    og_jw_object_end(w);
}

static bool has_header(const og_http_header_t *h, size_t n, const char *name)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (h[i].name_len == nlen && strncasecmp(h[i].name, name, nlen) == 0)
            return true;
    return false;
}

static og_http_header_t header(const char *name, const char *value)
{
    return (og_http_header_t){name, strlen(name), value, strlen(value)};
}

size_t og_api_error_headers(int status, const og_http_header_t *extra, size_t nextra, og_http_header_t *out,
                            size_t outcap)
{
    og_http_header_t need[2];
    size_t nneed = 0;
    if (status == 401 && !has_header(extra, nextra, "WWW-Authenticate"))
        need[nneed++] = header("WWW-Authenticate", "Bearer");
    if (status == 503 && !has_header(extra, nextra, "Retry-After"))
        need[nneed++] = header("Retry-After", "1");
    if (nneed > outcap)
        nneed = outcap;
    /* The headers the status requires take precedence over surplus extra ones. */
    size_t n = nextra < outcap - nneed ? nextra : outcap - nneed;
    if (n > 0)
        memcpy(out, extra, n * sizeof(*out));
    for (size_t i = 0; i < nneed; i++)
        out[n++] = need[i];
    return n;
}

static void send_envelope(og_http_req_t *req, int status, char *body, size_t len,
                          const og_http_header_t *hdrs, size_t nhdrs)
{
    if (body == NULL) {
        og_http_header_t retry = header("Retry-After", "1");
        og_http_respond(req, 503, &retry, 1, "application/json", oom_body, sizeof(oom_body) - 1);
        return;
    }
    og_http_respond(req, status, hdrs, nhdrs, "application/json", body, len);
    free(body);
}

void og_api_reply(og_http_req_t *req, int status, const char *message, json_t *data,
                  const og_http_header_t *extra, size_t nextra)
{
    size_t len = 0;
    char *body = og_api_envelope(status, message, data, NULL, NULL, &len);
    send_envelope(req, status, body, len, extra, nextra < OG_API_MAX_HEADERS ? nextra : OG_API_MAX_HEADERS);
}

void og_api_send_error(og_http_req_t *req, const og_err_t *err, json_t *details, json_t *data,
                       const og_http_header_t *extra, size_t nextra)
{
    int status = og_api_status(err->code);
    og_http_header_t hdrs[OG_API_MAX_HEADERS];
    size_t nhdrs = og_api_error_headers(status, extra, nextra, hdrs, OG_API_MAX_HEADERS);
    size_t len = 0;
    char *body = og_api_envelope(status, err->message, data, err, details, &len);
    send_envelope(req, status, body, len, hdrs, nhdrs);
}

void og_api_error(og_http_req_t *req, const og_errcode_t *code, const char *field, const char *message)
{
    og_err_t err;
    og_err_fail(&err, code, field, "%s", message != NULL ? message : "");
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}
