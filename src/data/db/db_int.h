/*
 * The pool's private structures and cross-file functions, shared by the files of src/data/db/ and
 * their unit tests (test/unit/test_db_*.c); the rest of the code has db.h. Not for anything one
 * file keeps to itself (that stays static there).
 *
 * One file per concern, as PgBouncer splits a connection's life:
 *   pool.c      the pool: creation, op queues, queued ops' deadlines, scheduling ops onto
 *               connections, submit, stats, close
 *   conn.c      one connection's states, its socket and timer, the connect steps, preparing
 *   conninfo.c  the conninfo's plan, host lists, host name lookups, an attempt's parameters
 *   pipeline.c  units on a connection's pipeline: sending them, routing each result to its op
 *   setform.c   set forms: merging ops into one statement with array literals, splitting its rows
 *   listen.c    the LISTEN connection and its notifications
 *
 * Functions one file shares with another are declared here with the prefix db_, one line each;
 * so are the few pure helpers that only a unit test calls from outside (db_split_list,
 * db_host_kind, db_q_push, db_q_pop). Everything else stays static in its file.
 *
 * Each connection keeps a FIFO of "units" it has sent: a unit is one or more operations
 * followed by one Sync, i.e. one implicit transaction (pipeline.c).
 *
 * A read pool (og_db_new_reader) differs in three places only: each of its units starts with a
 * statement that sets the transaction (statement_timeout, read-only, no parallel workers) and it
 * prepares nothing on connect (conn.c, pipeline.c); its statements go out as text with their
 * parameters (PQsendQueryParams: the unnamed statement, planned for the values at hand); and a
 * connection takes a unit only when it has none in flight (pool.c). The settings are the
 * transaction's, not the session's: behind a transaction pooler a session's settings would stay
 * on a server connection that is then lent to the write pool (a read-only default there made
 * every write fail), and would be missing on the next one.
 */
#ifndef OMNIGATE_DB_INT_H
#define OMNIGATE_DB_INT_H

#include <sys/types.h>

#include "omnigate/db.h"

#define CHANNEL_MAX   63 /* NAMEDATALEN - 1: the server would truncate a longer name */
#define ADDR_TEXT_MAX 64 /* an IPv6 address with a scope id, as text */

/* A connection's state. Only conn.c's conn_set_state changes it, along the moves of its table. */
typedef enum {
    C_DOWN = 0,   /* no PGconn: waiting for the retry timer or a nudge, or the pool is closing */
    C_RESOLVING,  /* host names being looked up on the threadpool (conn->lookups) */
    C_CONNECTING, /* PQconnectStartParams done, PQconnectPoll under way */
    C_PREPARING,  /* connected; the unit preparing the statement table (or LISTEN) is in flight */
    C_READY,      /* statements prepared: takes reads and write batches (the listener: listening) */
    C_NSTATES
} cstate_t;

/* How a host of the conninfo is reached: only names need a lookup. */
typedef enum { H_SOCKET, H_NUMERIC, H_NAME } hkind_t;

/* What the conninfo says, parsed once by og_db_new (og_db_set_listener for the listener's). */
typedef struct plan {
    PQconninfoOption *opts; /* NULL when it did not parse: every attempt fails with `error` */
    char *error;
    int nopts;
    /* Filled when the hosts are known here (`hosts`): the host and port lists (from the
     * conninfo, else PGHOST/PGPORT), cut at the commas. nports is 0, 1 or nhosts. `iterate`:
     * an attempt tries them one at a time (conn.c); `resolve`: some are names;
     * `prefer_standby`: target_session_attrs=prefer-standby, two passes (db_entries_build). */
    bool iterate, resolve, prefer_standby;
    char **hosts, **ports;
    int nhosts, nports;
    hkind_t *kinds;
    /* The host and address that last got a connection ready (-1: none yet): attempts start
     * there, so after a failover they go straight to the new primary. */
    int good_host;
    char good_addr[ADDR_TEXT_MAX];
    /* Our keepalive parameters, derived from the timeout. */
    char ka_idle[16], ka_interval[16], user_timeout[16];
} plan_t;

/* One host entry of an attempt: a host of the plan, with one of its addresses for a name. */
typedef struct entry {
    int host;                 /* index in the plan's hosts */
    char addr[ADDR_TEXT_MAX]; /* hostaddr: "" for a socket directory */
    const char *tsa;          /* target_session_attrs in place of the conninfo's, or NULL */
} entry_t;

/* The PQconnectStartParams arrays of one attempt (db_params_build). */
typedef struct params {
    const char **kw, **val; /* one allocation: val points into kw's */
    int n;
} params_t;

/* One statement of a write unit that does for several ops what each one's first statement would
 * do alone: their set form (og_db_stmt_t.many), whose parameters are arrays of the ops' values
 * (see db_merge_groups). */
typedef struct group {
    int stmt; /* the set form */
    int nops;
    og_db_op_t **ops;               /* in the arrays' order: ord 1 is ops[0] */
    char *values[OG_DB_MAX_PARAMS]; /* the array literals, in `buf` */
    char *buf;
} group_t;

