/*
 * The rates of API.md §19's pacing: how many provider calls per second each sender may make,
 * from the tenant's settings or else the §24 defaults of the configuration. Responsible for the
 * numbers only (the defaults and the per-minute conversion live here and nowhere else); not for
 * holding messages back to them, which is the queue's work.
 */
#ifndef OMNIGATE_QUEUE_PACING_H
#define OMNIGATE_QUEUE_PACING_H

#include <jansson.h>

#include "omnigate/channel.h"
#include "omnigate/config.h"

/* A sender's rate in messages per second (SMS: segments per second), API.md §19: the tenant's
 * setting for that sender, else the §24 default. ch: the channel; from: the WhatsApp number
 * (digits, the key of channels.<ch>.numbers) for whatsapp_qr / whatsapp_meta, the SMS sender id
 * for sms. whatsapp_qr's per-minute rate is returned per second (/60). `settings` (validated, as
 * og_settings_validate accepts them) and `from` may be NULL: the default. Always > 0 for a
 * channel of og_channel_t; 0 for any other value of `ch`. */
double og_pacing_rate(const og_config_t *cfg, const json_t *settings, og_channel_t ch, const char *from);

/* The tokens one provider call takes from its sender's bucket: on sms one per segment (at least
 * one), on WhatsApp one. The one rule for a queued attempt's entry, a sync send's debit and an
 * SMS or OTP request's (sql/018's claim takes an entry's as recorded). */
int og_pacing_cost(og_channel_t ch, size_t segments);

/* The sender whose bucket a call on `ch` takes from (API.md §19), the key of queue_senders: the
 * SMS sender id on sms, the WAHA session on whatsapp_qr (NULL or "": OG_WAHA_DEFAULT_SESSION, as waha.c
 * sends), Meta's phone number id on whatsapp_meta. The one rule for queued and sync sends, SMS and OTP
 * requests. Borrowed from the arguments; NULL when that channel's is. */
const char *og_pacing_sender(og_channel_t ch, const char *sms_sender, const char *qr_session,
                             const char *phone_number_id);

#endif
