/*
 * Unit tests of the pool (src/data/db/pool.c): its op queues. No server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "db_int.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_pop_in_order),
        cmocka_unit_test(test_push_unlinks),
        cmocka_unit_test(test_push_front_keeps_order),
        cmocka_unit_test(test_push_front_on_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
