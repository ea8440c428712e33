/*
 * The append-only JSON writer (src/base/jw.c) against jansson: the same values give the same
 * text as json_dumps(JSON_COMPACT | JSON_PRESERVE_ORDER), escapes included; bytes that are not
 * UTF-8 come out as U+FFFD; the output always parses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "omnigate/jw.h"

static void assert_same_as_jansson(og_jw_t *w, json_t *tree)
{
    size_t len = 0;
    char *ours = og_jw_finish(w, &len);
    char *theirs = json_dumps(tree, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    assert_non_null(ours);
    assert_non_null(theirs);
    assert_int_equal(len, strlen(ours));
    assert_string_equal(ours, theirs);
    free(ours);
    free(theirs);
    json_decref(tree);
}

/* Every byte jansson escapes (quote, backslash, each control character) and the ones it
 * leaves alone ('/', DEL, multi-byte UTF-8 of 2, 3 and 4 bytes) come out as jansson writes them. */
static void test_escapes_match_jansson(void **state)
{
    char s[64];
    size_t n = 0;
    for (int c = 1; c < 0x20; c++)
        s[n++] = (char)c;
    memcpy(s + n,
           "\"\\/\x7f"
           "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z",
           16);
    n += 16;
    og_jw_t w;
    og_jw_init(&w, 0);
    og_jw_stringn(&w, s, n);
    assert_same_as_jansson(&w, json_stringn(s, n));

    /* A NUL inside a string (json_stringn keeps it) is \u0000. */
    og_jw_init(&w, 0);
    og_jw_stringn(&w, "a\0b", 3);
    assert_same_as_jansson(&w, json_stringn("a\0b", 3));
}

/* A document of every kind of value, nested objects and arrays (empty ones too), in the order
 * written, and keys that need escaping: the text jansson gives for the same tree. */
static void test_document_matches_jansson(void **state)
{
    og_jw_t w;
    og_jw_init(&w, 8); /* small: the buffer grows several times */
    og_jw_object(&w);
    og_jw_key(&w, "success");
    og_jw_bool(&w, true);
    og_jw_kstring(&w, "message", "Message sent via whatsapp_qr");
    og_jw_key(&w, "data");
    og_jw_object(&w);
    og_jw_kstring(&w, "reference", "msg_01HXYZ");
    og_jw_key(&w, "winningChannel");
    og_jw_string(&w, NULL);
    og_jw_key(&w, "attempts");
    og_jw_array(&w);
    for (int i = 0; i < 3; i++) {
        og_jw_object(&w);
        og_jw_kstring(&w, "channel", "sms");
        og_jw_kint(&w, "latencyMs", i == 2 ? -9223372036854775807LL - 1 : 1000000000000LL * i);
        og_jw_key(&w, "ok");
        og_jw_bool(&w, i == 1);
        og_jw_object_end(&w);
    }
    og_jw_array_end(&w);
    og_jw_key(&w, "skipped");
    og_jw_array(&w);
    og_jw_array_end(&w);
    og_jw_key(&w, "empty");
    og_jw_object(&w);
    og_jw_object_end(&w);
    og_jw_key(&w, "k\"e\\y\n");
    og_jw_null(&w);
    og_jw_key(&w, "nested");
    og_jw_array(&w);
    og_jw_array(&w);
    og_jw_int(&w, 1);
    og_jw_array_end(&w);
    og_jw_array(&w);
    og_jw_array_end(&w);
    og_jw_string(&w, "x");
    og_jw_array_end(&w);
    og_jw_key(&w, "raw");
    og_jw_raw(&w, "{\"a\":[1,2]}", 11);
    og_jw_object_end(&w);
    og_jw_object_end(&w);

    json_t *attempts = json_array();
    for (int i = 0; i < 3; i++)
        json_array_append_new(
            attempts,
            json_pack("{s:s,s:I,s:b}", "channel", "sms", "latencyMs",
                      (json_int_t)(i == 2 ? -9223372036854775807LL - 1 : 1000000000000LL * i), "ok", i == 1));
    json_t *tree =
        json_pack("{s:b,s:s,s:{s:s,s:n,s:o,s:[],s:{},s:n,s:[[i],[],s],s:{s:[i,i]}}}", "success", 1, "message",
                  "Message sent via whatsapp_qr", "data", "reference", "msg_01HXYZ", "winningChannel",
                  "attempts", attempts, "skipped", "empty", "k\"e\\y\n", "nested", 1, "x", "raw", "a", 1, 2);
    assert_non_null(tree);
    assert_same_as_jansson(&w, tree);
}

