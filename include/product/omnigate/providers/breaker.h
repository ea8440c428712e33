/*
 * A circuit breaker for one provider channel of one worker (API.md §13). Pure logic on times
 * the caller passes in, so it is tested without a clock or a network.
 *
 * Closed: every attempt goes out. An attempt that ends provider_timeout, provider_unreachable
 * or provider_error counts against the provider; 20 of them in a row, or more than half of at
 * least 20 attempts in the last 10 s, open the circuit. An answer that shows the provider
 * working (sent, a 4xx rejection, a 429) resets the run: those are the recipient's or the
 * tenant's business, not the provider's health.
 * Open: attempts fail at once (provider_unavailable, no network call) for the open period,
 * 5 s at first. Then half-open: one attempt (the probe) goes out and the others still fail
 * at once; a probe the provider answers closes the circuit, a probe that fails reopens it for
 * twice the last period, up to 60 s.
 *
 * Per worker, not shared: each worker learns on its own within its first 20 failed attempts,
 * and needs no coordination on the hot path (docs/providers.md).
 */
#ifndef OMNIGATE_PROVIDERS_BREAKER_H
#define OMNIGATE_PROVIDERS_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#define OG_BREAKER_RUN          20    /* failures in a row that open it */
#define OG_BREAKER_MIN_ATTEMPTS 20    /* ... or over half of at least this many in the window */
#define OG_BREAKER_WINDOW_S     10    /* the window, in 1 s buckets */
#define OG_BREAKER_OPEN_MS      5000  /* first open period */
#define OG_BREAKER_OPEN_MAX_MS  60000 /* the longest */

typedef enum { OG_BREAKER_CLOSED = 0, OG_BREAKER_HALF_OPEN = 1, OG_BREAKER_OPEN = 2 } og_breaker_state_t;

/* How an attempt that went out ended, for the breaker. */
typedef enum {
    OG_BREAKER_HEALTHY, /* the provider answered: sent, rejected (4xx), rate limited */
    OG_BREAKER_FAILED,  /* timeout, unreachable, 5xx or an answer that makes no sense */
} og_breaker_outcome_t;

typedef struct og_breaker {
    og_breaker_state_t state;
    int run;           /* failures in a row */
    uint64_t open_ms;  /* the current open period */
    uint64_t until_ms; /* open: when the probe may go */
    bool probing;      /* half-open: the probe is out */
    struct {
        uint64_t second; /* which second this bucket counts */
        uint32_t total, failed;
    } window[OG_BREAKER_WINDOW_S];
    uint64_t transitions; /* state changes so far */
} og_breaker_t;

void og_breaker_init(og_breaker_t *b);

/* May an attempt go out at now_ms? True: send it, and report how it ended with
 * og_breaker_record, passing back *probe (set when it is the half-open circuit's probe).
 * False: fail it at once with provider_unavailable (nothing to record). */
bool og_breaker_allow(og_breaker_t *b, uint64_t now_ms, bool *probe);

/* How an allowed attempt ended. Attempts that were sent before the circuit opened and end
 * after it count for nothing; only the probe decides a half-open circuit. */
void og_breaker_record(og_breaker_t *b, uint64_t now_ms, bool probe, og_breaker_outcome_t outcome);

/* An allowed attempt was not sent after all: a probe's turn goes to the next attempt. */
void og_breaker_cancel(og_breaker_t *b, bool probe);

#endif
