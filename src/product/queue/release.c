/*
 * The release of queued messages. See include/product/omnigate/queue/release.h; the SQL is
 * sql/queries/queue.sql and sql/018_queue.sql.
 *
 * A released message's life here:
 *   claim   queue_claim leased it to this worker (committed; the lease stands for its attempt);
 *   call    its channel's provider, with the message's senders and the tenant's settings;
 *   hold    its outcome waits, up to OG_QUEUE_DONE_LINGER_MS, for the others of its claim (hold);
 *   record  queue_done (+ the SMS record) in one write, under the lease; the releases of one
 *           write batch share one call of its set form (queue_done_many).
 * A write that fails leaves the lease to expire: the next claim anywhere marks the attempt
 * 'unknown' (og_queue_abandon), never calls the provider again.
 */
#include "omnigate/queue/release.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/consent/consent.h"
#include "omnigate/costs/usage.h"
#include "omnigate/ids.h"
#include "omnigate/jw.h"
#include "omnigate/messaging/budget.h"
#include "omnigate/messaging/stored.h"
#include "omnigate/queue/pacing.h"
#include "omnigate/store.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/util.h"

#define SETTINGS_CACHE 16 /* tenants whose opened settings a worker keeps for its releases */

struct og_queue_metrics {
    uint64_t depth[3]; /* gauge: entries by priority, all instances (sampled) */
    og_m_hist_t lag_us;
    uint64_t throttles[OG_CH__COUNT];
    uint64_t released[OG_CH__COUNT];
};

static const char *const priority_names[] = {"high", "normal", "low"};

static bool channel_label(const void *ctx, int i, const char *v[2])
{
    (void)ctx;
    v[0] = og_channel_name((og_channel_t)i);
    return true;
}

static const og_m_dim_t priorities = {3, {"priority", NULL}, priority_names, NULL};
static const og_m_dim_t channels = {OG_CH__COUNT, {"channel", NULL}, NULL, channel_label};

#define F(field) offsetof(struct og_queue_metrics, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_queue_depth", OG_M_GAUGE, &priorities, NULL, F(depth), OG_M_SUM, NULL, false,
     "Queued and scheduled messages waiting for a channel, by priority, all instances (sampled every 2 s)."},
    {"omnigate_queue_lag_seconds", OG_M_HISTOGRAM, NULL, NULL, F(lag_us), OG_M_SUM, &og_m_latency_s, false,
     "How late queued messages were claimed: claim time minus due time."},
    {"omnigate_queue_throttles_total", OG_M_COUNTER, &channels, NULL, F(throttles), OG_M_SUM, NULL, false,
     "Queued messages' attempts a provider throttled (provider_rate_limited), by channel."},
    {"omnigate_queue_released_total", OG_M_COUNTER, &channels, NULL, F(released), OG_M_SUM, NULL, false,
     "Queued messages handed to a provider, by channel."},
};

const og_m_block_t og_queue_metrics_block = OG_M_BLOCK(struct og_queue_metrics, metrics);

/* A tenant's settings as its releases use them: opened once per version of the text. */
typedef struct settings_entry {
    char tenant_id[37];
    char *text;
    json_t *opened;
} settings_entry_t;

/* Sync sends' calls on one sender since the last tick (og_queue_debit). */
typedef struct debit {
    char tenant_id[37];
    og_channel_t ch;
    char sender[64];
    int cost;
} debit_t;

struct og_queue {
    og_gw_t *gw;
    struct og_queue_metrics *m;
    bool sampler;
    uv_timer_t timer;
    og_db_op_t claim;
    og_db_op_t sample;
    bool claiming, again, sampling, closing, timer_closed;
    /* Outcomes waiting to be written together (OG_QUEUE_DONE_GATHER), oldest first, and the
     * timer that writes them OG_QUEUE_DONE_LINGER_MS after the first. */
    struct rel *held, **held_tail;
    int nheld;
    int recording; /* outcomes submitted and not yet recorded */
    uv_timer_t gather;
    bool gather_closed;
    uint64_t sampled_ms;
    uint64_t abandoned_ms;                /* the last claim that ended dead holders' leases */
    uint64_t started_ms, prev_started_ms; /* the start of the last claim, and of the one before */
    int in_flight;
    /* Due times of scheduled messages this worker committed (og_queue_due), ascending, ms since
     * the epoch: the timer fires at the first. */
    int64_t due[OG_QUEUE_DUE_SLOTS];
    int ndue;
    char lease_s[16], max_s[8], senders_s[8];
    settings_entry_t settings[SETTINGS_CACHE];
    int settings_next;
    debit_t debits[OG_QUEUE_DEBITS];
    int ndebits;
    og_db_op_t debit;
    bool debiting;
    char *debit_text;
    og_db_op_t complete; /* finished batches (og_batch_complete), with the dead-holder check */
    bool completing;
    void (*closed)(void *arg);
    void *closed_arg;
};

