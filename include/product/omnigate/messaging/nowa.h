/*
 * Numbers not on WhatsApp (API.md §13): the fact, shared by every instance through PostgreSQL
 * (sql/010_not_on_whatsapp.sql), that a number has no WhatsApp, and a per-worker cache of it.
 * Responsible for answering "skip WhatsApp for this number?" cheaply and for the statements
 * that record the fact; not for deciding what a send does with the answer (send.c).
 *
 * The cache holds both answers for OG_NOWA_CACHE_MS (a remembered number never past its
 * expiry): a number another instance learns about is skipped here within that time. A
 * database that cannot answer counts as "not remembered": WhatsApp is tried (the fact saves
 * money; it must not cost sends).
 */
#ifndef OMNIGATE_MESSAGING_NOWA_H
#define OMNIGATE_MESSAGING_NOWA_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "omnigate/db.h"
#include "omnigate/metrics.h"

#define OG_NOWA_CACHE_MS 5000
#define OG_NOWA_SLOTS    4096 /* direct-mapped by a hash of the number */

typedef struct og_nowa og_nowa_t;

/* NULL when out of memory. ttl_s: OMNIGATE_NOT_ON_WHATSAPP_TTL_S. */
og_nowa_t *og_nowa_new(uv_loop_t *loop, og_db_t *db, int ttl_s);
void og_nowa_free(og_nowa_t *n);

/* Calls done(arg, remembered) once: at once (before this returns) from the cache, else after
 * a read on `op` (the caller's, unused until done; cleared before done). */
void og_nowa_check(og_nowa_t *n, og_db_op_t *op, const char *number, void (*done)(void *arg, bool remembered),
                   void *arg);

/* The cache's answer for `number`: true (and *remembered) when it has one. */
bool og_nowa_cached(og_nowa_t *n, const char *number, bool *remembered);

/* Caches what a send's first write found out (msg_insert_unless_nowa in sql/queries/messages.sql):
 * remembered for `left_ms` more, or not remembered. */
void og_nowa_learn(og_nowa_t *n, const char *number, bool remembered, uint64_t left_ms);

/* Adds to `op` at `slot` the statement that remembers `number` (which must outlive the op) and
 * puts it in the cache now; returns 1. */
int og_nowa_mark_stmt(og_nowa_t *n, og_db_op_t *op, int slot, const char *number);

/* Adds to `op` at `slot` the statement that applies a batch of statuses (`statuses`, and
 * `json`, its text as status_apply takes it, which must outlive the op): returns 1, or 0 when
 * nothing in it can matter (no Meta 131026 failure, no WhatsApp delivered or read). */
int og_nowa_statuses_stmt(og_nowa_t *n, og_db_op_t *op, int slot, const json_t *statuses, const char *json);

#endif