typedef struct unit {
    og_db_op_t *head, *tail;
    int nops;
    bool write;
    bool prepare; /* the statement-preparing unit sent right after connecting */
    bool failed;
    bool read_only; /* a statement was refused because the server is read-only (25006) */
    bool preamble;  /* the read pool's settings statement comes first: its results are no op's */
    uint64_t sent_us;
    uint64_t deadline_ms; /* sending + the timeout (the attempt's deadline, for the preparing unit) */
    group_t *groups;      /* sent first, before the ops' own statements */
    int ngroups;
    /* The tally's array literals (in tally_buf; NULL: no op of the unit has rows), sent last. */
    char *tally_values[OG_DB_TALLY_KEYS + OG_DB_TALLY_SUMS];
    char *tally_buf;
    int cur_group;   /* group the next result belongs to, while < ngroups */
    og_db_op_t *cur; /* else the op the next result belongs to */
    int cur_stmt;
    struct unit *next;
} unit_t;

typedef struct poll_h poll_h_t;   /* conn.c: a connection's uv_poll_t */
typedef struct lookups lookups_t; /* conninfo.c: the host name lookups of one attempt */

typedef struct dbconn {
    og_db_t *db;
    int idx;      /* position in the pool; -1 for the listener */
    bool listen;  /* the pool's listener: never picked, not in nstate nor the stats */
    plan_t *plan; /* the pool's, or the listener's own (og_db_set_listener) */
    PGconn *pg;
    cstate_t state;
    bool prepared; /* its statements are prepared (else each is sent with its text) */
    poll_h_t *ph;
    int fd;
    dev_t fd_dev; /* the socket ph watches (fd is only its number: see conn.c's poll_set) */
    ino_t fd_ino;
    int events;
    /* While C_CONNECTING with an iterating plan: the attempt's host entries, in the order they
     * are tried, the one under way, and what the ones before it failed with. */
    entry_t *entries;
    int nentries, entry;
    char errors[512];
    unit_t *uhead, *utail;
    bool write_inflight;
    uv_timer_t timer;          /* retry, attempt deadline or unit deadline: see conn.c's on_timer */
    uint64_t timer_due;        /* loop time the timer is armed for, while it runs */
    uint64_t attempt_deadline; /* loop time by which the attempt under way must be ready */
    lookups_t *lookups;        /* while C_RESOLVING */
    bool lookup_warned;        /* a failed lookup was logged since the last time it was ready */
    uint64_t backoff_ms;
    uint64_t last_attempt_ms;
} dbconn_t;

typedef struct opq {
    og_db_op_t *head, *tail;
    size_t len;
} opq_t;

struct og_db {
    uv_loop_t *loop;
    og_log_t *log;
    plan_t plan;
    plan_t listen_plan; /* when listen_own_plan: og_db_set_listener's conninfo */
    bool listen_own_plan;
    bool listen_off; /* og_db_set_listener(false): og_db_listen refuses */
    bool prepared;   /* prepare the statement table on new connections (og_db_set_prepared) */
    int timeout_ms;
    const og_db_stmt_t *stmts;
    int nstmts;
    int tally_stmt; /* og_db_set_tally's statement; -1: none */
    /* A read pool (og_db_new_reader): every op is a read, see the top of this file. */
    bool reader;
    char statement_timeout[16]; /* reader: each read transaction's statement_timeout, in ms, as text */
    uint64_t unit_grace_ms;     /* added to timeout_ms for a unit's deadline: the statement timeout */
    dbconn_t *conns;
    int nconns;
    int nstate[C_NSTATES];         /* pool connections in each state, kept exact by conn_set_state */
    dbconn_t listener;             /* in use once listener.listen is set (og_db_listen) */
    char channel[CHANNEL_MAX + 1]; /* what the listener listens on: [a-z_]+ (og_db_listen checks) */
    og_db_notify_fn notify;
    void *notify_arg;
    opq_t writes, bg_writes, reads, failed; /* bg_writes: og_db_op_t.background's */
    uv_check_t check;
    /* Active while work is queued, so the loop does not block in poll. Once the pool is closing,
     * it completes what is submitted meanwhile, and is the last handle closed (pool.c). */
    uv_idle_t idle;
    uv_timer_t qtimer;   /* armed for the deadline of the oldest queued op (pool.c's queue_arm) */
    uint64_t qtimer_due; /* what it is armed for, while it runs */
    og_db_stats_t stats;
    og_db_metrics_t *metrics;
    bool closing;
    int open_handles;
    void (*closed)(void *arg);
    void *closed_arg;
#if OG_TEST_ROUTES
    struct {
        int stmt; /* -1: any */
        uint8_t kind;
        int left;
    } fault;
    uint32_t *trace; /* per statement, since the last og_db_test_trace */
#endif
};

/* The texts of a connection's log lines (db_conn_msg). */
enum { MSG_CONNECTED, MSG_LOST, MSG_LOOKUP, MSG_HOST, MSG__COUNT };

