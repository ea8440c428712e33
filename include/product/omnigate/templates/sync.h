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
#include "omnigate/db.h"

#define OG_TPL_SYNC_STEP_KIND "template_sync"
#define OG_TPL_SYNC_PAGE      100     /* templates asked per page (Meta's limit parameter) */
#define OG_TPL_SYNC_MAX_PAGES 200     /* a WABA of more pages than this is refused, not looped on */
#define OG_TPL_SYNC_RETRY_S   60      /* a failed periodic sync is tried again this much later */

/* Registers the runner of sync steps. 0, or -1 on failure. */
int og_tpl_sync_register(og_gw_t *gw);

/* Adds at op->stmts[n] the statement that makes the sync of every WABA of `settings` (a tenant's
 * validated settings: its whatsapp_meta numbers' wabaId) due now, for tenant `tenant_id`;
 * `lit` (which must outlive the op) receives the WABA ids as a text[] literal. Returns the
 * number of statements added: 0 when the settings name no WABA (or the literal does not fit),
 * else 1. */
int og_tpl_sync_schedule_stmt(og_db_op_t *op, int n, const char *tenant_id, const json_t *settings, char *lit,
                              size_t litlen);

#endif
