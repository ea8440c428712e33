/*
 * What a tenant webhook is (src/product/webhooks.c) and its retry schedule
 * (src/product/webhooks_out.c): the Standard Webhooks signature against a vector computed
 * independently with Python's hmac, secrets, URL and event rules, and the delays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/tenant_webhooks/webhooks.h"
#include "omnigate/tenant_webhooks/webhooks_out.h"

/* v1,base64(HMAC-SHA256(base64-decoded part after whsec_, "id.timestamp.body")). */
static void test_signature_vector(void **state)
{
    unsigned char key[OG_WH_KEY_MAX];
    size_t n = og_wh_secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", key);
    assert_int_equal(n, 24);
    char sig[OG_WH_SIG_MAX];
    const char *body = "{\"test\": 2432232314}";
    assert_true(og_wh_sign(key, n, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, strlen(body), sig));
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    /* One byte of the body more: another signature. */
    assert_true(
        og_wh_sign(key, n, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, strlen(body) - 1, sig));
    assert_string_not_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

/* A new secret is whsec_ + 44 characters of base64 that decode to 32 bytes; two differ; the mask
 * keeps the last 4; what is not a secret has no key. */
static void test_secrets(void **state)
{
    char a[OG_WH_SECRET_LEN + 1], b[OG_WH_SECRET_LEN + 1], masked[OG_WH_MASKED_MAX];
    unsigned char key[OG_WH_KEY_MAX];
    og_wh_secret_new(a);
    og_wh_secret_new(b);
    assert_int_equal(strlen(a), OG_WH_SECRET_LEN);
    assert_memory_equal(a, "whsec_", 6);
    assert_string_not_equal(a, b);
    assert_int_equal(og_wh_secret_key(a, key), 32);
    og_wh_secret_mask(a, masked);
    assert_memory_equal(masked, "whsec_****", 10);
    assert_string_equal(masked + 10, a + OG_WH_SECRET_LEN - 4);
    assert_int_equal(og_wh_secret_key("sk_abc", key), 0);
    assert_int_equal(og_wh_secret_key("whsec_", key), 0);
    assert_int_equal(og_wh_secret_key("whsec_abc", key), 0);
}

static bool url_ok(const char *url, bool http, bool priv)
{
    og_err_t err = {0};
    bool ok = og_wh_url_check(url, http, priv, &err);
    if (!ok)
        assert_string_equal(err.field, "url");
    return ok;
}

static void test_urls(void **state)
{
    assert_true(url_ok("https://hooks.example.com/omnigate?x=1", false, false));
    assert_false(url_ok("http://hooks.example.com/", false, false));
    assert_true(url_ok("http://hooks.example.com/", true, false));
    assert_false(url_ok("ftp://hooks.example.com/", true, true));
    assert_false(url_ok("https://127.0.0.1/", false, false));
    assert_false(url_ok("https://[::ffff:10.0.0.1]/", false, false));
    assert_true(url_ok("https://127.0.0.1:8443/", false, true));
    assert_true(url_ok("https://localhost/", false, false)); /* a name: checked when connecting */
    assert_false(url_ok("https://u:p@hooks.example.com/", false, false));
    assert_false(url_ok("https://hooks.example.com/a b", false, false));
    assert_false(url_ok("hooks.example.com", false, false));
    assert_false(url_ok("", false, false));
}

static void test_events(void **state)
{
    char lit[OG_WH_EVENTS_LIT];
    og_err_t err = {0};
    assert_true(og_wh_events_parse(NULL, lit, &err));
    assert_string_equal(lit,
                        "{message.sent,message.failed,message.delivered,message.read,message.undelivered,"
                        "otp.verified,otp.locked,message.canceled,message.expired,batch.completed,"
                        "message.received,recipient.opted_out,recipient.opted_in}");
    json_t *e = json_pack("[s,s]", "otp.locked", "message.sent");
    assert_true(og_wh_events_parse(e, lit, &err));
    assert_string_equal(lit, "{message.sent,otp.locked}");
    json_decref(e);
    e = json_pack("[s,s]", "otp.locked", "otp.locked");
    assert_false(og_wh_events_parse(e, lit, &err));
    json_decref(e);
    e = json_pack("[s]", "message.bounced");
    assert_false(og_wh_events_parse(e, lit, &err));
    assert_string_equal(err.field, "events");
    json_decref(e);
    e = json_array();
    assert_false(og_wh_events_parse(e, lit, &err));
    json_decref(e);
}

/* 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, up to 10% more; Retry-After when longer (429, 503
 * only); nothing after the 8th try; a divisor for tests. */
static void test_retry_schedule(void **state)
{
    static const long long s[] = {5, 300, 1800, 7200, 18000, 36000, 36000};
    for (int n = 1; n <= 7; n++) {
        assert_int_equal(og_whout_retry_delay_ms(n, 1, 0, 500, 0), s[n - 1] * 1000);
        long long hi = og_whout_retry_delay_ms(n, 1, 65535, 500, 0);
        assert_true(hi >= s[n - 1] * 1000 && hi <= s[n - 1] * 1100);
    }
    assert_int_equal(og_whout_retry_delay_ms(8, 1, 0, 500, 0), -1);
    assert_int_equal(og_whout_retry_delay_ms(0, 1, 0, 500, 0), -1);
    assert_int_equal(og_whout_retry_delay_ms(1, 1, 0, 429, 60), 60000);
    assert_int_equal(og_whout_retry_delay_ms(1, 1, 0, 503, 60), 60000);
    assert_int_equal(og_whout_retry_delay_ms(1, 1, 0, 500, 60), 5000);   /* only 429 and 503 */
    assert_int_equal(og_whout_retry_delay_ms(2, 1, 0, 429, 60), 300000); /* shorter: the schedule */
    assert_int_equal(og_whout_retry_delay_ms(2, 1000, 0, 500, 0), 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_vector),
        cmocka_unit_test(test_secrets),
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_retry_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
