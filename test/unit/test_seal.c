/*
 * Sealed secrets (src/base/seal.c) and their use in tenant settings (src/product/settings.c):
 * HKDF-SHA256 against RFC 5869, the layout against the AES-256-GCM vector of the GCM
 * specification (McGrew and Viega, test case 16), and every way a sealed value must refuse to
 * open: another key, another tenant, one altered byte, a non-canonical spelling.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "omnigate/seal.h"
#include "omnigate/tenants/settings.h"

static const char tenant_a[] = "0b6f3f8e-5d7c-4a53-9d1e-2f0a8c4b7e11";
static const char tenant_b[] = "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f";
static const char secret[] = "e2e-secret-0123456789abcdef";

static size_t unhex(const char *hex, unsigned char *out)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        char b[3] = {hex[2 * i], hex[2 * i + 1], 0};
        out[i] = (unsigned char)strtoul(b, NULL, 16);
    }
    return n;
}

static og_seal_key_t settings_key(const char *s)
{
    og_seal_key_t k;
    assert_true(og_settings_key(&k, s));
    return k;
}

/* With no salt and an empty info string the key is the first 32 bytes of RFC 5869 test case 3;
 * another info string (purpose) or another secret gives another key. */
static void test_hkdf_rfc5869(void **state)
{
    unsigned char ikm[22], okm[42];
    memset(ikm, 0x0b, sizeof(ikm));
    unhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8", okm);
    og_seal_key_t k, other;
    assert_true(og_seal_key_derive(&k, (const char *)ikm, sizeof(ikm), ""));
    assert_memory_equal(k.bytes, okm, OG_SEAL_KEY_LEN);
    assert_true(og_seal_key_derive(&other, (const char *)ikm, sizeof(ikm), "omnigate webhooks v1"));
    assert_memory_not_equal(k.bytes, other.bytes, OG_SEAL_KEY_LEN);
    og_seal_key_t s1 = settings_key(secret), s2 = settings_key("e2e-secret-0123456789abcdeF");
    assert_memory_not_equal(s1.bytes, s2.bytes, OG_SEAL_KEY_LEN);
    assert_false(og_seal_key_derive(&k, NULL, 0, "x"));
    og_seal_key_clear(&s1);
    for (size_t i = 0; i < OG_SEAL_KEY_LEN; i++)
        assert_int_equal(s1.bytes[i], 0);
}

/* "sealed:v1:" + base64(IV || C || T) of the GCM specification's AES-256 test case 16 opens to
 * its plaintext with its key and AAD: the format is plain AES-256-GCM, nothing of our own. */
static void test_gcm_known_answer(void **state)
{
    og_seal_key_t key;
    unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key.bytes);
    unsigned char raw[12 + 60 + 16], p[60], aad_bytes[20];
    size_t n = unhex("cafebabefacedbaddecaf888", raw);
    n += unhex(
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f"
        "61e6393ba7a0abcc9f662",
        raw + n);
    n += unhex("76fc6ece0f4e1768cddf8853bb2d551b", raw + n);
    assert_int_equal(n, sizeof(raw));
    unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b1"
          "6aed"
          "f5aa0de657ba637b39",
          p);
    char aad[21];
    unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2", aad_bytes);
    memcpy(aad, aad_bytes, 20); /* no zero byte: usable as a C string */
    aad[20] = '\0';
    char sealed[256] = OG_SEAL_PREFIX;
    EVP_EncodeBlock((unsigned char *)sealed + strlen(OG_SEAL_PREFIX), raw, (int)n);
    assert_int_equal(strlen(sealed), og_seal_sealed_len(60));
    char *plain = NULL;
    size_t len = 0;
    assert_int_equal(og_seal_open(&key, aad, sealed, strlen(sealed), &plain, &len), OG_SEAL_OK);
    assert_int_equal(len, 60);
    assert_memory_equal(plain, p, 60);
    og_seal_free_plain(plain, len);
    aad[0] ^= 1;
    assert_int_equal(og_seal_open(&key, aad, sealed, strlen(sealed), &plain, &len), OG_SEAL_REFUSED);
    assert_null(plain);
}

/* A secret sealed and opened with the same key and tenant comes back; two seals of it differ
 * (fresh nonce) and neither contains it. */
