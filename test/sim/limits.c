/*
 * Rate limits per sender (README.md: Rate limits per sender): PUT /__sim/limits sets a rate for
 * one sender of a channel, or for every sender of it (each with its own bucket), and the provider
 * endpoints ask sim_limit_take before acting on the planned behaviour, answering the provider's
 * 429 when the sender's bucket is short of tokens.
 *
 * A limit is a token bucket per (channel, sender), refilled continuously at perSecond up to
 * burst on the monotonic clock (uv_hrtime). Every bucket, a sender's own limit's or one of a
 * channel-wide limit's, lives in one pool in the order it was made and in one chained hash table
 * keyed by (channel, sender), so a request finds its bucket in O(1) whatever the number of limits
 * and senders. A sender's own limit has its bucket from the PUT on; a channel-wide limit makes
 * one on a sender's first request, up to BUCKETS_MAX, after which new senders go unlimited
 * and are counted as the limit's `overflow`. Buckets are never freed one by one: DELETE frees
 * the whole pool.
 */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "omnigate/api.h"
#include "omnigate/json.h"
#include "omnigate/log.h"

/* Limits kept at most: a PUT beyond is too_many_limits. */
#define LIMITS_MAX 1000
/* Buckets of channel-wide limits at most (a sender's own limit's bucket does not count). */
#define BUCKETS_MAX 100000
/* The pool never holds more than this: every limit's own bucket plus the channel-wide ones. */
#define POOL_MAX (BUCKETS_MAX + LIMITS_MAX)
/* perSecond and burst bounds (API.md §19's rates). */
#define RATE_MIN  0.01
#define RATE_MAX  100000.0
#define BURST_MIN 1.0
#define BURST_MAX 100000.0
/* The end of a hash chain, and "no channel-wide limit". */
#define NONE UINT32_MAX

typedef struct limit {
    sim_channel_t channel;
    bool every;        /* no sender given: every sender of the channel, each with its own bucket */
    double rate;       /* tokens per second */
    double burst;      /* the bucket's capacity */
    uint64_t overflow; /* every: requests of new senders past BUCKETS_MAX, let through unlimited */
    size_t sender_len;
    char sender[SIM_SENDER_MAX]; /* !every: the sender, not NUL-terminated */
} limit_t;

typedef struct bucket {
    uint32_t limit; /* index in limits */
    uint32_t next;  /* the next bucket in this hash slot, or NONE */
    sim_channel_t channel;
    double tokens;        /* may be below 0 after a request dearer than the burst */
    uint64_t refilled_ns; /* uv_hrtime() when `tokens` was last brought up to date */
    uint64_t accepted;    /* requests that took tokens */
    uint64_t accepted_tokens;
    uint64_t throttled;        /* requests answered 429 for want of tokens */
    int64_t first_ms, last_ms; /* wall clock of the first and last accepted request; 0: none */
    size_t sender_len;
    char sender[SIM_SENDER_MAX];
} bucket_t;

struct sim_limits {
    limit_t *limits; /* in the order they were first PUT */
    size_t nlimits, limits_cap;
    uint32_t every[SIM_CH__COUNT]; /* index of each channel's channel-wide limit, or NONE */

    bucket_t *pool; /* every bucket, in the order made */
    size_t npool, pool_cap;
    size_t nevery;   /* buckets of channel-wide limits, held to BUCKETS_MAX */
    uint32_t *slots; /* hash heads: npool indices chained through bucket.next */
    size_t nslots;   /* a power of two, pool_cap or more unless a rehash ran out of memory */
    bool overflow_logged;
};

sim_limits_t *sim_limits_new(void)
{
    sim_limits_t *l = calloc(1, sizeof(*l));
    if (l != NULL)
        for (int ch = 0; ch < SIM_CH__COUNT; ch++)
            l->every[ch] = NONE;
    return l;
}

static void limits_reset(sim_limits_t *l)
{
    free(l->limits);
    free(l->pool);
    free(l->slots);
    memset(l, 0, sizeof(*l));
    for (int ch = 0; ch < SIM_CH__COUNT; ch++)
        l->every[ch] = NONE;
}

void sim_limits_free(sim_limits_t *l)
{
    if (l == NULL)
        return;
    limits_reset(l);
    free(l);
}

/* ---- buckets -------------------------------------------------------------------------------- */

/* FNV-1a over the channel and the sender's bytes. */
static uint32_t key_hash(sim_channel_t ch, const char *sender, size_t len)
{
    uint32_t h = 2166136261u;
    h = (h ^ (uint32_t)ch) * 16777619u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)sender[i]) * 16777619u;
    return h;
}

