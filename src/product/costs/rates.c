/*
 * Rate cards. See include/product/omnigate/costs/rates.h.
 */
#include "omnigate/costs/rates.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "omnigate/api.h"
#include "omnigate/jw.h"
#include "omnigate/smsenc.h"

static const char *const category_names[] = {NULL, "marketing", "utility", "authentication", "service"};

bool og_price_parse(const char *s, og_micros_t *out)
{
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return false;
    og_micros_t units = 0, frac = 0;
    const char *p = s;
    int intdigits = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (++intdigits > 7)
            return false;
        units = units * 10 + (*p - '0');
    }
    if (intdigits > 1 && s[0] == '0')
        return false; /* "007" */
    int places = 0;
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            if (++places > 6)
                return false;
            frac = frac * 10 + (*p - '0');
        }
        if (places == 0)
            return false; /* "1." */
    }
    if (*p != '\0' || units >= OG_RATES_PRICE_MAX)
        return false;
    for (int k = places; k < 6; k++)
        frac *= 10;
    *out = units * 1000000 + frac;
    return true;
}

void og_price_format(og_micros_t v, char out[OG_PRICE_TEXT])
{
    /* A negative amount (a saving that cost more) is its absolute value with a sign. */
    unsigned long long a = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    unsigned long long units = a / 1000000, frac = a % 1000000;
    int places = 6;
    while (places > 4 && frac % 10 == 0) {
        frac /= 10;
        places--;
    }
    snprintf(out, OG_PRICE_TEXT, "%s%llu.%0*llu", v < 0 ? "-" : "", units, places, frac);
}

const char *og_rate_category_name(og_rate_category_t c)
{
    return c > OG_CAT_NONE && c <= OG_CAT_SERVICE ? category_names[c] : NULL;
}

bool og_rate_category_parse(const char *s, og_rate_category_t *out)
{
    for (int i = OG_CAT_MARKETING; i <= OG_CAT_SERVICE && s != NULL; i++)
        if (strcasecmp(s, category_names[i]) == 0) {
            *out = (og_rate_category_t)i;
            return true;
        }
    return false;
}

static bool prefix_valid(const char *p)
{
    size_t n = p != NULL ? strlen(p) : 0;
    if (p == NULL)
        return false;
    if (n == 0)
        return true;
    return p[0] == '+' && n >= 2 && n <= OG_RATES_PREFIX_MAX && strspn(p + 1, "0123456789") == n - 1;
}

/* One entry of rates[], at `field` ("rates[3]"). */
static bool read_rate(const json_t *e, const char *field, og_rate_t *r, og_err_t *err)
{
    static const char *const keys[] = {"channel", "prefix", "price", "category", NULL};
    if (!json_is_object(e))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s must be an object", field);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)e, key, v)
    {
        bool known = false;
        for (int i = 0; keys[i] != NULL; i++)
            known = known || strcmp(key, keys[i]) == 0;
        if (!known)
            return og_err_fail(err, OG_E_UNKNOWN_FIELD, field, "%s has an unknown field %.64s", field, key);
    }
    const char *ch = json_string_value(json_object_get(e, "channel"));
    if (!og_channel_parse(ch, &r->ch))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                           "%s.channel must be whatsapp_qr, whatsapp_meta or sms", field);
    const char *prefix = json_string_value(json_object_get(e, "prefix"));
    if (!prefix_valid(prefix))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                           "%s.prefix must be \"\" or + and 1-15 digits (the numbers it applies to)", field);
    snprintf(r->prefix, sizeof(r->prefix), "%s", prefix);
    if (!og_price_parse(json_string_value(json_object_get(e, "price")), &r->price))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                           "%s.price must be a decimal string of up to 6 places, from 0 and below 1000000",
                           field);
    json_t *cat = json_object_get(e, "category");
    r->category = OG_CAT_NONE;
    if (cat != NULL &&
        (r->ch != OG_CH_WHATSAPP_META || !og_rate_category_parse(json_string_value(cat), &r->category)))
        return og_err_fail(
            err, OG_E_VALIDATION_FAILED, field,
            "%s.category must be marketing, utility, authentication or service, on whatsapp_meta "
            "only",
            field);
    return true;
}

