/*
 * Tenant settings (API.md §5). Validation walks the document in schema order and stops at the
 * first fault, naming it by a dotted path from "settings" ("settings.channels.sms.senders[1]");
 * map keys chosen by the client (phone numbers) appear in the path as sent, cut to a printable
 * ASCII excerpt, so the path is always short, valid UTF-8 and safe to echo.
 */
#include "omnigate/tenants/settings.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/app/errors.h"
#include "omnigate/costs/rates.h"
#include "omnigate/http_client.h"
#include "omnigate/phone.h"

/* NULL-terminated so it doubles as the key list of settings.channels. */
static const char *const channel_names[OG_SETTINGS_CHANNELS + 1] = {"whatsapp_qr", "whatsapp_meta", "sms",
                                                                    NULL};

bool og_settings_channel_name_valid(const char *name)
{
    for (size_t i = 0; name != NULL && i < OG_SETTINGS_CHANNELS; i++)
        if (strcmp(name, channel_names[i]) == 0)
            return true;
    return false;
}

/* ---- validation ---------------------------------------------------------------------------- */

typedef char path_t[sizeof(((og_err_t *)0)->field)];

static void path_fmt(path_t out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void path_fmt(path_t out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, sizeof(path_t), fmt, ap);
    va_end(ap);
}

/* A client-chosen key as it may appear in a path: at most 32 bytes, bytes outside printable
 * ASCII (and the quote and backslash) shown as '?', "..." when cut. */
static void key_excerpt(const char *key, char out[40])
{
    size_t n = 0;
    for (; key[n] != '\0' && n < 32; n++) {
        unsigned char c = (unsigned char)key[n];
        out[n] = c > 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
    }
    strcpy(out + n, key[n] != '\0' ? "..." : "");
}

/* validation_failed for `field`, with "<field> <what>" as the message. */
static bool invalid(og_err_t *err, const char *field, const char *what)
{
    return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s %s", field, what);
}

/* Requires `obj` to be an object whose keys are all in `known` (NULL-terminated); `path` names
 * the object. */
static bool object_with_keys(const json_t *obj, const char *path, const char *const *known, og_err_t *err)
{
    if (!json_is_object(obj))
        return invalid(err, path, "must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool ok = false;
        for (size_t i = 0; known[i] != NULL && !ok; i++)
            ok = strcmp(key, known[i]) == 0;
        if (!ok) {
            path_t field;
            char ex[40];
            key_excerpt(key, ex);
            path_fmt(field, "%s.%s", path, ex);
            return og_err_fail(err, OG_E_UNKNOWN_FIELD, field, "%s is not a known setting", field);
        }
    }
    return true;
}

static bool optional_bool(const json_t *obj, const char *key, const char *path, og_err_t *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_boolean(v))
        return true;
    path_t field;
    path_fmt(field, "%s.%s", path, key);
    return invalid(err, field, "must be true or false");
}

/* Non-empty, at most `max` bytes, every byte in [A-Za-z0-9_-] (when `name_chars`), or only
 * printable ASCII without space (else). */
static bool token_chars(const char *s, size_t max, bool name_chars)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        unsigned char c = (unsigned char)s[n];
        bool ok = name_chars ? (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                   c == '_' || c == '-'
                             : c > 0x20 && c < 0x7f;
        if (!ok || n >= max)
            return false;
    }
    return n > 0;
}

static bool digits_only(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (s[n] < '0' || s[n] > '9' || n >= max)
            return false;
    return n > 0;
}

/* A pacing rate (API.md §19), optional: `v` absent, or a number from OG_SETTINGS_PACE_MIN to
 * OG_SETTINGS_PACE_MAX; `field` names it. */
static bool optional_pace(const json_t *v, const char *field, og_err_t *err)
{
    if (v == NULL || (json_is_number(v) && json_number_value(v) >= OG_SETTINGS_PACE_MIN &&
                      json_number_value(v) <= OG_SETTINGS_PACE_MAX))
        return true;
    return invalid(err, field, "must be a number from 0.01 to 100000");
}

/* The secret member `key` of `obj` (`path` names obj, `noun` names the secret in messages):
 * required, 1-1024 printable ASCII characters without spaces (it goes into an HTTP header or keys
 * an HMAC), or a well-formed sealed value, kept as it is (settings.h). */
