/*
 * Unit tests of text validation and SMS segment counting (src/base/smsenc.c). The boundary table
 * follows docs/sms-encoding.md.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/smsenc.h"

#define EURO    "\xe2\x82\xac"     /* U+20AC, GSM-7 extension table */
#define YA      "\xd1\x8f"         /* U+044F CYRILLIC SMALL LETTER YA, not GSM-7, 1 UTF-16 unit */
#define GRIN    "\xf0\x9f\x98\x80" /* U+1F600, outside the BMP: 2 UTF-16 units */
#define NBSP    "\xc2\xa0"
#define EM_SP   "\xe2\x80\x83" /* U+2003 */
#define IDEO_SP "\xe3\x80\x80" /* U+3000 */
#define ZWSP    "\xe2\x80\x8b"

/* A malloc'd string of `n` copies of `unit`, then `tail` (may be ""). Buffers live in a small
 * ring so a test can hold a few at once; the group teardown frees what is left. */
static char *ring[16];
static size_t ring_at;

static char *rep(const char *unit, size_t n, const char *tail)
{
    size_t ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(ul * n + tl + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * ul, unit, ul);
    memcpy(s + ul * n, tail, tl + 1);
    free(ring[ring_at]);
    ring[ring_at] = s;
    ring_at = (ring_at + 1) % 16;
    return s;
}

static int free_ring(void **state)
{
    for (size_t i = 0; i < 16; i++) {
        free(ring[i]);
        ring[i] = NULL;
    }
    return 0;
}

static og_sms_info_t info(const char *s)
{
    og_sms_info_t out;
    assert_true(og_sms_encode_info(s, strlen(s), &out));
    return out;
}

static void assert_info(const char *s, og_sms_encoding_t enc, size_t chars, size_t units, size_t segments)
{
    og_sms_info_t i = info(s);
    assert_int_equal(i.encoding, enc);
    assert_int_equal(i.chars, chars);
    assert_int_equal(i.units, units);
    assert_int_equal(i.segments, segments);
}

/* ---- segmentation boundary table ---------------------------------------------------------- */

/* GSM-7: 160 characters fit one SMS, 161 need two. */
static void test_gsm7_single_boundary(void **state)
{
    assert_info(rep("a", 160, ""), OG_SMS_GSM7, 160, 160, 1);
    assert_info(rep("a", 161, ""), OG_SMS_GSM7, 161, 161, 2);
}

/* GSM-7: parts carry 153 septets; 306 = 2 x 153 fits two, 307 needs three. */
static void test_gsm7_part_boundary(void **state)
{
    assert_info(rep("a", 306, ""), OG_SMS_GSM7, 306, 306, 2);
    assert_info(rep("a", 307, ""), OG_SMS_GSM7, 307, 307, 3);
    assert_info(rep("a", 1530, ""), OG_SMS_GSM7, 1530, 1530, 10);
    assert_info(rep("a", 1531, ""), OG_SMS_GSM7, 1531, 1531, 11);
}

/* UCS-2: 70 characters fit one SMS, 71 need two. */
static void test_ucs2_single_boundary(void **state)
{
    assert_info(rep(YA, 70, ""), OG_SMS_UCS2, 70, 70, 1);
    assert_info(rep(YA, 71, ""), OG_SMS_UCS2, 71, 71, 2);
}

/* UCS-2: parts carry 67 units; 134 = 2 x 67 fits two, 135 needs three. */
static void test_ucs2_part_boundary(void **state)
{
    assert_info(rep(YA, 134, ""), OG_SMS_UCS2, 134, 134, 2);
    assert_info(rep(YA, 135, ""), OG_SMS_UCS2, 135, 135, 3);
}

/* Extension characters take 2 septets: 80 x € = 160 septets, one SMS; 81 = 162, two. */
static void test_gsm7_extension_counts_two(void **state)
{
    assert_info(rep(EURO, 80, ""), OG_SMS_GSM7, 80, 160, 1);
    assert_info(rep(EURO, 81, ""), OG_SMS_GSM7, 81, 162, 2);
    assert_info(rep("a", 159, "{"), OG_SMS_GSM7, 160, 161, 2);
}