/* One released message, from its claim to its outcome's write. */
typedef struct rel {
    og_queue_t *q;
    struct rel *next; /* among the outcomes waiting to be written (og_queue_t.held) */
    og_db_op_t op;
    char tenant_id[37];
    char *reference, *to, *text, *template_json;
    char wa_from[20], sender[20];
    int ch;
    og_stored_attempt_t sa;
    og_attempt_t att;
    bool sent;
    /* Its usage (API.md §22), added to its write batch's tally (sql/030): the message's day, whether
     * the outcome writes its attempt's row for the first time, whether an accepted attempt wins it. */
    char day[OG_USAGE_DAY_TEXT];
    bool first_try, wins;
    og_db_tally_row_t usage;
    char ch_s[8], retry_s[16], latency_s[24], http_s[12];
} rel_t;

static void claim(og_queue_t *q);

static void maybe_closed(og_queue_t *q)
{
    if (!q->closing || !q->timer_closed || !q->gather_closed || q->claiming || q->sampling || q->debiting ||
        q->completing || q->in_flight > 0)
        return;
    free(q->debit_text);
    for (int i = 0; i < SETTINGS_CACHE; i++) {
        free(q->settings[i].text);
        json_decref(q->settings[i].opened);
    }
    void (*closed)(void *) = q->closed;
    void *arg = q->closed_arg;
    free(q);
    closed(arg);
}

static void rel_free(rel_t *r)
{
    og_queue_t *q = r->q;
    og_db_op_clear(&r->op);
    og_stored_clear(&r->sa);
    free(r->reference);
    free(r->to);
    free(r->text);
    free(r->template_json);
    free(r);
    q->in_flight--;
    if (q->closing)
        maybe_closed(q);
    else if (q->in_flight == OG_QUEUE_IN_FLIGHT - OG_QUEUE_CLAIM_MAX)
        claim(q); /* room again for a full claim */
}

/* The opened settings of a tenant whose stored text is `text` (borrowed, valid while the cache
 * keeps it); NULL when the text does not parse or out of memory. */
static const json_t *settings_of(og_queue_t *q, const char *tenant_id, const char *text)
{
    for (int i = 0; i < SETTINGS_CACHE; i++) {
        settings_entry_t *e = &q->settings[i];
        if (e->text != NULL && strcmp(e->tenant_id, tenant_id) == 0) {
            if (strcmp(e->text, text) == 0)
                return e->opened;
            free(e->text);
            json_decref(e->opened);
            *e = (settings_entry_t){0};
        }
    }
    json_t *s = json_loads(text, 0, NULL);
    char *copy = s != NULL ? strdup(text) : NULL;
    if (copy == NULL) {
        json_decref(s);
        return NULL;
    }
    og_seal_key_t key; /* the credentials are clear in memory only */
    og_settings_key(&key, q->gw->w->cfg->secret);
    og_settings_open(s, &key, tenant_id, &q->gw->w->log);
    og_seal_key_clear(&key);
    settings_entry_t *e = &q->settings[q->settings_next];
    q->settings_next = (q->settings_next + 1) % SETTINGS_CACHE;
    free(e->text);
    json_decref(e->opened);
    snprintf(e->tenant_id, sizeof(e->tenant_id), "%s", tenant_id);
    e->text = copy;
    e->opened = s;
    return s;
}

/* ---- the outcome ---------------------------------------------------------------------------- */

