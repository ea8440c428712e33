/*
 * Text validation and SMS segment counting. One strict UTF-8 decoder serves both; the counts
 * follow 3GPP TS 23.038 (GSM 03.38) and TS 23.040 concatenation, as docs/sms-encoding.md
 * explains with its boundary cases.
 */
#include "omnigate/smsenc.h"

#include <stdint.h>
#include <string.h>

/* Decodes one code point of s[*i..len) per Unicode Table 3-7 (well-formed UTF-8): no overlong
 * forms, no surrogates, nothing above U+10FFFF, no truncated sequence. Advances *i. */
static bool utf8_next(const unsigned char *s, size_t len, size_t *i, uint32_t *cp)
{
    size_t p = *i;
    unsigned char b = s[p];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t v;
    if (b < 0x80) {
        *cp = b;
        *i = p + 1;
        return true;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        v = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        v = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0; /* below is overlong */
        else if (b == 0xED)
            hi = 0x9F; /* above are the surrogates U+D800-DFFF */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        v = b & 0x07;
        if (b == 0xF0)
            lo = 0x90; /* below is overlong */
        else if (b == 0xF4)
            hi = 0x8F; /* above is beyond U+10FFFF */
    } else {
        return false; /* continuation byte, C0/C1 (overlong) or F5-FF */
    }
    if (len - p - 1 < need)
        return false;
    for (size_t k = 1; k <= need; k++) {
        unsigned char c = s[p + k];
        if (c < lo || c > hi)
            return false;
        lo = 0x80;
        hi = 0xBF;
        v = (v << 6) | (c & 0x3F);
    }
    *cp = v;
    *i = p + 1 + need;
    return true;
}

/* Unicode White_Space, plus the format characters that render as nothing (U+180E, which
 * was White_Space until Unicode 6.3, ZERO WIDTH SPACE, WORD JOINER and the BOM): a text made
 * only of these shows up as an empty message. */
static bool is_blank(uint32_t cp)
{
    if (cp == 0x20 || (cp >= 0x09 && cp <= 0x0D))
        return true;
    if (cp < 0x85)
        return false;
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x180E:
    case 0x200B:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x2060:
    case 0x3000:
    case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool og_text_validate(const char *s, size_t len, size_t *nchars)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, n = 0;
    bool blank = true;
    while (i < len) {
        uint32_t cp;
        if (!utf8_next(u, len, &i, &cp) || cp == 0)
            return false;
        blank = blank && is_blank(cp);
        n++;
    }
    if (nchars != NULL)
        *nchars = n;
    return n >= 1 && n <= OG_TEXT_MAX_CHARS && !blank;
}

/* Septets of the ASCII range in the GSM 03.38 default alphabet: 1 for a character of the
 * basic table, 2 for one of the extension table (ESC + code), 0 for none. Besides the
 * letters and digits, ASCII lacks only ` (grave accent) and all controls but LF and CR; the
 * extension table adds form feed ^ { } \ [ ~ ] |. U+001B is the escape itself, not a
 * character, so it is not representable. */