static bool secret_member(const json_t *obj, const char *key, const char *path, const char *noun,
                          og_err_t *err)
{
    path_t field;
    path_fmt(field, "%s.%s", path, key);
    json_t *tv = json_object_get(obj, key);
    const char *tok = json_string_value(tv);
    if (og_seal_is_sealed(tok)) {
        if (!og_seal_well_formed(tok, json_string_length(tv)))
            return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                               "%s is not a well-formed sealed value; send the clear %s", field, noun);
        return true;
    }
    if (tok == NULL || !token_chars(tok, OG_SETTINGS_SECRET_MAX, false))
        return invalid(err, field, "must be a string of 1-1024 printable ASCII characters without spaces");
    /* A masked value can only come from echoing a GET back where no stored secret matched it
     * (og_settings_merge_patch): storing it would break the channel silently. */
    if (strncmp(tok, "****", 4) == 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s is a masked value; send the full %s",
                           field, noun);
    return true;
}

/* The baseUrl member of an own account (`path` names the account): an absolute http:// or
 * https:// URL with a host, as libcurl, which will call it, reads it (og_hc_url_parts); no user
 * or password (the credentials are members of their own, sent as the provider wants them), no
 * query or fragment (the provider's paths are appended to it). Optional unless `required`. */
static bool base_url_member(const json_t *obj, const char *path, bool required, og_err_t *err)
{
    path_t field;
    path_fmt(field, "%s.baseUrl", path);
    json_t *v = json_object_get(obj, "baseUrl");
    if (v == NULL && !required)
        return true;
    const char *url = json_string_value(v);
    size_t n = url != NULL ? json_string_length(v) : 0;
    bool ascii = n > 0 && n <= OG_SETTINGS_BASE_URL_MAX;
    for (size_t i = 0; ascii && i < n; i++)
        ascii = (unsigned char)url[i] > 0x20 && (unsigned char)url[i] < 0x7f;
    char scheme[16], host[256];
    bool credentials = false;
    if (!ascii || !og_hc_url_parts(url, scheme, sizeof(scheme), host, sizeof(host), &credentials) ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        return invalid(
            err, field,
            "must be an http:// or https:// URL with a host, at most 2048 printable ASCII characters");
    if (credentials)
        return invalid(err, field, "must not carry a user name or password");
    if (strpbrk(url, "?#") != NULL)
        return invalid(err, field,
                       "must not have a query or a fragment: the provider's paths are appended to it");
    return true;
}

/* channels.whatsapp_qr.server (API.md §23): the tenant's own WAHA server. */
static bool qr_server(const json_t *srv, const char *path, og_err_t *err)
{
    static const char *const keys[] = {"baseUrl", "apiKey", "webhookSecret", NULL};
    return object_with_keys(srv, path, keys, err) && base_url_member(srv, path, true, err) &&
           secret_member(srv, "apiKey", path, "API key", err) &&
           secret_member(srv, "webhookSecret", path, "webhook secret", err);
}

/* channels.sms.account (API.md §23): the tenant's own Twilio account. */
static bool sms_account(const json_t *acct, og_err_t *err)
{
    static const char *const keys[] = {"accountSid", "authToken", "baseUrl", NULL};
    static const char path[] = "settings.channels.sms.account";
    if (!object_with_keys(acct, path, keys, err))
        return false;
    const char *sid = json_string_value(json_object_get(acct, "accountSid"));
    if (sid == NULL || !token_chars(sid, OG_SETTINGS_ACCOUNT_SID_MAX, true))
        return invalid(err, "settings.channels.sms.account.accountSid",
                       "must be a string of 1-64 letters, digits, _ or - (Twilio's: AC and 32 hex digits)");
    return secret_member(acct, "authToken", path, "auth token", err) &&
           base_url_member(acct, path, false, err);
}

/* The per-number object of a WhatsApp channel; `path` names it. */
typedef bool (*number_check_fn)(const json_t *num, const char *path, og_err_t *err);

static bool qr_number(const json_t *num, const char *path, og_err_t *err)
{
    static const char *const keys[] = {"session", "messagesPerMinute", NULL};
    if (!object_with_keys(num, path, keys, err))
        return false;
    path_t field;
    path_fmt(field, "%s.session", path);
    const char *s = json_string_value(json_object_get(num, "session"));
    if (s == NULL || !token_chars(s, OG_SETTINGS_SESSION_MAX, true))
        return invalid(err, field, "must be a string of 1-64 letters, digits, _ or -");
    path_fmt(field, "%s.messagesPerMinute", path);
    return optional_pace(json_object_get(num, "messagesPerMinute"), field, err);
}

static bool meta_number(const json_t *num, const char *path, og_err_t *err)
{
    static const char *const keys[] = {"phoneNumberId", "accessToken", "wabaId", "messagesPerSecond", NULL};
    if (!object_with_keys(num, path, keys, err))
        return false;
    path_t field;
    path_fmt(field, "%s.phoneNumberId", path);
    const char *id = json_string_value(json_object_get(num, "phoneNumberId"));
    if (id == NULL || !digits_only(id, OG_SETTINGS_PHONE_ID_MAX))
        return invalid(err, field, "must be a string of 1-32 digits");
    json_t *waba = json_object_get(num, "wabaId");
    path_fmt(field, "%s.wabaId", path);
    if (waba != NULL &&
        (!json_is_string(waba) || !digits_only(json_string_value(waba), OG_SETTINGS_PHONE_ID_MAX)))
        return invalid(err, field, "must be a string of 1-32 digits");
    path_fmt(field, "%s.messagesPerSecond", path);
    if (!optional_pace(json_object_get(num, "messagesPerSecond"), field, err))
        return false;
    return secret_member(num, "accessToken", path, "access token", err);
}

bool og_settings_template_name_valid(const char *name)
{
    size_t n = 0;
    for (; name != NULL && name[n] != '\0'; n++) {
        char c = name[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') ||
            n >= OG_SETTINGS_TEMPLATE_NAME_MAX)
            return false;
    }
    return n > 0;
}

bool og_settings_template_language_valid(const char *lang)
{
    size_t n = 0;
    for (; lang != NULL && lang[n] != '\0'; n++) {
        char c = lang[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') || n >= OG_SETTINGS_LANGUAGE_MAX)
            return false;
    }
    return n >= 2;
}

/* A {"name", "language"} reference to a template of the catalogue; `path` names it. */
static bool template_ref(const json_t *ref, const char *path, og_err_t *err)
{
    static const char *const keys[] = {"name", "language", NULL};
    if (!object_with_keys(ref, path, keys, err))
        return false;
    path_t field;
    path_fmt(field, "%s.name", path);
    if (!og_settings_template_name_valid(json_string_value(json_object_get(ref, "name"))))
        return invalid(err, field, "must be a template name: 1-512 lowercase letters, digits or _");
    path_fmt(field, "%s.language", path);
    if (!og_settings_template_language_valid(json_string_value(json_object_get(ref, "language"))))
        return invalid(err, field, "must be a language code such as en or en_US");
    return true;
}

/* outsideWindow and windowTemplate of the Meta channel (API.md §18). */
static bool meta_window(const json_t *ch, const char *path, og_err_t *err)
{
    path_t field;
    json_t *ow = json_object_get(ch, "outsideWindow");
    path_fmt(field, "%s.outsideWindow", path);
    const char *mode = json_string_value(ow);
    if (ow != NULL && (mode == NULL || (strcmp(mode, "send") != 0 && strcmp(mode, "skip") != 0 &&
                                        strcmp(mode, "template") != 0)))
        return invalid(err, field, "must be send, skip or template");
    json_t *wt = json_object_get(ch, "windowTemplate");
    path_fmt(field, "%s.windowTemplate", path);
    if (wt != NULL && !template_ref(wt, field, err))
        return false;
    if (mode != NULL && strcmp(mode, "template") == 0 && wt == NULL)
        return invalid(err, field, "is required when outsideWindow is template");
    return true;
}

static bool wa_channel(const json_t *ch, const char *name, number_check_fn check, og_err_t *err)
{
    static const char *const keys[] = {"enabled", "numbers", "server", NULL};
    static const char *const meta_keys[] = {"enabled", "numbers", "outsideWindow", "windowTemplate", NULL};
    bool meta = strcmp(name, "whatsapp_meta") == 0;
    path_t path, npath, field;
    path_fmt(path, "settings.channels.%s", name);
    if (!object_with_keys(ch, path, meta ? meta_keys : keys, err) || !optional_bool(ch, "enabled", path, err))
        return false;
    if (meta && !meta_window(ch, path, err))
        return false;
    json_t *server = json_object_get(ch, "server");
    path_fmt(field, "%s.server", path);
    if (server != NULL && !qr_server(server, field, err))
        return false;
    json_t *numbers = json_object_get(ch, "numbers");
    if (numbers == NULL)
        return true;
    path_fmt(npath, "%s.numbers", path);
    if (!json_is_object(numbers))
        return invalid(err, npath, "must be an object keyed by phone number");
    const char *key;
    json_t *v;
    json_object_foreach(numbers, key, v)
    {
        char ex[40];
        key_excerpt(key, ex);
        path_fmt(field, "%s.%s", npath, ex);
        if (!og_phone_wa_from_valid(key))
            return invalid(err, field, "is not a phone number: 8-15 digits, the first 1-9, no +");
        if (!check(v, field, err))
            return false;
    }
    return true;
}

/* channels.sms.messagesPerSecond (API.md §19): sender id -> rate, optional. A sender need not be
 * in senders: removing one from the list must not make the rates refuse the whole document. */
static bool sms_rates(const json_t *rates, og_err_t *err)
{
    static const char path[] = "settings.channels.sms.messagesPerSecond";
    if (rates == NULL)
        return true;
    if (!json_is_object(rates))
        return invalid(err, path, "must be an object keyed by sender id");
    const char *key;
    json_t *v;
    path_t field;
    json_object_foreach((json_t *)rates, key, v)
    {
        char ex[40];
        key_excerpt(key, ex);
        path_fmt(field, "%s.%s", path, ex);
        if (!og_phone_sender_valid(key))
            return invalid(
                err, field,
                "is not a sender id: 1-11 letters, digits or spaces with at least one letter, up to "
                "15 digits, or + and 8-15 digits");
        if (!optional_pace(v, field, err))
            return false;
    }
    return true;
}

/* channels.sms.inboundNumbers (API.md §21): the numbers whose inbound SMS are the tenant's,
 * optional: distinct E.164 numbers, at most OG_SETTINGS_INBOUND_MAX. */
static bool inbound_numbers(const json_t *nums, og_err_t *err)
{
    static const char path[] = "settings.channels.sms.inboundNumbers";
    if (nums == NULL)
        return true;
    if (!json_is_array(nums) || json_array_size(nums) > OG_SETTINGS_INBOUND_MAX)
        return invalid(err, path, "must be an array of at most 100 E.164 numbers");
    size_t i;
    json_t *v;
    path_t field;
    json_array_foreach((json_t *)nums, i, v)
    {
        path_fmt(field, "%s[%zu]", path, i);
        if (!og_phone_e164_valid(json_string_value(v)))
            return invalid(err, field, "must be an E.164 number: + then 8-15 digits, the first 1-9");
        for (size_t k = 0; k < i; k++)
            if (strcmp(json_string_value(v), json_string_value(json_array_get(nums, k))) == 0)
                return invalid(err, field, "repeats an earlier number");
    }
    return true;
}

static bool sms_channel(const json_t *ch, og_err_t *err)
{
    static const char *const keys[] = {
        "enabled", "senders", "defaultSender", "messagesPerSecond", "inboundNumbers", "account", NULL};
    static const char path[] = "settings.channels.sms";
    path_t field;
    if (!object_with_keys(ch, path, keys, err) || !optional_bool(ch, "enabled", path, err))
        return false;
    json_t *account = json_object_get(ch, "account");
    if (account != NULL && !sms_account(account, err))
        return false;
    json_t *senders = json_object_get(ch, "senders");
    if (senders != NULL && !json_is_array(senders))
        return invalid(err, "settings.channels.sms.senders", "must be an array of sender ids");
    size_t i;
    json_t *v;
    json_array_foreach(senders, i, v)
    {
        path_fmt(field, "%s.senders[%zu]", path, i);
        const char *s = json_string_value(v);
        if (s == NULL || !og_phone_sender_valid(s))
            return invalid(err, field,
                           "must be a sender id: 1-11 letters, digits or spaces with at least one letter, "
                           "up to 15 digits, or + and 8-15 digits");
        for (size_t k = 0; k < i; k++)
            if (strcmp(s, json_string_value(json_array_get(senders, k))) == 0)
                return invalid(err, field, "repeats an earlier sender");
    }
    json_t *def = json_object_get(ch, "defaultSender");
    if (def != NULL) {
        const char *d = json_string_value(def);
        bool found = false;
        json_array_foreach(senders, i, v)
        {
            if (d != NULL && strcmp(d, json_string_value(v)) == 0)
                found = true;
        }
        if (!found)
            return invalid(err, "settings.channels.sms.defaultSender",
                           "must be one of settings.channels.sms.senders");
    }
    return sms_rates(json_object_get(ch, "messagesPerSecond"), err) &&
           inbound_numbers(json_object_get(ch, "inboundNumbers"), err);
}

static bool validate_channels(const json_t *chs, og_err_t *err)
{
    if (!object_with_keys(chs, "settings.channels", channel_names, err))
        return false;
    json_t *v;
    if ((v = json_object_get(chs, "whatsapp_qr")) != NULL && !wa_channel(v, "whatsapp_qr", qr_number, err))
        return false;
    if ((v = json_object_get(chs, "whatsapp_meta")) != NULL &&
        !wa_channel(v, "whatsapp_meta", meta_number, err))
        return false;
    if ((v = json_object_get(chs, "sms")) != NULL && !sms_channel(v, err))
        return false;
    return true;
}

static bool validate_default_channels(const json_t *dc, og_err_t *err)
{
    static const char path[] = "settings.defaultChannels";
    if (!json_is_array(dc) || json_array_size(dc) == 0)
        return invalid(err, path, "must be a non-empty array of whatsapp_qr, whatsapp_meta, sms");
    size_t i;
    json_t *v;
    path_t field;
    json_array_foreach(dc, i, v)
    {
        path_fmt(field, "%s[%zu]", path, i);
        if (!og_settings_channel_name_valid(json_string_value(v)))
            return invalid(err, field, "must be one of whatsapp_qr, whatsapp_meta, sms");
        for (size_t k = 0; k < i; k++)
            if (strcmp(json_string_value(v), json_string_value(json_array_get(dc, k))) == 0)
                return invalid(err, field, "repeats an earlier channel");
    }
    return true;
}

bool og_settings_validate(json_t *settings, og_err_t *err)
{
    static const char *const keys[] = {
        "defaultChannels", "defaultWhatsappFrom", "rateLimitPerSecond", "channels", "otp", "rates", NULL};
    static const char *const otp_keys[] = {"whatsappTemplate", NULL};
    if (!object_with_keys(settings, "settings", keys, err))
        return false;
    json_t *v;
    if ((v = json_object_get(settings, "defaultChannels")) != NULL && !validate_default_channels(v, err))
        return false;
    if ((v = json_object_get(settings, "defaultWhatsappFrom")) != NULL &&
        !og_phone_wa_from_valid(json_string_value(v)))
        return invalid(err, "settings.defaultWhatsappFrom",
                       "must be a phone number: 8-15 digits, the first 1-9, no +");
    if ((v = json_object_get(settings, "rateLimitPerSecond")) != NULL &&
        (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > OG_SETTINGS_RATE_MAX))
        return invalid(err, "settings.rateLimitPerSecond", "must be an integer from 1 to 1000000");
    if ((v = json_object_get(settings, "channels")) != NULL && !validate_channels(v, err))
        return false;
    if ((v = json_object_get(settings, "otp")) != NULL) {
        json_t *wt = json_object_get(v, "whatsappTemplate");
        if (!object_with_keys(v, "settings.otp", otp_keys, err) ||
            (wt != NULL && !template_ref(wt, "settings.otp.whatsappTemplate", err)))
            return false;
    }
    /* The tenant's rate card (API.md §22): costs/rates.h checks it as the global one. */
    if ((v = json_object_get(settings, "rates")) != NULL) {
        og_rate_card_t card;
        if (!og_rate_card_parse(v, "settings.rates", &card, err))
            return false;
        og_rate_card_clear(&card);
    }
    return true;
}

/* ---- secrets: masking, sealing, opening ---------------------------------------------------- */

#define MASKED_SIZE (4 + 4 * 4 + 1) /* "****" + up to 4 UTF-8 characters + NUL */

/* The masked form of a secret: "****" + its last 4 characters when it has at least 12, else
 * "****". Characters are code points, so a non-ASCII secret is never cut mid-character. A sealed
 * value (one that did not open) shows nothing: its tail is ciphertext. */
static void mask_secret(const json_t *secret, char out[MASKED_SIZE])
{
    memcpy(out, "****", 5);
    const char *s = json_string_value(secret);
    if (s == NULL || og_seal_is_sealed(s))
        return;
    size_t len = json_string_length(secret), chars = 0, tail = len;
    for (size_t i = 0; i < len; i++)
        chars += ((unsigned char)s[i] & 0xC0) != 0x80;
    if (chars < 12)
        return;
    for (int k = 0; k < 4; k++)
        do
            tail--;
        while (tail > 0 && ((unsigned char)s[tail] & 0xC0) == 0x80);
    if (len - tail > MASKED_SIZE - 5)
        return; /* not UTF-8 after all (jansson strings are): show nothing rather than overflow */
    memcpy(out + 4, s + tail, len - tail);
    out[4 + len - tail] = '\0';
}

/* The names of the secret members (settings.h): a Meta number's token, the own SMS account's
 * token, the own WAHA server's key and webhook secret. */
static bool secret_key(const char *key)
{
    return strcmp(key, "accessToken") == 0 || strcmp(key, "authToken") == 0 || strcmp(key, "apiKey") == 0 ||
           strcmp(key, "webhookSecret") == 0;
}

/* What to do with one secret: the member at `it` of object `obj`, which it may replace with
 * json_object_iter_set_new. False stops the walk (out of memory). */
typedef bool (*secret_fn)(json_t *obj, void *it, void *ctx);

/* Calls fn on every secret (a member named as secret_key says, at any depth) under `v`. */
static bool each_secret(json_t *v, secret_fn fn, void *ctx)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!each_secret(e, fn, ctx))
                return false;
        }
        return true;
    }
    if (!json_is_object(v))
        return true;
    for (void *it = json_object_iter(v); it != NULL; it = json_object_iter_next(v, it)) {
        bool ok = secret_key(json_object_iter_key(it)) ? fn(v, it, ctx)
                                                       : each_secret(json_object_iter_value(it), fn, ctx);
        if (!ok)
            return false;
    }
    return true;
}

