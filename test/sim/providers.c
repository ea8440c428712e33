/*
 * The three provider endpoints of omnigate-sim, in each provider's own wire format (API.md §8,
 * README.md). Each endpoint finds the recipient, records the request, asks for the plan and
 * prepares the answer in order: transport failures first (they ignore the request), then the
 * provider's credential check, then its body validation, then the sender's rate limit (limits.c),
 * then the planned behaviour. An accepted message's answer carries the status callbacks its plan
 * scripts (callbacks.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "sim.h"
#include "omnigate/smsenc.h"

#define JSON_CTYPE "application/json"
#define CTYPE_UTF8 "application/json; charset=utf-8"

static const char B62[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* ---- helpers ------------------------------------------------------------------------------ */

/* Sets a JSON answer, taking the reference to `v` (NULL gives an empty body). */
static void answer_json(sim_answer_t *a, int status, const char *ctype, json_t *v)
{
    char *body = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    sim_answer_set(a, status, ctype, body, body != NULL ? strlen(body) : 0);
}

/* A printf-formatted, malloc'd string; its length in *len. NULL when out of memory. */
static char *format(size_t *len, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static char *format(size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (out == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *len = (size_t)n;
    return out;
}

/* 200 with a body no JSON parser accepts, under a Content-Type that claims JSON: a proxy's
 * default page. A client must not trust the header. */
static int garbage_answer(sim_answer_t *a)
{
    static const char page[] =
        "<html><body><h1>It works!</h1><p>upstream: default backend</p></body></html>\n";
    char *b = malloc(sizeof(page));
    if (b != NULL)
        memcpy(b, page, sizeof(page));
    sim_answer_set(a, 200, JSON_CTYPE, b, sizeof(page) - 1);
    return SIM_GARBAGE;
}

/* `s` is digits after an optional '+', 1 to 20 of them: the digits into out. */
static bool phone_digits(const char *s, size_t len, char out[24])
{
    size_t skip = len > 0 && s[0] == '+' ? 1 : 0;
    size_t n = len - skip;
    if (n == 0 || n > 20)
        return false;
    for (size_t k = 0; k < n; k++) {
        char c = s[skip + k];
        if (c < '0' || c > '9')
            return false;
        out[k] = c;
    }
    out[n] = '\0';
    return true;
}

static size_t utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

static void base64_encode(const unsigned char *in, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 (padding required) into out (NUL-terminated); -1 when malformed or too long. */
static int base64_decode(const char *in, size_t len, char *out, size_t outcap)
{
    if (len % 4 != 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            bool pad = in[i + k] == '=' && i + 4 == len && k >= 2 && (k == 3 || in[i + 3] == '=');
            v[k] = pad ? 0 : b64_value(in[i + k]);
            if (v[k] < 0)
                return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        int n = in[i + 2] == '=' ? 1 : in[i + 3] == '=' ? 2 : 3;
        if (o + (size_t)n >= outcap)
            return -1;
        out[o++] = (char)(w >> 16);
        if (n > 1)
            out[o++] = (char)(w >> 8);
        if (n > 2)
            out[o++] = (char)w;
    }
    out[o] = '\0';
    return (int)o;
}

/* ---- Meta WhatsApp Cloud API -------------------------------------------------------------- */

#define META_TOKEN_PREFIX "EAAG"
#define META_EXPIRED                                                                                         \
    "Error validating access token: Session has expired on Friday, 01-Nov-24 04:00:00 PDT. The current "     \
    "time is later."

/* Meta's words for 131050, a recipient who stopped the business's marketing messages. */
#define META_OPTED_OUT                                                                                       \
    "Unable to deliver the message. This recipient has chosen to stop receiving marketing messages on "      \
    "WhatsApp from your business."

/* {"error":{"message","type","code"[,"error_data"][,"error_subcode"],"fbtrace_id"}} */
static void meta_error(sim_t *s, sim_answer_t *a, int status, int code, int subcode, const char *message,
                       const char *details)
{
    char trace[24];
    sim_rand_chars(s, trace, 23, B62);
    json_t *err = json_pack("{s:s, s:s, s:i}", "message", message, "type", "OAuthException", "code", code);
    if (err != NULL && details != NULL)
        json_object_set_new(err, "error_data",
                            json_pack("{s:s, s:s}", "messaging_product", "whatsapp", "details", details));
    if (err != NULL && subcode != 0)
        json_object_set_new(err, "error_subcode", json_integer(subcode));
    if (err != NULL)
        json_object_set_new(err, "fbtrace_id", json_string(trace));
    answer_json(a, status, CTYPE_UTF8, err != NULL ? json_pack("{s:o}", "error", err) : NULL);
    if (status == 401)
        sim_answer_header(a, "WWW-Authenticate",
                          "OAuth \"Facebook Platform\" \"invalid_token\" \"" META_EXPIRED "\"");
}

/* Meta's answer to a number over its throughput: the throttle behaviour's and the rate limit's.
 * Graph sends no Retry-After with it (README.md: Rate limits per sender). */
static void meta_throttled(sim_t *s, sim_answer_t *a)
{
    meta_error(s, a, 429, 130429, 0, "(#130429) Rate limit hit",
               "Cloud API message throughput has been reached.");
}

static bool meta_token_ok(const og_http_req_t *req)
{
    size_t len;
    const char *v = og_http_req_header(req, "authorization", &len);
    size_t plen = sizeof("Bearer ") - 1, tlen = sizeof(META_TOKEN_PREFIX) - 1;
    return v != NULL && len > plen + tlen && strncasecmp(v, "Bearer ", plen) == 0 &&
           memcmp(v + plen, META_TOKEN_PREFIX, tlen) == 0;
}

/* ---- Meta: template sends ----------------------------------------------------------------- */

/* The button position of a send's button component: "0" to "9" (Meta also takes a number), or -1. */
static int button_index(const json_t *c)
{
    json_t *v = json_object_get(c, "index");
    const char *str = json_string_value(v);
    if (str != NULL)
        return str[0] >= '0' && str[0] <= '9' && str[1] == '\0' ? str[0] - '0' : -1;
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : -1;
    return n >= 0 && n < SIM_TEMPLATE_BUTTONS_MAX ? (int)n : -1;
}

/* What is wrong with parameter k of component i (of type `type`), in Meta's words, or NULL. */
static const char *template_param_invalid(const json_t *p, size_t i, size_t k, const char *type, char *buf,
                                          size_t buflen)
{
    const char *ptype = json_string_value(json_object_get(p, "type"));
    json_t *name = json_object_get(p, "parameter_name");
    if (strcmp(type, "button") == 0) {
        bool text = ptype != NULL && strcmp(ptype, "text") == 0 && json_is_string(json_object_get(p, "text"));
        bool payload =
            ptype != NULL && strcmp(ptype, "payload") == 0 && json_is_string(json_object_get(p, "payload"));
        if (!text && !payload)
            snprintf(buf, buflen,
                     "Param template['components'][%zu]['parameters'][%zu] must be {type: text, text} or "
                     "{type: payload, payload}.",
                     i, k);
        return text || payload ? NULL : buf;
    }
    if (ptype == NULL || (strcmp(type, "body") == 0 && strcmp(ptype, "text") != 0)) {
        snprintf(buf, buflen, "Param template['components'][%zu]['parameters'][%zu]['type'] must be %s.", i,
                 k,
                 strcmp(type, "body") == 0 ? "'text' (the simulator takes text body parameters only)"
                                           : "a parameter type");
        return buf;
    }
    if (strcmp(ptype, "text") == 0 && !json_is_string(json_object_get(p, "text"))) {
        snprintf(buf, buflen,
                 "The parameter template['components'][%zu]['parameters'][%zu]['text'] is required.", i, k);
        return buf;
    }
    if (name != NULL && !json_is_string(name)) {
        snprintf(buf, buflen,
                 "Param template['components'][%zu]['parameters'][%zu]['parameter_name'] must be a string.",
                 i, k);
        return buf;
    }
    return NULL;
}

/* What is wrong with component i of a template send, or NULL. */
static const char *template_component_invalid(const json_t *c, size_t i, const char *type, char *buf,
                                              size_t buflen)
{
    bool button = strcmp(type, "button") == 0;
    if (button) {
        const char *sub = json_string_value(json_object_get(c, "sub_type"));
        if (sub == NULL || (strcmp(sub, "url") != 0 && strcmp(sub, "quick_reply") != 0)) {
            snprintf(buf, buflen,
                     "Param template['components'][%zu]['sub_type'] must be one of {url, quick_reply}.", i);
            return buf;
        }
        if (button_index(c) < 0) {
            snprintf(buf, buflen,
                     "Param template['components'][%zu]['index'] must be a button position, 0 to 9.", i);
            return buf;
        }
    }
    json_t *params = json_object_get(c, "parameters");
    if (params == NULL && !button)
        return NULL;
    if (!json_is_array(params) || (button && json_array_size(params) == 0)) {
        snprintf(buf, buflen, "Param template['components'][%zu]['parameters'] must be %s.", i,
                 button ? "a non-empty array" : "an array");
        return buf;
    }
    for (size_t k = 0; k < json_array_size(params); k++) {
        json_t *p = json_array_get(params, k);
        if (!json_is_object(p)) {
            snprintf(buf, buflen, "Param template['components'][%zu]['parameters'][%zu] must be an object.",
                     i, k);
            return buf;
        }
        const char *why = template_param_invalid(p, i, k, type, buf, buflen);
        if (why != NULL)
            return why;
    }
    return NULL;
}

/* What is wrong with the `template` object of a send (Meta's TemplateObject), or NULL. */
static const char *template_invalid(const json_t *t, char *buf, size_t buflen)
{
    if (!json_is_object(t))
        return "The parameter template is required.";
    json_t *name = json_object_get(t, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return "The parameter template['name'] is required.";
    json_t *language = json_object_get(t, "language");
    json_t *code = json_object_get(language, "code");
    if (!json_is_object(language) || !json_is_string(code) || json_string_length(code) == 0)
        return "The parameter template['language']['code'] is required.";
    json_t *policy = json_object_get(language, "policy");
    if (policy != NULL &&
        (!json_is_string(policy) || strcmp(json_string_value(policy), "deterministic") != 0))
        return "Param template['language']['policy'] must be 'deterministic'.";
    json_t *comps = json_object_get(t, "components");
    if (comps == NULL)
        return NULL;
    if (!json_is_array(comps))
        return "Param template['components'] must be an array.";
    bool header = false, body = false;
    for (size_t i = 0; i < json_array_size(comps); i++) {
        json_t *c = json_array_get(comps, i);
        const char *type = json_string_value(json_object_get(c, "type"));
        if (type == NULL ||
            (strcmp(type, "header") != 0 && strcmp(type, "body") != 0 && strcmp(type, "button") != 0)) {
            snprintf(buf, buflen,
                     "Param template['components'][%zu]['type'] must be one of {header, body, button}.", i);
            return buf;
        }
        bool *seen = strcmp(type, "header") == 0 ? &header : strcmp(type, "body") == 0 ? &body : NULL;
        if (seen != NULL && *seen) {
            snprintf(buf, buflen, "Param template['components'][%zu]: only one %s component is allowed.", i,
                     type);
            return buf;
        }
        if (seen != NULL)
            *seen = true;
        const char *why = template_component_invalid(c, i, type, buf, buflen);
        if (why != NULL)
            return why;
    }
    return NULL;
}

/* Why Meta refuses a well-formed template send that its catalogue does not allow. */
typedef struct tpl_refusal {
    int status;
    int code;
    const char *message;
    char details[320];
} tpl_refusal_t;

static bool refuse(tpl_refusal_t *r, int code, const char *message, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fills r (a 400) and returns false, so that a check can `return refuse(...)`. */
static bool refuse(tpl_refusal_t *r, int code, const char *message, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->details, sizeof(r->details), fmt, ap);
    va_end(ap);
    r->status = 400;
    r->code = code;
    r->message = message;
    return false;
}

#define E132000 "(#132000) Number of parameters does not match the expected number of params"

/* The first component of `type` in `comps` (a send's "body", a template's "BODY"), or NULL. */
static json_t *component_of(const json_t *comps, const char *type)
{
    for (size_t i = 0; i < json_array_size(comps); i++) {
        json_t *c = json_array_get(comps, i);
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t != NULL && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

/* NAMED templates: each body parameter names a distinct placeholder of the template. */
static bool named_params_allowed(const json_t *params, const json_t *placeholders, tpl_refusal_t *r)
{
    for (size_t k = 0; k < json_array_size(params); k++) {
        const char *name = json_string_value(json_object_get(json_array_get(params, k), "parameter_name"));
        if (name == NULL)
            return refuse(
                r, 132000, E132000,
                "body: parameter %zu has no parameter_name (the template's parameter_format is NAMED)", k);
        bool known = false;
        for (size_t j = 0; j < json_array_size(placeholders); j++)
            known |= strcmp(name, json_string_value(json_array_get(placeholders, j))) == 0;
        if (!known)
            return refuse(r, 132000, E132000,
                          "body: parameter_name (%.100s) is not a parameter of the template", name);
        for (size_t j = 0; j < k; j++)
            if (strcmp(name,
                       json_string_value(json_object_get(json_array_get(params, j), "parameter_name"))) == 0)
                return refuse(r, 132000, E132000, "body: parameter_name (%.100s) is given twice", name);
    }
    return true;
}

/* The send's body parameters against the distinct placeholders of the template's BODY text. */
static bool body_allowed(const json_t *t, const json_t *comps, tpl_refusal_t *r)
{
    const char *text =
        json_string_value(json_object_get(component_of(json_object_get(t, "components"), "BODY"), "text"));
    json_t *placeholders = sim_template_placeholders(text != NULL ? text : "");
    if (placeholders == NULL) {
        refuse(r, 131000, "(#131000) Something went wrong", "out of memory");
        r->status = 500;
        return false;
    }
    json_t *params = json_object_get(component_of(comps, "body"), "parameters");
    size_t got = json_array_size(params), want = json_array_size(placeholders);
    const char *format = json_string_value(json_object_get(t, "parameter_format"));
    bool ok =
        got == want
            ? format == NULL || strcmp(format, "NAMED") != 0 || named_params_allowed(params, placeholders, r)
            : refuse(r, 132000, E132000,
                     "body: number of localizable_params (%zu) does not match the expected number "
                     "of params (%zu)",
                     got, want);
    json_decref(placeholders);
    return ok;
}

/* A template button takes a parameter when sent: a URL button with a placeholder in its url, and
 * the OTP buttons that carry the code, which Meta has sent as url buttons. */
static bool button_takes_param(const json_t *b)
{
    const char *type = json_string_value(json_object_get(b, "type"));
    const char *url = json_string_value(json_object_get(b, "url"));
    const char *otp = json_string_value(json_object_get(b, "otp_type"));
    if (type != NULL && strcmp(type, "URL") == 0)
        return url != NULL && strstr(url, "{{") != NULL;
    return type != NULL && strcmp(type, "OTP") == 0 && otp != NULL &&
           (strcmp(otp, "COPY_CODE") == 0 || strcmp(otp, "ONE_TAP") == 0 || strcmp(otp, "ZERO_TAP") == 0);
}

/* Template button i (`b`) against the send's button component for it (`c`, NULL: none). */
static bool button_allowed(const json_t *b, const json_t *c, size_t i, tpl_refusal_t *r)
{
    const char *type = json_string_value(json_object_get(b, "type"));
    const char *sub = json_string_value(json_object_get(c, "sub_type"));
    json_t *params = json_object_get(c, "parameters");
    if (button_takes_param(b)) {
        if (c == NULL)
            return refuse(
                r, 132000, E132000,
                "button at index %zu: the %s button needs a parameter (sub_type url, one text parameter)", i,
                type);
        if (strcmp(sub, "url") != 0)
            return refuse(r, 132000, E132000, "button at index %zu: sub_type must be url for the %s button",
                          i, type);
        const char *ptype = json_string_value(json_object_get(json_array_get(params, 0), "type"));
        if (json_array_size(params) != 1 || strcmp(ptype, "text") != 0)
            return refuse(r, 132000, E132000, "button at index %zu: exactly one text parameter is required",
                          i);
        return true;
    }
    if (c == NULL)
        return true;
    if (strcmp(type, "QUICK_REPLY") == 0)
        return strcmp(sub, "quick_reply") == 0 ||
               refuse(r, 132000, E132000,
                      "button at index %zu: sub_type must be quick_reply for the QUICK_REPLY button", i);
    return refuse(r, 132000, E132000, "button at index %zu: the %s button takes no parameter", i, type);
}

/* The send's button components against the template's buttons: one component per index at most,
 * an index the template has a button at, and a parameter for each button that takes one. */
static bool buttons_allowed(const json_t *t, const json_t *comps, tpl_refusal_t *r)
{
    json_t *buttons = json_object_get(component_of(json_object_get(t, "components"), "BUTTONS"), "buttons");
    size_t n = json_array_size(buttons);
    const json_t *given[SIM_TEMPLATE_BUTTONS_MAX] = {NULL};
    for (size_t i = 0; i < json_array_size(comps); i++) {
        json_t *c = json_array_get(comps, i);
        if (strcmp(json_string_value(json_object_get(c, "type")), "button") != 0)
            continue;
        int at = button_index(c); /* 0 to 9: the shape was checked */
        if ((size_t)at >= n)
            return refuse(r, 131009, "(#131009) Parameter value is not valid",
                          "button at index %d: the template has no button there", at);
        if (given[at] != NULL)
            return refuse(r, 132000, E132000, "button at index %d: given twice", at);
        given[at] = c;
    }
    for (size_t i = 0; i < n; i++)
        if (!button_allowed(json_array_get(buttons, i), given[i], i, r))
            return false;
    return true;
}

/* A well-formed template send (template_invalid said nothing) against the catalogue of the WABA
 * that `phone_id` is bound to, in Meta's order: the template, its status, the body parameters,
 * the button parameters. True when it may be sent; else r says why not. */
static bool template_allowed(const sim_t *s, const char *phone_id, const json_t *tpl, tpl_refusal_t *r)
{
    json_t *name = json_object_get(tpl, "name");
    json_t *code = json_object_get(json_object_get(tpl, "language"), "code");
    json_t *t =
        sim_template_find(sim_waba_of_phone(s, phone_id), json_string_value(name), json_string_length(name),
                          json_string_value(code), json_string_length(code));
    const char *status = json_string_value(json_object_get(t, "status"));
    if (status != NULL && strcmp(status, "PAUSED") == 0)
        return refuse(r, 132015, "(#132015) Template is Paused", "template name (%.200s) in %.20s is paused",
                      json_string_value(name), json_string_value(code));
    if (status != NULL && strcmp(status, "DISABLED") == 0)
        return refuse(r, 132016, "(#132016) Template has been disabled",
                      "template name (%.200s) in %.20s has been disabled", json_string_value(name),
                      json_string_value(code));
    if (status == NULL || strcmp(status, "APPROVED") != 0)
        return refuse(r, 132001, "(#132001) Template name does not exist in the translation",
                      "template name (%.200s) does not exist in %.20s", json_string_value(name),
                      json_string_value(code));
    json_t *comps = json_object_get(tpl, "components");
    return body_allowed(t, comps, r) && buttons_allowed(t, comps, r);
}

/* What is wrong with a send body, in Meta's words, or NULL; the words are in buf when they name a
 * position. */
static const char *meta_invalid(json_t *root, bool to_ok, char *buf, size_t buflen)
{
    if (!json_is_object(root))
        return "The request body must be a JSON object.";
    const char *product = json_string_value(json_object_get(root, "messaging_product"));
    if (product == NULL)
        return "The parameter messaging_product is required.";
    if (strcmp(product, "whatsapp") != 0)
        return "Param messaging_product must be 'whatsapp'.";
    json_t *rtype = json_object_get(root, "recipient_type");
    if (rtype != NULL && (!json_is_string(rtype) || strcmp(json_string_value(rtype), "individual") != 0))
        return "Param recipient_type must be 'individual'.";
    if (json_object_get(root, "to") == NULL)
        return "The parameter to is required.";
    if (!to_ok)
        return "Param to must be a phone number: digits, optionally after '+'.";
    json_t *type = json_object_get(root, "type");
    if (json_is_string(type) && strcmp(json_string_value(type), "template") == 0)
        return template_invalid(json_object_get(root, "template"), buf, buflen);
    if (type != NULL && (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0))
        return "Param type must be 'text' or 'template' (the simulator sends text and template messages "
               "only).";
    json_t *text = json_object_get(root, "text");
    if (!json_is_object(text))
        return "The parameter text is required.";
    json_t *body = json_object_get(text, "body");
    if (!json_is_string(body) || json_string_length(body) == 0)
        return "The parameter text['body'] is required.";
    if (utf8_chars(json_string_value(body), json_string_length(body)) > 4096)
        return "Param text['body'] must be at most 4096 characters long.";
    json_t *preview = json_object_get(text, "preview_url");
    if (preview != NULL && !json_is_boolean(preview))
        return "Param text['preview_url'] must be a boolean.";
    return NULL;
}

void sim_meta_wamid(sim_t *s, const char *digits, bool incoming, char out[128])
{
    /* A length-prefixed number, a direction byte, then a length-prefixed hex id: 18 characters for
     * a message a business sent, 20 for one it received (as in Meta's examples). */
    unsigned char raw[64];
    size_t n = strnlen(digits, 20), o = 0, hex_n = incoming ? 20 : 18;
    raw[o++] = 0x1c;
    raw[o++] = 0x18;
    raw[o++] = (unsigned char)n;
    memcpy(raw + o, digits, n);
    o += n;
    const unsigned char mid[] = {0x15, 0x02, 0x00, incoming ? 0x12 : 0x11, 0x18, (unsigned char)hex_n};
    memcpy(raw + o, mid, sizeof(mid));
    o += sizeof(mid);
    char hex[21];
    sim_rand_chars(s, hex, hex_n, "0123456789ABCDEF");
    memcpy(raw + o, hex, hex_n);
    o += hex_n;
    raw[o++] = 0x00;
    memcpy(out, "wamid.", 6);
    base64_encode(raw, o, out + 6);
}

static int meta_answer(sim_t *s, og_http_req_t *req, const og_route_match_t *m, json_t *root, const char *to,
                       const char *digits, const sim_plan_t *plan, sim_answer_t *a)
{
    if (sim_behaviour_is_transport(plan->behaviour))
        return plan->behaviour == SIM_GARBAGE ? garbage_answer(a) : (int)plan->behaviour;
    if (!meta_token_ok(req)) {
        meta_error(s, a, 401, 190, 463, META_EXPIRED, NULL);
        return SIM_STAT_UNAUTHORIZED;
    }
    char version[64], phone_id[64];
    bool version_ok = og_route_param(m, "version", version, sizeof(version));
    if (!version_ok || strcmp(version, s->w->cfg->meta_api_version) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Unknown path components: /%s/messages", version_ok ? version : "?");
        meta_error(s, a, 400, 2500, 0, msg, NULL);
        return SIM_STAT_INVALID;
    }
    bool id_ok = og_route_param(m, "phoneNumberId", phone_id, sizeof(phone_id));
    if (!id_ok || phone_id[strspn(phone_id, "0123456789")] != '\0') {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "Unsupported post request. Object with ID '%s' does not exist, cannot be loaded due to "
                 "missing permissions, or does not support this operation. Please read the Graph API "
                 "documentation at https://developers.facebook.com/docs/graph-api",
                 id_ok ? phone_id : "?");
        meta_error(s, a, 400, 100, 33, msg, NULL);
        return SIM_STAT_INVALID;
    }
    char buf[256];
    const char *why = meta_invalid(root, digits != NULL, buf, sizeof(buf));
    if (why != NULL) {
        meta_error(s, a, 400, 100, 0, "(#100) Invalid parameter", why);
        return SIM_STAT_INVALID;
    }
    /* Meta checks a template against the catalogue before the message goes anywhere, so the
     * refusals below come before the planned behaviour, as a malformed body's do. */
    tpl_refusal_t refusal;
    const char *type = json_string_value(json_object_get(root, "type"));
    if (type != NULL && strcmp(type, "template") == 0 &&
        !template_allowed(s, phone_id, json_object_get(root, "template"), &refusal)) {
        meta_error(s, a, refusal.status, refusal.code, 0, refusal.message, refusal.details);
        return SIM_STAT_INVALID;
    }
    /* The number's throughput is checked once the request is known to be valid, and before
     * anything looks at the recipient. */
    uint64_t wait;
    if (!sim_limit_take(s, SIM_CH_META, phone_id, strlen(phone_id), 1, &wait)) {
        meta_throttled(s, a);
        return SIM_STAT_RATE_LIMITED;
    }
    switch (plan->behaviour) {
    case SIM_REJECT:
        meta_error(s, a, 400, 131026, 0, "(#131026) Message undeliverable",
                   "Message Undeliverable: the recipient cannot receive this message.");
        break;
    case SIM_OPTED_OUT:
        meta_error(s, a, 400, 131050, 0, "(#131050) " META_OPTED_OUT, META_OPTED_OUT);
        break;
    case SIM_ERROR:
        meta_error(s, a, 500, 131000, 0, "(#131000) Something went wrong",
                   "Something went wrong. Please retry later.");
        break;
    case SIM_THROTTLE:
        meta_throttled(s, a);
        break;
    case SIM_AUTH:
        meta_error(s, a, 401, 190, 463, META_EXPIRED, NULL);
        break;
    default: {
        char wamid[128];
        sim_meta_wamid(s, digits, false, wamid);
        size_t len = 0;
        /* `to` and the id are digits, '+' and base64: nothing to escape. */
        char *body =
            format(&len,
                   "{\"messaging_product\":\"whatsapp\",\"contacts\":[{\"input\":\"%s\",\"wa_id\":\"%s\"}],"
                   "\"messages\":[{\"id\":\"%s\"}]}",
                   to, digits, wamid);
        sim_answer_set(a, 200, CTYPE_UTF8, body, len);
        a->cb = sim_cb_prepare(s, SIM_CH_META, plan,
                               &(sim_msg_t){.id = wamid, .to = digits, .account = phone_id});
        return SIM_OK;
    }
    }
    return (int)plan->behaviour;
}

/* POST /{version}/{phoneNumberId}/messages */
void sim_meta_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    json_t *root = json_loadb(req->body, req->body_len, 0, NULL);
    const char *to = json_string_value(json_object_get(root, "to"));
    char digits[24] = "";
    bool to_ok = to != NULL && phone_digits(to, strlen(to), digits);
    sim_record(s, SIM_CH_META, req, digits);
    sim_plan_t plan = sim_plan(s, SIM_CH_META, digits);
    sim_answer_t ans = {0};
    int stat = meta_answer(s, req, m, root, to, to_ok ? digits : NULL, &plan, &ans);
    json_decref(root);
    sim_finish(s, SIM_CH_META, req, &plan, stat, &ans);
}

/* ---- Meta: the template listing ------------------------------------------------------------ */

#define LIST_LIMIT_DEFAULT 25
#define LIST_LIMIT_MAX     1000

/* Graph's cursors are base64 of a position with each '=' written "ZD" ("MjQZD" is 24, "MAZDZD"
 * 0). The base64 of decimal digits has only letters and digits (never 'Z', '+' or '/'), so a
 * cursor goes into a query string as it is. */
static void cursor_encode(size_t pos, char out[48])
{
    char dec[24], b64[40];
    int n = snprintf(dec, sizeof(dec), "%zu", pos);
    base64_encode((const unsigned char *)dec, (size_t)n, b64);
    size_t o = 0;
    for (const char *p = b64; *p != '\0'; p++) {
        if (*p == '=') {
            out[o++] = 'Z';
            out[o++] = 'D';
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* The position a cursor of a listing of `count` templates stands for. Only what cursor_encode
 * writes for a position in the listing is a cursor: decoding, then encoding again must give the
 * same text back. */
static bool cursor_decode(const char *c, size_t count, size_t *pos)
{
    char b64[48], dec[24], again[48];
    size_t o = 0;
    for (const char *p = c; *p != '\0'; p++) {
        if (o + 1 == sizeof(b64))
            return false;
        bool pad = p[0] == 'Z' && p[1] == 'D';
        b64[o++] = pad ? '=' : *p;
        if (pad)
            p++;
    }
    int n = base64_decode(b64, o, dec, sizeof(dec));
    if (n <= 0 || n > 9 || strspn(dec, "0123456789") != (size_t)n)
        return false;
    *pos = (size_t)strtoul(dec, NULL, 10);
    cursor_encode(*pos, again);
    return strcmp(again, c) == 0 && *pos < count;
}

/* ?limit= (default 25, 1 to 1000) and ?after= (a cursor: the page starts after it) of a listing of
 * `count` templates; false after preparing Meta's 400. Other parameters (fields, ...) are ignored. */
static bool list_params(sim_t *s, const og_http_req_t *req, size_t count, size_t *limit, size_t *start,
                        sim_answer_t *a)
{
    char buf[64];
    int n = og_query_param(req->query, req->query_len, "limit", buf, sizeof(buf));
    *limit = LIST_LIMIT_DEFAULT;
    if (n != -1) {
        bool ok = n > 0 && n <= 4 && strspn(buf, "0123456789") == (size_t)n;
        *limit = ok ? (size_t)strtoul(buf, NULL, 10) : 0;
        if (*limit < 1 || *limit > LIST_LIMIT_MAX) {
            meta_error(s, a, 400, 100, 0, "(#100) Param limit must be an integer from 1 to 1000", NULL);
            return false;
        }
    }
    *start = 0;
    n = og_query_param(req->query, req->query_len, "after", buf, sizeof(buf));
    if (n != -1) {
        size_t pos;
        if (n <= 0 || !cursor_decode(buf, count, &pos)) {
            meta_error(s, a, 400, 100, 0, "(#100) Param after is not a valid cursor", NULL);
            return false;
        }
        *start = pos + 1;
    }
    return true;
}

/* The `next` link of a page whose last template is at cursor `after`: absolute, like Graph's, on
 * whatever host the client reached us by. NULL when out of memory. */
static json_t *list_next(const sim_t *s, const og_http_req_t *req, const char *version, const sim_waba_t *w,
                         size_t limit, const char *after)
{
    size_t host_len = 0, len = 0;
    const char *host = og_http_req_header(req, "host", &host_len);
    char fallback[96];
    if (host == NULL) {
        host_len = (size_t)snprintf(fallback, sizeof(fallback), "%s:%d", s->w->cfg->listen_host,
                                    s->w->cfg->listen_port);
        host = fallback;
    }
    char *next = format(&len, "http://%.*s/%s/%s/message_templates?limit=%zu&after=%s",
                        (int)(host_len > 255 ? 255 : host_len), host, version, w->id, limit, after);
    json_t *v = next != NULL ? json_stringn(next, len) : NULL;
    free(next);
    return v;
}

/* One page: {"data":[...],"paging":{"cursors":{"before","after"}[,"next"]}}, `next` only when more
 * follow. An empty page is {"data":[]}, as Graph answers an empty edge. NULL when out of memory. */
static json_t *list_page(const sim_t *s, const og_http_req_t *req, const char *version, const sim_waba_t *w,
                         size_t start, size_t limit)
{
    size_t count = json_array_size(w->templates);
    size_t end = count - start > limit ? start + limit : count;
    json_t *data = json_array();
    for (size_t i = start; data != NULL && i < end; i++) {
        if (json_array_append(data, json_array_get(w->templates, i)) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    json_t *page = json_pack("{s:o}", "data", data); /* NULL when data is */
    if (page == NULL || start == end)
        return page;
    char before[48], after[48];
    cursor_encode(start, before);
    cursor_encode(end - 1, after);
    json_t *paging = json_pack("{s:{s:s, s:s}}", "cursors", "before", before, "after", after);
    json_t *next = paging != NULL && end < count ? list_next(s, req, version, w, limit, after) : NULL;
    bool ok = paging != NULL && (end == count || next != NULL);
    if (next != NULL)
        ok &= json_object_set_new(paging, "next", next) == 0;
    ok &= json_object_set_new(page, "paging", paging) == 0; /* takes paging, NULL included */
    if (!ok) {
        json_decref(page);
        return NULL;
    }
    return page;
}

/* The listing's answer, checked in Meta's order: version, token, the WABA, the query, then the
 * WABA's listBehaviour. */
static int meta_list_answer(sim_t *s, og_http_req_t *req, const og_route_match_t *m, sim_answer_t *a)
{
    char version[64], waba_id[64];
    bool version_ok = og_route_param(m, "version", version, sizeof(version));
    if (!version_ok || strcmp(version, s->w->cfg->meta_api_version) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Unknown path components: /%s/message_templates",
                 version_ok ? version : "?");
        meta_error(s, a, 400, 2500, 0, msg, NULL);
        return SIM_STAT_INVALID;
    }
    if (!meta_token_ok(req)) {
        meta_error(s, a, 401, 190, 463, META_EXPIRED, NULL);
        return SIM_STAT_UNAUTHORIZED;
    }
    bool id_ok = og_route_param(m, "wabaId", waba_id, sizeof(waba_id));
    const sim_waba_t *w = id_ok ? sim_waba_find(s, waba_id) : NULL;
    if (w == NULL) {
        char msg[300];
        snprintf(
            msg, sizeof(msg),
            "Unsupported get request. Object with ID '%s' does not exist, cannot be loaded due to missing "
            "permissions, or does not support this operation.",
            id_ok ? waba_id : "?");
        meta_error(s, a, 400, 100, 33, msg, NULL);
        return SIM_STAT_INVALID;
    }
    size_t limit, start;
    if (!list_params(s, req, json_array_size(w->templates), &limit, &start, a))
        return SIM_STAT_INVALID;
    switch (w->list) {
    case SIM_LIST_ERROR:
        meta_error(s, a, 500, 1, 0, "An unknown error occurred", NULL);
        return SIM_ERROR;
    case SIM_LIST_AUTH:
        meta_error(s, a, 401, 190, 463, META_EXPIRED, NULL);
        return SIM_AUTH;
    default: {
        json_t *page = list_page(s, req, version, w, start, limit);
        if (page == NULL) {
            meta_error(s, a, 500, 1, 0, "An unknown error occurred", NULL);
            return SIM_ERROR;
        }
        answer_json(a, 200, CTYPE_UTF8, page);
        return SIM_OK;
    }
    }
}

/* GET /{version}/{wabaId}/message_templates?limit=&after= */
void sim_meta_templates(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    /* There is no recipient: neither magic numbers nor rules apply, only the WABA's listBehaviour. */
    sim_plan_t plan = {SIM_OK, 0, SIM_SCRIPT_NONE, 0};
    sim_record(s, SIM_CH_META, req, "");
    sim_answer_t ans = {0};
    int stat = meta_list_answer(s, req, m, &ans);
    sim_finish(s, SIM_CH_META, req, &plan, stat, &ans);
}

/* ---- WAHA session bridge ------------------------------------------------------------------ */

/* NestJS's error shape: {"statusCode","message"[,"error"]}; `message` may be an array. */
static void waha_error(sim_answer_t *a, int status, json_t *message, const char *error)
{
    json_t *v = json_pack("{s:i, s:o}", "statusCode", status, "message", message);
    if (v != NULL && error != NULL)
        json_object_set_new(v, "error", json_string(error));
    answer_json(a, status, CTYPE_UTF8, v);
}

/* NestJS's ThrottlerGuard's 429; the rate limit adds its Retry-After (README.md: Rate limits per
 * sender). */
static void waha_throttled(sim_answer_t *a)
{
    waha_error(a, 429, json_string("ThrottlerException: Too Many Requests"), NULL);
}

static void waha_unauthorized(sim_answer_t *a)
{
    answer_json(a, 401, CTYPE_UTF8, json_pack("{s:s, s:i}", "message", "Unauthorized", "statusCode", 401));
}

/* "<digits>@c.us" -> digits */
static bool waha_chat_digits(const char *chat, char out[24])
{
    const char *at = strchr(chat, '@');
    return at != NULL && chat[0] != '+' && strcmp(at, "@c.us") == 0 &&
           phone_digits(chat, (size_t)(at - chat), out);
}

/* waha_answer's outcome for a send held until its session has started (sim_waha_gate). */
#define WAHA_HELD (-1)

static void waha_resume(sim_t *s, og_http_req_t *req);

static int waha_answer(sim_t *s, og_http_req_t *req, json_t *root, const json_error_t *jerr,
                       const char *digits, const sim_plan_t *plan, bool resumed, sim_answer_t *a)
{
    if (sim_behaviour_is_transport(plan->behaviour))
        return plan->behaviour == SIM_GARBAGE ? garbage_answer(a) : (int)plan->behaviour;
    if (!sim_waha_key_ok(s, req)) {
        waha_unauthorized(a);
        return SIM_STAT_UNAUTHORIZED;
    }
    if (root == NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Unexpected token in JSON at position %d", jerr->position);
        waha_error(a, 400, json_string(msg), "Bad Request");
        return SIM_STAT_INVALID;
    }
    /* class-validator lists every failed constraint. */
    json_t *problems = json_array();
    json_t *session = json_object_get(root, "session");
    json_t *chat = json_object_get(root, "chatId");
    json_t *text = json_object_get(root, "text");
    if (!json_is_object(root))
        json_array_append_new(problems, json_string("body must be an object"));
    if (session != NULL && !json_is_string(session))
        json_array_append_new(problems, json_string("session must be a string"));
    if (!json_is_string(chat))
        json_array_append_new(problems, json_string("chatId must be a string"));
    else if (digits == NULL)
        json_array_append_new(problems, json_string("chatId must be a phone number followed by @c.us"));
    if (!json_is_string(text))
        json_array_append_new(problems, json_string("text must be a string"));
    else if (json_string_length(text) == 0)
        json_array_append_new(problems, json_string("text should not be empty"));
    if (json_array_size(problems) > 0) {
        waha_error(a, 400, problems, "Bad Request");
        return SIM_STAT_INVALID;
    }
    json_decref(problems);
    /* A session without a name is WAHA's "default" one. */
    const char *name = json_string_value(session);
    char from[40] = SIM_WAHA_DEFAULT_NUMBER "@c.us";
    switch (sim_waha_gate(s, req, name != NULL ? name : "default", resumed, a, from, waha_resume)) {
    case SIM_WAHA_REFUSED:
        return SIM_STAT_NOT_WORKING;
    case SIM_WAHA_HELD:
        return WAHA_HELD;
    default:
        break;
    }
    uint64_t wait;
    if (!sim_limit_take(s, SIM_CH_QR, name != NULL ? name : "default",
                        name != NULL ? json_string_length(session) : strlen("default"), 1, &wait)) {
        waha_throttled(a);
        a->retry_after_s = wait;
        return SIM_STAT_RATE_LIMITED;
    }
    switch (plan->behaviour) {
    case SIM_REJECT:
    case SIM_OPTED_OUT: { /* WAHA has no answer of its own for a recipient who opted out */
        char msg[96];
        snprintf(msg, sizeof(msg), "The number %s is not registered on WhatsApp", digits);
        waha_error(a, 400, json_string(msg), "Bad Request");
        break;
    }
    case SIM_ERROR:
        answer_json(a, 500, CTYPE_UTF8,
                    json_pack("{s:i, s:s, s:{s:s, s:s}}", "statusCode", 500, "message",
                              "Internal server error", "exception", "message",
                              "Evaluation failed: Error: WhatsApp Web did not answer", "name", "Error"));
        break;
    case SIM_THROTTLE:
        waha_throttled(a);
        break;
    case SIM_AUTH:
        waha_unauthorized(a);
        break;
    default: {
        char hex[17], id[96];
        sim_rand_chars(s, hex, 16, "0123456789ABCDEF");
        snprintf(id, sizeof(id), "true_%s@c.us_3EB0%s", digits, hex);
        answer_json(a, 201, CTYPE_UTF8,
                    json_pack("{s:s, s:I, s:s, s:O, s:O, s:b, s:i, s:b}", "id", id, "timestamp",
                              (json_int_t)time(NULL), "from", from, "to", chat, "body", text, "fromMe", 1,
                              "ack", 1, "hasMedia", 0));
        /* A session of the session API acks to its config's message.ack webhook, when it has one. */
        const char *hook = NULL, *key = NULL;
        sim_waha_webhook(s, name != NULL ? name : "default", "message.ack", &hook, &key);
        a->cb = sim_cb_prepare(s, SIM_CH_QR, plan,
                               &(sim_msg_t){.id = id,
                                            .to = json_string_value(chat),
                                            .from = from,
                                            .account = name != NULL ? name : "default",
                                            .url = hook,
                                            .key = key});
        return SIM_OK;
    }
    }
    return (int)plan->behaviour;
}

/* POST /api/sendText, first (`resumed` false: recorded) or again once its session has started. */
static void waha_send(sim_t *s, og_http_req_t *req, bool resumed)
{
    json_error_t jerr;
    json_t *root = json_loadb(req->body, req->body_len, 0, &jerr);
    const char *chat = json_string_value(json_object_get(root, "chatId"));
    char digits[24] = "";
    bool chat_ok = chat != NULL && waha_chat_digits(chat, digits);
    if (!chat_ok)
        digits[0] = '\0';
    if (!resumed)
        sim_record(s, SIM_CH_QR, req, digits);
    sim_plan_t plan = sim_plan(s, SIM_CH_QR, digits);
    sim_answer_t ans = {0};
    int stat = waha_answer(s, req, root, &jerr, chat_ok ? digits : NULL, &plan, resumed, &ans);
    json_decref(root);
    if (stat != WAHA_HELD)
        sim_finish(s, SIM_CH_QR, req, &plan, stat, &ans);
}

static void waha_resume(sim_t *s, og_http_req_t *req)
{
    waha_send(s, req, true);
}

void sim_waha_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    waha_send(sim_of(ctx), req, false);
}

/* ---- Twilio Messages API ------------------------------------------------------------------ */

#define TWILIO_MAX_CHARS 1600

/* {"code","message","more_info","status"} */
static void twilio_error(sim_answer_t *a, int status, int code, const char *message)
{
    char more[64];
    snprintf(more, sizeof(more), "https://www.twilio.com/docs/errors/%d", code);
    answer_json(a, status, JSON_CTYPE,
                json_pack("{s:i, s:s, s:s, s:i}", "code", code, "message", message, "more_info", more,
                          "status", status));
    if (status == 401)
        sim_answer_header(a, "WWW-Authenticate", "Basic realm=\"Twilio API\"");
}

/* Twilio's answer to a request over the rate: the throttle behaviour's and the rate limit's.
 * Twilio documents no Retry-After with it (README.md: Rate limits per sender). */
static void twilio_throttled(sim_answer_t *a)
{
    twilio_error(a, 429, 20429, "Too Many Requests");
}

/* Basic auth as (path sid, configured token); the path sid must be the configured one. Unset
 * settings accept anything (README.md). */
static bool twilio_auth_ok(const sim_t *s, const og_http_req_t *req, const char *path_sid)
{
    const og_config_t *cfg = s->w->cfg;
    size_t len;
    const char *v = og_http_req_header(req, "authorization", &len);
    char cred[512];
    if (v == NULL || len < 6 || strncasecmp(v, "Basic ", 6) != 0 ||
        base64_decode(v + 6, len - 6, cred, sizeof(cred)) < 0)
        return false;
    char *colon = strchr(cred, ':');
    if (colon == NULL)
        return false;
    *colon = '\0';
    const char *user = cred, *pass = colon + 1;
    bool sid_set = cfg->sms_account_sid != NULL && cfg->sms_account_sid[0] != '\0';
    bool token_set = cfg->sms_auth_token != NULL && cfg->sms_auth_token[0] != '\0';
    return strcmp(user, path_sid) == 0 && (!sid_set || strcmp(path_sid, cfg->sms_account_sid) == 0) &&
           (!token_set || strcmp(pass, cfg->sms_auth_token) == 0);
}

static int twilio_answer(sim_t *s, og_http_req_t *req, const og_route_match_t *m, const char *to, int to_n,
                         const char *digits, const sim_plan_t *plan, sim_answer_t *a)
{
    if (sim_behaviour_is_transport(plan->behaviour))
        return plan->behaviour == SIM_GARBAGE ? garbage_answer(a) : (int)plan->behaviour;
    char sid[64];
    if (!og_route_param(m, "AccountSid", sid, sizeof(sid)) || !twilio_auth_ok(s, req, sid)) {
        twilio_error(a, 401, 20003, "Authenticate");
        return SIM_STAT_UNAUTHORIZED;
    }
    if (digits == NULL) {
        char msg[160];
        if (to_n > 0)
            snprintf(msg, sizeof(msg), "Invalid 'To' Phone Number: %.64s", to);
        else
            snprintf(msg, sizeof(msg),
                     to_n == -2 ? "Invalid 'To' Phone Number" : "A 'To' phone number is required.");
        twilio_error(a, 400, 21211, msg);
        return SIM_STAT_INVALID;
    }
    char from[64], service[64];
    int from_n = og_query_param(req->body, req->body_len, "From", from, sizeof(from));
    int service_n = og_query_param(req->body, req->body_len, "MessagingServiceSid", service, sizeof(service));
    if (from_n == -2) {
        twilio_error(a, 400, 21212, "Invalid 'From' Phone Number");
        return SIM_STAT_INVALID;
    }
    if (from_n <= 0 && service_n <= 0) {
        twilio_error(a, 400, 21603, "A 'From' phone number is required.");
        return SIM_STAT_INVALID;
    }
    char *text = malloc(req->body_len + 1);
    int text_n =
        text != NULL ? og_query_param(req->body, req->body_len, "Body", text, req->body_len + 1) : -2;
    if (text_n <= 0) {
        free(text);
        twilio_error(a, 400, 21602,
                     text_n == -2 ? "Message body is not valid UTF-8." : "Message body is required.");
        return SIM_STAT_INVALID;
    }
    if (utf8_chars(text, (size_t)text_n) > TWILIO_MAX_CHARS) {
        free(text);
        twilio_error(a, 400, 21617, "The concatenated message body exceeds the 1600 character limit.");
        return SIM_STAT_INVALID;
    }
    /* Twilio paces a sender in segments: a 3-segment message takes 3 tokens. */
    og_sms_info_t info;
    size_t segments = og_sms_encode_info(text, (size_t)text_n, &info) ? info.segments : 1;
    uint64_t wait;
    if (!sim_limit_take(s, SIM_CH_SMS, from_n > 0 ? from : service, (size_t)(from_n > 0 ? from_n : service_n),
                        (unsigned)segments, &wait)) {
        free(text);
        twilio_throttled(a);
        return SIM_STAT_RATE_LIMITED;
    }
    switch (plan->behaviour) {
    case SIM_REJECT:
        twilio_error(a, 400, 21211, "Invalid 'To' Phone Number");
        break;
    case SIM_OPTED_OUT:
        twilio_error(a, 400, 21610, "Attempt to send to unsubscribed recipient");
        break;
    case SIM_ERROR:
        twilio_error(a, 500, 20500, "An internal server error has occurred");
        break;
    case SIM_THROTTLE:
        twilio_throttled(a);
        break;
    case SIM_AUTH:
        twilio_error(a, 401, 20003, "Authenticate");
        break;
    default: {
        char msid[35], uri[160], media[160], date[40], nsegments[16];
        msid[0] = 'S';
        msid[1] = 'M';
        sim_rand_chars(s, msid + 2, 32, "0123456789abcdef");
        snprintf(uri, sizeof(uri), "/2010-04-01/Accounts/%s/Messages/%s.json", sid, msid);
        snprintf(media, sizeof(media), "/2010-04-01/Accounts/%s/Messages/%s/Media.json", sid, msid);
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
        snprintf(nsegments, sizeof(nsegments), "%zu", segments);
        json_t *v =
            json_pack("{s:s, s:s, s:s, s:s, s:n, s:s, s:s, s:n, s:n, s:o, s:o, s:s, s:s, s:s, s:n, "
                      "s:s, s:s, s:{s:s}, s:s, s:s}",
                      "account_sid", sid, "api_version", "2010-04-01", "body", text, "date_created", date,
                      "date_sent", "date_updated", date, "direction", "outbound-api", "error_code",
                      "error_message", "from", from_n > 0 ? json_string(from) : json_null(),
                      "messaging_service_sid", service_n > 0 ? json_string(service) : json_null(),
                      "num_media", "0", "num_segments", nsegments, "status", "queued", "price", "price_unit",
                      "USD", "sid", msid, "subresource_uris", "media", media, "to", to, "uri", uri);
        answer_json(a, 201, JSON_CTYPE, v);
        free(text);
        /* Real Twilio posts the statuses to the send's StatusCallback, when it has one. */
        char callback[2048];
        int callback_n =
            og_query_param(req->body, req->body_len, "StatusCallback", callback, sizeof(callback));
        a->cb = sim_cb_prepare(s, SIM_CH_SMS, plan,
                               &(sim_msg_t){.id = msid,
                                            .to = to,
                                            .from = from_n > 0 ? from : NULL,
                                            .account = sid,
                                            .service = service_n > 0 ? service : NULL,
                                            .status_callback = callback_n > 0 ? callback : NULL});
        return SIM_OK;
    }
    }
    free(text);
    return (int)plan->behaviour;
}

/* POST /2010-04-01/Accounts/{AccountSid}/Messages.json, form-encoded To, From, Body. */
void sim_twilio_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char to[64], digits[24] = "";
    int to_n = og_query_param(req->body, req->body_len, "To", to, sizeof(to));
    /* E.164: '+' and at most 15 digits. */
    bool to_ok = to_n > 1 && to[0] == '+' && to_n <= 16 && phone_digits(to, (size_t)to_n, digits);
    if (!to_ok)
        digits[0] = '\0';
    sim_record(s, SIM_CH_SMS, req, digits);
    sim_plan_t plan = sim_plan(s, SIM_CH_SMS, digits);
    sim_answer_t ans = {0};
    int stat = twilio_answer(s, req, m, to, to_n, to_ok ? digits : NULL, &plan, &ans);
    sim_finish(s, SIM_CH_SMS, req, &plan, stat, &ans);
}
