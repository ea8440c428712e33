/*
 * Unit tests of message references and CSPRNG bytes (src/base/ids.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/ids.h"

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/* og_ids_reference takes microseconds; most tests speak of the start of a millisecond. */
#define US(ms) ((uint64_t)(ms)*1000)

/* A reference is "kf_" + 26 Crockford characters, 29 in all, and passes its own check. */
static void test_reference_format(void **state)
{
    char ref[OG_IDS_REFERENCE_SIZE];
    og_ids_reference(ref, US(UINT64_C(1764000000123)));
    assert_int_equal(strlen(ref), 29);
    assert_memory_equal(ref, "kf_", 3);
    for (int i = 3; i < 29; i++)
        assert_non_null(strchr(crockford, ref[i]));
    assert_true(og_ids_reference_valid(ref));
}

/* The time part is the ULID encoding: the ULID spec's example time 1469918176385 is
 * "01ARYZ6S41"; 0 and 2^48-1 are the extremes. */
static void test_reference_time_known_answers(void **state)
{
    char ref[OG_IDS_REFERENCE_SIZE];
    og_ids_reference(ref, US(UINT64_C(1469918176385)));
    assert_memory_equal(ref, "kf_01ARYZ6S41", 13);
    og_ids_reference(ref, US(0));
    assert_memory_equal(ref, "kf_0000000000", 13);
    og_ids_reference(ref, US((UINT64_C(1) << 48) - 1));
    assert_memory_equal(ref, "kf_7ZZZZZZZZZ", 13);
}

/* Times beyond 48 bits wrap (modulo 2^48) instead of spilling into the random part. */
static void test_reference_time_wraps_at_48_bits(void **state)
{
    char ref[OG_IDS_REFERENCE_SIZE];
    uint64_t ms = 0;
    og_ids_reference(ref, US((UINT64_C(1) << 48) + 5));
    assert_memory_equal(ref, "kf_0000000005", 13);
    assert_true(og_ids_reference_time(ref, &ms));
    assert_int_equal(ms, 5);
}

/* og_ids_reference_time reads back the time a reference was made at. */
static void test_reference_time_round_trip(void **state)
{
    const uint64_t times[] = {0, 1, 31, 32, 1764000000123, (UINT64_C(1) << 48) - 1};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        char ref[OG_IDS_REFERENCE_SIZE];
        uint64_t ms = 42;
        og_ids_reference(ref, US(times[i]));
        assert_true(og_ids_reference_time(ref, &ms));
        assert_int_equal(ms, times[i]);
    }
    uint64_t ms = 42;
    assert_false(og_ids_reference_time("kf_bad", &ms));
    assert_int_equal(ms, 42);
}

/* A reference of a later millisecond sorts after one of an earlier millisecond, whatever the
 * random parts, including across a character boundary (31 -> 32 ms) and a year's span. */
static void test_reference_orders_by_time(void **state)
{
    const uint64_t base[] = {0, 31, 1764000000123, (UINT64_C(1) << 48) - 2};
    for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++) {
        for (int i = 0; i < 1000; i++) {
            char a[OG_IDS_REFERENCE_SIZE], z[OG_IDS_REFERENCE_SIZE];
            og_ids_reference(a, US(base[b]));
            og_ids_reference(z, US(base[b] + 1));
            assert_true(strcmp(a, z) < 0);
        }
    }
    char a[OG_IDS_REFERENCE_SIZE], z[OG_IDS_REFERENCE_SIZE];
    og_ids_reference(a, US(UINT64_C(1764000000123)));
    og_ids_reference(z, US(UINT64_C(1764000000123) + UINT64_C(365) * 86400000));
    assert_true(strcmp(a, z) < 0);
}

/* Within one millisecond references sort by microsecond (issue: sends made one after another
 * in the same millisecond listed out of order), across the 5-bit character boundary (31 -> 32)
 * and the millisecond's end (999 -> the next millisecond's 0); the millisecond reads back
 * whatever the microsecond, and the floor of a millisecond is at or before its microsecond 0. */
static void test_reference_orders_by_microsecond(void **state)
{
    const uint64_t ms = UINT64_C(1764000000123);
    const unsigned pairs[][2] = {{0, 1}, {31, 32}, {500, 501}, {998, 999}, {999, 1000}};
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        for (int i = 0; i < 1000; i++) {
            char a[OG_IDS_REFERENCE_SIZE], z[OG_IDS_REFERENCE_SIZE];
            og_ids_reference(a, US(ms) + pairs[p][0]);
            og_ids_reference(z, US(ms) + pairs[p][1]);
            assert_true(strcmp(a, z) < 0);
        }
    }
    char ref[OG_IDS_REFERENCE_SIZE], floor[OG_IDS_REFERENCE_SIZE];
    uint64_t t = 0;
    og_ids_reference(ref, US(ms) + 999);
    assert_true(og_ids_reference_valid(ref));
    assert_true(og_ids_reference_time(ref, &t));
    assert_true(t == ms);
    assert_memory_equal(ref + 13, "Z7", 2); /* 999 = 31 * 32 + 7 */
    og_ids_reference_floor(floor, ms + 1);
    assert_true(strcmp(ref, floor) < 0);
    og_ids_reference(ref, US(ms));
    assert_memory_equal(ref + 13, "00", 2);
    og_ids_reference_floor(floor, ms);
    assert_true(strcmp(ref, floor) >= 0);
}