static bool mask_one(json_t *obj, void *it, void *ctx)
{
    (void)ctx;
    char masked[MASKED_SIZE];
    mask_secret(json_object_iter_value(it), masked);
    return json_object_iter_set_new(obj, it, json_string(masked)) == 0;
}

json_t *og_settings_mask(const json_t *settings)
{
    json_t *copy = json_deep_copy(settings);
    if (copy != NULL && !each_secret(copy, mask_one, NULL)) {
        json_decref(copy);
        return NULL;
    }
    return copy;
}

/* RFC 7396 MergePatch(target, patch), consuming the reference to `target` (NULL: absent) and
 * returning a new one, or NULL when out of memory. Objects of `target` are changed in place:
 * the caller owns a private deep copy. */
static json_t *merge(json_t *target, const json_t *patch)
{
    if (!json_is_object(patch)) {
        json_decref(target);
        return json_deep_copy(patch);
    }
    if (!json_is_object(target)) {
        json_decref(target);
        target = json_object();
        if (target == NULL)
            return NULL;
    }
    const char *key;
    json_t *pv;
    json_object_foreach((json_t *)patch, key, pv)
    {
        if (json_is_null(pv)) {
            json_object_del(target, key);
            continue;
        }
        json_t *tv = json_object_get(target, key);
        if (secret_key(key) && json_is_string(pv) && json_is_string(tv)) {
            char masked[MASKED_SIZE];
            mask_secret(tv, masked);
            if (strcmp(masked, json_string_value(pv)) == 0)
                continue; /* the client sent back what GET showed: keep the secret */
        }
        json_t *nv = merge(json_incref(tv), pv);
        if (nv == NULL || json_object_set_new(target, key, nv) != 0) {
            json_decref(target);
            return NULL;
        }
    }
    return target;
}

