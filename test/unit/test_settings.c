/*
 * Unit tests of tenant settings (src/product/settings.c): validation with the dotted path of the
 * fault, masking of access tokens, RFC 7396 merge patch with masked secrets kept, defaults and
 * the send-path getters.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/api.h"
#include "omnigate/tenants/settings.h"

/* The example of API.md §5, with a real-looking token. */
static const char example[] =
    "{\"defaultChannels\": [\"whatsapp_qr\", \"whatsapp_meta\", \"sms\"],"
    " \"defaultWhatsappFrom\": \"6281234567890\","
    " \"rateLimitPerSecond\": 200,"
    " \"channels\": {"
    "  \"whatsapp_qr\": {\"enabled\": true, \"numbers\": {\"6281234567890\": {\"session\": \"default\"}}},"
    "  \"whatsapp_meta\": {\"enabled\": true, \"numbers\": {\"6281234567890\": {\"phoneNumberId\": "
    "\"109876543210\", \"accessToken\": \"EAAGsecretsecretsecret1234\"}}},"
    "  \"sms\": {\"enabled\": true, \"senders\": [\"ACME\", \"Omni Test\"], \"defaultSender\": \"ACME\"}}}";

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (v == NULL)
        fail_msg("bad test JSON: %s: %s", jerr.text, text);
    return v;
}

/* Asserts that `text` is refused with `code` naming `field`. */
static void assert_refused(const char *text, const char *code, const char *field)
{
    json_t *s = parse(text);
    og_err_t err = {0};
    if (og_settings_validate(s, &err))
        fail_msg("accepted: %s", text);
    assert_non_null(err.code);
    assert_int_equal(og_api_status(err.code), 422);
    assert_string_equal(err.code->name, code);
    assert_string_equal(err.field, field);
    json_decref(s);
}

static void assert_accepted(const char *text)
{
    json_t *s = parse(text);
    og_err_t err = {0};
    if (!og_settings_validate(s, &err))
        fail_msg("refused (%s: %s): %s", err.field, err.message, text);
    assert_null(err.code);
    json_decref(s);
}

/* Asserts that `v` (stolen) equals the JSON text `want`. */
static void assert_json(json_t *v, const char *want)
{
    json_t *w = parse(want);
    if (!json_equal(v, w)) {
        char *got = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        fail_msg("got %s, want %s", got, want);
    }
    json_decref(w);
    json_decref(v);
}

/* ---- validation ---------------------------------------------------------------------------- */

/* The example of API.md §5 is valid, and so are empty settings. */
static void test_example_accepted(void **state)
{
    assert_accepted(example);
    assert_accepted("{}");
    assert_accepted("{\"channels\": {}}");
    assert_accepted("{\"channels\": {\"sms\": {\"enabled\": false}}}");
}

/* The defaults of a new tenant: every channel in order, none configured; and they are valid. */
static void test_defaults(void **state)
{
    json_t *d = og_settings_defaults();
    char *text = json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_string_equal(text,
                        "{\"defaultChannels\":[\"whatsapp_qr\",\"whatsapp_meta\",\"sms\"],\"channels\":{}}");
    free(text);
    og_err_t err = {0};
    assert_true(og_settings_validate(d, &err));
    for (int i = 0; i < 3; i++)
        assert_false(
            og_settings_channel_enabled(d, (const char *[]){"whatsapp_qr", "whatsapp_meta", "sms"}[i]));
    json_decref(d);
}

/* Settings must be an object; an unknown key anywhere is unknown_field naming it. */
static void test_shape_and_unknown_keys(void **state)
{
    assert_refused("[]", "validation_failed", "settings");
    assert_refused("\"x\"", "validation_failed", "settings");
    assert_refused("{\"defaultchannels\": [\"sms\"]}", "unknown_field", "settings.defaultchannels");
    assert_refused("{\"channels\": {\"telegram\": {}}}", "unknown_field", "settings.channels.telegram");
    assert_refused("{\"channels\": {\"sms\": {\"sender\": \"ACME\"}}}", "unknown_field",
                   "settings.channels.sms.sender");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"numbers\": {\"6281234567890\": {\"session\": \"a\","
                   " \"sesion\": \"b\"}}}}}",
                   "unknown_field", "settings.channels.whatsapp_qr.numbers.6281234567890.sesion");
    assert_refused("{\"channels\": {\"whatsapp_meta\": {\"enabled\": true, \"token\": \"x\"}}}",
                   "unknown_field", "settings.channels.whatsapp_meta.token");
}

