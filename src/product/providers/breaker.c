/*
 * The circuit breaker. See include/product/omnigate/providers/breaker.h.
 */
#include "omnigate/providers/breaker.h"

#include <string.h>

static void set_state(og_breaker_t *b, og_breaker_state_t s)
{
    if (b->state != s)
        b->transitions++;
    b->state = s;
}

static void open_for(og_breaker_t *b, uint64_t now_ms, uint64_t period_ms)
{
    b->open_ms = period_ms > OG_BREAKER_OPEN_MAX_MS ? OG_BREAKER_OPEN_MAX_MS : period_ms;
    b->until_ms = now_ms + b->open_ms;
    b->probing = false;
    set_state(b, OG_BREAKER_OPEN);
}

void og_breaker_init(og_breaker_t *b)
{
    memset(b, 0, sizeof(*b));
    b->open_ms = OG_BREAKER_OPEN_MS;
}

bool og_breaker_allow(og_breaker_t *b, uint64_t now_ms, bool *probe)
{
    *probe = false;
    if (b->state == OG_BREAKER_CLOSED)
        return true;
    if (b->state == OG_BREAKER_OPEN && now_ms < b->until_ms)
        return false;
    if (b->state == OG_BREAKER_HALF_OPEN && b->probing)
        return false;
    set_state(b, OG_BREAKER_HALF_OPEN);
    b->probing = *probe = true;
    return true;
}

/* Counts the attempt in the window's bucket of its second; returns the window's totals. */
static void count(og_breaker_t *b, uint64_t now_ms, bool failed, uint32_t *total, uint32_t *nfailed)
{
    uint64_t sec = now_ms / 1000;
    int i = (int)(sec % OG_BREAKER_WINDOW_S);
    if (b->window[i].second != sec) {
        b->window[i].second = sec;
        b->window[i].total = b->window[i].failed = 0;
    }
    b->window[i].total++;
    b->window[i].failed += failed;
    *total = *nfailed = 0;
    for (int k = 0; k < OG_BREAKER_WINDOW_S; k++) {
        if (sec - b->window[k].second < OG_BREAKER_WINDOW_S) {
            *total += b->window[k].total;
            *nfailed += b->window[k].failed;
        }
    }
}

void og_breaker_cancel(og_breaker_t *b, bool probe)
{
    if (probe && b->state == OG_BREAKER_HALF_OPEN)
        b->probing = false;
}

void og_breaker_record(og_breaker_t *b, uint64_t now_ms, bool probe, og_breaker_outcome_t outcome)
{
    bool failed = outcome == OG_BREAKER_FAILED;
    if (b->state != OG_BREAKER_CLOSED) {
        /* Only the probe's answer decides; attempts sent before the circuit opened may still
         * be ending, and count for nothing now. */
        if (!probe || b->state != OG_BREAKER_HALF_OPEN)
            return;
        b->probing = false;
        if (failed) {
            open_for(b, now_ms, b->open_ms * 2);
        } else {
            memset(b->window, 0, sizeof(b->window));
            b->run = 0;
            b->open_ms = OG_BREAKER_OPEN_MS;
            set_state(b, OG_BREAKER_CLOSED);
        }
        return;
    }
    uint32_t total, nfailed;
    count(b, now_ms, failed, &total, &nfailed);
    b->run = failed ? b->run + 1 : 0;
    if (b->run >= OG_BREAKER_RUN || (total >= OG_BREAKER_MIN_ATTEMPTS && 2 * nfailed > total))
        open_for(b, now_ms, OG_BREAKER_OPEN_MS);
}
