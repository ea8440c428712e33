/*
 * Template checks and rendering. See include/product/omnigate/templates/render.h.
 */
#include "omnigate/templates/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/app/errors.h"
#include "omnigate/json.h"
#include "omnigate/jw.h"
#include "omnigate/smsenc.h"
#include "omnigate/tenants/settings.h"

void og_tpl_out_clear(og_tpl_out_t *o)
{
    free(o->meta);
    free(o->rendered);
    o->meta = o->rendered = NULL;
}

/* ---- the request's form ------------------------------------------------------------------ */

static bool param_value_ok(const json_t *v)
{
    size_t chars = 0;
    return json_is_string(v) && og_text_validate(json_string_value(v), json_string_length(v), &chars) &&
           chars <= OG_TPL_PARAM_MAX;
}

static bool buttons_valid(const json_t *buttons, og_err_t *err)
{
    static const char *const keys[] = {"index", "subType", "parameter", NULL};
    if (!json_is_array(buttons) || json_array_size(buttons) > OG_TPL_BUTTONS_MAX)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template.buttons",
                           "template.buttons must be an array of at most %d buttons", OG_TPL_BUTTONS_MAX);
    size_t i;
    json_t *b;
    json_array_foreach(buttons, i, b)
    {
        char path[48];
        snprintf(path, sizeof(path), "template.buttons[%zu]", i);
        if (!json_is_object(b))
            return og_err_fail(err, OG_E_VALIDATION_FAILED, path, "%s must be an object", path);
        if (!og_json_known_keys(b, keys, path, err))
            return false;
        json_t *idx = json_object_get(b, "index");
        const char *st = json_string_value(json_object_get(b, "subType"));
        if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
            json_integer_value(idx) >= OG_TPL_BUTTONS_MAX)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, path, "%s.index must be an integer from 0 to 9",
                               path);
        if (st == NULL || (strcmp(st, "url") != 0 && strcmp(st, "quick_reply") != 0))
            return og_err_fail(err, OG_E_VALIDATION_FAILED, path, "%s.subType must be url or quick_reply",
                               path);
        if (!param_value_ok(json_object_get(b, "parameter")))
            return og_err_fail(err, OG_E_VALIDATION_FAILED, path,
                               "%s.parameter must be 1-%d characters of text", path, OG_TPL_PARAM_MAX);
        for (size_t k = 0; k < i; k++)
            if (json_integer_value(json_object_get(json_array_get(buttons, k), "index")) ==
                json_integer_value(idx))
                return og_err_fail(err, OG_E_VALIDATION_FAILED, path, "%s.index repeats an earlier button",
                                   path);
    }
    return true;
}

bool og_tpl_request_valid(const json_t *tpl, og_err_t *err)
{
    static const char *const keys[] = {"name", "language", "parameters", "buttons", NULL};
    if (!json_is_object(tpl))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template",
                           "template must be an object with name, language and parameters");
    if (!og_json_known_keys(tpl, keys, "template", err))
        return false;
    if (!og_settings_template_name_valid(json_string_value(json_object_get(tpl, "name"))))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template.name",
                           "template.name must be 1-512 lowercase letters, digits or _");
    if (!og_settings_template_language_valid(json_string_value(json_object_get(tpl, "language"))))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template.language",
                           "template.language must be a language code such as en or en_US");
    json_t *params = json_object_get(tpl, "parameters");
    bool ok = params == NULL;
    if (json_is_array(params)) {
        size_t i;
        json_t *v;
        ok = json_array_size(params) <= OG_TPL_PARAMS_MAX;
        json_array_foreach(params, i, v) ok = ok && param_value_ok(v);
    } else if (json_is_object(params)) {
        const char *k;
        json_t *v;
        ok = json_object_size(params) <= OG_TPL_PARAMS_MAX;
        json_object_foreach(params, k, v) ok = ok && param_value_ok(v);
    }
    if (!ok)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template.parameters",
                           "template.parameters must be an array of strings or an object of strings, each "
                           "1-%d characters",
                           OG_TPL_PARAM_MAX);
    json_t *buttons = json_object_get(tpl, "buttons");
    return buttons == NULL || buttons_valid(buttons, err);
}

