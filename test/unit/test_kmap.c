/*
 * The three-word key map (src/base/kmap.c): against a plain array of the same entries, through
 * puts, overwrites, deletions (each backward shift), growth and a filter; keys chosen to collide
 * in their low bits, so clusters wrap round the table's end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "omnigate/kmap.h"

#define N 3000

static og_kmap_key_t key(uint64_t i)
{
    return (og_kmap_key_t){{i % 7, i / 7, i * 1000003ULL}};
}

static bool keep_even(void *arg, const og_kmap_key_t *k, uint64_t v)
{
    (void)arg;
    (void)k;
    return v % 2 == 0;
}

static void test_against_array(void **state)
{
    static uint64_t want[N];
    og_kmap_t m = OG_KMAP_INIT;
    uint64_t seed = 42;
    for (int round = 0; round < 200000; round++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t i = (seed >> 33) % N;
        uint64_t v = (seed >> 20) % 4 == 0 ? 0 : (seed >> 40) + 1; /* a quarter are deletions */
        og_kmap_key_t k = key(i);
        assert_true(og_kmap_put(&m, &k, v));
        want[i] = v;
        if (round % 997 == 0) {
            size_t n = 0;
            for (uint64_t j = 0; j < N; j++) {
                og_kmap_key_t kj = key(j);
                assert_int_equal(og_kmap_get(&m, &kj), want[j]);
                n += want[j] != 0;
            }
            assert_int_equal(m.n, n);
            assert_true(2 * m.n <= m.cap);
        }
    }
    og_kmap_filter(&m, keep_even, NULL);
    size_t n = 0;
    for (uint64_t j = 0; j < N; j++) {
        og_kmap_key_t kj = key(j);
        uint64_t expect = want[j] % 2 == 0 ? want[j] : 0;
        assert_int_equal(og_kmap_get(&m, &kj), expect);
        n += expect != 0;
    }
    assert_int_equal(m.n, n);
    og_kmap_clear(&m);
    og_kmap_key_t k0 = key(0);
    assert_int_equal(og_kmap_get(&m, &k0), 0);
    assert_true(og_kmap_put(&m, &k0, 0)); /* deleting from an empty map */
    assert_int_equal(m.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
