/*
 * Delivery-based fallback (API.md §11): the runner of `fallback` steps. See
 * include/product/omnigate/steps/fallback.h; the SQL is sql/queries/fallback.sql and
 * sql/006_steps.sql, the scheduler src/data/jobs.c.
 *
 * A step is due when the chain's accepted attempt failed by status (made due at once by the
 * status write, which notifies every worker) or when its fallbackAfterSeconds ran out. The run:
 *   load    the message, its attempts, the tenant's settings, in one read;
 *   decide  wanted status reached -> close; a 'pending' attempt left by a holder that died ->
 *           'unknown', close (never a second provider call); no channel left -> settle, close;
 *   begin   record the next attempt 'pending' (commit), then call its provider;
 *   end     record the answer; accepted -> schedule the next step if channels remain, settle,
 *           close; failed -> the next channel at once (same step), or settle and close.
 * Every write that ends the step carries og_jobs_close_stmt: a holder whose lease was taken
 * over records nothing.
 */
#include "omnigate/steps/fallback.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/messaging/budget.h"
#include "omnigate/app/ctx.h"
#include "omnigate/consent/consent.h"
#include "omnigate/ids.h"
#include "omnigate/messaging/stored.h"
#include "omnigate/providers/provider.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/store.h"

typedef struct fb {
    og_step_t *step;
    og_gw_t *gw;
    og_db_op_t op;

    char to[20];
    char *text;
    og_channel_t ch[OG_CH__COUNT];
    int nch;
    char wa_from[20];
    char sender[20];
    json_t *settings;
    int next; /* index of the channel (= seq of the attempt) being tried */
    const char *reason;

    char *template_json;         /* Meta's template object of a template send (or wrapped text), or NULL */
    og_rate_category_t category; /* its category (API.md §22: its price may depend on it) */
    og_stored_attempt_t sa;      /* the attempt on channel `next` (messaging/stored.h) */
    og_attempt_t att;
    int schedule_stmt; /* in the ending write, -1 when none */

    /* SQL parameters that must outlive the op */
    char seq_s[12], next_seq_s[12];
} fb_t;

static void begin(fb_t *f);

static void fb_free(fb_t *f, bool ok)
{
    og_db_op_clear(&f->op);
    og_jobs_finish(f->step, ok);
    free(f->text);
    free(f->template_json);
    og_stored_clear(&f->sa);
    json_decref(f->settings);
    free(f);
}

static og_log_t *fb_log(const fb_t *f)
{
    return &f->gw->w->log;
}

static void write_failed(fb_t *f, og_db_status_t st, const char *what)
{
    og_log(fb_log(f), st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN, what,
           "\"step\":\"%s\",\"reference\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"", f->step->id,
           f->step->reference, f->op.sqlstate, f->op.error);
}

/* ---- the writes ---------------------------------------------------------------------------- */

/* Binds at op->stmts[n] one of the statements that take the step's message only:
 * og_q_fallback_load, og_q_fallback_schedule or og_q_fallback_settle (one parameter type). */
static int message_stmt(og_db_op_t *op, int n,
                        og_db_call_t *(*bind)(og_db_call_t *, const og_q_fallback_load_t *), const fb_t *f)
{
    bind(&op->stmts[n],
         &(og_q_fallback_load_t){.tenant_id = f->step->tenant_id, .reference = f->step->reference});
    return 1;
}

/* Aims f->sa at the attempt on channel f->next. */
static void aim(fb_t *f)
{
    f->sa = (og_stored_attempt_t){.tenant_id = f->step->tenant_id,
                                  .reference = f->step->reference,
                                  .to = f->to,
                                  .text = f->text,
                                  .wa_from = f->wa_from,
                                  .sender = f->sender,
                                  .template_json = f->template_json,
                                  .settings = f->settings,
                                  .category = f->category,
                                  .rates = og_consent_rates(f->gw->consent),
                                  .ch = f->ch[f->next],
                                  .seq = f->next,
                                  .sms_error_text = f->sa.sms_error_text};
}

/* fallback_begin of the attempt on channel f->next, whose seq is `seq`, at op->stmts[n]. */
static int begin_stmt(const fb_t *f, og_db_op_t *op, int n, const char *seq)
{
    og_q_fallback_begin(&op->stmts[n], &(og_q_fallback_begin_t){.tenant_id = f->step->tenant_id,
                                                                .reference = f->step->reference,
                                                                .seq = seq,
                                                                .channel = og_channel_name(f->ch[f->next]),
                                                                .reason = f->reason,
                                                                .content = og_stored_content(&f->sa)});
    return 1;
}