/* defaultChannels: a non-empty array of distinct channel names; the element at fault is named. */
static void test_default_channels(void **state)
{
    assert_accepted("{\"defaultChannels\": [\"sms\"]}");
    assert_accepted("{\"defaultChannels\": [\"sms\", \"whatsapp_meta\", \"whatsapp_qr\"]}");
    assert_refused("{\"defaultChannels\": []}", "validation_failed", "settings.defaultChannels");
    assert_refused("{\"defaultChannels\": \"sms\"}", "validation_failed", "settings.defaultChannels");
    assert_refused("{\"defaultChannels\": null}", "validation_failed", "settings.defaultChannels");
    assert_refused("{\"defaultChannels\": [\"sms\", \"email\"]}", "validation_failed",
                   "settings.defaultChannels[1]");
    assert_refused("{\"defaultChannels\": [\"SMS\"]}", "validation_failed", "settings.defaultChannels[0]");
    assert_refused("{\"defaultChannels\": [1]}", "validation_failed", "settings.defaultChannels[0]");
    assert_refused("{\"defaultChannels\": [\"sms\", \"whatsapp_qr\", \"sms\"]}", "validation_failed",
                   "settings.defaultChannels[2]");
}

/* defaultWhatsappFrom: 8-15 digits, first 1-9, no +. */
static void test_default_whatsapp_from(void **state)
{
    assert_accepted("{\"defaultWhatsappFrom\": \"12345678\"}");
    assert_accepted("{\"defaultWhatsappFrom\": \"123456789012345\"}");
    const char *const bad[] = {"\"1234567\"",
                               "\"1234567890123456\"",
                               "\"+6281234567890\"",
                               "\"0812345678\"",
                               "6281234567890",
                               "\"\"",
                               "null"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "{\"defaultWhatsappFrom\": %s}", bad[i]);
        assert_refused(text, "validation_failed", "settings.defaultWhatsappFrom");
    }
}

/* rateLimitPerSecond: an integer from 1 to 1000000. */
static void test_rate_limit(void **state)
{
    assert_accepted("{\"rateLimitPerSecond\": 1}");
    assert_accepted("{\"rateLimitPerSecond\": 1000000}");
    const char *const bad[] = {"0", "-1", "1000001", "1.5", "200.0", "\"200\"", "true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "{\"rateLimitPerSecond\": %s}", bad[i]);
        assert_refused(text, "validation_failed", "settings.rateLimitPerSecond");
    }
}

/* channels and each channel must be objects; enabled must be a boolean. */
static void test_channel_shapes(void **state)
{
    assert_refused("{\"channels\": []}", "validation_failed", "settings.channels");
    assert_refused("{\"channels\": {\"sms\": true}}", "validation_failed", "settings.channels.sms");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"enabled\": \"yes\"}}}", "validation_failed",
                   "settings.channels.whatsapp_qr.enabled");
    assert_refused("{\"channels\": {\"whatsapp_meta\": {\"enabled\": 1}}}", "validation_failed",
                   "settings.channels.whatsapp_meta.enabled");
    assert_refused("{\"channels\": {\"sms\": {\"enabled\": null}}}", "validation_failed",
                   "settings.channels.sms.enabled");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"numbers\": []}}}", "validation_failed",
                   "settings.channels.whatsapp_qr.numbers");
}

/* whatsapp_qr numbers: keyed by 8-15 digits, each with a session of 1-64 [A-Za-z0-9_-]. */
static void test_whatsapp_qr_numbers(void **state)
{
    char text[512];
#define fmt "{\"channels\": {\"whatsapp_qr\": {\"numbers\": {\"%s\": %s}}}}"
    snprintf(text, sizeof(text), fmt, "6281234567890",
             "{\"session\": \"Aa0_-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}"); /* 64 */
    assert_accepted(text);
    snprintf(text, sizeof(text), fmt, "+6281234567890", "{\"session\": \"default\"}");
    assert_refused(text, "validation_failed", "settings.channels.whatsapp_qr.numbers.+6281234567890");
    snprintf(text, sizeof(text), fmt, "1234567", "{\"session\": \"default\"}");
    assert_refused(text, "validation_failed", "settings.channels.whatsapp_qr.numbers.1234567");
    const char *const bad[] = {
        "{\"session\": \"\"}",
        "{\"session\": \"a b\"}",
        "{\"session\": \"a.b\"}",
        "{\"session\": 7}",
        "{}",
        "{\"session\": \"Aa0_-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", /* 65 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), fmt, "6281234567890", bad[i]);
        assert_refused(text, "validation_failed",
                       "settings.channels.whatsapp_qr.numbers.6281234567890.session");
    }
    snprintf(text, sizeof(text), fmt, "6281234567890", "\"default\"");
    assert_refused(text, "validation_failed", "settings.channels.whatsapp_qr.numbers.6281234567890");
#undef fmt
}

/* A client-chosen key is echoed in the path only as a short printable excerpt. */
static void test_path_excerpt_of_odd_keys(void **state)
{
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"numbers\": {\"\xc3\xa9t\xc3\xa9 \\\"x\\\"\": {}}}}}",
                   "validation_failed", "settings.channels.whatsapp_qr.numbers.??t????x?");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"numbers\": "
                   "{\"123456789012345678901234567890123456789\": {}}}}}",
                   "validation_failed",
                   "settings.channels.whatsapp_qr.numbers.12345678901234567890123456789012...");
}

