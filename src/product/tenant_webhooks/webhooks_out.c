/*
 * Tenant webhooks out: the `webhook` step runner. See
 * include/product/omnigate/tenant_webhooks/webhooks_out.h; the tables, the triggers that write events and the
 * functions the statements call are sql/011_webhooks_out.sql, the statements sql/queries/webhooks.sql.
 *
 * A run holds one tenant's step. It loads that tenant's due deliveries (a few dozen at a time,
 * leaving out those it already has), tries up to OG_WHOUT_INFLIGHT of them at once, records the
 * finished tries in batches (one write in flight at a time), and loads more while it finds
 * some, until its window closes (OMNIGATE_WEBHOOK_TIMEOUT_MS after its claim) or nothing has
 * been due for LINGER_MS. It ends with og_webhook_release, which schedules the tenant's step
 * again at its next due try. A try lives from its load until its result is committed, so a load
 * never takes it twice. Worker 0 also runs the scheduler that gives tenants with new events
 * their step (og_webhook_schedule: on NOTIFY og_steps 'webhook' and every second), and samples
 * the outbox gauges.
 *
 *   load -> queued -> in flight -> done -> flushing -> freed
 *
 * What a run does not finish (a crash, a lost lease, a failed write) stays due in PostgreSQL
 * and is tried again by the next holder: delivery is at least once, with the same webhook-id.
 */
#include "omnigate/tenant_webhooks/webhooks_out.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "omnigate/http_client.h"
#include "omnigate/ids.h"
#include "omnigate/store.h"
#include "omnigate/util.h"
#include "omnigate/tenant_webhooks/webhooks.h"

#define QUEUE_MAX     128  /* deliveries loaded and not started, at most */
#define LOAD_BELOW    48   /* load more when fewer than this are queued or in flight */
#define ALIVE_MAX     320  /* tries held by a run (queued to being recorded), at most */
#define LINGER_MS     500  /* a run that finds nothing due looks again for this long before it ends */
#define FULL_EVERY_MS 250  /* a load without a floor at least this often */
#define POLL_MIN_MS   5    /* ... first after this long, then twice as long each time ... */
#define POLL_MAX_MS   25   /* ... up to this */
#define TICK_MS       1000 /* worker 0: the scheduler, and every other tick the outbox gauges */
#define LEASE_EXTRA   5000 /* ms of a lease beyond the window and the last try's timeout */

/* ---- metrics ------------------------------------------------------------------------------- */

/* What a try made of its delivery, and the try's HTTP status class (none: no HTTP answer:
 * timeout, connection error, blocked address). */
typedef enum {
    WH_DELIVERED,
    WH_RETRYING, /* failed, another try is scheduled */
    WH_EXHAUSTED,
    WH__COUNT
} wh_outcome_t;
#define WH_CLASSES 5 /* 2xx, 3xx, 4xx, 5xx, none */

typedef struct whout_metrics {
    uint64_t deliveries[WH__COUNT];
    uint64_t tries[WH_CLASSES];
    /* gauges, set by the worker that samples the outbox */
    uint64_t outbox_depth;
    uint64_t outbox_oldest_us;
    uint64_t disabled;
} whout_metrics_t;

static const char *const wh_outcomes[WH__COUNT] = {
    [WH_DELIVERED] = "delivered", [WH_RETRYING] = "retrying", [WH_EXHAUSTED] = "exhausted"};
static const char *const wh_classes[WH_CLASSES] = {"2xx", "3xx", "4xx", "5xx", "none"};

static const og_m_dim_t outcomes = {WH__COUNT, {"outcome", NULL}, wh_outcomes, NULL};
static const og_m_dim_t classes = {WH_CLASSES, {"class", NULL}, wh_classes, NULL};

