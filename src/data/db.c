/*
 * Asynchronous PostgreSQL pool. See include/data/omnigate/db.h.
 *
 * Each connection keeps a FIFO of "units" it has sent: a unit is one or more operations
 * followed by one Sync, i.e. one implicit transaction. Results come back in order, so the
 * head unit's cursor (op, statement) says which statement the next result belongs to.
 * libpq returns each statement's result(s) followed by NULL, and PGRES_PIPELINE_SYNC for the
 * Sync (not followed by NULL); after an error every further statement of the unit yields
 * PGRES_PIPELINE_ABORTED up to the Sync.
 *
 * The listener (og_db_listen) is one more dbconn_t, kept outside the pool's array and counts:
 * it connects, backs off and changes state through the same functions, and its first unit is
 * LISTEN instead of the statement table. Once ready it never carries a unit again; readable
 * input there means notifications (or the end of the connection).
 */
#include "omnigate/db.h"
#include "omnigate/metrics.h"

#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define NUDGE_MIN_MS   200
#define CHANNEL_MAX    63 /* NAMEDATALEN - 1: the server would truncate a longer name */

/* A connection's state. Only conn_set_state changes it, along the moves of conn_moves. */
typedef enum {
    C_DOWN = 0,   /* no PGconn: waiting for the retry timer or a nudge, or the pool is closing */
    C_CONNECTING, /* PQconnectStart done, PQconnectPoll under way */
    C_PREPARING,  /* connected; the unit preparing the statement table (or LISTEN) is in flight */
    C_READY,      /* statements prepared: takes reads and write batches (the listener: listening) */
    C_NSTATES
} cstate_t;

/* The legal moves, [from][to]. Every other is a bug in this file. */
static const bool conn_moves[C_NSTATES][C_NSTATES] = {
    [C_DOWN] = {[C_CONNECTING] = true},                       /* conn_start */
    [C_CONNECTING] = {[C_PREPARING] = true, [C_DOWN] = true}, /* send_prepares; conn_broken */
    [C_PREPARING] = {[C_READY] = true, [C_DOWN] = true},      /* unit_done; conn_broken */
    [C_READY] = {[C_DOWN] = true},                            /* conn_broken */
};

static const char *const cstate_names[C_NSTATES] = {"down", "connecting", "preparing", "ready"};

typedef struct dbconn dbconn_t;

typedef struct unit {
    og_db_op_t *head, *tail;
    int nops;
    bool write;
    bool prepare; /* the statement-preparing unit sent right after connecting */
    bool failed;
    uint64_t sent_us;
    og_db_op_t *cur; /* op the next result belongs to */
    int cur_stmt;
    struct unit *next;
} unit_t;

/* uv_poll_t lives apart from the connection: libpq may switch sockets while connecting, and
 * the old handle must finish closing (close_cb frees it) while the new one is in use. */
typedef struct poll_h {
    uv_poll_t poll;
    dbconn_t *c;
} poll_h_t;

struct dbconn {
    og_db_t *db;
    int idx;     /* position in the pool; -1 for the listener */
    bool listen; /* the pool's listener: never picked, not in nstate nor the stats */
    PGconn *pg;
    cstate_t state;
    poll_h_t *ph;
    int fd;
    int events;
    unit_t *uhead, *utail;
    bool write_inflight;
    uv_timer_t retry;
    uint64_t backoff_ms;
    uint64_t last_attempt_ms;
};

typedef struct opq {
    og_db_op_t *head, *tail;
    size_t len;
} opq_t;

