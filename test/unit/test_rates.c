/*
 * Rate cards (src/product/costs/rates.c, API.md §22): exact prices, the card's checks, and which
 * rate an attempt gets: the tenant's card for the channels it lists, category before prefix,
 * the longest prefix, SMS by segment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/api.h"
#include "omnigate/costs/rates.h"
#include "omnigate/costs/usage.h"
#include "omnigate/jw.h"

static void test_prices(void **state)
{
    og_micros_t v;
    assert_true(og_price_parse("0.045", &v));
    assert_int_equal(v, 45000);
    assert_true(og_price_parse("12", &v));
    assert_int_equal(v, 12000000);
    assert_true(og_price_parse("0.000001", &v));
    assert_int_equal(v, 1);
    assert_true(og_price_parse("999999.999999", &v));
    assert_int_equal(v, 999999999999);
    const char *const bad[] = {"",        "-1",  ".5",  "1.", "1e3", "0.0000001",
                               "1000000", "007", "1,5", " 1", "0x1", NULL};
    for (int i = 0; bad[i] != NULL; i++)
        assert_false(og_price_parse(bad[i], &v));
    assert_false(og_price_parse(NULL, &v));
    char out[OG_PRICE_TEXT];
    og_price_format(45000, out);
    assert_string_equal(out, "0.0450");
    og_price_format(45125, out);
    assert_string_equal(out, "0.045125");
    og_price_format(12000000, out);
    assert_string_equal(out, "12.0000");
    og_price_format(0, out);
    assert_string_equal(out, "0.0000");
    og_price_format(-12000, out);
    assert_string_equal(out, "-0.0120");
    og_price_format(-1234567891, out);
    assert_string_equal(out, "-1234.567891");
    og_price_format(45120, out);
    assert_string_equal(out, "0.04512");
    /* Exact sums: a million attempts at 0.000001 make exactly 1. */
    og_micros_t sum = 0;
    for (int i = 0; i < 1000000; i++)
        sum += 1;
    og_price_format(sum, out);
    assert_string_equal(out, "1.0000");
}

static og_rate_card_t card(const char *json)
{
    json_t *j = json_loads(json, 0, NULL);
    assert_non_null(j);
    og_rate_card_t c;
    og_err_t err = {0};
    assert_true(og_rate_card_parse(j, "settings.rates", &c, &err));
    json_decref(j);
    return c;
}

static void test_card_checks(void **state)
{
    static const struct {
        const char *json, *field;
        const og_errcode_t *code;
    } bad[] = {
        {"[]", "settings.rates", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"usd\",\"rates\":[]}", "settings.rates.currency", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\"}", "settings.rates.rates", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[],\"x\":1}", "settings.rates.x", OG_E_UNKNOWN_FIELD},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"email\",\"prefix\":\"\",\"price\":\"1\"}]}",
         "settings.rates.rates[0]", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"62\",\"price\":\"1\"}]}",
         "settings.rates.rates[0]", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":0.1}]}",
         "settings.rates.rates[0]", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":\"1\","
         "\"category\":"
         "\"marketing\"}]}",
         "settings.rates.rates[0]", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"whatsapp_meta\",\"prefix\":\"\",\"price\":\"1\","
         "\"category\":\"promo\"}]}",
         "settings.rates.rates[0]", OG_E_VALIDATION_FAILED},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"\",\"price\":\"1\",\"cost\":1}]"
         "}",
         "settings.rates.rates[0]", OG_E_UNKNOWN_FIELD},
        {"{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":\"1\"},"
         "{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":\"2\"}]}",
         "settings.rates.rates", OG_E_VALIDATION_FAILED},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        og_rate_card_t c;
        og_err_t err = {0};
        assert_false(og_rate_card_parse(j, "settings.rates", &c, &err));
        assert_ptr_equal(err.code, bad[i].code);
        assert_string_equal(err.field, bad[i].field);
        assert_null(c.rates);
        json_decref(j);
    }
    /* A request's whole body: its fields named from the top. */
    json_t *j = json_loads("{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\"}]}", 0, NULL);
    og_rate_card_t c0;
    og_err_t err = {0};
    assert_false(og_rate_card_parse(j, "", &c0, &err));
    assert_string_equal(err.field, "rates[0]");
    json_decref(j);
    /* The same prefix on two channels, or with and without a category, is no repeat. */
    og_rate_card_t c =
        card("{\"currency\":\"EUR\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":\"1\"},"
             "{\"channel\":\"whatsapp_meta\",\"prefix\":\"+62\",\"price\":\"2\"},"
             "{\"channel\":\"whatsapp_meta\",\"prefix\":\"+62\",\"price\":\"3\",\"category\":"
             "\"MARKETING\"}]}");
    assert_int_equal(c.n, 3);
    assert_string_equal(c.currency, "EUR");
    og_rate_card_clear(&c);
}

