/*
 * Per-tenant rate limit (API.md §7): a token bucket per tenant in each worker. The tenant's
 * `rateLimitPerSecond` holds for the instance: each of W workers refills at rate/W tokens a
 * second and holds at most one second of them (burst = rate/W, at least 1), so the instance
 * admits `rate` per second however the kernel spreads connections over workers. The limit is
 * per instance; N instances behind a load balancer admit N x rate (docs/operations.md).
 * Buckets live in a fixed table (bounded memory): a tenant whose bucket was evicted starts
 * again with a full one. Responsible for the arithmetic and the RateLimit-* headers; not for
 * answering (tenants/auth.c does).
 */
#ifndef OMNIGATE_TENANTS_RATELIMIT_H
#define OMNIGATE_TENANTS_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "omnigate/http.h"

#define OG_RL_SLOTS 4096 /* buckets per worker */
#define OG_RL_PROBE 8    /* slots searched per tenant (open addressing) */

typedef struct og_rl_bucket {
    char tenant[37]; /* "" when free */
    uint32_t rate;   /* the rate the bucket was sized for (settings may change) */
    double tokens;
    uint64_t last_us; /* last refill */
} og_rl_bucket_t;

typedef struct og_rl {
    int workers;
    og_rl_bucket_t b[OG_RL_SLOTS];
} og_rl_t;

typedef struct og_rl_result {
    bool allowed;
    uint32_t limit;         /* RateLimit-Limit: the instance-wide rate */
    uint32_t remaining;     /* RateLimit-Remaining: this worker's tokens x workers */
    uint32_t reset_s;       /* RateLimit-Reset: seconds until the bucket is full again */
    uint32_t retry_after_s; /* when refused: seconds until a token is available (>= 1) */
} og_rl_result_t;

/* Empties every bucket of a worker of an instance of `workers` worker processes (each refills at
 * rate/workers). */
void og_rl_init(og_rl_t *rl, int workers);

/* Takes one token from the tenant's bucket at time now_us (monotonic). rate 0: unlimited,
 * always allowed, nothing to report (og_rl_headers adds no header). */
og_rl_result_t og_rl_take(og_rl_t *rl, const char *tenant_id, uint32_t rate, uint64_t now_us);

/* Adds RateLimit-Limit/-Remaining/-Reset (and Retry-After when refused) to the response of
 * `req`. Does nothing for an unlimited tenant. */
void og_rl_headers(const og_rl_result_t *r, og_http_req_t *req);

#endif