json_t *og_settings_merge_patch(const json_t *stored, const json_t *patch)
{
    json_t *copy = NULL;
    if (stored != NULL && (copy = json_deep_copy(stored)) == NULL)
        return NULL;
    if (patch == NULL)
        return copy != NULL ? copy : json_object();
    return merge(copy, patch);
}

/* The key, the associated data and the count of og_settings_seal and og_settings_open. */
typedef struct seal_ctx {
    const og_seal_key_t *key;
    const char *tenant_id;
    int count;
} seal_ctx_t;

static bool seal_one(json_t *obj, void *it, void *arg)
{
    seal_ctx_t *c = arg;
    json_t *v = json_object_iter_value(it);
    const char *s = json_string_value(v);
    if (s == NULL || og_seal_is_sealed(s))
        return true;
    char *sealed = og_seal(c->key, c->tenant_id, s, json_string_length(v));
    bool ok = sealed != NULL && json_object_iter_set_new(obj, it, json_string(sealed)) == 0;
    free(sealed);
    c->count++;
    return ok;
}

bool og_settings_key(og_seal_key_t *key, const char *secret)
{
    return og_seal_key_derive(key, secret, secret != NULL ? strlen(secret) : 0, OG_SETTINGS_SEAL_INFO);
}

int og_settings_seal(json_t *settings, const og_seal_key_t *key, const char *tenant_id)
{
    seal_ctx_t c = {key, tenant_id, 0};
    return each_secret(settings, seal_one, &c) ? c.count : -1;
}