/* Every extension-table character costs 2 septets, and each stays GSM-7. */
static void test_gsm7_extension_table(void **state)
{
    assert_info("\f^{}\\[~]|" EURO, OG_SMS_GSM7, 10, 20, 1);
}

/* The whole basic table is GSM-7 at 1 septet a character (ESC excluded). */
static void test_gsm7_basic_table(void **state)
{
    static const char basic[] =
        "@\xc2\xa3$\xc2\xa5\xc3\xa8\xc3\xa9\xc3\xb9\xc3\xac\xc3\xb2\xc3\x87\n\xc3\x98\xc3\xb8\r"
        "\xc3\x85\xc3\xa5"
        "\xce\x94_\xce\xa6\xce\x93\xce\x9b\xce\xa9\xce\xa0\xce\xa8\xce\xa3\xce\x98\xce\x9e"
        "\xc3\x86\xc3\xa6\xc3\x9f\xc3\x89"
        " !\"#\xc2\xa4%&'()*+,-./0123456789:;<=>?"
        "\xc2\xa1"
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ\xc3\x84\xc3\x96\xc3\x91\xc3\x9c\xc2\xa7"
        "\xc2\xbf"
        "abcdefghijklmnopqrstuvwxyz\xc3\xa4\xc3\xb6\xc3\xb1\xc3\xbc\xc3\xa0";
    assert_info(basic, OG_SMS_GSM7, 127, 127, 1);
}

/* Characters outside both GSM tables switch the whole text to UCS-2: lower-case ç (only Ç is
 * in the table), the grave accent, tab, ESC itself, á, curly quotes. */
static void test_non_gsm_characters(void **state)
{
    const char *const samples[] = {"\xc3\xa7", "`", "\t", "\x1b", "\xc3\xa1", "\xe2\x80\x99", YA, "\xce\xb1"};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        og_sms_info_t r = info(samples[i]);
        assert_int_equal(r.encoding, OG_SMS_UCS2);
        assert_int_equal(r.units, 1);
    }
}

/* One emoji switches a GSM text to UCS-2 and counts 2 units (a surrogate pair). */
static void test_emoji_switches_to_ucs2(void **state)
{
    assert_info("hello", OG_SMS_GSM7, 5, 5, 1);
    assert_info("hello " GRIN, OG_SMS_UCS2, 7, 8, 1);
    assert_info(rep(GRIN, 35, ""), OG_SMS_UCS2, 35, 70, 1);
    assert_info(rep(GRIN, 36, ""), OG_SMS_UCS2, 36, 72, 2);
    assert_info(rep("a", 69, GRIN), OG_SMS_UCS2, 70, 71, 2);
}

/* An extension character never straddles two parts: 152 + € + 152 = 306 septets, which
 * division would fit in 2 parts, but € cannot take septets 153-154 of part one, so it opens
 * part two, and the last character spills into a third. */
static void test_extension_at_part_boundary(void **state)
{
    char *s = rep("a", 152, EURO);
    char *t = rep("a", 152, "");
    char *both = malloc(strlen(s) + strlen(t) + 1);
    assert_non_null(both);
    strcat(strcpy(both, s), t);
    assert_info(both, OG_SMS_GSM7, 305, 306, 3);
    free(both);
    /* Past 160 septets: € as septets 152-153 ends part one exactly (151 + 2 + 8 = 161); as
     * septets 153-154 it opens part two (152 + 2 + 7 = 161). Both need 2 parts. */
    assert_info(rep("a", 151, EURO "aaaaaaaa"), OG_SMS_GSM7, 160, 161, 2);
    assert_info(rep("a", 152, EURO "aaaaaaa"), OG_SMS_GSM7, 160, 161, 2);
    /* 153 + € + 151 = 306 without a straddle: 2 parts. */
    char *v = rep("a", 153, EURO);
    char *w = rep("a", 151, "");
    char *vw = malloc(strlen(v) + strlen(w) + 1);
    assert_non_null(vw);
    strcat(strcpy(vw, v), w);
    assert_info(vw, OG_SMS_GSM7, 305, 306, 2);
    free(vw);
}