/* whatsapp_meta numbers: phoneNumberId of 1-32 digits and an accessToken of 1-1024 printable
 * ASCII characters, both required; a masked token is refused. */
static void test_whatsapp_meta_numbers(void **state)
{
    char text[2048];
#define fmt                                                                                                  \
    "{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "                                  \
    "{\"phoneNumberId\": %s, \"accessToken\": %s}}}}}"
    const char *id_field = "settings.channels.whatsapp_meta.numbers.6281234567890.phoneNumberId";
    const char *tok_field = "settings.channels.whatsapp_meta.numbers.6281234567890.accessToken";
    snprintf(text, sizeof(text), fmt, "\"1\"", "\"t\"");
    assert_accepted(text);
    snprintf(text, sizeof(text), fmt, "\"12345678901234567890123456789012\"",
             "\"EAAG!#$%&'()*+,-./:;<=>?@[]^_`{|}~\"");
    assert_accepted(text);
    const char *const bad_ids[] = {"\"\"", "\"123456789012345678901234567890123\"", "\"12a\"", "109876543210",
                                   "null"};
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
        snprintf(text, sizeof(text), fmt, bad_ids[i], "\"EAAG\"");
        assert_refused(text, "validation_failed", id_field);
    }
    const char *const bad_tokens[] = {
        "\"\"", "\"EAAG token\"", "\"EAAG\\r\\nX-Injected: 1\"", "\"EAAG\\u00e9\"", "\"****1234\"", "42",
        "null"};
    for (size_t i = 0; i < sizeof(bad_tokens) / sizeof(bad_tokens[0]); i++) {
        snprintf(text, sizeof(text), fmt, "\"109876543210\"", bad_tokens[i]);
        assert_refused(text, "validation_failed", tok_field);
    }
    /* 1024 characters pass, 1025 do not. */
    char tok[1030];
    tok[0] = '"';
    memset(tok + 1, 'x', 1024);
    strcpy(tok + 1025, "\"");
    snprintf(text, sizeof(text), fmt, "\"109876543210\"", tok);
    assert_accepted(text);
    tok[1025] = 'x';
    strcpy(tok + 1026, "\"");
    snprintf(text, sizeof(text), fmt, "\"109876543210\"", tok);
    assert_refused(text, "validation_failed", tok_field);
    /* Missing accessToken */
    assert_refused("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                   "{\"phoneNumberId\": \"1\"}}}}}",
                   "validation_failed", tok_field);
#undef fmt
}

/* sms senders: an array of distinct valid sender ids; the element at fault is named. */
static void test_sms_senders(void **state)
{
    assert_accepted("{\"channels\": {\"sms\": {\"senders\": []}}}");
    assert_accepted("{\"channels\": {\"sms\": {\"senders\": [\"ACME\", \"12345\", \"+6281234567890\"]}}}");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": \"ACME\"}}}", "validation_failed",
                   "settings.channels.sms.senders");
    assert_refused(
        "{\"channels\": {\"sms\": {\"enabled\": true, \"senders\": [\"ACME\", \"THIS-IS-TOO-LONG\"]}}}",
        "validation_failed", "settings.channels.sms.senders[1]");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": [\"ACME\", \"OTHER\", \"ACME\"]}}}",
                   "validation_failed", "settings.channels.sms.senders[2]");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": [null]}}}", "validation_failed",
                   "settings.channels.sms.senders[0]");
    json_t *s = parse("{\"channels\": {\"sms\": {\"senders\": [\"ACME\", \"AC-ME\"]}}}");
    og_err_t err = {0};
    assert_false(og_settings_validate(s, &err));
    assert_string_equal(err.message,
                        "settings.channels.sms.senders[1] must be a sender id: 1-11 letters, digits "
                        "or spaces with at least one letter, up to 15 digits, or + and 8-15 digits");
    json_decref(s);
}

/* sms defaultSender must be one of the senders. */
static void test_sms_default_sender(void **state)
{
    assert_accepted("{\"channels\": {\"sms\": {\"senders\": [\"ACME\", \"Omni Test\"], \"defaultSender\": "
                    "\"Omni Test\"}}}");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": [\"ACME\"], \"defaultSender\": \"OTHER\"}}}",
                   "validation_failed", "settings.channels.sms.defaultSender");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": [\"ACME\"], \"defaultSender\": \"acme\"}}}",
                   "validation_failed", "settings.channels.sms.defaultSender");
    assert_refused("{\"channels\": {\"sms\": {\"defaultSender\": \"ACME\"}}}", "validation_failed",
                   "settings.channels.sms.defaultSender");
    assert_refused("{\"channels\": {\"sms\": {\"senders\": [\"ACME\"], \"defaultSender\": 1}}}",
                   "validation_failed", "settings.channels.sms.defaultSender");
}

/* The pacing rates of API.md §19: numbers from 0.01 to 100000, integers or not; anything else
 * is refused naming the rate. */