static void recorded(og_db_op_t *op, og_db_status_t st)
{
    rel_t *r = op->arg;
    og_queue_t *q = r->q;
    q->recording--;
    if (st != OG_DB_OK)
        og_log(&q->gw->w->log, st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN,
               "queue: recording an attempt failed; its lease will expire and it becomes unknown",
               "\"reference\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"", r->reference, op->sqlstate,
               op->error);
    /* A message that did not go out may wait for its next channel now: claim at once rather than
     * at the next tick (the claim in flight, if any, is followed by another). */
    bool again = st == OG_DB_OK && !r->sent;
    rel_free(r);
    if (again)
        og_queue_wake(q);
}

/* Submits the outcomes waiting, in one turn of the loop: the pool writes them in one write batch
 * (up to OG_DB_MAX_BATCH), one call of queue_done_many. */
static void write_held(og_queue_t *q)
{
    uv_timer_stop(&q->gather);
    rel_t *r = q->held;
    q->held = NULL;
    q->held_tail = &q->held;
    q->nheld = 0;
    while (r != NULL) {
        rel_t *next = r->next;
        r->next = NULL;
        q->recording++;
        og_db_submit(q->gw->db, &r->op);
        r = next;
    }
}

static void on_gather(uv_timer_t *t)
{
    write_held(container_of(t, og_queue_t, gather));
}

/* An outcome ready to write: with the others of the next OG_QUEUE_DONE_LINGER_MS, or at once once
 * OG_QUEUE_DONE_GATHER wait, every message this worker has at providers has answered, or the
 * worker is closing. Each set-form call has a fixed cost (its statements' start and end,
 * whatever their rows) that a bigger write batch shares: the drain's outcomes otherwise go in
 * batches as small as the pool's group commit makes them (docs/performance.md). The lease
 * covers the wait (messaging/budget.h: seconds). */
static void hold(og_queue_t *q, rel_t *r)
{
    *q->held_tail = r;
    q->held_tail = &r->next;
    q->nheld++;
    if (q->nheld >= OG_QUEUE_DONE_GATHER || q->nheld >= q->in_flight - q->recording || q->closing)
        write_held(q);
    else if (q->nheld == 1)
        uv_timer_start(&q->gather, on_gather, OG_QUEUE_DONE_LINGER_MS, 0);
}

static void attempted(og_attempt_t *a)
{
    rel_t *r = a->arg;
    og_attempt_result_t *res = &a->result;
    og_stored_result_fix(&r->sa, res);
    bool throttled = !res->sent && res->error_code == OG_ERR_PROVIDER_RATE_LIMITED;
    if (throttled && r->q->m != NULL)
        og_metrics_add(&r->q->m->throttles[r->sa.ch], 1);
    r->sent = res->sent;
    snprintf(r->retry_s, sizeof(r->retry_s), "%u", res->retry_after_s * 1000u);
    snprintf(r->latency_s, sizeof(r->latency_s), "%llu", (unsigned long long)(res->latency_us / 1000));
    snprintf(r->http_s, sizeof(r->http_s), "%d", res->http_status);
    og_db_op_t *op = &r->op;
    int n = 0;
    /* First: the statement a write batch's releases share (its set form, queue_done_many). */
    og_q_queue_done(
        &op->stmts[n++],
        &(og_q_queue_done_t){.tenant_id = r->tenant_id,
                             .reference = r->reference,
                             .ch = r->ch_s,
                             .owner = og_jobs_owner(r->q->gw->jobs),
                             .outcome = res->sent   ? "sent"
                                        : throttled ? "throttled"
                                                    : "failed",
                             .provider_id = res->sent ? res->provider_message_id : NULL,
                             .error_code = res->sent ? NULL : res->error_code,
                             .error_message = res->sent ? NULL : res->error_message,
                             .provider_code = !res->sent && res->provider_code[0] ? res->provider_code : NULL,
                             .http_status = res->http_status ? r->http_s : NULL,
                             .latency_ms = r->latency_s,
                             .retry_ms = throttled && res->retry_after_s ? r->retry_s : NULL,
                             .cost_micros = og_stored_cost_micros(&r->sa, res->sent),
                             .currency = og_stored_cost_currency(&r->sa, res->sent),
                             .sms_equiv_micros = og_stored_sms_equiv_micros(&r->sa, res->sent)});
    n += og_stored_sms_stmt(&r->sa, res, op, n);
    op->nstmts = n;
    /* Merged into queue_done_many, the release is counted by the write batch's tally (queue_done,
     * alone, counts for itself): its attempt when its row is new (a retry's row written again is
     * attempts_usage_changed's, sql/024), its win either way. */
    og_usage_attempt_row(&r->usage, r->tenant_id, r->day, r->sa.ch, res->sent, &r->sa.cost, r->wins,
                         &r->sa.sms_equiv);
    if (!r->first_try)
        og_usage_win_only(&r->usage);
    op->tally = &r->usage;
    op->ntally = 1;
    op->write = true;
    op->background = true; /* never in a request's transaction */
    op->done = recorded;
    op->arg = r;
    hold(r->q, r);
}