static const unsigned char gsm7_ascii[128] = {
    ['\n'] = 1, ['\r'] = 1, ['\f'] = 2, [' '] = 1, ['!'] = 1, ['"'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1,
    ['&'] = 1,  ['\''] = 1, ['('] = 1,  [')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1,
    ['/'] = 1,  ['0'] = 1,  ['1'] = 1,  ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1,  ['9'] = 1,  [':'] = 1,  [';'] = 1, ['<'] = 1, ['='] = 1, ['>'] = 1, ['?'] = 1, ['@'] = 1,
    ['A'] = 1,  ['B'] = 1,  ['C'] = 1,  ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1,  ['K'] = 1,  ['L'] = 1,  ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1,  ['T'] = 1,  ['U'] = 1,  ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['['] = 2,
    ['\\'] = 2, [']'] = 2,  ['^'] = 2,  ['_'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1,
    ['f'] = 1,  ['g'] = 1,  ['h'] = 1,  ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
    ['o'] = 1,  ['p'] = 1,  ['q'] = 1,  ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1,
    ['x'] = 1,  ['y'] = 1,  ['z'] = 1,  ['{'] = 2, ['|'] = 2, ['}'] = 2, ['~'] = 2,
};

/* Septets `cp` takes in GSM-7 (1 or 2), or 0 when the default alphabet lacks it. Only the
 * exact characters of the tables count: no folding of look-alikes (ç, curly quotes, ...),
 * which would change the text the recipient reads. */
static unsigned gsm7_cost(uint32_t cp)
{
    if (cp < 0x80)
        return gsm7_ascii[cp];
    switch (cp) {
    /* Latin-1 letters and signs of the basic table */
    case 0xA1: /* ¡ */
    case 0xA3: /* £ */
    case 0xA4: /* ¤ */
    case 0xA5: /* ¥ */
    case 0xA7: /* § */
    case 0xBF: /* ¿ */
    case 0xC4: /* Ä */
    case 0xC5: /* Å */
    case 0xC6: /* Æ */
    case 0xC7: /* Ç */
    case 0xC9: /* É */
    case 0xD1: /* Ñ */
    case 0xD6: /* Ö */
    case 0xD8: /* Ø */
    case 0xDC: /* Ü */
    case 0xDF: /* ß */
    case 0xE0: /* à */
    case 0xE4: /* ä */
    case 0xE5: /* å */
    case 0xE6: /* æ */
    case 0xE8: /* è */
    case 0xE9: /* é */
    case 0xEC: /* ì */
    case 0xF1: /* ñ */
    case 0xF2: /* ò */
    case 0xF6: /* ö */
    case 0xF8: /* ø */
    case 0xF9: /* ù */
    case 0xFC: /* ü */
    /* Greek capitals of the basic table */
    case 0x393: /* Γ */
    case 0x394: /* Δ */
    case 0x398: /* Θ */
    case 0x39B: /* Λ */
    case 0x39E: /* Ξ */
    case 0x3A0: /* Π */
    case 0x3A3: /* Σ */
    case 0x3A6: /* Φ */
    case 0x3A8: /* Ψ */
    case 0x3A9: /* Ω */
        return 1;
    case 0x20AC: /* € (extension table) */
        return 2;
    default:
        return 0;
    }
}

/* UTF-16 code units of `cp`. */
static unsigned ucs2_cost(uint32_t cp)
{
    return cp > 0xFFFF ? 2 : 1;
}

/* Parts needed when characters of the given costs are laid into parts of `part` units in
 * order, never splitting a character: a 2-unit character that would straddle a boundary
 * starts the next part, leaving one unit of the previous part unused. */
static size_t pack(const unsigned char *u, size_t len, bool gsm7, size_t part)
{
    size_t i = 0, parts = 1, used = 0;
    while (i < len) {
        uint32_t cp = 0;
        (void)utf8_next(u, len, &i, &cp); /* already checked well-formed */
        size_t c = gsm7 ? gsm7_cost(cp) : ucs2_cost(cp);
        if (used + c > part) {
            parts++;
            used = 0;
        }
        used += c;
    }
    return parts;
}

bool og_sms_encode_info(const char *utf8, size_t len, og_sms_info_t *out)
{
    const unsigned char *u = (const unsigned char *)utf8;
    size_t i = 0, chars = 0, septets = 0, units = 0;
    bool gsm7 = true;
    memset(out, 0, sizeof(*out));
    while (i < len) {
        uint32_t cp;
        if (!utf8_next(u, len, &i, &cp))
            return false;
        unsigned g = gsm7_cost(cp);
        gsm7 = gsm7 && g != 0;
        septets += g;
        units += ucs2_cost(cp);
        chars++;
    }
    out->encoding = gsm7 ? OG_SMS_GSM7 : OG_SMS_UCS2;
    out->chars = chars;
    out->units = gsm7 ? septets : units;
    size_t single = gsm7 ? OG_SMS_GSM7_SINGLE : OG_SMS_UCS2_SINGLE;
    size_t part = gsm7 ? OG_SMS_GSM7_PART : OG_SMS_UCS2_PART;
    out->segments = out->units <= single ? 1 : pack(u, len, gsm7, part);
    return true;
}

const char *og_sms_encoding_name(og_sms_encoding_t enc)
{
    return enc == OG_SMS_GSM7 ? "gsm7" : "ucs2";
}