struct og_db {
    uv_loop_t *loop;
    og_log_t *log;
    char *conninfo;
    const og_db_stmt_t *stmts;
    int nstmts;
    dbconn_t *conns;
    int nconns;
    int nstate[C_NSTATES];         /* pool connections in each state, kept exact by conn_set_state */
    dbconn_t listener;             /* in use once listener.listen is set (og_db_listen) */
    char channel[CHANNEL_MAX + 1]; /* what the listener listens on: [a-z_]+ (og_db_listen checks) */
    og_db_notify_fn notify;
    void *notify_arg;
    opq_t writes, reads, failed;
    uv_check_t check;
    uv_idle_t idle; /* active while work is queued, so the loop does not block in poll */
    og_db_stats_t stats;
    struct og_metrics_slot *metrics;
    bool closing;
    int open_handles;
    void (*closed)(void *arg);
    void *closed_arg;
};

static void conn_start(dbconn_t *c);
static void nudge_conn(dbconn_t *c, uint64_t now);
static void conn_broken(dbconn_t *c, const char *why);
static void conn_io(dbconn_t *c, int events);
static void schedule(og_db_t *db);

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

/* ---- op queues -------------------------------------------------------------------------- */

static void q_push(opq_t *q, og_db_op_t *op)
{
    op->next = NULL;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->len++;
}

static void q_push_front_list(opq_t *q, og_db_op_t *first, og_db_op_t *last, size_t n)
{
    last->next = q->head;
    q->head = first;
    if (q->tail == NULL)
        q->tail = last;
    q->len += n;
}

static og_db_op_t *q_pop(opq_t *q)
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

static void complete(og_db_op_t *op, og_db_status_t st)
{
    if (st == OG_DB_UNAVAILABLE && op->error[0] == '\0')
        snprintf(op->error, sizeof(op->error), "database unavailable");
    op->done(op, st);
}

/* ---- poll handling ---------------------------------------------------------------------- */

/* Every closed handle ends here; the pool is freed with its last handle. */
static void handle_gone(og_db_t *db)
{
    if (--db->open_handles > 0 || !db->closing)
        return;
    void (*cb)(void *) = db->closed;
    void *arg = db->closed_arg;
    free(db->conns);
    free(db->conninfo);
    free(db);
    if (cb)
        cb(arg);
}

static void on_poll_closed(uv_handle_t *h)
{
    poll_h_t *ph = h->data;
    og_db_t *db = ph->c->db;
    free(ph);
    handle_gone(db);
}

static void poll_drop(dbconn_t *c)
{
    if (c->ph) {
        uv_poll_stop(&c->ph->poll);
        uv_close((uv_handle_t *)&c->ph->poll, on_poll_closed);
        c->ph = NULL;
        c->fd = -1;
        c->events = 0;
    }
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    poll_h_t *ph = p->data;
    dbconn_t *c = ph->c;
    if (status < 0) {
        conn_broken(c, uv_strerror(status));
        return;
    }
    conn_io(c, events);
}

/* Watches the connection's current socket for `events`, following a socket change. */
static bool poll_set(dbconn_t *c, int events)
{
    int fd = PQsocket(c->pg);
    if (fd < 0)
        return false;
    if (c->ph && c->fd != fd)
        poll_drop(c);
    if (c->ph == NULL) {
        c->ph = calloc(1, sizeof(*c->ph));
        if (c->ph == NULL)
            return false;
        c->ph->c = c;
        c->ph->poll.data = c->ph;
        if (uv_poll_init(c->db->loop, &c->ph->poll, fd) != 0) {
            free(c->ph);
            c->ph = NULL;
            return false;
        }
        c->db->open_handles++;
        c->fd = fd;
        c->events = 0;
    }
    if (events != c->events) {
        if (uv_poll_start(&c->ph->poll, events, on_poll) != 0)
            return false;
        c->events = events;
    }
    return true;
}

/* Pushes buffered output; keeps watching for writability while libpq has more to send. */
static bool flush_out(dbconn_t *c)
{
    int r = PQflush(c->pg);
    if (r < 0)
        return false;
    return poll_set(c, UV_READABLE | (r == 1 ? UV_WRITABLE : 0));
}

/* ---- connection lifecycle --------------------------------------------------------------- */

