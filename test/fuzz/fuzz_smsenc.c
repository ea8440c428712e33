/*
 * Fuzzes the message text rules and SMS segmentation (src/base/smsenc.c). An input is the text.
 *
 * Checked: the text is accepted only as well-formed UTF-8 of 1-4096 code points, and counted
 * whenever it decodes; the count of code points and of UTF-16 units agrees with the bytes; the
 * segments follow from the units within the bounds of docs/sms-encoding.md (a part never
 * splits an escape or surrogate pair, so a part may hold one unit less); a prefix of a text
 * never needs more than the text.
 */
#include <string.h>

#include "fuzz.h"
#include "omnigate/smsenc.h"

static size_t div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

static void check_info(const og_sms_info_t *info, const char *s, size_t len)
{
    size_t chars = 0, astral = 0;
    for (size_t i = 0; i < len; i++) {
        chars += ((unsigned char)s[i] & 0xC0) != 0x80;
        astral += (unsigned char)s[i] >= 0xF0;
    }
    FUZZ_CHECK(info->chars == chars);
    size_t single, part;
    if (info->encoding == OG_SMS_GSM7) {
        FUZZ_CHECK(astral == 0 && info->units >= chars && info->units <= 2 * chars);
        single = OG_SMS_GSM7_SINGLE;
        part = OG_SMS_GSM7_PART;
    } else {
        FUZZ_CHECK(info->encoding == OG_SMS_UCS2 && info->units == chars + astral);
        single = OG_SMS_UCS2_SINGLE;
        part = OG_SMS_UCS2_PART;
    }
    if (info->units <= single)
        FUZZ_CHECK(info->segments == 1);
    else
        FUZZ_CHECK(info->segments >= div_up(info->units, part) &&
                   info->segments <= div_up(info->units, part - 1));
    const char *name = og_sms_encoding_name(info->encoding);
    FUZZ_CHECK(strcmp(name, info->encoding == OG_SMS_GSM7 ? "gsm7" : "ucs2") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t nchars = (size_t)-1;
    bool valid = og_text_validate(s, size, &nchars);
    og_sms_info_t info;
    bool decodes = og_sms_encode_info(s, size, &info);
    bool utf8 = fuzz_utf8_valid(s, size) && memchr(s, '\0', size) == NULL;
    FUZZ_CHECK(!valid || (utf8 && nchars >= 1 && nchars <= OG_TEXT_MAX_CHARS));
    FUZZ_CHECK((nchars != (size_t)-1) == utf8);
    if (!fuzz_utf8_valid(s, size)) {
        FUZZ_CHECK(!decodes && info.units == 0 && info.chars == 0 && info.segments == 0);
        return 0;
    }
    FUZZ_CHECK(decodes);
    check_info(&info, s, size);
    if (utf8)
        FUZZ_CHECK(info.chars == nchars);

    /* The first half of the text, cut on a character boundary. */
    size_t half = size / 2;
    while (half > 0 && ((unsigned char)s[half] & 0xC0) == 0x80)
        half--;
    og_sms_info_t head;
    FUZZ_CHECK(og_sms_encode_info(s, half, &head));
    check_info(&head, s, half);
    FUZZ_CHECK(head.segments <= info.segments && head.chars <= info.chars);
    if (info.encoding == OG_SMS_GSM7)
        FUZZ_CHECK(head.encoding == OG_SMS_GSM7 && head.units <= info.units);
    return 0;
}