/* ---- the claim -------------------------------------------------------------------------------- */

/* Meta's template object of a claimed message's template (sql/023: {"name", "language",
 * "meta", "category"?}), malloc'd, and its category into *category; NULL for a free text (or
 * out of memory: the attempt then sends the text). */
static char *claimed_template(const char *text, og_rate_category_t *category)
{
    if (text[0] == '\0')
        return NULL;
    json_t *t = json_loads(text, 0, NULL);
    json_t *meta = json_object_get(t, "meta");
    char *out = meta != NULL ? json_dumps(meta, JSON_COMPACT) : NULL;
    if (!og_rate_category_parse(json_string_value(json_object_get(t, "category")), category))
        *category = OG_CAT_NONE;
    json_decref(t);
    return out;
}

static char *dup_col(const PGresult *res, int row, int col)
{
    return strdup(PQgetvalue(res, row, col));
}

/* The tenant's settings of row `i` of a claim: a claim returns them with the first of each
 * tenant's messages only (og_queue_claim, sql/019). */
static const char *settings_text(const PGresult *res, int i)
{
    const char *tenant_id = PQgetvalue(res, i, OG_C_QUEUE_CLAIM_TENANT_ID);
    for (int j = i; j >= 0; j--) {
        const char *text = PQgetvalue(res, j, OG_C_QUEUE_CLAIM_SETTINGS);
        if (text[0] && strcmp(PQgetvalue(res, j, OG_C_QUEUE_CLAIM_TENANT_ID), tenant_id) == 0)
            return text;
    }
    return ""; /* does not parse: not released (its lease expires) */
}

