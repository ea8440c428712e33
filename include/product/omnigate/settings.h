/*
 * Tenant settings of API.md §5 as a jansson value: validation (an error naming the dotted field
 * path), masking of secrets, RFC 7396 merge patch, defaults, and read-only getters for the send
 * path. Responsible for the shape and meaning of the document; not for storing it.
 */
#ifndef OMNIGATE_SETTINGS_H
#define OMNIGATE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "omnigate/error.h"

#define OG_SETTINGS_CHANNELS         3       /* whatsapp_qr, whatsapp_meta, sms */
#define OG_SETTINGS_RATE_MAX         1000000 /* rateLimitPerSecond upper bound */
#define OG_SETTINGS_SESSION_MAX      64      /* whatsapp_qr session name, bytes */
#define OG_SETTINGS_PHONE_ID_MAX     32      /* whatsapp_meta phoneNumberId, digits */
#define OG_SETTINGS_ACCESS_TOKEN_MAX 1024    /* whatsapp_meta accessToken, bytes */

/* True when `name` is one of the channel names whatsapp_qr, whatsapp_meta, sms. */
bool og_settings_channel_name_valid(const char *name);

/* Checks `settings` against API.md §5. On failure returns false with `err` set to
 * validation_failed (or unknown_field for a key the schema does not know), `field` naming the
 * value at fault from the root "settings", e.g. "settings.channels.sms.senders[1]". Every key is
 * optional; a channel without "enabled": true is disabled. An accessToken must be printable
 * ASCII (it goes into an HTTP header) and must not start with "****" (a masked value). */
bool og_settings_validate(json_t *settings, og_err_t *err);

/* A deep copy of `settings` in which every "accessToken" member, at any depth, is replaced by
 * "****" + its last 4 characters, or by "****" when it has fewer than 12 characters or is not a
 * string. NULL when out of memory. */
json_t *og_settings_mask(const json_t *settings);

/* RFC 7396 merge of `patch` into a copy of `stored` (null deletes a member, objects merge
 * recursively, any other value replaces), except that an "accessToken" string equal to the
 * masked form of the stored accessToken at the same place keeps the stored secret, so a client
 * may send back what GET returned. Returns a new value (not necessarily valid settings: run
 * og_settings_validate on it), or NULL when out of memory. */
json_t *og_settings_merge_patch(const json_t *stored, const json_t *patch);

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
    const char *access_token;    /* whatsapp_meta: Cloud API bearer token */
} og_settings_wa_number_t;

/* Looks `from` up in channels.<channel>.numbers (channel whatsapp_qr or whatsapp_meta). True,
 * with `out` filled (fields the channel does not use are NULL), when the number is registered
 * with what the channel needs; else false and `out` zeroed. */
bool og_settings_wa_number(const json_t *settings, const char *channel, const char *from,
                           og_settings_wa_number_t *out);

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

#endif
