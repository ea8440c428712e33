/*
 * Unit tests of the per-tenant token buckets (src/product/ratelimit.c), on a simulated clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/tenants/ratelimit.h"

#define T0 UINT64_C(1000000000)

static int admitted(og_rl_t *rl, const char *tenant, uint32_t rate, uint64_t now_us, int tries)
{
    int n = 0;
    for (int i = 0; i < tries; i++)
        n += og_rl_take(rl, tenant, rate, now_us).allowed;
    return n;
}

/* One worker, rate 10: a burst of 10 passes, the 11th is refused with Retry-After 1. */
static void test_burst_is_one_second(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 1);
    assert_int_equal(admitted(rl, "t1", 10, T0, 10), 10);
    og_rl_result_t r = og_rl_take(rl, "t1", 10, T0);
    assert_false(r.allowed);
    assert_int_equal(r.retry_after_s, 1);
    assert_int_equal(r.limit, 10);
    assert_int_equal(r.remaining, 0);
    free(rl);
}

/* Refill is continuous: 100 ms later one token (rate 10) is back, not more. */
static void test_refill(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 1);
    assert_int_equal(admitted(rl, "t1", 10, T0, 10), 10);
    assert_int_equal(admitted(rl, "t1", 10, T0 + 100000, 5), 1);
    /* Over 10 s at a steady pace exactly rate x time (+ the initial burst) is admitted. */
    int n = 0;
    for (uint64_t t = T0 + 100000; t < T0 + 10100000; t += 10000)
        n += og_rl_take(rl, "t1", 10, t).allowed;
    assert_in_range(n, 99, 101);
    free(rl);
}

/* Four workers share an instance-wide rate of 100: each admits 25 a second, so the four
 * together admit the tenant's rate; Remaining is reported instance-wide. */
static void test_rate_split_over_workers(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 4);
    og_rl_result_t r = og_rl_take(rl, "t1", 100, T0);
    assert_true(r.allowed);
    assert_int_equal(r.limit, 100);
    assert_int_equal(r.remaining, 96); /* 24 tokens left here, x 4 workers */
    assert_int_equal(admitted(rl, "t1", 100, T0, 30), 24);
    free(rl);
}

/* Tenants are independent; rate 0 means unlimited and reports nothing. */
static void test_tenants_independent_and_unlimited(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 1);
    assert_int_equal(admitted(rl, "a", 2, T0, 5), 2);
    assert_int_equal(admitted(rl, "b", 2, T0, 5), 2);
    og_rl_result_t r = og_rl_take(rl, "c", 0, T0);
    assert_true(r.allowed);
    assert_int_equal(r.limit, 0);
    free(rl);
}

/* A changed rate resizes the bucket at once (starting full at the new size). */
static void test_rate_change(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 1);
    assert_int_equal(admitted(rl, "t", 1, T0, 3), 1);
    assert_int_equal(admitted(rl, "t", 5, T0, 10), 5);
    free(rl);
}

/* More tenants than the table holds: nothing breaks, memory stays bounded, and a tenant in
 * active use keeps its bucket (least recently used eviction within the probe window). */
static void test_many_tenants_bounded(void **state)
{
    og_rl_t *rl = malloc(sizeof(*rl));
    og_rl_init(rl, 1);
    char id[40];
    for (int i = 0; i < 3 * OG_RL_SLOTS; i++) {
        snprintf(id, sizeof(id), "tenant-%d", i);
        assert_true(og_rl_take(rl, id, 5, T0 + (uint64_t)i).allowed);
        assert_int_equal(admitted(rl, "hot", 1000000, T0 + (uint64_t)i, 1), 1);
    }
    free(rl);
}

/* Headers: Limit, Remaining, Reset; Retry-After only when refused. */
static void test_headers(void **state)
{
    og_http_req_t req;
    memset(&req, 0, sizeof(req));
    og_rl_result_t r = {.allowed = false, .limit = 50, .remaining = 0, .reset_s = 1, .retry_after_s = 1};
    og_rl_headers(&r, &req);
    assert_int_equal(req.resp_hdrs_len, strlen(req.resp_hdrs));
    assert_string_equal(req.resp_hdrs,
                        "RateLimit-Limit: 50\r\nRateLimit-Remaining: 0\r\nRateLimit-Reset: 1\r\n"
                        "Retry-After: 1\r\n");
    free(req.resp_hdrs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_is_one_second),
        cmocka_unit_test(test_refill),
        cmocka_unit_test(test_rate_split_over_workers),
        cmocka_unit_test(test_tenants_independent_and_unlimited),
        cmocka_unit_test(test_rate_change),
        cmocka_unit_test(test_many_tenants_bounded),
        cmocka_unit_test(test_headers),
    };
    return cmocka_run_group_tests_name("ratelimit", tests, NULL, NULL);
}