static bucket_t *bucket_find(const sim_limits_t *l, sim_channel_t ch, const char *sender, size_t len)
{
    if (l->nslots == 0)
        return NULL;
    for (uint32_t i = l->slots[key_hash(ch, sender, len) & (l->nslots - 1)]; i != NONE; i = l->pool[i].next) {
        bucket_t *b = &l->pool[i];
        if (b->channel == ch && b->sender_len == len && memcmp(b->sender, sender, len) == 0)
            return b;
    }
    return NULL;
}

/* Room for one more bucket in the pool: it grows by doubling, and the hash table with it
 * (rehashed whole, so that chains stay about one long). False when out of memory. */
static bool pool_reserve(sim_limits_t *l)
{
    if (l->npool < l->pool_cap)
        return true;
    size_t cap = l->pool_cap ? l->pool_cap * 2 : 64;
    if (cap > POOL_MAX)
        cap = POOL_MAX;
    if (cap <= l->npool)
        return false;
    bucket_t *pool = realloc(l->pool, cap * sizeof(*pool));
    if (pool == NULL)
        return false;
    l->pool = pool;
    l->pool_cap = cap;
    size_t nslots = l->nslots ? l->nslots : 64;
    while (nslots < cap)
        nslots *= 2;
    if (nslots == l->nslots)
        return true;
    uint32_t *slots = malloc(nslots * sizeof(*slots));
    if (slots == NULL)
        return l->nslots > 0; /* the old table still finds everything; it only gets fuller */
    free(l->slots);
    l->slots = slots;
    l->nslots = nslots;
    for (size_t i = 0; i < nslots; i++)
        slots[i] = NONE;
    for (size_t i = 0; i < l->npool; i++) {
        bucket_t *b = &l->pool[i];
        uint32_t *head = &slots[key_hash(b->channel, b->sender, b->sender_len) & (nslots - 1)];
        b->next = *head;
        *head = (uint32_t)i;
    }
    return true;
}

/* A full bucket of limit `li` with no history, as on a limit's first use or after its PUT. */
static void bucket_reset(bucket_t *b, const sim_limits_t *l, uint32_t li)
{
    b->limit = li;
    b->tokens = l->limits[li].burst;
    b->refilled_ns = uv_hrtime();
    b->accepted = b->accepted_tokens = b->throttled = 0;
    b->first_ms = b->last_ms = 0;
}

/* A new bucket of limit `li` for (ch, sender), or NULL when out of memory. */
static bucket_t *bucket_add(sim_limits_t *l, uint32_t li, sim_channel_t ch, const char *sender, size_t len)
{
    if (!pool_reserve(l))
        return NULL;
    uint32_t i = (uint32_t)l->npool++;
    bucket_t *b = &l->pool[i];
    b->channel = ch;
    b->sender_len = len;
    memcpy(b->sender, sender, len);
    bucket_reset(b, l, li);
    uint32_t *head = &l->slots[key_hash(ch, sender, len) & (l->nslots - 1)];
    b->next = *head;
    *head = i;
    return b;
}

/* The bucket's tokens as of `now_ns`: refilled at the limit's rate for the time since the last
 * refill, up to the burst. */
static double bucket_tokens(const bucket_t *b, const limit_t *lim, uint64_t now_ns)
{
    double t = b->tokens + (double)(now_ns - b->refilled_ns) * 1e-9 * lim->rate;
    return t < lim->burst ? t : lim->burst;
}

bool sim_limit_take(sim_t *s, sim_channel_t ch, const char *sender, size_t len, unsigned cost,
                    uint64_t *retry_after_s)
{
    sim_limits_t *l = s->limits;
    if (l->nlimits == 0 || len > SIM_SENDER_MAX)
        return true;
    bucket_t *b = bucket_find(l, ch, sender, len);
    if (b == NULL) {
        uint32_t li = l->every[ch];
        if (li == NONE)
            return true;
        b = l->nevery < BUCKETS_MAX ? bucket_add(l, li, ch, sender, len) : NULL;
        if (b == NULL) {
            l->limits[li].overflow++;
            if (!l->overflow_logged)
                og_log(&s->w->log, OG_LOG_WARN, "rate limit buckets full: new senders go unlimited",
                       "\"channel\":\"%s\",\"buckets\":%zu", sim_channel_name(ch), l->nevery);
            l->overflow_logged = true;
            return true;
        }
        l->nevery++;
    }
    const limit_t *lim = &l->limits[b->limit];
    uint64_t now = uv_hrtime();
    b->tokens = bucket_tokens(b, lim, now);
    b->refilled_ns = now;
    /* A request dearer than the whole burst (a long SMS) could never pass: a full bucket lets it
     * through and goes below zero, so the sender still averages its rate. */
    double need = cost < lim->burst ? (double)cost : lim->burst;
    if (b->tokens < need) {
        b->throttled++;
        double wait = ceil((need - b->tokens) / lim->rate);
        *retry_after_s = wait < 1 ? 1 : (uint64_t)wait;
        return false;
    }
    b->tokens -= cost;
    b->accepted++;
    b->accepted_tokens += cost;
    b->last_ms = sim_now_ms();
    if (b->first_ms == 0)
        b->first_ms = b->last_ms;
    return true;
}