#define F(field) offsetof(whout_metrics_t, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_webhook_deliveries_total", OG_M_COUNTER, &outcomes, NULL, F(deliveries), OG_M_SUM, NULL, false,
     "Tenant webhook tries by what they made of their delivery: delivered, retrying (failed, another try "
     "scheduled) or exhausted (no try left, or the webhook was disabled)."},
    {"omnigate_webhook_tries_total", OG_M_COUNTER, &classes, NULL, F(tries), OG_M_SUM, NULL, false,
     "Tenant webhook tries by the class of their HTTP status (none: timeout, connection error or blocked "
     "address)."},
    {"omnigate_webhook_outbox_depth", OG_M_GAUGE, NULL, NULL, F(outbox_depth), OG_M_MAX, NULL, false,
     "Webhook events not delivered yet and still to be tried, all instances (sampled every 2 seconds)."},
    {"omnigate_webhook_outbox_oldest_seconds", OG_M_GAUGE, NULL, NULL, F(outbox_oldest_us), OG_M_MAX,
     &og_m_latency_s, false,
     "Age of the oldest webhook event not delivered yet and still to be tried (sampled)."},
    {"omnigate_webhooks_disabled", OG_M_GAUGE, NULL, NULL, F(disabled), OG_M_MAX, NULL, false,
     "Tenant webhooks disabled by a 410 or by 5 days of failures (sampled)."},
};

const og_m_block_t og_whout_metrics_block = OG_M_BLOCK(whout_metrics_t, metrics);

/* ---- state --------------------------------------------------------------------------------- */

struct og_whout {
    og_gw_t *gw;
    whout_metrics_t *m; /* the block in the worker's slot, or NULL */
    og_hc_t *hc;
    og_seal_key_t key; /* opens the webhooks' sealed secrets */
    int kind;
    /* Worker 0 of each instance: the scheduler (og_webhook_schedule) and the outbox gauges. */
    bool scheduler;
    uv_timer_t tick;
    unsigned ticks;
    bool scheduling, again; /* sched_op in flight; run once more when it ends */
    og_db_op_t sched_op;
    bool sampling; /* sample_op in flight */
    og_db_op_t sample_op;
    bool stopping; /* og_whout_close was called */
    int closing;   /* handles (and ops in flight) still closing */
    void (*closed)(void *arg);
    void *closed_arg;
};

typedef enum { T_QUEUED, T_INFLIGHT, T_DONE, T_FLUSHING } try_state_t;

typedef struct wh_run wh_run_t;

/* One try of one delivery. */
typedef struct wh_try {
    wh_run_t *run;
    struct wh_try *next; /* the run's list, in load order */
    try_state_t state;
    og_hc_req_t req;
    long long id;
    char webhook_id[40];
    int tries; /* before this one */
    char *body;
    size_t body_len;
    /* the outcome */
    uint64_t at_ms;
    long http;
    uint64_t latency_ms;
    bool ok;
    const char *error; /* static; NULL on success */
    char message[OG_HC_ERRBUF + 64];
    long long retry_in_ms; /* -1: no try left */
} wh_try_t;

struct wh_run {
    og_step_t *step;
    og_whout_t *wo;
    uint64_t start_by; /* loop time after which no try starts */
    /* Lingering: a run that finds nothing due keeps its step a little and looks again, so a
     * tenant whose events come steadily keeps one run instead of ending and being woken for
     * each (NOTIFY, the scheduler, a claim). The run is freed in the timer's close callback. */
    uv_timer_t poll;
    bool polling;        /* the timer is armed */
    uint64_t last_found; /* loop time a load last found something (or the run started) */
    unsigned backoff_ms;
    char *url;
    char *sealed; /* of the secret `key` comes from, to notice a rotation */
    unsigned char key[OG_WH_KEY_MAX];
    size_t keylen; /* 0: the secret did not open */
    wh_try_t *tries;
    int nqueued, ninflight, ndone, nalive;
    og_db_op_t load_op;
    bool loading;
    bool dry;           /* the last load found nothing */
    bool full;          /* the last load had no floor */
    char floor[40];     /* next_at of the last delivery loaded: the next load's floor (wh_due) */
    uint64_t last_full; /* loop time of the last load without a floor */
    char exclude[ALIVE_MAX * 21 + 3];
    char limit_s[12];
    og_db_op_t flush_op;
    bool flushing;
    char *flush_text;
    bool ending;
    bool gone;   /* the webhook is disabled: start nothing more */
    bool broken; /* a write failed: end, and leave the rest to the next holder */
};

static const long long schedule_s[OG_WHOUT_MAX_TRIES - 1] = {5, 300, 1800, 7200, 18000, 36000, 36000};

