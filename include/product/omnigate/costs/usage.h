/*
 * The usage a sync send's completion adds (API.md §22, sql/028): its attempts and its win, as
 * rows of its write batch's tally (og_db_set_tally), which usage_add (sql/queries/usage.sql)
 * writes once per batch in the batch's transaction. The rule is sql/024's (og_usage_final,
 * og_usage_accepted, og_usage_failed, og_usage_cost; og_usage_messages_won's won and savings)
 * applied to what a completion writes: an attempt sent or failed, never pending. Not the
 * delivery statuses: PostgreSQL counts one the completion adopts (sql/028's row trigger) and
 * later ones (sql/024's triggers). Not the day's messages: the insert counts them.
 */
#ifndef OMNIGATE_COSTS_USAGE_H
#define OMNIGATE_COSTS_USAGE_H

#include <stdbool.h>

#include "omnigate/channel.h"
#include "omnigate/costs/rates.h"
#include "omnigate/db.h"

/* A tally row's keys and sums, in usage_add's parameters' order (checked by name in usage.c). */
enum og_usage_key { OG_USAGE_TENANT, OG_USAGE_DAY, OG_USAGE_CHANNEL, OG_USAGE__KEYS };
enum og_usage_sum {
    OG_USAGE_ATTEMPTS, /* also the channel's messages */
    OG_USAGE_ACCEPTED,
    OG_USAGE_FAILED,
    OG_USAGE_COST,
    OG_USAGE_WON,
    OG_USAGE_SAVINGS,
    OG_USAGE__SUMS
};

/* The day of a message as usage counts it: UTC, YYYY-MM-DD (the inserts return it). */
#define OG_USAGE_DAY_TEXT 11

/* Fills `row` with what one attempt of a completion adds: on `tenant_id`'s `day` (both kept by
 * the caller until the write is done), in channel ch's row; an attempt, accepted when `sent` (at
 * `cost` when it has a currency) or failed; and when it `won` a fallback message of more than one
 * channel, the win, with what it saved against SMS (`sms_equiv` minus `cost`, both known, for a
 * WhatsApp channel). */
void og_usage_attempt_row(og_db_tally_row_t *row, const char *tenant_id, const char *day, og_channel_t ch,
                          bool sent, const og_cost_t *cost, bool won, const og_cost_t *sms_equiv);

/* Keeps only the win of `row` (og_usage_attempt_row): for an attempt whose row was written before
 * and is written again (a queued attempt retried after a 429), counted by the database's trigger
 * on updated attempts (sql/024) rather than again here. */
void og_usage_win_only(og_db_tally_row_t *row);

/* Makes usage_add the tally of `db`, the write pool the sends complete on. */
void og_usage_tally_init(og_db_t *db);

#endif
