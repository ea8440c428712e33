/*
 * Fuzzes tenant settings (src/product/settings.c): validation, masking of secrets, the RFC 7396
 * merge patch of PATCH /admin/tenants/{id}, and the send path's getters on valid settings.
 *
 * An input is the stored settings, then optionally a NUL byte and a patch (JSON text holds no
 * raw NUL). Without a valid stored document the patch applies to the defaults.
 *
 * Checked: a refusal names a field under "settings" with validation_failed or unknown_field;
 * the merge matches a plain RFC 7396 merge when the patch has no accessToken (the one member it
 * treats specially), applying a patch twice changes nothing more, and patching valid settings
 * with their own masked form gives them back unchanged (a client may PATCH what GET returned);
 * a masked document holds no secret; the getters stay within their documented bounds.
 */
#include <string.h>

#include "fuzz.h"
#include "omnigate/app/errors.h"
#include "omnigate/tenants/settings.h"

static const og_errcode_t *const settings_codes[] = {OG_E_VALIDATION_FAILED, OG_E_UNKNOWN_FIELD, NULL};
static const og_errcode_t *const sender_codes[] = {OG_E_VALIDATION_FAILED, OG_E_SENDER_NOT_APPROVED, NULL};
static const char *const channels[] = {"whatsapp_qr", "whatsapp_meta", "sms"};

/* RFC 7396 as the RFC writes it, for comparison. A new reference. */
static json_t *merge_reference(const json_t *target, const json_t *patch)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    json_t *out = json_is_object(target) ? json_deep_copy(target) : json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)patch, key, v)
    {
        if (json_is_null(v))
            json_object_del(out, key);
        else
            json_object_set_new(out, key, merge_reference(json_object_get(out, key), v));
    }
    return out;
}

/* True when `v` holds, at any depth, a member named `name`, or (`name` NULL) a null. */
static bool holds(const json_t *v, const char *name)
{
    if (json_is_null(v))
        return name == NULL;
    const char *key;
    json_t *child;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, child)
        {
            if ((name != NULL && strcmp(key, name) == 0) || holds(child, name))
                return true;
        }
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, child)
        {
            if (holds(child, name))
                return true;
        }
    }
    return false;
}

/* Every accessToken of a masked document is "****" plus at most 4 characters. */
static void check_masked(const json_t *v)
{
    const char *key;
    json_t *child;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, child)
        {
            if (strcmp(key, "accessToken") == 0) {
                const char *t = json_string_value(child);
                FUZZ_CHECK(t != NULL && strncmp(t, "****", 4) == 0 && strlen(t) <= 4 + 4 * 4);
            } else {
                check_masked(child);
            }
        }
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, child)
        {
            check_masked(child);
        }
    }
}

/* Runs the send path's getters on valid settings. */
static void read_back(const json_t *s)
{
    const char *order[OG_SETTINGS_CHANNELS];
    size_t n = og_settings_default_channels(s, order);
    FUZZ_CHECK(n >= 1 && n <= OG_SETTINGS_CHANNELS);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(og_settings_channel_name_valid(order[i]));
    FUZZ_CHECK(og_settings_rate_limit(s) <= OG_SETTINGS_RATE_MAX);
    (void)og_settings_default_whatsapp_from(s);
    for (size_t c = 0; c < 2; c++) {
        og_settings_channel_enabled(s, channels[c]);
        json_t *numbers =
            json_object_get(json_object_get(json_object_get(s, "channels"), channels[c]), "numbers");
        const char *from;
        json_t *num;
        json_object_foreach(numbers, from, num)
        {
            og_settings_wa_number_t out;
            if (og_settings_wa_number(s, channels[c], from, &out))
                FUZZ_CHECK(c == 0 ? out.session != NULL
                                  : out.phone_number_id != NULL && out.access_token != NULL);
            /* A pacing rate reads back as validated, 0 when unset. */
            json_t *rate = json_object_get(num, c == 0 ? "messagesPerMinute" : "messagesPerSecond");
            FUZZ_CHECK(og_settings_sender_rate(s, channels[c], from) ==
                       (rate != NULL ? json_number_value(rate) : 0));
        }
    }
    const char *sender;
    json_t *rate;
    json_object_foreach(
        json_object_get(json_object_get(json_object_get(s, "channels"), "sms"), "messagesPerSecond"), sender,
        rate)
    {
        double r = og_settings_sender_rate(s, "sms", sender);
        FUZZ_CHECK(r == json_number_value(rate) && r >= OG_SETTINGS_PACE_MIN && r <= OG_SETTINGS_PACE_MAX);
    }
    const char *def = og_settings_sms_default_sender(s);
    json_t *senders = json_object_get(json_object_get(json_object_get(s, "channels"), "sms"), "senders");
    const char *requested[] = {NULL, "Omnigate", json_string_value(json_array_get(senders, 0))};
    for (size_t i = 0; i < sizeof(requested) / sizeof(requested[0]); i++) {
        char out[20]; /* as the send paths keep it */
        og_err_t err = {0};
        if (og_settings_sms_sender(s, requested[i], out, sizeof(out), &err)) {
            const char *want = requested[i] != NULL ? requested[i] : def;
            FUZZ_CHECK(want != NULL && strcmp(out, want) == 0 && og_settings_sms_sender_approved(s, out));
        } else {
            fuzz_check_error(&err, sender_codes);
        }
    }
}

/* Validates `s`; on success reads it back and checks that its masked form patches to itself. */
static bool check_settings(json_t *s)
{
    og_err_t err = {0};
    if (!og_settings_validate(s, &err)) {
        fuzz_check_error(&err, settings_codes);
        FUZZ_CHECK(strncmp(err.field, "settings", 8) == 0);
        return false;
    }
    FUZZ_CHECK(json_is_object(s));
    read_back(s);
    json_t *masked = og_settings_mask(s);
    FUZZ_CHECK(masked != NULL);
    check_masked(masked);
    if (!holds(s, NULL)) {
        json_t *back = og_settings_merge_patch(s, masked);
        FUZZ_CHECK(back != NULL && json_equal(back, s));
        json_decref(back);
    }
    json_decref(masked);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t stored_len = nul != NULL ? (size_t)(nul - text) : size;
    json_error_t jerr;
    json_t *stored = json_loadb(text, stored_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (stored == NULL || !check_settings(stored)) {
        json_decref(stored);
        stored = og_settings_defaults();
        FUZZ_CHECK(check_settings(stored));
    }
    json_t *patch = NULL;
    if (nul != NULL)
        patch = json_loadb(nul + 1, size - stored_len - 1, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (patch != NULL) {
        json_t *merged = og_settings_merge_patch(stored, patch);
        FUZZ_CHECK(merged != NULL);
        if (!holds(patch, "accessToken") || !json_is_object(patch)) {
            json_t *ref = merge_reference(stored, patch);
            FUZZ_CHECK(json_equal(merged, ref));
            json_decref(ref);
        }
        json_t *twice = og_settings_merge_patch(merged, patch);
        FUZZ_CHECK(twice != NULL && json_equal(twice, merged));
        json_decref(twice);
        check_settings(merged);
        json_decref(merged);
    }
    json_decref(patch);
    json_decref(stored);
    return 0;
}
