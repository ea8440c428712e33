/*
 * Unit tests of the send budget (src/product/messaging/budget.c): the one deadline every
 * lease and sweep that waits for sends to end uses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "omnigate/messaging/budget.h"

/* Three writes of twice the database deadline, an attempt per channel, 5 s of slack. */
static void test_budget_counts_writes_attempts_and_slack(void **state)
{
    og_config_t cfg = {.db_timeout_ms = 5000, .attempt_timeout_ms = 10000};
    assert_int_equal(og_send_budget_ms(&cfg, 3), 3 * 2 * 5000 + 3 * 10000 + 5000);
    assert_int_equal(og_send_budget_ms(&cfg, 1), 3 * 2 * 5000 + 10000 + 5000);
    assert_int_equal(og_send_budget_ms(&cfg, 0), 3 * 2 * 5000 + 5000);
    /* A database deadline longer than the attempts (the double send of issue 29) still counts. */
    cfg = (og_config_t){.db_timeout_ms = 10000, .attempt_timeout_ms = 2000};
    assert_int_equal(og_send_budget_ms(&cfg, 1), 60000 + 2000 + 5000);
}

/* The largest settings (600 s each) fit a lease in milliseconds of an int; past that the
 * budget is capped at INT32_MAX rather than wrapped. */
static void test_budget_of_the_largest_settings_fits(void **state)
{
    og_config_t cfg = {.db_timeout_ms = 600000, .attempt_timeout_ms = 600000};
    assert_int_equal(og_send_budget_ms(&cfg, 3), 3 * 2 * 600000 + 3 * 600000 + 5000);
    assert_int_equal(og_send_budget_ms(&cfg, 1000000), INT32_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_counts_writes_attempts_and_slack),
        cmocka_unit_test(test_budget_of_the_largest_settings_fits),
    };
    return cmocka_run_group_tests_name("budget", tests, NULL, NULL);
}