static const char *const good_paces[] = {"0.01", "1", "2.5", "80", "100000", "100000.0", "1e5"};
static const char *const bad_paces[] = {"0",      "0.009", "-1",   "100000.01", "1e6",
                                        "\"10\"", "true",  "null", "[10]",      "{}"};
#define NPACES(a) (sizeof(a) / sizeof((a)[0]))

/* whatsapp_meta numbers.{n}.messagesPerSecond. */
static void test_meta_messages_per_second(void **state)
{
    char text[512];
#define fmt                                                                                                  \
    "{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "                                  \
    "{\"phoneNumberId\": \"1\", \"accessToken\": \"t\", \"messagesPerSecond\": %s}}}}}"
    for (size_t i = 0; i < NPACES(good_paces); i++) {
        snprintf(text, sizeof(text), fmt, good_paces[i]);
        assert_accepted(text);
    }
    for (size_t i = 0; i < NPACES(bad_paces); i++) {
        snprintf(text, sizeof(text), fmt, bad_paces[i]);
        assert_refused(text, "validation_failed",
                       "settings.channels.whatsapp_meta.numbers.6281234567890.messagesPerSecond");
    }
#undef fmt
    json_t *s = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                      "{\"phoneNumberId\": \"1\", \"accessToken\": \"t\", \"messagesPerSecond\": 0}}}}}");
    og_err_t err = {0};
    assert_false(og_settings_validate(s, &err));
    assert_string_equal(err.message,
                        "settings.channels.whatsapp_meta.numbers.6281234567890.messagesPerSecond "
                        "must be a number from 0.01 to 100000");
    json_decref(s);
    /* A per-minute rate is QR's: unknown on a Meta number. */
    assert_refused("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                   "{\"phoneNumberId\": \"1\", \"accessToken\": \"t\", \"messagesPerMinute\": 10}}}}}",
                   "unknown_field",
                   "settings.channels.whatsapp_meta.numbers.6281234567890.messagesPerMinute");
}

/* whatsapp_qr numbers.{n}.messagesPerMinute. */
static void test_qr_messages_per_minute(void **state)
{
    char text[512];
#define fmt                                                                                                  \
    "{\"channels\": {\"whatsapp_qr\": {\"numbers\": {\"6281234567890\": "                                    \
    "{\"session\": \"default\", \"messagesPerMinute\": %s}}}}}"
    for (size_t i = 0; i < NPACES(good_paces); i++) {
        snprintf(text, sizeof(text), fmt, good_paces[i]);
        assert_accepted(text);
    }
    for (size_t i = 0; i < NPACES(bad_paces); i++) {
        snprintf(text, sizeof(text), fmt, bad_paces[i]);
        assert_refused(text, "validation_failed",
                       "settings.channels.whatsapp_qr.numbers.6281234567890.messagesPerMinute");
    }
#undef fmt
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"numbers\": {\"6281234567890\": "
                   "{\"session\": \"default\", \"messagesPerSecond\": 1}}}}}",
                   "unknown_field", "settings.channels.whatsapp_qr.numbers.6281234567890.messagesPerSecond");
}

/* channels.sms.messagesPerSecond: an object from sender id (the rule of senders' entries) to a
 * rate. A sender need not be on the approved list. */
static void test_sms_messages_per_second(void **state)
{
    char text[512];
    assert_accepted("{\"channels\": {\"sms\": {\"messagesPerSecond\": {}}}}");
    assert_accepted("{\"channels\": {\"sms\": {\"senders\": [\"ACME\"], \"messagesPerSecond\": "
                    "{\"ACME\": 10, \"Omni Test\": 0.5, \"12345\": 1, \"+6281234567890\": 100000}}}}");
    for (size_t i = 0; i < NPACES(good_paces); i++) {
        snprintf(text, sizeof(text), "{\"channels\": {\"sms\": {\"messagesPerSecond\": {\"ACME\": %s}}}}",
                 good_paces[i]);
        assert_accepted(text);
    }
    for (size_t i = 0; i < NPACES(bad_paces); i++) {
        snprintf(text, sizeof(text), "{\"channels\": {\"sms\": {\"messagesPerSecond\": {\"ACME\": %s}}}}",
                 bad_paces[i]);
        assert_refused(text, "validation_failed", "settings.channels.sms.messagesPerSecond.ACME");
    }
    const char *const not_objects[] = {"10", "[]", "\"ACME\"", "null"};
    for (size_t i = 0; i < NPACES(not_objects); i++) {
        snprintf(text, sizeof(text), "{\"channels\": {\"sms\": {\"messagesPerSecond\": %s}}}",
                 not_objects[i]);
        assert_refused(text, "validation_failed", "settings.channels.sms.messagesPerSecond");
    }
    /* Keys follow the rule of a sender id; a bad one is named by its printable excerpt. */
    assert_refused(
        "{\"channels\": {\"sms\": {\"messagesPerSecond\": {\"ACME\": 1, \"THIS-IS-TOO-LONG\": 1}}}}",
        "validation_failed", "settings.channels.sms.messagesPerSecond.THIS-IS-TOO-LONG");
    assert_refused("{\"channels\": {\"sms\": {\"messagesPerSecond\": {\"\": 1}}}}", "validation_failed",
                   "settings.channels.sms.messagesPerSecond.");
    assert_refused("{\"channels\": {\"sms\": {\"messagesPerSecond\": {\"AC ME\": 1, \"A.B\": 1}}}}",
                   "validation_failed", "settings.channels.sms.messagesPerSecond.A.B");
}