/* ---- the control API ------------------------------------------------------------------------ */

/* A JSON number (integer or real) from min to max into *out; absent leaves *out as it is. */
static bool number_field(json_t *body, const char *name, bool required, double min, double max, double *out,
                         og_err_t *err)
{
    json_t *v = json_object_get(body, name);
    if (v == NULL && !required)
        return true;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(d >= min && d <= max))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, name, "%s must be a number from %g to %g", name, min,
                           max);
    *out = d;
    return true;
}

static bool channel_field(json_t *body, sim_channel_t *out, og_err_t *err)
{
    const char *name = NULL;
    if (!og_json_get_string(body, "channel", true, &name, err))
        return false;
    for (int ch = 0; ch < SIM_CH__COUNT; ch++) {
        if (strcmp(name, sim_channel_name((sim_channel_t)ch)) == 0) {
            *out = (sim_channel_t)ch;
            return true;
        }
    }
    return og_err_fail(err, OG_E_VALIDATION_FAILED, "channel",
                       "channel must be whatsapp_qr, whatsapp_meta or sms");
}

static json_t *bucket_json(const bucket_t *b, const limit_t *lim, uint64_t now_ns)
{
    return json_pack("{s:s#, s:I, s:I, s:I, s:f, s:o, s:o}", "sender", b->sender, (int)b->sender_len,
                     "accepted", (json_int_t)b->accepted, "acceptedTokens", (json_int_t)b->accepted_tokens,
                     "throttled", (json_int_t)b->throttled, "tokens",
                     round(bucket_tokens(b, lim, now_ns) * 1000) / 1000, "firstAcceptedAt",
                     b->first_ms ? json_integer(b->first_ms) : json_null(), "lastAcceptedAt",
                     b->last_ms ? json_integer(b->last_ms) : json_null());
}

/* A limit as listed: its settings, its totals and its buckets (`buckets`: a new array, taken). */
static json_t *limit_json(const limit_t *lim, json_t *buckets)
{
    uint64_t accepted = 0, tokens = 0, throttled = 0;
    for (size_t i = 0; i < json_array_size(buckets); i++) {
        json_t *b = json_array_get(buckets, i);
        accepted += (uint64_t)json_integer_value(json_object_get(b, "accepted"));
        tokens += (uint64_t)json_integer_value(json_object_get(b, "acceptedTokens"));
        throttled += (uint64_t)json_integer_value(json_object_get(b, "throttled"));
    }
    return json_pack(
        "{s:s, s:o, s:f, s:f, s:I, s:I, s:I, s:I, s:o}", "channel", sim_channel_name(lim->channel), "sender",
        lim->every ? json_null() : json_stringn(lim->sender, lim->sender_len), "perSecond", lim->rate,
        "burst", lim->burst, "accepted", (json_int_t)accepted, "acceptedTokens", (json_int_t)tokens,
        "throttled", (json_int_t)throttled, "overflow", (json_int_t)lim->overflow, "buckets", buckets);
}

/* Limit `li` with its buckets, for the answer to a PUT: a walk of the pool. */
static json_t *limit_json_at(const sim_limits_t *l, uint32_t li)
{
    json_t *buckets = json_array();
    uint64_t now = uv_hrtime();
    for (size_t i = 0; i < l->npool; i++)
        if (l->pool[i].limit == li)
            json_array_append_new(buckets, bucket_json(&l->pool[i], &l->limits[li], now));
    return limit_json(&l->limits[li], buckets);
}

/* PUT /__sim/limits {"channel", "sender"?, "perSecond", "burst"?}: sets the limit of that channel
 * and sender (no sender: every sender), replacing one already set; 201 when new, 200 when it
 * replaced one, whose buckets start again full and with no counts. */
