/*
 * Units on a ready connection's pipeline: sending one, routing each result to its op and statement,
 * finishing it at its Sync (callbacks, or a retry op by op). Not which connection a unit goes to
 * (pool.c), nor how set forms are built and split (setform.c).
 *
 * Each connection keeps a FIFO of "units" it has sent: a unit is one or more operations
 * followed by one Sync, i.e. one implicit transaction. Results come back in order, so the
 * head unit's cursor (op, statement) says which statement the next result belongs to.
 * libpq returns each statement's result(s) followed by NULL, and PGRES_PIPELINE_SYNC for the
 * Sync (not followed by NULL); after an error every further statement of the unit yields
 * PGRES_PIPELINE_ABORTED up to the Sync.
 */
#include "db_int.h"

#include "omnigate/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

unit_t *db_unit_new(bool write)
{
    unit_t *u = calloc(1, sizeof(*u));
    if (u)
        u->write = write;
    return u;
}

void db_unit_add(unit_t *u, og_db_op_t *op)
{
    op->next = NULL;
    if (u->tail)
        u->tail->next = op;
    else
        u->head = op;
    u->tail = op;
    u->nops++;
}

void db_unit_free(unit_t *u)
{
    if (u == NULL)
        return;
    for (int g = 0; g < u->ngroups; g++) {
        free(u->groups[g].ops);
        free(u->groups[g].buf);
    }
    free(u->groups);
    free(u->tally_buf);
    free(u);
}

uint64_t db_units_deadline(const dbconn_t *c)
{
    uint64_t due = UINT64_MAX;
    for (const unit_t *u = c->uhead; u; u = u->next)
        due = u->deadline_ms < due ? u->deadline_ms : due;
    return due;
}

void db_units_fail(dbconn_t *c)
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
            db_op_complete(op, OG_DB_UNAVAILABLE);
            op = n;
        }
        db_unit_free(u);
        u = next;
    }
}

/* ---- sending ---------------------------------------------------------------------------- */

/* The first statement of op (or of the ops after it) that was sent as its own, from stmt on:
 * a merged op's first statement went in a group. Sets u->cur (NULL past the last op). */
static void cursor_seek(unit_t *u, og_db_op_t *op, int stmt)
{
    for (; op != NULL; op = op->next, stmt = 0) {
        if (stmt == 0 && op->merged)
            stmt = 1;
        if (stmt < op->nstmts) {
            u->cur = op;
            u->cur_stmt = stmt;
            return;
        }
    }
    u->cur = NULL;
    u->cur_stmt = 0;
}

/* Queues statement `stmt` of the table with its values on c's pipeline. */
static bool send_stmt(dbconn_t *c, int stmt, const char *const *values)
{
    const og_db_stmt_t *s = &c->db->stmts[stmt];
    /* Unnamed: Parse, Bind and Execute with the text every time (a transaction pooler may give
     * each transaction another server connection: see og_db_set_prepared). */
    bool named = c->prepared && !s->read_pool; /* read-pool statements are never prepared */
    return named ? PQsendQueryPrepared(c->pg, s->name, s->nparams, values, NULL, NULL, 0)
                 : PQsendQueryParams(c->pg, s->sql, s->nparams, NULL, values, NULL, NULL, 0);
}

bool db_unit_send(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    if (db->reader) {
        /* For the transaction (the unit, up to its Sync), never the session: see db_int.h. A
         * read that runs longer is cancelled by the server itself (57014); nothing sent here
         * can ever write; and a read is one backend, no parallel workers, so the pool's size
         * bounds the server's cores its reads take (a parallel scan takes 3). */
        static const char sql[] = "SELECT set_config('statement_timeout', $1, true), "
                                  "set_config('transaction_read_only', 'on', true), "
                                  "set_config('max_parallel_workers_per_gather', '0', true)";
        const char *values[1] = {db->statement_timeout};
        if (!PQsendQueryParams(c->pg, sql, 1, NULL, values, NULL, NULL, 0))
            return false;
        u->preamble = true;
    }
    db_merge_groups(db, u);
    for (int g = 0; g < u->ngroups; g++)
        if (!send_stmt(c, u->groups[g].stmt, (const char *const *)u->groups[g].values))
            return false;
    for (og_db_op_t *op = u->head; op; op = op->next)
        for (int i = op->merged ? 1 : 0; i < op->nstmts; i++)
            if (!send_stmt(c, op->stmts[i].stmt, op->stmts[i].values))
                return false;
    /* The tally last: its result comes after every op's, when the cursor is past them (its
     * rows are dropped; an error fails the unit). Out of memory, the ops are not sent without it. */
    if (u->write && db->tally_stmt >= 0) {
        if (!db_tally_values(u))
            return false;
        if (u->tally_buf != NULL && !send_stmt(c, db->tally_stmt, (const char *const *)u->tally_values))
            return false;
    }
    if (!PQpipelineSync(c->pg))
        return false;
    u->sent_us = now_us();
    /* Counted from sending, not from submission: the connection is dropped only for a server
     * that stays silent that long, never for time the ops spent queued (pool.c bounds it).
     * A read pool's server cancels a statement at its statement_timeout: its units get that
     * much more, so the server's answer (57014) comes first unless the server is silent. */
    u->deadline_ms = uv_now(db->loop) + (uint64_t)db->timeout_ms + db->unit_grace_ms;
    if (u->ngroups == 0) /* else the cursor starts when the groups' results are in */
        cursor_seek(u, u->head, 0);
    if (c->utail)
        c->utail->next = u;
    else
        c->uhead = u;
    c->utail = u;
    if (u->write)
        c->write_inflight = true;
    db_conn_arm(c);
    return true;
}