/* A surrogate pair never straddles two parts: 66 + emoji + 66 = 134 units would divide into 2
 * parts, but packing needs 3. */
static void test_surrogate_at_part_boundary(void **state)
{
    char *s = rep(YA, 66, GRIN);
    char *t = rep(YA, 66, "");
    char *both = malloc(strlen(s) + strlen(t) + 1);
    assert_non_null(both);
    strcat(strcpy(both, s), t);
    assert_info(both, OG_SMS_UCS2, 133, 134, 3);
    free(both);
    /* Past 70 units: the pair as units 66-67 ends part one (65 + 2 + 4 = 71); as units 67-68
     * it opens part two (66 + 2 + 3 = 71). */
    assert_info(rep(YA, 65, GRIN YA YA YA YA), OG_SMS_UCS2, 70, 71, 2);
    assert_info(rep(YA, 66, GRIN YA YA YA), OG_SMS_UCS2, 70, 71, 2);
    /* 67 + pair + 66 = 135: the pair lands exactly at the start of part two, so 3 parts, as by
     * division. */
    char *x = rep(YA, 67, GRIN);
    char *y = rep(YA, 66, "");
    char *xy = malloc(strlen(x) + strlen(y) + 1);
    assert_non_null(xy);
    strcat(strcpy(xy, x), y);
    assert_info(xy, OG_SMS_UCS2, 134, 135, 3);
    free(xy);
}

/* The empty text is one GSM-7 segment of 0 septets; malformed UTF-8 is refused. */
static void test_encode_info_edge_cases(void **state)
{
    assert_info("", OG_SMS_GSM7, 0, 0, 1);
    og_sms_info_t r = {.encoding = OG_SMS_UCS2, .chars = 9, .units = 9, .segments = 9};
    assert_false(og_sms_encode_info("ab\xc0\xaf", 4, &r));
    assert_int_equal(r.chars, 0);
    assert_int_equal(r.segments, 0);
    assert_false(og_sms_encode_info("\xed\xa0\x80", 3, &r));
}

static void test_encoding_names(void **state)
{
    assert_string_equal(og_sms_encoding_name(OG_SMS_GSM7), "gsm7");
    assert_string_equal(og_sms_encoding_name(OG_SMS_UCS2), "ucs2");
}

/* ---- text validation ----------------------------------------------------------------------- */

static bool valid(const char *s, size_t *n)
{
    return og_text_validate(s, strlen(s), n);
}

/* Well-formed text passes and its code points are counted. */
static void test_text_valid(void **state)
{
    size_t n = 0;
    assert_true(valid("hi", &n));
    assert_int_equal(n, 2);
    assert_true(valid("\xc3\xa9" EURO GRIN, &n));
    assert_int_equal(n, 3);
    assert_true(valid(" a ", NULL));
    assert_true(valid("\xed\x9f\xbf", &n));     /* U+D7FF, just below the surrogates */
    assert_true(valid("\xee\x80\x80", &n));     /* U+E000, just above */
    assert_true(valid("\xf4\x8f\xbf\xbf", &n)); /* U+10FFFF */
    assert_int_equal(n, 1);
}

/* Overlong forms are refused, at every sequence length. */
static void test_text_overlong(void **state)
{
    assert_false(valid("\xc0\xaf", NULL));
    assert_false(valid("\xc1\xbf", NULL));
    assert_false(valid("\xe0\x80\xaf", NULL));
    assert_false(valid("\xe0\x9f\xbf", NULL));
    assert_false(valid("\xf0\x80\x80\xaf", NULL));
    assert_false(valid("\xf0\x8f\xbf\xbf", NULL));
}

