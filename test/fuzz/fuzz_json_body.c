/*
 * Fuzzes request-body decoding (src/net/json.c) as the routes use it: og_json_decode with each
 * route's allowed fields, then the typed getters for each field the route reads and the domain
 * checks those fields go through (phone numbers, message text, tenant settings).
 *
 * An input is one byte choosing the route, one choosing the Content-Type, then the body.
 *
 * Checked: a refusal is one of the decoder's codes (or validation_failed from a getter, naming
 * the field) with a 4xx status and an envelope that builds; an accepted body is an object no
 * deeper than OG_JSON_MAX_DEPTH whose keys are all allowed; a getter that succeeds hands back
 * the member (or leaves the default when the member is absent and optional) within its bounds.
 */
#include <string.h>

#include "fuzz.h"
#include "omnigate/channel.h"
#include "omnigate/api.h"
#include "omnigate/json.h"
#include "omnigate/phone.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/smsenc.h"
#include "omnigate/token.h"

typedef enum kind { K_STRING, K_INT, K_BOOL, K_OTHER } kind_t;

/* One member a route reads: its getter, whether it is required, an integer's bounds. */
typedef struct field {
    const char *name;
    kind_t kind;
    bool required;
    long long min, max;
} field_t;

/* The routes' field lists, copied from their handlers (the allowed list of each is static
 * there): keep them in step when a route learns a field. */
typedef struct route {
    const char *name;
    field_t fields[9];
} route_t;