static int cmp_ref(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* 100 000 references made in the same microsecond are all distinct (70 random bits). */
static void test_reference_unique(void **state)
{
    enum { N = 100000 };
    char(*refs)[OG_IDS_REFERENCE_SIZE] = malloc(N * sizeof(*refs));
    assert_non_null(refs);
    for (int i = 0; i < N; i++)
        og_ids_reference(refs[i], US(UINT64_C(1764000000123)));
    qsort(refs, N, sizeof(*refs), cmp_ref);
    for (int i = 1; i < N; i++)
        assert_true(strcmp(refs[i - 1], refs[i]) < 0);
    free(refs);
}

/* References from a pool (og_ids_reference_in): valid, all distinct over many refills of it
 * (100 000 references, 56 per refill), each byte of the pool used once (wiped as it is taken),
 * and still in time order. */
static void test_reference_pool(void **state)
{
    enum { N = 100000 };
    og_ids_pool_t pool = {0};
    char(*refs)[OG_IDS_REFERENCE_SIZE] = malloc(N * sizeof(*refs));
    assert_non_null(refs);
    for (int i = 0; i < N; i++) {
        og_ids_reference_in(refs[i], US(UINT64_C(1764000000123)), &pool);
        assert_true(og_ids_reference_valid(refs[i]));
        assert_true(pool.left % 9 == 0 && pool.left < sizeof(pool.buf));
        for (size_t k = pool.left; k < sizeof(pool.buf); k++)
            assert_int_equal(pool.buf[k], 0);
    }
    qsort(refs, N, sizeof(*refs), cmp_ref);
    for (int i = 1; i < N; i++)
        assert_true(strcmp(refs[i - 1], refs[i]) < 0);
    char a[OG_IDS_REFERENCE_SIZE], z[OG_IDS_REFERENCE_SIZE];
    og_ids_reference_in(a, US(UINT64_C(1764000000123)), &pool);
    og_ids_reference_in(z, US(UINT64_C(1764000000123)) + 1, &pool);
    assert_true(strcmp(a, z) < 0);
    free(refs);
}

/* The random part uses exactly the 32 Crockford characters: all of them appear over many
 * draws, and I, L, O, U and lower case never do. */
static void test_reference_crockford_alphabet(void **state)
{
    int seen[256] = {0};
    for (int i = 0; i < 2000; i++) {
        char ref[OG_IDS_REFERENCE_SIZE];
        og_ids_reference(ref, US(UINT64_C(1764000000123)));
        for (int k = 13; k < 29; k++)
            seen[(unsigned char)ref[k]]++;
    }
    for (int c = 0; c < 256; c++) {
        if (c != 0 && strchr(crockford, c) != NULL)
            assert_true(seen[c] > 0);
        else
            assert_int_equal(seen[c], 0);
    }
}

/* The check accepts only the canonical form. */
static void test_reference_valid_rejects(void **state)
{
    assert_true(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAV"));
    assert_true(og_ids_reference_valid("kf_7ZZZZZZZZZZZZZZZZZZZZZZZZZ"));
    assert_false(og_ids_reference_valid(NULL));
    assert_false(og_ids_reference_valid(""));
    assert_false(og_ids_reference_valid("kf_"));
    assert_false(og_ids_reference_valid("01ARYZ6S41TSV4RRFFQ69G5FAV"));     /* no prefix */
    assert_false(og_ids_reference_valid("KF_01ARYZ6S41TSV4RRFFQ69G5FAV"));  /* prefix case */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FA"));   /* 25 characters */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAVV")); /* 27 characters */
    assert_false(og_ids_reference_valid("kf_01aryz6s41tsv4rrffq69g5fav"));  /* lower case */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAI"));  /* I */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAL"));  /* L */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAO"));  /* O */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FAU"));  /* U */
    assert_false(og_ids_reference_valid("kf_81ARYZ6S41TSV4RRFFQ69G5FAV"));  /* > 130 bits */
    assert_false(og_ids_reference_valid("kf_01ARYZ6S41TSV4RRFFQ69G5FA-"));
}

/* A batch id (API.md §20) is "kb_" and a reference's 26 characters: valid as a batch id only,
 * ordered by time as references are. */