/* og_settings_sender_rate reads each channel's own key in its own unit, 0 when unset. */
static void test_sender_rate_getter(void **state)
{
    json_t *s = parse("{\"channels\": {"
                      " \"whatsapp_qr\": {\"numbers\": {\"6281234567890\": {\"session\": \"a\", "
                      "\"messagesPerMinute\": 30}}},"
                      " \"whatsapp_meta\": {\"numbers\": {\"6281234567890\": {\"phoneNumberId\": \"1\","
                      " \"accessToken\": \"t\", \"messagesPerSecond\": 12.5}}},"
                      " \"sms\": {\"messagesPerSecond\": {\"ACME\": 2}}}}");
    assert_true(og_settings_sender_rate(s, "whatsapp_qr", "6281234567890") == 30);
    assert_true(og_settings_sender_rate(s, "whatsapp_meta", "6281234567890") == 12.5);
    assert_true(og_settings_sender_rate(s, "sms", "ACME") == 2);
    assert_true(og_settings_sender_rate(s, "sms", "6281234567890") == 0);
    assert_true(og_settings_sender_rate(s, "whatsapp_meta", "ACME") == 0);
    assert_true(og_settings_sender_rate(s, "telegram", "ACME") == 0);
    assert_true(og_settings_sender_rate(s, NULL, "ACME") == 0);
    assert_true(og_settings_sender_rate(s, "sms", NULL) == 0);
    assert_true(og_settings_sender_rate(NULL, "sms", "ACME") == 0);
    json_decref(s);
}

/* ---- mask ---------------------------------------------------------------------------------- */

/* Masking replaces accessToken by "****" + its last 4 characters and leaves everything else
 * (and the original) as it was. */
static void test_mask(void **state)
{
    json_t *s = parse(example);
    json_t *m = og_settings_mask(s);
    json_t *want = parse(example);
    json_object_set_new(
        json_object_get(
            json_object_get(json_object_get(json_object_get(want, "channels"), "whatsapp_meta"), "numbers"),
            "6281234567890"),
        "accessToken", json_string("****1234"));
    assert_true(json_equal(m, want));
    json_decref(want);
    json_decref(m);
    json_t *orig = parse(example);
    assert_true(json_equal(s, orig));
    json_decref(orig);
    json_decref(s);
}

/* The tenant's own accounts (API.md §23): channels.sms.account {accountSid, authToken, baseUrl?}
 * and channels.whatsapp_qr.server {baseUrl, apiKey, webhookSecret}, each member required but the
 * SMS baseUrl; refused with the member's path. */
static void test_own_accounts(void **state)
{
    assert_accepted("{\"channels\": {\"sms\": {\"enabled\": true, \"account\": {\"accountSid\": \"AC0123\","
                    " \"authToken\": \"tok-0123456789\"}}}}");
    assert_accepted(
        "{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC0123\", \"authToken\": \"t\","
        " \"baseUrl\": \"https://sms.example.com/v1\"}}}}");
    assert_accepted("{\"channels\": {\"whatsapp_qr\": {\"server\": {\"baseUrl\": \"http://waha.local:3000\","
                    " \"apiKey\": \"key-1\", \"webhookSecret\": \"hook-1\"}}}}");
    assert_refused("{\"channels\": {\"sms\": {\"account\": {\"authToken\": \"t\"}}}}", "validation_failed",
                   "settings.channels.sms.account.accountSid");
    assert_refused(
        "{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC 1\", \"authToken\": \"t\"}}}}",
        "validation_failed", "settings.channels.sms.account.accountSid");
    assert_refused("{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC1\"}}}}", "validation_failed",
                   "settings.channels.sms.account.authToken");
    assert_refused("{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC1\", \"authToken\": \"t\","
                   " \"baseUrl\": \"ftp://x\"}}}}",
                   "validation_failed", "settings.channels.sms.account.baseUrl");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"server\": {\"baseUrl\": \"http://u:p@waha\","
                   " \"apiKey\": \"k\", \"webhookSecret\": \"h\"}}}}",
                   "validation_failed", "settings.channels.whatsapp_qr.server.baseUrl");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"server\": {\"baseUrl\": \"http://waha\","
                   " \"webhookSecret\": \"h\"}}}}",
                   "validation_failed", "settings.channels.whatsapp_qr.server.apiKey");
    assert_refused("{\"channels\": {\"whatsapp_qr\": {\"server\": {\"baseUrl\": \"http://waha\","
                   " \"apiKey\": \"k\", \"webhookSecret\": \"****abcd\"}}}}",
                   "validation_failed", "settings.channels.whatsapp_qr.server.webhookSecret");
}