static bool open_one(json_t *obj, void *it, void *arg)
{
    seal_ctx_t *c = arg;
    json_t *v = json_object_iter_value(it);
    if (!og_seal_is_sealed(json_string_value(v)))
        return true;
    char *plain = NULL;
    size_t len = 0;
    json_t *clear = NULL;
    if (og_seal_open(c->key, c->tenant_id, json_string_value(v), json_string_length(v), &plain, &len) ==
        OG_SEAL_OK)
        clear = json_stringn(plain, len); /* NULL unless valid UTF-8: then it stays sealed */
    og_seal_free_plain(plain, len);
    if (clear == NULL || json_object_iter_set_new(obj, it, clear) != 0)
        c->count++;
    return true;
}

int og_settings_open(json_t *settings, const og_seal_key_t *key, const char *tenant_id, og_log_t *log)
{
    seal_ctx_t c = {key, tenant_id, 0};
    each_secret(settings, open_one, &c);
    if (c.count > 0 && log != NULL)
        og_log(log, OG_LOG_WARN,
               "a sealed credential in the tenant's settings does not open with this OMNIGATE_SECRET: its "
               "channel fails not_configured until the credential is set again",
               "\"tenantId\":\"%s\",\"credentials\":%d", tenant_id, c.count);
    return c.count;
}

