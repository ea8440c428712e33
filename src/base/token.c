/*
 * Tokens, OTP codes and their keyed hashes. Random characters come from og_ids_random by
 * rejection sampling: a byte is kept only when it falls below the largest multiple of the
 * alphabet size that fits in a byte (248 for base62, 250 for digits), so `byte % size` is
 * exactly uniform. Hashes are HMAC-SHA256 through OpenSSL's EVP_MAC.
 */
#include "omnigate/token.h"

#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/hmac.h"
#include "omnigate/ids.h"

static const char base62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/* Fills out[0..n) with characters of alphabet[0..size) drawn uniformly. */
static void random_chars(char *out, size_t n, const char *alphabet, unsigned size)
{
    unsigned limit = 256 - 256 % size; /* bytes >= limit would favour the first 256 % size */
    unsigned char buf[64];
    size_t have = 0, used = 0;
    while (n > 0) {
        if (used == have) {
            og_ids_random(buf, sizeof(buf));
            have = sizeof(buf);
            used = 0;
        }
        unsigned b = buf[used++];
        if (b < limit) {
            *out++ = alphabet[b % size];
            n--;
        }
    }
    OPENSSL_cleanse(buf, sizeof(buf));
}

void og_token_generate(char out[OG_TOKEN_SIZE])
{
    memcpy(out, OG_TOKEN_TAG, 4);
    random_chars(out + 4, OG_TOKEN_RANDOM_LEN, base62, 62);
    out[OG_TOKEN_LEN] = '\0';
}

/* 1 when c is in [0-9A-Za-z], else 0, without branching on c. */
static unsigned is_base62(unsigned char c)
{
    unsigned d = (unsigned)(c - '0') < 10;
    unsigned up = (unsigned)(c - 'A') < 26;
    unsigned low = (unsigned)(c - 'a') < 26;
    return d | up | low;
}

bool og_token_format_valid(const char *s, size_t len)
{
    if (s == NULL || len != OG_TOKEN_LEN)
        return false;
    /* The whole string is always read: a probe's timing tells nothing about where it went
     * wrong (the hash lookup after this is keyed, but the check is cheap to make uniform). */
    unsigned ok = (unsigned)(CRYPTO_memcmp(s, OG_TOKEN_TAG, 4) == 0);
    for (size_t i = 4; i < len; i++)
        ok &= is_base62((unsigned char)s[i]);
    return ok == 1;
}

/* HMAC-SHA256 over the concatenation of parts[0..n), as lower-case hex: keyed by `key` (made
 * ready once) when not NULL, else by `secret`. */
static bool hmac_hex(const char *secret, og_hmac_key_t *key, const void *const *parts, const size_t *lens,
                     size_t n, char out_hex[OG_HASH_HEX_SIZE])
{
    unsigned char md[OG_HMAC_MAX];
    size_t mdlen = key != NULL ? og_hmac_key_sum(key, parts, lens, n, md)
                               : og_hmac(OG_HMAC_SHA256, secret, secret != NULL ? strlen(secret) : 0, parts,
                                         lens, n, md);
    if (mdlen != 32)
        out_hex[0] = '\0';
    else
        og_hex_lower(md, mdlen, out_hex);
    OPENSSL_cleanse(md, sizeof(md));
    return mdlen == 32;
}

bool og_token_hash(const char *secret, const char *token, size_t len, char out_hex[OG_HASH_HEX_SIZE])
{
    const void *parts[1] = {token};
    size_t lens[1] = {len};
    return hmac_hex(secret, NULL, parts, lens, 1, out_hex);
}

bool og_token_hash_with(og_hmac_key_t *key, const char *token, size_t len, char out_hex[OG_HASH_HEX_SIZE])
{
    const void *parts[1] = {token};
    size_t lens[1] = {len};
    return hmac_hex(NULL, key, parts, lens, 1, out_hex);
}

void og_token_prefix(const char *token, char out[OG_TOKEN_DISPLAY_SIZE])
{
    size_t n = strnlen(token, OG_TOKEN_DISPLAY_LEN);
    memcpy(out, token, n);
    out[n] = '\0';
}

bool og_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

bool og_otp_generate(char *out, int length)
{
    if (length < OG_OTP_MIN_LEN || length > OG_OTP_MAX_LEN)
        return false;
    random_chars(out, (size_t)length, "0123456789", 10);
    out[length] = '\0';
    return true;
}

/* Domain label: an OTP hash can never equal a token hash made with the same secret, and a
 * later scheme can change the label. */
static const char otp_label[] = "omnigate-otp-v1";

bool og_otp_hash(const char *secret, const char *tenant_id, const char *otp_reference, const char *code,
                 char out_hex[OG_HASH_HEX_SIZE])
{
    const char *fields[4] = {otp_label, tenant_id ? tenant_id : "", otp_reference ? otp_reference : "",
                             code ? code : ""};
    unsigned char lenbuf[4][4];
    const void *parts[8];
    size_t lens[8];
    for (int f = 0; f < 4; f++) {
        size_t l = strlen(fields[f]);
        if ((uint64_t)l > UINT32_MAX) {
            out_hex[0] = '\0';
            return false;
        }
        lenbuf[f][0] = (unsigned char)(l >> 24);
        lenbuf[f][1] = (unsigned char)(l >> 16);
        lenbuf[f][2] = (unsigned char)(l >> 8);
        lenbuf[f][3] = (unsigned char)l;
        parts[2 * f] = lenbuf[f];
        lens[2 * f] = 4;
        parts[2 * f + 1] = fields[f];
        lens[2 * f + 1] = l;
    }
    return hmac_hex(secret, NULL, parts, lens, 8, out_hex);
}

void og_otp_mask(char *s, size_t size, const char *code)
{
    size_t n = strlen(code), len = strlen(s);
    if (n == 0)
        return;
    for (char *p = strstr(s, code); p != NULL; p = strstr(p + n, code))
        memset(p, '*', n);
    if (len + 4 < size)
        return;
    for (size_t m = n - 1; m > 0; m--) {
        if (len >= m && memcmp(s + len - m, code, m) == 0) {
            memset(s + len - m, '*', m);
            return;
        }
    }
}