static void test_find(void **state)
{
    og_rate_card_t g =
        card("{\"currency\":\"USD\",\"rates\":["
             "{\"channel\":\"sms\",\"prefix\":\"\",\"price\":\"0.0500\"},"
             "{\"channel\":\"sms\",\"prefix\":\"+62\",\"price\":\"0.0300\"},"
             "{\"channel\":\"sms\",\"prefix\":\"+6281\",\"price\":\"0.0250\"},"
             "{\"channel\":\"whatsapp_meta\",\"prefix\":\"+62\",\"price\":\"0.0040\"},"
             "{\"channel\":\"whatsapp_meta\",\"prefix\":\"\",\"price\":\"0.0410\",\"category\":"
             "\"marketing\"},"
             "{\"channel\":\"whatsapp_meta\",\"prefix\":\"+62\",\"price\":\"0.0360\",\"category\":"
             "\"marketing\"}]}");
    og_rate_card_t t =
        card("{\"currency\":\"USD\",\"rates\":[{\"channel\":\"whatsapp_qr\",\"prefix\":\"\","
             "\"price\":\"0\"},{\"channel\":\"sms\",\"prefix\":\"+49\",\"price\":\"0.0700\"}]}");
    const og_rate_card_t *from;
    /* No lookup tries a prefix longer than the card's longest ("+6281"). */
    assert_int_equal(g.prefix_max, 5);
    /* The longest prefix. */
    const og_rate_t *r = og_rates_find(NULL, &g, OG_CH_SMS, "+6281234", OG_CAT_NONE, &from);
    assert_non_null(r);
    assert_int_equal(r->price, 25000);
    assert_ptr_equal(from, &g);
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_SMS, "+6221", OG_CAT_NONE, NULL)->price, 30000);
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_SMS, "+4415", OG_CAT_NONE, NULL)->price, 50000);
    /* SMS by segment. */
    assert_int_equal(og_rate_cost(r, 3), 75000);
    assert_int_equal(og_rate_cost(r, 0), 25000);
    /* A category beats no category, even with a shorter prefix; another category never applies. */
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+6281", OG_CAT_MARKETING, NULL)->price,
                     36000);
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+4915", OG_CAT_MARKETING, NULL)->price,
                     41000);
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+6281", OG_CAT_UTILITY, NULL)->price,
                     4000);
    assert_int_equal(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+6281", OG_CAT_NONE, NULL)->price, 4000);
    assert_null(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+4915", OG_CAT_UTILITY, &from));
    assert_null(from);
    assert_int_equal(og_rate_cost(og_rates_find(NULL, &g, OG_CH_WHATSAPP_META, "+62", OG_CAT_NONE, NULL), 5),
                     4000);
    /* The tenant's card for the channels it lists, and only its entries: sms to +62 has no rate
     * there, though the global card has one. */
    assert_int_equal(og_rates_find(&t, &g, OG_CH_SMS, "+4915", OG_CAT_NONE, &from)->price, 70000);
    assert_ptr_equal(from, &t);
    assert_null(og_rates_find(&t, &g, OG_CH_SMS, "+6281", OG_CAT_NONE, NULL));
    assert_int_equal(og_rates_find(&t, &g, OG_CH_WHATSAPP_META, "+6281", OG_CAT_NONE, &from)->price, 4000);
    assert_ptr_equal(from, &g);
    assert_int_equal(og_rates_find(&t, &g, OG_CH_WHATSAPP_QR, "+6281", OG_CAT_NONE, NULL)->price, 0);
    assert_null(og_rates_find(NULL, &g, OG_CH_WHATSAPP_QR, "+6281", OG_CAT_NONE, NULL));
    assert_null(og_rates_find(NULL, NULL, OG_CH_SMS, "+6281", OG_CAT_NONE, NULL));
    og_rate_card_clear(&g);
    og_rate_card_clear(&t);
}

/* og_cost_price: a tenant's card read from its settings, the global card for the rest, SMS by
 * segment; og_cost_write and og_cost_json say the same. */
static void test_cost_price(void **state)
{
    (void)state;
    json_t *g = json_loads(
        "{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\",\"prefix\":\"\","
        "\"price\":\"0.05\"},{\"channel\":\"whatsapp_meta\",\"prefix\":\"+62\",\"price\":\"0.014\"}]}",
        0, NULL);
    og_rate_card_t global = {0};
    og_err_t err = {0};
    assert_true(og_rate_card_parse(g, "", &global, &err));
    json_t *settings = json_loads("{\"rates\":{\"currency\":\"USD\",\"rates\":[{\"channel\":\"sms\","
                                  "\"prefix\":\"+62\",\"price\":\"0.031\"}]}}",
                                  0, NULL);
    og_cost_t c;
    assert_true(og_cost_price(&global, settings, OG_CH_SMS, "+6281234567890", OG_CAT_NONE, 3, &c));
    assert_int_equal(c.micros, 93000);
    assert_string_equal(c.currency, "USD");
    /* The tenant lists sms: only its entries count there. */
    assert_false(og_cost_price(&global, settings, OG_CH_SMS, "+4915112345678", OG_CAT_NONE, 1, &c));
    assert_string_equal(c.currency, "");
    assert_true(og_cost_price(&global, settings, OG_CH_WHATSAPP_META, "+6281234567890", OG_CAT_NONE, 1, &c));
    assert_int_equal(c.micros, 14000);
    assert_true(og_cost_price(&global, NULL, OG_CH_SMS, "+4915112345678", OG_CAT_NONE, 2, &c));
    assert_int_equal(c.micros, 100000);
    assert_false(og_cost_price(NULL, NULL, OG_CH_SMS, "+4915112345678", OG_CAT_NONE, 2, &c));

    og_cost_t cost = {.micros = 45125, .currency = "EUR"};
    og_jw_t w;
    og_jw_init(&w, 0);
    og_jw_object(&w);
    og_cost_write(&w, "cost", &cost);
    og_jw_object_end(&w);
    char *text = og_jw_finish(&w, NULL);
    assert_string_equal(text, "{\"cost\":{\"amount\":\"0.045125\",\"currency\":\"EUR\"}}");
    json_t *j = og_cost_json(&cost);
    char *jt = json_dumps(j, JSON_COMPACT);
    assert_string_equal(jt, "{\"amount\":\"0.045125\",\"currency\":\"EUR\"}");
    free(jt);
    free(text);
    json_decref(j);
    assert_true(json_is_null(og_cost_json(NULL)));
    og_rate_card_clear(&global);
    json_decref(g);
    json_decref(settings);
}

/* A completion's attempt as usage counts it (costs/usage.c, sql/024's rule): an attempt and its
 * outcome; the cost of an accepted one with a rate; a win only for an accepted attempt that won,
 * and savings only for a WhatsApp win with both its cost and its SMS equivalent. */
static void test_usage_attempt_rows(void **state)
{
    (void)state;
    const og_cost_t cost = {.micros = 5000, .currency = "USD"}, equiv = {.micros = 40000, .currency = "USD"};
    const og_cost_t none = {0};
    const struct {
        og_channel_t ch;
        bool sent, won;
        const og_cost_t *cost, *equiv;
        int64_t want[OG_USAGE__SUMS];
    } cases[] = {
        {OG_CH_WHATSAPP_META, true, true, &cost, &equiv, {1, 1, 0, 5000, 1, 35000}},
        {OG_CH_WHATSAPP_META, true, true, &cost, &none, {1, 1, 0, 5000, 1, 0}}, /* no SMS equivalent */
        {OG_CH_WHATSAPP_META, true, true, &none, &equiv, {1, 1, 0, 0, 1, 0}},   /* unpriced */
        {OG_CH_SMS, true, true, &cost, &equiv, {1, 1, 0, 5000, 1, 0}},          /* SMS saves nothing */
        {OG_CH_WHATSAPP_QR, false, true, &cost, &equiv, {1, 0, 1, 0, 0, 0}},    /* failed */
        {OG_CH_WHATSAPP_QR, true, false, &cost, &equiv, {1, 1, 0, 5000, 0, 0}}, /* accepted, not the winner */
    };
    og_db_tally_row_t r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        og_usage_attempt_row(&r, "t1", "2026-11-28", cases[i].ch, cases[i].sent, cases[i].cost, cases[i].won,
                             cases[i].equiv);
        assert_string_equal(r.keys[OG_USAGE_TENANT], "t1");
        assert_string_equal(r.keys[OG_USAGE_DAY], "2026-11-28");
        assert_string_equal(r.keys[OG_USAGE_CHANNEL], og_channel_name(cases[i].ch));
        assert_memory_equal(r.sums, cases[i].want, sizeof(cases[i].want));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_attempt_rows), cmocka_unit_test(test_prices),
        cmocka_unit_test(test_card_checks),        cmocka_unit_test(test_find),
        cmocka_unit_test(test_cost_price),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
