/*
 * Durable steps. See include/data/omnigate/jobs.h; the table and the closing function are
 * sql/006_steps.sql, the statements sql/queries/steps.sql.
 *
 * One claim is in flight at a time per worker. A claim that comes back full means more may be
 * due: the next one goes out at once (as long as slots are free); otherwise the timer, a
 * notification or a wake-up starts the next.
 */
#include "omnigate/jobs.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/ids.h"
#include "omnigate/store.h"
#include "omnigate/util.h"

#define TICK_MIN_MS  500
#define TICK_JITTER  500
#define SAMPLE_EVERY 5 /* ticks between two counts of the steps due (sampler only) */
#define CLAIM_BATCH  32

typedef struct kind {
    char name[16];
    uint32_t lease_ms;
    og_step_run_fn fn;
    void *arg;
    int metric;  /* index into the app's kinds (og_jobs_kinds_t), -1 when unlabelled */
    int max;     /* og_jobs_limit: at most this many running on this worker */
    int running; /* steps of this kind running now */
} kind_t;

struct og_jobs {
    uv_loop_t *loop;
    og_db_t *db;
    og_log_t *log;
    og_jobs_metrics_t *m;
    const og_jobs_kinds_t *labels; /* the app's kinds, which the metrics label by */
    char owner[96];
    bool sampler;

    kind_t kinds[OG_JOBS_MAX_KINDS];
    int nkinds;
    char kinds_lit[OG_JOBS_MAX_KINDS * 18 + 3]; /* {a,b}: the claim's $2, the kinds with room */
    char leases_lit[OG_JOBS_MAX_KINDS * 12 + 3];

    uv_timer_t timer;
    bool started, closing, timer_closed;
    unsigned ticks;

    og_db_op_t claim_op; /* one claim in flight at a time */
    bool claiming;
    bool again; /* a wake-up came while claiming: claim once more */
    char limit_s[12];
    og_db_op_t due_op;
    bool counting;

    int running;
    void (*notify_fn)(void *arg, const char *payload); /* og_jobs_on_notify */
    void *notify_arg;
    void (*closed)(void *arg);
    void *closed_arg;
};

static void claim(og_jobs_t *j);

static void maybe_closed(og_jobs_t *j)
{
    if (j->closing && j->timer_closed && j->running == 0 && !j->claiming && !j->counting &&
        j->closed != NULL) {
        void (*cb)(void *) = j->closed;
        j->closed = NULL;
        cb(j->closed_arg);
    }
}

static void gauge_running(og_jobs_t *j)
{
    if (j->m != NULL)
        og_metrics_gauge(&j->m->steps_running, (uint64_t)j->running);
}

static int kind_of(const og_jobs_t *j, const char *name)
{
    for (int i = 0; i < j->nkinds; i++)
        if (strcmp(j->kinds[i].name, name) == 0)
            return i;
    return -1;
}

/* The index of `name` in the app's kinds (the steps metrics' labels), or -1. */
static int metric_kind(const og_jobs_t *j, const char *name)
{
    for (int i = 0; j->labels != NULL && i < j->labels->n && i < OG_JOBS_MAX_KINDS; i++)
        if (strcmp(j->labels->names[i], name) == 0)
            return i;
    return -1;
}

static char *dup_or_empty(const char *s)
{
    return strdup(s != NULL ? s : "");
}