static void ended(og_db_op_t *op, og_db_status_t st)
{
    fb_t *f = op->arg;
    if (st != OG_DB_OK) {
        write_failed(f, st, "fallback step: recording failed");
        fb_free(f, false);
        return;
    }
    const PGresult *sched = f->schedule_stmt >= 0 ? op->res[f->schedule_stmt] : NULL;
    bool due_now = sched != NULL && PQntuples(sched) == 1 &&
                   PQgetvalue(sched, 0, OG_C_FALLBACK_SCHEDULE_DUE_NOW)[0] == 't';
    og_gw_t *gw = f->gw;
    fb_free(f, true);
    if (due_now)
        og_jobs_wake(gw->jobs);
}

/* Submits the step's last write: `n` statements already in f->op, then the close and (if
 * asked) the next step and the message's status. */
static void finish_with(fb_t *f, int n, bool schedule, bool settle)
{
    og_db_op_t *op = &f->op;
    /* Close first: the next step of this message replaces it (one per message and kind). */
    n += og_jobs_close_stmt(f->step, op, n);
    f->schedule_stmt = -1;
    if (schedule) {
        f->schedule_stmt = n;
        n += message_stmt(op, n, og_q_fallback_schedule, f);
    }
    if (settle)
        n += message_stmt(op, n, og_q_fallback_settle, f);
    op->nstmts = n;
    op->write = true;
    op->done = ended;
    op->arg = f;
    og_db_submit(f->gw->db, op);
}

/* A 'pending' attempt is committed: now its provider may be called. */
static void begun(og_db_op_t *op, og_db_status_t st);

static void attempted(og_attempt_t *a)
{
    fb_t *f = a->arg;
    og_stored_result_fix(&f->sa, &a->result);
    og_db_op_clear(&f->op);
    int n = og_stored_end_stmts(&f->sa, &a->result, &f->op, 0);
    bool sent = a->result.sent;
    bool more = f->next + 1 < f->nch;
    if (sent || !more) {
        finish_with(f, n, sent && more, true);
        return;
    }
    /* Failed at the provider's API: the next channel at once, within this step. */
    f->next++;
    aim(f); /* keeps the SMS error text fallback_end's SMS record points to */
    snprintf(f->next_seq_s, sizeof(f->next_seq_s), "%d", f->next);
    og_db_op_t *op = &f->op;
    n += begin_stmt(f, op, n, f->next_seq_s);
    op->nstmts = n;
    op->write = true;
    op->done = begun;
    op->arg = f;
    og_db_submit(f->gw->db, op);
}

/* ---- the provider call ---------------------------------------------------------------------- */

static void call_provider(fb_t *f)
{
    og_stored_params(&f->sa);
    f->att = (og_attempt_t){.done = attempted, .arg = f};
    og_stored_start(f->gw->consent, &f->gw->prov, &f->sa, &f->att);
}

static void begun(og_db_op_t *op, og_db_status_t st)
{
    fb_t *f = op->arg;
    if (st != OG_DB_OK) {
        write_failed(f, st, "fallback step: recording an attempt failed");
        fb_free(f, false);
        return;
    }
    og_db_op_clear(op);
    call_provider(f);
}

static void begin(fb_t *f)
{
    aim(f);
    snprintf(f->seq_s, sizeof(f->seq_s), "%d", f->next);
    og_db_op_t *op = &f->op;
    og_db_op_clear(op);
    int n = begin_stmt(f, op, 0, f->seq_s);
    op->nstmts = n;
    op->write = true;
    op->done = begun;
    op->arg = f;
    og_db_submit(f->gw->db, op);
}

/* ---- deciding -------------------------------------------------------------------------------- */

/* Parses "a,b,c" into f->ch; false on a name we do not know. */
static bool parse_channels(fb_t *f, const char *list)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (f->nch == OG_CH__COUNT || !og_channel_parse(t, &f->ch[f->nch]))
            return false;
        f->nch++;
    }
    return f->nch > 0;
}

