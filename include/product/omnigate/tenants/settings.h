/*
 * Tenant settings of API.md §5 as a jansson value: validation (an error naming the dotted field
 * path), masking of secrets, sealing and opening of secrets (seal.h), RFC 7396 merge patch,
 * defaults, and read-only getters for the send path. Responsible for the shape and meaning of
 * the document; not for storing it.
 *
 * The secrets of a settings document are its "accessToken", "authToken", "apiKey" and
 * "webhookSecret" members, at any depth (the schema allows them only where API.md §5 and §23 put
 * them: a Meta number's token, the tenant's own SMS account and WAHA server). In the database each
 * one is sealed (og_settings_seal before every write); in memory, once read, each one is opened
 * (og_settings_open) so the getters hand out the clear value. A secret that does not open stays
 * sealed in memory: the getters refuse it and masking shows "****".
 */
#ifndef OMNIGATE_TENANTS_SETTINGS_H
#define OMNIGATE_TENANTS_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "omnigate/channel.h"
#include "omnigate/error.h"
#include "omnigate/log.h"
#include "omnigate/providers/provider.h"
#include "omnigate/seal.h"

#define OG_SETTINGS_CHANNELS          3       /* whatsapp_qr, whatsapp_meta, sms */
#define OG_SETTINGS_RATE_MAX          1000000 /* rateLimitPerSecond upper bound */
#define OG_SETTINGS_SESSION_MAX       64      /* whatsapp_qr session name, bytes */
#define OG_SETTINGS_PHONE_ID_MAX      32      /* whatsapp_meta phoneNumberId, digits */
#define OG_SETTINGS_ACCESS_TOKEN_MAX  1024    /* whatsapp_meta accessToken, bytes */
#define OG_SETTINGS_SECRET_MAX        1024    /* authToken, apiKey, webhookSecret (API.md §23), bytes */
#define OG_SETTINGS_ACCOUNT_SID_MAX   64      /* channels.sms.account.accountSid, bytes */
#define OG_SETTINGS_BASE_URL_MAX      2048    /* an own account's baseUrl, bytes */
#define OG_SETTINGS_TEMPLATE_NAME_MAX 512     /* a WhatsApp template's name, bytes (Meta's limit) */
#define OG_SETTINGS_LANGUAGE_MAX      15      /* a template's language code: en, en_US, ... */
#define OG_SETTINGS_INBOUND_MAX       100     /* channels.sms.inboundNumbers (API.md §21) */
#define OG_SETTINGS_PACE_MIN          0.01    /* a sender's pacing rate (API.md §19), lower bound */
#define OG_SETTINGS_PACE_MAX          100000  /* and upper bound */

/* A WhatsApp template name as Meta allows it: 1-512 of [a-z0-9_]. */
bool og_settings_template_name_valid(const char *name);

/* A template language code: 2-15 letters or _ ("en", "en_US", "pt_BR"). */
bool og_settings_template_language_valid(const char *lang);

/* True when `name` is one of the channel names whatsapp_qr, whatsapp_meta, sms. */
bool og_settings_channel_name_valid(const char *name);

/* Checks `settings` against API.md §5. On failure returns false with `err` set to
 * validation_failed (or unknown_field for a key the schema does not know), `field` naming the
 * value at fault from the root "settings", e.g. "settings.channels.sms.senders[1]". Every key is
 * optional; a channel without "enabled": true is disabled. A secret must be 1-1024 printable
 * ASCII characters without spaces (it goes into an HTTP header or keys an HMAC) and must not
 * start with "****" (a masked value); one that starts with "sealed:" must be a well-formed sealed
 * value and is kept as it is (a stored one that did not open, carried through a merge; it opens
 * only for the tenant and OMNIGATE_SECRET it was sealed with).
 *
 * The tenant's own accounts (API.md §23): channels.sms.account {"accountSid", "authToken",
 * "baseUrl"?} and channels.whatsapp_qr.server {"baseUrl", "apiKey", "webhookSecret"}, each member
 * required but the SMS baseUrl. accountSid is 1-64 letters, digits, '_' or '-' (Twilio's are AC
 * and 32 hex digits; a Twilio-compatible provider's may differ); a baseUrl is an absolute
 * http:// or https:// URL with a host, without user, password, query or fragment (the API's
 * paths are appended to it), at most 2048 bytes. */
