/*
 * Sealed secrets. See include/base/omnigate/seal.h. Everything cryptographic is OpenSSL's:
 * HKDF through EVP_KDF, AES-256-GCM through EVP_CIPHER, base64 through EVP_EncodeBlock /
 * EVP_DecodeBlock (after a strict check of our own: EVP_DecodeBlock skips whitespace and keeps
 * the padding bytes, and a sealed value has exactly one spelling).
 */
#include "omnigate/seal.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "omnigate/ids.h"

#define PREFIX_LEN (sizeof(OG_SEAL_PREFIX) - 1)
#define OVERHEAD   (OG_SEAL_NONCE_LEN + OG_SEAL_TAG_LEN)
#define B64_LEN(n) (((n) + 2) / 3 * 4)
#define RAW_MAX    (OG_SEAL_PLAIN_MAX + OVERHEAD)

bool og_seal_key_derive(og_seal_key_t *key, const char *secret, size_t len, const char *purpose)
{
    bool ok = false;
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *ctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    if (ctx != NULL && secret != NULL && purpose != NULL) {
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, len),
            OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)purpose, strlen(purpose)),
            OSSL_PARAM_construct_end(),
        };
        ok = EVP_KDF_derive(ctx, key->bytes, sizeof(key->bytes), params) == 1;
    }
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    if (!ok)
        og_seal_key_clear(key);
    return ok;
}

void og_seal_key_clear(og_seal_key_t *key)
{
    OPENSSL_cleanse(key->bytes, sizeof(key->bytes));
}

bool og_seal_is_sealed(const char *s)
{
    return s != NULL && strncmp(s, "sealed:", 7) == 0;
}

size_t og_seal_sealed_len(size_t plain_len)
{
    return PREFIX_LEN + B64_LEN(plain_len + OVERHEAD);
}

static bool b64_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

/* The number of bytes s[0..len) decodes to when it is canonical padded base64 of at least
 * OVERHEAD bytes and at most RAW_MAX, else 0. */
static size_t b64_raw_len(const char *s, size_t len)
{
    if (len == 0 || len % 4 != 0 || len > B64_LEN(RAW_MAX))
        return 0;
    size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < len - pad; i++)
        if (!b64_char((unsigned char)s[i]))
            return 0;
    size_t raw = len / 4 * 3 - pad;
    return raw >= OVERHEAD ? raw : 0;
}

bool og_seal_well_formed(const char *s, size_t len)
{
    return s != NULL && len > PREFIX_LEN && memcmp(s, OG_SEAL_PREFIX, PREFIX_LEN) == 0 &&
           b64_raw_len(s + PREFIX_LEN, len - PREFIX_LEN) > 0;
}

/* One AES-256-GCM pass over in[0..len) into out (same length), with `aad`. Sealing writes the
 * tag into `tag`; opening checks it. False when OpenSSL fails or the tag does not match. */
static bool gcm(bool seal, const og_seal_key_t *key, const unsigned char *nonce, const char *aad,
                const unsigned char *in, size_t len, unsigned char *out, unsigned char *tag)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n = 0, enc = seal ? 1 : 0;
    bool ok = ctx != NULL && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, OG_SEAL_NONCE_LEN, NULL) == 1 &&
              EVP_CipherInit_ex(ctx, NULL, NULL, key->bytes, nonce, enc) == 1 &&
              EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)aad, (int)strlen(aad)) == 1 &&
              (len == 0 || EVP_CipherUpdate(ctx, out, &n, in, (int)len) == 1);
    if (ok && !seal)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, OG_SEAL_TAG_LEN, tag) == 1;
    ok = ok && EVP_CipherFinal_ex(ctx, out + len, &n) == 1;
    if (ok && seal)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, OG_SEAL_TAG_LEN, tag) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

char *og_seal(const og_seal_key_t *key, const char *aad, const void *plain, size_t len)
{
    if (len > OG_SEAL_PLAIN_MAX || aad == NULL)
        return NULL;
    size_t raw_len = len + OVERHEAD;
    unsigned char *raw = malloc(raw_len);
    char *out = malloc(og_seal_sealed_len(len) + 1);
    if (raw == NULL || out == NULL)
        goto fail;
    unsigned char *nonce = raw, *ct = raw + OG_SEAL_NONCE_LEN, *tag = ct + len;
    og_ids_random(nonce, OG_SEAL_NONCE_LEN);
    if (!gcm(true, key, nonce, aad, plain, len, ct, tag))
        goto fail;
    memcpy(out, OG_SEAL_PREFIX, PREFIX_LEN);
    EVP_EncodeBlock((unsigned char *)out + PREFIX_LEN, raw, (int)raw_len);
    free(raw);
    return out;
fail:
    free(raw);
    free(out);
    return NULL;
}

og_seal_status_t og_seal_open(const og_seal_key_t *key, const char *aad, const char *sealed,
                              size_t sealed_len, char **plain, size_t *plain_len)
{
    *plain = NULL;
    *plain_len = 0;
    if (aad == NULL || !og_seal_well_formed(sealed, sealed_len))
        return OG_SEAL_MALFORMED;
    const char *b64 = sealed + PREFIX_LEN;
    size_t b64_len = sealed_len - PREFIX_LEN, raw_len = b64_raw_len(b64, b64_len);
    /* EVP_DecodeBlock writes whole groups of three, the padding's zero bytes included. */
    unsigned char *raw = malloc(b64_len / 4 * 3);
    char *out = malloc(raw_len - OVERHEAD + 1);
    og_seal_status_t st = OG_SEAL_NOMEM;
    if (raw == NULL || out == NULL)
        goto done;
    st = OG_SEAL_MALFORMED;
    if (EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)b64_len) < 0)
        goto done;
    size_t len = raw_len - OVERHEAD;
    st = OG_SEAL_REFUSED;
    if (!gcm(false, key, raw, aad, raw + OG_SEAL_NONCE_LEN, len, (unsigned char *)out,
             raw + OG_SEAL_NONCE_LEN + len))
        goto done;
    out[len] = '\0';
    *plain = out;
    *plain_len = len;
    out = NULL;
    st = OG_SEAL_OK;
done:
    if (raw != NULL)
        OPENSSL_cleanse(raw, b64_len / 4 * 3);
    free(raw);
    if (out != NULL)
        og_seal_free_plain(out, raw_len - OVERHEAD);
    return st;
}

void og_seal_free_plain(char *plain, size_t len)
{
    if (plain != NULL)
        OPENSSL_cleanse(plain, len);
    free(plain);
}
