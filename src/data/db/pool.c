/*
 * The pool (see include/data/omnigate/db.h): creating it, op queues and their deadlines,
 * scheduling queued ops onto ready connections, submit, stats, close. Not how a connection comes
 * up or breaks (conn.c), nor what is sent on it or how its results come back (pipeline.c).
 *
 * The pool has one timer, for the oldest operation still queued (each connection has its own,
 * conn.c). No timer per operation.
 */
#include "db_int.h"

#include "omnigate/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* og_db_op_t.fault (test builds; og_db_test_fault). */
enum { FAULT_NONE, FAULT_ERROR, FAULT_UNAVAILABLE, FAULT_LOST };

/* ---- op queues -------------------------------------------------------------------------- */

void db_q_push(opq_t *q, og_db_op_t *op)
{
    op->next = NULL;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->len++;
}

void db_q_push_front(opq_t *q, og_db_op_t *first, og_db_op_t *last, size_t n)
{
    last->next = q->head;
    q->head = first;
    if (q->tail == NULL)
        q->tail = last;
    q->len += n;
}

og_db_op_t *db_q_pop(opq_t *q)
{
    og_db_op_t *op = q->head;
    if (op) {
        q->head = op->next;
        if (q->head == NULL)
            q->tail = NULL;
        op->next = NULL;
        q->len--;
    }
    return op;
}

void og_db_op_clear(og_db_op_t *op)
{
    for (int i = 0; i < OG_DB_MAX_STMTS; i++) {
        if (op->res[i]) {
            PQclear(op->res[i]);
            op->res[i] = NULL;
        }
    }
    op->sqlstate[0] = '\0';
    op->error[0] = '\0';
}

og_db_op_t *og_db_op_new(void)
{
    return calloc(1, sizeof(og_db_op_t));
}

void og_db_op_free(og_db_op_t *op)
{
    if (op != NULL) {
        og_db_op_clear(op);
        free(op);
    }
}

void db_op_complete(og_db_op_t *op, og_db_status_t st)
{
    if (op->lost && st == OG_DB_OK) { /* committed, but its results could not be kept (take_result) */
        og_db_op_clear(op);
        st = OG_DB_UNAVAILABLE;
        snprintf(op->error, sizeof(op->error), "out of memory for the results");
    }
    op->lost = false;
    if (op->fault != FAULT_NONE) {
        if (op->fault == FAULT_LOST && st == OG_DB_OK)
            og_db_op_clear(op);
        st = op->fault == FAULT_ERROR ? OG_DB_ERROR : OG_DB_UNAVAILABLE;
        snprintf(op->error, sizeof(op->error), "injected fault (test build)");
        snprintf(op->sqlstate, sizeof(op->sqlstate), "%s", op->fault == FAULT_ERROR ? "XX000" : "");
        op->fault = FAULT_NONE;
    }
    if (st == OG_DB_UNAVAILABLE && op->error[0] == '\0')
        snprintf(op->error, sizeof(op->error), "database unavailable");
    op->done(op, st);
}

/* Completes the ops on `failed` (failed at submission: a test fault, or the pool closing), in
 * their order, and those their callbacks submit meanwhile. */
static void complete_failed(og_db_t *db)
{
    og_db_op_t *op;
    while ((op = db_q_pop(&db->failed)) != NULL)
        db_op_complete(op, OG_DB_UNAVAILABLE);
}

static void on_pool_handle_closed(uv_handle_t *h);

/* Once the pool is closing, the idle handle is closed last: until then it completes what is
 * submitted meanwhile (on_idle). The pool is freed with the idle, after what was submitted while
 * it closed, so `closed` is the last callback. */
void db_handle_gone(og_db_t *db)
{
    if (--db->open_handles > 1 || !db->closing)
        return;
    if (db->open_handles == 1) { /* the idle */
        uv_close((uv_handle_t *)&db->idle, on_pool_handle_closed);
        return;
    }
    complete_failed(db);
    void (*cb)(void *) = db->closed;
    void *arg = db->closed_arg;
    free(db->conns);
    db_plan_free(&db->plan);
    db_plan_free(&db->listen_plan);
#if OG_TEST_ROUTES
    free(db->trace);
#endif
    free(db);
    if (cb)
        cb(arg);
}

/* ---- scheduling ------------------------------------------------------------------------- */

/* Sends `u` on `c`; on failure its ops go back to the front of `q` and the connection breaks. */
static bool dispatch(dbconn_t *c, unit_t *u, opq_t *q)
{
    if (db_unit_send(c, u) && db_conn_flush(c))
        return true;
    if (c->utail != u) { /* not linked yet: requeue the ops ourselves */
        db_q_push_front(q, u->head, u->tail, (size_t)u->nops);
        db_unit_free(u);
    }
    db_conn_broken(c, PQerrorMessage(c->pg));
    return false;
}

