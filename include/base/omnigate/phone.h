/*
 * Address formats: E.164 recipient numbers, WhatsApp sender numbers and SMS sender ids.
 * Responsible for the syntax of API.md §2 only; not for whether a number exists, is
 * registered for a tenant (settings.h) or is on its approved sender list.
 */
#ifndef OMNIGATE_PHONE_H
#define OMNIGATE_PHONE_H

#include <stdbool.h>

#define OG_PHONE_MAX_DIGITS  15 /* E.164 */
#define OG_PHONE_SENDER_SIZE 17 /* longest sender id ("+" and 15 digits) with its NUL */

/* "+", then 8-15 ASCII digits, the first one 1-9. */
bool og_phone_e164_valid(const char *s);

/* A WhatsApp sender number: 8-15 ASCII digits, the first one 1-9, no "+". */
bool og_phone_wa_from_valid(const char *s);

/* The number of a WhatsApp user id as WAHA writes it, "<digits>@c.us" (a chat, a message's
 * from or to, a session's me.id): its digits, 8-15 of them, into `out` (no "+"); false for any
 * other id (a group's "@g.us", a broadcast, a malformed one). */
bool og_phone_wa_user(const char *id, char out[OG_PHONE_SENDER_SIZE]);

/* An SMS sender id, one of:
 *   alphanumeric: 1-11 characters of A-Z a-z 0-9 and space, at least one of them a letter
 *                 (so never only spaces or only digits);
 *   numeric:      1-15 ASCII digits (short codes and national long codes; a leading 0 allowed);
 *   E.164:        "+" then 8-15 digits, first 1-9, as og_phone_e164_valid (Twilio's From).
 * A NULL `s` is not valid. */
bool og_phone_sender_valid(const char *s);

/* The form a valid SMS sender id goes to the provider in (Twilio's From, whose published API
 * description requires E.164 for a phone number): a numeric sender of 8-15 digits, the first
 * 1-9, is a long code and goes with "+" in front; short codes (up to 6 digits), other numeric
 * ids (7 digits, or a leading 0: no country can be told from them), E.164 senders and
 * alphanumeric ids go as they are. Writes the NUL-terminated form into `out`. */
void og_phone_sender_wire(const char *sender, char out[OG_PHONE_SENDER_SIZE]);

#endif
