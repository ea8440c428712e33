/*
 * The sweep step. See include/product/omnigate/steps/pending_sweep.h; the SQL is og_sweep_pending in
 * sql/007_stale_claims.sql, which also seeds the one sweep step of a database.
 */
#include "omnigate/steps/pending_sweep.h"

#include <stdio.h>
#include <stdlib.h>

#include "omnigate/messaging/budget.h"
#include "omnigate/store.h"

typedef struct sweep_run {
    og_db_op_t op;
    og_step_t *step;
    og_gw_t *gw;
    char older_s[16];
} sweep_run_t;

static void swept(og_db_op_t *op, og_db_status_t st)
{
    sweep_run_t *r = (sweep_run_t *)op;
    const PGresult *res = op->res[0];
    if (st == OG_DB_OK && res != NULL && PQntuples(res) == 1 &&
        atoi(PQgetvalue(res, 0, OG_C_SWEEP_PENDING_MARKED)) > 0)
        og_log(&r->gw->w->log, OG_LOG_WARN, "pending messages marked unknown", "\"count\":%s",
               PQgetvalue(res, 0, OG_C_SWEEP_PENDING_MARKED));
    og_db_op_clear(op);
    og_jobs_finish(r->step, st == OG_DB_OK);
    free(r);
}

/* Usage rows of past days merged per sweep (sql/024: og_usage_compact): a day's shards are a
 * few dozen per tenant and channel, so one sweep merges thousands of tenants' days. */
#define USAGE_COMPACT_ROWS "10000"

static void run(og_step_t *step, void *arg)
{
    og_gw_t *gw = arg;
    sweep_run_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_jobs_finish(step, false);
        return;
    }
    r->step = step;
    r->gw = gw;
    /* Older than any send could still take: every channel's attempt and the writes. */
    snprintf(r->older_s, sizeof(r->older_s), "%u", og_send_budget_ms(gw->w->cfg, OG_CH__COUNT));
    og_db_op_t *op = &r->op;
    og_q_sweep_pending(&op->stmts[0], &(og_q_sweep_pending_t){.older_ms = r->older_s});
    int n = 1 + og_jobs_close_stmt(step, op, 1);
    og_q_sweep_next(&op->stmts[n++]);
    og_q_nowa_prune(&op->stmts[n++]);    /* numbers no longer remembered as not on WhatsApp */
    og_q_consent_prune(&op->stmts[n++]); /* closed windows and old opt-ins (API.md §21) */
    og_q_usage_compact(&op->stmts[n++], &(og_q_usage_compact_t){.limit = USAGE_COMPACT_ROWS}); /* §22 */
    op->nstmts = n;
    op->write = true;
    op->done = swept;
    og_db_submit(gw->db, op);
}

int og_sweep_register(og_gw_t *gw)
{
    return og_jobs_register(gw->jobs, OG_PENDING_SWEEP_STEP_KIND, 30000, run, gw) >= 0 ? 0 : -1;
}
