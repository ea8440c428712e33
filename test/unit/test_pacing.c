/*
 * Unit tests of the pacing rates (src/product/queue/pacing.c, API.md §19): a sender's own setting
 * when the tenant has one, else the configured default (§24), and whatsapp_qr's per-minute rate
 * returned per second.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/providers/provider.h"
#include "omnigate/queue/pacing.h"
#include "omnigate/tenants/settings.h"

static const char *no_env[] = {NULL};

/* The configuration with every default (API.md §24: 80, 10 and 20 per minute). */
static og_config_t defaults(void)
{
    og_config_t cfg;
    char err[256];
    int nrest = 0;
    if (!og_config_load(&cfg, (char *const *)no_env, 0, NULL, NULL, &nrest, err, sizeof(err)))
        fail_msg("config: %s", err);
    return cfg;
}

/* Parses `text` and checks that og_settings_validate accepts it: the rates are read from
 * validated settings only. */
static json_t *settings(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL)
        fail_msg("bad test JSON: %s: %s", jerr.text, text);
    og_err_t err = {0};
    if (!og_settings_validate(v, &err))
        fail_msg("settings refused (%s: %s): %s", err.field, err.message, text);
    return v;
}

#define assert_rate(got, want)                                                                               \
    do {                                                                                                     \
        double g_ = (got), w_ = (want);                                                                      \
        if (fabs(g_ - w_) > 1e-9 * fmax(1, fabs(w_)))                                                        \
            fail_msg("rate %.12g, want %.12g", g_, w_);                                                      \
    } while (0)

/* Without settings (or with none for the sender, or no sender) every channel has its §24
 * default: 80 messages/s on Meta, 10 segments/s on SMS, 20 messages/min on a QR session. */
static void test_defaults_without_settings(void **state)
{
    og_config_t cfg = defaults();
    assert_int_equal(cfg.meta_default_mps, 80);
    assert_int_equal(cfg.sms_default_mps, 10);
    assert_int_equal(cfg.qr_default_per_minute, 20);
    assert_int_equal(cfg.queue_validity_s, 36000);
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_WHATSAPP_META, "6281234567890"), 80);
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_SMS, "ACME"), 10);
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_WHATSAPP_QR, "6281234567890"), 20.0 / 60);
    json_t *empty = settings("{}");
    assert_rate(og_pacing_rate(&cfg, empty, OG_CH_WHATSAPP_META, "6281234567890"), 80);
    assert_rate(og_pacing_rate(&cfg, empty, OG_CH_SMS, NULL), 10);
    assert_rate(og_pacing_rate(&cfg, empty, OG_CH_WHATSAPP_QR, NULL), 20.0 / 60);
    json_decref(empty);
    og_config_free(&cfg);
}

/* The defaults are the configuration's, not constants of the module. */
static void test_defaults_follow_the_configuration(void **state)
{
    og_config_t cfg;
    char err[256];
    int nrest = 0;
    char *const env[] = {"OMNIGATE_META_DEFAULT_MPS=5", "OMNIGATE_SMS_DEFAULT_MPS=1",
                         "OMNIGATE_QR_DEFAULT_PER_MINUTE=6000000", NULL};
    assert_true(og_config_load(&cfg, env, 0, NULL, NULL, &nrest, err, sizeof(err)));
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_WHATSAPP_META, "6281234567890"), 5);
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_SMS, "ACME"), 1);
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH_WHATSAPP_QR, "6281234567890"), 100000);
    og_config_free(&cfg);
}

/* A Meta number's messagesPerSecond is its rate; another number of the tenant keeps the
 * default, and so does the same number on the QR channel. */
static void test_meta_number_setting(void **state)
{
    og_config_t cfg = defaults();
    json_t *s =
        settings("{\"channels\": {"
                 " \"whatsapp_meta\": {\"numbers\": {"
                 "  \"6281234567890\": {\"phoneNumberId\": \"1\", \"accessToken\": \"t\","
                 " \"messagesPerSecond\": 12.5},"
                 "  \"6281234567891\": {\"phoneNumberId\": \"2\", \"accessToken\": \"t\"}}},"
                 " \"whatsapp_qr\": {\"numbers\": {\"6281234567890\": {\"session\": \"default\"}}}}}");
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_META, "6281234567890"), 12.5);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_META, "6281234567891"), 80);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_META, "6289999999999"), 80);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_QR, "6281234567890"), 20.0 / 60);
    json_decref(s);
    og_config_free(&cfg);
}

