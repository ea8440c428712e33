/*
 * The three-word key map. See include/base/omnigate/kmap.h.
 */
#include "omnigate/kmap.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 64

/* splitmix64's finalizer over the three words. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static size_t home(const og_kmap_t *m, const og_kmap_key_t *k)
{
    return (size_t)mix(k->w[0] ^ mix(k->w[1] ^ mix(k->w[2]))) & (m->cap - 1);
}

static bool same(const og_kmap_key_t *a, const og_kmap_key_t *b)
{
    return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[2] == b->w[2];
}

/* The slot holding k, or the free slot where it would go. */
static size_t find(const og_kmap_t *m, const og_kmap_key_t *k)
{
    size_t i = home(m, k);
    while (m->slot[i].v != 0 && !same(&m->slot[i].k, k))
        i = (i + 1) & (m->cap - 1);
    return i;
}

uint64_t og_kmap_get(const og_kmap_t *m, const og_kmap_key_t *k)
{
    return m->cap == 0 ? 0 : m->slot[find(m, k)].v;
}

static bool grow(og_kmap_t *m)
{
    size_t cap = m->cap == 0 ? MIN_CAP : m->cap * 2;
    og_kmap_slot_t *slot = calloc(cap, sizeof(*slot));
    if (slot == NULL)
        return false;
    og_kmap_t bigger = {slot, cap, m->n};
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[i].v != 0)
            bigger.slot[find(&bigger, &m->slot[i].k)] = m->slot[i];
    free(m->slot);
    *m = bigger;
    return true;
}

/* Frees slot i and moves back the entries after it that it kept from their home. */
static void remove_at(og_kmap_t *m, size_t i)
{
    size_t mask = m->cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->slot[j].v == 0)
            break;
        size_t h = home(m, &m->slot[j].k);
        /* j's entry may move to i when its home is not in (i, j] (cyclically). */
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            m->slot[i] = m->slot[j];
            i = j;
        }
    }
    m->slot[i].v = 0;
    m->n--;
}

bool og_kmap_put(og_kmap_t *m, const og_kmap_key_t *k, uint64_t v)
{
    if (m->cap == 0) {
        if (v == 0)
            return true;
        if (!grow(m))
            return false;
    }
    size_t i = find(m, k);
    if (m->slot[i].v != 0) {
        if (v == 0)
            remove_at(m, i);
        else
            m->slot[i].v = v;
        return true;
    }
    if (v == 0)
        return true;
    if (2 * (m->n + 1) > m->cap) {
        if (!grow(m))
            return false;
        i = find(m, k);
    }
    m->slot[i].k = *k;
    m->slot[i].v = v;
    m->n++;
    return true;
}

void og_kmap_filter(og_kmap_t *m, bool (*keep)(void *arg, const og_kmap_key_t *k, uint64_t v), void *arg)
{
    /* Start after a free slot: removing moves entries back, never across a free slot, so each
     * entry is looked at once when the walk goes round from there. */
    size_t start = 0;
    while (start < m->cap && m->slot[start].v != 0)
        start++;
    for (size_t n = 0; n < m->cap; n++) {
        size_t i = (start + 1 + n) & (m->cap - 1);
        while (m->slot[i].v != 0 && !keep(arg, &m->slot[i].k, m->slot[i].v))
            remove_at(m, i); /* the entry moved into i (if any) is looked at next */
    }
}

void og_kmap_clear(og_kmap_t *m)
{
    free(m->slot);
    m->slot = NULL;
    m->cap = 0;
    m->n = 0;
}