/* Turns row r of a claim into a step and hands it to its runner. */
static void start_step(og_jobs_t *j, const PGresult *res, int r)
{
    int k = kind_of(j, PQgetvalue(res, r, OG_C_STEP_CLAIM_KIND));
    og_step_t *s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->tenant_id = dup_or_empty(PQgetvalue(res, r, OG_C_STEP_CLAIM_TENANT_ID));
        s->reference = dup_or_empty(PQgetvalue(res, r, OG_C_STEP_CLAIM_REFERENCE));
        s->payload = dup_or_empty(PQgetvalue(res, r, OG_C_STEP_CLAIM_PAYLOAD));
    }
    if (s == NULL || s->tenant_id == NULL || s->reference == NULL || s->payload == NULL || k < 0) {
        /* Out of memory (or a kind we did not claim): the lease expires and someone retries. */
        og_log(j->log, OG_LOG_ERROR, "step not started", "\"step\":\"%s\"",
               PQgetvalue(res, r, OG_C_STEP_CLAIM_ID));
        if (s != NULL) {
            free(s->tenant_id);
            free(s->reference);
            free(s->payload);
            free(s);
        }
        return;
    }
    s->jobs = j;
    snprintf(s->id, sizeof(s->id), "%s", PQgetvalue(res, r, OG_C_STEP_CLAIM_ID));
    s->kind = k;
    s->claims = atoi(PQgetvalue(res, r, OG_C_STEP_CLAIM_CLAIMS));
    s->lag_ms = strtoull(PQgetvalue(res, r, OG_C_STEP_CLAIM_LAG_MS), NULL, 10);
    j->running++;
    j->kinds[k].running++;
    gauge_running(j);
    if (j->m != NULL)
        og_metrics_observe(&j->m->step_lag, &og_m_latency_s, s->lag_ms * 1000);
    j->kinds[k].fn(s, j->kinds[k].arg);
}

static void claimed(og_db_op_t *op, og_db_status_t st)
{
    og_jobs_t *j = container_of(op, og_jobs_t, claim_op);
    int n = 0;
    if (st == OG_DB_OK && op->res[0] != NULL) {
        n = PQntuples(op->res[0]);
        for (int r = 0; r < n && !j->closing; r++)
            start_step(j, op->res[0], r);
    } else if (st == OG_DB_ERROR) {
        og_log(j->log, OG_LOG_ERROR, "claiming steps failed", "\"sqlstate\":\"%s\",\"error\":\"%s\"",
               op->sqlstate, op->error);
    }
    og_db_op_clear(op);
    j->claiming = false;
    /* A full batch: more may be due. */
    if (j->again || n == atoi(j->limit_s)) {
        j->again = false;
        claim(j);
    }
    maybe_closed(j);
}

static void claim(og_jobs_t *j)
{
    if (j->closing || j->nkinds == 0)
        return;
    if (j->claiming) {
        j->again = true;
        return;
    }
    int free_slots = OG_JOBS_MAX_RUNNING - j->running;
    if (free_slots <= 0 || !og_db_ready(j->db))
        return;
    /* Only the kinds with room, and no more steps than the tightest of them can take. */
    char *p = j->kinds_lit, *q = j->leases_lit;
    p += sprintf(p, "{");
    q += sprintf(q, "{");
    int nk = 0;
    for (int i = 0; i < j->nkinds; i++) {
        int room = j->kinds[i].max - j->kinds[i].running;
        if (room <= 0)
            continue;
        if (room < free_slots)
            free_slots = room;
        p += sprintf(p, "%s%s", nk ? "," : "", j->kinds[i].name);
        q += sprintf(q, "%s%u", nk ? "," : "", j->kinds[i].lease_ms);
        nk++;
    }
    strcpy(p, "}");
    strcpy(q, "}");
    if (nk == 0)
        return;
    snprintf(j->limit_s, sizeof(j->limit_s), "%d", free_slots < CLAIM_BATCH ? free_slots : CLAIM_BATCH);
    j->claiming = true;
    og_db_op_t *op = &j->claim_op;
    *op = (og_db_op_t){.nstmts = 1, .write = true, .done = claimed};
    og_q_step_claim(&op->stmts[0], &(og_q_step_claim_t){.owner = j->owner,
                                                        .kinds = j->kinds_lit,
                                                        .leases = j->leases_lit,
                                                        .limit = j->limit_s});
    og_db_submit(j->db, op);
}

