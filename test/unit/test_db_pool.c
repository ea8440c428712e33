/*
 * Unit tests of the pool (src/data/db/pool.c): its op queues, and closing it on a real loop
 * with no server (a closed local port).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <uv.h>

#include "db_int.h"
#include "omnigate/log.h"

/* The queue's ops from head to tail, checked against want (n of them), with len and tail. */
static void assert_queue(const opq_t *q, og_db_op_t *const *want, size_t n)
{
    assert_int_equal(q->len, n);
    const og_db_op_t *op = q->head;
    for (size_t i = 0; i < n; i++, op = op->next)
        assert_ptr_equal(op, want[i]);
    assert_null(op);
    assert_ptr_equal(q->tail, n > 0 ? want[n - 1] : NULL);
}

/* First in, first out; a popped op is unlinked; an emptied queue has no head nor tail. */
static void test_push_pop_in_order(void **state)
{
    (void)state;
    og_db_op_t a = {0}, b = {0}, c = {0};
    opq_t q = {0};
    assert_null(db_q_pop(&q));
    assert_int_equal(q.len, 0);
    db_q_push(&q, &a);
    db_q_push(&q, &b);
    db_q_push(&q, &c);
    assert_queue(&q, (og_db_op_t *[]){&a, &b, &c}, 3);
    assert_ptr_equal(db_q_pop(&q), &a);
    assert_null(a.next);
    assert_queue(&q, (og_db_op_t *[]){&b, &c}, 2);
    assert_ptr_equal(db_q_pop(&q), &b);
    assert_ptr_equal(db_q_pop(&q), &c);
    assert_queue(&q, NULL, 0);
    assert_null(q.head);
    assert_null(db_q_pop(&q));
    assert_int_equal(q.len, 0);
}

/* A push ignores whatever the op was linked to before (it may come from a unit). */
static void test_push_unlinks(void **state)
{
    (void)state;
    og_db_op_t a = {0}, b = {0}, stale = {0};
    a.next = &stale;
    opq_t q = {0};
    db_q_push(&q, &a);
    assert_null(a.next);
    db_q_push(&q, &b);
    assert_queue(&q, (og_db_op_t *[]){&a, &b}, 2);
}

/* A failed batch's ops go back in front of the queue, in their own order, ahead of what
 * arrived meanwhile; the queue's tail stays. */
static void test_push_front_keeps_order(void **state)
{
    (void)state;
    og_db_op_t x = {0}, y = {0}, a = {0}, b = {0};
    opq_t q = {0};
    db_q_push(&q, &a);
    x.next = &y;
    db_q_push_front(&q, &x, &y, 2);
    assert_queue(&q, (og_db_op_t *[]){&x, &y, &a}, 3);
    db_q_push(&q, &b);
    assert_queue(&q, (og_db_op_t *[]){&x, &y, &a, &b}, 4);
}

/* Put back on an empty queue, the list's last op becomes the tail: the next push goes after it. */
static void test_push_front_on_empty(void **state)
{
    (void)state;
    og_db_op_t x = {0}, y = {0}, a = {0};
    opq_t q = {0};
    x.next = &y;
    db_q_push_front(&q, &x, &y, 2);
    assert_queue(&q, (og_db_op_t *[]){&x, &y}, 2);
    db_q_push(&q, &a);
    assert_queue(&q, (og_db_op_t *[]){&x, &y, &a}, 3);
}

/* Ops submitted around og_db_close: a before it, b from a's callback, c right after it returns,
 * d from c's callback (the pool closing, its handles not all closed yet). */
enum { OP_A, OP_B, OP_C, OP_D, OP_COUNT };

typedef struct close_run {
    og_db_t *db;
    og_db_op_t ops[OP_COUNT];
    int calls[OP_COUNT];
    og_db_status_t status[OP_COUNT];
    int closed;
    char order[OP_COUNT + 2]; /* each callback's letter as it runs, '.' for closed */
    int norder;
    bool in_submit; /* inside og_db_submit, which must never call back */
} close_run_t;

static void submit(close_run_t *r, int i)
{
    r->in_submit = true;
    og_db_submit(r->db, &r->ops[i]);
    r->in_submit = false;
}

static void on_op_done(og_db_op_t *op, og_db_status_t st)
{
    close_run_t *r = op->arg;
    int i = (int)(op - r->ops);
    assert_false(r->in_submit);
    r->calls[i]++;
    r->status[i] = st;
    if (r->norder < OP_COUNT + 1)
        r->order[r->norder++] = (char)('a' + i);
    if (i == OP_A)
        submit(r, OP_B);
    else if (i == OP_C)
        submit(r, OP_D);
}

static void on_pool_closed(void *arg)
{
    close_run_t *r = arg;
    r->closed++;
    if (r->norder < OP_COUNT + 1)
        r->order[r->norder++] = '.';
}

/* Ends a loop that would otherwise never end (an op whose callback never runs keeps the pool's
 * idle handle active), so that the test fails instead of hanging. Unreferenced: it never keeps
 * the loop alive itself. */
static void on_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* db.h's promise holds while the pool closes: every op's callback runs exactly once, with
 * OG_DB_UNAVAILABLE, from the loop and never from inside og_db_submit, whether the op was
 * submitted before og_db_close, from a callback it runs, after it returned or from a callback
 * run after that; `closed` runs once, after all of them, and the pool leaves no handle behind. */
static void test_close_fails_every_op_before_closed(void **state)
{
    (void)state;
    static const og_db_stmt_t stmts[] = {{.name = "one", .sql = "SELECT 1"}};
    uv_loop_t loop;
    uv_timer_t guard;
    og_log_t log;
    close_run_t r = {0};
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &guard);
    uv_timer_start(&guard, on_guard, 10000, 0);
    uv_unref((uv_handle_t *)&guard);
    og_log_init(&log, OG_LOG_ERROR, false);
    r.db = og_db_new(&loop, &log, "host=127.0.0.1 port=1 connect_timeout=1", 1, 1000, stmts, 1);
    assert_non_null(r.db);
    for (int i = 0; i < OP_COUNT; i++) {
        r.ops[i].nstmts = 1;
        r.ops[i].write = i % 2 == 1;
        r.ops[i].done = on_op_done;
        r.ops[i].arg = &r;
    }

    submit(&r, OP_A);
    og_db_close(r.db, on_pool_closed, &r);
    submit(&r, OP_C);
    assert_int_equal(r.closed, 0);
    int alive = uv_run(&loop, UV_RUN_DEFAULT);

    for (int i = 0; i < OP_COUNT; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_int_equal(r.status[i], OG_DB_UNAVAILABLE);
        assert_string_equal(r.ops[i].error, "database unavailable");
    }
    assert_int_equal(r.closed, 1);
    assert_string_equal(r.order, "abcd.");
    assert_int_equal(alive, 0); /* the loop ended by itself, not by the guard */
    uv_close((uv_handle_t *)&guard, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_pop_in_order),
        cmocka_unit_test(test_push_unlinks),
        cmocka_unit_test(test_push_front_keeps_order),
        cmocka_unit_test(test_push_front_on_empty),
        cmocka_unit_test(test_close_fails_every_op_before_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