/* ---- results ---------------------------------------------------------------------------- */

static void unit_done(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    if (u->prepare) {
        bool failed = u->failed;
        db_unit_free(u);
        if (failed)
            db_conn_broken(c, "preparing statements failed");
        else
            db_conn_up(c);
        return;
    }
    if (u->read_only) {
        /* The server is a standby now (a failover demoted it, or the conninfo reached the
         * wrong one): nothing of the unit was committed, and every later write here would be
         * refused the same way. Its ops fail as unavailable (503) and the connection is
         * rebuilt, which finds the read-write server by target_session_attrs. */
        for (og_db_op_t *op = u->head; op; op = op->next)
            og_db_op_clear(op);
        u->next = c->uhead; /* back in front: db_conn_broken fails it with the rest */
        c->uhead = u;
        if (c->utail == NULL)
            c->utail = u;
        db_conn_broken(c, "the server is read-only (a standby)");
        return;
    }
    db_conn_arm(c); /* for the next unit in flight, if any */
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
        db_q_push_front(u->head->background ? &db->bg_writes : &db->writes, u->head, u->tail,
                        (size_t)u->nops);
        db_unit_free(u);
        db_schedule(db);
        return;
    }
    og_db_op_t *op = u->head;
    og_db_status_t st = u->failed ? OG_DB_ERROR : OG_DB_OK;
    db_unit_free(u);
    while (op) {
        og_db_op_t *next = op->next;
        op->next = NULL;
        db_op_complete(op, st);
        op = next;
    }
    db_schedule(db);
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
    if (u->preamble && st != PGRES_FATAL_ERROR) { /* the read pool's settings: no op's result */
        PQclear(r);
        return;
    }
    if (st == PGRES_FATAL_ERROR) {
        u->failed = true;
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        /* read_only_sql_transaction; a read pool's own transactions are read-only by choice */
        u->read_only |= !c->db->reader && state != NULL && strcmp(state, "25006") == 0;
        /* Past the ops, the error is the tally's: the last op reports it (alone when retried). */
        og_db_op_t *op = u->cur != NULL ? u->cur : u->tally_buf != NULL ? u->tail : NULL;
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
    if (u->cur_group < u->ngroups) {
        group_t *g = &u->groups[u->cur_group];
        if (st == PGRES_TUPLES_OK && !db_split_result(c->pg, g, r)) {
            /* Out of memory for the ops' results. Not a failure of the unit: retrying the ops
             * alone would do their work twice once it commits. Like a connection lost after
             * COMMIT, they end unavailable with no results (db_op_complete). */
            for (int i = 0; i < g->nops; i++)
                g->ops[i]->lost = true;
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
    if (u->preamble) { /* the read pool's settings: no op's */
        u->preamble = false;
        return;
    }
    if (u->cur_group < u->ngroups) {
        if (++u->cur_group == u->ngroups)
            cursor_seek(u, u->head, 0);
        return;
    }
    if (u->cur == NULL)
        return;
    cursor_seek(u, u->cur, u->cur_stmt + 1);
}

void db_read_results(dbconn_t *c)
{
    if (!PQconsumeInput(c->pg)) {
        db_conn_broken(c, PQerrorMessage(c->pg));
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
    if (c->listen) {
        db_listen_deliver(c);
    } else {
        /* Behind a transaction pooler a server connection that once ran LISTEN (someone
         * else's) delivers its notifications to whichever client holds it next: drop them,
         * they would pile up in libpq until the connection closes. */
        PGnotify *n;
        while (c->pg != NULL && (n = PQnotifies(c->pg)) != NULL)
            PQfreemem(n);
    }
    if (c->state != C_DOWN && c->pg && PQstatus(c->pg) == CONNECTION_BAD)
        db_conn_broken(c, PQerrorMessage(c->pg));
}
