/*
 * References in the ULID layout and CSPRNG bytes. A reference is 130 bits written as 26
 * Crockford base32 characters: 2 zero bits, 48 bits of milliseconds, 10 bits of the
 * microsecond within that millisecond (0-999), 70 random bits. Because the time comes first
 * and the alphabet is in ASCII order, string order is time order to the microsecond: a send
 * made after another one answered sorts after it, even in the same millisecond.
 */
#include "omnigate/ids.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>

#include <openssl/rand.h>

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/* getrandom(2) without GRND_NONBLOCK blocks only until the kernel pool is first seeded (early
 * boot), and it returns short reads only for large requests interrupted by a signal. Its
 * remaining failures (ENOSYS on a pre-3.17 kernel, EFAULT on a bad pointer) leave nothing to
 * fall back on: a weaker source would silently make guessable tokens and OTP codes, and
 * giving every caller an error path for a condition that cannot occur on a supported kernel
 * would only add untested code. So the process stops, loudly, with a core dump. */
void og_ids_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            abort();
        }
        p += r;
        n -= (size_t)r;
    }
}

uint64_t og_ids_now_ms(void)
{
    return og_ids_now_us() / 1000;
}

uint64_t og_ids_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Writes "kf_" and the 10 characters of a time of up to 50 bits; returns where they end. */
static char *reference_time(char *out, uint64_t t)
{
    memcpy(out, OG_IDS_REFERENCE_PREFIX, 3);
    out += 3;
    for (int i = 9; i >= 0; i--)
        out[9 - i] = crockford[(t >> (5 * i)) & 31];
    return out + 10;
}

_Static_assert(sizeof(((og_ids_pool_t *)0)->buf) % 9 == 0, "a pool holds whole references' bytes");

/* OpenSSL's generator (seeded from the kernel, reseeded after a fork) rather than a getrandom
 * call per reference: a reference must be unique, not secret, and the system call was one in
 * ten of a send's (issue 20). */
static void draw(unsigned char *buf, size_t n)
{
    if (RAND_bytes(buf, (int)n) != 1)
        og_ids_random(buf, n);
}

void og_ids_reference(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us)
{
    og_ids_reference_in(out, now_us, NULL);
}

void og_ids_reference_in(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us, og_ids_pool_t *pool)
{
    unsigned char rnd[9];
    if (pool == NULL) {
        draw(rnd, sizeof(rnd));
    } else {
        if (pool->left < sizeof(rnd)) {
            draw(pool->buf, sizeof(pool->buf));
            pool->left = sizeof(pool->buf);
        }
        /* Taken from the end and wiped: a byte is used once. */
        pool->left -= sizeof(rnd);
        memcpy(rnd, pool->buf + pool->left, sizeof(rnd));
        memset(pool->buf + pool->left, 0, sizeof(rnd));
    }

    /* 10 characters of the millisecond time (2 zero bits and 48 bits), then 16 of the rest:
     * the microsecond within the millisecond (10 bits, 2 characters) and 70 random bits (14
     * characters, read big-endian from the first 70 of the 72 drawn bits). */
    char *o = reference_time(out, (now_us / 1000) & OG_IDS_TIME_MAX);
    unsigned us = (unsigned)(now_us % 1000);
    *o++ = crockford[us >> 5];
    *o++ = crockford[us & 31];
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < sizeof(rnd); i++) { /* 72 bits in: 14 groups of 5 out, 2 bits left */
        acc = (acc << 8) | rnd[i];
        bits += 8;
        while (bits >= 5) {
            bits -= 5;
            *o++ = crockford[(acc >> bits) & 31];
        }
    }
    *o = '\0';
}

/* Value of a canonical (upper-case) Crockford character, or -1. */
static int crockford_value(char c)
{
    const char *p = c != '\0' ? strchr(crockford, c) : NULL;
    return p != NULL ? (int)(p - crockford) : -1;
}

void og_ids_reference_floor(char out[OG_IDS_REFERENCE_SIZE], uint64_t ms)
{
    /* One past the last millisecond is "kf_8000000000...": after every reference (whose first
     * character is 0-7), as strings and as bytes. */
    char *o = reference_time(out, ms > OG_IDS_TIME_MAX ? OG_IDS_TIME_MAX + 1 : ms);
    memset(o, '0', 16);
    o[16] = '\0';
}

bool og_ids_reference_valid(const char *s)
{
    if (s == NULL || strncmp(s, OG_IDS_REFERENCE_PREFIX, 3) != 0)
        return false;
    s += 3;
    for (int i = 0; i < 26; i++)
        if (crockford_value(s[i]) < 0)
            return false;
    return s[26] == '\0' && s[0] <= '7';
}

void og_ids_batch(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us)
{
    og_ids_reference(out, now_us);
    memcpy(out, OG_IDS_BATCH_PREFIX, 3);
}

bool og_ids_batch_valid(const char *s)
{
    if (s == NULL || strncmp(s, OG_IDS_BATCH_PREFIX, 3) != 0 || strlen(s) != OG_IDS_REFERENCE_LEN)
        return false;
    char ref[OG_IDS_REFERENCE_SIZE];
    memcpy(ref, OG_IDS_REFERENCE_PREFIX, 3);
    memcpy(ref + 3, s + 3, OG_IDS_REFERENCE_SIZE - 3);
    return og_ids_reference_valid(ref);
}

bool og_ids_reference_time(const char *s, uint64_t *ms)
{
    if (!og_ids_reference_valid(s))
        return false;
    uint64_t t = 0;
    for (int i = 0; i < 10; i++)
        t = (t << 5) | (uint64_t)crockford_value(s[3 + i]);
    *ms = t;
    return true;
}