static void counted(og_db_op_t *op, og_db_status_t st)
{
    og_jobs_t *j = container_of(op, og_jobs_t, due_op);
    if (st == OG_DB_OK && op->res[0] != NULL && PQntuples(op->res[0]) == 1 && j->m != NULL)
        og_metrics_gauge(&j->m->steps_due, strtoull(PQgetvalue(op->res[0], 0, OG_C_STEPS_DUE_DUE), NULL, 10));
    og_db_op_clear(op);
    j->counting = false;
    maybe_closed(j);
}

static void arm(og_jobs_t *j);

static void on_tick(uv_timer_t *t)
{
    og_jobs_t *j = container_of(t, og_jobs_t, timer);
    claim(j);
    if (j->sampler && ++j->ticks % SAMPLE_EVERY == 0 && !j->counting && og_db_ready(j->db)) {
        j->counting = true;
        j->due_op = (og_db_op_t){.nstmts = 1, .done = counted};
        og_q_steps_due(&j->due_op.stmts[0]);
        og_db_submit(j->db, &j->due_op);
    }
    arm(j);
}

/* The next tick in 0.5 to 1 s: workers and instances started together drift apart. */
static void arm(og_jobs_t *j)
{
    uint16_t r;
    og_ids_random(&r, sizeof(r));
    uv_timer_start(&j->timer, on_tick, TICK_MIN_MS + r % TICK_JITTER, 0);
}

static void on_notify(void *arg, const char *channel, const char *payload)
{
    og_jobs_t *j = arg;
    /* payload NULL: (re)connected, notifications may have been missed. Either way: look. */
    claim(j);
    if (j->notify_fn != NULL && !j->closing)
        j->notify_fn(j->notify_arg, payload);
}

void og_jobs_on_notify(og_jobs_t *j, void (*fn)(void *arg, const char *payload), void *arg)
{
    j->notify_fn = fn;
    j->notify_arg = arg;
}

og_jobs_t *og_jobs_new(uv_loop_t *loop, og_db_t *db, og_log_t *log, og_jobs_metrics_t *m,
                       const og_jobs_kinds_t *kinds, const char *owner, bool sampler)
{
    og_jobs_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    *j = (og_jobs_t){.loop = loop, .db = db, .log = log, .m = m, .labels = kinds, .sampler = sampler};
    snprintf(j->owner, sizeof(j->owner), "%s", owner);
    uv_timer_init(loop, &j->timer);
    uv_unref((uv_handle_t *)&j->timer);
    return j;
}

void og_jobs_limit(og_jobs_t *j, int kind, int max)
{
    if (kind >= 0 && kind < j->nkinds && max > 0)
        j->kinds[kind].max = max;
}

const char *og_jobs_owner(const og_jobs_t *j)
{
    return j->owner;
}

bool og_jobs_closing(const og_jobs_t *j)
{
    return j->closing;
}