static dbconn_t *pick(og_db_t *db, bool for_write)
{
    dbconn_t *best = NULL;
    int best_load = 1 << 30;
    for (int i = 0; i < db->nconns; i++) {
        dbconn_t *c = &db->conns[i];
        if (c->state != C_READY || (for_write && c->write_inflight) || (db->reader && c->uhead != NULL))
            continue;
        int load = 0;
        for (unit_t *u = c->uhead; u; u = u->next)
            load++;
        if (load < best_load) {
            best = c;
            best_load = load;
        }
    }
    return best;
}

/* The listener is nudged with the pool: the caller is active, so the database may be back. */
static void nudge(og_db_t *db)
{
    uint64_t now = uv_now(db->loop);
    for (int i = 0; i < db->nconns; i++)
        db_conn_nudge(&db->conns[i], now);
    if (db->listener.listen)
        db_conn_nudge(&db->listener, now);
}

/* Fails the ops of `q` whose deadline has passed: they waited for a connection too long. */
static void expire_queue(og_db_t *db, opq_t *q, uint64_t now)
{
    opq_t keep = {0}, expired = {0};
    og_db_op_t *op;
    while ((op = db_q_pop(q)) != NULL)
        db_q_push(op->deadline_ms <= now ? &expired : &keep, op);
    *q = keep;
    db->stats.timeouts += expired.len;
    if (db->metrics != NULL && expired.len > 0)
        og_metrics_add(&db->metrics->db_timeouts, expired.len);
    /* Completed after the queue is whole again: a callback may submit. */
    while ((op = db_q_pop(&expired)) != NULL) {
        snprintf(op->error, sizeof(op->error), "no %sdatabase connection within %d ms",
                 db->reader ? "free read " : "", db->timeout_ms);
        db_op_complete(op, OG_DB_UNAVAILABLE);
    }
}

static void queue_arm(og_db_t *db);

/* Fails the queued ops past their deadline, if any (the heads are the oldest: see queue_arm). */
static void expire_due(og_db_t *db)
{
    uint64_t now = uv_now(db->loop);
    if (db->reads.head != NULL && db->reads.head->deadline_ms <= now)
        expire_queue(db, &db->reads, now);
    if (db->writes.head != NULL && db->writes.head->deadline_ms <= now)
        expire_queue(db, &db->writes, now);
    if (db->bg_writes.head != NULL && db->bg_writes.head->deadline_ms <= now)
        expire_queue(db, &db->bg_writes, now);
}

static void on_qtimer(uv_timer_t *t)
{
    og_db_t *db = t->data;
    expire_due(db);
    queue_arm(db);
}

/* Arms the pool's timer for the oldest queued op. Queues are in submission order (ops put back
 * at the front are older than the rest), so the heads are the oldest. */
static void queue_arm(og_db_t *db)
{
    uint64_t due = UINT64_MAX;
    if (db->reads.head != NULL)
        due = db->reads.head->deadline_ms;
    if (db->writes.head != NULL && db->writes.head->deadline_ms < due)
        due = db->writes.head->deadline_ms;
    if (db->bg_writes.head != NULL && db->bg_writes.head->deadline_ms < due)
        due = db->bg_writes.head->deadline_ms;
    if (due == UINT64_MAX || db->closing) {
        uv_timer_stop(&db->qtimer);
        return;
    }
    if (due == db->qtimer_due && uv_is_active((uv_handle_t *)&db->qtimer))
        return;
    uint64_t now = uv_now(db->loop);
    db->qtimer_due = due;
    uv_timer_start(&db->qtimer, on_qtimer, due > now ? due - now : 0, 0);
}

/* Fails every op waiting for a connection (none is coming, or the pool closes). */
static void fail_queued(og_db_t *db)
{
    og_db_op_t *op;
    while ((op = db_q_pop(&db->reads)) != NULL)
        db_op_complete(op, OG_DB_UNAVAILABLE);
    while ((op = db_q_pop(&db->writes)) != NULL)
        db_op_complete(op, OG_DB_UNAVAILABLE);
    while ((op = db_q_pop(&db->bg_writes)) != NULL)
        db_op_complete(op, OG_DB_UNAVAILABLE);
}

/* Sends queue q's writes: a unit of up to OG_DB_MAX_BATCH per connection without a write in
 * flight (ops being retried alone go one per unit, pipelined on one connection). */