json_t *og_settings_defaults(void)
{
    return json_pack("{s:[sss],s:{}}", "defaultChannels", channel_names[0], channel_names[1],
                     channel_names[2], "channels");
}

/* ---- getters ----------------------------------------------------------------------------- */

static json_t *channel(const json_t *settings, const char *name)
{
    return json_object_get(json_object_get(settings, "channels"), name);
}

bool og_settings_channel_enabled(const json_t *settings, const char *name)
{
    return og_settings_channel_name_valid(name) &&
           json_is_true(json_object_get(channel(settings, name), "enabled"));
}

size_t og_settings_default_channels(const json_t *settings, const char *out[OG_SETTINGS_CHANNELS])
{
    size_t n = 0, i;
    json_t *v;
    json_array_foreach(json_object_get(settings, "defaultChannels"), i, v)
    {
        const char *name = json_string_value(v);
        if (n < OG_SETTINGS_CHANNELS && og_settings_channel_name_valid(name))
            out[n++] = name;
    }
    if (n == 0)
        for (; n < OG_SETTINGS_CHANNELS; n++)
            out[n] = channel_names[n];
    return n;
}

const char *og_settings_default_whatsapp_from(const json_t *settings)
{
    return json_string_value(json_object_get(settings, "defaultWhatsappFrom"));
}