/* Bytes that are not well-formed UTF-8 (a lone continuation byte, a truncated sequence, an
 * overlong form, a surrogate, a code point over U+10FFFF) are each one U+FFFD; the text parses. */
static void test_invalid_utf8_replaced(void **state)
{
    static const char in[] = "a\x80"
                             "b\xc3"
                             "c\xc0\xaf"
                             "d\xed\xa0\x80"
                             "e\xf4\x90\x80\x80";
    static const char want[] = "\"a\xef\xbf\xbd"
                               "b\xef\xbf\xbd"
                               "c\xef\xbf\xbd\xef\xbf\xbd"
                               "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                               "e\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"";
    og_jw_t w;
    og_jw_init(&w, 0);
    og_jw_stringn(&w, in, sizeof(in) - 1);
    size_t len;
    char *out = og_jw_finish(&w, &len);
    assert_string_equal(out, want);
    json_t *back = json_loadb(out, len, JSON_DECODE_ANY, NULL);
    assert_non_null(back);
    json_decref(back);
    free(out);
}

/* A writer that wrote nothing finishes as the empty string; a finished writer can be used again. */
static void test_empty_and_reuse(void **state)
{
    og_jw_t w;
    og_jw_init(&w, 0);
    size_t len = 1;
    char *out = og_jw_finish(&w, &len);
    assert_non_null(out);
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    free(out);
    og_jw_array(&w);
    og_jw_int(&w, 7);
    og_jw_array_end(&w);
    out = og_jw_finish(&w, &len);
    assert_string_equal(out, "[7]");
    free(out);
    og_jw_free(&w);
}

/* og_jw_finish_fit gives the same text and length as og_jw_finish, in an allocation of the
 * text's size (the sanitized builds check every byte read and the free), and NULL after a
 * failure. */
static void test_finish_fit(void **state)
{
    const char *text = "Your code is 123456\n\"quoted\" and \x01";
    og_jw_t a, b;
    og_jw_init(&a, 0);
    og_jw_init(&b, 0);
    og_jw_object(&a);
    og_jw_object(&b);
    og_jw_kstring(&a, "text", text);
    og_jw_kstring(&b, "text", text);
    og_jw_object_end(&a);
    og_jw_object_end(&b);
    assert_true(a.cap > a.len + 1);
    size_t la = 0, lb = 0;
    char *fa = og_jw_finish(&a, &la), *fb = og_jw_finish_fit(&b, &lb);
    assert_int_equal(la, lb);
    assert_string_equal(fa, fb);
    assert_int_equal(strlen(fb), lb);
    assert_true(malloc_usable_size(fb) < malloc_usable_size(fa));
    free(fa);
    free(fb);
    og_jw_t c;
    og_jw_init(&c, 0);
    c.failed = true;
    assert_null(og_jw_finish_fit(&c, &lb));
}

/* og_int_str writes what "%lld" writes, the extremes included; og_jw_number6 what "%.6g" writes,
 * through its whole-number path (under a million) and printf's (fractions, a million and up). */
static void test_numbers_match_printf(void **state)
{
    const long long ints[] = {0, 7, -7, 10, 999999, 1000000, 1764000000123LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        char ours[OG_INT_STR_SIZE], theirs[32];
        snprintf(theirs, sizeof(theirs), "%lld", ints[i]);
        assert_int_equal(og_int_str(ours, ints[i]), strlen(theirs));
        assert_string_equal(ours, theirs);
    }
    const double nums[] = {0,    1,       80,   100000, 999999, 1000000, 1234567,
                           0.25, 1.0 / 6, 80.5, 1e-7,   -3,     -999999};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        og_jw_t w;
        og_jw_init(&w, 0);
        og_jw_number6(&w, nums[i]);
        char *ours = og_jw_finish(&w, NULL), theirs[32];
        snprintf(theirs, sizeof(theirs), "%.6g", nums[i]);
        assert_non_null(ours);
        assert_string_equal(ours, theirs);
        free(ours);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes_match_jansson),
        cmocka_unit_test(test_document_matches_jansson),
        cmocka_unit_test(test_invalid_utf8_replaced),
        cmocka_unit_test(test_empty_and_reuse),
        cmocka_unit_test(test_finish_fit),
        cmocka_unit_test(test_numbers_match_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
