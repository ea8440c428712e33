/*
 * Secrets on OpenSSL libcrypto: tenant API tokens ("kft_" + 40 base62), their keyed hashes and
 * display prefixes, OTP codes and their keyed hashes, constant-time comparison. Responsible
 * for generating and hashing; not for storing, looking up or revoking tokens (auth.h, store.h).
 */
#ifndef OMNIGATE_TOKEN_H
#define OMNIGATE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#define OG_TOKEN_TAG          "kft_"
#define OG_TOKEN_RANDOM_LEN   40
#define OG_TOKEN_LEN          44 /* "kft_" + 40 base62 characters */
#define OG_TOKEN_SIZE         45 /* with the terminating NUL */
#define OG_TOKEN_DISPLAY_LEN  12 /* "kft_" + 8: what listings show */
#define OG_TOKEN_DISPLAY_SIZE 13
#define OG_HASH_HEX_SIZE      65 /* 64 lower-case hex digits of an HMAC-SHA256 and a NUL */
#define OG_OTP_MIN_LEN        4
#define OG_OTP_MAX_LEN        10

/* Writes a new token: "kft_" + 40 characters of [0-9A-Za-z] drawn uniformly from the kernel
 * CSPRNG (about 238 bits). Aborts when the CSPRNG fails (og_ids_random). */
void og_token_generate(char out[OG_TOKEN_SIZE]);

/* True when `s[0..len)` is exactly "kft_" + 40 base62 characters. Runs in time that depends
 * only on `len`, so a probe learns nothing from it. */
bool og_token_format_valid(const char *s, size_t len);

/* `out_hex` = lower-case hex of HMAC-SHA256(key = `secret` (its strlen bytes), `token[0..len)`):
 * the only form in which a token is stored. Returns false (and writes "") only when OpenSSL
 * fails, which a caller may treat as "matches nothing". */
bool og_token_hash(const char *secret, const char *token, size_t len, char out_hex[OG_HASH_HEX_SIZE]);

/* As og_token_hash, with `key` made ready once for HMAC-SHA256 with the secret (hmac.h): the
 * per-request form (no algorithm fetch, no key setup). */
struct og_hmac_key;
bool og_token_hash_with(struct og_hmac_key *key, const char *token, size_t len,
                        char out_hex[OG_HASH_HEX_SIZE]);

/* `out` = the first 12 characters of `token` (or all of a shorter one), NUL-terminated. */
void og_token_prefix(const char *token, char out[OG_TOKEN_DISPLAY_SIZE]);

/* True when a[0..n) equals b[0..n), in time that depends only on `n` (CRYPTO_memcmp). */
bool og_ct_equal(const void *a, const void *b, size_t n);

/* Writes `length` (4-10) uniformly drawn decimal digits and a NUL into `out` (room for
 * length + 1). Returns false, writing nothing, when `length` is out of range. */
bool og_otp_generate(char *out, int length);

/* `out_hex` = lower-case hex of HMAC-SHA256 keyed by `secret` over a domain label and the
 * tenant id, OTP reference and code, each preceded by its length (4 bytes, big-endian), so
 * that ("ab","c") and ("a","bc") never hash alike and a code is bound to its OTP. NULL fields
 * count as "". Returns false (and writes "") only when OpenSSL fails. */
bool og_otp_hash(const char *secret, const char *tenant_id, const char *otp_reference, const char *code,
                 char out_hex[OG_HASH_HEX_SIZE]);

/* Masks, in place, every occurrence of `code` in `s` (a NUL-terminated string in a buffer of
 * `size` bytes) with '*': a text that may quote what a provider was sent (its error message).
 * When `s` fills its buffer to within 4 bytes (it may have been cut to fit, on a UTF-8
 * boundary), a tail that is the code's beginning is masked too. An empty code masks nothing. */
void og_otp_mask(char *s, size_t size, const char *code);

#endif
