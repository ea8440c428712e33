/*
 * Address syntax. Only ASCII is accepted: a number written with other digits (Arabic-Indic,
 * full-width) or with separators ("+62 812-345") is refused rather than normalised, so the
 * value the client sent is exactly the value that reaches the provider and the logs (but for
 * the "+" a long-code SMS sender gains on the wire: og_phone_sender_wire).
 */
#include "omnigate/phone.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_letter(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* 8-15 ASCII digits, the first 1-9, and nothing else. */
static bool international_digits(const char *s)
{
    if (s[0] < '1' || s[0] > '9')
        return false;
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    return s[n] == '\0' && n >= 8 && n <= OG_PHONE_MAX_DIGITS;
}

bool og_phone_e164_valid(const char *s)
{
    return s != NULL && s[0] == '+' && international_digits(s + 1);
}

bool og_phone_wa_from_valid(const char *s)
{
    return s != NULL && international_digits(s);
}

bool og_phone_wa_user(const char *id, char out[OG_PHONE_SENDER_SIZE])
{
    const char *at = id != NULL ? strchr(id, '@') : NULL;
    size_t n = at != NULL ? (size_t)(at - id) : 0;
    if (at == NULL || strcmp(at, "@c.us") != 0 || n < 8 || n > OG_PHONE_MAX_DIGITS ||
        strspn(id, "0123456789") != n)
        return false;
    memcpy(out, id, n);
    out[n] = '\0';
    return true;
}

bool og_phone_sender_valid(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return false;
    if (s[0] == '+')
        return og_phone_e164_valid(s);
    size_t n = 0, letters = 0;
    for (; s[n] != '\0'; n++) {
        if (is_letter(s[n]))
            letters++;
        else if (!is_digit(s[n]) && s[n] != ' ')
            return false;
        if (n >= OG_PHONE_MAX_DIGITS)
            return false;
    }
    if (letters > 0)
        return n <= 11;
    /* No letter: only digits (up to 15) make a sender; spaces and digits do not. */
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ')
            return false;
    return true;
}

void og_phone_sender_wire(const char *sender, char out[OG_PHONE_SENDER_SIZE])
{
    snprintf(out, OG_PHONE_SENDER_SIZE, "%s%.15s", og_phone_wa_from_valid(sender) ? "+" : "", sender);
}
