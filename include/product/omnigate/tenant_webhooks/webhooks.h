/*
 * What a tenant webhook is (API.md §12): its signing secret (generated from the CSPRNG, sealed
 * at rest, masked in answers), the URLs and events it may have, and the Standard Webhooks
 * signature of a delivery. Shared by the admin routes (webhook_api.h), `omnigate admin`
 * (cli.h) and the delivery runner (webhooks_out.h). Responsible for these rules; not for
 * storing a webhook (sql/queries/webhooks.sql) or calling it.
 */
#ifndef OMNIGATE_TENANT_WEBHOOKS_WEBHOOKS_H
#define OMNIGATE_TENANT_WEBHOOKS_WEBHOOKS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/seal.h"

#define OG_WH_SECRET_PREFIX "whsec_"
#define OG_WH_SECRET_BYTES  32
#define OG_WH_SECRET_LEN    (6 + 44) /* "whsec_" + base64 of 32 bytes, padded */
#define OG_WH_KEY_MAX       64       /* bytes of a decoded secret this gateway accepts */
#define OG_WH_URL_MAX       2048
#define OG_WH_NEVENTS       13
#define OG_WH_EVENTS_LIT    320          /* every event type as a text[] literal, NUL included */
#define OG_WH_SIG_MAX       (3 + 44 + 1) /* "v1," + base64 of a SHA-256 HMAC, NUL */
#define OG_WH_MASKED_MAX    24

/* The event types, in the order of API.md §12. */
extern const char *const og_wh_events[OG_WH_NEVENTS];

/* A new secret: "whsec_" + base64 of 32 bytes from the OS CSPRNG. */
void og_wh_secret_new(char out[OG_WH_SECRET_LEN + 1]);

/* The key that seals webhook secrets (HKDF of OMNIGATE_SECRET, its own purpose string; the
 * tenant id is the associated data). False when it cannot be derived. */
bool og_wh_seal_key(og_seal_key_t *key, const char *omnigate_secret);

/* "whsec_****" + the secret's last 4 characters. */
void og_wh_secret_mask(const char *secret, char out[OG_WH_MASKED_MAX]);

/* The HMAC key of a secret: the base64 after "whsec_", decoded (Standard Webhooks). Returns its
 * length, or 0 when `secret` is not of that form. */
size_t og_wh_secret_key(const char *secret, unsigned char key[OG_WH_KEY_MAX]);

/* The webhook-signature header value "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>".
 * False when OpenSSL fails. */
bool og_wh_sign(const unsigned char *key, size_t keylen, const char *id, const char *timestamp,
                const char *body, size_t body_len, char out[OG_WH_SIG_MAX]);

/* Checks a webhook URL: at most OG_WH_URL_MAX bytes, https:// (http:// too when allow_http), a
 * host, no credentials, and, unless allow_private, not an address literal of a non-public
 * address (names are checked on every connection, after DNS). False with `err` naming `url`. */
bool og_wh_url_check(const char *url, bool allow_http, bool allow_private, og_err_t *err);

/* Reads `events` (NULL: every event) as a non-empty array of distinct event types into a
 * text[] literal "{a,b}" (lit must hold 200 bytes). False with `err` naming `events`. */
bool og_wh_events_parse(const json_t *events, char lit[OG_WH_EVENTS_LIT], og_err_t *err);

/* Opens the sealed secret of tenant `tenant_id` into out (NUL-terminated). False when it does
 * not open (OMNIGATE_SECRET changed) or is not a secret. */
bool og_wh_secret_open(const og_seal_key_t *key, const char *tenant_id, const char *sealed,
                       char out[OG_WH_SECRET_LEN + 1]);

#endif