static void run_writes(og_db_t *db, opq_t *q)
{
    while (q->len) {
        if (q->head->solo) {
            dbconn_t *c = pick(db, false);
            if (c == NULL)
                break;
            while (q->head && q->head->solo && c->state == C_READY) {
                unit_t *u = db_unit_new(false);
                if (u == NULL)
                    break;
                og_db_op_t *o = db_q_pop(q);
                o->solo = false;
                db_unit_add(u, o);
                dispatch(c, u, q);
            }
            continue;
        }
        dbconn_t *c = pick(db, true);
        unit_t *u = c ? db_unit_new(true) : NULL;
        if (u == NULL)
            break; /* every connection has a batch in flight: keep gathering (group commit) */
        while (q->head && !q->head->solo && u->nops < OG_DB_MAX_BATCH && !(q->head->alone && u->nops > 0)) {
            og_db_op_t *o = db_q_pop(q);
            db_unit_add(u, o);
            if (o->alone)
                break;
        }
        dispatch(c, u, q);
    }
}

static void run_queues(og_db_t *db)
{
    complete_failed(db);
    expire_due(db); /* never send an op whose caller's deadline is over */

    if (db->nstate[C_READY] == 0) {
        if (db->reads.len || db->writes.len || db->bg_writes.len)
            nudge(db);
        /* A connection on its way up (start-up, or a reconnect the nudge just began) will
         * take the queue when ready, or the queue's deadline fails it (queue_arm); only with
         * none coming do requests fail at once. */
        if (db->nstate[C_RESOLVING] + db->nstate[C_CONNECTING] + db->nstate[C_PREPARING] > 0)
            return;
        fail_queued(db);
        return;
    }
    while (db->reads.len) {
        dbconn_t *c = pick(db, false);
        unit_t *u = db_unit_new(false);
        if (c == NULL || u == NULL) {
            db_unit_free(u);
            break;
        }
        db_unit_add(u, db_q_pop(&db->reads));
        dispatch(c, u, &db->reads);
    }
    run_writes(db, &db->writes);
    run_writes(db, &db->bg_writes);
}

static void on_check(uv_check_t *h)
{
    og_db_t *db = h->data;
    uv_idle_stop(&db->idle);
    run_queues(db);
    queue_arm(db);
    if (db->metrics != NULL) {
        og_db_metrics_t *m = db->metrics;
        og_metrics_gauge(db->reader ? &m->db_read_queue : &m->db_queue,
                         (uint64_t)(db->reads.len + db->writes.len + db->bg_writes.len));
        og_metrics_gauge(db->reader ? &m->db_read_connected : &m->db_connected,
                         (uint64_t)db->nstate[C_READY]);
    }
}

static void on_idle(uv_idle_t *h)
{
    og_db_t *db = h->data;
    /* While the pool is open, only here to keep uv_run from blocking in poll while work is
     * queued: on_check does the work. og_db_close closes on_check's handle: from then on, what
     * og_db_submit queues on `failed` is completed here, from the loop. */
    if (!db->closing)
        return;
    uv_idle_stop(h);
    complete_failed(db);
}

/* Makes the loop turn soon for what og_db_submit just queued: on_check runs it, or on_idle fails
 * it once the pool is closing. Not once the idle itself is closing: db_handle_gone then fails
 * what is left, before `closed`. */
static void wake(og_db_t *db)
{
    if (!uv_is_closing((uv_handle_t *)&db->idle))
        uv_idle_start(&db->idle, on_idle);
}

void db_schedule(og_db_t *db)
{
    if (!db->closing && (db->reads.len || db->writes.len || db->bg_writes.len || db->failed.len))
        uv_idle_start(&db->idle, on_idle);
}

/* ---- public ----------------------------------------------------------------------------- */

static og_db_t *pool_new(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                         const og_db_stmt_t *stmts, int nstmts, bool reader, int statement_timeout_ms)
{
    og_db_t *db = calloc(1, sizeof(*db));
    if (db == NULL)
        return NULL;
    db->conns = calloc((size_t)pool, sizeof(*db->conns));
    int deadline = timeout_ms > 0 ? timeout_ms : OG_DB_TIMEOUT_DEFAULT_MS;
    if (db->conns == NULL || !db_plan_init(&db->plan, conninfo, deadline)) {
        free(db->conns);
        db_plan_free(&db->plan);
        free(db);
        return NULL;
    }
    db->loop = loop;
    db->log = log;
    db->stmts = stmts;
    db->nstmts = nstmts;
    db->tally_stmt = -1;
    db->nconns = pool;
    db->timeout_ms = deadline;
    db->reader = reader;
    if (reader) {
        int st = statement_timeout_ms > 0 ? statement_timeout_ms : 0;
        snprintf(db->statement_timeout, sizeof(db->statement_timeout), "%d", st);
        db->unit_grace_ms = (uint64_t)st;
    }
    db->prepared = true;
    db->nstate[C_DOWN] = pool; /* calloc made every connection C_DOWN */
    uv_check_init(loop, &db->check);
    db->check.data = db;
    uv_check_start(&db->check, on_check);
    uv_unref((uv_handle_t *)&db->check);
    uv_idle_init(loop, &db->idle);
    db->idle.data = db;
    uv_timer_init(loop, &db->qtimer);
    db->qtimer.data = db;
    db->open_handles = 3;
    for (int i = 0; i < pool; i++)
        db_conn_init(db, &db->conns[i], i);
    return db;
}