static void loaded(og_db_op_t *op, og_db_status_t st)
{
    fb_t *f = op->arg;
    if (st != OG_DB_OK) {
        write_failed(f, st, "fallback step: loading failed");
        fb_free(f, false);
        return;
    }
    const PGresult *r = op->res[0];
    if (PQntuples(r) != 1) { /* the message is gone (retention): nothing to do */
        og_db_op_clear(op);
        finish_with(f, 0, false, false);
        return;
    }
    snprintf(f->to, sizeof(f->to), "%s", PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_TO));
    f->text = strdup(PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_TEXT));
    const char *tpl = PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_TEMPLATE);
    f->template_json = tpl[0] != '\0' ? strdup(tpl) : NULL;
    if (!og_rate_category_parse(PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_CATEGORY), &f->category))
        f->category = OG_CAT_NONE;
    bool channels_ok = parse_channels(f, PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_CHANNELS));
    snprintf(f->wa_from, sizeof(f->wa_from), "%s", PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_WA_FROM));
    snprintf(f->sender, sizeof(f->sender), "%s", PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_SENDER));
    f->settings = json_loads(PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_SETTINGS), 0, NULL);
    og_seal_key_t key;
    if (f->settings != NULL) { /* the credentials are clear in memory only */
        og_settings_key(&key, f->gw->w->cfg->secret);
        og_settings_open(f->settings, &key, f->step->tenant_id, fb_log(f));
        og_seal_key_clear(&key);
    }
    int last_seq = atoi(PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_LAST_SEQ));
    bool reached = PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_REACHED)[0] == 't';
    const char *last_status = PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_LAST_STATUS);
    int pending = atoi(PQgetvalue(r, 0, OG_C_FALLBACK_LOAD_PENDING_SEQ));
    f->reason = strcmp(last_status, "failed") == 0        ? "status_failed"
                : strcmp(last_status, "undelivered") == 0 ? "status_undelivered"
                                                          : "no_status_in_time";
    og_db_op_clear(op);
    if (f->text == NULL || f->settings == NULL || !channels_ok) {
        og_log(fb_log(f), OG_LOG_ERROR, "fallback step: cannot read its message",
               "\"step\":\"%s\",\"reference\":\"%s\"", f->step->id, f->step->reference);
        fb_free(f, false);
        return;
    }
    if (reached) {
        finish_with(f, 0, false, false);
        return;
    }
    if (pending >= 0) {
        /* An earlier holder recorded this attempt and died: it may have reached the provider. */
        og_log(fb_log(f), OG_LOG_WARN, "fallback step: an attempt was left pending; not sending it again",
               "\"step\":\"%s\",\"reference\":\"%s\",\"seq\":%d,\"claims\":%d", f->step->id,
               f->step->reference, pending, f->step->claims);
        snprintf(f->seq_s, sizeof(f->seq_s), "%d", pending);
        og_q_fallback_abandon(&op->stmts[0], &(og_q_fallback_abandon_t){.tenant_id = f->step->tenant_id,
                                                                        .reference = f->step->reference,
                                                                        .seq = f->seq_s});
        finish_with(f, 1, false, false);
        return;
    }
    f->next = last_seq + 1;
    if (f->next >= f->nch) {
        finish_with(f, 0, false, true);
        return;
    }
    begin(f);
}

static void run(og_step_t *step, void *arg)
{
    og_gw_t *gw = arg;
    /* Not before this worker's copy of the opt-outs is loaded (consent/consent.h): the step is
     * claimed again when its lease ends, rather than call a number that may have opted out. */
    fb_t *f = og_consent_ready(gw->consent) ? calloc(1, sizeof(*f)) : NULL;
    if (f == NULL) {
        og_jobs_finish(step, false);
        return;
    }
    f->step = step;
    f->gw = gw;
    int n = message_stmt(&f->op, 0, og_q_fallback_load, f);
    f->op.nstmts = n;
    f->op.done = loaded;
    f->op.arg = f;
    og_db_submit(gw->db, &f->op);
}

int og_fallback_register(og_gw_t *gw)
{
    /* The longest run: an attempt on each channel, and the writes around them. */
    return og_jobs_register(gw->jobs, OG_FALLBACK_STEP_KIND, og_send_budget_ms(gw->w->cfg, OG_CH__COUNT), run,
                            gw) >= 0
               ? 0
               : -1;
}
