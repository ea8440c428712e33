/*
 * Unit tests of tokens, OTP codes, their keyed hashes and constant-time comparison
 * (src/base/token.c). Expected hashes were computed independently with Python's hmac module.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/hmac.h"
#include "omnigate/token.h"

static const char base62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static const char secret[] = "omnigate-test-secret";
static const char fixed_token[] = "kft_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd";

/* A new token is "kft_" + 40 base62 characters and passes the format check. */
static void test_token_format(void **state)
{
    char tok[OG_TOKEN_SIZE];
    og_token_generate(tok);
    assert_int_equal(strlen(tok), 44);
    assert_memory_equal(tok, "kft_", 4);
    for (int i = 4; i < 44; i++)
        assert_non_null(strchr(base62, tok[i]));
    assert_true(og_token_format_valid(tok, strlen(tok)));
    char other[OG_TOKEN_SIZE];
    og_token_generate(other);
    assert_string_not_equal(tok, other);
}

/* Over 200 000 drawn characters, every base62 character appears, nothing else does, and
 * each count is within 10% of the mean (rejection sampling: no character is favoured; with
 * plain modulo, 0-7 would come up 25% more often than the rest). */
static void test_token_alphabet_uniform(void **state)
{
    enum { TOKENS = 5000 };
    unsigned counts[256] = {0};
    for (int t = 0; t < TOKENS; t++) {
        char tok[OG_TOKEN_SIZE];
        og_token_generate(tok);
        for (int i = 4; i < 44; i++)
            counts[(unsigned char)tok[i]]++;
    }
    const double mean = TOKENS * 40.0 / 62;
    for (int c = 0; c < 256; c++) {
        if (c != 0 && strchr(base62, c) != NULL) {
            assert_true(counts[c] > mean * 0.9);
            assert_true(counts[c] < mean * 1.1);
        } else {
            assert_int_equal(counts[c], 0);
        }
    }
}

/* The format check wants exactly "kft_" + 40 base62 characters. */
static void test_token_format_rejects(void **state)
{
    char tok[OG_TOKEN_SIZE + 1];
    memcpy(tok, fixed_token, sizeof(fixed_token));
    assert_true(og_token_format_valid(tok, 44));
    assert_false(og_token_format_valid(tok, 43));
    tok[44] = 'e';
    tok[45] = '\0';
    assert_false(og_token_format_valid(tok, 45));
    const char *const bad[] = {
        "kfT_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd",       "kfx_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd",
        "kft-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd",       "kft_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabc-",
        "kft_0123456789ABCDEFGHIJ_LMNOPQRSTUVWXYZabcd",       "kft_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZab d",
        "kft_\303\251123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabc", /* é */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(strlen(bad[i]), 44);
        assert_false(og_token_format_valid(bad[i], 44));
    }
    assert_false(og_token_format_valid("kft_0123456789ABCDEFGHIJ\0LMNOPQRSTUVWXYZabcd", 44));
    assert_false(og_token_format_valid(NULL, 44));
    assert_false(og_token_format_valid("", 0));
}

/* The HMAC primitive matches RFC 4231 test case 2 (key "Jefe") and the empty-key, empty-data
 * value. */
