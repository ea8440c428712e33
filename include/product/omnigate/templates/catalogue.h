/*
 * The WhatsApp template catalogue as a send sees it (API.md §18): a per-worker cache of
 * catalogue entries, (WABA, name, language) -> the entry as og_template_item shows it (or "not
 * in the catalogue"), read from PostgreSQL (sql/queries/templates.sql) on a miss. Responsible
 * for answering "what is this template?" without a database round trip on the hot path; not for
 * filling the catalogue (sync.h) or for the rules of a template send (render.h).
 *
 * Freshness, like the token cache (tenants/auth.h): an entry is used for OG_TPL_CACHE_MS after
 * it was read, so a change made anywhere (a sync, Meta's status webhook, a send Meta refused)
 * reaches every worker of every instance within that time plus one read. To keep that read off
 * the sends, an entry used in the second half of its life is read again in the background
 * (once): under steady traffic a template send never waits for the catalogue. A worker that
 * changes a status itself forgets its own entry once that change committed (og_tpl_cache_forget).
 */
#ifndef OMNIGATE_TEMPLATES_CATALOGUE_H
#define OMNIGATE_TEMPLATES_CATALOGUE_H

#include <stdbool.h>

#include <jansson.h>
#include <uv.h>

#include "omnigate/db.h"

#define OG_TPL_CACHE_MS    1000 /* an entry's life; API.md §18 wants changes seen within 2 s */
#define OG_TPL_CACHE_SLOTS 1024 /* direct-mapped by a hash of the key; a collision just evicts */

typedef struct og_tpl_cache og_tpl_cache_t;

/* NULL when out of memory. */
og_tpl_cache_t *og_tpl_cache_new(uv_loop_t *loop, og_db_t *db);

/* Frees the cache; its pool must be closed (no background read in flight). */
void og_tpl_cache_free(og_tpl_cache_t *c);

/* Called once with the entry (borrowed: valid only during the call; NULL when the catalogue
 * does not have the template) and OG_DB_OK, or with the status of the read that failed (then
 * the caller's op still holds the failure, for og_answer_db_failure). */
typedef void (*og_tpl_found_fn)(void *arg, og_db_status_t st, const json_t *item);

/* Looks (waba_id, name, language) up: from the cache before this returns, else after a read on
 * `op` (the caller's, unused until done; the caller clears it after done). */
void og_tpl_lookup(og_tpl_cache_t *c, og_db_op_t *op, const char *waba_id, const char *name,
                   const char *language, og_tpl_found_fn done, void *arg);

/* Forgets this worker's entry for the template (its status was just changed here). */
void og_tpl_cache_forget(og_tpl_cache_t *c, const char *waba_id, const char *name, const char *language);

/* The change of one template's status as tpl_set_status takes it (sql/queries/templates.sql:
 * a JSON array of {"waba", "name", "language", "status"}): malloc'd, NULL when out of memory.
 * For a send Meta refused for its template; Meta's webhook gives its changes in that form
 * already (callbacks/webhooks_in.h). Once the write that records it has committed, forget the
 * entry here (og_tpl_cache_forget): forgotten before, a read between could bring the old
 * status back for OG_TPL_CACHE_MS. */
char *og_tpl_change_json(const char *waba_id, const char *name, const char *language, const char *status);

/* The status a Meta error code gives a template (above), or NULL when the code says nothing
 * about the template. */
const char *og_tpl_status_of_meta_code(const char *provider_code);

#endif