bool og_settings_validate(json_t *settings, og_err_t *err);

/* A deep copy of `settings` in which every secret member (above), at any depth, is replaced by
 * "****" + its last 4 characters, or by "****" when it has fewer than 12 characters, is not a
 * string or is sealed (did not open). NULL when out of memory. Run it on opened settings. */
json_t *og_settings_mask(const json_t *settings);

/* RFC 7396 merge of `patch` into a copy of `stored` (null deletes a member, objects merge
 * recursively, any other value replaces), except that a secret string equal to the masked form
 * of the stored secret at the same place keeps the stored secret, so a client may send back what
 * GET returned. Returns a new value (not necessarily valid settings: run og_settings_validate on
 * it), or NULL when out of memory. */
json_t *og_settings_merge_patch(const json_t *stored, const json_t *patch);

/* ---- secrets at rest (docs/persistence.md, "Secrets at rest") ----------------------------- */

/* The HKDF info string of the key that seals settings secrets. */
#define OG_SETTINGS_SEAL_INFO "omnigate settings v1"

/* The not_configured message of a whatsapp_meta attempt whose accessToken did not open. */
#define OG_SETTINGS_UNOPENED_MESSAGE                                                                         \
    "the tenant's whatsapp_meta accessToken does not open with this OMNIGATE_SECRET (changed since "         \
    "it was stored?): set the access token again"

/* Derives the settings key from OMNIGATE_SECRET (`secret`, NULL: fails). False (key zeroed) when
 * it cannot: every sealed secret then stays sealed. */
bool og_settings_key(og_seal_key_t *key, const char *secret);

/* Seals, in place, every secret of `settings` that is a string and not sealed yet, with
 * `tenant_id` (canonical lower-case UUID, as PostgreSQL prints it) as associated data. Returns
 * how many it sealed, or -1 when out of memory or OpenSSL failed (`settings` is then partly
 * sealed: do not store it). */
int og_settings_seal(json_t *settings, const og_seal_key_t *key, const char *tenant_id);

/* Opens, in place, every sealed secret of `settings` (as read from the database) with
 * `tenant_id` as associated data, so the document holds clear values in memory. A secret that
 * does not open (another OMNIGATE_SECRET, another tenant's value, altered, out of memory) stays
 * sealed; when there is one, a warning naming the tenant (never a value) goes to `log` (may be
 * NULL). Returns how many did not open. */
int og_settings_open(json_t *settings, const og_seal_key_t *key, const char *tenant_id, og_log_t *log);

/* The settings of a tenant created without any: every channel in the default order, and every
 * channel disabled until configured. A new reference. */
json_t *og_settings_defaults(void);

/* ---- getters for the send path: each reads validated settings and never allocates --------- */

/* True when channels.<channel>.enabled is true. */
bool og_settings_channel_enabled(const json_t *settings, const char *channel);

/* Fills `out` with defaultChannels in their order (borrowed strings) and returns how many; when
 * the key is absent, all three channels in the order whatsapp_qr, whatsapp_meta, sms. */
size_t og_settings_default_channels(const json_t *settings, const char *out[OG_SETTINGS_CHANNELS]);

/* defaultWhatsappFrom, or NULL. Borrowed from `settings`. */
const char *og_settings_default_whatsapp_from(const json_t *settings);