/* The own accounts' secrets are masked like an accessToken, and the getter hands out the account
 * (the configured one, all zero, without). */
static void test_own_accounts_mask_and_getter(void **state)
{
    json_t *s = parse("{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC0123\","
                      " \"authToken\": \"twilio-token-5678\"}}, \"whatsapp_qr\": {\"server\": {\"baseUrl\":"
                      " \"http://waha:3000\", \"apiKey\": \"waha-api-key-9999\", \"webhookSecret\":"
                      " \"waha-hook-secret-4321\"}}}}");
    assert_json(
        og_settings_mask(s),
        "{\"channels\": {\"sms\": {\"account\": {\"accountSid\": \"AC0123\", \"authToken\": \"****5678\"}},"
        " \"whatsapp_qr\": {\"server\": {\"baseUrl\": \"http://waha:3000\", \"apiKey\": \"****9999\","
        " \"webhookSecret\": \"****4321\"}}}}");
    og_provider_account_t a;
    assert_true(og_settings_provider_account(s, OG_CH_SMS, &a));
    assert_true(a.own && !a.sealed);
    assert_string_equal(a.id, "AC0123");
    assert_string_equal(a.secret, "twilio-token-5678");
    assert_null(a.base_url);
    assert_true(og_settings_provider_account(s, OG_CH_WHATSAPP_QR, &a));
    assert_string_equal(a.base_url, "http://waha:3000");
    assert_string_equal(a.secret, "waha-api-key-9999");
    assert_string_equal(a.hook_secret, "waha-hook-secret-4321");
    assert_false(og_settings_provider_account(s, OG_CH_WHATSAPP_META, &a));
    assert_false(a.own);
    json_decref(s);
    json_t *none = parse(example);
    assert_false(og_settings_provider_account(none, OG_CH_SMS, &a));
    assert_false(a.own);
    json_decref(none);
}

/* og_settings_mask of the JSON text `text`. */
static json_t *masked_of(const char *text)
{
    json_t *v = parse(text);
    json_t *m = og_settings_mask(v);
    json_decref(v);
    assert_non_null(m);
    return m;
}

/* Tokens under 12 characters are fully hidden; at 12 the last 4 show; the tail is counted in
 * characters, not bytes; a non-string accessToken is hidden too. */
static void test_mask_lengths(void **state)
{
    assert_json(masked_of(("{\"accessToken\": \"EAAG...\"}")), "{\"accessToken\": \"****\"}");
    assert_json(masked_of(("{\"accessToken\": \"abcdefghijk\"}")), "{\"accessToken\": \"****\"}");
    assert_json(masked_of(("{\"accessToken\": \"abcdefghijkl\"}")), "{\"accessToken\": \"****ijkl\"}");
    assert_json(masked_of(("{\"a\": [{\"accessToken\": \"abcdefgh\\u00e9\\u00e9\\u20ac\\u00e9\"}]}")),
                "{\"a\": [{\"accessToken\": \"****\\u00e9\\u00e9\\u20ac\\u00e9\"}]}");
    assert_json(masked_of(("{\"x\": {\"accessToken\": 12345678901234}}")),
                "{\"x\": {\"accessToken\": \"****\"}}");
}

/* ---- merge patch --------------------------------------------------------------------------- */

static json_t *merged(const char *stored, const char *patch)
{
    json_t *s = parse(stored), *p = parse(patch);
    json_t *m = og_settings_merge_patch(s, p);
    json_decref(s);
    json_decref(p);
    assert_non_null(m);
    return m;
}

/* RFC 7396 appendix A examples. */
static void test_merge_rfc7396_examples(void **state)
{
    assert_json(merged("{\"a\":\"b\"}", "{\"a\":\"c\"}"), "{\"a\":\"c\"}");
    assert_json(merged("{\"a\":\"b\"}", "{\"b\":\"c\"}"), "{\"a\":\"b\",\"b\":\"c\"}");
    assert_json(merged("{\"a\":\"b\"}", "{\"a\":null}"), "{}");
    assert_json(merged("{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}"), "{\"b\":\"c\"}");
    assert_json(merged("{\"a\":[\"b\"]}", "{\"a\":\"c\"}"), "{\"a\":\"c\"}");
    assert_json(merged("{\"a\":\"c\"}", "{\"a\":[\"b\"]}"), "{\"a\":[\"b\"]}");
    assert_json(merged("{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}"), "{\"a\":{\"b\":\"d\"}}");
    assert_json(merged("{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}"), "{\"a\":[1]}");
    assert_json(merged("[\"a\",\"b\"]", "[\"c\",\"d\"]"), "[\"c\",\"d\"]");
    assert_json(merged("{\"a\":\"b\"}", "[\"c\"]"), "[\"c\"]");
    assert_json(merged("{\"a\":\"foo\"}", "null"), "null");
    assert_json(merged("{\"a\":\"foo\"}", "\"bar\""), "\"bar\"");
    assert_json(merged("{\"e\":null}", "{\"a\":1}"), "{\"e\":null,\"a\":1}");
    assert_json(merged("[1,2]", "{\"a\":\"b\",\"c\":null}"), "{\"a\":\"b\"}");
    assert_json(merged("{}", "{\"a\":{\"bb\":{\"ccc\":null}}}"), "{\"a\":{\"bb\":{}}}");
}