/* Moves `c` to `to` and keeps the per-state counts exact. An impossible move means the pool
 * lost track of a connection: stop loudly rather than run on a broken pool. */
static void conn_set_state(dbconn_t *c, cstate_t to)
{
    og_db_t *db = c->db;
    if (!conn_moves[c->state][to]) {
        og_log(db->log, OG_LOG_ERROR, "impossible database connection state change",
               "\"conn\":%d,\"from\":\"%s\",\"to\":\"%s\"", c->idx, cstate_names[c->state], cstate_names[to]);
        og_log_flush(db->log);
        abort();
    }
    if (!c->listen) {
        db->nstate[c->state]--;
        db->nstate[to]++;
        db->stats.state_changes++;
    }
    c->state = to;
}

static void on_retry(uv_timer_t *t)
{
    conn_start(t->data);
}

static void fail_units(dbconn_t *c)
{
    unit_t *u = c->uhead;
    c->uhead = c->utail = NULL;
    c->write_inflight = false;
    while (u) {
        unit_t *next = u->next;
        og_db_op_t *op = u->head;
        while (op) {
            og_db_op_t *n = op->next;
            og_db_op_clear(op);
            complete(op, OG_DB_UNAVAILABLE);
            op = n;
        }
        free(u);
        u = next;
    }
}

static void conn_broken(dbconn_t *c, const char *why)
{
    og_db_t *db = c->db;
    bool was_ready = c->state == C_READY;
    if (c->state != C_DOWN && !db->closing) {
        char esc[256];
        og_log_escape(esc, sizeof(esc), why ? why : "", why ? strlen(why) : 0);
        og_log(db->log, was_ready ? OG_LOG_WARN : OG_LOG_DEBUG,
               c->listen ? "database listener lost" : "database connection lost",
               "\"conn\":%d,\"error\":\"%s\"", c->idx, esc);
    }
    poll_drop(c);
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    if (c->state != C_DOWN) /* closing the pool breaks connections that are down already */
        conn_set_state(c, C_DOWN);
    fail_units(c);
    if (db->closing)
        return;
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (c->backoff_ms > BACKOFF_MAX_MS)
        c->backoff_ms = BACKOFF_MAX_MS;
    uv_timer_start(&c->retry, on_retry, c->backoff_ms, 0);
    schedule(db);
}

