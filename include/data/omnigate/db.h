/*
 * Asynchronous PostgreSQL for one worker: a small pool of libpq connections driven by the
 * worker's loop (PQconnectStartParams/PQconnectPoll, nonblocking, pipeline mode, prepared
 * statements, one uv_poll_t per socket). Responsible for getting operations to the server
 * and their results back, batching writes, reconnecting; not for what the SQL means (store.c).
 *
 * An operation is one to OG_DB_MAX_STMTS prepared statements that must commit together.
 * Write operations submitted during one loop turn are sent as one pipelined implicit
 * transaction (one Sync) on a connection that has no write batch in flight, so one commit
 * serves them all; every caller is called back after the Sync, i.e. after COMMIT. A batch
 * that fails is retried operation by operation so one bad row cannot fail its neighbours.
 * Reads are sent at once, each as its own transaction.
 *
 * While no connection is up, submissions complete with OG_DB_UNAVAILABLE in the same loop
 * turn (never hang), and each submission nudges a reconnect (at most one attempt per
 * 200 ms) so the worker recovers within moments of the database coming back, despite the
 * 100 ms..5 s backoff of idle reconnects.
 *
 * Deadlines (the pool's timeout, OMNIGATE_DB_TIMEOUT_MS): an operation queued that long for
 * want of a connection fails with OG_DB_UNAVAILABLE, and is never sent after that. An
 * operation (or a write batch) whose results have not all come back that long after it was
 * sent fails the same way, and so does everything else in flight on its connection, which is
 * dropped and rebuilt: a silent server holds every unit behind the late one. So whatever the
 * server does, an operation completes within twice the timeout. A connection attempt gets the
 * timeout to connect and prepare, host name lookups apart. Connections also ask the kernel for
 * TCP keepalives and tcp_user_timeout (see docs/persistence.md).
 *
 * Nothing here blocks the loop on DNS: host names of the conninfo are looked up with
 * uv_getaddrinfo (libuv's threadpool) before each attempt and handed to libpq as `hostaddr`,
 * next to `host` (kept for TLS verification, pg_hba and the password file).
 *
 * Several hosts (`host=a,b ... target_session_attrs=read-write`, or the URI form): an attempt
 * tries them one at a time, each with the timeout to connect, starting with the one that last
 * gave a ready connection (after a failover, the new primary) and going round in the
 * conninfo's order; libpq checks each against target_session_attrs (a standby is passed over
 * for read-write). A host that swallows packets therefore costs one timeout, not every
 * attempt. A write refused because the server turned read-only (SQLSTATE 25006: a demoted
 * primary) fails as OG_DB_UNAVAILABLE and rebuilds the connection. A conninfo that gives
 * hostaddr itself keeps libpq's own walk over the list.
 *
 * og_db_listen adds one more connection outside the pool, for LISTEN: the pool's connections
 * are pipelined and shared, so a notification could never be told apart from a result there.
 *
 * A read pool (og_db_new_reader) is a second pool for reads that need not see the caller's own
 * latest writes (log pages), possibly on a replica: its own connections, so a slow read never
 * sits in a pipeline in front of a write batch's COMMIT. Each of its connections runs one
 * operation at a time (a slow read delays no other read queued behind it on the server), its
 * transactions are read-only, without parallel workers (so the pool's size bounds the server's
 * cores its reads take) and with the given statement_timeout (the server cancels a longer
 * statement: og_db_cancelled), all set per transaction so that a transaction pooler can sit in
 * front; and its statements are sent with their text (never prepared: nothing to prepare on
 * connect, and each is planned for its actual parameters). A unit's deadline there is the
 * statement timeout plus the pool's timeout, so the server's cancellation always comes first
 * unless the server is silent.
 */
#ifndef OMNIGATE_DB_H
#define OMNIGATE_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <uv.h>

#include "og_build.h"
#include "omnigate/db_metrics.h"
#include "omnigate/log.h"

#define OG_DB_MAX_STMTS  8
#define OG_DB_MAX_PARAMS 16
#define OG_DB_MAX_BATCH  256

/* The tally's shape (og_db_set_tally): keys and sums of one row. */
#define OG_DB_TALLY_KEYS 3
#define OG_DB_TALLY_SUMS 6

/* Default of og_db_new's timeout_ms, as of OMNIGATE_DB_TIMEOUT_MS. */
#define OG_DB_TIMEOUT_DEFAULT_MS 5000

typedef struct og_db og_db_t;
typedef struct og_db_op og_db_op_t;

/* A prepared statement of the statement table given to og_db_new. */
typedef struct og_db_stmt {
    const char *name;
    const char *sql;
    int nparams;
    bool read_pool; /* run by read pools only (og_db_new_reader): a write pool never prepares it */
    /* Its set form, as its index in the table + 1 (0: none). When two or more ops of one write
     * batch start with this statement, one call of the set form does it for all of them, ahead
     * of the rest of their statements: the same parameters, each an array (a text literal,
     * `{...}`) of the ops' values in order. It returns rows whose first column is the op's
     * ordinal (from 1) followed by this statement's own columns, each op getting its own rows
     * as its first result (none when none is its own); or nothing (no column), and each op's
     * first result is NULL. A batch that fails is retried op by op, each with this statement:
     * the two must do the same. */
    int many;
} og_db_stmt_t;