static void test_round_trip(void **state)
{
    og_seal_key_t k = settings_key(secret);
    const char tok[] = "EAAGsecretsecretsecret1234";
    char *a = og_seal(&k, tenant_a, tok, strlen(tok)), *b = og_seal(&k, tenant_a, tok, strlen(tok));
    assert_non_null(a);
    assert_non_null(b);
    assert_true(og_seal_is_sealed(a));
    assert_true(strncmp(a, "sealed:v1:", 10) == 0);
    assert_int_equal(strlen(a), og_seal_sealed_len(strlen(tok)));
    assert_string_not_equal(a, b);
    assert_null(strstr(a, "secret"));
    assert_true(og_seal_well_formed(a, strlen(a)));
    char *plain = NULL;
    size_t len = 0;
    assert_int_equal(og_seal_open(&k, tenant_a, a, strlen(a), &plain, &len), OG_SEAL_OK);
    assert_int_equal(len, strlen(tok));
    assert_string_equal(plain, tok);
    og_seal_free_plain(plain, len);
    free(a);
    free(b);

    char *empty = og_seal(&k, tenant_a, "", 0);
    assert_int_equal(og_seal_open(&k, tenant_a, empty, strlen(empty), &plain, &len), OG_SEAL_OK);
    assert_int_equal(len, 0);
    assert_string_equal(plain, "");
    og_seal_free_plain(plain, len);
    free(empty);

    char *big = calloc(1, OG_SEAL_PLAIN_MAX + 1);
    assert_null(og_seal(&k, tenant_a, big, OG_SEAL_PLAIN_MAX + 1));
    char *max = og_seal(&k, tenant_a, big, OG_SEAL_PLAIN_MAX);
    assert_non_null(max);
    assert_int_equal(og_seal_open(&k, tenant_a, max, strlen(max), &plain, &len), OG_SEAL_OK);
    assert_int_equal(len, OG_SEAL_PLAIN_MAX);
    og_seal_free_plain(plain, len);
    free(max);
    free(big);
}

/* Another key (OMNIGATE_SECRET changed), another tenant, or any one character changed: refused. */
static void test_refused(void **state)
{
    og_seal_key_t k = settings_key(secret), other = settings_key("another-secret-0123456789");
    const char tok[] = "EAAGsecretsecretsecret1234";
    char *s = og_seal(&k, tenant_a, tok, strlen(tok));
    size_t n = strlen(s);
    char *plain = NULL;
    size_t len = 0;
    assert_int_equal(og_seal_open(&other, tenant_a, s, n, &plain, &len), OG_SEAL_REFUSED);
    assert_int_equal(og_seal_open(&k, tenant_b, s, n, &plain, &len), OG_SEAL_REFUSED);
    assert_null(plain);
    assert_int_equal(len, 0);
    /* Each base64 character but the last ones (whose low bits padding ignores) changed once. */
    for (size_t i = strlen(OG_SEAL_PREFIX); i < n - 2; i++) {
        char saved = s[i];
        s[i] = saved == 'A' ? 'B' : 'A';
        og_seal_status_t st = og_seal_open(&k, tenant_a, s, n, &plain, &len);
        assert_true(st == OG_SEAL_REFUSED || st == OG_SEAL_MALFORMED);
        assert_null(plain);
        s[i] = saved;
    }
    assert_int_equal(og_seal_open(&k, tenant_a, s, n, &plain, &len), OG_SEAL_OK);
    og_seal_free_plain(plain, len);
    free(s);
}

/* Only one spelling opens: a wrong prefix or version, whitespace, missing padding, a string too
 * short to hold nonce and tag are malformed. */
static void test_malformed(void **state)
{
    og_seal_key_t k = settings_key(secret);
    char *s = og_seal(&k, tenant_a, "x", 1); /* 29 raw bytes: base64 ends in "=" */
    size_t n = strlen(s);
    assert_int_equal(s[n - 1], '=');
    char buf[256];
    char *plain = NULL;
    size_t len = 0;
    const char *cases[] = {"sealed:v2:", "sealed:v1", "Sealed:v1:", "sealed:v1: ", "", "sealed:v1:AAAA"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", cases[i], i < 4 ? s + 10 : "");
        assert_int_equal(og_seal_open(&k, tenant_a, buf, strlen(buf), &plain, &len), OG_SEAL_MALFORMED);
        assert_false(og_seal_well_formed(buf, strlen(buf)));
    }
    memcpy(buf, s, n - 1); /* no padding */
    assert_int_equal(og_seal_open(&k, tenant_a, buf, n - 1, &plain, &len), OG_SEAL_MALFORMED);
    snprintf(buf, sizeof(buf), "%.*s\n%s", 20, s, s + 20); /* a line break inside */
    assert_int_equal(og_seal_open(&k, tenant_a, buf, strlen(buf), &plain, &len), OG_SEAL_MALFORMED);
    assert_true(og_seal_is_sealed("sealed:v9:whatever"));
    assert_false(og_seal_is_sealed("EAAG"));
    assert_false(og_seal_is_sealed(NULL));
    free(s);
}

static json_t *load(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

static const char meta_settings[] = "{\"channels\": {\"whatsapp_meta\": {\"enabled\": true, \"numbers\": {"
                                    "\"6281234567890\": {\"phoneNumberId\": \"109876543210\", "
                                    "\"accessToken\": \"EAAGsecretsecretsecret1234\"},"
                                    "\"6281234567891\": {\"phoneNumberId\": \"109876543211\", "
                                    "\"accessToken\": \"EAAGothertokenother9876\"}}}}}";

static const char *token_of(const json_t *s, const char *from)
{
    return json_string_value(json_object_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(s, "channels"), "whatsapp_meta"), "numbers"),
            from),
        "accessToken"));
}