/* Row `i` of a claim: its lease is committed; call its provider. */
static void release(og_queue_t *q, const PGresult *res, int i)
{
    og_channel_t ch;
    rel_t *r = calloc(1, sizeof(*r));
    const char *reference = PQgetvalue(res, i, OG_C_QUEUE_CLAIM_REFERENCE);
    const json_t *settings =
        settings_of(q, PQgetvalue(res, i, OG_C_QUEUE_CLAIM_TENANT_ID), settings_text(res, i));
    if (r == NULL || settings == NULL ||
        !og_channel_parse(PQgetvalue(res, i, OG_C_QUEUE_CLAIM_CHANNEL), &ch) ||
        (r->reference = dup_col(res, i, OG_C_QUEUE_CLAIM_REFERENCE)) == NULL ||
        (r->to = dup_col(res, i, OG_C_QUEUE_CLAIM_TO)) == NULL ||
        (r->text = dup_col(res, i, OG_C_QUEUE_CLAIM_TEXT)) == NULL) {
        /* Its lease expires and it becomes unknown: never sent twice. */
        og_log(&q->gw->w->log, OG_LOG_ERROR, "queue: cannot release a claimed message",
               "\"reference\":\"%s\"", reference);
        if (r != NULL) {
            free(r->reference);
            free(r->to);
            free(r);
        }
        return;
    }
    q->in_flight++;
    r->q = q;
    snprintf(r->tenant_id, sizeof(r->tenant_id), "%s", PQgetvalue(res, i, OG_C_QUEUE_CLAIM_TENANT_ID));
    snprintf(r->wa_from, sizeof(r->wa_from), "%s", PQgetvalue(res, i, OG_C_QUEUE_CLAIM_WA_FROM));
    snprintf(r->sender, sizeof(r->sender), "%s", PQgetvalue(res, i, OG_C_QUEUE_CLAIM_SENDER));
    og_rate_category_t category = OG_CAT_NONE;
    r->template_json = claimed_template(PQgetvalue(res, i, OG_C_QUEUE_CLAIM_TEMPLATE), &category);
    r->ch = atoi(PQgetvalue(res, i, OG_C_QUEUE_CLAIM_CH));
    snprintf(r->day, sizeof(r->day), "%s", PQgetvalue(res, i, OG_C_QUEUE_CLAIM_DAY));
    r->first_try = PQgetvalue(res, i, OG_C_QUEUE_CLAIM_FIRST_TRY)[0] == 't';
    r->wins = PQgetvalue(res, i, OG_C_QUEUE_CLAIM_WINS)[0] == 't';
    snprintf(r->ch_s, sizeof(r->ch_s), "%d", r->ch);
    if (q->m != NULL) {
        og_metrics_observe(&q->m->lag_us, &og_m_latency_s,
                           strtoull(PQgetvalue(res, i, OG_C_QUEUE_CLAIM_LAG_MS), NULL, 10) * 1000);
        og_metrics_add(&q->m->released[ch], 1);
    }
    r->sa = (og_stored_attempt_t){.tenant_id = r->tenant_id,
                                  .reference = r->reference,
                                  .to = r->to,
                                  .text = r->text,
                                  .wa_from = r->wa_from,
                                  .sender = r->sender,
                                  .template_json = r->template_json,
                                  .settings = settings,
                                  .category = category,
                                  .rates = og_consent_rates(q->gw->consent),
                                  .ch = ch,
                                  .seq = r->ch};
    og_stored_params(&r->sa); /* the settings are borrowed until here: the cache may change later */
    r->att = (og_attempt_t){.done = attempted, .arg = r};
    og_stored_start(q->gw->consent, &q->gw->prov, &r->sa, &r->att);
}

static void on_tick(uv_timer_t *t);

/* Forgets the due times a claim starting now covers. */
static void drop_due(og_queue_t *q, int64_t now)
{
    int k = 0;
    while (k < q->ndue && q->due[k] + OG_QUEUE_DUE_MARGIN_MS <= now)
        k++;
    memmove(q->due, q->due + k, sizeof(q->due[0]) * (size_t)(q->ndue - k));
    q->ndue -= k;
}

/* Milliseconds until the first known due time (and its margin), at most `ms`. */
static uint64_t until_due(const og_queue_t *q, int64_t now, uint64_t ms)
{
    if (q->ndue == 0)
        return ms;
    int64_t d = q->due[0] + OG_QUEUE_DUE_MARGIN_MS - now;
    return d <= 0 ? 0 : (uint64_t)d < ms ? (uint64_t)d : ms;
}

/* The next claim in about `ms` (jittered by +-25%, so that workers spread out), or at the first
 * due time this worker knows of when that comes first; never in 0 ms: libuv (1.44) runs a timer
 * started at 0 ms from its own callback again in the same pass, without polling in between, so a
 * claim that cannot run and schedules itself at once would spin there, deaf to requests,
 * signals and its providers' answers (test_queue.py's test_worker_at_its_in_flight_cap_keeps_...,
 * test_db_deadline.py's test_due_time_passing_with_the_database_unreachable_...). */
static void schedule_in(og_queue_t *q, uint64_t ms)
{
    if (q->closing)
        return;
    uint32_t jitter;
    og_ids_random(&jitter, sizeof(jitter));
    ms = ms * 3 / 4 + jitter % (ms / 2 + 1);
    uint64_t in = until_due(q, (int64_t)og_ids_now_ms(), ms);
    uv_timer_start(&q->timer, on_tick, in > 0 ? in : 1, 0);
}

static void schedule(og_queue_t *q)
{
    schedule_in(q, OG_QUEUE_TICK_MS);
}