long long og_whout_retry_delay_ms(int n, int divisor, unsigned jitter, int http_status, long retry_after_s)
{
    if (n < 1 || n >= OG_WHOUT_MAX_TRIES)
        return -1;
    long long d = schedule_s[n - 1] * 1000 / (divisor > 0 ? divisor : 1);
    d += d / 10 * (long long)(jitter % 65536) / 65535;
    if ((http_status == 429 || http_status == 503) && retry_after_s * 1000LL > d)
        d = retry_after_s * 1000LL;
    return d;
}

static og_log_t *run_log(const wh_run_t *r)
{
    return &r->wo->gw->w->log;
}

static void pump(wh_run_t *r);

static void try_free(wh_try_t *t)
{
    og_hc_req_clear(&t->req);
    free(t->body);
    free(t);
}

static void run_closed(uv_handle_t *h)
{
    free(container_of((uv_timer_t *)h, wh_run_t, poll));
}

static void run_free(wh_run_t *r)
{
    while (r->tries != NULL) {
        wh_try_t *t = r->tries;
        r->tries = t->next;
        try_free(t);
    }
    og_db_op_clear(&r->load_op);
    og_db_op_clear(&r->flush_op);
    free(r->flush_text);
    free(r->url);
    free(r->sealed);
    OPENSSL_cleanse(r->key, sizeof(r->key));
    uv_close((uv_handle_t *)&r->poll, run_closed);
}

/* Removes and frees the tries in state `st`. */
static void drop_tries(wh_run_t *r, try_state_t st)
{
    for (wh_try_t **p = &r->tries; *p != NULL;) {
        wh_try_t *t = *p;
        if (t->state != st) {
            p = &t->next;
            continue;
        }
        *p = t->next;
        r->nalive--;
        try_free(t);
    }
}

static bool stop_starting(const wh_run_t *r)
{
    return r->gone || r->broken || r->ending || og_jobs_closing(r->wo->gw->jobs) ||
           uv_now(&r->wo->gw->w->loop) >= r->start_by;
}

/* ---- recording --------------------------------------------------------------------------------- */

/* The results of the done tries, as wh_record's JSON array; they become T_FLUSHING. NULL when
 * out of memory. */
static char *take_results(wh_run_t *r)
{
    json_t *arr = json_array();
    for (wh_try_t *t = r->tries; t != NULL; t = t->next) {
        if (t->state != T_DONE)
            continue;
        json_array_append_new(
            arr, json_pack("{s:I,s:I,s:o,s:I,s:o,s:o,s:b,s:o}", "id", (json_int_t)t->id, "at_ms",
                           (json_int_t)t->at_ms, "http", t->http > 0 ? json_integer(t->http) : json_null(),
                           "latency_ms", (json_int_t)t->latency_ms, "error",
                           t->error ? json_string(t->error) : json_null(), "message",
                           t->message[0] ? json_string(t->message) : json_null(), "ok", t->ok, "retry_in_ms",
                           t->retry_in_ms >= 0 ? json_integer(t->retry_in_ms) : json_null()));
        t->state = T_FLUSHING;
        r->ndone--;
    }
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return text;
}

static int record_stmt(wh_run_t *r, og_db_op_t *op, int n)
{
    free(r->flush_text);
    r->flush_text = take_results(r);
    og_q_wh_record(&op->stmts[n],
                   &(og_q_wh_record_t){.tenant_id = r->step->tenant_id, .tries = r->flush_text});
    return 1;
}

static void write_failed(wh_run_t *r, og_db_op_t *op, og_db_status_t st, const char *what)
{
    og_log(run_log(r), st == OG_DB_ERROR ? OG_LOG_ERROR : OG_LOG_WARN, what,
           "\"step\":\"%s\",\"tenant\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"", r->step->id,
           r->step->tenant_id, op->sqlstate, op->error);
}