typedef enum og_db_status {
    OG_DB_OK = 0,
    OG_DB_ERROR,       /* the server refused a statement: error and sqlstate say why */
    OG_DB_UNAVAILABLE, /* no connection, or it broke before the outcome was known */
} og_db_status_t;

typedef void (*og_db_done_fn)(og_db_op_t *op, og_db_status_t status);

/* A row an op adds to its write batch's tally (og_db_set_tally): its keys, compared byte for
 * byte (they must stay valid until done is called), and the numbers it adds. */
typedef struct og_db_tally_row {
    const char *keys[OG_DB_TALLY_KEYS];
    int64_t sums[OG_DB_TALLY_SUMS];
} og_db_tally_row_t;

/* One statement of an op and its parameters. store.h's binders fill one by name. */
typedef struct og_db_call {
    int stmt; /* index into the statement table */
    const char *values[OG_DB_MAX_PARAMS];
} og_db_call_t;

struct og_db_op {
    /* Filled by the caller; values must stay valid until done is called. NULL = SQL NULL. */
    int nstmts;
    og_db_call_t stmts[OG_DB_MAX_STMTS];
    bool write; /* joins this loop turn's write batch */
    /* A write of background work (the queue's release): batched with such writes only, never
     * in a transaction of a request's, so a request's commit never waits for it (sync p99 while
     * a backlog drains, issue 31: 2.4 x alone before, 1.5-1.9 x with). */
    bool background;
    /* A write too large to share its transaction (a batch's 1,000 messages, API.md §20): its own
     * write batch, so the requests' commits never wait for it, and two of them run on two
     * connections rather than one after the other in one transaction. */
    bool alone;
    /* Rows this write adds to the pool's tally (og_db_set_tally) when its first statement runs in
     * its set form (merged with others of its write batch); alone, its single form counts for
     * itself. The rows must stay valid until done is called. */
    const og_db_tally_row_t *tally;
    int ntally;
    og_db_done_fn done;
    void *arg;

    /* Filled before done is called; the results belong to the op: og_db_op_clear frees them. */
    PGresult *res[OG_DB_MAX_STMTS];
    char sqlstate[6];
    char error[256]; /* JSON-escaped, for log lines */

    /* private */
    og_db_op_t *next;
    bool solo;            /* being retried alone after its batch failed */
    bool merged;          /* its first statement went in its batch's set form (setform.c) */
    bool lost;            /* committed, but its set form's results could not be kept (setform.c) */
    uint8_t fault;        /* test builds: the fault og_db_test_fault armed for it (pool.c) */
    uint64_t deadline_ms; /* loop time after which it is never sent: submission + the pool's timeout */
};

typedef struct og_db_stats {
    uint64_t batches;   /* write transactions committed */
    uint64_t batch_ops; /* write operations in them */
    uint64_t commit_us; /* sum of send-to-Sync latency of write batches */
    uint64_t retries;   /* batches retried op by op */
    size_t queued;      /* operations waiting for a connection right now */
    int connected;      /* connections ready right now */
    /* Connection state changes so far (down, resolving, connecting, preparing, ready; conn.c has
     * the table). */
    uint64_t state_changes;
    /* Deadlines missed: connections dropped because a unit in flight ran out of time, plus
     * queued operations failed for waiting too long for a connection. */
    uint64_t timeouts;
} og_db_stats_t;

/* Creates the pool and starts connecting. `timeout_ms` is the deadline of every operation and
 * connection attempt (<= 0: OG_DB_TIMEOUT_DEFAULT_MS). `stmts` must outlive the pool. A
 * conninfo that does not parse is not an error here: every attempt fails with libpq's reason. */
og_db_t *og_db_new(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                   const og_db_stmt_t *stmts, int nstmts);

/* A read pool on `conninfo` (see the top of this file): `pool` connections, every op a read
 * (op->write is ignored), `statement_timeout_ms` the sessions' statement_timeout (<= 0: none).
 * An op waits at most `timeout_ms` for a free connection, and a sent one at most
 * statement_timeout_ms + timeout_ms for its results. `stmts` is the same table as og_db_new's
 * (only the statements the ops name are ever sent) and must outlive the pool. */
og_db_t *og_db_new_reader(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                          int statement_timeout_ms, const og_db_stmt_t *stmts, int nstmts);

/* True when `op` failed (OG_DB_ERROR) because the server cancelled its statement: a read
 * pool's statement_timeout, or an administrator's pg_cancel_backend (SQLSTATE 57014). */
bool og_db_cancelled(const og_db_op_t *op);

/* Submits `op`; `op->done` is always called later, from the loop, never from inside this call. */
void og_db_submit(og_db_t *db, og_db_op_t *op);