static int rate_cmp(const void *a, const void *b)
{
    const og_rate_t *x = a, *y = b;
    if (x->ch != y->ch)
        return (int)x->ch - (int)y->ch;
    if (x->category != y->category)
        return (int)x->category - (int)y->category;
    return strcmp(x->prefix, y->prefix);
}

bool og_rate_card_parse(const json_t *card, const char *path, og_rate_card_t *out, og_err_t *err)
{
    *out = (og_rate_card_t){0};
    if (!json_is_object(card))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, path[0] ? path : NULL,
                           "%s must be an object {currency, rates}", path[0] ? path : "the body");
    /* Fields are named below `path` ("settings.rates.currency"), or from the top ("currency"). */
    const char *dot = path[0] ? "." : "";
    char field[64];
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)card, key, v)
    {
        if (strcmp(key, "currency") != 0 && strcmp(key, "rates") != 0) {
            snprintf(field, sizeof(field), "%s%s%.32s", path, dot, key);
            return og_err_fail(err, OG_E_UNKNOWN_FIELD, field, "%s is not a field of a rate card", field);
        }
    }
    const char *cur = json_string_value(json_object_get(card, "currency"));
    snprintf(field, sizeof(field), "%s%scurrency", path, dot);
    if (cur == NULL || strlen(cur) != 3 || strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                           "%s must be a currency code: 3 upper-case letters", field);
    memcpy(out->currency, cur, 4);
    json_t *rates = json_object_get(card, "rates");
    snprintf(field, sizeof(field), "%s%srates", path, dot);
    if (!json_is_array(rates) || json_array_size(rates) > OG_RATES_MAX)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s must be an array of at most %d entries",
                           field, OG_RATES_MAX);
    size_t n = json_array_size(rates);
    out->rates = n > 0 ? calloc(n, sizeof(og_rate_t)) : NULL;
    if (n > 0 && out->rates == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        snprintf(field, sizeof(field), "%s%srates[%zu]", path, dot, i);
        if (!read_rate(json_array_get(rates, i), field, &out->rates[i], err)) {
            og_rate_card_clear(out);
            return false;
        }
    }
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(out->rates[i].prefix);
        if (len > out->prefix_max)
            out->prefix_max = len;
    }
    /* Sorted by (channel, category, prefix): a repeat is next to what it repeats. */
    if (n > 1)
        qsort(out->rates, n, sizeof(og_rate_t), rate_cmp);
    for (size_t i = 1; i < n; i++) {
        if (rate_cmp(&out->rates[i - 1], &out->rates[i]) == 0) {
            snprintf(field, sizeof(field), "%s%srates", path, dot);
            og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s lists %s prefix \"%s\"%s%s twice", field,
                        og_channel_name(out->rates[i].ch), out->rates[i].prefix,
                        out->rates[i].category ? " category " : "",
                        out->rates[i].category ? category_names[out->rates[i].category] : "");
            og_rate_card_clear(out);
            return false;
        }
    }
    return true;
}

void og_rate_card_clear(og_rate_card_t *c)
{
    free(c->rates);
    c->rates = NULL;
    c->n = 0;
}

static bool lists(const og_rate_card_t *c, og_channel_t ch)
{
    for (size_t i = 0; c != NULL && i < c->n; i++)
        if (c->rates[i].ch == ch)
            return true;
    return false;
}

/* The entry of (ch, category, the first len characters of to), or NULL: a card's entries are
 * sorted by rate_cmp. */
static const og_rate_t *exact(const og_rate_card_t *c, og_channel_t ch, og_rate_category_t category,
                              const char *to, size_t len)
{
    og_rate_t key = {.ch = ch, .category = category};
    memcpy(key.prefix, to, len);
    key.prefix[len] = '\0';
    return bsearch(&key, c->rates, c->n, sizeof(og_rate_t), rate_cmp);
}