static void conn_start(dbconn_t *c)
{
    og_db_t *db = c->db;
    if (db->closing || c->state != C_DOWN)
        return;
    uv_timer_stop(&c->retry);
    c->last_attempt_ms = uv_now(db->loop);
    c->pg = PQconnectStart(db->conninfo);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        conn_set_state(c, C_CONNECTING); /* so conn_broken logs and backs off */
        conn_broken(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    PQsetnonblocking(c->pg, 1);
    conn_set_state(c, C_CONNECTING);
    /* Per the libpq docs, start as if PQconnectPoll had said PGRES_POLLING_WRITING. */
    if (!poll_set(c, UV_WRITABLE))
        conn_broken(c, "cannot watch socket");
}

/* Sends the unit that makes a new connection useful: the statement table, or the listener's
 * LISTEN. Its Sync moves the connection to C_READY (unit_done). */
static void send_prepares(dbconn_t *c)
{
    og_db_t *db = c->db;
    unit_t *u = calloc(1, sizeof(*u));
    if (u == NULL || PQenterPipelineMode(c->pg) != 1) {
        free(u);
        conn_broken(c, "cannot enter pipeline mode");
        return;
    }
    u->prepare = true;
    bool sent = true;
    if (c->listen) {
        /* LISTEN takes no parameter: the channel is an identifier og_db_listen checked ([a-z_]+). */
        char sql[80];
        snprintf(sql, sizeof(sql), "LISTEN %s", db->channel);
        sent = PQsendQueryParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
    }
    for (int i = 0; sent && !c->listen && i < db->nstmts; i++)
        sent = PQsendPrepare(c->pg, db->stmts[i].name, db->stmts[i].sql, db->stmts[i].nparams, NULL);
    if (!sent || !PQpipelineSync(c->pg)) {
        free(u);
        conn_broken(c, PQerrorMessage(c->pg));
        return;
    }
    c->uhead = c->utail = u;
    conn_set_state(c, C_PREPARING);
    if (!flush_out(c))
        conn_broken(c, PQerrorMessage(c->pg));
}

static void connect_step(dbconn_t *c)
{
    PostgresPollingStatusType r = PQconnectPoll(c->pg);
    switch (r) {
    case PGRES_POLLING_READING:
        if (!poll_set(c, UV_READABLE))
            conn_broken(c, "cannot watch socket");
        break;
    case PGRES_POLLING_WRITING:
        if (!poll_set(c, UV_WRITABLE))
            conn_broken(c, "cannot watch socket");
        break;
    case PGRES_POLLING_OK:
        PQsetnonblocking(c->pg, 1);
        send_prepares(c);
        break;
    default:
        conn_broken(c, PQerrorMessage(c->pg));
        break;
    }
}

/* ---- results ---------------------------------------------------------------------------- */

static void unit_done(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    if (u->prepare) {
        if (u->failed) {
            free(u);
            conn_broken(c, "preparing statements failed");
            return;
        }
        conn_set_state(c, C_READY);
        c->backoff_ms = 0;
        og_log(db->log, OG_LOG_INFO, c->listen ? "database listener connected" : "database connected",
               "\"conn\":%d", c->idx);
        free(u);
        if (c->listen) {
            /* Notifications sent while it was down are lost: the caller looks for work. */
            db->notify(db->notify_arg, db->channel, NULL);
            return;
        }
        if (db->listener.listen) /* the database is back: so may the listener be */
            nudge_conn(&db->listener, uv_now(db->loop));
        schedule(db);
        return;
    }
    if (u->write) {
        c->write_inflight = false;
        if (!u->failed) {
            db->stats.batches++;
            db->stats.batch_ops += (uint64_t)u->nops;
            db->stats.commit_us += now_us() - u->sent_us;
            og_metrics_db_batch(db->metrics, (uint64_t)u->nops, now_us() - u->sent_us);
        }
    }
    if (u->failed && u->nops > 1) {
        /* Retry one by one: each op alone decides its own fate. */
        db->stats.retries++;
        if (db->metrics != NULL)
            og_metrics_add(&db->metrics->db_retries, 1);
        for (og_db_op_t *op = u->head; op; op = op->next)
            og_db_op_clear(op);
        for (og_db_op_t *op = u->head; op; op = op->next)
            op->solo = true;
        q_push_front_list(&db->writes, u->head, u->tail, (size_t)u->nops);
        free(u);
        schedule(db);
        return;
    }
    og_db_op_t *op = u->head;
    og_db_status_t st = u->failed ? OG_DB_ERROR : OG_DB_OK;
    free(u);
    while (op) {
        og_db_op_t *next = op->next;
        op->next = NULL;
        complete(op, st);
        op = next;
    }
    schedule(db);
}

static void take_result(dbconn_t *c, PGresult *r)
{
    unit_t *u = c->uhead;
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_SYNC) {
        PQclear(r);
        c->uhead = u->next;
        if (c->uhead == NULL)
            c->utail = NULL;
        unit_done(c, u);
        return;
    }
    if (st == PGRES_FATAL_ERROR) {
        u->failed = true;
        og_db_op_t *op = u->cur;
        if (op != NULL && op->error[0] == '\0') {
            const char *ss = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            snprintf(op->sqlstate, sizeof(op->sqlstate), "%s", ss ? ss : "");
            /* Kept JSON-escaped: it is only ever written into log lines. */
            const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
            if (msg == NULL)
                msg = PQresultErrorMessage(r);
            og_log_escape(op->error, sizeof(op->error), msg, strlen(msg));
        } else if (u->prepare) {
            const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
            char esc[256];
            og_log_escape(esc, sizeof(esc), msg ? msg : "", msg ? strlen(msg) : 0);
            og_log(c->db->log, OG_LOG_ERROR, "prepare failed", "\"error\":\"%s\"", esc);
        }
        PQclear(r);
        return;
    }
    if (u->cur != NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) &&
        u->cur->res[u->cur_stmt] == NULL)
        u->cur->res[u->cur_stmt] = r;
    else
        PQclear(r);
}