/* The tally: numbers the ops of a write batch add by key (og_db_op_t.tally) when their first
 * statements run merged in a set form, summed here and written by statement `stmt` of the table
 * once per batch, after every op's statements and in their transaction, instead of an aggregate
 * in the set form (usage totals, issue 34: PostgreSQL's cost is per statement and node far more
 * than per row). An op that runs alone (its single form, or retried alone after its batch
 * failed) adds nothing: its single form counts for itself. Its parameters are arrays with one
 * element per distinct key: the OG_DB_TALLY_KEYS keys (text), then the OG_DB_TALLY_SUMS sums
 * (bigint). A batch without rows sends none; its results are no op's, its error fails the batch
 * like an op's. Before the first op is submitted. */
void og_db_set_tally(og_db_t *db, int stmt);

/* Records batches, commit latency, queue depth and ready connections in `m` (may be NULL); a
 * read pool records its queue and connections in the read gauges. */
void og_db_set_metrics(og_db_t *db, og_db_metrics_t *m);

/* Prepared (true, the default): each new connection prepares the statement table once and
 * every statement is sent as Bind/Execute of its prepared name. false: every statement is sent
 * with its text as the unnamed statement (Parse/Bind/Execute, PQsendQueryParams), still
 * pipelined; this is what a transaction pooler that does not keep prepared statements
 * (PgBouncer before 1.21, or without max_prepared_statements) needs, as each transaction may
 * run on another server connection. Applies to connections that come up afterwards: call it
 * right after og_db_new. */
void og_db_set_prepared(og_db_t *db, bool prepared);

/* Where og_db_listen's connection goes: `conninfo` (NULL: the pool's own), or nowhere when
 * `enabled` is false (og_db_listen then refuses, and the caller finds its work by polling).
 * LISTEN needs a session of its own on the server: behind a transaction pooler it must reach
 * PostgreSQL directly or through a session-mode pool. Before og_db_listen; false when called
 * after it, twice, or out of memory. */
bool og_db_set_listener(og_db_t *db, bool enabled, const char *conninfo);

/* True while at least one connection is ready. Also nudges a reconnect when none is. */
bool og_db_ready(og_db_t *db);

void og_db_stats(const og_db_t *db, og_db_stats_t *out);

/* Called from the loop for each notification on the listened channel; payload is "" for a
 * bare NOTIFY, and NULL once after every (re)connect of the listener (see og_db_listen). */
typedef void (*og_db_notify_fn)(void *arg, const char *channel, const char *payload);

/* Keeps one dedicated connection (outside the pool: not counted by og_db_ready, the stats or
 * the metrics) LISTENing on `channel`, a plain identifier ([a-z_]+, at most 63 bytes), and
 * calls fn for each notification. After every (re)connect, once LISTEN is in effect, fn is
 * called with payload NULL: notifications may have been missed while the listener was down,
 * so the caller should look for work. It reconnects like the pool's connections (same
 * backoff; nudged by og_db_ready and by submissions while the pool is down, and when a pool
 * connection comes back). fn may call og_db_close. At most one listener per pool: false when
 * the channel is invalid, a listener exists, the pool is closing or is a read pool, or
 * og_db_set_listener turned listening off. og_db_close closes it. */
bool og_db_listen(og_db_t *db, const char *channel, og_db_notify_fn fn, void *arg);

/* Frees the results of a completed op so it can be reused. */
void og_db_op_clear(og_db_op_t *op);

/* An op of its own (zeroed), for a caller that needs one only for some steps of a longer life:
 * a send waiting on a provider holds none (the op is 1.5 KiB). NULL when out of memory.
 * og_db_op_free frees its results and it (NULL: nothing); not while it is submitted. */
og_db_op_t *og_db_op_new(void);
void og_db_op_free(og_db_op_t *op);

#if OG_TEST_ROUTES
/* Test builds only (-Dtest_routes=true), for the tests that force each failure of a caller.
 *
 * og_db_test_fault: the next `count` operations submitted that contain statement `stmt` (-1:
 * any) fail: with `st` (OG_DB_ERROR or OG_DB_UNAVAILABLE) without being sent; or, with `lost`,
 * they run and commit and are then reported OG_DB_UNAVAILABLE without results, as when a
 * connection breaks after COMMIT and before its answer arrives. A new call replaces the
 * previous one; og_db_test_fault_left says how many are still armed.
 *
 * og_db_test_trace: adds to counts[i] (nstmts entries) how many operations containing
 * statement i were submitted since the previous call. */
void og_db_test_fault(og_db_t *db, int stmt, og_db_status_t st, bool lost, int count);
int og_db_test_fault_left(const og_db_t *db);
void og_db_test_trace(og_db_t *db, uint32_t *counts);
#endif

/* Fails what is queued with OG_DB_UNAVAILABLE, closes the connections (async); `closed` is
 * called once every handle is closed and the pool is freed. An op submitted after this call
 * began (from a callback or not) and before `closed` fails the same way, never inside
 * og_db_submit and always before `closed` runs. */
void og_db_close(og_db_t *db, void (*closed)(void *arg), void *arg);

#endif
