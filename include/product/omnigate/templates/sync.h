/*
 * The template catalogue's sync from Meta (API.md §18): reading a WABA's templates from
 * GET {OMNIGATE_META_BASE_URL}/{version}/{wabaId}/message_templates, page by page, and
 * replacing the WABA's catalogue with them in one statement (tpl_replace). It runs as a durable
 * step per (tenant, WABA), kind OG_TPL_SYNC_STEP_KIND, made due when a tenant's settings with a
 * wabaId are saved and every OMNIGATE_TEMPLATE_SYNC_S after each run, so exactly one worker of
 * one instance syncs a WABA at a time; and on POST /admin/tenants/{id}/templates/sync
 * (template_api.h). Responsible for reading Meta's listing; not for what a template send does
 * (render.h) or the cache (catalogue.h).
 */
#ifndef OMNIGATE_TEMPLATES_SYNC_H
#define OMNIGATE_TEMPLATES_SYNC_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "omnigate/app/ctx.h"
#include "omnigate/config.h"
#include "omnigate/db.h"
#include "omnigate/http_client.h"

#define OG_TPL_SYNC_STEP_KIND   "template_sync"
#define OG_TPL_SYNC_PAGE        100        /* templates asked per page (Meta's limit parameter) */
#define OG_TPL_SYNC_MAX_PAGES   200        /* a WABA of more pages than this is refused, not looped on */
#define OG_TPL_SYNC_RETRY_S     60         /* a failed periodic sync is tried again this much later */
#define OG_TPL_SYNC_PAGE_BYTES  (4u << 20) /* the largest page of Meta's answer read, bytes */
#define OG_TPL_SYNC_CURSOR_MAX  1024       /* the longest paging.cursors.after followed, bytes */
#define OG_TPL_SYNC_CONCURRENCY 4          /* sync steps running at once on one worker, at most */
/* The WABAs of one tenant synced by the admin route: each catalogue is one tpl_replace of the
 * one write that replaces them all (db.h: OG_DB_MAX_STMTS statements per operation). */
#define OG_TPL_SYNC_MAX_WABAS OG_DB_MAX_STMTS

/* Registers the runner of sync steps: leased for the longest run (every page at the attempt
 * timeout, and the read and the write around them), at most OG_TPL_SYNC_CONCURRENCY at once
 * per worker. 0, or -1 on failure. */
int og_tpl_sync_register(og_gw_t *gw);

/* Adds at op->stmts[n] the statement that makes the sync of every WABA of `settings` (a tenant's
 * validated settings: its whatsapp_meta numbers' wabaId) due now, for tenant `tenant_id`;
 * `lit` (which must outlive the op) receives the WABA ids as a text[] literal. Returns the
 * number of statements added: 0 when `settings` is NULL or names no WABA (or the literal does
 * not fit), else 1. The caller wakes its steps (og_jobs_wake) once the write committed. */
int og_tpl_sync_schedule_stmt(og_db_op_t *op, int n, const char *tenant_id, const json_t *settings, char *lit,
                              size_t litlen);

/* ---- a tenant's WABAs ----------------------------------------------------------------------- */

/* One WABA of a tenant's settings, and the access token its listing is read with: that of its
 * first whatsapp_meta number (in the settings' order) whose token is clear. Borrowed from the
 * settings. */
typedef struct og_tpl_waba {
    const char *waba_id;
    const char *access_token; /* NULL when no number of the WABA has an opened token */
    const char *number;       /* the number whose token it is (or the first, when none opened) */
} og_tpl_waba_t;

/* The distinct WABAs of `settings` (validated, secrets opened: settings.h), in order of first
 * appearance, into out[0..max). Returns how many, or -1 when there are more than max. */
int og_tpl_wabas(const json_t *settings, og_tpl_waba_t *out, int max);

/* The WABA `waba_id` of `settings` into *out; false when no whatsapp_meta number names it. */
bool og_tpl_waba_find(const json_t *settings, const char *waba_id, og_tpl_waba_t *out);

/* ---- reading one WABA's listing ------------------------------------------------------------- */

/* One reading of a WABA's templates, every page of it: one struct, one completion. Owned by the
 * caller; fill done and arg, then og_tpl_fetch_start. */
typedef struct og_tpl_fetch og_tpl_fetch_t;
struct og_tpl_fetch {
    void (*done)(og_tpl_fetch_t *f);
    void *arg;

    /* Results, set before done is called. */
    bool ok;
    char *json;             /* ok: the templates as tpl_replace takes them, a JSON array (malloc'd) */
    size_t count;           /* ok: how many templates it holds */
    int pages;              /* pages read */
    long http_status;       /* failure: Meta's HTTP status, 0 when none came */
    char provider_code[32]; /* failure: Meta's error.code, "" when none */
    /* failure: what went wrong, for the log and the admin's answer: valid UTF-8, Meta's own
     * message when it gave one, never a credential */
    char error[384];

    /* private */
    og_hc_t *hc;
    const og_config_t *cfg;
    og_hc_req_t req;
    char waba[40];
    char *token; /* the access token, wiped when cleared */
    json_t *items;
    char *after; /* the cursor of the next page */
};

/* Reads every page of WABA `waba_id`'s listing with `access_token` (both copied) on `hc`, each
 * request bounded by the attempt timeout (OMNIGATE_ATTEMPT_TIMEOUT_MS) and OG_TPL_SYNC_PAGE_BYTES.
 * Follows paging.next by asking for the next page with paging.cursors.after on the configured
 * base URL (never a host from the answer), at most OG_TPL_SYNC_MAX_PAGES pages. A non-2xx
 * answer, no answer in time, an unreadable page or too many pages fail it. Templates without a
 * name or language of the catalogue's form (settings.h) are left out. f->done is called exactly
 * once, later from the loop, except when the HTTP client has finished closing: then it fails
 * before this returns, so call it last. */
void og_tpl_fetch_start(og_tpl_fetch_t *f, og_hc_t *hc, const og_config_t *cfg, const char *waba_id,
                        const char *access_token);

/* Frees what f holds (after done, or before a start), keeping done and arg. */
void og_tpl_fetch_clear(og_tpl_fetch_t *f);

#endif