/* On settings: null deletes, objects merge recursively (sms keeps its senders), arrays
 * replace, and the stored value is not modified. */
static void test_merge_settings(void **state)
{
    json_t *s = parse(example);
    json_t *p = parse("{\"defaultWhatsappFrom\": null, \"rateLimitPerSecond\": 50, \"channels\": {\"sms\": "
                      "{\"enabled\": false}, \"whatsapp_qr\": {\"numbers\": {\"6281234567890\": null, "
                      "\"6289876543210\": {\"session\": \"second\"}}}}, \"defaultChannels\": [\"sms\"]}");
    json_t *m = og_settings_merge_patch(s, p);
    assert_non_null(m);
    assert_null(json_object_get(m, "defaultWhatsappFrom"));
    assert_int_equal(og_settings_rate_limit(m), 50);
    assert_false(og_settings_channel_enabled(m, "sms"));
    assert_true(og_settings_sms_sender_approved(m, "Omni Test"));
    assert_string_equal(og_settings_sms_default_sender(m), "ACME");
    og_settings_wa_number_t wa;
    assert_false(og_settings_wa_number(m, "whatsapp_qr", "6281234567890", &wa));
    assert_true(og_settings_wa_number(m, "whatsapp_qr", "6289876543210", &wa));
    assert_string_equal(wa.session, "second");
    const char *dc[OG_SETTINGS_CHANNELS];
    assert_int_equal(og_settings_default_channels(m, dc), 1);
    assert_string_equal(dc[0], "sms");
    og_err_t err = {0};
    assert_true(og_settings_validate(m, &err));
    json_t *orig = parse(example);
    assert_true(json_equal(s, orig));
    json_decref(orig);
    json_decref(m);
    json_decref(p);
    json_decref(s);
}

/* PATCHing back the masked token (what GET showed) keeps the stored secret, even when the
 * whole masked document is sent back. */
static void test_merge_keeps_masked_token(void **state)
{
    json_t *s = parse(example);
    json_t *p = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                      "{\"accessToken\": \"****1234\"}}}}}");
    json_t *m = og_settings_merge_patch(s, p);
    og_settings_wa_number_t wa;
    assert_true(og_settings_wa_number(m, "whatsapp_meta", "6281234567890", &wa));
    assert_string_equal(wa.access_token, "EAAGsecretsecretsecret1234");
    assert_string_equal(wa.phone_number_id, "109876543210");
    json_decref(m);
    json_decref(p);

    json_t *masked = og_settings_mask(s);
    m = og_settings_merge_patch(s, masked);
    assert_true(json_equal(m, s));
    json_decref(m);
    json_decref(masked);
    json_decref(s);
}

/* A new token replaces the stored one; a masked value that does not match the stored token is
 * taken literally, and validation then refuses it. */
static void test_merge_new_token_replaces(void **state)
{
    json_t *s = parse(example);
    json_t *p = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                      "{\"accessToken\": \"EAAGnewnewnewnew9999\"}}}}}");
    json_t *m = og_settings_merge_patch(s, p);
    og_settings_wa_number_t wa;
    assert_true(og_settings_wa_number(m, "whatsapp_meta", "6281234567890", &wa));
    assert_string_equal(wa.access_token, "EAAGnewnewnewnew9999");
    json_decref(m);
    json_decref(p);

    p = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
              "{\"accessToken\": \"****9999\"}}}}}");
    m = og_settings_merge_patch(s, p);
    og_err_t err = {0};
    assert_false(og_settings_validate(m, &err));
    assert_string_equal(err.field, "settings.channels.whatsapp_meta.numbers.6281234567890.accessToken");
    json_decref(m);
    json_decref(p);

    /* A masked token for a number that has none stored is literal as well. */
    p = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6289876543210\": "
              "{\"phoneNumberId\": \"1\", \"accessToken\": \"****1234\"}}}}}");
    m = og_settings_merge_patch(s, p);
    assert_false(og_settings_validate(m, &err));
    assert_string_equal(err.field, "settings.channels.whatsapp_meta.numbers.6289876543210.accessToken");
    json_decref(m);
    json_decref(p);
    json_decref(s);
}

/* A NULL stored document merges as absent; a NULL patch changes nothing. */
static void test_merge_null_arguments(void **state)
{
    json_t *p = parse("{\"rateLimitPerSecond\": 5, \"x\": null}");
    assert_json(og_settings_merge_patch(NULL, p), "{\"rateLimitPerSecond\": 5}");
    assert_json(og_settings_merge_patch(p, NULL), "{\"rateLimitPerSecond\": 5, \"x\": null}");
    assert_json(og_settings_merge_patch(NULL, NULL), "{}");
    json_decref(p);
}

