/*
 * Sealed secrets: a secret the gateway must use again later (a provider access token in tenant
 * settings, a tenant's webhook signing secret), stored so that a copy of the database alone does
 * not reveal it. A sealed value is the string
 *
 *     "sealed:v1:" + base64(nonce[12] || ciphertext || tag[16])
 *
 * of AES-256-GCM (OpenSSL EVP) under a key derived from OMNIGATE_SECRET with HKDF-SHA256 and a
 * fixed info string per purpose (so each purpose has its own key), a fresh random nonce per
 * value, and associated data chosen by the caller (the owning tenant's id), so that a sealed
 * value moved to another owner does not open. Responsible for the key derivation, the format
 * and the cryptography; not for deciding which values are secret nor where they are stored.
 */
#ifndef OMNIGATE_SEAL_H
#define OMNIGATE_SEAL_H

#include <stdbool.h>
#include <stddef.h>

#define OG_SEAL_PREFIX    "sealed:v1:" /* the version names the cipher, the KDF and the layout */
#define OG_SEAL_KEY_LEN   32
#define OG_SEAL_NONCE_LEN 12
#define OG_SEAL_TAG_LEN   16
#define OG_SEAL_PLAIN_MAX 65536 /* bytes of a secret og_seal accepts */

/* A derived key. Plain bytes, owned by whoever holds the struct: clear it with og_seal_key_clear
 * when done. */
typedef struct og_seal_key {
    unsigned char bytes[OG_SEAL_KEY_LEN];
} og_seal_key_t;

typedef enum og_seal_status {
    OG_SEAL_OK,
    OG_SEAL_MALFORMED, /* not "sealed:v1:" + canonical base64 of at least nonce and tag */
    OG_SEAL_REFUSED,   /* well-formed but does not open: another key (OMNIGATE_SECRET changed),
                        * other associated data (moved to another owner), or altered */
    OG_SEAL_NOMEM
} og_seal_status_t;

/* Derives the key of `purpose` (the HKDF info string, e.g. "omnigate settings v1"; a new purpose
 * takes a new string) from secret[0..len) with HKDF-SHA256, no salt. OMNIGATE_SECRET is already
 * required to be a long random string (it keys the API token hashes), which is what HKDF expects
 * of its input. False when OpenSSL fails or `secret` is NULL; `key` is then zeroed. */
bool og_seal_key_derive(og_seal_key_t *key, const char *secret, size_t len, const char *purpose);

/* Overwrites the key with zeros (OPENSSL_cleanse). */
void og_seal_key_clear(og_seal_key_t *key);

/* True when `s` starts with "sealed:" (any version): it is a sealed value, whether or not this
 * binary can open it, and never a clear secret. False for NULL. */
bool og_seal_is_sealed(const char *s);

/* True when s[0..len) is a well-formed sealed value this binary knows the version of (it may
 * still not open). */
bool og_seal_well_formed(const char *s, size_t len);

/* Length, without the NUL, of the sealed form of a secret of `plain_len` bytes. */
size_t og_seal_sealed_len(size_t plain_len);

/* Seals plain[0..len) with associated data `aad` (a NUL-terminated string, e.g. a tenant id).
 * Returns the sealed value, malloc'd and NUL-terminated, or NULL when out of memory, OpenSSL
 * fails, or len > OG_SEAL_PLAIN_MAX. Two seals of the same secret differ (random nonce). */
char *og_seal(const og_seal_key_t *key, const char *aad, const void *plain, size_t len);

/* Opens sealed[0..sealed_len) with associated data `aad`. On OG_SEAL_OK, `*plain` is the secret,
 * malloc'd with a NUL after its `*plain_len` bytes, for the caller to release with
 * og_seal_free_plain; on any other status `*plain` is NULL. */
og_seal_status_t og_seal_open(const og_seal_key_t *key, const char *aad, const char *sealed,
                              size_t sealed_len, char **plain, size_t *plain_len);

/* Overwrites plain[0..len) with zeros and frees it. NULL is fine. */
void og_seal_free_plain(char *plain, size_t len);

#endif
