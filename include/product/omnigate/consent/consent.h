/*
 * Consent and the WhatsApp window as a send sees them (API.md §21): a copy, in each worker, of
 * every suppression in force (tenant, number, kind) and every open window (Meta phone number
 * id, number), so that a send checks both without a database round trip. Responsible for the
 * copy and its freshness; not for changing consent (sql/021_inbound.sql does, on keywords,
 * provider answers and the API: consent_api.h) or for what a send does with the answer
 * (messaging/send.c, messaging/otp.c).
 *
 * Freshness: every OG_CONSENT_READ_MS the copy reads the rows changed since its last read
 * (consent_changes: by the transaction id each row carries, from the last read's snapshot
 * xmin, so a transaction that committed late is read the next time), opt-ins included; a
 * change made anywhere is seen by every worker of every instance within about a second. A copy
 * that could not read for OG_CONSENT_RELOAD_MS (the database was away) reads everything again,
 * so what was pruned meanwhile (sql/021: opt-ins after a day) is never missed.
 *
 * Until its first read the copy knows nothing: the worker is not ready (/readyz), and a send
 * that arrives meanwhile waits for that read (og_consent_wait: a worker just started is not
 * refused its first sends while another worker already answers ready); if the read fails it
 * answers 503 rather than send to a number that may have opted out.
 *
 * Memory: 32 bytes a slot, at most half full: about 64 bytes per suppression in force and per
 * open window, in each worker (a million of each: 128 MB a worker). Keys are a tenant id and a
 * number for suppressions; for windows a 64-bit hash of the phone number id (FNV-1a and its
 * length) and the number: two ids with one hash would share their windows with one recipient
 * (odds about 2^-64 per pair).
 */
#ifndef OMNIGATE_CONSENT_CONSENT_H
#define OMNIGATE_CONSENT_CONSENT_H

#include <stdbool.h>
#include <stdint.h>

#include "omnigate/app/ctx.h"
#include "omnigate/channel.h"
#include "omnigate/costs/rates.h"
#include "omnigate/error.h"
#include "omnigate/metrics.h"

#define OG_CONSENT_READ_MS   1000
#define OG_CONSENT_RELOAD_MS (10 * 60 * 1000)

/* The kinds of consent (API.md §21), as bits: a channel belongs to one. */
#define OG_CONSENT_SMS      1u
#define OG_CONSENT_WHATSAPP 2u
#define OG_CONSENT_ALL      (OG_CONSENT_SMS | OG_CONSENT_WHATSAPP)

typedef struct og_consent og_consent_t;

/* Its metric block: suppressions in force by kind and source (sampled by worker 0). */
extern const og_m_block_t og_consent_metrics_block;

/* The kind bit of channel ch. */
unsigned og_consent_kind_of(og_channel_t ch);

/* "sms" or "whatsapp" for one kind bit. */
const char *og_consent_kind_name(unsigned kind);

/* The kind bit named `name`; false when it names none. */
bool og_consent_kind_parse(const char *name, unsigned *kind);

/* Starts the copy of gw (which has a database); `sample`: this worker samples the gauge. NULL
 * when out of memory. */
og_consent_t *og_consent_start(og_gw_t *gw, bool sample);

/* Stops it; closed(arg) runs once its timer is closed (a read in flight ends on the pool,
 * closed after this). */
void og_consent_close(og_consent_t *c, void (*closed)(void *arg), void *arg);

/* Whether the first read is done; true for NULL (no database: nothing to load). */
bool og_consent_ready(const og_consent_t *c);

/* A send waiting for the copy's first read. */
typedef struct og_consent_wait {
    struct og_consent_wait *next;
    void (*done)(struct og_consent_wait *w);
} og_consent_wait_t;

/* Runs w->done once og_consent_opted_out can answer: at once (before returning) when the copy is
 * loaded or c is NULL, else when the read in flight or the next one ends (loaded, or failed: the
 * send then answers 503), or when c is closed. */
void og_consent_wait(og_consent_t *c, og_consent_wait_t *w);

/* The kinds tenant `tenant_id` may not send to `number` (E.164) on: 0 when none, or when c is
 * NULL (no database). */
unsigned og_consent_suppressed(const og_consent_t *c, const char *tenant_id, const char *number);

/* For a send (every route's one rule): the kinds tenant `tenant_id` may not send to `number` on,
 * into *out; false with `err` (503 unavailable) while the copy is not loaded, for a send must
 * never go out unchecked. */
bool og_consent_opted_out(const og_consent_t *c, const char *tenant_id, const char *number, unsigned *out,
                          og_err_t *err);

/* The global rate card (API.md §22), which the copy's reads bring too (rates_current, when it
 * changed), or NULL when there is none (or no database): a send prices its accepted attempts
 * with it (og_cost_price), so a card put on any instance applies within about a second. */
const og_rate_card_t *og_consent_rates(const og_consent_t *c);

/* Whether (phone_number_id, number)'s customer service window is open now. */
bool og_consent_window_open(const og_consent_t *c, const char *phone_number_id, const char *number);

#endif
