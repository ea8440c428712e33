/*
 * HMAC and signature checks. See include/base/omnigate/hmac.h.
 */
#include "omnigate/hmac.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

static const char *const digest_names[] = {
    [OG_HMAC_SHA1] = "SHA1",
    [OG_HMAC_SHA256] = "SHA256",
    [OG_HMAC_SHA512] = "SHA512",
};

size_t og_hmac(og_hmac_alg_t alg, const void *key, size_t keylen, const void *const *parts,
               const size_t *lens, size_t n, unsigned char out[OG_HMAC_MAX])
{
    size_t mdlen = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    if (ctx == NULL || (unsigned)alg > OG_HMAC_SHA512)
        goto fail;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest_names[alg], 0),
        OSSL_PARAM_construct_end(),
    };
    /* OpenSSL refuses a NULL key even with length 0; an empty key is still a valid HMAC key. */
    static const unsigned char empty_key[1];
    if (EVP_MAC_init(ctx, keylen > 0 ? key : empty_key, keylen, params) != 1)
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (lens[i] > 0 && EVP_MAC_update(ctx, parts[i], lens[i]) != 1)
            goto fail;
    if (EVP_MAC_final(ctx, out, &mdlen, OG_HMAC_MAX) != 1)
        mdlen = 0;
    goto out;
fail:
    mdlen = 0;
out:
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return mdlen;
}

bool og_hmac_key_init(og_hmac_key_t *k, og_hmac_alg_t alg, const void *key, size_t keylen)
{
    k->ctx = NULL;
    k->mdlen = 0;
    if ((unsigned)alg > OG_HMAC_SHA512)
        return false;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    if (ctx == NULL)
        return false;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest_names[alg], 0),
        OSSL_PARAM_construct_end(),
    };
    static const unsigned char empty_key[1];
    if (EVP_MAC_init(ctx, keylen > 0 ? key : empty_key, keylen, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        return false;
    }
    k->ctx = ctx;
    k->mdlen = EVP_MAC_CTX_get_mac_size(ctx);
    return true;
}

size_t og_hmac_key_sum(og_hmac_key_t *k, const void *const *parts, const size_t *lens, size_t n,
                       unsigned char out[OG_HMAC_MAX])
{
    EVP_MAC_CTX *ctx = k->ctx;
    size_t mdlen = 0;
    /* A NULL key starts again from the key's hashed pads (OpenSSL 3's HMAC keeps them). */
    if (ctx == NULL || EVP_MAC_init(ctx, NULL, 0, NULL) != 1)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lens[i] > 0 && EVP_MAC_update(ctx, parts[i], lens[i]) != 1)
            return 0;
    if (EVP_MAC_final(ctx, out, &mdlen, OG_HMAC_MAX) != 1)
        return 0;
    return mdlen;
}

void og_hmac_key_clear(og_hmac_key_t *k)
{
    EVP_MAC_CTX_free(k->ctx); /* cleanses the key material */
    k->ctx = NULL;
    k->mdlen = 0;
}

void og_hex_lower(const unsigned char *in, size_t n, char *out)
{
    static const char hexdigits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdigits[in[i] >> 4];
        out[2 * i + 1] = hexdigits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool og_hmac_check_hex(og_hmac_alg_t alg, const char *key, const void *data, size_t len, const char *sig,
                       size_t siglen)
{
    unsigned char md[OG_HMAC_MAX], theirs[OG_HMAC_MAX];
    const void *parts[1] = {data};
    size_t lens[1] = {len};
    size_t mdlen = og_hmac(alg, key, key != NULL ? strlen(key) : 0, parts, lens, 1, md);
    bool ok = mdlen > 0 && siglen == 2 * mdlen;
    for (size_t i = 0; ok && i < mdlen; i++) {
        int hi = hex_value((unsigned char)sig[2 * i]), lo = hex_value((unsigned char)sig[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        theirs[i] = ok ? (unsigned char)(hi << 4 | lo) : 0;
    }
    ok = ok && CRYPTO_memcmp(md, theirs, mdlen) == 0;
    OPENSSL_cleanse(md, sizeof(md));
    return ok;
}

bool og_hmac_check_b64(og_hmac_alg_t alg, const char *key, const void *const *parts, const size_t *lens,
                       size_t n, const char *sig, size_t siglen)
{
    unsigned char md[OG_HMAC_MAX];
    unsigned char b64[4 * ((OG_HMAC_MAX + 2) / 3) + 1];
    size_t mdlen = og_hmac(alg, key, key != NULL ? strlen(key) : 0, parts, lens, n, md);
    bool ok = false;
    if (mdlen > 0) {
        size_t blen = (size_t)EVP_EncodeBlock(b64, md, (int)mdlen);
        ok = siglen == blen && CRYPTO_memcmp(b64, sig, blen) == 0;
    }
    OPENSSL_cleanse(md, sizeof(md));
    return ok;
}