static void test_hmac_known_answers(void **state)
{
    char hex[OG_HASH_HEX_SIZE];
    const char *data = "what do ya want for nothing?";
    assert_true(og_token_hash("Jefe", data, strlen(data), hex));
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    assert_true(og_token_hash("", "", 0, hex));
    assert_string_equal(hex, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

/* A fixed token under a fixed secret hashes to a fixed value; only `len` bytes count; another
 * secret gives another hash. */
static void test_token_hash_known_answer(void **state)
{
    char hex[OG_HASH_HEX_SIZE], hex2[OG_HASH_HEX_SIZE];
    assert_true(og_token_hash(secret, fixed_token, 44, hex));
    assert_string_equal(hex, "bd9d3b7637edadbe61d0be0fc81dff80fc7aed96deb5b4d2aacb0256322169cd");
    char longer[64];
    strcpy(longer, fixed_token);
    strcat(longer, " trailing");
    assert_true(og_token_hash(secret, longer, 44, hex2));
    assert_string_equal(hex, hex2);
    assert_true(og_token_hash("another-secret", fixed_token, 44, hex2));
    assert_string_not_equal(hex, hex2);
}

/* og_token_hash_with (the key made ready once, as auth does per worker) gives og_token_hash's
 * value, every time. */
static void test_token_hash_with_key(void **state)
{
    char hex[OG_HASH_HEX_SIZE], hex2[OG_HASH_HEX_SIZE];
    og_hmac_key_t k;
    assert_true(og_hmac_key_init(&k, OG_HMAC_SHA256, secret, strlen(secret)));
    assert_true(og_token_hash(secret, fixed_token, 44, hex));
    for (int i = 0; i < 2; i++) {
        assert_true(og_token_hash_with(&k, fixed_token, 44, hex2));
        assert_string_equal(hex, hex2);
    }
    og_hmac_key_clear(&k);
    assert_false(og_token_hash_with(&k, fixed_token, 44, hex2));
    assert_string_equal(hex2, "");
}

/* The display prefix is the first 12 characters: "kft_" + 8. */
static void test_token_prefix(void **state)
{
    char p[OG_TOKEN_DISPLAY_SIZE];
    og_token_prefix(fixed_token, p);
    assert_string_equal(p, "kft_01234567");
    og_token_prefix("kft_ab", p);
    assert_string_equal(p, "kft_ab");
}

/* og_ct_equal compares exactly n bytes. */
static void test_ct_equal(void **state)
{
    assert_true(og_ct_equal("abcdef", "abcdef", 6));
    assert_false(og_ct_equal("abcdef", "xbcdef", 6));
    assert_false(og_ct_equal("abcdef", "abcdex", 6));
    assert_true(og_ct_equal("abcdef", "abcdex", 5));
    assert_true(og_ct_equal("a", "b", 0));
}

/* OTP codes have the asked length (4-10), digits only; other lengths are refused and leave
 * the buffer untouched. */
static void test_otp_length_and_digits(void **state)
{
    for (int len = OG_OTP_MIN_LEN; len <= OG_OTP_MAX_LEN; len++) {
        char code[16];
        memset(code, 'x', sizeof(code));
        assert_true(og_otp_generate(code, len));
        assert_int_equal(strlen(code), (size_t)len);
        for (int i = 0; i < len; i++)
            assert_true(code[i] >= '0' && code[i] <= '9');
    }
    char code[16] = "untouched";
    assert_false(og_otp_generate(code, 3));
    assert_false(og_otp_generate(code, 11));
    assert_false(og_otp_generate(code, 0));
    assert_false(og_otp_generate(code, -1));
    assert_string_equal(code, "untouched");
}

/* Digits are uniform: over 200 000 digits, chi-square with 9 degrees of freedom stays below 50
 * (p < 1e-7 for a fair source, while a plain `byte % 10`, which favours 0-5 by 4%, scores about
 * 75), each digit within 5% of the mean, and the first position is uniform too (leading zeros
 * happen). */
static void test_otp_uniform(void **state)
{
    enum { DRAWS = 20000, LEN = 10 };
    unsigned all[10] = {0}, first[10] = {0};
    for (int d = 0; d < DRAWS; d++) {
        char code[LEN + 1];
        assert_true(og_otp_generate(code, LEN));
        first[code[0] - '0']++;
        for (int i = 0; i < LEN; i++)
            all[code[i] - '0']++;
    }
    const double mean = DRAWS * LEN / 10.0, mean_first = DRAWS / 10.0;
    double chi = 0, chi_first = 0;
    for (int k = 0; k < 10; k++) {
        chi += (all[k] - mean) * (all[k] - mean) / mean;
        chi_first += (first[k] - mean_first) * (first[k] - mean_first) / mean_first;
        assert_true(all[k] > mean * 0.95 && all[k] < mean * 1.05);
    }
    assert_true(chi < 50);
    assert_true(chi_first < 50);
}

/* The OTP hash is HMAC-SHA256 over length-prefixed fields; known answer, and fields cannot run
 * into each other. */
static void test_otp_hash(void **state)
{
    char a[OG_HASH_HEX_SIZE], b[OG_HASH_HEX_SIZE];
    const char *tenant = "8d6f1c2e-0000-4000-8000-000000000001", *ref = "kf_01ARYZ6S41TSV4RRFFQ69G5FAV";
    assert_true(og_otp_hash(secret, tenant, ref, "123456", a));
    assert_string_equal(a, "5cedc303c562be2636a0811186ac7fcc8f8c7f4c7e3e18775004768cacafbe33");
    assert_true(og_otp_hash(secret, tenant, ref, "123457", b));
    assert_string_not_equal(a, b);
    assert_true(og_otp_hash(secret, "t1", ref, "123456", b));
    assert_true(og_otp_hash(secret, "t2", ref, "123456", a));
    assert_string_not_equal(a, b);
    /* ("ab", "c") and ("a", "bc") in adjacent fields */
    assert_true(og_otp_hash(secret, "t", "ab", "c", a));
    assert_true(og_otp_hash(secret, "t", "a", "bc", b));
    assert_string_not_equal(a, b);
    /* NULL is "" */
    assert_true(og_otp_hash(secret, NULL, ref, "1234", a));
    assert_true(og_otp_hash(secret, "", ref, "1234", b));
    assert_string_equal(a, b);
    /* An OTP hash never equals the token hash of the same bytes. */
    assert_true(og_token_hash(secret, "1234", 4, b));
    assert_string_not_equal(a, b);
}

/* Every occurrence of the code is masked; a cut text's tail that begins the code is masked too,
 * an uncut one's is not (it is other digits); an empty code masks nothing. */
static void test_otp_mask(void **state)
{
    char s[64] = "Parameter 123456 is invalid (123456)";
    og_otp_mask(s, sizeof(s), "123456");
    assert_string_equal(s, "Parameter ****** is invalid (******)");
    char cut[16] = "code is 0012345"; /* 15 characters: fills its buffer */
    og_otp_mask(cut, sizeof(cut), "001234567");
    assert_string_equal(cut, "code is *******");
    char uncut[64] = "error 20500 at 12";
    og_otp_mask(uncut, sizeof(uncut), "1234");
    assert_string_equal(uncut, "error 20500 at 12");
    char none[16] = "1234";
    og_otp_mask(none, sizeof(none), "");
    assert_string_equal(none, "1234");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_format),
        cmocka_unit_test(test_token_alphabet_uniform),
        cmocka_unit_test(test_token_format_rejects),
        cmocka_unit_test(test_hmac_known_answers),
        cmocka_unit_test(test_token_hash_known_answer),
        cmocka_unit_test(test_token_hash_with_key),
        cmocka_unit_test(test_token_prefix),
        cmocka_unit_test(test_ct_equal),
        cmocka_unit_test(test_otp_length_and_digits),
        cmocka_unit_test(test_otp_uniform),
        cmocka_unit_test(test_otp_hash),
        cmocka_unit_test(test_otp_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
