/*
 * Unit tests of address syntax (src/base/phone.c): E.164, WhatsApp sender numbers, SMS sender ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "omnigate/phone.h"

/* E.164: + then 8-15 digits; 7 and 16 digits are out, 8 and 15 in. */
static void test_e164_length_bounds(void **state)
{
    assert_false(og_phone_e164_valid("+1234567"));          /* 7 */
    assert_true(og_phone_e164_valid("+12345678"));          /* 8 */
    assert_true(og_phone_e164_valid("+6281234567890"));     /* 13 */
    assert_true(og_phone_e164_valid("+123456789012345"));   /* 15 */
    assert_false(og_phone_e164_valid("+1234567890123456")); /* 16 */
}

/* E.164: the first digit is 1-9, the + is required, and nothing but digits follows it. */
static void test_e164_form(void **state)
{
    assert_false(og_phone_e164_valid("+0812345678"));   /* leading 0 */
    assert_false(og_phone_e164_valid("6281234567890")); /* missing + */
    assert_false(og_phone_e164_valid("++6281234567890"));
    assert_false(og_phone_e164_valid("+62 812345678"));
    assert_false(og_phone_e164_valid("+62-812345678"));
    assert_false(og_phone_e164_valid("+6281234567a"));
    assert_false(og_phone_e164_valid("+62812345678 "));
    assert_false(og_phone_e164_valid(
        "+\xd9\xa6\xd9\xa2\xd9\xa8\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4\xd9\xa5")); /* Arabic-Indic digits */
    assert_false(og_phone_e164_valid("+"));
    assert_false(og_phone_e164_valid(""));
    assert_false(og_phone_e164_valid(NULL));
}

/* WhatsApp from: 8-15 digits, first 1-9, and no +. */
static void test_wa_from(void **state)
{
    assert_false(og_phone_wa_from_valid("1234567"));
    assert_true(og_phone_wa_from_valid("12345678"));
    assert_true(og_phone_wa_from_valid("6281234567890"));
    assert_true(og_phone_wa_from_valid("123456789012345"));
    assert_false(og_phone_wa_from_valid("1234567890123456"));
    assert_false(og_phone_wa_from_valid("+6281234567890"));
    assert_false(og_phone_wa_from_valid("081234567890"));
    assert_false(og_phone_wa_from_valid("62812345678x"));
    assert_false(og_phone_wa_from_valid(""));
    assert_false(og_phone_wa_from_valid(NULL));
}

/* Alphanumeric sender ids: 1-11 letters, digits and spaces with at least one letter. */
static void test_sender_alphanumeric(void **state)
{
    assert_true(og_phone_sender_valid("A"));
    assert_true(og_phone_sender_valid("ACME"));
    assert_true(og_phone_sender_valid("Omni Test"));
    assert_true(og_phone_sender_valid("ACME2FA"));
    assert_true(og_phone_sender_valid("ABCDEFGHIJK"));   /* 11 */
    assert_false(og_phone_sender_valid("ABCDEFGHIJKL")); /* 12 */
    assert_true(og_phone_sender_valid("1A"));
    assert_false(og_phone_sender_valid("THIS-IS-TOO-LONG"));
    assert_false(og_phone_sender_valid("AC-ME"));
    assert_false(og_phone_sender_valid("AC_ME"));
    assert_false(og_phone_sender_valid("ACM\xc3\x89")); /* É */
    assert_false(og_phone_sender_valid(" "));
    assert_false(og_phone_sender_valid("   "));
    assert_false(og_phone_sender_valid(""));
    assert_false(og_phone_sender_valid(NULL));
}

/* Numeric sender ids: 1-15 digits (short codes, national numbers with a leading 0), and
 * E.164 from-numbers with a + as Twilio accepts them. */
static void test_sender_numeric(void **state)
{
    assert_true(og_phone_sender_valid("1"));
    assert_true(og_phone_sender_valid("12345"));
    assert_true(og_phone_sender_valid("0812345678"));
    assert_true(og_phone_sender_valid("123456789012345"));   /* 15 */
    assert_false(og_phone_sender_valid("1234567890123456")); /* 16 */
    assert_false(og_phone_sender_valid("123 456"));          /* digits and spaces, no letter */
    assert_true(og_phone_sender_valid("+12345678"));
    assert_true(og_phone_sender_valid("+123456789012345"));
    assert_false(og_phone_sender_valid("+1234567"));
    assert_false(og_phone_sender_valid("+1234567890123456"));
    assert_false(og_phone_sender_valid("+0812345678"));
    assert_false(og_phone_sender_valid("+ACME"));
    assert_false(og_phone_sender_valid("+"));
}

/* The sender on the wire: long codes (8-15 digits, first 1-9) in E.164; short codes, numbers
 * no country can be told from, E.164 and alphanumeric ids as they are. */
static void test_sender_wire(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"6281234567890", "+6281234567890"},
        {"12345678", "+12345678"},
        {"123456789012345", "+123456789012345"},
        {"12345", "12345"},
        {"123456", "123456"},
        {"1234567", "1234567"},
        {"0812345678", "0812345678"},
        {"+6281234567890", "+6281234567890"},
        {"ACME", "ACME"},
        {"Omni Test", "Omni Test"},
        {"12345678901", "+12345678901"},
        {"1", "1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[OG_PHONE_SENDER_SIZE];
        memset(out, 'x', sizeof(out));
        og_phone_sender_wire(cases[i].in, out);
        assert_string_equal(out, cases[i].out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e164_length_bounds),
        cmocka_unit_test(test_e164_form),
        cmocka_unit_test(test_wa_from),
        cmocka_unit_test(test_sender_alphanumeric),
        cmocka_unit_test(test_sender_numeric),
        cmocka_unit_test(test_sender_wire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