static void flushed(og_db_op_t *op, og_db_status_t st)
{
    wh_run_t *r = op->arg;
    r->flushing = false;
    if (st == OG_DB_OK) {
        if (PQgetvalue(op->res[0], 0, OG_C_WH_RECORD_DISABLED)[0] == 't') {
            og_log(run_log(r), OG_LOG_WARN, "webhook disabled", "\"tenant\":\"%s\"", r->step->tenant_id);
            r->gone = true;
        }
    } else {
        /* Those tries are tried again by a later holder (at least once). */
        write_failed(r, op, st, "recording webhook tries failed");
        r->broken = true;
    }
    og_db_op_clear(op);
    drop_tries(r, T_FLUSHING);
    pump(r);
}

static void flush(wh_run_t *r)
{
    if (r->flushing || r->ndone == 0)
        return;
    og_db_op_t *op = &r->flush_op;
    op->nstmts = record_stmt(r, op, 0);
    if (r->flush_text == NULL) {
        r->broken = true;
        drop_tries(r, T_FLUSHING);
        return;
    }
    r->flushing = true;
    op->write = true;
    op->done = flushed;
    op->arg = r;
    og_db_submit(r->wo->gw->db, op);
}

static void ended(og_db_op_t *op, og_db_status_t st)
{
    wh_run_t *r = op->arg;
    og_step_t *step = r->step;
    og_jobs_t *jobs = r->wo->gw->jobs;
    bool ok = st == OG_DB_OK;
    bool due_now = ok && PQgetvalue(op->res[op->nstmts - 1], 0, OG_C_WH_RELEASE_DUE_NOW)[0] == 't';
    if (!ok)
        write_failed(r, op, st, "ending a webhook step failed");
    run_free(r);
    og_jobs_finish(step, ok);
    if (due_now)
        og_jobs_wake(jobs);
}

/* Nothing runs any more: record what is done, release the step. */
static void end(wh_run_t *r)
{
    r->ending = true;
    drop_tries(r, T_QUEUED); /* still due in PostgreSQL: the release schedules them */
    og_db_op_t *op = &r->flush_op;
    og_db_op_clear(op);
    int n = 0;
    if (r->ndone > 0) {
        n += record_stmt(r, op, n);
        if (r->flush_text == NULL) { /* out of memory: the lease expires, another holder goes on */
            og_step_t *step = r->step;
            run_free(r);
            og_jobs_finish(step, false);
            return;
        }
    }
    og_q_wh_release(&op->stmts[n], &(og_q_wh_release_t){.step_id = r->step->id,
                                                        .owner = og_jobs_owner(r->wo->gw->jobs),
                                                        .tenant_id = r->step->tenant_id});
    op->nstmts = n + 1;
    op->write = true;
    op->done = ended;
    op->arg = r;
    og_db_submit(r->wo->gw->db, op);
}

/* ---- trying ------------------------------------------------------------------------------------ */

static const char *try_error(const og_hc_req_t *q, bool answered, char *message, size_t cap)
{
    switch (q->result) {
    case OG_HC_OK:
    case OG_HC_TOO_LARGE:
        if (answered) {
            snprintf(message, cap, "HTTP %ld", q->http_status);
            return "http_error";
        }
        snprintf(message, cap, "%s", q->errbuf);
        return "error";
    case OG_HC_TIMEOUT:
        snprintf(message, cap, "no answer in %d ms", q->timeout_ms > 0 ? (int)q->timeout_ms : 0);
        return "timeout";
    case OG_HC_UNREACHABLE:
        snprintf(message, cap, "%s", q->errbuf);
        return "unreachable";
    case OG_HC_BLOCKED:
        snprintf(message, cap,
                 "the host has only non-public addresses (OMNIGATE_WEBHOOK_ALLOW_PRIVATE is off)");
        return "blocked_address";
    case OG_HC_ERROR:
    case OG_HC_CANCELLED:
        break;
    }
    snprintf(message, cap, "%s", q->errbuf);
    return "error";
}

