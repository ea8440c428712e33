/*
 * One attempt of a message already stored (a delivery-based fallback step's, steps/fallback.c;
 * a released queued message's, queue/release.c): what its provider gets, made from the
 * message's row and the tenant's settings now, and the statements that record its outcome
 * (fallback_end, and the SMS record of an sms attempt). Responsible for those two; not for
 * when the attempt runs or what follows it.
 */
#ifndef OMNIGATE_MESSAGING_STORED_H
#define OMNIGATE_MESSAGING_STORED_H

#include <stdbool.h>

#include <jansson.h>

#include "omnigate/consent/consent.h"
#include "omnigate/costs/rates.h"
#include "omnigate/db.h"
#include "omnigate/providers/provider.h"
#include "omnigate/smsenc.h"

typedef struct og_stored_attempt {
    /* in: borrowed, valid until the outcome's write is done */
    const char *tenant_id;
    const char *reference;
    const char *to;
    const char *text;
    const char *wa_from;         /* "" when none */
    const char *sender;          /* the SMS sender, "" when none */
    const char *template_json;   /* Meta's template object, or NULL for a free text */
    const json_t *settings;      /* the tenant's, opened */
    og_rate_category_t category; /* the Meta template's (its price may depend on it), or none */
    const og_rate_card_t *rates; /* the global rate card (og_consent_rates), NULL when none */
    og_channel_t ch;
    int seq; /* the attempt's seq: the channel's place in the message's channels */
    /* out (og_stored_params) */
    og_send_params_t params;
    bool token_sealed; /* the channel's access token did not open (settings.h) */
    og_sms_info_t sms;
    og_cost_t cost;      /* what the attempt costs if its provider accepts it (API.md §22) */
    og_cost_t sms_equiv; /* a WhatsApp attempt's text by SMS (savings) */
    /* SQL parameters that must outlive the op */
    char seq_s[12], latency_s[24], http_s[12], segments_s[12], cost_s[OG_COST_PARAM],
        sms_equiv_s[OG_COST_PARAM];
    char *sms_error_text;
} og_stored_attempt_t;

/* Fills a->params (and a->sms for sms) for channel a->ch from the senders the send resolved
 * and the settings now; what is missing makes the attempt fail not_configured. And a->cost:
 * what the attempt costs if accepted, by the cards now (the settings are at hand only here). */
void og_stored_params(og_stored_attempt_t *a);

/* The cost parameters of the attempt's outcome: a->cost's millionths and currency when `sent`
 * with a rate, else NULL (each). */
const char *og_stored_cost_micros(og_stored_attempt_t *a, bool sent);
const char *og_stored_cost_currency(const og_stored_attempt_t *a, bool sent);
const char *og_stored_sms_equiv_micros(og_stored_attempt_t *a, bool sent);

/* The adapter saw no token: the reason it had none is ours to give (call from the attempt's
 * done callback before reading its result). */
void og_stored_result_fix(const og_stored_attempt_t *a, og_attempt_result_t *r);

/* 'template' when the attempt sends Meta's template message, NULL for a free text
 * (attempts.content). */
const char *og_stored_content(const og_stored_attempt_t *a);

/* Binds at op->stmts[n..] the attempt's outcome `r`: fallback_end, and for sms its SMS record.
 * Returns the number of statements (1 or 2). NULL-safe for out-of-memory on the error text
 * (the record then has no error object). */
int og_stored_end_stmts(og_stored_attempt_t *a, const og_attempt_result_t *r, og_db_op_t *op, int n);

/* Only the SMS record of an sms attempt's outcome, at op->stmts[n]: 1 statement, or 0 for another
 * channel (for a caller that completes the attempt's row with a statement of its own). */
int og_stored_sms_stmt(og_stored_attempt_t *a, const og_attempt_result_t *r, og_db_op_t *op, int n);

/* Frees what og_stored_end_stmts and og_stored_sms_stmt allocated. */
void og_stored_clear(og_stored_attempt_t *a);

/* Starts the attempt of `a` (its params made) on `prov`, ending in att->done: at once and
 * without a call, failed recipient_opted_out, when the recipient opted out of the channel's kind
 * since the message was accepted (API.md §21: `consent`, NULL without a database). */
void og_stored_start(const og_consent_t *consent, og_providers_t *prov, og_stored_attempt_t *a,
                     og_attempt_t *att);

#endif