int og_jobs_register(og_jobs_t *j, const char *name, uint32_t lease_ms, og_step_run_fn fn, void *arg)
{
    if (j->nkinds == OG_JOBS_MAX_KINDS || strlen(name) >= sizeof(j->kinds[0].name) ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz_") != strlen(name) || kind_of(j, name) >= 0)
        return -1;
    kind_t *k = &j->kinds[j->nkinds];
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->lease_ms = lease_ms;
    k->fn = fn;
    k->arg = arg;
    k->metric = metric_kind(j, name);
    k->max = OG_JOBS_MAX_RUNNING;
    j->nkinds++;
    return j->nkinds - 1;
}

void og_jobs_start(og_jobs_t *j)
{
    if (j->started)
        return;
    j->started = true;
    /* Without LISTEN (OMNIGATE_DB_LISTEN=false) nothing is lost, only later: a step made due by
     * another worker waits for this worker's next tick (1 s at most) instead of a notification;
     * the worker that commits a due step still starts it at once (og_jobs_wake). */
    if (!og_db_listen(j->db, "og_steps", on_notify, j))
        og_log(j->log, OG_LOG_INFO, "steps: no LISTEN connection; the timer alone finds due steps", NULL);
    arm(j);
}

void og_jobs_wake(og_jobs_t *j)
{
    claim(j);
}

int og_jobs_close_stmt(og_step_t *s, og_db_op_t *op, int n)
{
    og_q_step_close(&op->stmts[n], &(og_q_step_close_t){.step_id = s->id, .owner = s->jobs->owner});
    return 1;
}

void og_jobs_finish(og_step_t *s, bool ok)
{
    og_jobs_t *j = s->jobs;
    int metric = j->kinds[s->kind].metric;
    if (j->m != NULL && metric >= 0)
        og_metrics_add(ok ? &j->m->steps_done[metric] : &j->m->steps_failed[metric], 1);
    if (!ok)
        og_log(j->log, OG_LOG_WARN, "step failed: left for its lease to expire",
               "\"step\":\"%s\",\"kind\":\"%s\",\"claims\":%d", s->id, j->kinds[s->kind].name, s->claims);
    free(s->tenant_id);
    free(s->reference);
    free(s->payload);
    kind_t *k = &j->kinds[s->kind];
    free(s);
    j->running--;
    k->running--;
    gauge_running(j);
    if (j->closing)
        maybe_closed(j);
    else if (j->running == OG_JOBS_MAX_RUNNING - 1 || k->running == k->max - 1)
        claim(j); /* slots were full: there may be more due */
}

int og_jobs_running(const og_jobs_t *j)
{
    return j->running;
}

static void timer_closed(uv_handle_t *h)
{
    og_jobs_t *j = container_of((uv_timer_t *)h, og_jobs_t, timer);
    j->timer_closed = true;
    maybe_closed(j);
}

void og_jobs_close(og_jobs_t *j, void (*closed)(void *arg), void *arg)
{
    j->closing = true;
    j->closed = closed;
    j->closed_arg = arg;
    uv_close((uv_handle_t *)&j->timer, timer_closed);
}

void og_jobs_free(og_jobs_t *j)
{
    free(j);
}

/* ---- the steps' metric block ----------------------------------------------------------------- */

/* Index i of the app's kinds (ctx: its og_jobs_kinds_t); indexes past its list are no series. */
static bool kind_label(const void *ctx, int i, const char *v[2])
{
    const og_jobs_kinds_t *k = ctx;
    if (k == NULL || i >= k->n)
        return false;
    v[0] = k->names[i];
    return true;
}

static const og_m_dim_t kind_dim = {OG_JOBS_MAX_KINDS, {"kind", NULL}, NULL, kind_label};

#define F(field) offsetof(og_jobs_metrics_t, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_steps_done_total", OG_M_COUNTER, &kind_dim, NULL, F(steps_done), OG_M_SUM, NULL, false,
     "Durable steps finished and closed, by kind."},
    {"omnigate_steps_failed_total", OG_M_COUNTER, &kind_dim, NULL, F(steps_failed), OG_M_SUM, NULL, false,
     "Durable steps whose run failed (left to be claimed again when the lease expires), by kind."},
    {"omnigate_step_lag_seconds", OG_M_HISTOGRAM, NULL, NULL, F(step_lag), OG_M_SUM, &og_m_latency_s, false,
     "How late steps are claimed: claim time minus due time."},
    OG_M_SUMMED("omnigate_steps_running", OG_M_GAUGE, F(steps_running), "Durable steps running now."),
    OG_M_SUMMED("omnigate_steps_due", OG_M_GAUGE, F(steps_due),
                "Durable steps due and not running, all instances (sampled every few seconds)."),
};

const og_m_block_t og_jobs_metrics_block = OG_M_BLOCK(og_jobs_metrics_t, metrics);