/* After a claim that took `rows` (fewer than a full claim: its senders' tokens or due messages
 * ran out): the next one when about half a claim's worth has come due again at the pace this
 * one found (rows since the previous claim started), between OG_QUEUE_PACED_MIN_MS and a tick.
 * A sender paced at 1,000/s is then released about 32 at a time every 32 ms instead of 200 at
 * once every tick, which the sync sends of the same instances would wait behind. */
static uint64_t paced_delay(const og_queue_t *q, int rows)
{
    uint64_t since = q->prev_started_ms != 0 ? q->started_ms - q->prev_started_ms : OG_QUEUE_TICK_MS;
    uint64_t ms = since * (OG_QUEUE_CLAIM_MAX / 2) / (uint64_t)rows;
    return ms < OG_QUEUE_PACED_MIN_MS ? OG_QUEUE_PACED_MIN_MS : ms > OG_QUEUE_TICK_MS ? OG_QUEUE_TICK_MS : ms;
}

static void claimed(og_db_op_t *op, og_db_status_t st)
{
    og_queue_t *q = container_of(op, og_queue_t, claim);
    q->claiming = false;
    int rows = 0;
    if (st != OG_DB_OK) {
        og_log(&q->gw->w->log, st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN, "queue: claiming failed",
               "\"sqlstate\":\"%s\",\"error\":\"%s\"", op->sqlstate, op->error);
    } else {
        const PGresult *res = op->res[0];
        rows = PQntuples(res);
        for (int i = 0; i < rows; i++)
            release(q, res, i);
    }
    og_db_op_clear(op);
    if (q->closing) {
        maybe_closed(q);
        return;
    }
    /* A full batch: more is due now. */
    if (st == OG_DB_OK && (rows == OG_QUEUE_CLAIM_MAX || q->again)) {
        q->again = false;
        claim(q);
        return;
    }
    schedule_in(q, st == OG_DB_OK && rows > 0 ? paced_delay(q, rows) : OG_QUEUE_TICK_MS);
}

static void batches_completed(og_db_op_t *op, og_db_status_t st)
{
    og_queue_t *q = container_of(op, og_queue_t, complete);
    q->completing = false;
    if (st != OG_DB_OK)
        og_log(&q->gw->w->log, st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN,
               "queue: completing batches failed", "\"sqlstate\":\"%s\",\"error\":\"%s\"", op->sqlstate,
               op->error);
    og_db_op_clear(op);
    if (q->closing)
        maybe_closed(q);
}

/* Batches none of whose messages waits any more get their completedAt and event (API.md §20),
 * as often as dead holders' leases are ended: within about a second of their last message. */
static void complete_batches(og_queue_t *q)
{
    if (q->completing)
        return;
    q->completing = true;
    q->complete = (og_db_op_t){.nstmts = 1, .write = true, .background = true, .done = batches_completed};
    og_q_batch_complete(&q->complete.stmts[0], &(og_q_batch_complete_t){.max = OG_BATCH_COMPLETE_MAX_S});
    og_db_submit(q->gw->db, &q->complete);
}

static void claim(og_queue_t *q)
{
    if (q->closing)
        return;
    if (q->claiming) {
        q->again = true;
        return;
    }
    /* A full claim or none: near the in-flight cap, claims asking for the few places each
     * outcome frees would run back to back, each paying a claim's fixed cost for a handful of
     * messages; rel_free claims again once a full claim's room is free. */
    /* Nor before this worker's copy of the opt-outs is loaded (consent/consent.h): a message
     * released then could go to a number that opted out while it waited. */
    uint64_t now = og_ids_now_ms();
    /* The due times passed are served by whichever claim runs next (it takes all that is due);
     * dropped here too, so that a claim that cannot run now waits a tick for the database, the
     * opt-outs or room (rel_free claims as soon as there is) instead of coming back at once. */
    drop_due(q, (int64_t)now);
    if (OG_QUEUE_IN_FLIGHT - q->in_flight < OG_QUEUE_CLAIM_MAX || !og_db_ready(q->gw->db) ||
        !og_consent_ready(q->gw->consent)) {
        schedule(q);
        return;
    }
    q->prev_started_ms = q->started_ms;
    q->started_ms = now;
    q->claiming = true;
    uv_timer_stop(&q->timer);
    og_db_op_t *op = &q->claim;
    *op = (og_db_op_t){.nstmts = 1, .write = true, .background = true, .done = claimed};
    bool abandon = now - q->abandoned_ms >= OG_QUEUE_ABANDON_MS;
    if (abandon) {
        q->abandoned_ms = now;
        complete_batches(q);
    }
    og_q_queue_claim(&op->stmts[0], &(og_q_queue_claim_t){.owner = og_jobs_owner(q->gw->jobs),
                                                          .lease_ms = q->lease_s,
                                                          .max = q->max_s,
                                                          .senders = q->senders_s,
                                                          .abandon = abandon ? "true" : "false"});
    og_db_submit(q->gw->db, op);
}

