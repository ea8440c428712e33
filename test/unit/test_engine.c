/* Unit tests of the delivery engine (engine.c) with a fake starter: which attempts run, in
 * which order, and who wins, for fallback and all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "omnigate/messaging/engine.h"

typedef struct fake {
    og_engine_t e;
    bool outcome[OG_ENGINE_MAX]; /* what attempt i will report */
    bool sync;                   /* complete inside start() */
    int starts[OG_ENGINE_MAX];   /* start order */
    int nstarts;
    int pending[OG_ENGINE_MAX]; /* started, not yet completed (deferred mode) */
    int npending;
    int done_calls;
} fake_t;

static void fake_start(og_engine_t *e, int i)
{
    fake_t *f = e->arg;
    f->starts[f->nstarts++] = i;
    if (f->sync)
        og_engine_attempt_done(e, i, f->outcome[i]);
    else
        f->pending[f->npending++] = i;
}

static void fake_done(og_engine_t *e)
{
    fake_t *f = e->arg;
    f->done_calls++;
}

static void setup(fake_t *f, int n, bool all, bool sync, bool o0, bool o1, bool o2)
{
    *f = (fake_t){0};
    f->e = (og_engine_t){.n = n, .all = all, .start = fake_start, .done = fake_done, .arg = f};
    f->outcome[0] = o0;
    f->outcome[1] = o1;
    f->outcome[2] = o2;
    f->sync = sync;
}

/* Completes the pending attempt at position k of the pending list. */
static void complete(fake_t *f, int k)
{
    int i = f->pending[k];
    for (int j = k; j < f->npending - 1; j++)
        f->pending[j] = f->pending[j + 1];
    f->npending--;
    og_engine_attempt_done(&f->e, i, f->outcome[i]);
}

/* fallback: the first channel succeeds, nothing after it is attempted */
static void fallback_first_success_stops(void **state)
{
    fake_t f;
    setup(&f, 3, false, false, true, true, true);
    og_engine_run(&f.e);
    assert_int_equal(f.nstarts, 1);
    assert_int_equal(f.done_calls, 0);
    complete(&f, 0);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, 0);
    assert_int_equal(f.e.started, 1);
    assert_int_equal(f.nstarts, 1);
}

/* fallback: attempts run one at a time, in order, until the third succeeds */
static void fallback_chains_in_order(void **state)
{
    fake_t f;
    setup(&f, 3, false, false, false, false, true);
    og_engine_run(&f.e);
    assert_int_equal(f.npending, 1);
    complete(&f, 0);
    assert_int_equal(f.npending, 1); /* never two at once */
    assert_int_equal(f.pending[0], 1);
    complete(&f, 0);
    assert_int_equal(f.pending[0], 2);
    complete(&f, 0);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, 2);
    assert_int_equal(f.starts[0], 0);
    assert_int_equal(f.starts[1], 1);
    assert_int_equal(f.starts[2], 2);
}

/* fallback: every attempt fails -> no winner, all were tried */
static void fallback_all_fail(void **state)
{
    fake_t f;
    setup(&f, 3, false, true, false, false, false);
    og_engine_run(&f.e);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, -1);
    assert_int_equal(f.e.started, 3);
    assert_int_equal(f.e.completed, 3);
}

/* fallback with synchronous completions (e.g. not_configured) still chains correctly */
static void fallback_sync_second_wins(void **state)
{
    fake_t f;
    setup(&f, 3, false, true, false, true, true);
    og_engine_run(&f.e);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, 1);
    assert_int_equal(f.nstarts, 2);
}

/* all: every attempt starts before any completes; the run ends after the last */
static void all_starts_everything_at_once(void **state)
{
    fake_t f;
    setup(&f, 3, true, false, true, true, true);
    og_engine_run(&f.e);
    assert_int_equal(f.nstarts, 3);
    assert_int_equal(f.npending, 3);
    complete(&f, 2); /* attempt 2 first */
    complete(&f, 0); /* attempt 0 */
    assert_int_equal(f.done_calls, 0);
    complete(&f, 0); /* attempt 1 */
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, 2); /* first to succeed in time, not first in order */
    assert_int_equal(f.e.order[0], 2);
}

/* all: failures do not stop the others; winner is the first success */
static void all_mixed(void **state)
{
    fake_t f;
    setup(&f, 3, true, false, false, true, false);
    og_engine_run(&f.e);
    complete(&f, 0);
    complete(&f, 0);
    complete(&f, 0);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, 1);
    assert_false(f.e.ok[0]);
    assert_true(f.e.ok[1]);
}

/* all: synchronous completions do not end the run before every attempt has started */
static void all_sync(void **state)
{
    fake_t f;
    setup(&f, 3, true, true, false, false, false);
    og_engine_run(&f.e);
    assert_int_equal(f.nstarts, 3);
    assert_int_equal(f.done_calls, 1);
    assert_int_equal(f.e.winner, -1);
}

/* a single channel behaves the same in both modes */
static void single_attempt(void **state)
{
    for (int all = 0; all < 2; all++) {
        fake_t f;
        setup(&f, 1, all, false, true, false, false);
        og_engine_run(&f.e);
        complete(&f, 0);
        assert_int_equal(f.done_calls, 1);
        assert_int_equal(f.e.winner, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fallback_first_success_stops),
        cmocka_unit_test(fallback_chains_in_order),
        cmocka_unit_test(fallback_all_fail),
        cmocka_unit_test(fallback_sync_second_wins),
        cmocka_unit_test(all_starts_everything_at_once),
        cmocka_unit_test(all_mixed),
        cmocka_unit_test(all_sync),
        cmocka_unit_test(single_attempt),
    };
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