/* What a WhatsApp channel needs to send from one number. Borrowed from the settings. */
typedef struct og_settings_wa_number {
    const char *session;         /* whatsapp_qr: WAHA session name */
    const char *phone_number_id; /* whatsapp_meta: Cloud API phone number id */
    const char *access_token;    /* whatsapp_meta: Cloud API bearer token, clear (opened) */
    const char *waba_id;         /* whatsapp_meta: the WhatsApp Business Account, or NULL */
    /* whatsapp_meta: the stored token is sealed and did not open (og_settings_open): the number
     * is registered but access_token is NULL, so its attempts fail not_configured; the caller
     * says why with OG_SETTINGS_UNOPENED_MESSAGE. */
    bool access_token_sealed;
} og_settings_wa_number_t;

/* Looks `from` up in channels.<channel>.numbers (channel whatsapp_qr or whatsapp_meta). True,
 * with `out` filled (fields the channel does not use are NULL), when the number is registered
 * with what the channel needs (a whatsapp_meta token that did not open counts, see above); else
 * false and `out` zeroed. */
bool og_settings_wa_number(const json_t *settings, const char *channel, const char *from,
                           og_settings_wa_number_t *out);

/* The tenant's own account of channel `ch` (API.md §23), which replaces the configured one for
 * the tenant's attempts: channels.sms.account (OG_CH_SMS) or channels.whatsapp_qr.server
 * (OG_CH_WHATSAPP_QR). True with `out` filled (strings borrowed from the settings; a secret that
 * did not open is NULL with out->sealed set, so the attempt fails not_configured and says why)
 * when the tenant has one; else false with `out` zeroed: the configured account. */
bool og_settings_provider_account(const json_t *settings, og_channel_t ch, og_provider_account_t *out);

/* Whether one of the tenant's whatsapp_qr numbers uses WAHA session `name` (a number without a
 * session uses OG_WAHA_DEFAULT_SESSION, as a send does): the sessions a tenant may manage (API.md
 * §23). */
bool og_settings_qr_session_used(const json_t *settings, const char *name);

/* True when `sender` is in channels.sms.senders (exact, case-sensitive match). */
bool og_settings_sms_sender_approved(const json_t *settings, const char *sender);

/* channels.sms.defaultSender, or NULL. Borrowed from `settings`. */
const char *og_settings_sms_default_sender(const json_t *settings);

/* The SMS sender of a request: `requested` when it is well-formed and approved, else (when
 * NULL) the tenant's default. False with the error of API.md §2 (validation_failed or
 * sender_not_approved, field "sender") in `err`. */
bool og_settings_sms_sender(const json_t *settings, const char *requested, char *out, size_t outlen,
                            og_err_t *err);

/* rateLimitPerSecond, or 0 (unlimited) when absent. */
uint32_t og_settings_rate_limit(const json_t *settings);

/* The pacing rate set for one sender (API.md §19) in its setting's own unit, or 0 when none is
 * set: channels.whatsapp_meta.numbers.{from}.messagesPerSecond, channels.whatsapp_qr.numbers.
 * {from}.messagesPerMinute (per minute), channels.sms.messagesPerSecond.{from} (SMS segments per
 * second); `channel` names the channel. The default and the unit conversion belong to the caller
 * (og_pacing_rate, queue/pacing.h). */
double og_settings_sender_rate(const json_t *settings, const char *channel, const char *from);

/* channels.whatsapp_meta.outsideWindow (API.md §18): what a free text on Meta does while the
 * recipient's customer service window is not known to be open. */
typedef enum og_settings_outside_window {
    OG_OUTSIDE_WINDOW_SEND,     /* sent; Meta decides (131047) */
    OG_OUTSIDE_WINDOW_SKIP,     /* not sent: skipped with reason outside_window */
    OG_OUTSIDE_WINDOW_TEMPLATE, /* sent wrapped in windowTemplate */
} og_settings_outside_window_t;

og_settings_outside_window_t og_settings_outside_window(const json_t *settings);

/* channels.whatsapp_meta.windowTemplate: true with its name and language (borrowed). */
bool og_settings_window_template(const json_t *settings, const char **name, const char **language);

/* otp.whatsappTemplate, the authentication template of OTPs over WhatsApp: true with its name
 * and language (borrowed). */
bool og_settings_otp_whatsapp_template(const json_t *settings, const char **name, const char **language);

#endif
