/*
 * Rate cards (API.md §22): what an accepted attempt costs. A card is {"currency", "rates":
 * [{"channel", "prefix", "price", "category"?}]}: the global one (PUT /admin/rates) and a
 * tenant's (settings `rates`). Responsible for reading and checking a card, finding an
 * attempt's rate and pricing it exactly; not for storing cards or recording costs.
 *
 * Prices are exact: decimal strings of up to 6 places read into millionths of the currency's
 * unit (og_micros_t) and summed as integers, never as floats.
 *
 * Which rate (og_rates_find): for a channel the tenant's card lists, only the tenant's entries
 * count, else the global card's. Among the entries of that channel whose prefix begins the
 * recipient's number ("" begins every number), an entry of the template's category (Meta
 * templates) beats one without a category, whatever their prefixes (a category is the price
 * Meta charges first); then the longest prefix wins. An entry of another category never applies.
 */
#ifndef OMNIGATE_COSTS_RATES_H
#define OMNIGATE_COSTS_RATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "omnigate/channel.h"
#include "omnigate/error.h"

#define OG_RATES_MAX        10000   /* entries of a card */
#define OG_RATES_PRICE_MAX  1000000 /* a price is below a million units */
#define OG_RATES_PREFIX_MAX 16      /* "+" and up to 15 digits */
#define OG_PRICE_TEXT       32      /* og_price_format's buffer */

/* Millionths of a currency's unit. */
typedef int64_t og_micros_t;

/* Template categories (Meta's), or none. */
typedef enum og_rate_category {
    OG_CAT_NONE,
    OG_CAT_MARKETING,
    OG_CAT_UTILITY,
    OG_CAT_AUTHENTICATION,
    OG_CAT_SERVICE,
} og_rate_category_t;

typedef struct og_rate {
    og_channel_t ch;
    og_rate_category_t category;
    og_micros_t price;
    char prefix[OG_RATES_PREFIX_MAX + 1];
} og_rate_t;

typedef struct og_rate_card {
    char currency[4];
    og_rate_t *rates; /* malloc'd */
    size_t n;
    size_t prefix_max; /* the longest prefix listed: a lookup tries none longer */
} og_rate_card_t;

/* A decimal string of up to 6 places, at least 0 and below OG_RATES_PRICE_MAX ("0.045",
 * "12", not "1e3", "-1", ".5" or "1."), into *out; false otherwise. */
bool og_price_parse(const char *s, og_micros_t *out);

/* `v` as a decimal string of 4 to 6 places ("0.0450", "0.045125", "12.0000", "-0.0120"). */
void og_price_format(og_micros_t v, char out[OG_PRICE_TEXT]);

/* "marketing", "utility", "authentication", "service" (any case, as Meta's listing spells them
 * in upper case) into *out; false for anything else (NULL included). */
bool og_rate_category_parse(const char *s, og_rate_category_t *out);

/* "marketing", "utility", "authentication" or "service"; NULL for OG_CAT_NONE. */
const char *og_rate_category_name(og_rate_category_t c);

/* Reads and checks a card; `path` names it in errors ("settings.rates"; "" for a card that is a
 * request's whole body, its fields then named from the top: "currency", "rates[3]"): 422
 * validation_failed naming the field (currency: 3 upper-case letters; rates: an array of at
 * most OG_RATES_MAX entries, each with a known channel, a prefix of "" or "+" and 1-15 digits,
 * a price og_price_parse takes, a category only on whatsapp_meta, no two entries of one
 * channel, prefix and category), unknown_field for a key it does not know. On success `out`
 * owns its entries (og_rate_card_clear). */
bool og_rate_card_parse(const json_t *card, const char *path, og_rate_card_t *out, og_err_t *err);

void og_rate_card_clear(og_rate_card_t *c);

/* The rate of an attempt on `ch` to `to` (E.164) of template category `category` (OG_CAT_NONE
 * for a free text or another channel), from `tenant` (may be NULL) or `global` (may be NULL) as
 * the header says; NULL when none applies. *card is set to the card it came from. */
const og_rate_t *og_rates_find(const og_rate_card_t *tenant, const og_rate_card_t *global, og_channel_t ch,
                               const char *to, og_rate_category_t category, const og_rate_card_t **card);

/* What an attempt at rate r costs: its price, times `segments` on sms (at least 1). */
og_micros_t og_rate_cost(const og_rate_t *r, int segments);

/* What an accepted attempt costs (API.md §22): millionths of `currency`; currency "" when no
 * rate applied (the attempt's cost is null). */
typedef struct og_cost {
    og_micros_t micros;
    char currency[4];
} og_cost_t;

/* The cost of an attempt on `ch` to `to` (E.164) of template category `category`, of `segments`
 * SMS segments, by the tenant's card (its settings' `rates`, read here; settings may be NULL)
 * and the global card (`global`, NULL when there is none), as og_rates_find chooses; false,
 * with out->currency "", when no rate applies. */
bool og_cost_price(const og_rate_card_t *global, const json_t *settings, og_channel_t ch, const char *to,
                   og_rate_category_t category, int segments, og_cost_t *out);

/* What `text` to `to` would have cost by SMS (og_cost_price on sms, its segments counted here):
 * recorded with an accepted WhatsApp attempt, what fallback saved is measured by it (API.md
 * §22 savings). False, out->currency "", without an SMS rate. */
bool og_cost_sms_equivalent(const og_rate_card_t *global, const json_t *settings, const char *to,
                            const char *text, og_cost_t *out);

/* A cost as the completion writes' parameters (sql/023): its millionths written into `buf`,
 * and its currency; NULL (each) when not `sent` or without a rate. */
#define OG_COST_PARAM 24
const char *og_cost_param_micros(const og_cost_t *c, bool sent, char buf[OG_COST_PARAM]);
const char *og_cost_param_currency(const og_cost_t *c, bool sent);

struct og_jw;

/* Writes `key` ("cost", "savings") with {"amount", "currency"} as an answer shows it (the logs'
 * og_cost_json, sql/023, writes the same), or null when `cost` is NULL or has no currency. */
void og_cost_write(struct og_jw *w, const char *key, const og_cost_t *cost);

/* The same as a JSON value (a new reference): the object, or null. */
json_t *og_cost_json(const og_cost_t *cost);

#endif