static void test_batch_id(void **state)
{
    (void)state;
    char a[OG_IDS_REFERENCE_SIZE], b[OG_IDS_REFERENCE_SIZE];
    og_ids_batch(a, UINT64_C(1700000000000000));
    og_ids_batch(b, UINT64_C(1700000000001000));
    assert_int_equal(strlen(a), OG_IDS_REFERENCE_LEN);
    assert_memory_equal(a, "kb_", 3);
    assert_true(og_ids_batch_valid(a));
    assert_false(og_ids_reference_valid(a));
    assert_true(strcmp(a, b) < 0);
    char ref[OG_IDS_REFERENCE_SIZE];
    og_ids_reference(ref, UINT64_C(1700000000000000));
    assert_false(og_ids_batch_valid(ref));
    assert_false(og_ids_batch_valid(NULL));
    assert_false(og_ids_batch_valid("kb_"));
    assert_false(og_ids_batch_valid("kb_nope"));
    assert_false(og_ids_batch_valid("kb_01ARYZ6S41TSV4RRFFQ69G5FA"));   /* 25 characters */
    assert_false(og_ids_batch_valid("kb_01ARYZ6S41TSV4RRFFQ69G5FAVV")); /* 27 characters */
    assert_false(og_ids_batch_valid("kb_01aryz6s41tsv4rrffq69g5fav"));  /* lower case */
    assert_false(og_ids_batch_valid("kb_81ARYZ6S41TSV4RRFFQ69G5FAV"));  /* > 130 bits */
    assert_true(og_ids_batch_valid("kb_01ARYZ6S41TSV4RRFFQ69G5FAV"));
}

/* og_ids_random fills exactly the bytes asked for (the guard bytes stay), large requests
 * included, and two draws differ. */
static void test_random_fills(void **state)
{
    enum { N = 1 << 20 };
    unsigned char *buf = malloc(N + 2);
    assert_non_null(buf);
    buf[0] = 0xAA;
    buf[N + 1] = 0x55;
    memset(buf + 1, 0, N);
    og_ids_random(buf + 1, N);
    assert_int_equal(buf[0], 0xAA);
    assert_int_equal(buf[N + 1], 0x55);
    size_t zeros = 0;
    for (size_t i = 1; i <= N; i++)
        zeros += buf[i] == 0;
    assert_true(zeros < N / 128); /* about N/256 expected */
    og_ids_random(buf, 0);
    assert_int_equal(buf[0], 0xAA);
    unsigned char a[32], b[32];
    og_ids_random(a, sizeof(a));
    og_ids_random(b, sizeof(b));
    assert_memory_not_equal(a, b, sizeof(a));
    free(buf);
}

/* The floor of a millisecond is the smallest reference of it: every reference of that
 * millisecond sorts at or after it and every earlier one before it (as strings, which is how
 * PostgreSQL compares them); the range's ends are clamped. */
static void test_reference_floor(void **state)
{
    char floor[OG_IDS_REFERENCE_SIZE], ref[OG_IDS_REFERENCE_SIZE];
    og_ids_reference_floor(floor, 0);
    assert_string_equal(floor, "kf_00000000000000000000000000");
    og_ids_reference_floor(floor, UINT64_C(1764080725123));
    assert_string_equal(floor, "kf_01KAXPFB430000000000000000");
    assert_true(og_ids_reference_valid(floor));
    uint64_t t = 0;
    assert_true(og_ids_reference_time(floor, &t));
    assert_true(t == UINT64_C(1764080725123));
    for (int i = 0; i < 1000; i++) {
        og_ids_reference(ref, US(UINT64_C(1764080725123)));
        assert_true(strcmp(ref, floor) >= 0);
        og_ids_reference(ref, US(UINT64_C(1764080725122)));
        assert_true(strcmp(ref, floor) < 0);
    }
    og_ids_reference_floor(floor, OG_IDS_TIME_MAX);
    assert_string_equal(floor, "kf_7ZZZZZZZZZ0000000000000000");
    og_ids_reference_floor(floor, OG_IDS_TIME_MAX + 1);
    assert_string_equal(floor, "kf_80000000000000000000000000");
    og_ids_reference_floor(ref, UINT64_MAX);
    assert_string_equal(ref, floor);
    og_ids_reference(ref, US(OG_IDS_TIME_MAX));
    assert_true(strcmp(ref, floor) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_format),
        cmocka_unit_test(test_reference_time_known_answers),
        cmocka_unit_test(test_reference_time_wraps_at_48_bits),
        cmocka_unit_test(test_reference_time_round_trip),
        cmocka_unit_test(test_reference_orders_by_time),
        cmocka_unit_test(test_reference_orders_by_microsecond),
        cmocka_unit_test(test_reference_unique),
        cmocka_unit_test(test_reference_pool),
        cmocka_unit_test(test_reference_crockford_alphabet),
        cmocka_unit_test(test_reference_valid_rejects),
        cmocka_unit_test(test_reference_floor),
        cmocka_unit_test(test_batch_id),
        cmocka_unit_test(test_random_fills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