/* A QR session's messagesPerMinute comes back per second; the bounds 0.01 and 100000 per minute
 * included. */
static void test_qr_per_minute(void **state)
{
    og_config_t cfg = defaults();
    json_t *s = settings("{\"channels\": {\"whatsapp_qr\": {\"numbers\": {"
                         " \"6281234567890\": {\"session\": \"a\", \"messagesPerMinute\": 30},"
                         " \"6281234567891\": {\"session\": \"b\", \"messagesPerMinute\": 0.01},"
                         " \"6281234567892\": {\"session\": \"c\", \"messagesPerMinute\": 100000},"
                         " \"6281234567893\": {\"session\": \"d\"}}}}}");
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_QR, "6281234567890"), 0.5);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_QR, "6281234567891"), 0.01 / 60);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_QR, "6281234567892"), 100000.0 / 60);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_QR, "6281234567893"), 20.0 / 60);
    /* A per-minute rate is never read as a Meta per-second one. */
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_WHATSAPP_META, "6281234567890"), 80);
    json_decref(s);
    og_config_free(&cfg);
}

/* channels.sms.messagesPerSecond maps a sender id (exact, case-sensitive) to its rate; a sender
 * not in the map has the default. */
static void test_sms_sender_map(void **state)
{
    og_config_t cfg = defaults();
    json_t *s =
        settings("{\"channels\": {\"sms\": {\"senders\": [\"ACME\", \"Omni Test\", \"+6281234567890\"],"
                 " \"messagesPerSecond\": {\"ACME\": 2.5, \"Omni Test\": 100000, \"+6281234567890\": 1}}}}");
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, "ACME"), 2.5);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, "Omni Test"), 100000);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, "+6281234567890"), 1);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, "acme"), 10);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, "OTHER"), 10);
    assert_rate(og_pacing_rate(&cfg, s, OG_CH_SMS, NULL), 10);
    json_decref(s);
    og_config_free(&cfg);
}

/* Not a channel: no rate. */
static void test_unknown_channel(void **state)
{
    og_config_t cfg = defaults();
    assert_rate(og_pacing_rate(&cfg, NULL, OG_CH__COUNT, "ACME"), 0);
    og_config_free(&cfg);
}

/* A call's tokens: an SMS one per segment (a text with no SMS segments counted takes one), a
 * WhatsApp one whatever the text's segments. */
static void test_cost(void **state)
{
    assert_int_equal(og_pacing_cost(OG_CH_SMS, 3), 3);
    assert_int_equal(og_pacing_cost(OG_CH_SMS, 1), 1);
    assert_int_equal(og_pacing_cost(OG_CH_SMS, 0), 1);
    assert_int_equal(og_pacing_cost(OG_CH_WHATSAPP_META, 3), 1);
    assert_int_equal(og_pacing_cost(OG_CH_WHATSAPP_QR, 7), 1);
}

/* The bucket's key: the SMS sender, the WAHA session (WAHA's default when none), Meta's phone
 * number id. */
static void test_sender_key(void **state)
{
    assert_string_equal(og_pacing_sender(OG_CH_SMS, "ACME", "s1", "109"), "ACME");
    assert_string_equal(og_pacing_sender(OG_CH_WHATSAPP_QR, "ACME", "s1", "109"), "s1");
    assert_string_equal(og_pacing_sender(OG_CH_WHATSAPP_QR, "ACME", NULL, "109"), OG_WAHA_DEFAULT_SESSION);
    assert_string_equal(og_pacing_sender(OG_CH_WHATSAPP_QR, "ACME", "", "109"), OG_WAHA_DEFAULT_SESSION);
    assert_string_equal(og_pacing_sender(OG_CH_WHATSAPP_META, "ACME", "s1", "109"), "109");
    assert_null(og_pacing_sender(OG_CH_WHATSAPP_META, "ACME", "s1", NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_without_settings),
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_sender_key),
        cmocka_unit_test(test_defaults_follow_the_configuration),
        cmocka_unit_test(test_meta_number_setting),
        cmocka_unit_test(test_qr_per_minute),
        cmocka_unit_test(test_sms_sender_map),
        cmocka_unit_test(test_unknown_channel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
