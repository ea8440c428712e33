/*
 * Token buckets per tenant. See include/product/omnigate/tenants/ratelimit.h.
 */
#include "omnigate/tenants/ratelimit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void og_rl_init(og_rl_t *rl, int workers)
{
    memset(rl, 0, sizeof(*rl));
    rl->workers = workers > 0 ? workers : 1;
}

/* FNV-1a over the tenant id: spreads UUID strings well enough for a 4096-slot table. */
static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static og_rl_bucket_t *find(og_rl_t *rl, const char *tenant, uint64_t now_us, double capacity)
{
    uint32_t h = hash(tenant);
    og_rl_bucket_t *victim = NULL;
    for (int i = 0; i < OG_RL_PROBE; i++) {
        og_rl_bucket_t *b = &rl->b[(h + (uint32_t)i) % OG_RL_SLOTS];
        if (b->tenant[0] != '\0' && strcmp(b->tenant, tenant) == 0)
            return b;
        /* Reuse a free slot, else the least recently used one of the window. */
        if (victim == NULL ||
            (victim->tenant[0] != '\0' && (b->tenant[0] == '\0' || b->last_us < victim->last_us)))
            victim = b;
    }
    snprintf(victim->tenant, sizeof(victim->tenant), "%s", tenant);
    victim->rate = 0;
    victim->tokens = capacity;
    victim->last_us = now_us;
    return victim;
}

og_rl_result_t og_rl_take(og_rl_t *rl, const char *tenant_id, uint32_t rate, uint64_t now_us)
{
    og_rl_result_t r = {.allowed = true};
    if (rate == 0)
        return r;
    double per_worker = (double)rate / rl->workers; /* tokens per second in this worker */
    double capacity = per_worker < 1 ? 1 : per_worker;
    og_rl_bucket_t *b = find(rl, tenant_id, now_us, capacity);
    if (b->rate != rate) { /* new bucket or a changed setting: start full at the new size */
        b->rate = rate;
        b->tokens = capacity;
        b->last_us = now_us;
    }
    if (now_us > b->last_us) {
        b->tokens += per_worker * (double)(now_us - b->last_us) / 1e6;
        if (b->tokens > capacity)
            b->tokens = capacity;
        b->last_us = now_us;
    }
    if (b->tokens >= 1) {
        b->tokens -= 1;
    } else {
        r.allowed = false;
        double wait = (1 - b->tokens) / per_worker;
        r.retry_after_s = (uint32_t)ceil(wait);
        if (r.retry_after_s < 1)
            r.retry_after_s = 1;
    }
    r.limit = rate;
    double rem = floor(b->tokens) * rl->workers;
    r.remaining = rem > rate ? rate : (uint32_t)rem;
    r.reset_s = (uint32_t)ceil((capacity - b->tokens) / per_worker);
    return r;
}

void og_rl_headers(const og_rl_result_t *r, og_http_req_t *req)
{
    if (r->limit == 0)
        return;
    char v[16];
    snprintf(v, sizeof(v), "%u", r->limit);
    og_http_req_add_header(req, "RateLimit-Limit", v);
    snprintf(v, sizeof(v), "%u", r->remaining);
    og_http_req_add_header(req, "RateLimit-Remaining", v);
    snprintf(v, sizeof(v), "%u", r->reset_s);
    og_http_req_add_header(req, "RateLimit-Reset", v);
    if (!r->allowed) {
        snprintf(v, sizeof(v), "%u", r->retry_after_s);
        og_http_req_add_header(req, "Retry-After", v);
    }
}
