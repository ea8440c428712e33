/*
 * The usage a sync send's completion adds to its write batch's tally (costs/usage.h, sql/028).
 */
#include "omnigate/costs/usage.h"

#include <stddef.h>
#include <string.h>

#include "omnigate/store.h"

/* usage_add's parameters, by name, are the tally's keys then its sums in these orders. */
#define PARAM_AT(field, i) (offsetof(og_q_usage_add_t, field) == (size_t)(i) * sizeof(const char *))
_Static_assert(OG_USAGE__KEYS == OG_DB_TALLY_KEYS && OG_USAGE__SUMS == OG_DB_TALLY_SUMS,
               "the tally's shape is usage_add's");
_Static_assert(PARAM_AT(tenant_id, OG_USAGE_TENANT) && PARAM_AT(day, OG_USAGE_DAY) &&
                   PARAM_AT(channel, OG_USAGE_CHANNEL),
               "usage_add's keys");
_Static_assert(PARAM_AT(attempts, OG_DB_TALLY_KEYS + OG_USAGE_ATTEMPTS) &&
                   PARAM_AT(accepted, OG_DB_TALLY_KEYS + OG_USAGE_ACCEPTED) &&
                   PARAM_AT(failed, OG_DB_TALLY_KEYS + OG_USAGE_FAILED) &&
                   PARAM_AT(cost_micros, OG_DB_TALLY_KEYS + OG_USAGE_COST) &&
                   PARAM_AT(won, OG_DB_TALLY_KEYS + OG_USAGE_WON) &&
                   PARAM_AT(savings_micros, OG_DB_TALLY_KEYS + OG_USAGE_SAVINGS),
               "usage_add's sums");

void og_usage_attempt_row(og_db_tally_row_t *row, const char *tenant_id, const char *day, og_channel_t ch,
                          bool sent, const og_cost_t *cost, bool won, const og_cost_t *sms_equiv)
{
    memset(row, 0, sizeof(*row));
    row->keys[OG_USAGE_TENANT] = tenant_id;
    row->keys[OG_USAGE_DAY] = day;
    row->keys[OG_USAGE_CHANNEL] = og_channel_name(ch);
    row->sums[OG_USAGE_ATTEMPTS] = 1;
    row->sums[OG_USAGE_ACCEPTED] = sent;
    row->sums[OG_USAGE_FAILED] = !sent;
    bool priced = sent && cost->currency[0] != '\0';
    row->sums[OG_USAGE_COST] = priced ? cost->micros : 0;
    if (sent && won) {
        row->sums[OG_USAGE_WON] = 1;
        if (ch != OG_CH_SMS && priced && sms_equiv->currency[0] != '\0')
            row->sums[OG_USAGE_SAVINGS] = sms_equiv->micros - cost->micros;
    }
}

void og_usage_win_only(og_db_tally_row_t *row)
{
    row->sums[OG_USAGE_ATTEMPTS] = 0;
    row->sums[OG_USAGE_ACCEPTED] = 0;
    row->sums[OG_USAGE_FAILED] = 0;
    row->sums[OG_USAGE_COST] = 0;
}

void og_usage_tally_init(og_db_t *db)
{
    og_db_set_tally(db, OG_Q_USAGE_ADD);
}
