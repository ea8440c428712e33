/*
 * A hash map from a key of three 64-bit words to a non-zero 64-bit value: open addressing with
 * linear probing, capacity a power of two, at most half full, deletion by backward shift (no
 * tombstones, so a lookup never walks past what the table holds). Used by the consent copies
 * (consent/consent.h), whose keys are a tenant id and a number. Responsible for the table; not
 * for what keys and values mean. A value of 0 is "absent": og_kmap_put with 0 deletes.
 */
#ifndef OMNIGATE_KMAP_H
#define OMNIGATE_KMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct og_kmap_key {
    uint64_t w[3];
} og_kmap_key_t;

typedef struct og_kmap_slot {
    og_kmap_key_t k;
    uint64_t v; /* 0: free */
} og_kmap_slot_t;

typedef struct og_kmap {
    og_kmap_slot_t *slot;
    size_t cap; /* a power of two, or 0 before the first put */
    size_t n;
} og_kmap_t;

#define OG_KMAP_INIT                                                                                         \
    {                                                                                                        \
        NULL, 0, 0                                                                                           \
    }

/* The value of k, 0 when absent. */
uint64_t og_kmap_get(const og_kmap_t *m, const og_kmap_key_t *k);

/* Sets k to v (v 0: removes k). False when the table had to grow and memory ran out (then
 * nothing changed). */
bool og_kmap_put(og_kmap_t *m, const og_kmap_key_t *k, uint64_t v);

/* Removes every entry for which keep(arg, key, value) is false. */
void og_kmap_filter(og_kmap_t *m, bool (*keep)(void *arg, const og_kmap_key_t *k, uint64_t v), void *arg);

/* Frees the table; m is empty again. */
void og_kmap_clear(og_kmap_t *m);

#endif