/* ---- pool.c ----------------------------------------------------------------------------- */

/* Appends op to q. */
void db_q_push(opq_t *q, og_db_op_t *op);
/* Puts the n ops linked from first to last back at the front of q, in their order. */
void db_q_push_front(opq_t *q, og_db_op_t *first, og_db_op_t *last, size_t n);
/* Takes the op at the front of q (NULL when empty), unlinked. */
og_db_op_t *db_q_pop(opq_t *q);
/* Calls op's callback with st, after what a test fault or lost results make of it. */
void db_op_complete(og_db_op_t *op, og_db_status_t st);
/* Keeps the loop turning while ops are queued, so the pool's check runs its queues. */
void db_schedule(og_db_t *db);
/* Every closed handle (and every finished lookup set) ends here; the last frees the pool. */
void db_handle_gone(og_db_t *db);

/* ---- conn.c ----------------------------------------------------------------------------- */

/* Sets up a connection (pool or listener) and starts connecting it. */
void db_conn_init(og_db_t *db, dbconn_t *c, int idx);
/* Breaks c for good (the pool is closing) and closes its timer. */
void db_conn_close(dbconn_t *c);
/* Drops c's connection: its units fail, and unless the pool is closing it backs off to retry. */
void db_conn_broken(dbconn_t *c, const char *why);
/* Starts libpq's connection, with the lookups' addresses when there were lookups (ls). */
void db_conn_connect(dbconn_t *c, const lookups_t *ls);
/* The preparing unit's Sync came back without error: c is ready. */
void db_conn_up(dbconn_t *c);
/* Starts an attempt now if c is down and its last one began long enough ago. */
void db_conn_nudge(dbconn_t *c, uint64_t now);
/* Arms c's timer for what its state waits on (the attempt's or its most urgent unit's deadline). */
void db_conn_arm(dbconn_t *c);
/* Pushes buffered output; watches for writability while libpq has more to send. */
bool db_conn_flush(dbconn_t *c);
/* The text of log line `which` (MSG_*) for c's kind: a pool's, a read pool's, the listener's. */
const char *db_conn_msg(const dbconn_t *c, int which);

/* ---- conninfo.c ------------------------------------------------------------------------- */

/* Splits a comma-separated list into one allocation of *n pointers and the cut text. */
char **db_split_list(const char *s, int *n);
/* How host is reached: a socket directory ("", '/', '@'), a numeric address, or a name. */
hkind_t db_host_kind(const char *host);
/* Parses conninfo into p (zeroed by the caller); false when out of memory (then db_plan_free). */
bool db_plan_init(plan_t *p, const char *conninfo, int timeout_ms);
void db_plan_free(plan_t *p);
/* Fills c's attempt entries from its plan and lookups (ls, or NULL); false, with why, for none. */
bool db_entries_build(dbconn_t *c, const lookups_t *ls, char *why, size_t whylen);
void db_entries_free(dbconn_t *c);
/* An attempt's PQconnectStartParams arrays (p->kw is to be freed); false when out of memory. */
bool db_params_build(const plan_t *pl, const entry_t *e, const char *app, params_t *p);
/* Starts looking up c's host names, then db_conn_connect; false when out of memory. */
bool db_lookups_start(dbconn_t *c);
/* c's attempt gives up its lookups (cancelled, or left to finish on their own). */
void db_lookups_abandon(dbconn_t *c);

/* ---- pipeline.c ------------------------------------------------------------------------- */

unit_t *db_unit_new(bool write);
/* Appends op to u. */
void db_unit_add(unit_t *u, og_db_op_t *op);
void db_unit_free(unit_t *u);
/* Queues u on c's pipeline (settings, set forms, the ops' statements, Sync) and links it. */
bool db_unit_send(dbconn_t *c, unit_t *u);
/* The deadline of c's most urgent unit in flight; UINT64_MAX with none. */
uint64_t db_units_deadline(const dbconn_t *c);
/* Fails every unit in flight on c with OG_DB_UNAVAILABLE. */
void db_units_fail(dbconn_t *c);
/* Reads what arrived on c and hands each result to its op. */
void db_read_results(dbconn_t *c);

/* ---- setform.c -------------------------------------------------------------------------- */

/* Gathers the ops of write unit u whose first statement has a set form into groups. */
void db_merge_groups(const og_db_t *db, unit_t *u);
/* Hands each op of g its own rows of the set form's result r; false when out of memory. */
bool db_split_result(PGconn *pg, const group_t *g, const PGresult *r);
/* Sums the tally rows of write unit u's merged ops by key into u->tally_values (after
 * db_merge_groups); false when out of memory. */
bool db_tally_values(unit_t *u);

/* ---- listen.c --------------------------------------------------------------------------- */

/* Sends the listener's LISTEN on c; false when libpq refused it. */
bool db_listen_send(dbconn_t *c);
/* The listener is ready: tells the caller to look for work it may have missed. */
void db_listen_up(dbconn_t *c);
/* Hands the listener's notifications to the caller. */
void db_listen_deliver(dbconn_t *c);

#endif
