/*
 * Checks the harnesses share. See fuzz.h.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "omnigate/api.h"
#include "omnigate/app/errors.h"
#include "omnigate/phone.h"

void fuzz_check_error(const og_err_t *err, const og_errcode_t *const *codes)
{
    FUZZ_CHECK(err->code != NULL);
    bool known = false;
    for (size_t i = 0; codes[i] != NULL && !known; i++)
        known = err->code == codes[i];
    if (!known)
        fprintf(stderr, "unexpected error code %s (field \"%s\": %s)\n", err->code->name, err->field,
                err->message);
    FUZZ_CHECK(known);
    int status = og_api_status(err->code);
    FUZZ_CHECK(status >= 400 && status < 500);
    FUZZ_CHECK(memchr(err->field, '\0', sizeof(err->field)) != NULL);
    FUZZ_CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);

    size_t len = 0;
    char *text = og_api_envelope(status, err->message, NULL, err, NULL, &len);
    FUZZ_CHECK(text != NULL);
    json_error_t jerr;
    json_t *env = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    FUZZ_CHECK(env != NULL);
    json_t *error = json_object_get(env, "error");
    FUZZ_CHECK(json_is_false(json_object_get(env, "success")));
    FUZZ_CHECK(json_is_string(json_object_get(env, "message")));
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(error, "code")), err->code->name) == 0);
    /* The field goes out as it is when it is valid UTF-8 (a client-chosen key may not be). */
    const char *field = json_string_value(json_object_get(error, "field"));
    FUZZ_CHECK((field != NULL) == (err->field[0] != '\0'));
    if (field != NULL && fuzz_utf8_valid(err->field, strlen(err->field)))
        FUZZ_CHECK(strcmp(field, err->field) == 0);
    json_decref(env);
    free(text);
}

bool fuzz_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (n == 0 || i + n > len)
            return false;
        unsigned cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n;
    }
    return true;
}

static bool one_of(const char *s, const char *const *list)
{
    for (; s != NULL && *list != NULL; list++)
        if (strcmp(s, *list) == 0)
            return true;
    return false;
}

/* What a status and an inbound message of a parser share: an object of only the keys `keys`,
 * on `channel`, a provider message id under 128 bytes, a finite time. */
static void check_item(json_t *m, const char *const *keys, const char *channel)
{
    FUZZ_CHECK(json_is_object(m));
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v)
    {
        FUZZ_CHECK(one_of(key, keys));
    }
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(m, "channel")), channel) == 0);
    const char *pid = json_string_value(json_object_get(m, "pid"));
    FUZZ_CHECK(pid != NULL && pid[0] != '\0' && strlen(pid) < 128);
    json_t *at = json_object_get(m, "at");
    FUZZ_CHECK(json_is_number(at) && isfinite(json_number_value(at)) && json_number_value(at) >= 0);
}

/* The array serializes, as the route does before recording it. */
static void check_serializes(json_t *items)
{
    char *text = json_dumps(items, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    free(text);
}

void fuzz_check_inbound(json_t *items, const char *channel)
{
    static const char *const keys[] = {"channel", "pid",           "from",    "route", "number", "type",
                                       "text",    "phoneNumberId", "session", "at",    NULL};
    FUZZ_CHECK(json_is_array(items));
    size_t i;
    json_t *m;
    json_array_foreach(items, i, m)
    {
        check_item(m, keys, channel);
        const char *key;
        json_t *v;
        json_object_foreach(m, key, v)
        {
            FUZZ_CHECK(strcmp(key, "at") == 0 || json_is_string(v));
        }
        FUZZ_CHECK(og_phone_e164_valid(json_string_value(json_object_get(m, "from"))));
        const char *route = json_string_value(json_object_get(m, "route"));
        FUZZ_CHECK(route != NULL && route[0] != '\0' && strlen(route) <= 64);
        const char *type = json_string_value(json_object_get(m, "type"));
        FUZZ_CHECK(type != NULL && type[0] != '\0' && strlen(type) <= 32 &&
                   strspn(type, "abcdefghijklmnopqrstuvwxyz_") == strlen(type));
    }
    check_serializes(items);
}

void fuzz_check_statuses(json_t *statuses, const char *channel)
{
    static const char *const known_status[] = {"sent", "delivered", "read", "failed", "undelivered", NULL};
    static const char *const delivery_errors[] = {"not_on_whatsapp",  "outside_window", "recipient_opted_out",
                                                  "carrier_rejected", "provider_error", NULL};
    static const char *const keys[] = {"channel", "pid", "status", "at", "code", "error", "message", NULL};
    FUZZ_CHECK(json_is_array(statuses));
    size_t i;
    json_t *s;
    json_array_foreach(statuses, i, s)
    {
        check_item(s, keys, channel);
        const char *status = json_string_value(json_object_get(s, "status"));
        FUZZ_CHECK(one_of(status, known_status));
        bool failure = strcmp(status, "failed") == 0 || strcmp(status, "undelivered") == 0;
        FUZZ_CHECK(failure == one_of(json_string_value(json_object_get(s, "error")), delivery_errors));
        json_t *code = json_object_get(s, "code");
        FUZZ_CHECK(code == NULL || (failure && json_is_string(code) && strlen(json_string_value(code)) < 32));
        json_t *message = json_object_get(s, "message");
        FUZZ_CHECK(message == NULL ||
                   (failure && json_is_string(message) && json_string_length(message) < 256));
    }
    check_serializes(statuses);
}

json_t *fuzz_webhook_parse(og_webhook_parse_fn parse, const char *channel, size_t max,
                           const og_errcode_t *const *codes, const char *body, size_t size)
{
    og_err_t err = {0};
    json_t *statuses = parse(body, size, FUZZ_NOW, &err);
    if (statuses == NULL) {
        fuzz_check_error(&err, codes);
    } else {
        fuzz_check_statuses(statuses, channel);
        FUZZ_CHECK(json_array_size(statuses) <= max);
    }
    return statuses;
}

void fuzz_webhook_json(og_webhook_parse_fn parse, const char *channel, size_t max, og_hmac_alg_t alg,
                       const uint8_t *data, size_t size)
{
    static const og_errcode_t *const codes[] = {OG_E_INVALID_JSON, OG_E_INVALID_PAYLOAD, NULL};
    const char *body = (const char *)data;
    json_decref(fuzz_webhook_parse(parse, channel, max, codes, body, size));

    static const char secret[] = "webhook-secret";
    const void *parts[] = {body};
    size_t lens[] = {size};
    unsigned char mac[OG_HMAC_MAX];
    char hex[2 * OG_HMAC_MAX + 1];
    size_t n = og_hmac(alg, secret, strlen(secret), parts, lens, 1, mac);
    FUZZ_CHECK(n >= 20);
    og_hex_lower(mac, n, hex);
    FUZZ_CHECK(og_hmac_check_hex(alg, secret, body, size, hex, 2 * n));
    FUZZ_CHECK(!og_hmac_check_hex(alg, secret, body, size, hex, 2 * n - 1));
    for (size_t i = 0; i < 2 * n; i++)
        hex[i] = hex[i] >= 'a' ? (char)(hex[i] - 'a' + 'A') : hex[i];
    FUZZ_CHECK(og_hmac_check_hex(alg, secret, body, size, hex, 2 * n));
    size_t k = size % (2 * n);
    hex[k] = hex[k] == '0' ? '1' : '0';
    FUZZ_CHECK(!og_hmac_check_hex(alg, secret, body, size, hex, 2 * n));
}
