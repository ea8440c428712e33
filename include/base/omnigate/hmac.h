/*
 * HMAC on OpenSSL's EVP_MAC and the signature checks the providers' webhooks need (API.md §10):
 * lower-case hex of HMAC-SHA256 (Meta) and HMAC-SHA512 (WAHA), base64 of HMAC-SHA1 (Twilio).
 * Responsible for computing and comparing in constant time; not for deciding what is signed
 * (the webhook routes) or for keys' storage.
 */
#ifndef OMNIGATE_HMAC_H
#define OMNIGATE_HMAC_H

#include <stdbool.h>
#include <stddef.h>

typedef enum og_hmac_alg { OG_HMAC_SHA1, OG_HMAC_SHA256, OG_HMAC_SHA512 } og_hmac_alg_t;

#define OG_HMAC_MAX 64 /* bytes of the longest digest (SHA-512) */

/* HMAC keyed by key[0..keylen) over the concatenation of parts[i][0..lens[i]) for i < n, into
 * `out`. Returns the digest's length (20, 32 or 64), or 0 when OpenSSL fails. An empty key is
 * a valid key. */
size_t og_hmac(og_hmac_alg_t alg, const void *key, size_t keylen, const void *const *parts,
               const size_t *lens, size_t n, unsigned char out[OG_HMAC_MAX]);

/* A key made ready once (the algorithm fetched, the key's pads hashed) for many HMACs with the
 * same key and digest: the token hashes of every request. Owned by its user's context (one
 * per worker), never shared between threads. */
typedef struct og_hmac_key {
    void *ctx; /* EVP_MAC_CTX *, keyed; NULL: not ready (every og_hmac_key_sum fails) */
    size_t mdlen;
} og_hmac_key_t;

/* Makes `k` ready for `alg` keyed by key[0..keylen). False (k not ready) when OpenSSL fails. */
bool og_hmac_key_init(og_hmac_key_t *k, og_hmac_alg_t alg, const void *key, size_t keylen);

/* As og_hmac, with the key of `k`. */
size_t og_hmac_key_sum(og_hmac_key_t *k, const void *const *parts, const size_t *lens, size_t n,
                       unsigned char out[OG_HMAC_MAX]);

/* Releases the key (its copy inside OpenSSL is wiped). `k` may be zeroed or never made ready. */
void og_hmac_key_clear(og_hmac_key_t *k);

/* Lower-case hex of in[0..n) into out (room for 2n + 1), NUL-terminated. */
void og_hex_lower(const unsigned char *in, size_t n, char *out);

/* True when sig[0..siglen) is the hex (either case) of HMAC(key, data[0..len)). The comparison
 * of the digests runs in constant time; a signature of the wrong length or with a non-hex
 * character is false. */
bool og_hmac_check_hex(og_hmac_alg_t alg, const char *key, const void *data, size_t len, const char *sig,
                       size_t siglen);

/* True when sig[0..siglen) is the standard base64 (with padding) of HMAC(key, the
 * concatenation of parts), compared in constant time. */
bool og_hmac_check_b64(og_hmac_alg_t alg, const char *key, const void *const *parts, const size_t *lens,
                       size_t n, const char *sig, size_t siglen);

#endif