/* ---- the depth gauges --------------------------------------------------------------------- */

static void sampled(og_db_op_t *op, og_db_status_t st)
{
    og_queue_t *q = container_of(op, og_queue_t, sample);
    q->sampling = false;
    if (st == OG_DB_OK && q->m != NULL) {
        uint64_t depth[3] = {0};
        const PGresult *res = op->res[0];
        for (int i = 0; i < PQntuples(res); i++) {
            int p = atoi(PQgetvalue(res, i, OG_C_QUEUE_DEPTH_PRIORITY));
            if (p >= 0 && p < 3)
                depth[p] = strtoull(PQgetvalue(res, i, OG_C_QUEUE_DEPTH_DEPTH), NULL, 10);
        }
        for (int p = 0; p < 3; p++)
            og_metrics_gauge(&q->m->depth[p], depth[p]);
    }
    og_db_op_clear(op);
    if (q->closing)
        maybe_closed(q);
}

static void sample(og_queue_t *q)
{
    uint64_t now = og_ids_now_ms();
    if (!q->sampler || q->sampling || now - q->sampled_ms < OG_QUEUE_SAMPLE_MS || !og_db_ready(q->gw->db))
        return;
    q->sampled_ms = now;
    q->sampling = true;
    q->sample = (og_db_op_t){.nstmts = 1, .done = sampled};
    og_q_queue_depth(&q->sample.stmts[0]);
    og_db_submit(q->gw->db, &q->sample);
}

/* ---- sync sends' debits ----------------------------------------------------------------------- */

static void debited(og_db_op_t *op, og_db_status_t st)
{
    og_queue_t *q = container_of(op, og_queue_t, debit);
    if (st != OG_DB_OK) /* the calls were made; the buckets are a little fuller than they should be */
        og_log(&q->gw->w->log, OG_LOG_WARN, "queue: recording sync sends against their senders failed",
               "\"sqlstate\":\"%s\",\"error\":\"%s\"", op->sqlstate, op->error);
    og_db_op_clear(op);
    free(q->debit_text);
    q->debit_text = NULL;
    q->debiting = false;
    if (q->closing)
        maybe_closed(q);
}

static void flush_debits(og_queue_t *q)
{
    if (q->ndebits == 0 || q->debiting || !og_db_ready(q->gw->db))
        return;
    og_jw_t w;
    og_jw_init(&w, 128 * (size_t)q->ndebits);
    og_jw_array(&w);
    for (int i = 0; i < q->ndebits; i++) {
        og_jw_object(&w);
        og_jw_kstring(&w, "t", q->debits[i].tenant_id);
        og_jw_kstring(&w, "c", og_channel_name(q->debits[i].ch));
        og_jw_kstring(&w, "s", q->debits[i].sender);
        og_jw_kint(&w, "n", q->debits[i].cost);
        og_jw_object_end(&w);
    }
    og_jw_array_end(&w);
    if ((q->debit_text = og_jw_finish(&w, NULL)) == NULL)
        return; /* kept for the next tick */
    q->ndebits = 0;
    q->debiting = true;
    q->debit = (og_db_op_t){.nstmts = 1, .write = true, .background = true, .done = debited};
    og_q_queue_debit(&q->debit.stmts[0], &(og_q_queue_debit_t){.debits = q->debit_text});
    og_db_submit(q->gw->db, &q->debit);
}