bool og_settings_wa_number(const json_t *settings, const char *name, const char *from,
                           og_settings_wa_number_t *out)
{
    memset(out, 0, sizeof(*out));
    if (name == NULL || from == NULL)
        return false;
    json_t *num = json_object_get(json_object_get(channel(settings, name), "numbers"), from);
    if (!json_is_object(num))
        return false;
    if (strcmp(name, "whatsapp_qr") == 0) {
        out->session = json_string_value(json_object_get(num, "session"));
        if (out->session != NULL)
            return true;
    } else if (strcmp(name, "whatsapp_meta") == 0) {
        out->phone_number_id = json_string_value(json_object_get(num, "phoneNumberId"));
        out->waba_id = json_string_value(json_object_get(num, "wabaId"));
        out->access_token = json_string_value(json_object_get(num, "accessToken"));
        if (og_seal_is_sealed(out->access_token)) {
            out->access_token = NULL;
            out->access_token_sealed = true;
        }
        if (out->phone_number_id != NULL && (out->access_token != NULL || out->access_token_sealed))
            return true;
    }
    memset(out, 0, sizeof(*out));
    return false;
}

bool og_settings_qr_session_used(const json_t *settings, const char *name)
{
    const char *key;
    json_t *n;
    json_object_foreach(json_object_get(channel(settings, "whatsapp_qr"), "numbers"), key, n)
    {
        const char *s = json_string_value(json_object_get(n, "session"));
        if (strcmp(s != NULL ? s : OG_WAHA_DEFAULT_SESSION, name) == 0)
            return true;
    }
    return false;
}

