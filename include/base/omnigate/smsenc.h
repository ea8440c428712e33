/*
 * Message text rules and SMS encoding: UTF-8 validation of API.md §2 and how many SMS segments
 * a text needs as GSM-7 or UCS-2 (docs/sms-encoding.md). Responsible for checking and counting;
 * not for transcoding or splitting the text (the SMS provider does), nor for the segment limit.
 */
#ifndef OMNIGATE_SMSENC_H
#define OMNIGATE_SMSENC_H

#include <stdbool.h>
#include <stddef.h>

#define OG_TEXT_MAX_CHARS 4096 /* Unicode code points */

#define OG_SMS_GSM7_SINGLE 160 /* septets in a single-part SMS */
#define OG_SMS_GSM7_PART   153 /* septets per part of a concatenated SMS (7 go to the UDH) */
#define OG_SMS_UCS2_SINGLE 70  /* UTF-16 code units in a single-part SMS */
#define OG_SMS_UCS2_PART   67  /* UTF-16 code units per part of a concatenated SMS */

typedef enum og_sms_encoding {
    OG_SMS_GSM7, /* GSM 03.38 default alphabet plus its extension table, no national shift tables */
    OG_SMS_UCS2, /* UTF-16 (what carriers call UCS-2): any other text */
} og_sms_encoding_t;

typedef struct og_sms_info {
    og_sms_encoding_t encoding;
    size_t chars;    /* Unicode code points */
    size_t units;    /* GSM7: septets (extension characters 2); UCS2: UTF-16 code units */
    size_t segments; /* SMS parts needed; never splits an escape pair or a surrogate pair */
} og_sms_info_t;

/* True when `s[0..len)` is a message text: well-formed UTF-8 (no overlong forms, surrogates,
 * code points above U+10FFFF or truncated sequences; no U+0000), 1-4096 code points, and not
 * only white space (Unicode White_Space plus the invisible U+180E, U+200B, U+2060, U+FEFF).
 * Sets `*nchars` (may be NULL) to the number of code points whenever the whole text decodes
 * (so also when it is refused for its length or for being blank); else leaves it untouched. */
bool og_text_validate(const char *s, size_t len, size_t *nchars);

/* Fills `out` for `utf8[0..len)`: GSM7 when every character is in the GSM 03.38 default
 * alphabet or its extension table, else UCS2. Returns false (and leaves `out` zeroed) when the
 * UTF-8 is malformed; the empty text is GSM7 with 0 units in 1 segment. Does not check the
 * 4096-character limit. */
bool og_sms_encode_info(const char *utf8, size_t len, og_sms_info_t *out);

/* "gsm7" or "ucs2", as API.md §3 spells them. */
const char *og_sms_encoding_name(og_sms_encoding_t enc);

#endif