/* A try is over (t->ok, error, http set): its retry, metrics, and the run goes on. */
static void try_over(wh_try_t *t)
{
    wh_run_t *r = t->run;
    const og_config_t *cfg = r->wo->gw->w->cfg;
    t->retry_in_ms = -1;
    if (!t->ok && t->http != 410) {
        uint16_t jitter;
        og_ids_random(&jitter, sizeof(jitter));
        t->retry_in_ms = og_whout_retry_delay_ms(t->tries + 1, cfg->webhook_retry_divisor, jitter,
                                                 (int)t->http, t->req.retry_after_s);
    }
    wh_outcome_t outcome = t->ok ? WH_DELIVERED : t->retry_in_ms >= 0 ? WH_RETRYING : WH_EXHAUSTED;
    whout_metrics_t *m = r->wo->m;
    if (m != NULL) {
        og_metrics_add(&m->tries[t->http >= 200 && t->http < 600 ? t->http / 100 - 2 : WH_CLASSES - 1], 1);
        og_metrics_add(&m->deliveries[outcome], 1);
    }
    if (t->http == 410)
        r->gone = true; /* the record disables the webhook; try nothing more meanwhile */
    if (!t->ok && og_log_enabled(run_log(r), OG_LOG_DEBUG))
        og_log(run_log(r), OG_LOG_DEBUG, "webhook try failed",
               "\"tenant\":\"%s\",\"webhookId\":\"%s\",\"error\":\"%s\",\"httpStatus\":%ld",
               r->step->tenant_id, t->webhook_id, t->error, t->http);
    og_hc_req_clear(&t->req);
    free(t->body);
    t->body = NULL;
    t->state = T_DONE;
    r->ndone++;
}

static void try_done(og_hc_req_t *q)
{
    wh_try_t *t = q->arg;
    wh_run_t *r = t->run;
    t->http = q->http_status;
    t->latency_ms = q->latency_us / 1000;
    /* A 2xx is success even when the body ran over what we read of it. */
    bool answered = (q->result == OG_HC_OK || q->result == OG_HC_TOO_LARGE) && q->http_status > 0;
    t->ok = answered && q->http_status >= 200 && q->http_status < 300;
    t->error = t->ok ? NULL : try_error(q, answered, t->message, sizeof(t->message));
    if (q->result != OG_HC_OK && q->result != OG_HC_TOO_LARGE && q->result != OG_HC_TIMEOUT)
        t->http = 0; /* no answer worth the name */
    r->ninflight--;
    try_over(t);
    pump(r);
}

/* Fails t at once (no request was made). */
static void try_refuse(wh_try_t *t, const char *message)
{
    t->at_ms = og_ids_now_ms();
    t->ok = false;
    t->error = "error";
    snprintf(t->message, sizeof(t->message), "%s", message);
    try_over(t);
}

static void try_start(wh_run_t *r, wh_try_t *t)
{
    const og_config_t *cfg = r->wo->gw->w->cfg;
    r->nqueued--;
    if (r->keylen == 0) {
        try_refuse(t, "cannot sign: the webhook's secret does not open with this OMNIGATE_SECRET; rotate it");
        return;
    }
    char ts[24], sig[OG_WH_SIG_MAX];
    snprintf(ts, sizeof(ts), "%lld", (long long)time(NULL));
    og_hc_req_t *q = &t->req;
    memset(q, 0, sizeof(*q));
    q->method = "POST";
    q->url = strdup(r->url);
    q->body = t->body;
    q->body_len = t->body_len;
    t->body = NULL; /* the request owns it now */
    q->timeout_ms = cfg->webhook_timeout_ms;
    q->max_response = OG_WHOUT_READ_MAX;
    q->drop_body = true;
    q->public_only = !cfg->webhook_allow_private;
    q->https_only = !cfg->webhook_allow_http;
    q->done = try_done;
    q->arg = t;
    bool ok = q->url != NULL && og_wh_sign(r->key, r->keylen, t->webhook_id, ts, q->body, q->body_len, sig) &&
              og_hc_req_add_header(q, "Content-Type: application/json") &&
              og_hc_req_add_header(q, "webhook-id: %s", t->webhook_id) &&
              og_hc_req_add_header(q, "webhook-timestamp: %s", ts) &&
              og_hc_req_add_header(q, "webhook-signature: %s", sig);
    t->at_ms = og_ids_now_ms();
    if (!ok || og_hc_start(r->wo->hc, q) != 0) {
        try_refuse(t, "cannot start the request");
        return;
    }
    t->state = T_INFLIGHT;
    r->ninflight++;
}

/* ---- loading ----------------------------------------------------------------------------------- */