/* ---- placeholders and rendering -------------------------------------------------------------- */

/* The next placeholder from `*at`: its key in [*ks, *ke) and the whole {{...}} in
 * [*ps, *pe). False when there is none. Keys are trimmed of spaces. */
static bool next_placeholder(const char **at, const char **ks, const char **ke, const char **ps,
                             const char **pe)
{
    for (const char *p = strstr(*at, "{{"); p != NULL; p = strstr(p + 2, "{{")) {
        const char *end = strstr(p + 2, "}}");
        if (end == NULL)
            return false;
        const char *a = p + 2, *b = end;
        while (a < b && *a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        bool key_ok = a < b;
        for (const char *q = a; q < b && key_ok; q++)
            key_ok =
                (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_';
        if (!key_ok)
            continue;
        *ks = a, *ke = b, *ps = p, *pe = end + 2;
        *at = end + 2;
        return true;
    }
    return false;
}

static bool all_digits(const char *a, const char *b)
{
    for (; a < b; a++)
        if (*a < '0' || *a > '9')
            return false;
    return true;
}

json_t *og_tpl_placeholders(const char *body, bool named)
{
    json_t *out = json_array();
    if (out == NULL || body == NULL)
        return out;
    const char *at = body, *ks, *ke, *ps, *pe;
    long max = 0;
    bool seen[OG_TPL_PARAMS_MAX + 1] = {false};
    while (next_placeholder(&at, &ks, &ke, &ps, &pe)) {
        if (named) {
            json_t *k = json_stringn(ks, (size_t)(ke - ks));
            bool dup = false;
            size_t i;
            json_t *v;
            json_array_foreach(out, i, v) dup = dup || json_equal(v, k);
            if (dup)
                json_decref(k);
            else
                json_array_append_new(out, k);
        } else if (all_digits(ks, ke) && ke - ks <= 3) {
            long n = strtol(ks, NULL, 10);
            if (n >= 1 && n <= OG_TPL_PARAMS_MAX) {
                seen[n] = true;
                max = n > max ? n : max;
            }
        }
    }
    for (long n = 1; !named && n <= max; n++) {
        if (!seen[n])
            continue;
        char num[8];
        snprintf(num, sizeof(num), "%ld", n);
        json_array_append_new(out, json_string(num));
    }
    return out;
}

/* A growing byte string; `failed` once an allocation failed. */
typedef struct buf {
    char *p;
    size_t len, cap;
    bool failed;
} buf_t;

static void buf_put(buf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

char *og_tpl_fill(const char *body, const json_t *values, char *missing, size_t missing_size)
{
    buf_t b = {0};
    const char *at = body, *done = body, *ks, *ke, *ps, *pe;
    while (next_placeholder(&at, &ks, &ke, &ps, &pe)) {
        char key[64];
        snprintf(key, sizeof(key), "%.*s", (int)(ke - ks < 63 ? ke - ks : 63), ks);
        json_t *v = json_object_get(values, key);
        if (!json_is_string(v)) {
            if (missing == NULL)
                continue;
            snprintf(missing, missing_size, "%s", key);
            free(b.p);
            return NULL;
        }
        buf_put(&b, done, (size_t)(ps - done));
        buf_put(&b, json_string_value(v), json_string_length(v));
        done = pe;
    }
    buf_put(&b, done, strlen(done));
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p != NULL ? b.p : strdup("");
}

/* ---- checking against the catalogue ------------------------------------------------------------ */

static bool named_format(const json_t *item)
{
    const char *f = json_string_value(json_object_get(item, "parameterFormat"));
    return f != NULL && strcmp(f, "named") == 0;
}

/* The item's button at `index`, or NULL. */
static json_t *item_button(const json_t *item, json_int_t index)
{
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(item, "buttons"), i, b)
    {
        if (json_integer_value(json_object_get(b, "index")) == index)
            return b;
    }
    return NULL;
}

/* The sub_type Meta wants in a send for a catalogue button type: URL and OTP buttons take a
 * url component (Meta's copy-code button is sent as a url button), quick replies their own. */
static const char *wire_sub_type(const json_t *button)
{
    const char *t = json_string_value(json_object_get(button, "type"));
    if (t == NULL)
        return NULL;
    if (strcmp(t, "URL") == 0 || strcmp(t, "OTP") == 0)
        return "url";
    if (strcmp(t, "QUICK_REPLY") == 0)
        return "quick_reply";
    return NULL;
}

static bool check_buttons(const json_t *tpl, const json_t *item, og_err_t *err)
{
    json_t *buttons = json_object_get(tpl, "buttons");
    size_t i;
    json_t *b;
    json_array_foreach(buttons, i, b)
    {
        json_int_t idx = json_integer_value(json_object_get(b, "index"));
        json_t *ib = item_button(item, idx);
        const char *want = ib != NULL ? wire_sub_type(ib) : NULL;
        if (want == NULL || strcmp(want, json_string_value(json_object_get(b, "subType"))) != 0)
            return og_err_fail(err, OG_E_TEMPLATE_PARAMETERS_MISMATCH, "template.buttons",
                               "the template has no %s button at index %lld that takes a parameter",
                               json_string_value(json_object_get(b, "subType")), (long long)idx);
    }
    json_array_foreach(json_object_get(item, "buttons"), i, b)
    {
        if (!json_is_true(json_object_get(b, "parameter")))
            continue;
        json_int_t idx = json_integer_value(json_object_get(b, "index"));
        bool given = false;
        size_t k;
        json_t *rb;
        json_array_foreach(buttons, k, rb) given =
            given || json_integer_value(json_object_get(rb, "index")) == idx;
        if (!given)
            return og_err_fail(err, OG_E_TEMPLATE_PARAMETERS_MISMATCH, "template.buttons",
                               "the template's %s button at index %lld needs a parameter",
                               json_string_value(json_object_get(b, "type")), (long long)idx);
    }
    return true;
}

/* The values of the request's parameters by placeholder key (positional: "1", "2", ...), into
 * `values`; false with template_parameters_mismatch when they are not exactly the template's. */
static bool match_parameters(const json_t *tpl, const json_t *item, json_t *values, og_err_t *err)
{
    json_t *want = json_object_get(item, "parameters");
    json_t *got = json_object_get(tpl, "parameters");
    size_t nwant = json_array_size(want);
    bool named = named_format(item);
    if (named) {
        size_t i;
        json_t *k;
        bool ok = (got == NULL && nwant == 0) || (json_is_object(got) && json_object_size(got) == nwant);
        json_array_foreach(want, i, k) ok = ok && json_object_get(got, json_string_value(k)) != NULL;
        if (!ok)
            return og_err_fail(err, OG_E_TEMPLATE_PARAMETERS_MISMATCH, "template.parameters",
                               "the template takes %zu named parameters; template.parameters must be an "
                               "object with exactly those names",
                               nwant);
        json_array_foreach(want, i, k)
        {
            const char *key = json_string_value(k);
            json_object_set(values, key, json_object_get(got, key));
        }
        return true;
    }
    size_t ngot = json_is_array(got) ? json_array_size(got) : 0;
    if ((got != NULL && !json_is_array(got)) || ngot != nwant)
        return og_err_fail(err, OG_E_TEMPLATE_PARAMETERS_MISMATCH, "template.parameters",
                           "the template takes %zu positional parameters; %s", nwant,
                           json_is_object(got) ? "template.parameters is an object"
                                               : "a different count was given");
    size_t i;
    json_t *k;
    json_array_foreach(want, i, k) json_object_set(values, json_string_value(k), json_array_get(got, i));
    return true;
}

/* Meta's template object: name, language, the body's parameters, then each button's. */
static char *meta_object(const char *name, const char *language, const json_t *item, const json_t *values,
                         const json_t *buttons)
{
    og_jw_t w;
    og_jw_init(&w, 256);
    og_jw_object(&w);
    og_jw_kstring(&w, "name", name);
    og_jw_key(&w, "language");
    og_jw_object(&w);
    og_jw_kstring(&w, "policy", "deterministic");
    og_jw_kstring(&w, "code", language);
    og_jw_object_end(&w);
    json_t *params = json_object_get(item, "parameters");
    if (json_array_size(params) > 0 || json_array_size(buttons) > 0) {
        og_jw_key(&w, "components");
        og_jw_array(&w);
        if (json_array_size(params) > 0) {
            bool named = named_format(item);
            og_jw_object(&w);
            og_jw_kstring(&w, "type", "body");
            og_jw_key(&w, "parameters");
            og_jw_array(&w);
            size_t i;
            json_t *k;
            json_array_foreach(params, i, k)
            {
                og_jw_object(&w);
                og_jw_kstring(&w, "type", "text");
                if (named)
                    og_jw_kstring(&w, "parameter_name", json_string_value(k));
                og_jw_kstring(&w, "text", json_string_value(json_object_get(values, json_string_value(k))));
                og_jw_object_end(&w);
            }
            og_jw_array_end(&w);
            og_jw_object_end(&w);
        }
        /* Buttons in index order, as the template lists them. */
        for (json_int_t idx = 0; idx < OG_TPL_BUTTONS_MAX; idx++) {
            size_t i;
            json_t *b;
            json_array_foreach(buttons, i, b)
            {
                if (json_integer_value(json_object_get(b, "index")) != idx)
                    continue;
                bool url = strcmp(json_string_value(json_object_get(b, "subType")), "url") == 0;
                char index[4];
                snprintf(index, sizeof(index), "%lld", (long long)idx);
                og_jw_object(&w);
                og_jw_kstring(&w, "type", "button");
                og_jw_kstring(&w, "sub_type", url ? "url" : "quick_reply");
                og_jw_kstring(&w, "index", index);
                og_jw_key(&w, "parameters");
                og_jw_array(&w);
                og_jw_object(&w);
                og_jw_kstring(&w, "type", url ? "text" : "payload");
                og_jw_kstring(&w, url ? "text" : "payload",
                              json_string_value(json_object_get(b, "parameter")));
                og_jw_object_end(&w);
                og_jw_array_end(&w);
                og_jw_object_end(&w);
            }
        }
        og_jw_array_end(&w);
    }
    og_jw_object_end(&w);
    return og_jw_finish(&w, NULL);
}

static bool usable(const json_t *item, const char *name, const char *language, const char *waba_id,
                   const char *field, og_err_t *err)
{
    if (item == NULL)
        return og_err_fail(err, OG_E_TEMPLATE_NOT_FOUND, field,
                           "template %s (%s) is not in the catalogue of WhatsApp Business Account %s", name,
                           language, waba_id != NULL ? waba_id : "(none)");
    const char *status = json_string_value(json_object_get(item, "status"));
    if (status == NULL || strcmp(status, OG_TPL_APPROVED) != 0)
        return og_err_fail(err, OG_E_TEMPLATE_NOT_APPROVED, field,
                           "template %s (%s) is %s, not " OG_TPL_APPROVED, name, language,
                           status != NULL ? status : "of unknown status");
    return true;
}

static bool finish(og_tpl_out_t *out, const char *name, const char *language, const json_t *item,
                   json_t *values, const json_t *buttons, og_err_t *err)
{
    out->meta = meta_object(name, language, item, values, buttons);
    const char *body = json_string_value(json_object_get(item, "body"));
    out->rendered = og_tpl_fill(body != NULL ? body : "", values, NULL, 0);
    json_decref(values);
    if (out->meta == NULL || out->rendered == NULL) {
        og_tpl_out_clear(out);
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    }
    return true;
}

bool og_tpl_apply(const json_t *tpl, const json_t *item, const char *waba_id, og_tpl_out_t *out,
                  og_err_t *err)
{
    const char *name = json_string_value(json_object_get(tpl, "name"));
    const char *language = json_string_value(json_object_get(tpl, "language"));
    memset(out, 0, sizeof(*out));
    if (!usable(item, name, language, waba_id, "template.name", err))
        return false;
    json_t *values = json_object();
    if (values == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    if (!match_parameters(tpl, item, values, err) || !check_buttons(tpl, item, err)) {
        json_decref(values);
        return false;
    }
    return finish(out, name, language, item, values, json_object_get(tpl, "buttons"), err);
}

bool og_tpl_wrap(const json_t *item, const char *name, const char *language, const char *text,
                 bool in_buttons, og_tpl_out_t *out, og_err_t *err)
{
    memset(out, 0, sizeof(*out));
    if (!usable(item, name, language, NULL, "text", err))
        return false;
    json_t *params = json_object_get(item, "parameters");
    if (json_array_size(params) != 1)
        return og_err_fail(err, OG_E_TEMPLATE_PARAMETERS_MISMATCH, "text",
                           "template %s (%s) must take exactly one body parameter; it takes %zu", name,
                           language, json_array_size(params));
    json_t *values = json_object(), *buttons = json_array();
    bool ok =
        values != NULL && buttons != NULL &&
        json_object_set_new(values, json_string_value(json_array_get(params, 0)), json_string(text)) == 0;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(item, "buttons"), i, b)
    {
        if (ok && in_buttons && json_is_true(json_object_get(b, "parameter")) && wire_sub_type(b) != NULL)
            ok = json_array_append_new(buttons,
                                       json_pack("{s:O,s:s,s:s}", "index", json_object_get(b, "index"),
                                                 "subType", wire_sub_type(b), "parameter", text)) == 0;
    }
    if (!ok) {
        json_decref(values);
        json_decref(buttons);
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    }
    ok = finish(out, name, language, item, values, buttons, err);
    json_decref(buttons);
    return ok;
}

/* ---- Meta's listing ---------------------------------------------------------------------------- */

static json_t *lower(const char *s)
{
    if (s == NULL)
        return json_null();
    char buf[64];
    size_t n = 0;
    for (; s[n] != '\0' && n < sizeof(buf) - 1; n++)
        buf[n] = (char)(s[n] >= 'A' && s[n] <= 'Z' ? s[n] + 32 : s[n]);
    buf[n] = '\0';
    return json_string(buf);
}

static bool needs_parameter(const json_t *b)
{
    const char *type = json_string_value(json_object_get(b, "type"));
    const char *url = json_string_value(json_object_get(b, "url"));
    if (type == NULL)
        return false;
    if (strcmp(type, "URL") == 0)
        return url != NULL && strstr(url, "{{") != NULL;
    return strcmp(type, "OTP") == 0 || strcmp(type, "COPY_CODE") == 0;
}

json_t *og_tpl_from_meta(const json_t *meta)
{
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *language = json_string_value(json_object_get(meta, "language"));
    if (name == NULL || language == NULL)
        return NULL;
    const char *fmt = json_string_value(json_object_get(meta, "parameter_format"));
    bool named = fmt != NULL && (strcmp(fmt, "NAMED") == 0 || strcmp(fmt, "named") == 0);
    const char *body = "";
    json_t *buttons = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(meta, "components"), i, c)
    {
        const char *type = json_string_value(json_object_get(c, "type"));
        if (type != NULL && strcmp(type, "BODY") == 0 && json_is_string(json_object_get(c, "text")))
            body = json_string_value(json_object_get(c, "text"));
        if (type == NULL || strcmp(type, "BUTTONS") != 0)
            continue;
        size_t k;
        json_t *b;
        json_array_foreach(json_object_get(c, "buttons"), k, b)
        {
            json_t *o =
                json_pack("{s:I,s:s?,s:s?,s:b}", "index", (json_int_t)k, "type",
                          json_string_value(json_object_get(b, "type")), "text",
                          json_string_value(json_object_get(b, "text")), "parameter", needs_parameter(b));
            if (o != NULL && json_is_string(json_object_get(b, "url")))
                json_object_set(o, "url", json_object_get(b, "url"));
            json_array_append_new(buttons, o);
        }
    }
    const char *status = json_string_value(json_object_get(meta, "status"));
    json_t *id = json_object_get(meta, "id");
    char idbuf[32] = "";
    if (json_is_integer(id))
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)json_integer_value(id));
    return json_pack("{s:s,s:s,s:s,s:o,s:s,s:o,s:s,s:o,s:s?}", "name", name, "language", language, "status",
                     status != NULL ? status : "UNKNOWN", "category",
                     lower(json_string_value(json_object_get(meta, "category"))), "parameter_format",
                     named ? "named" : "positional", "parameters", og_tpl_placeholders(body, named), "body",
                     body, "buttons", buttons, "meta_id",
                     json_is_string(id) ? json_string_value(id) : (idbuf[0] ? idbuf : NULL));
}