/* A NULL from PQgetResult ends one statement's results: move the cursor on. */
static void next_statement(unit_t *u)
{
    if (u->cur == NULL)
        return;
    if (++u->cur_stmt >= u->cur->nstmts) {
        u->cur = u->cur->next;
        u->cur_stmt = 0;
    }
}

/* Hands the listener's notifications to the caller, who may close the pool from the callback
 * (conn_broken then finishes the connection, and the loop stops). */
static void deliver_notifies(dbconn_t *c)
{
    og_db_t *db = c->db;
    PGnotify *n;
    while (c->state == C_READY && (n = PQnotifies(c->pg)) != NULL) {
        db->notify(db->notify_arg, n->relname, n->extra);
        PQfreemem(n);
    }
}

static void read_results(dbconn_t *c)
{
    if (!PQconsumeInput(c->pg)) {
        conn_broken(c, PQerrorMessage(c->pg));
        return;
    }
    while (c->uhead != NULL && c->state != C_DOWN) {
        if (PQisBusy(c->pg))
            break;
        PGresult *r = PQgetResult(c->pg);
        if (r == NULL)
            next_statement(c->uhead);
        else
            take_result(c, r);
    }
    if (c->listen)
        deliver_notifies(c);
    if (c->state != C_DOWN && c->pg && PQstatus(c->pg) == CONNECTION_BAD)
        conn_broken(c, PQerrorMessage(c->pg));
}

static void conn_io(dbconn_t *c, int events)
{
    if (c->state == C_CONNECTING) {
        connect_step(c);
        return;
    }
    if (events & UV_WRITABLE) {
        if (!flush_out(c)) {
            conn_broken(c, PQerrorMessage(c->pg));
            return;
        }
    }
    if (events & (UV_READABLE | UV_DISCONNECT))
        read_results(c);
}

/* ---- dispatch --------------------------------------------------------------------------- */

static bool send_unit(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    for (og_db_op_t *op = u->head; op; op = op->next) {
        for (int i = 0; i < op->nstmts; i++) {
            const og_db_stmt_t *s = &db->stmts[op->stmts[i].stmt];
            if (!PQsendQueryPrepared(c->pg, s->name, s->nparams, op->stmts[i].values, NULL, NULL, 0))
                return false;
        }
    }
    if (!PQpipelineSync(c->pg))
        return false;
    u->sent_us = now_us();
    u->cur = u->head;
    u->cur_stmt = 0;
    if (c->utail)
        c->utail->next = u;
    else
        c->uhead = u;
    c->utail = u;
    if (u->write)
        c->write_inflight = true;
    return true;
}

static unit_t *unit_new(bool write)
{
    unit_t *u = calloc(1, sizeof(*u));
    if (u)
        u->write = write;
    return u;
}

static void unit_add(unit_t *u, og_db_op_t *op)
{
    op->next = NULL;
    if (u->tail)
        u->tail->next = op;
    else
        u->head = op;
    u->tail = op;
    u->nops++;
}

/* Sends `u` on `c`; on failure its ops go back to the front of `q` and the connection breaks. */
static bool dispatch(dbconn_t *c, unit_t *u, opq_t *q)
{
    if (send_unit(c, u) && flush_out(c))
        return true;
    if (c->utail != u) { /* not linked yet: requeue the ops ourselves */
        q_push_front_list(q, u->head, u->tail, (size_t)u->nops);
        free(u);
    }
    conn_broken(c, PQerrorMessage(c->pg));
    return false;
}