/* The webhook of the load's rows: its URL, and the key of its secret when it changed. */
static void take_webhook(wh_run_t *r, const PGresult *res)
{
    const char *url = PQgetvalue(res, 0, OG_C_WH_DUE_URL), *sealed = PQgetvalue(res, 0, OG_C_WH_DUE_SECRET);
    if (r->url == NULL || strcmp(r->url, url) != 0) {
        free(r->url);
        r->url = strdup(url);
    }
    if (r->sealed != NULL && strcmp(r->sealed, sealed) == 0)
        return;
    free(r->sealed);
    r->sealed = strdup(sealed);
    char secret[OG_WH_SECRET_LEN + 1];
    r->keylen = 0;
    if (og_wh_secret_open(&r->wo->key, r->step->tenant_id, sealed, secret))
        r->keylen = og_wh_secret_key(secret, r->key);
    else
        og_log(run_log(r), OG_LOG_ERROR, "a webhook secret does not open with this OMNIGATE_SECRET",
               "\"tenant\":\"%s\"", r->step->tenant_id);
    OPENSSL_cleanse(secret, sizeof(secret));
}

static void loaded(og_db_op_t *op, og_db_status_t st)
{
    wh_run_t *r = op->arg;
    r->loading = false;
    if (st != OG_DB_OK) {
        write_failed(r, op, st, "loading webhook deliveries failed");
        r->broken = true;
        og_db_op_clear(op);
        pump(r);
        return;
    }
    const PGresult *res = op->res[0];
    int rows = PQntuples(res);
    r->dry = rows == 0;
    if (rows > 0) {
        take_webhook(r, res);
        r->last_found = uv_now(&r->wo->gw->w->loop);
        r->backoff_ms = 0;
        snprintf(r->floor, sizeof(r->floor), "%s", PQgetvalue(res, rows - 1, OG_C_WH_DUE_NEXT_AT));
    }
    wh_try_t **tail = &r->tries;
    while (*tail != NULL)
        tail = &(*tail)->next;
    for (int i = 0; i < rows; i++) {
        wh_try_t *t = calloc(1, sizeof(*t));
        if (t == NULL || (t->body = strdup(PQgetvalue(res, i, OG_C_WH_DUE_BODY))) == NULL || r->url == NULL) {
            free(t);
            break; /* out of memory: the rest stays due */
        }
        t->run = r;
        t->state = T_QUEUED;
        t->id = strtoll(PQgetvalue(res, i, OG_C_WH_DUE_ID), NULL, 10);
        snprintf(t->webhook_id, sizeof(t->webhook_id), "%s", PQgetvalue(res, i, OG_C_WH_DUE_WEBHOOK_ID));
        t->tries = atoi(PQgetvalue(res, i, OG_C_WH_DUE_TRIES));
        t->body_len = (size_t)PQgetlength(res, i, OG_C_WH_DUE_BODY);
        *tail = t;
        tail = &t->next;
        r->nqueued++;
        r->nalive++;
    }
    og_db_op_clear(op);
    pump(r);
}

static void load(wh_run_t *r)
{
    int want = QUEUE_MAX - r->nqueued;
    if (ALIVE_MAX - r->nalive < want)
        want = ALIVE_MAX - r->nalive;
    if (want <= 0)
        return;
    char *p = r->exclude;
    p += sprintf(p, "{");
    for (wh_try_t *t = r->tries; t != NULL; t = t->next)
        p += sprintf(p, "%s%lld", t == r->tries ? "" : ",", t->id);
    strcpy(p, "}");
    snprintf(r->limit_s, sizeof(r->limit_s), "%d", want);
    og_db_op_t *op = &r->load_op;
    /* A full load now and then, and before the run ends: a delivery whose transaction began
     * more than a second before the floor and committed after it is found then. */
    r->full = r->floor[0] == '\0' || uv_now(&r->wo->gw->w->loop) - r->last_full >= FULL_EVERY_MS;
    if (r->full)
        r->last_full = uv_now(&r->wo->gw->w->loop);
    op->nstmts = 1;
    og_q_wh_due(&op->stmts[0], &(og_q_wh_due_t){.tenant_id = r->step->tenant_id,
                                                .exclude = r->exclude,
                                                .limit = r->limit_s,
                                                .floor = r->full ? NULL : r->floor});
    op->write = false;
    op->done = loaded;
    op->arg = r;
    r->loading = true;
    og_db_submit(r->wo->gw->db, op);
}