og_db_t *og_db_new(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                   const og_db_stmt_t *stmts, int nstmts)
{
    return pool_new(loop, log, conninfo, pool, timeout_ms, stmts, nstmts, false, 0);
}

og_db_t *og_db_new_reader(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                          int statement_timeout_ms, const og_db_stmt_t *stmts, int nstmts)
{
    return pool_new(loop, log, conninfo, pool, timeout_ms, stmts, nstmts, true, statement_timeout_ms);
}

bool og_db_cancelled(const og_db_op_t *op)
{
    return strcmp(op->sqlstate, "57014") == 0; /* query_canceled */
}

void og_db_set_prepared(og_db_t *db, bool prepared)
{
    db->prepared = prepared;
}

void og_db_set_tally(og_db_t *db, int stmt)
{
    db->tally_stmt = stmt >= 0 && stmt < db->nstmts ? stmt : -1;
}

void og_db_set_metrics(og_db_t *db, og_db_metrics_t *m)
{
    db->metrics = m;
}

#if OG_TEST_ROUTES
/* Counts op in the trace and arms the fault on it if it matches; true when it must fail
 * without being sent. */
static bool test_faulted(og_db_t *db, og_db_op_t *op)
{
    bool match = db->fault.left > 0 && db->fault.stmt < 0;
    for (int i = 0; i < op->nstmts; i++) {
        int s = op->stmts[i].stmt;
        if (db->trace != NULL && s >= 0 && s < db->nstmts)
            db->trace[s]++;
        match = match || (db->fault.left > 0 && s == db->fault.stmt);
    }
    if (!match)
        return false;
    db->fault.left--;
    op->fault = db->fault.kind;
    return op->fault != FAULT_LOST;
}

void og_db_test_fault(og_db_t *db, int stmt, og_db_status_t st, bool lost, int count)
{
    db->fault.stmt = stmt;
    db->fault.kind = lost ? FAULT_LOST : st == OG_DB_ERROR ? FAULT_ERROR : FAULT_UNAVAILABLE;
    db->fault.left = count;
}

int og_db_test_fault_left(const og_db_t *db)
{
    return db->fault.left;
}

void og_db_test_trace(og_db_t *db, uint32_t *counts)
{
    if (db->trace == NULL) { /* tracing starts with the first call */
        db->trace = calloc((size_t)db->nstmts, sizeof(*db->trace));
        return;
    }
    for (int i = 0; i < db->nstmts; i++) {
        counts[i] += db->trace[i];
        db->trace[i] = 0;
    }
}
#endif

void og_db_submit(og_db_t *db, og_db_op_t *op)
{
    op->solo = false;
    op->deadline_ms = uv_now(db->loop) + (uint64_t)db->timeout_ms;
    op->sqlstate[0] = '\0';
    op->error[0] = '\0';
    op->fault = FAULT_NONE;
#if OG_TEST_ROUTES
    if (test_faulted(db, op)) {
        db_q_push(&db->failed, op);
        wake(db);
        return;
    }
#endif
    if (db->closing)
        db_q_push(&db->failed, op);
    else
        db_q_push(!op->write || db->reader ? &db->reads : op->background ? &db->bg_writes : &db->writes, op);
    wake(db); /* the queue's length is read from the queues (og_db_stats) */
}

bool og_db_ready(og_db_t *db)
{
    if (db->nstate[C_READY] > 0)
        return true;
    nudge(db);
    return false;
}

void og_db_stats(const og_db_t *db, og_db_stats_t *out)
{
    *out = db->stats;
    out->queued = db->reads.len + db->writes.len + db->bg_writes.len;
    out->connected = db->nstate[C_READY];
}

static void on_pool_handle_closed(uv_handle_t *h)
{
    db_handle_gone(h->data);
}

void og_db_close(og_db_t *db, void (*closed)(void *arg), void *arg)
{
    db->closing = true;
    db->closed = closed;
    db->closed_arg = arg;
    fail_queued(db);
    complete_failed(db);
    /* Ops in flight fail as their connections close; what their callbacks (or anyone) submit
     * from now on goes to `failed`, for the idle, which stays open until every other handle is
     * closed (db_handle_gone). */
    for (int i = 0; i < db->nconns; i++)
        db_conn_close(&db->conns[i]);
    if (db->listener.listen)
        db_conn_close(&db->listener);
    uv_close((uv_handle_t *)&db->check, on_pool_handle_closed);
    uv_close((uv_handle_t *)&db->qtimer, on_pool_handle_closed);
}
