/*
 * Unit tests of the circuit breaker (src/product/providers/breaker.c, API.md §13), on a
 * simulated clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "omnigate/providers/breaker.h"

#define T0 UINT64_C(1000000)

/* n allowed attempts at `now`, each ending `outcome`; returns how many were allowed. */
static int run(og_breaker_t *b, uint64_t now, int n, og_breaker_outcome_t outcome)
{
    int allowed = 0;
    for (int i = 0; i < n; i++) {
        bool probe;
        if (og_breaker_allow(b, now, &probe)) {
            allowed++;
            og_breaker_record(b, now, probe, outcome);
        }
    }
    return allowed;
}

/* 19 failures in a row keep it closed; the 20th opens it; then nothing goes out. */
static void test_twenty_in_a_row_open(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    assert_int_equal(run(&b, T0, 19, OG_BREAKER_FAILED), 19);
    assert_int_equal(b.state, OG_BREAKER_CLOSED);
    assert_int_equal(run(&b, T0, 1, OG_BREAKER_FAILED), 1);
    assert_int_equal(b.state, OG_BREAKER_OPEN);
    assert_int_equal(run(&b, T0 + 4999, 5, OG_BREAKER_FAILED), 0);
    assert_int_equal(b.transitions, 1);
}

/* A healthy answer (sent, a 4xx, a 429) breaks the run. */
static void test_healthy_answer_resets_the_run(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    /* Enough healthy attempts first that the window rule (over half of >= 20 in 10 s) cannot
     * fire: 40 healthy, 19 failed, 1 healthy, 19 failed is 38 of 79. Without the reset it
     * would be 38 failures in a row. */
    run(&b, T0, 40, OG_BREAKER_HEALTHY);
    run(&b, T0, 19, OG_BREAKER_FAILED);
    run(&b, T0, 1, OG_BREAKER_HEALTHY);
    run(&b, T0, 19, OG_BREAKER_FAILED);
    assert_int_equal(b.state, OG_BREAKER_CLOSED);
    assert_int_equal(b.run, 19);
}

/* More than half of at least 20 attempts within 10 s open it, without a run of 20. */
static void test_half_of_the_window_opens(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    for (int i = 0; i < 9; i++) { /* 9 s: 2 failed, 1 healthy each */
        run(&b, T0 + (uint64_t)i * 1000, 2, OG_BREAKER_FAILED);
        run(&b, T0 + (uint64_t)i * 1000, 1, OG_BREAKER_HEALTHY);
    }
    assert_int_equal(b.state, OG_BREAKER_OPEN); /* at 21 attempts, 14 failed */
    og_breaker_t c;
    og_breaker_init(&c);
    for (int i = 0; i < 30; i++) { /* never over half: stays closed */
        run(&c, T0 + (uint64_t)i * 300, 1, OG_BREAKER_HEALTHY);
        run(&c, T0 + (uint64_t)i * 300, 1, OG_BREAKER_FAILED);
    }
    assert_int_equal(c.state, OG_BREAKER_CLOSED);
    og_breaker_t d;
    og_breaker_init(&d);
    for (int i = 0; i < 30; i++) /* failures spread thinner than the window: closed */
        run(&d, T0 + (uint64_t)i * 2000, 1, (i % 3) ? OG_BREAKER_FAILED : OG_BREAKER_HEALTHY);
    assert_int_equal(d.state, OG_BREAKER_CLOSED);
}

/* After the open period exactly one probe goes; its success closes the circuit. */
static void test_one_probe_then_closed(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    run(&b, T0, 20, OG_BREAKER_FAILED);
    bool probe, other;
    assert_true(og_breaker_allow(&b, T0 + 5000, &probe));
    assert_true(probe);
    assert_int_equal(b.state, OG_BREAKER_HALF_OPEN);
    assert_false(og_breaker_allow(&b, T0 + 5001, &other));
    assert_false(og_breaker_allow(&b, T0 + 9000, &other));
    og_breaker_record(&b, T0 + 5100, probe, OG_BREAKER_HEALTHY);
    assert_int_equal(b.state, OG_BREAKER_CLOSED);
    assert_int_equal(run(&b, T0 + 5200, 19, OG_BREAKER_FAILED), 19); /* a fresh run */
    assert_int_equal(b.state, OG_BREAKER_CLOSED);
}

/* A failed probe reopens for twice as long, doubling up to 60 s; the first period after a
 * close is 5 s again. */
static void test_failed_probe_doubles(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    run(&b, T0, 20, OG_BREAKER_FAILED);
    uint64_t now = T0, period = 5000;
    uint64_t expect[] = {10000, 20000, 40000, 60000, 60000};
    for (int i = 0; i < 5; i++) {
        bool probe;
        assert_false(og_breaker_allow(&b, now + period - 1, &probe));
        now += period;
        assert_true(og_breaker_allow(&b, now, &probe));
        og_breaker_record(&b, now, probe, OG_BREAKER_FAILED);
        assert_int_equal(b.state, OG_BREAKER_OPEN);
        period = expect[i];
        assert_int_equal(b.open_ms, period);
    }
    bool probe;
    now += period;
    assert_true(og_breaker_allow(&b, now, &probe));
    og_breaker_record(&b, now, probe, OG_BREAKER_HEALTHY);
    run(&b, now, 20, OG_BREAKER_FAILED);
    assert_int_equal(b.open_ms, 5000);
}

/* Attempts sent before it opened and ending after count for nothing; a cancelled probe
 * passes its turn on. */
static void test_stragglers_and_cancel(void **state)
{
    (void)state;
    og_breaker_t b;
    og_breaker_init(&b);
    bool late;
    assert_true(og_breaker_allow(&b, T0, &late)); /* out before the circuit opens */
    run(&b, T0, 20, OG_BREAKER_FAILED);
    og_breaker_record(&b, T0 + 10, late, OG_BREAKER_HEALTHY);
    assert_int_equal(b.state, OG_BREAKER_OPEN);
    bool probe, next;
    assert_true(og_breaker_allow(&b, T0 + 5000, &probe));
    og_breaker_record(&b, T0 + 5001, late, OG_BREAKER_HEALTHY); /* not the probe */
    assert_int_equal(b.state, OG_BREAKER_HALF_OPEN);
    og_breaker_cancel(&b, probe);
    assert_true(og_breaker_allow(&b, T0 + 5002, &next));
    assert_true(next);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_twenty_in_a_row_open),     cmocka_unit_test(test_healthy_answer_resets_the_run),
        cmocka_unit_test(test_half_of_the_window_opens), cmocka_unit_test(test_one_probe_then_closed),
        cmocka_unit_test(test_failed_probe_doubles),     cmocka_unit_test(test_stragglers_and_cancel),
    };
    return cmocka_run_group_tests_name("breaker", tests, NULL, NULL);
}