static void on_poll(uv_timer_t *t)
{
    wh_run_t *r = container_of(t, wh_run_t, poll);
    r->polling = false;
    r->dry = false;
    pump(r);
}

/* Moves the run on: starts what it may, loads when it runs low, records what is done, ends
 * when nothing is left to wait for. */
static void pump(wh_run_t *r)
{
    if (r->ending || r->polling)
        return;
    bool stop = stop_starting(r);
    for (wh_try_t *t = r->tries; t != NULL && !stop && r->ninflight < OG_WHOUT_INFLIGHT; t = t->next)
        if (t->state == T_QUEUED)
            try_start(r, t);
    if (!stop && !r->loading && !r->dry && r->nqueued + r->ninflight < LOAD_BELOW)
        load(r);
    flush(r);
    if (r->ninflight > 0 || r->loading || r->flushing || (!stop && (!r->dry || r->nqueued > 0)))
        return;
    uint64_t now = uv_now(&r->wo->gw->w->loop);
    if (!stop && now - r->last_found < LINGER_MS) {
        r->backoff_ms = r->backoff_ms == 0 ? POLL_MIN_MS : r->backoff_ms * 2;
        if (r->backoff_ms > POLL_MAX_MS)
            r->backoff_ms = POLL_MAX_MS;
        r->polling = true;
        uv_timer_start(&r->poll, on_poll, r->backoff_ms, 0);
        return;
    }
    if (!stop && !r->full) { /* the last look had a floor: one without it before ending */
        r->last_full = 0;
        r->dry = false;
        load(r);
        return;
    }
    end(r);
}

static void run(og_step_t *step, void *arg)
{
    og_whout_t *wo = arg;
    wh_run_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_jobs_finish(step, false);
        return;
    }
    r->step = step;
    r->wo = wo;
    uv_timer_init(&wo->gw->w->loop, &r->poll);
    r->last_found = uv_now(&wo->gw->w->loop);
    r->start_by = r->last_found + (uint64_t)wo->gw->w->cfg->webhook_timeout_ms;
    load(r);
}

/* ---- the scheduler and the outbox gauges (worker 0) ----------------------------------------- */

static void piece_closed(og_whout_t *wo);

static void schedule(og_whout_t *wo);

static void scheduled(og_db_op_t *op, og_db_status_t st)
{
    og_whout_t *wo = container_of(op, og_whout_t, sched_op);
    bool due = st == OG_DB_OK && atoi(PQgetvalue(op->res[0], 0, OG_C_WH_SCHEDULE_DUE)) > 0;
    if (st == OG_DB_ERROR)
        og_log(&wo->gw->w->log, OG_LOG_ERROR, "scheduling webhook steps failed",
               "\"sqlstate\":\"%s\",\"error\":\"%s\"", op->sqlstate, op->error);
    og_db_op_clear(op);
    wo->scheduling = false;
    if (wo->stopping) {
        piece_closed(wo);
        return;
    }
    if (due) /* every worker hears NOTIFY og_steps 'due' too; this one need not wait for it */
        og_jobs_wake(wo->gw->jobs);
    if (wo->again) {
        wo->again = false;
        schedule(wo);
    }
}

/* Runs og_webhook_schedule; a request while it runs makes it run once more. */
static void schedule(og_whout_t *wo)
{
    if (wo->stopping || !og_db_ready(wo->gw->db))
        return;
    if (wo->scheduling) {
        wo->again = true;
        return;
    }
    wo->scheduling = true;
    wo->sched_op = (og_db_op_t){.nstmts = 1, .write = true, .done = scheduled};
    og_q_wh_schedule(&wo->sched_op.stmts[0]);
    og_db_submit(wo->gw->db, &wo->sched_op);
}

/* NOTIFY og_steps: 'webhook' is an event whose tenant has no step running or due; NULL, a
 * listener that reconnected (notifications may be lost). */
static void on_notify(void *arg, const char *payload)
{
    if (payload == NULL || strcmp(payload, OG_WHOUT_STEP_KIND) == 0)
        schedule(arg);
}

