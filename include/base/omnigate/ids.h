/*
 * Identifiers: message references ("kf_" + 26 Crockford base32 characters, ULID layout) and
 * raw bytes from the kernel CSPRNG. Responsible for generating references and checking their
 * format; not for storing them, nor for tokens and OTP codes (token.h builds on og_ids_random).
 */
#ifndef OMNIGATE_IDS_H
#define OMNIGATE_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OG_IDS_REFERENCE_PREFIX "kf_"
#define OG_IDS_REFERENCE_LEN    29 /* "kf_" + 26 characters */
#define OG_IDS_REFERENCE_SIZE   30 /* with the terminating NUL */

/* Fills `buf` with `n` bytes from getrandom(2), retrying on EINTR and short reads. Aborts the
 * process when the kernel CSPRNG fails: every caller turns these bytes into a secret or an
 * identifier, and there is no safe degraded mode (see ids.c). */
void og_ids_random(void *buf, size_t n);

/* Writes a new reference for the time `now_us` (microseconds since the epoch) into `out`:
 * "kf_", then 10 characters of the 48-bit millisecond time (taken modulo 2^48), 2 characters
 * of the microsecond within it (0-999) and 14 characters of 70 random bits, in Crockford
 * base32 (0123456789ABCDEFGHJKMNPQRSTVWXYZ). References of different microseconds sort by
 * time, as strings and as bytes; within one microsecond their order is random. The log's
 * "newest first" is this order, so sends made one after another list in that order. */
void og_ids_reference(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us);

/* Random bytes for references, drawn from OpenSSL's generator in blocks: one RAND_bytes call per
 * 56 references instead of one each (the call's own cost, about 6,500 instructions, was a tenth
 * of a batched message's and of a send's gateway CPU). A reference's bits need to be unique, not
 * secret, so bytes kept for later are no weaker than bytes drawn at once; nothing secret (tokens,
 * OTP codes) comes from here. Zero-initialised is empty; one per worker (app/ctx.h), filled after
 * the worker started (a fork never copies bytes another process will use). */
typedef struct og_ids_pool {
    unsigned char buf[504]; /* 56 references' 9 bytes */
    size_t left;            /* bytes not used yet, at the end of buf */
} og_ids_pool_t;

/* og_ids_reference with its random bytes from `pool` (NULL: drawn at once). */
void og_ids_reference_in(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us, og_ids_pool_t *pool);

/* The latest time a reference can carry: 2^48 - 1 milliseconds after the epoch (in 10889). */
#define OG_IDS_TIME_MAX ((UINT64_C(1) << 48) - 1)

/* Writes into `out` the smallest reference of millisecond `ms`: "kf_", its 10 time characters
 * and 16 zeros. Every reference made in that millisecond or later sorts at or after it, every
 * earlier one before it, so a time range is a range of references (the log filters since and
 * until, retention). A time past OG_IDS_TIME_MAX gives a string after every reference. */
void og_ids_reference_floor(char out[OG_IDS_REFERENCE_SIZE], uint64_t ms);

/* Wall-clock time in milliseconds since the epoch (attempt times, webhook events). */
uint64_t og_ids_now_ms(void);

/* Wall-clock time in microseconds since the epoch (references). */
uint64_t og_ids_now_us(void);

/* True when `s` is a reference in canonical form: "kf_" + 26 upper-case Crockford characters,
 * the first one 0-7 (26 characters carry 130 bits; the top two are always zero). */
bool og_ids_reference_valid(const char *s);

/* A batch id (API.md §20): "kb_" and 26 characters made as a reference's (og_ids_reference), so
 * that batch ids sort by time too. The same size as a reference. */
#define OG_IDS_BATCH_PREFIX "kb_"
void og_ids_batch(char out[OG_IDS_REFERENCE_SIZE], uint64_t now_us);

/* True when `s` is a batch id in canonical form ("kb_" and a reference's 26 characters). */
bool og_ids_batch_valid(const char *s);

/* The millisecond time a valid reference was made at; false when `s` is not valid. */
bool og_ids_reference_time(const char *s, uint64_t *ms);

#endif