/* UTF-8-encoded surrogates and code points above U+10FFFF are refused. */
static void test_text_surrogates_and_range(void **state)
{
    assert_false(valid("\xed\xa0\x80", NULL));             /* U+D800 */
    assert_false(valid("\xed\xbf\xbf", NULL));             /* U+DFFF */
    assert_false(valid("\xed\xa0\xbd\xed\xb8\x80", NULL)); /* CESU-8 pair */
    assert_false(valid("\xf4\x90\x80\x80", NULL));         /* U+110000 */
    assert_false(valid("\xf5\x80\x80\x80", NULL));
    assert_false(valid("\xff", NULL));
}

/* Truncated sequences and stray continuation bytes are refused, and so is U+0000. */
static void test_text_truncated(void **state)
{
    assert_false(valid("a\xe2\x82", NULL));
    assert_false(valid("a\xf0\x9f\x98", NULL));
    assert_false(valid("\xc3", NULL));
    assert_false(valid("\x80", NULL));
    assert_false(valid("a\xe2\x28\xa1", NULL));
    assert_false(og_text_validate("a\0b", 3, NULL));
    /* The length bounds the scan: a sequence cut by `len` is truncated. */
    assert_false(og_text_validate(EURO, 2, NULL));
}

/* Only white space (ASCII or Unicode, invisible format characters included) is refused. */
static void test_text_whitespace_only(void **state)
{
    assert_false(valid("", NULL));
    assert_false(valid(" ", NULL));
    assert_false(valid(" \t\r\n\v\f", NULL));
    assert_false(valid(NBSP, NULL));
    assert_false(valid(EM_SP IDEO_SP "\xe2\x80\x80\xe2\x80\x8a", NULL)); /* U+2003 U+3000 U+2000 U+200A */
    assert_false(valid("\xc2\x85\xe1\x9a\x80\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\x9f", NULL));
    assert_false(valid(ZWSP "\xef\xbb\xbf\xe2\x81\xa0\xe1\xa0\x8e", NULL));
    assert_true(valid(NBSP "x" NBSP, NULL));
    assert_true(valid("\xe2\x80\x8c", NULL)); /* ZWNJ is not counted as blank */
}

/* 4096 code points pass, 4097 do not, whatever their byte length. */
static void test_text_length_bounds(void **state)
{
    size_t n = 0;
    assert_true(valid(rep("a", 4096, ""), &n));
    assert_int_equal(n, 4096);
    assert_false(valid(rep("a", 4097, ""), &n));
    assert_int_equal(n, 4097);
    assert_true(valid(rep(GRIN, 4096, ""), &n));
    assert_int_equal(n, 4096);
    assert_false(valid(rep(GRIN, 4097, ""), NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gsm7_single_boundary),
        cmocka_unit_test(test_gsm7_part_boundary),
        cmocka_unit_test(test_ucs2_single_boundary),
        cmocka_unit_test(test_ucs2_part_boundary),
        cmocka_unit_test(test_gsm7_extension_counts_two),
        cmocka_unit_test(test_gsm7_extension_table),
        cmocka_unit_test(test_gsm7_basic_table),
        cmocka_unit_test(test_non_gsm_characters),
        cmocka_unit_test(test_emoji_switches_to_ucs2),
        cmocka_unit_test(test_extension_at_part_boundary),
        cmocka_unit_test(test_surrogate_at_part_boundary),
        cmocka_unit_test(test_encode_info_edge_cases),
        cmocka_unit_test(test_encoding_names),
        cmocka_unit_test(test_text_valid),
        cmocka_unit_test(test_text_overlong),
        cmocka_unit_test(test_text_surrogates_and_range),
        cmocka_unit_test(test_text_truncated),
        cmocka_unit_test(test_text_whitespace_only),
        cmocka_unit_test(test_text_length_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, free_ring);
}
