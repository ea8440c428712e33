/*
 * HMAC and the provider signature checks (src/base/hmac.c) against published vectors: RFC 4231
 * test case 2 for SHA-256 and SHA-512, and the example of Twilio's request-validation
 * documentation for base64 HMAC-SHA1 over URL + sorted fields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/hmac.h"

static const char jefe_data[] = "what do ya want for nothing?";
static const char jefe_256[] = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
static const char jefe_512[] =
    "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034"
    "f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737";

/* og_hmac and og_hex_lower give the RFC 4231 digests. */
static void test_rfc4231_vectors(void **state)
{
    unsigned char md[OG_HMAC_MAX];
    char hex[2 * OG_HMAC_MAX + 1];
    const void *parts[2] = {jefe_data, jefe_data + 10};
    size_t lens[2] = {10, strlen(jefe_data) - 10}; /* split in two: parts are concatenated */
    size_t n = og_hmac(OG_HMAC_SHA256, "Jefe", 4, parts, lens, 2, md);
    assert_int_equal(n, 32);
    og_hex_lower(md, n, hex);
    assert_string_equal(hex, jefe_256);
    n = og_hmac(OG_HMAC_SHA512, "Jefe", 4, parts, lens, 2, md);
    assert_int_equal(n, 64);
    og_hex_lower(md, n, hex);
    assert_string_equal(hex, jefe_512);
}

/* A key made ready once gives the RFC 4231 digests again and again (each sum starts from the
 * key, not from the previous message), and an empty key equals og_hmac's empty key. */
static void test_key_reused(void **state)
{
    unsigned char md[OG_HMAC_MAX], one[OG_HMAC_MAX];
    char hex[2 * OG_HMAC_MAX + 1];
    const void *parts[2] = {jefe_data, jefe_data + 10};
    size_t lens[2] = {10, strlen(jefe_data) - 10};
    og_hmac_key_t k;
    assert_true(og_hmac_key_init(&k, OG_HMAC_SHA256, "Jefe", 4));
    for (int round = 0; round < 3; round++) {
        assert_int_equal(og_hmac_key_sum(&k, parts, lens, 2, md), 32);
        og_hex_lower(md, 32, hex);
        assert_string_equal(hex, jefe_256);
        size_t short_len[1] = {3}; /* a different message between: no state carried over */
        assert_int_equal(og_hmac_key_sum(&k, parts, short_len, 1, md), 32);
    }
    og_hmac_key_clear(&k);
    assert_int_equal(og_hmac_key_sum(&k, parts, lens, 2, md), 0);
    og_hmac_key_clear(&k);
    assert_true(og_hmac_key_init(&k, OG_HMAC_SHA512, "", 0));
    assert_int_equal(og_hmac_key_sum(&k, parts, lens, 2, md), 64);
    assert_int_equal(og_hmac(OG_HMAC_SHA512, "", 0, parts, lens, 2, one), 64);
    assert_memory_equal(md, one, 64);
    og_hmac_key_clear(&k);
}

/* A hex signature is accepted in either case, and refused when one character, the length or
 * the key differs, or when it holds a non-hex character. */
static void test_check_hex(void **state)
{
    size_t len = strlen(jefe_data);
    assert_true(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, jefe_256, 64));
    char upper[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)(jefe_256[i] >= 'a' ? jefe_256[i] - 32 : jefe_256[i]);
    assert_true(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, upper, 64));
    assert_true(og_hmac_check_hex(OG_HMAC_SHA512, "Jefe", jefe_data, len, jefe_512, 128));
    char bad[65];
    memcpy(bad, jefe_256, 65);
    bad[63] = bad[63] == '3' ? '4' : '3';
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, bad, 64));
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, jefe_256, 63));
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "jefe", jefe_data, len, jefe_256, 64));
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len - 1, jefe_256, 64));
    assert_false(og_hmac_check_hex(OG_HMAC_SHA512, "Jefe", jefe_data, len, jefe_256, 64));
    memcpy(bad, jefe_256, 65);
    bad[0] = 'g';
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, bad, 64));
    assert_false(og_hmac_check_hex(OG_HMAC_SHA256, "Jefe", jefe_data, len, "", 0));
}

/* Twilio's example: token 12345, the URL with its query, then each field name and value in
 * name order, no separators. */
static void test_check_twilio_example(void **state)
{
    const char *parts[] = {"https://mycompany.com/myapp.php?foo=1&bar=2",
                           "CallSid",
                           "CA1234567890ABCDE",
                           "Caller",
                           "+12349013030",
                           "Digits",
                           "1234",
                           "From",
                           "+12349013030",
                           "To",
                           "+18005551212"};
    size_t lens[11];
    for (int i = 0; i < 11; i++)
        lens[i] = strlen(parts[i]);
    const char sig[] = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";
    assert_true(
        og_hmac_check_b64(OG_HMAC_SHA1, "12345", (const void *const *)parts, lens, 11, sig, strlen(sig)));
    assert_false(
        og_hmac_check_b64(OG_HMAC_SHA1, "12346", (const void *const *)parts, lens, 11, sig, strlen(sig)));
    lens[0]--; /* the URL without its last character */
    assert_false(
        og_hmac_check_b64(OG_HMAC_SHA1, "12345", (const void *const *)parts, lens, 11, sig, strlen(sig)));
    lens[0]++;
    assert_false(
        og_hmac_check_b64(OG_HMAC_SHA1, "12345", (const void *const *)parts, lens, 11, sig, strlen(sig) - 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc4231_vectors),
        cmocka_unit_test(test_key_reused),
        cmocka_unit_test(test_check_hex),
        cmocka_unit_test(test_check_twilio_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