/* og_settings_seal seals every accessToken (and only those, once); og_settings_open gives the
 * clear values back for the same tenant, and the getter hands them out. */
static void test_settings_seal_open(void **state)
{
    og_seal_key_t k = settings_key(secret);
    json_t *s = load(meta_settings);
    assert_int_equal(og_settings_seal(s, &k, tenant_a), 2);
    assert_true(og_seal_is_sealed(token_of(s, "6281234567890")));
    assert_true(og_seal_is_sealed(token_of(s, "6281234567891")));
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(
                json_object_get(json_object_get(json_object_get(s, "channels"), "whatsapp_meta"), "numbers"),
                "6281234567890"),
            "phoneNumberId")),
        "109876543210");
    char *text = json_dumps(s, 0);
    assert_null(strstr(text, "EAAG"));
    free(text);
    og_err_t err = {0};
    assert_true(og_settings_validate(s, &err));             /* a stored document stays valid */
    assert_int_equal(og_settings_seal(s, &k, tenant_a), 0); /* already sealed: left alone */

    assert_int_equal(og_settings_open(s, &k, tenant_a, NULL), 0);
    assert_string_equal(token_of(s, "6281234567890"), "EAAGsecretsecretsecret1234");
    assert_string_equal(token_of(s, "6281234567891"), "EAAGothertokenother9876");
    og_settings_wa_number_t num;
    assert_true(og_settings_wa_number(s, "whatsapp_meta", "6281234567890", &num));
    assert_string_equal(num.access_token, "EAAGsecretsecretsecret1234");
    assert_false(num.access_token_sealed);
    json_t *masked = og_settings_mask(s);
    assert_string_equal(token_of(masked, "6281234567890"), "****1234");
    json_decref(masked);

    /* Opening again is a no-op: clear values are left as they are. */
    assert_int_equal(og_settings_open(s, &k, tenant_a, NULL), 0);
    assert_string_equal(token_of(s, "6281234567890"), "EAAGsecretsecretsecret1234");
    json_decref(s);
}

/* A value that does not open (another tenant's, or another OMNIGATE_SECRET) stays sealed: the
 * getter registers the number without a token and says so, masking shows "****", a masked
 * echo keeps it through a merge, and the document still validates. */
static void test_settings_unopened(void **state)
{
    og_seal_key_t k = settings_key(secret), other = settings_key("another-secret-0123456789");
    json_t *s = load(meta_settings);
    assert_int_equal(og_settings_seal(s, &k, tenant_a), 2);
    json_t *moved = json_deep_copy(s);
    assert_int_equal(og_settings_open(moved, &k, tenant_b, NULL), 2);
    assert_int_equal(og_settings_open(s, &other, tenant_a, NULL), 2);
    for (json_t *d = s; d != NULL; d = d == s ? moved : NULL) {
        og_settings_wa_number_t num;
        assert_true(og_settings_wa_number(d, "whatsapp_meta", "6281234567890", &num));
        assert_null(num.access_token);
        assert_true(num.access_token_sealed);
        assert_string_equal(num.phone_number_id, "109876543210");
        json_t *masked = og_settings_mask(d);
        assert_string_equal(token_of(masked, "6281234567890"), "****");
        json_t *patch = load("{\"channels\": {\"whatsapp_meta\": {\"numbers\": {\"6281234567890\": "
                             "{\"accessToken\": \"****\"}}}}}");
        json_t *merged = og_settings_merge_patch(d, patch);
        assert_string_equal(token_of(merged, "6281234567890"), token_of(d, "6281234567890"));
        og_err_t err = {0};
        assert_true(og_settings_validate(merged, &err));
        json_decref(merged);
        json_decref(patch);
        json_decref(masked);
    }
    json_decref(moved);
    json_decref(s);
}

/* A client may not pass off garbage as a sealed value, and a clear token is still checked. */
static void test_settings_validate_sealed(void **state)
{
    const char *bad[] = {"sealed:v1:not base64!",
                         "sealed:v1:", "sealed:v2:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *s = json_pack("{s:{s:{s:{s:{s:s,s:s}}}}}", "channels", "whatsapp_meta", "numbers",
                              "6281234567890", "phoneNumberId", "109876543210", "accessToken", bad[i]);
        og_err_t err = {0};
        assert_false(og_settings_validate(s, &err));
        assert_string_equal(err.field, "settings.channels.whatsapp_meta.numbers.6281234567890.accessToken");
        json_decref(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hkdf_rfc5869),      cmocka_unit_test(test_gcm_known_answer),
        cmocka_unit_test(test_round_trip),        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_malformed),         cmocka_unit_test(test_settings_seal_open),
        cmocka_unit_test(test_settings_unopened), cmocka_unit_test(test_settings_validate_sealed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