static const route_t routes[] = {
    {"send", /* src/product/send.c, POST /v1/send */
     {{"to", K_STRING, true},
      {"text", K_STRING, true},
      {"channels", K_OTHER},
      {"deliveryMode", K_STRING},
      {"whatsappFrom", K_STRING},
      {"sender", K_STRING},
      {"fallbackOn", K_STRING},
      {"fallbackAfterSeconds", K_INT, false, 10, 86400}}},
    {"sms", /* src/product/otp.c, POST /v1/sms */
     {{"to", K_STRING, true}, {"text", K_STRING, true}, {"sender", K_STRING}}},
    {"otp_send",
     {{"to", K_STRING, true},
      {"length", K_INT, false, OG_OTP_MIN_LEN, OG_OTP_MAX_LEN},
      {"ttlSeconds", K_INT, false, 60, 1800},
      {"template", K_STRING},
      {"sender", K_STRING}}},
    {"otp_verify", {{"reference", K_STRING}, {"to", K_STRING}, {"code", K_STRING, true}}},
    {"tenant_create", /* src/product/admin.c */
     {{"name", K_STRING, true}, {"unifiedApiEnabled", K_BOOL}, {"settings", K_OTHER}}},
    {"tenant_patch", {{"name", K_STRING}, {"unifiedApiEnabled", K_BOOL}, {"settings", K_OTHER}}},
    {"token_create", {{"name", K_STRING}, {"scopes", K_OTHER}}},
    {"test_echo", {{NULL}}}, /* src/net/ops.c: any member */
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static const char *const ctypes[] = {
    "application/json",
    "application/json; charset=utf-8",
    " Application/JSON\t;x=1",
    "application/jsonx",
    "text/plain",
    "",
    NULL,
};

#define NCTYPES (sizeof(ctypes) / sizeof(ctypes[0]))

static const og_errcode_t *const decode_codes[] = {OG_E_UNSUPPORTED_MEDIA_TYPE, OG_E_INVALID_JSON,
                                                   OG_E_UNKNOWN_FIELD, NULL};
static const og_errcode_t *const getter_codes[] = {OG_E_VALIDATION_FAILED, NULL};
static const og_errcode_t *const settings_codes[] = {OG_E_VALIDATION_FAILED, OG_E_UNKNOWN_FIELD, NULL};

/* Runs the getter of `f` on `body` and checks what it says against the member itself. */
static void get_field(json_t *body, const field_t *f)
{
    og_err_t err = {0};
    json_t *v = json_object_get(body, f->name);
    bool ok = true;
    switch (f->kind) {
    case K_STRING: {
        const char *s = "default";
        ok = og_json_get_string(body, f->name, f->required, &s, &err);
        FUZZ_CHECK(ok == (v != NULL ? json_is_string(v) : !f->required));
        if (ok && v == NULL)
            FUZZ_CHECK(strcmp(s, "default") == 0);
        if (ok && v != NULL) {
            FUZZ_CHECK(s == json_string_value(v) && fuzz_utf8_valid(s, strlen(s)));
            /* The domain check each such field goes through next. */
            size_t nchars = 0;
            og_sms_info_t info;
            if (strcmp(f->name, "to") == 0)
                (void)og_phone_e164_valid(s);
            else if (strcmp(f->name, "whatsappFrom") == 0)
                (void)og_phone_wa_from_valid(s);
            else if (strcmp(f->name, "sender") == 0)
                (void)og_phone_sender_valid(s);
            else if (strcmp(f->name, "text") == 0 && og_text_validate(s, strlen(s), &nchars))
                FUZZ_CHECK(og_sms_encode_info(s, strlen(s), &info) && info.chars == nchars);
        }
        break;
    }
    case K_INT: {
        long long n = -7;
        ok = og_json_get_int(body, f->name, f->required, f->min, f->max, &n, &err);
        FUZZ_CHECK(ok == (v != NULL ? json_is_integer(v) && json_integer_value(v) >= f->min &&
                                          json_integer_value(v) <= f->max
                                    : !f->required));
        FUZZ_CHECK(v != NULL || n == -7);
        if (ok && v != NULL)
            FUZZ_CHECK(n >= f->min && n <= f->max);
        break;
    }
    case K_BOOL: {
        bool b = false;
        ok = og_json_get_bool(body, f->name, f->required, &b, &err);
        FUZZ_CHECK(ok == (v != NULL ? json_is_boolean(v) : !f->required));
        if (ok && v != NULL)
            FUZZ_CHECK(b == json_is_true(v));
        break;
    }
    case K_OTHER:
        if (strcmp(f->name, "settings") == 0 && v != NULL && !og_settings_validate(v, &err))
            fuzz_check_error(&err, settings_codes);
        if (json_is_array(v)) { /* channels and scopes: arrays of names */
            size_t i;
            json_t *e;
            og_channel_t ch;
            json_array_foreach(v, i, e)
            {
                if (json_is_string(e) && og_channel_parse(json_string_value(e), &ch))
                    FUZZ_CHECK(strcmp(og_channel_name(ch), json_string_value(e)) == 0);
            }
        }
        return;
    }
    if (!ok) {
        fuzz_check_error(&err, getter_codes);
        FUZZ_CHECK(strcmp(err.field, f->name) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const route_t *route = &routes[data[0] % NROUTES];
    const char *ctype = ctypes[data[1] % NCTYPES];
    const char *body = (const char *)data + 2;
    size_t len = size - 2;

    const char *allowed[sizeof(route->fields) / sizeof(route->fields[0]) + 1];
    size_t nallowed = 0;
    for (; route->fields[nallowed].name != NULL; nallowed++)
        allowed[nallowed] = route->fields[nallowed].name;
    allowed[nallowed] = NULL;

    og_err_t err = {0};
    json_t *obj =
        og_json_decode(ctype, ctype ? strlen(ctype) : 0, body, len, nallowed > 0 ? allowed : NULL, &err);
    if (obj == NULL) {
        fuzz_check_error(&err, decode_codes);
        if (err.code == OG_E_UNKNOWN_FIELD) /* the field names the key, which may be "" */
            FUZZ_CHECK(nallowed > 0);
        return 0;
    }
    FUZZ_CHECK(err.code == NULL);
    FUZZ_CHECK(ctype != NULL && strstr(ctype, "pplication/") != NULL && strstr(ctype, "jsonx") == NULL);
    FUZZ_CHECK(json_is_object(obj) && og_json_depth(obj) <= OG_JSON_MAX_DEPTH);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool known = nallowed == 0;
        for (size_t i = 0; i < nallowed && !known; i++)
            known = strcmp(key, allowed[i]) == 0;
        FUZZ_CHECK(known);
    }
    for (size_t i = 0; i < nallowed; i++)
        get_field(obj, &route->fields[i]);
    json_decref(obj);
    return 0;
}
