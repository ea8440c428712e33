/*
 * The three delivery channels of API.md §2 and the attempt error codes, as a leaf that every
 * layer may include: the provider adapters produce them, metrics labels by them, the store
 * records them. Responsible for the names and their parsing; not for what a channel does
 * (provider.h) or whether a tenant may use it (settings.h).
 */
#ifndef OMNIGATE_CHANNEL_H
#define OMNIGATE_CHANNEL_H

#include <stdbool.h>

typedef enum og_channel { OG_CH_WHATSAPP_QR, OG_CH_WHATSAPP_META, OG_CH_SMS, OG_CH__COUNT } og_channel_t;

/* "whatsapp_qr", "whatsapp_meta", "sms"; "?" for anything else. */
const char *og_channel_name(og_channel_t ch);
/* The provider behind a channel, for labels and logs: "waha", "meta", "twilio"; "?" else. */
const char *og_channel_provider(og_channel_t ch);
/* The inverse; false for an unknown name. */
bool og_channel_parse(const char *name, og_channel_t *out);
/* The index of `ch` in the plan list[0..n) (a send's or an OTP's channels), or -1. */
int og_channel_index(const og_channel_t *list, int n, og_channel_t ch);

/* Attempt error codes (API.md §2); static strings, compare by value or pointer. */
extern const char OG_ERR_PROVIDER_TIMEOUT[];      /* "provider_timeout" */
extern const char OG_ERR_PROVIDER_UNREACHABLE[];  /* "provider_unreachable" */
extern const char OG_ERR_PROVIDER_REJECTED[];     /* "provider_rejected" */
extern const char OG_ERR_PROVIDER_ERROR[];        /* "provider_error" */
extern const char OG_ERR_PROVIDER_RATE_LIMITED[]; /* "provider_rate_limited" */
extern const char OG_ERR_NOT_CONFIGURED[];        /* "not_configured" */
extern const char OG_ERR_PROVIDER_UNAVAILABLE[];  /* "provider_unavailable": circuit open, not called */
/* "recipient_opted_out": the recipient opted out of the channel's kind after the message was
 * accepted (a queued message, a delivery-based fallback's later step): not called (API.md §21).
 * Never a provider's outcome, so not among og_attempt_outcomes. */
extern const char OG_ERR_RECIPIENT_OPTED_OUT[];

/* Every attempt outcome in a fixed order: "sent", then the error codes above (metrics labels). */
#define OG_ATTEMPT_OUTCOMES 8
extern const char *const og_attempt_outcomes[OG_ATTEMPT_OUTCOMES];

#endif
