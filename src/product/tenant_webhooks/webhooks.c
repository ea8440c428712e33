/*
 * What a tenant webhook is. See include/product/omnigate/tenant_webhooks/webhooks.h. The cryptography is
 * OpenSSL's (base64 through EVP_EncodeBlock/EVP_DecodeBlock, the HMAC through hmac.h, the seal
 * through seal.h); the URL is read by libcurl's own parser (og_hc_url_parts), the one that will
 * connect to it.
 */
#include "omnigate/tenant_webhooks/webhooks.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "omnigate/addrguard.h"
#include "omnigate/api.h"
#include "omnigate/hmac.h"
#include "omnigate/http_client.h"
#include "omnigate/ids.h"

#define SEAL_INFO  "omnigate webhook secret v1"
#define PREFIX_LEN (sizeof(OG_WH_SECRET_PREFIX) - 1)

const char *const og_wh_events[OG_WH_NEVENTS] = {
    "message.sent",     "message.failed",      "message.delivered",  "message.read",    "message.undelivered",
    "otp.verified",     "otp.locked",          "message.canceled",   "message.expired", "batch.completed",
    "message.received", "recipient.opted_out", "recipient.opted_in",
};

void og_wh_secret_new(char out[OG_WH_SECRET_LEN + 1])
{
    unsigned char raw[OG_WH_SECRET_BYTES];
    og_ids_random(raw, sizeof(raw));
    memcpy(out, OG_WH_SECRET_PREFIX, PREFIX_LEN);
    EVP_EncodeBlock((unsigned char *)out + PREFIX_LEN, raw, (int)sizeof(raw));
    OPENSSL_cleanse(raw, sizeof(raw));
}

bool og_wh_seal_key(og_seal_key_t *key, const char *omnigate_secret)
{
    return og_seal_key_derive(key, omnigate_secret, omnigate_secret != NULL ? strlen(omnigate_secret) : 0,
                              SEAL_INFO);
}

void og_wh_secret_mask(const char *secret, char out[OG_WH_MASKED_MAX])
{
    size_t n = strlen(secret);
    snprintf(out, OG_WH_MASKED_MAX, OG_WH_SECRET_PREFIX "****%s", n >= PREFIX_LEN + 8 ? secret + n - 4 : "");
}

size_t og_wh_secret_key(const char *secret, unsigned char key[OG_WH_KEY_MAX])
{
    if (strncmp(secret, OG_WH_SECRET_PREFIX, PREFIX_LEN) != 0)
        return 0;
    const char *b64 = secret + PREFIX_LEN;
    size_t n = strlen(b64);
    if (n == 0 || n % 4 != 0 || n / 4 * 3 > OG_WH_KEY_MAX)
        return 0;
    unsigned char raw[OG_WH_KEY_MAX + 3];
    int len = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)n);
    if (len < 0)
        return 0;
    /* EVP_DecodeBlock keeps the bytes the padding stands for. */
    size_t pad = b64[n - 1] == '=' ? (b64[n - 2] == '=' ? 2 : 1) : 0;
    size_t keylen = (size_t)len - pad;
    memcpy(key, raw, keylen);
    OPENSSL_cleanse(raw, sizeof(raw));
    return keylen;
}

bool og_wh_sign(const unsigned char *key, size_t keylen, const char *id, const char *timestamp,
                const char *body, size_t body_len, char out[OG_WH_SIG_MAX])
{
    const void *parts[5] = {id, ".", timestamp, ".", body};
    size_t lens[5] = {strlen(id), 1, strlen(timestamp), 1, body_len};
    unsigned char mac[OG_HMAC_MAX];
    size_t n = og_hmac(OG_HMAC_SHA256, key, keylen, parts, lens, 5, mac);
    if (n != 32)
        return false;
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)n);
    return true;
}

bool og_wh_url_check(const char *url, bool allow_http, bool allow_private, og_err_t *err)
{
    size_t n = strlen(url);
    if (n == 0 || n > OG_WH_URL_MAX)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "url", "url must be 1-%d characters", OG_WH_URL_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "url",
                               "url must not contain spaces or control characters");
    char scheme[16], host[256];
    bool credentials = false;
    if (!og_hc_url_parts(url, scheme, sizeof(scheme), host, sizeof(host), &credentials))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "url", "url must be an absolute URL with a host");
    bool https = strcmp(scheme, "https") == 0, http = strcmp(scheme, "http") == 0;
    if (!https && !(http && allow_http))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "url", "url must start with https://%s",
                           http ? " (http:// is refused: OMNIGATE_WEBHOOK_ALLOW_HTTP is off)" : "");
    if (credentials)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "url", "url must not carry a user name or password");
    og_addr_class_t cls;
    if (!allow_private && og_addr_class_text(host, &cls) && cls != OG_ADDR_PUBLIC)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "url",
                           "url points to a %s address; webhooks only call public ones",
                           og_addr_class_name(cls));
    return true;
}

bool og_wh_events_parse(const json_t *events, char lit[OG_WH_EVENTS_LIT], og_err_t *err)
{
    bool want[OG_WH_NEVENTS] = {false};
    if (events == NULL) {
        for (int i = 0; i < OG_WH_NEVENTS; i++)
            want[i] = true;
    } else {
        if (!json_is_array(events) || json_array_size(events) == 0)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "events",
                               "events must be a non-empty array of event types");
        size_t i;
        json_t *v;
        json_array_foreach(events, i, v)
        {
            int k = -1;
            for (int j = 0; j < OG_WH_NEVENTS && json_is_string(v); j++)
                if (strcmp(json_string_value(v), og_wh_events[j]) == 0)
                    k = j;
            if (k < 0)
                return og_err_fail(
                    err, OG_E_VALIDATION_FAILED, "events",
                    "events[%zu] must be one of message.sent, message.failed, message.delivered, "
                    "message.read, message.undelivered, otp.verified, otp.locked, message.canceled, "
                    "message.expired, batch.completed, message.received, recipient.opted_out, "
                    "recipient.opted_in",
                    i);
            if (want[k])
                return og_err_fail(err, OG_E_VALIDATION_FAILED, "events", "events must be distinct");
            want[k] = true;
        }
    }
    char *p = lit;
    p += sprintf(p, "{");
    for (int i = 0, n = 0; i < OG_WH_NEVENTS; i++)
        if (want[i])
            p += sprintf(p, "%s%s", n++ ? "," : "", og_wh_events[i]);
    strcpy(p, "}");
    return true;
}

bool og_wh_secret_open(const og_seal_key_t *key, const char *tenant_id, const char *sealed,
                       char out[OG_WH_SECRET_LEN + 1])
{
    char *plain = NULL;
    size_t len = 0;
    if (og_seal_open(key, tenant_id, sealed, strlen(sealed), &plain, &len) != OG_SEAL_OK)
        return false;
    bool ok = len == OG_WH_SECRET_LEN && strncmp(plain, OG_WH_SECRET_PREFIX, PREFIX_LEN) == 0;
    if (ok)
        memcpy(out, plain, len + 1);
    og_seal_free_plain(plain, len);
    return ok;
}