bool og_settings_provider_account(const json_t *settings, og_channel_t ch, og_provider_account_t *out)
{
    memset(out, 0, sizeof(*out));
    json_t *acct = NULL;
    if (ch == OG_CH_SMS)
        acct = json_object_get(channel(settings, "sms"), "account");
    else if (ch == OG_CH_WHATSAPP_QR)
        acct = json_object_get(channel(settings, "whatsapp_qr"), "server");
    if (!json_is_object(acct))
        return false;
    out->own = true;
    out->base_url = json_string_value(json_object_get(acct, "baseUrl"));
    const char *secret;
    if (ch == OG_CH_SMS) {
        out->id = json_string_value(json_object_get(acct, "accountSid"));
        secret = json_string_value(json_object_get(acct, "authToken"));
    } else {
        secret = json_string_value(json_object_get(acct, "apiKey"));
        out->hook_secret = json_string_value(json_object_get(acct, "webhookSecret"));
        if (og_seal_is_sealed(out->hook_secret))
            out->hook_secret = NULL;
    }
    if (og_seal_is_sealed(secret)) {
        out->sealed = true;
        secret = NULL;
    }
    out->secret = secret;
    return true;
}

bool og_settings_sms_sender_approved(const json_t *settings, const char *sender)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(channel(settings, "sms"), "senders"), i, v)
    {
        const char *s = json_string_value(v);
        if (sender != NULL && s != NULL && strcmp(s, sender) == 0)
            return true;
    }
    return false;
}

bool og_settings_sms_sender(const json_t *settings, const char *requested, char *out, size_t outlen,
                            og_err_t *err)
{
    const char *sender = requested;
    if (sender != NULL) {
        if (!og_phone_sender_valid(sender))
            return og_err_fail(
                err, OG_E_VALIDATION_FAILED, "sender",
                "sender must be 1-11 letters, digits or spaces, or a number of up to 15 digits");
        if (!og_settings_sms_sender_approved(settings, sender))
            return og_err_fail(err, OG_E_SENDER_NOT_APPROVED, "sender",
                               "sender %s is not on the tenant's approved list", sender);
    } else if ((sender = og_settings_sms_default_sender(settings)) == NULL) {
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "sender",
                           "sender is required: the tenant has no default sender");
    }
    snprintf(out, outlen, "%s", sender);
    return true;
}

const char *og_settings_sms_default_sender(const json_t *settings)
{
    return json_string_value(json_object_get(channel(settings, "sms"), "defaultSender"));
}

uint32_t og_settings_rate_limit(const json_t *settings)
{
    json_t *v = json_object_get(settings, "rateLimitPerSecond");
    json_int_t r = json_is_integer(v) ? json_integer_value(v) : 0;
    return r >= 1 && r <= OG_SETTINGS_RATE_MAX ? (uint32_t)r : 0;
}

double og_settings_sender_rate(const json_t *settings, const char *name, const char *from)
{
    if (name == NULL || from == NULL)
        return 0;
    json_t *ch = channel(settings, name), *v = NULL;
    if (strcmp(name, "whatsapp_meta") == 0)
        v = json_object_get(json_object_get(json_object_get(ch, "numbers"), from), "messagesPerSecond");
    else if (strcmp(name, "whatsapp_qr") == 0)
        v = json_object_get(json_object_get(json_object_get(ch, "numbers"), from), "messagesPerMinute");
    else if (strcmp(name, "sms") == 0)
        v = json_object_get(json_object_get(ch, "messagesPerSecond"), from);
    double r = json_is_number(v) ? json_number_value(v) : 0;
    return r >= OG_SETTINGS_PACE_MIN && r <= OG_SETTINGS_PACE_MAX ? r : 0;
}

og_settings_outside_window_t og_settings_outside_window(const json_t *settings)
{
    const char *m = json_string_value(json_object_get(channel(settings, "whatsapp_meta"), "outsideWindow"));
    if (m != NULL && strcmp(m, "skip") == 0)
        return OG_OUTSIDE_WINDOW_SKIP;
    if (m != NULL && strcmp(m, "template") == 0)
        return OG_OUTSIDE_WINDOW_TEMPLATE;
    return OG_OUTSIDE_WINDOW_SEND;
}

/* name and language of a validated template reference, or false. */
static bool template_of(const json_t *ref, const char **name, const char **language)
{
    *name = json_string_value(json_object_get(ref, "name"));
    *language = json_string_value(json_object_get(ref, "language"));
    return *name != NULL && *language != NULL;
}

bool og_settings_window_template(const json_t *settings, const char **name, const char **language)
{
    return template_of(json_object_get(channel(settings, "whatsapp_meta"), "windowTemplate"), name, language);
}

bool og_settings_otp_whatsapp_template(const json_t *settings, const char **name, const char **language)
{
    return template_of(json_object_get(json_object_get(settings, "otp"), "whatsappTemplate"), name, language);
}