/* ---- getters ------------------------------------------------------------------------------- */

/* The getters read the example as the send path needs it. */
static void test_getters_example(void **state)
{
    json_t *s = parse(example);
    assert_true(og_settings_channel_enabled(s, "whatsapp_qr"));
    assert_true(og_settings_channel_enabled(s, "whatsapp_meta"));
    assert_true(og_settings_channel_enabled(s, "sms"));
    assert_false(og_settings_channel_enabled(s, "telegram"));
    assert_false(og_settings_channel_enabled(s, NULL));
    const char *dc[OG_SETTINGS_CHANNELS];
    assert_int_equal(og_settings_default_channels(s, dc), 3);
    assert_string_equal(dc[0], "whatsapp_qr");
    assert_string_equal(dc[1], "whatsapp_meta");
    assert_string_equal(dc[2], "sms");
    assert_string_equal(og_settings_default_whatsapp_from(s), "6281234567890");
    og_settings_wa_number_t wa;
    assert_true(og_settings_wa_number(s, "whatsapp_qr", "6281234567890", &wa));
    assert_string_equal(wa.session, "default");
    assert_null(wa.access_token);
    assert_true(og_settings_wa_number(s, "whatsapp_meta", "6281234567890", &wa));
    assert_null(wa.session);
    assert_string_equal(wa.phone_number_id, "109876543210");
    assert_string_equal(wa.access_token, "EAAGsecretsecretsecret1234");
    assert_false(og_settings_wa_number(s, "whatsapp_meta", "6289999999999", &wa));
    assert_null(wa.phone_number_id);
    assert_false(og_settings_wa_number(s, "sms", "6281234567890", &wa));
    assert_true(og_settings_sms_sender_approved(s, "ACME"));
    assert_true(og_settings_sms_sender_approved(s, "Omni Test"));
    assert_false(og_settings_sms_sender_approved(s, "acme"));
    assert_false(og_settings_sms_sender_approved(s, "OTHER"));
    assert_false(og_settings_sms_sender_approved(s, NULL));
    assert_string_equal(og_settings_sms_default_sender(s), "ACME");
    assert_int_equal(og_settings_rate_limit(s), 200);
    json_decref(s);
}

/* On empty settings: nothing enabled, all channels by default, no numbers, no senders, no
 * rate limit (0). */
static void test_getters_empty(void **state)
{
    json_t *s = parse("{}");
    assert_false(og_settings_channel_enabled(s, "sms"));
    const char *dc[OG_SETTINGS_CHANNELS];
    assert_int_equal(og_settings_default_channels(s, dc), 3);
    assert_string_equal(dc[0], "whatsapp_qr");
    assert_string_equal(dc[2], "sms");
    assert_null(og_settings_default_whatsapp_from(s));
    og_settings_wa_number_t wa;
    assert_false(og_settings_wa_number(s, "whatsapp_qr", "6281234567890", &wa));
    assert_false(og_settings_sms_sender_approved(s, "ACME"));
    assert_null(og_settings_sms_default_sender(s));
    assert_int_equal(og_settings_rate_limit(s), 0);
    assert_int_equal(og_settings_rate_limit(NULL), 0);
    json_decref(s);
    /* A registered number without what its channel needs is not usable. */
    s = parse("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": {\"phoneNumberId\": "
              "\"1\"}}}}}");
    assert_false(og_settings_wa_number(s, "whatsapp_meta", "6281234567890", &wa));
    assert_null(wa.phone_number_id);
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_accepted),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_shape_and_unknown_keys),
        cmocka_unit_test(test_default_channels),
        cmocka_unit_test(test_default_whatsapp_from),
        cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_channel_shapes),
        cmocka_unit_test(test_whatsapp_qr_numbers),
        cmocka_unit_test(test_path_excerpt_of_odd_keys),
        cmocka_unit_test(test_whatsapp_meta_numbers),
        cmocka_unit_test(test_sms_senders),
        cmocka_unit_test(test_sms_default_sender),
        cmocka_unit_test(test_meta_messages_per_second),
        cmocka_unit_test(test_qr_messages_per_minute),
        cmocka_unit_test(test_sms_messages_per_second),
        cmocka_unit_test(test_sender_rate_getter),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_mask_lengths),
        cmocka_unit_test(test_merge_rfc7396_examples),
        cmocka_unit_test(test_merge_settings),
        cmocka_unit_test(test_own_accounts),
        cmocka_unit_test(test_own_accounts_mask_and_getter),
        cmocka_unit_test(test_merge_keeps_masked_token),
        cmocka_unit_test(test_merge_new_token_replaces),
        cmocka_unit_test(test_merge_null_arguments),
        cmocka_unit_test(test_getters_example),
        cmocka_unit_test(test_getters_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