static void sampled(og_db_op_t *op, og_db_status_t st)
{
    og_whout_t *wo = container_of(op, og_whout_t, sample_op);
    whout_metrics_t *m = wo->m;
    if (st == OG_DB_OK && PQntuples(op->res[0]) == 1 && m != NULL) {
        og_metrics_gauge(&m->outbox_depth,
                         strtoull(PQgetvalue(op->res[0], 0, OG_C_WH_SAMPLE_DEPTH), NULL, 10));
        og_metrics_gauge(&m->outbox_oldest_us,
                         strtoull(PQgetvalue(op->res[0], 0, OG_C_WH_SAMPLE_OLDEST_US), NULL, 10));
        og_metrics_gauge(&m->disabled,
                         strtoull(PQgetvalue(op->res[0], 0, OG_C_WH_SAMPLE_DISABLED), NULL, 10));
    }
    og_db_op_clear(op);
    wo->sampling = false;
    if (wo->stopping)
        piece_closed(wo);
}

static void on_tick(uv_timer_t *t)
{
    og_whout_t *wo = container_of(t, og_whout_t, tick);
    schedule(wo);
    if (++wo->ticks % 2 != 0 || wo->sampling || !og_db_ready(wo->gw->db))
        return;
    wo->sampling = true;
    wo->sample_op = (og_db_op_t){.nstmts = 1, .done = sampled};
    og_q_wh_sample(&wo->sample_op.stmts[0]);
    og_db_submit(wo->gw->db, &wo->sample_op);
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

og_whout_t *og_whout_start(og_gw_t *gw)
{
    og_whout_t *wo = calloc(1, sizeof(*wo));
    if (wo == NULL)
        return NULL;
    wo->gw = gw;
    wo->m = og_worker_metrics(gw->w, &og_whout_metrics_block);
    const og_config_t *cfg = gw->w->cfg;
    wo->hc = og_hc_new(&gw->w->loop, &gw->w->log);
    /* The window of a run, then its last try's timeout, then its writes. */
    uint32_t lease_ms = 2u * (uint32_t)cfg->webhook_timeout_ms + LEASE_EXTRA;
    if (wo->hc == NULL || !og_wh_seal_key(&wo->key, cfg->secret) ||
        (wo->kind = og_jobs_register(gw->jobs, OG_WHOUT_STEP_KIND, lease_ms, run, wo)) < 0) {
        if (wo->hc != NULL)
            og_hc_close(wo->hc, NULL, NULL);
        og_seal_key_clear(&wo->key);
        free(wo);
        return NULL;
    }
    og_jobs_limit(gw->jobs, wo->kind, OG_WHOUT_RUNS);
    if (gw->w->index == 0) {
        wo->scheduler = true;
        og_jobs_on_notify(gw->jobs, on_notify, wo);
        uv_timer_init(&gw->w->loop, &wo->tick);
        uv_timer_start(&wo->tick, on_tick, TICK_MS / 4, TICK_MS);
        uv_unref((uv_handle_t *)&wo->tick);
    }
    return wo;
}

static void piece_closed(og_whout_t *wo)
{
    if (--wo->closing > 0)
        return;
    void (*closed)(void *) = wo->closed;
    void *arg = wo->closed_arg;
    og_seal_key_clear(&wo->key);
    free(wo);
    if (closed != NULL)
        closed(arg);
}

static void hc_closed(void *arg)
{
    piece_closed(arg);
}

static void timer_closed(uv_handle_t *h)
{
    piece_closed(container_of((uv_timer_t *)h, og_whout_t, tick));
}

void og_whout_close(og_whout_t *wo, void (*closed)(void *arg), void *arg)
{
    wo->closed = closed;
    wo->closed_arg = arg;
    wo->stopping = true;
    wo->closing = 1;
    /* Their callbacks come from the pool, which closes after us. */
    wo->closing += wo->sampling + wo->scheduling;
    if (wo->scheduler) {
        og_jobs_on_notify(wo->gw->jobs, NULL, NULL);
        wo->closing++;
        uv_close((uv_handle_t *)&wo->tick, timer_closed);
    }
    og_hc_close(wo->hc, hc_closed, wo);
}