static dbconn_t *pick(og_db_t *db, bool for_write)
{
    dbconn_t *best = NULL;
    int best_load = 1 << 30;
    for (int i = 0; i < db->nconns; i++) {
        dbconn_t *c = &db->conns[i];
        if (c->state != C_READY || (for_write && c->write_inflight))
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

static void nudge_conn(dbconn_t *c, uint64_t now)
{
    if (c->state == C_DOWN && now - c->last_attempt_ms >= NUDGE_MIN_MS)
        conn_start(c);
}

/* The listener is nudged with the pool: the caller is active, so the database may be back. */
static void nudge(og_db_t *db)
{
    uint64_t now = uv_now(db->loop);
    for (int i = 0; i < db->nconns; i++)
        nudge_conn(&db->conns[i], now);
    if (db->listener.listen)
        nudge_conn(&db->listener, now);
}

static void run_queues(og_db_t *db)
{
    og_db_op_t *op;
    while ((op = q_pop(&db->failed)) != NULL)
        complete(op, OG_DB_UNAVAILABLE);

    if (db->nstate[C_READY] == 0) {
        if (db->reads.len || db->writes.len)
            nudge(db);
        /* A connection on its way up (start-up, or a reconnect the nudge just began) will
         * take the queue when ready; only with none coming do requests fail at once. */
        if (db->nstate[C_CONNECTING] + db->nstate[C_PREPARING] > 0)
            return;
        while ((op = q_pop(&db->reads)) != NULL)
            complete(op, OG_DB_UNAVAILABLE);
        while ((op = q_pop(&db->writes)) != NULL)
            complete(op, OG_DB_UNAVAILABLE);
        return;
    }
    while (db->reads.len) {
        dbconn_t *c = pick(db, false);
        unit_t *u = unit_new(false);
        if (c == NULL || u == NULL) {
            free(u);
            break;
        }
        unit_add(u, q_pop(&db->reads));
        dispatch(c, u, &db->reads);
    }
    while (db->writes.len) {
        /* Ops being retried alone go out one per unit, pipelined on one connection. */
        if (db->writes.head->solo) {
            dbconn_t *c = pick(db, false);
            if (c == NULL)
                break;
            while (db->writes.head && db->writes.head->solo && c->state == C_READY) {
                unit_t *u = unit_new(false);
                if (u == NULL)
                    break;
                og_db_op_t *o = q_pop(&db->writes);
                o->solo = false;
                unit_add(u, o);
                dispatch(c, u, &db->writes);
            }
            continue;
        }
        dbconn_t *c = pick(db, true);
        unit_t *u = c ? unit_new(true) : NULL;
        if (u == NULL)
            break; /* every connection has a batch in flight: keep gathering (group commit) */
        while (db->writes.head && !db->writes.head->solo && u->nops < OG_DB_MAX_BATCH)
            unit_add(u, q_pop(&db->writes));
        dispatch(c, u, &db->writes);
    }
}

static void on_check(uv_check_t *h)
{
    og_db_t *db = h->data;
    uv_idle_stop(&db->idle);
    run_queues(db);
    if (db->metrics != NULL) {
        og_metrics_gauge(&db->metrics->db_queue, (uint64_t)(db->reads.len + db->writes.len));
        og_metrics_gauge(&db->metrics->db_connected, (uint64_t)db->nstate[C_READY]);
    }
}

static void on_idle(uv_idle_t *h)
{
    /* Only here to keep uv_run from blocking in poll while work is queued. */
}

static void schedule(og_db_t *db)
{
    if (!db->closing && (db->reads.len || db->writes.len || db->failed.len))
        uv_idle_start(&db->idle, on_idle);
}

/* ---- public ----------------------------------------------------------------------------- */

/* Sets up a connection (pool or listener) and starts connecting it. */
static void conn_init(og_db_t *db, dbconn_t *c, int idx)
{
    c->db = db;
    c->idx = idx;
    c->fd = -1;
    uv_timer_init(db->loop, &c->retry);
    c->retry.data = c;
    db->open_handles++;
    conn_start(c);
}

og_db_t *og_db_new(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, const og_db_stmt_t *stmts,
                   int nstmts)
{
    og_db_t *db = calloc(1, sizeof(*db));
    if (db == NULL)
        return NULL;
    db->conns = calloc((size_t)pool, sizeof(*db->conns));
    db->conninfo = strdup(conninfo);
    if (db->conns == NULL || db->conninfo == NULL) {
        free(db->conns);
        free(db->conninfo);
        free(db);
        return NULL;
    }
    db->loop = loop;
    db->log = log;
    db->stmts = stmts;
    db->nstmts = nstmts;
    db->nconns = pool;
    db->nstate[C_DOWN] = pool; /* calloc made every connection C_DOWN */
    uv_check_init(loop, &db->check);
    db->check.data = db;
    uv_check_start(&db->check, on_check);
    uv_unref((uv_handle_t *)&db->check);
    uv_idle_init(loop, &db->idle);
    db->idle.data = db;
    db->open_handles = 2;
    for (int i = 0; i < pool; i++)
        conn_init(db, &db->conns[i], i);
    return db;
}

static bool channel_valid(const char *channel)
{
    size_t n = strlen(channel);
    if (n == 0 || n > CHANNEL_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if ((channel[i] < 'a' || channel[i] > 'z') && channel[i] != '_')
            return false;
    }
    return true;
}

bool og_db_listen(og_db_t *db, const char *channel, og_db_notify_fn fn, void *arg)
{
    if (db->closing || db->listener.listen || fn == NULL || !channel_valid(channel))
        return false;
    snprintf(db->channel, sizeof(db->channel), "%s", channel);
    db->notify = fn;
    db->notify_arg = arg;
    db->listener.listen = true;
    conn_init(db, &db->listener, -1);
    return true;
}

void og_db_set_metrics(og_db_t *db, struct og_metrics_slot *m)
{
    db->metrics = m;
}

void og_db_submit(og_db_t *db, og_db_op_t *op)
{
    op->solo = false;
    op->sqlstate[0] = '\0';
    op->error[0] = '\0';
    if (db->closing)
        q_push(&db->failed, op);
    else
        q_push(op->write ? &db->writes : &db->reads, op);
    db->stats.queued = db->reads.len + db->writes.len;
    uv_idle_start(&db->idle, on_idle);
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
    out->queued = db->reads.len + db->writes.len;
    out->connected = db->nstate[C_READY];
}

static void on_handle_closed(uv_handle_t *h)
{
    og_db_t *db = h->type == UV_TIMER ? ((dbconn_t *)h->data)->db : h->data;
    handle_gone(db);
}

static void conn_close(dbconn_t *c)
{
    conn_broken(c, "closing");
    uv_close((uv_handle_t *)&c->retry, on_handle_closed);
}

void og_db_close(og_db_t *db, void (*closed)(void *arg), void *arg)
{
    db->closing = true;
    db->closed = closed;
    db->closed_arg = arg;
    og_db_op_t *op;
    while ((op = q_pop(&db->reads)) != NULL)
        complete(op, OG_DB_UNAVAILABLE);
    while ((op = q_pop(&db->writes)) != NULL)
        complete(op, OG_DB_UNAVAILABLE);
    while ((op = q_pop(&db->failed)) != NULL)
        complete(op, OG_DB_UNAVAILABLE);
    for (int i = 0; i < db->nconns; i++)
        conn_close(&db->conns[i]);
    if (db->listener.listen)
        conn_close(&db->listener);
    uv_close((uv_handle_t *)&db->check, on_handle_closed);
    uv_close((uv_handle_t *)&db->idle, on_handle_closed);
}