void sim_limits_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"channel", "sender", "perSecond", "burst", NULL};
    sim_t *s = sim_of(ctx);
    sim_limits_t *l = s->limits;
    og_err_t err = {0};
    sim_channel_t ch = SIM_CH_QR;
    const char *sender = NULL;
    double rate = 0, burst = 0;
    json_t *body = og_json_decode_body(req, allowed, &err);
    /* "sender": null is every sender, as GET lists a channel-wide limit. */
    if (body == NULL || !channel_field(body, &ch, &err) ||
        (!json_is_null(json_object_get(body, "sender")) &&
         !og_json_get_string(body, "sender", false, &sender, &err)) ||
        !number_field(body, "perSecond", true, RATE_MIN, RATE_MAX, &rate, &err))
        goto failed;
    size_t len = sender != NULL ? json_string_length(json_object_get(body, "sender")) : 0;
    if (sender != NULL && (len == 0 || len > SIM_SENDER_MAX)) {
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "sender",
                    "sender must be 1 to %d bytes (leave it out for every sender of the channel)",
                    SIM_SENDER_MAX);
        goto failed;
    }
    burst = rate > BURST_MIN ? rate : BURST_MIN;
    if (!number_field(body, "burst", false, BURST_MIN, BURST_MAX, &burst, &err))
        goto failed;

    /* The limit this PUT replaces, if any, and the bucket the sender already has. */
    bucket_t *b = sender != NULL ? bucket_find(l, ch, sender, len) : NULL;
    uint32_t li = sender == NULL ? l->every[ch] : b != NULL && !l->limits[b->limit].every ? b->limit : NONE;
    bool replaced = li != NONE;
    if (!replaced && l->nlimits == LIMITS_MAX) {
        og_err_fail(&err, SIM_E_TOO_MANY_LIMITS, NULL, "at most %d limits; DELETE /__sim/limits first",
                    LIMITS_MAX);
        goto failed;
    }
    if (!replaced && l->nlimits == l->limits_cap) {
        size_t cap = l->limits_cap ? l->limits_cap * 2 : 16;
        limit_t *n = realloc(l->limits, cap * sizeof(*n));
        if (n == NULL)
            goto oom;
        l->limits = n;
        l->limits_cap = cap;
    }
    /* A sender's own limit needs its bucket now; make room before changing anything. */
    if (sender != NULL && b == NULL && !pool_reserve(l))
        goto oom;
    if (!replaced) {
        li = (uint32_t)l->nlimits++;
        l->limits[li] = (limit_t){.channel = ch, .every = sender == NULL, .sender_len = len};
        memcpy(l->limits[li].sender, sender != NULL ? sender : "", len);
    }
    limit_t *lim = &l->limits[li];
    lim->rate = rate;
    lim->burst = burst;
    lim->overflow = 0;
    if (sender == NULL) {
        l->every[ch] = li;
        for (size_t i = 0; i < l->npool; i++)
            if (l->pool[i].limit == li)
                bucket_reset(&l->pool[i], l, li);
    } else if (b == NULL) {
        bucket_add(l, li, ch, sender, len); /* cannot fail: the room was made above */
    } else {
        if (l->limits[b->limit].every)
            l->nevery--; /* a channel-wide bucket becomes the sender's own */
        bucket_reset(b, l, li);
    }
    json_decref(body);
    og_api_reply(req, replaced ? 200 : 201, replaced ? "limit replaced" : "limit set", limit_json_at(l, li),
                 NULL, 0);
    return;

oom:
    og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
failed:
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* GET /__sim/limits: the limits in the order they were first PUT, each with its buckets in the
 * order they were made. */
void sim_limits_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const sim_limits_t *l = sim_of(ctx)->limits;
    json_t **buckets = calloc(l->nlimits + 1, sizeof(*buckets));
    if (buckets == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    for (size_t li = 0; li < l->nlimits; li++)
        buckets[li] = json_array();
    uint64_t now = uv_hrtime();
    for (size_t i = 0; i < l->npool; i++) {
        const bucket_t *b = &l->pool[i];
        json_array_append_new(buckets[b->limit], bucket_json(b, &l->limits[b->limit], now));
    }
    json_t *items = json_array();
    for (size_t li = 0; li < l->nlimits; li++)
        json_array_append_new(items, limit_json(&l->limits[li], buckets[li]));
    free(buckets);
    og_api_reply(req, 200, "limits",
                 json_pack("{s:o, s:I, s:I}", "items", items, "buckets", (json_int_t)l->nevery, "bucketsMax",
                           (json_int_t)BUCKETS_MAX),
                 NULL, 0);
}

/* DELETE /__sim/limits: every limit and bucket is forgotten. */
void sim_limits_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_limits_t *l = sim_of(ctx)->limits;
    size_t n = l->nlimits;
    limits_reset(l);
    og_api_reply(req, 200, "limits cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}
