/*
 * The append-only JSON writer. See include/base/omnigate/jw.h.
 */
#include "omnigate/jw.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void og_jw_init(og_jw_t *w, size_t hint)
{
    *w = (og_jw_t){.cap = hint > 0 ? hint : 256};
}

/* Room for n more bytes and the NUL; false (and w failed) when out of memory. */
static bool reserve(og_jw_t *w, size_t n)
{
    if (w->failed)
        return false;
    if (w->buf != NULL && w->len + n + 1 <= w->cap)
        return true;
    size_t cap = w->cap > 0 ? w->cap : 256;
    while (cap < w->len + n + 1) {
        if (cap > SIZE_MAX / 2)
            goto fail;
        cap *= 2;
    }
    char *p = realloc(w->buf, cap);
    if (p == NULL)
        goto fail;
    w->buf = p;
    w->cap = cap;
    return true;
fail:
    w->failed = true;
    return false;
}

static void put(og_jw_t *w, const char *s, size_t n)
{
    if (!reserve(w, n))
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void put_c(og_jw_t *w, char c)
{
    put(w, &c, 1);
}

/* Before a key or an array element: the comma after the previous one. */
static void sep(og_jw_t *w)
{
    if (w->comma)
        put_c(w, ',');
    w->comma = true;
}

void og_jw_object(og_jw_t *w)
{
    sep(w);
    put_c(w, '{');
    w->comma = false;
}

void og_jw_object_end(og_jw_t *w)
{
    put_c(w, '}');
    w->comma = true;
}

void og_jw_array(og_jw_t *w)
{
    sep(w);
    put_c(w, '[');
    w->comma = false;
}

void og_jw_array_end(og_jw_t *w)
{
    put_c(w, ']');
    w->comma = true;
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (2-4), or 0 when it is not one
 * (overlong forms, surrogates and code points over U+10FFFF are not: RFC 3629). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* 1 for the bytes a string carries as they are: printable ASCII but '"' and '\\'. */
static const unsigned char plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The string body of s[0..n), quotes included. */
static void put_string(og_jw_t *w, const char *str, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    /* At most 6 bytes out per byte in (\u00XX); reserving it once keeps the loop free of checks. */
    if (n > (SIZE_MAX - 2) / 6 || !reserve(w, 6 * n + 2))
        return;
    char *o = w->buf + w->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (plain[c]) {
            size_t j = i + 1;
            while (j < n && plain[s[j]])
                j++;
            memcpy(o, s + i, j - i);
            o += j - i;
            i = j;
            continue;
        }
        if (c >= 0x80) {
            size_t len = utf8_seq(s + i, n - i);
            if (len == 0) {
                memcpy(o, "\xEF\xBF\xBD", 3); /* U+FFFD for a byte that is not UTF-8 (3 <= 6) */
                w->replaced = true;
                o += 3;
                i++;
            } else {
                memcpy(o, s + i, len);
                o += len;
                i += len;
            }
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        default:
            memcpy(o, "u00", 3);
            o[3] = hex[c >> 4];
            o[4] = hex[c & 15];
            o += 5;
        }
        i++;
    }
    *o++ = '"';
    *o = '\0';
    w->len = (size_t)(o - w->buf);
}

void og_jw_key(og_jw_t *w, const char *key)
{
    sep(w);
    put_string(w, key, strlen(key));
    put_c(w, ':');
    w->comma = false;
}

/* Before a value: in an array (or at the top) the comma after the previous element; after a
 * key nothing (og_jw_key cleared it). */
static void value(og_jw_t *w)
{
    sep(w);
}

void og_jw_stringn(og_jw_t *w, const char *s, size_t n)
{
    value(w);
    put_string(w, s, n);
}

void og_jw_string(og_jw_t *w, const char *s)
{
    if (s == NULL) {
        og_jw_null(w);
        return;
    }
    og_jw_stringn(w, s, strlen(s));
}

size_t og_int_str(char out[OG_INT_STR_SIZE], long long v)
{
    char b[OG_INT_STR_SIZE];
    char *p = b + sizeof(b);
    /* Digits from the end; through unsigned so that LLONG_MIN negates without overflow. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) > 0);
    if (v < 0)
        *--p = '-';
    size_t n = (size_t)(b + sizeof(b) - p);
    memcpy(out, p, n);
    out[n] = '\0';
    return n;
}

void og_jw_int(og_jw_t *w, long long v)
{
    char b[OG_INT_STR_SIZE];
    size_t n = og_int_str(b, v);
    value(w);
    put(w, b, n);
}

void og_jw_number6(og_jw_t *w, double v)
{
    char b[32];
    int n;
    if (v > -1e6 && v < 1e6 && v == (double)(long long)v)
        n = (int)og_int_str(b, (long long)v);
    else
        n = snprintf(b, sizeof(b), "%.6g", v);
    value(w);
    put(w, b, (size_t)n);
}

void og_jw_bool(og_jw_t *w, bool v)
{
    value(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void og_jw_null(og_jw_t *w)
{
    value(w);
    put(w, "null", 4);
}

void og_jw_raw(og_jw_t *w, const char *json, size_t n)
{
    value(w);
    put(w, json, n);
}

void og_jw_kstring(og_jw_t *w, const char *key, const char *s)
{
    og_jw_key(w, key);
    og_jw_string(w, s);
}

void og_jw_kint(og_jw_t *w, const char *key, long long v)
{
    og_jw_key(w, key);
    og_jw_int(w, v);
}

char *og_jw_finish(og_jw_t *w, size_t *len)
{
    if (w->buf == NULL && reserve(w, 0))
        w->buf[0] = '\0';
    if (w->failed) {
        og_jw_free(w);
        return NULL;
    }
    char *out = w->buf;
    if (len != NULL)
        *len = w->len;
    *w = (og_jw_t){.cap = w->cap};
    return out;
}

char *og_jw_finish_fit(og_jw_t *w, size_t *len)
{
    size_t cap = w->cap, n;
    char *out = og_jw_finish(w, &n);
    if (out != NULL && cap > n + 1) {
        char *fit = realloc(out, n + 1);
        if (fit != NULL) /* a failed shrink leaves the text where it was */
            out = fit;
    }
    if (out != NULL && len != NULL)
        *len = n;
    return out;
}

void og_jw_free(og_jw_t *w)
{
    free(w->buf);
    *w = (og_jw_t){0};
}