void og_queue_debit(og_queue_t *q, const char *tenant_id, og_channel_t ch, const char *sender,
                    size_t segments, const og_attempt_result_t *r)
{
    if (q == NULL || q->closing || sender == NULL || r->http_status == 0)
        return;
    int cost = og_pacing_cost(ch, segments);
    for (int i = 0; i < q->ndebits; i++) {
        debit_t *d = &q->debits[i];
        if (d->ch == ch && strcmp(d->sender, sender) == 0 && strcmp(d->tenant_id, tenant_id) == 0) {
            d->cost += cost;
            return;
        }
    }
    if (q->ndebits == OG_QUEUE_DEBITS)
        return; /* more senders than a tick gathers: the rest count from the next one */
    debit_t *d = &q->debits[q->ndebits++];
    snprintf(d->tenant_id, sizeof(d->tenant_id), "%s", tenant_id);
    snprintf(d->sender, sizeof(d->sender), "%s", sender);
    d->ch = ch;
    d->cost = cost;
}

static void on_tick(uv_timer_t *t)
{
    og_queue_t *q = container_of(t, og_queue_t, timer);
    sample(q);
    flush_debits(q);
    claim(q);
}

og_queue_t *og_queue_start(og_gw_t *gw, bool sampler)
{
    og_queue_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->gw = gw;
    q->sampler = sampler;
    q->m = og_worker_metrics(gw->w, &og_queue_metrics_block);
    /* A lease covers one attempt and the writes around it (messaging/budget.h). */
    snprintf(q->lease_s, sizeof(q->lease_s), "%u", og_send_budget_ms(gw->w->cfg, 1));
    snprintf(q->max_s, sizeof(q->max_s), "%d", OG_QUEUE_CLAIM_MAX);
    snprintf(q->senders_s, sizeof(q->senders_s), "%d", OG_QUEUE_CLAIM_SENDERS);
    uv_timer_init(&gw->w->loop, &q->timer);
    uv_unref((uv_handle_t *)&q->timer);
    q->held_tail = &q->held;
    uv_timer_init(&gw->w->loop, &q->gather);
    schedule(q);
    return q;
}

void og_queue_wake(og_queue_t *q)
{
    if (q != NULL)
        claim(q);
}

void og_queue_due(og_queue_t *q, int64_t due_ms)
{
    if (q == NULL || q->closing)
        return;
    int64_t now = (int64_t)og_ids_now_ms();
    if (due_ms + OG_QUEUE_DUE_MARGIN_MS <= now) {
        claim(q);
        return;
    }
    /* Kept in order, once; when every slot is taken, the latest gives way to an earlier one. */
    int k = 0;
    while (k < q->ndue && q->due[k] < due_ms)
        k++;
    if ((k < q->ndue && q->due[k] == due_ms) || k == OG_QUEUE_DUE_SLOTS)
        return;
    if (q->ndue == OG_QUEUE_DUE_SLOTS)
        q->ndue--;
    memmove(q->due + k + 1, q->due + k, sizeof(q->due[0]) * (size_t)(q->ndue - k));
    q->due[k] = due_ms;
    q->ndue++;
    /* The timer moves earlier only: a claim in flight schedules the next one when it ends. */
    uint64_t ms = until_due(q, now, UINT64_MAX);
    if (k == 0 && !q->claiming &&
        (!uv_is_active((uv_handle_t *)&q->timer) || uv_timer_get_due_in(&q->timer) > ms))
        uv_timer_start(&q->timer, on_tick, ms, 0);
}

static void timer_closed(uv_handle_t *h)
{
    og_queue_t *q = container_of((uv_timer_t *)h, og_queue_t, timer);
    q->timer_closed = true;
    maybe_closed(q);
}

static void gather_closed(uv_handle_t *h)
{
    og_queue_t *q = container_of((uv_timer_t *)h, og_queue_t, gather);
    q->gather_closed = true;
    maybe_closed(q);
}

void og_queue_close(og_queue_t *q, void (*closed)(void *arg), void *arg)
{
    q->closing = true;
    q->closed = closed;
    q->closed_arg = arg;
    write_held(q); /* what answered is written now; what is at providers, as it answers (hold) */
    uv_close((uv_handle_t *)&q->timer, timer_closed);
    uv_close((uv_handle_t *)&q->gather, gather_closed);
}