/* Category first, then the longest prefix: the prefixes of `to` from the longest the card lists
 * to "", each looked up by bisection (a card of 750 entries: about a microsecond, against ten for
 * reading every entry; a number's 15 lengths tried where the card's prefixes have 5 were two
 * thirds of that). */
const og_rate_t *og_rates_find(const og_rate_card_t *tenant, const og_rate_card_t *global, og_channel_t ch,
                               const char *to, og_rate_category_t category, const og_rate_card_t **card)
{
    const og_rate_card_t *c = lists(tenant, ch) ? tenant : global;
    const og_rate_t *best = NULL;
    size_t n = strnlen(to, OG_RATES_PREFIX_MAX);
    if (c != NULL && n > c->prefix_max)
        n = c->prefix_max;
    og_rate_category_t kinds[2] = {category, OG_CAT_NONE};
    for (int k = category == OG_CAT_NONE ? 1 : 0; c != NULL && c->n > 0 && best == NULL && k < 2; k++)
        for (size_t len = n + 1; best == NULL && len-- > 0;)
            best = exact(c, ch, kinds[k], to, len);
    if (card != NULL)
        *card = best != NULL ? c : NULL;
    return best;
}

og_micros_t og_rate_cost(const og_rate_t *r, int segments)
{
    return r->ch == OG_CH_SMS ? r->price * (segments > 0 ? segments : 1) : r->price;
}

bool og_cost_price(const og_rate_card_t *global, const json_t *settings, og_channel_t ch, const char *to,
                   og_rate_category_t category, int segments, og_cost_t *out)
{
    out->micros = 0;
    out->currency[0] = '\0';
    og_rate_card_t tenant = {0};
    const json_t *card = settings != NULL ? json_object_get(settings, "rates") : NULL;
    og_err_t err = {0};
    /* Checked when the settings were written: a card that does not read now counts as none. */
    bool have_tenant = card != NULL && og_rate_card_parse(card, "settings.rates", &tenant, &err);
    const og_rate_card_t *from = NULL;
    const og_rate_t *r = og_rates_find(have_tenant ? &tenant : NULL, global, ch, to, category, &from);
    if (r != NULL) {
        out->micros = og_rate_cost(r, segments);
        memcpy(out->currency, from->currency, sizeof(out->currency));
    }
    og_rate_card_clear(&tenant);
    return r != NULL;
}

bool og_cost_sms_equivalent(const og_rate_card_t *global, const json_t *settings, const char *to,
                            const char *text, og_cost_t *out)
{
    og_sms_info_t info;
    og_sms_encode_info(text, strlen(text), &info);
    return og_cost_price(global, settings, OG_CH_SMS, to, OG_CAT_NONE, (int)info.segments, out);
}

const char *og_cost_param_micros(const og_cost_t *c, bool sent, char buf[OG_COST_PARAM])
{
    if (!sent || !c->currency[0])
        return NULL;
    og_int_str(buf, c->micros);
    return buf;
}

const char *og_cost_param_currency(const og_cost_t *c, bool sent)
{
    return sent && c->currency[0] ? c->currency : NULL;
}

json_t *og_cost_json(const og_cost_t *cost)
{
    if (cost == NULL || !cost->currency[0])
        return json_null();
    char amount[OG_PRICE_TEXT];
    og_price_format(cost->micros, amount);
    return json_pack("{s:s,s:s}", "amount", amount, "currency", cost->currency);
}

void og_cost_write(og_jw_t *w, const char *key, const og_cost_t *cost)
{
    og_jw_key(w, key);
    if (cost == NULL || !cost->currency[0]) {
        og_jw_null(w);
        return;
    }
    char amount[OG_PRICE_TEXT];
    og_price_format(cost->micros, amount);
    og_jw_object(w);
    og_jw_kstring(w, "amount", amount);
    og_jw_kstring(w, "currency", cost->currency);
    og_jw_object_end(w);
}
