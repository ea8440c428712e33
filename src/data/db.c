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
 *
 * Each connection has one timer, whose meaning follows its state: the retry while down, the
 * attempt's deadline while it comes up, the deadline of its most urgent unit once ready. The
 * pool has one more, for the oldest operation still queued. No timer per operation.
 *
 * The conninfo is parsed once (PQconninfoParse) into a plan; every attempt rebuilds the
 * PQconnectStartParams arrays from it, with `hostaddr` from the lookups of that attempt and
 * our keepalive defaults where the conninfo sets none.
 *
 * A read pool (og_db_new_reader) differs in three places only: each of its units starts with a
 * statement that sets the transaction (statement_timeout, read-only, no parallel workers) and it
 * prepares nothing on connect; its statements go out as text with their parameters
 * (PQsendQueryParams: the unnamed statement, planned for the values at hand); and a connection
 * takes a unit only when it has none in flight (pick). The settings are the transaction's, not
 * the session's: behind a transaction pooler a session's settings would stay on a server
 * connection that is then lent to the write pool (a read-only default there made every write
 * fail), and would be missing on the next one.
 */
#include "omnigate/db.h"
#include "omnigate/metrics.h"
#include "omnigate/util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define NUDGE_MIN_MS   200
#define CHANNEL_MAX    63 /* NAMEDATALEN - 1: the server would truncate a longer name */
/* A lookup is bounded by the resolver's own timeouts (glibc: 5 s x 2 tries per server), not by
 * OMNIGATE_DB_TIMEOUT_MS: a deadline shorter than the DNS would otherwise never connect. This
 * only stops a resolver that hangs for good from holding the connection forever. */
#define LOOKUP_MAX_MS  30000
#define HOST_ADDRS_MAX 8  /* addresses kept per host name, tried in the resolver's order */
#define ADDR_TEXT_MAX  64 /* an IPv6 address with a scope id, as text */

/* A connection's state. Only conn_set_state changes it, along the moves of conn_moves. */
typedef enum {
    C_DOWN = 0,   /* no PGconn: waiting for the retry timer or a nudge, or the pool is closing */
    C_RESOLVING,  /* host names being looked up on the threadpool (conn->lookups) */
    C_CONNECTING, /* PQconnectStartParams done, PQconnectPoll under way */
    C_PREPARING,  /* connected; the unit preparing the statement table (or LISTEN) is in flight */
    C_READY,      /* statements prepared: takes reads and write batches (the listener: listening) */
    C_NSTATES
} cstate_t;

/* The legal moves, [from][to]. Every other is a bug in this file. */
static const bool conn_moves[C_NSTATES][C_NSTATES] = {
    [C_DOWN] = {[C_RESOLVING] = true, [C_CONNECTING] = true}, /* conn_start; conn_connect */
    [C_RESOLVING] = {[C_CONNECTING] = true, [C_DOWN] = true}, /* conn_connect; conn_broken */
    [C_CONNECTING] = {[C_PREPARING] = true, [C_DOWN] = true}, /* send_prepares; conn_broken */
    [C_PREPARING] = {[C_READY] = true, [C_DOWN] = true},      /* unit_done; conn_broken */
    [C_READY] = {[C_DOWN] = true},                            /* conn_broken */
};

static const char *const cstate_names[C_NSTATES] = {"down", "resolving", "connecting", "preparing", "ready"};

/* How a host of the conninfo is reached: only names need a lookup. */
typedef enum { H_SOCKET, H_NUMERIC, H_NAME } hkind_t;

/* What the conninfo says, parsed once by og_db_new (og_db_set_listener for the listener's). */
typedef struct plan {
    PQconninfoOption *opts; /* NULL when it did not parse: every attempt fails with `error` */
    char *error;
    int nopts;
    /* Filled when the hosts are known here (`hosts`): the host and port lists (from the
     * conninfo, else PGHOST/PGPORT), cut at the commas. nports is 0, 1 or nhosts. `iterate`:
     * an attempt tries them one at a time (conn_connect); `resolve`: some are names;
     * `prefer_standby`: target_session_attrs=prefer-standby, two passes (entries_build). */
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

typedef struct dbconn dbconn_t;

/* One statement of a write unit that does for several ops what each one's first statement would
 * do alone: their set form (og_db_stmt_t.many), whose parameters are arrays of the ops' values
 * (see merge_groups). */
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
    int cur_group;   /* group the next result belongs to, while < ngroups */
    og_db_op_t *cur; /* else the op the next result belongs to */
    int cur_stmt;
    struct unit *next;
} unit_t;

/* uv_poll_t lives apart from the connection: libpq may switch sockets while connecting, and
 * the old handle must finish closing (close_cb frees it) while the new one is in use. */
typedef struct poll_h {
    uv_poll_t poll;
    dbconn_t *c;
} poll_h_t;

typedef struct lookups lookups_t;

struct dbconn {
    og_db_t *db;
    int idx;      /* position in the pool; -1 for the listener */
    bool listen;  /* the pool's listener: never picked, not in nstate nor the stats */
    plan_t *plan; /* the pool's, or the listener's own (og_db_set_listener) */
    PGconn *pg;
    cstate_t state;
    bool prepared; /* its statements are prepared (else each is sent with its text) */
    poll_h_t *ph;
    int fd;
    dev_t fd_dev; /* the socket ph watches (fd is only its number: see poll_set) */
    ino_t fd_ino;
    int events;
    /* While C_CONNECTING with an iterating plan: the attempt's host entries, in the order they
     * are tried, the one under way, and what the ones before it failed with. */
    entry_t *entries;
    int nentries, entry;
    char errors[512];
    unit_t *uhead, *utail;
    bool write_inflight;
    uv_timer_t timer;          /* retry, attempt deadline or unit deadline: see on_timer */
    uint64_t timer_due;        /* loop time the timer is armed for, while it runs */
    uint64_t attempt_deadline; /* loop time by which the attempt under way must be ready */
    lookups_t *lookups;        /* while C_RESOLVING */
    bool lookup_warned;        /* a failed lookup was logged since the last time it was ready */
    uint64_t backoff_ms;
    uint64_t last_attempt_ms;
};

/* One host name lookup of an attempt, on libuv's threadpool. */
typedef struct lookup {
    uv_getaddrinfo_t req;
    lookups_t *set;
    bool pending;
    int status; /* 0, or the UV_E* code of the failed lookup */
    int naddrs;
    char addrs[HOST_ADDRS_MAX][ADDR_TEXT_MAX];
} lookup_t;

/* The lookups of one attempt, a slot per host of the plan (slots of hosts that need none stay
 * idle). It outlives an attempt that gives up (deadline, pool closing), which only clears `c`:
 * a running getaddrinfo cannot be stopped, so the set is freed by its last callback and counts
 * as an open handle of the pool until then. */
struct lookups {
    og_db_t *db;
    dbconn_t *c; /* NULL once the attempt gave up */
    int pending;
    int n;
    lookup_t l[]; /* n: the plan's nhosts */
};

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
    opq_t writes, reads, failed;
    uv_check_t check;
    uv_idle_t idle;      /* active while work is queued, so the loop does not block in poll */
    uv_timer_t qtimer;   /* armed for the deadline of the oldest queued op (queue_arm) */
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

/* og_db_op_t.fault (test builds; og_db_test_fault). */
enum { FAULT_NONE, FAULT_ERROR, FAULT_UNAVAILABLE, FAULT_LOST };

static void conn_start(dbconn_t *c);
static void conn_connect(dbconn_t *c, const lookups_t *ls);
static void nudge_conn(dbconn_t *c, uint64_t now);
static void conn_broken(dbconn_t *c, const char *why);
static void attempt_failed(dbconn_t *c, const char *why);
static void entries_free(dbconn_t *c);
static void conn_io(dbconn_t *c, int events);
static void schedule(og_db_t *db);

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

/* The texts of a connection's log lines, by its kind: a pool's, a read pool's, the listener. */
enum { MSG_CONNECTED, MSG_LOST, MSG_LOOKUP, MSG_HOST, MSG__COUNT };
static const char *const conn_msgs[3][MSG__COUNT] = {
    {"database connected", "database connection lost", "database host lookup failed", "database host failed"},
    {"database read connection connected", "database read connection lost",
     "database read connection host lookup failed", "database read connection host failed"},
    {"database listener connected", "database listener lost", "database listener host lookup failed",
     "database listener host failed"},
};

static const char *conn_msg(const dbconn_t *c, int which)
{
    return conn_msgs[c->listen ? 2 : c->db->reader ? 1 : 0][which];
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

static void complete(og_db_op_t *op, og_db_status_t st)
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

/* ---- poll handling ---------------------------------------------------------------------- */

static void plan_free(plan_t *p);

/* Every closed handle (and every finished lookup set) ends here; the pool is freed with the
 * last one. */
static void handle_gone(og_db_t *db)
{
    if (--db->open_handles > 0 || !db->closing)
        return;
    void (*cb)(void *) = db->closed;
    void *arg = db->closed_arg;
    free(db->conns);
    plan_free(&db->plan);
    plan_free(&db->listen_plan);
#if OG_TEST_ROUTES
    free(db->trace);
#endif
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

static void read_results(dbconn_t *c);

static void on_poll(uv_poll_t *p, int status, int events)
{
    poll_h_t *ph = p->data;
    dbconn_t *c = ph->c;
    if (status < 0) {
        /* POLLERR (a refused connect, a reset), which libuv reports as UV_EBADF after stopping
         * the handle: not a bad descriptor, and not the reason to log. libpq must see it: while
         * connecting (SO_ERROR) it tries the next address or fails with the real reason; once
         * connected it reads what arrived before the error, then says what happened. */
        c->events = 0;
        if (c->state == C_CONNECTING) {
            conn_io(c, 0);
            return;
        }
        read_results(c);
        if (c->state != C_DOWN)
            conn_broken(c, "error on the connection's socket");
        return;
    }
    conn_io(c, events);
}

/* Watches the connection's current socket for `events`, following a socket change. While
 * connecting, libpq closes a socket and opens the next one (next address, next host, a retry
 * without SSL) inside one PQconnectPoll, and the new one usually gets the number the old one
 * had. epoll forgot the old socket when it was closed, so a handle kept because the number is
 * the same would never fire again (or fire for the old socket's stale event): the socket
 * itself is compared, by its inode, after every PQconnectPoll step. */
static bool poll_set(dbconn_t *c, int events)
{
    int fd = PQsocket(c->pg);
    if (fd < 0)
        return false;
    struct stat st = {0};
    bool check = c->state == C_CONNECTING || c->ph == NULL || c->fd != fd;
    if (check && fstat(fd, &st) != 0)
        return false;
    if (c->ph && (c->fd != fd || (check && (st.st_dev != c->fd_dev || st.st_ino != c->fd_ino))))
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
        c->fd_dev = st.st_dev;
        c->fd_ino = st.st_ino;
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

/* The deadline of c's most urgent unit in flight; UINT64_MAX with none. */
static uint64_t units_deadline(const dbconn_t *c)
{
    uint64_t due = UINT64_MAX;
    for (const unit_t *u = c->uhead; u; u = u->next)
        due = u->deadline_ms < due ? u->deadline_ms : due;
    return due;
}

static void on_timer(uv_timer_t *t);

/* Arms c's timer for what its state waits on: the attempt's deadline while it comes up, its
 * most urgent unit once ready (stopped with none in flight). Not for C_DOWN (the retry). */
static void conn_arm(dbconn_t *c)
{
    uint64_t due = c->state == C_READY ? units_deadline(c) : c->attempt_deadline;
    if (due == UINT64_MAX) {
        uv_timer_stop(&c->timer);
        return;
    }
    if (due == c->timer_due && uv_is_active((uv_handle_t *)&c->timer))
        return;
    uint64_t now = uv_now(c->db->loop);
    c->timer_due = due;
    uv_timer_start(&c->timer, on_timer, due > now ? due - now : 0, 0);
}

static void unit_free(unit_t *u)
{
    if (u == NULL)
        return;
    for (int g = 0; g < u->ngroups; g++) {
        free(u->groups[g].ops);
        free(u->groups[g].buf);
    }
    free(u->groups);
    free(u);
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
        unit_free(u);
        u = next;
    }
}

/* The attempt gives up its lookups: cancelled if not started yet, else left to finish (their
 * set is freed by the last callback, see struct lookups). */
static void lookups_abandon(dbconn_t *c)
{
    lookups_t *ls = c->lookups;
    if (ls == NULL)
        return;
    c->lookups = NULL;
    ls->c = NULL;
    for (int i = 0; i < ls->n; i++)
        if (ls->l[i].pending)
            uv_cancel((uv_req_t *)&ls->l[i].req);
}

static void conn_broken(dbconn_t *c, const char *why)
{
    og_db_t *db = c->db;
    bool was_ready = c->state == C_READY;
    if (c->state != C_DOWN && !db->closing) {
        char esc[1024];
        og_log_escape(esc, sizeof(esc), why ? why : "", why ? strlen(why) : 0);
        og_log(db->log, was_ready ? OG_LOG_WARN : OG_LOG_DEBUG, conn_msg(c, MSG_LOST),
               "\"conn\":%d,\"error\":\"%s\"", c->idx, esc);
    }
    lookups_abandon(c);
    entries_free(c);
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
    uv_timer_start(&c->timer, on_timer, c->backoff_ms, 0);
    schedule(db);
}

/* See struct dbconn: down, the timer is the retry; on the way up, the attempt's deadline;
 * ready, the deadline of the most urgent unit in flight. A missed deadline drops the
 * connection: libpq cannot take back what it sent, and the server may answer any time. */
static void on_timer(uv_timer_t *t)
{
    dbconn_t *c = t->data;
    og_db_t *db = c->db;
    char why[128];
    switch (c->state) {
    case C_DOWN:
        conn_start(c);
        return;
    case C_READY:
        if (units_deadline(c) > uv_now(db->loop)) {
            conn_arm(c); /* the unit it was armed for is done; a later one is due later */
            return;
        }
        db->stats.timeouts++;
        if (db->metrics != NULL)
            og_metrics_add(&db->metrics->db_timeouts, 1);
        snprintf(why, sizeof(why), "no answer within %d ms (OMNIGATE_DB_TIMEOUT_MS)", db->timeout_ms);
        break;
    case C_RESOLVING:
        snprintf(why, sizeof(why), "host name lookup took longer than %d ms", LOOKUP_MAX_MS);
        break;
    case C_CONNECTING: /* this host did not make it in time: the next one may */
        snprintf(why, sizeof(why), "not connected within %d ms (OMNIGATE_DB_TIMEOUT_MS)", db->timeout_ms);
        attempt_failed(c, why);
        return;
    default:
        snprintf(why, sizeof(why), "not connected within %d ms (OMNIGATE_DB_TIMEOUT_MS)", db->timeout_ms);
        break;
    }
    conn_broken(c, why);
}

/* ---- host name lookups ------------------------------------------------------------------ */

static void lookups_done(lookups_t *ls);

/* Keeps the addresses of one answer as text, in the resolver's order, without repeats. */
static void on_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    lookup_t *l = container_of(req, lookup_t, req);
    lookups_t *ls = l->set;
    l->pending = false;
    l->status = status;
    for (const struct addrinfo *a = res; a != NULL && l->naddrs < HOST_ADDRS_MAX; a = a->ai_next) {
        char *text = l->addrs[l->naddrs];
        if (getnameinfo(a->ai_addr, a->ai_addrlen, text, ADDR_TEXT_MAX, NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        bool seen = false;
        for (int i = 0; i < l->naddrs && !seen; i++)
            seen = strcmp(l->addrs[i], text) == 0;
        if (!seen)
            l->naddrs++;
    }
    if (status == 0 && l->naddrs == 0)
        l->status = UV_EAI_NODATA;
    uv_freeaddrinfo(res);
    if (--ls->pending == 0)
        lookups_done(ls);
}

/* Looks up every host name of the plan at once, then connects (lookups_done). */
static void lookups_start(dbconn_t *c)
{
    og_db_t *db = c->db;
    const plan_t *pl = c->plan;
    int n = pl->nhosts;
    lookups_t *ls = calloc(1, sizeof(*ls) + (size_t)n * sizeof(ls->l[0]));
    conn_set_state(c, C_RESOLVING);
    if (ls == NULL) {
        conn_broken(c, "out of memory");
        return;
    }
    ls->db = db;
    ls->c = c;
    ls->n = n;
    c->lookups = ls;
    db->open_handles++;
    c->attempt_deadline = uv_now(db->loop) + LOOKUP_MAX_MS;
    conn_arm(c);
    /* As libpq asks (fe-connect.c): any family, stream sockets. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    for (int i = 0; i < n; i++) {
        lookup_t *l = &ls->l[i];
        l->set = ls;
        if (pl->kinds[i] != H_NAME)
            continue;
        int r = uv_getaddrinfo(db->loop, &l->req, on_lookup, pl->hosts[i], NULL, &hints);
        if (r != 0) {
            l->status = r;
        } else {
            l->pending = true;
            ls->pending++;
        }
    }
    if (ls->pending == 0) /* every lookup failed to start: callbacks only come from the loop */
        lookups_done(ls);
}

static void lookups_done(lookups_t *ls)
{
    og_db_t *db = ls->db;
    dbconn_t *c = ls->c;
    if (c != NULL) {
        c->lookups = NULL;
        conn_connect(c, ls);
    }
    free(ls);
    handle_gone(db);
}

/* ---- connection parameters -------------------------------------------------------------- */

/* Splits a comma-separated list (libpq's syntax: no quoting) into one allocation: the array of
 * `*n` pointers followed by the cut copy of the text. */
static char **split_list(const char *s, int *n)
{
    size_t len = strlen(s);
    int count = 1;
    for (const char *p = s; *p; p++)
        count += *p == ',';
    char **out = malloc((size_t)count * sizeof(*out) + len + 1);
    if (out == NULL)
        return NULL;
    char *text = (char *)(out + count);
    memcpy(text, s, len + 1);
    for (int i = 0; i < count; i++) {
        out[i] = text;
        text += strcspn(text, ",");
        *text++ = '\0';
    }
    *n = count;
    return out;
}

static const char *opt_value(const PQconninfoOption *opts, const char *key)
{
    for (const PQconninfoOption *o = opts; o->keyword != NULL; o++)
        if (strcmp(o->keyword, key) == 0)
            return o->val;
    return NULL;
}

static hkind_t host_kind(const char *host)
{
    unsigned char addr[16];
    /* Empty: libpq's default socket directory. '@': an abstract socket (libpq's is_unixsock_path). */
    if (host[0] == '\0' || host[0] == '/' || host[0] == '@')
        return H_SOCKET;
    if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1)
        return H_NUMERIC;
    return H_NAME;
}

/* Parses the conninfo once. Names are looked up by us only where libpq would look them up
 * itself: no hostaddr given, and the hosts known here (a service file may name hosts we
 * cannot see: libpq then resolves them, as before). Environment defaults apply as in libpq.
 *
 * With the hosts known, an attempt also tries them one at a time (`iterate`) instead of
 * handing libpq the whole list: libpq's connect_timeout is not applied by PQconnectPoll, so
 * with the list a host that swallows packets (a machine that is gone: no RST, no answer) holds
 * every attempt until our deadline drops it, and the hosts after it are never tried. One host
 * per PQconnectStartParams gives each its own deadline. target_session_attrs keeps its meaning:
 * libpq checks each host against it, and prefer-standby's two passes over the list are made
 * here (entries_build). */
static bool plan_init(plan_t *p, const char *conninfo, int timeout_ms)
{
    p->good_host = -1;
    snprintf(p->user_timeout, sizeof(p->user_timeout), "%d", timeout_ms);
    snprintf(p->ka_idle, sizeof(p->ka_idle), "%d", (timeout_ms + 999) / 1000);
    snprintf(p->ka_interval, sizeof(p->ka_interval), "%d", (timeout_ms + 2999) / 3000);
    char *err = NULL;
    p->opts = PQconninfoParse(conninfo, &err);
    if (p->opts == NULL) {
        p->error = strdup(err != NULL ? err : "out of memory");
        PQfreemem(err);
        return p->error != NULL;
    }
    for (const PQconninfoOption *o = p->opts; o->keyword != NULL; o++)
        p->nopts++;
    const char *host = opt_value(p->opts, "host");
    const char *hostaddr = opt_value(p->opts, "hostaddr");
    const char *port = opt_value(p->opts, "port");
    const char *tsa = opt_value(p->opts, "target_session_attrs");
    if (host == NULL && opt_value(p->opts, "service") == NULL && getenv("PGSERVICE") == NULL)
        host = getenv("PGHOST");
    if (hostaddr == NULL)
        hostaddr = getenv("PGHOSTADDR");
    if (port == NULL)
        port = getenv("PGPORT");
    if (tsa == NULL)
        tsa = getenv("PGTARGETSESSIONATTRS");
    if (host == NULL || (hostaddr != NULL && hostaddr[0] != '\0'))
        return true;
    p->hosts = split_list(host, &p->nhosts);
    p->ports = port != NULL ? split_list(port, &p->nports) : NULL;
    p->kinds = p->hosts != NULL ? calloc((size_t)p->nhosts, sizeof(*p->kinds)) : NULL;
    if (p->hosts == NULL || (port != NULL && p->ports == NULL) || p->kinds == NULL)
        return false;
    if (p->nports > 1 && p->nports != p->nhosts)
        return true; /* libpq refuses it without looking anything up */
    for (int i = 0; i < p->nhosts; i++) {
        p->kinds[i] = host_kind(p->hosts[i]);
        p->resolve |= p->kinds[i] == H_NAME;
    }
    p->iterate = true;
    p->prefer_standby = tsa != NULL && strcmp(tsa, "prefer-standby") == 0;
    return true;
}

static void plan_free(plan_t *p)
{
    PQconninfoFree(p->opts);
    free(p->error);
    free(p->hosts);
    free(p->ports);
    free(p->kinds);
}

static const char *plan_port(const plan_t *pl, int host)
{
    return pl->nports > 1 ? pl->ports[host] : pl->nports == 1 ? pl->ports[0] : "";
}

typedef struct params {
    const char **kw, **val; /* one allocation: val points into kw's */
    int n;
} params_t;

static void params_add(params_t *p, const char *kw, const char *val)
{
    p->kw[p->n] = kw;
    p->val[p->n] = val;
    p->n++;
}

/* Logs each host name whose lookup failed, once until the connection is ready again. */
static void log_lookup_failures(dbconn_t *c, const lookups_t *ls)
{
    og_db_t *db = c->db;
    const plan_t *pl = c->plan;
    for (int i = 0; i < pl->nhosts && !c->lookup_warned; i++) {
        if (pl->kinds[i] != H_NAME || ls->l[i].status == 0)
            continue;
        char host[160];
        og_log_escape(host, sizeof(host), pl->hosts[i], strlen(pl->hosts[i]));
        og_log(db->log, OG_LOG_WARN, conn_msg(c, MSG_LOOKUP), "\"conn\":%d,\"host\":\"%s\",\"error\":\"%s\"",
               c->idx, host, uv_strerror(ls->l[i].status));
    }
    for (int i = 0; i < pl->nhosts; i++)
        c->lookup_warned |= pl->kinds[i] == H_NAME && ls->l[i].status != 0;
}

/* The host entries of an attempt, from the plan and its lookups (ls, NULL without names): a
 * host whose lookup failed is left out, as libpq itself skips a host it cannot resolve. They
 * start at the entry that last got a connection ready, then go round in the conninfo's order.
 * prefer-standby is libpq's two passes: every entry as `standby`, then every entry as `any`.
 * False when none is left (`why` says so). */
static bool entries_build(dbconn_t *c, const lookups_t *ls, char *why, size_t whylen)
{
    const plan_t *pl = c->plan;
    entry_t *e = calloc((size_t)pl->nhosts * HOST_ADDRS_MAX, sizeof(*e));
    if (e == NULL) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    int n = 0;
    for (int i = 0; i < pl->nhosts; i++) {
        switch (pl->kinds[i]) {
        case H_SOCKET:
            e[n++].host = i;
            break;
        case H_NUMERIC:
            e[n].host = i;
            snprintf(e[n++].addr, ADDR_TEXT_MAX, "%s", pl->hosts[i]);
            break;
        case H_NAME:
            for (int a = 0; ls != NULL && a < ls->l[i].naddrs; a++) {
                e[n].host = i;
                snprintf(e[n++].addr, ADDR_TEXT_MAX, "%s", ls->l[i].addrs[a]);
            }
            break;
        }
    }
    if (ls != NULL)
        log_lookup_failures(c, ls);
    int passes = pl->prefer_standby ? 2 : 1;
    entry_t *out = n > 0 ? calloc((size_t)(n * passes), sizeof(*out)) : NULL;
    if (out == NULL) {
        if (n == 0) /* every host is a name, and none resolved */
            snprintf(why, whylen, "could not look up host \"%.100s\": %s", pl->hosts[0],
                     ls != NULL ? uv_strerror(ls->l[0].status) : "no address");
        else
            snprintf(why, whylen, "out of memory");
        free(e);
        return false;
    }
    int first = 0;
    for (int k = 0; k < n; k++)
        if (e[k].host == pl->good_host && strcmp(e[k].addr, pl->good_addr) == 0)
            first = k;
    for (int pass = 0; pass < passes; pass++) {
        for (int k = 0; k < n; k++) {
            entry_t *o = &out[pass * n + k];
            *o = e[(first + k) % n];
            o->tsa = passes == 1 ? NULL : pass == 0 ? "standby" : "any";
        }
    }
    free(e);
    free(c->entries);
    c->entries = out;
    c->nentries = n * passes;
    c->entry = 0;
    return true;
}

static void entries_free(dbconn_t *c)
{
    free(c->entries);
    c->entries = NULL;
    c->nentries = c->entry = 0;
}

/* The PQconnectStartParams arrays of one attempt: the conninfo's own options, our keepalive
 * defaults where it sets none, and with an entry (e) its host, address and port in place of the
 * conninfo's lists. */
static bool params_build(dbconn_t *c, const entry_t *e, params_t *p)
{
    const plan_t *pl = c->plan;
    /* application_name, unless the conninfo or PGAPPNAME says: pg_stat_activity (and PgBouncer's
     * SHOW CLIENTS) tell the write pool, the read pool and the listener apart. */
    const char *app = c->listen ? "omnigate-listen" : c->db->reader ? "omnigate-read" : "omnigate";
    const char *const ka[][2] = {
        {"keepalives", "1"},
        {"keepalives_idle", pl->ka_idle},
        {"keepalives_interval", pl->ka_interval},
        {"keepalives_count", "3"},
        {"tcp_user_timeout", pl->user_timeout},
        {"fallback_application_name", app},
    };
    size_t cap = (size_t)pl->nopts + sizeof(ka) / sizeof(ka[0]) + 4; /* + host, hostaddr, port, NULL */
    *p = (params_t){.kw = calloc(2 * cap, sizeof(char *))};
    if (p->kw == NULL)
        return false;
    p->val = p->kw + cap;
    for (const PQconninfoOption *o = pl->opts; o->keyword != NULL; o++) {
        bool ours = e != NULL && (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
                                  strcmp(o->keyword, "port") == 0 ||
                                  (e->tsa != NULL && strcmp(o->keyword, "target_session_attrs") == 0));
        if (o->val != NULL && !ours)
            params_add(p, o->keyword, o->val);
    }
    for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++)
        if (opt_value(pl->opts, ka[i][0]) == NULL)
            params_add(p, ka[i][0], ka[i][1]);
    if (e != NULL) {
        params_add(p, "host", pl->hosts[e->host]);
        if (e->addr[0] != '\0')
            params_add(p, "hostaddr", e->addr);
        if (plan_port(pl, e->host)[0] != '\0')
            params_add(p, "port", plan_port(pl, e->host));
        if (e->tsa != NULL)
            params_add(p, "target_session_attrs", e->tsa);
    }
    return true;
}

/* ---- connecting ------------------------------------------------------------------------- */

/* Starts libpq's connection to the current entry (or, without entries, to what the conninfo
 * says). False when libpq refused at once: `why` says why. */
static bool conn_begin(dbconn_t *c, char *why, size_t whylen)
{
    og_db_t *db = c->db;
    params_t p = {0};
    snprintf(why, whylen, "out of memory"); /* unless the plan or libpq says otherwise */
    if (c->plan->opts == NULL)
        snprintf(why, whylen, "%s", c->plan->error);
    else if (params_build(c, c->entries != NULL ? &c->entries[c->entry] : NULL, &p))
        c->pg = PQconnectStartParams(p.kw, p.val, 0); /* libpq copies what it keeps */
    free(p.kw);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        if (c->pg != NULL)
            snprintf(why, whylen, "%s", PQerrorMessage(c->pg));
        return false;
    }
    PQsetnonblocking(c->pg, 1);
    c->attempt_deadline = uv_now(db->loop) + (uint64_t)db->timeout_ms;
    conn_arm(c);
    return true;
}

/* The entry under way failed (`why`): the next one is tried, or the attempt has failed with
 * what each entry failed with. */
static void attempt_failed(dbconn_t *c, const char *why)
{
    og_db_t *db = c->db;
    char next_why[256];
    while (c->entries != NULL && c->entry + 1 < c->nentries) {
        const entry_t *e = &c->entries[c->entry];
        const char *host = c->plan->hosts[e->host];
        char esc[256], host_esc[160];
        og_log_escape(esc, sizeof(esc), why, strlen(why));
        og_log_escape(host_esc, sizeof(host_esc), host, strlen(host));
        og_log(db->log, OG_LOG_DEBUG, conn_msg(c, MSG_HOST),
               "\"conn\":%d,\"host\":\"%s\",\"addr\":\"%s\",\"error\":\"%s\"", c->idx, host_esc, e->addr,
               esc);
        /* Kept before PQfinish frees it, without libpq's final newline. */
        size_t len = strlen(c->errors), wl = strlen(why);
        while (wl > 0 && (why[wl - 1] == '\n' || why[wl - 1] == ' '))
            wl--;
        snprintf(c->errors + len, sizeof(c->errors) - len, "%.*s; ", (int)wl, why);
        poll_drop(c);
        PQfinish(c->pg);
        c->pg = NULL;
        c->entry++;
        if (conn_begin(c, next_why, sizeof(next_why))) {
            /* Per the libpq docs, start as if PQconnectPoll had said PGRES_POLLING_WRITING. */
            if (!poll_set(c, UV_WRITABLE))
                conn_broken(c, "cannot watch socket");
            return;
        }
        why = next_why; /* refused at once: on to the one after */
    }
    char all[sizeof(c->errors) + 256];
    snprintf(all, sizeof(all), "%s%s", c->errors, why);
    conn_broken(c, all);
}

/* Starts libpq's connection, with the lookups' addresses when there were lookups (ls). */
static void conn_connect(dbconn_t *c, const lookups_t *ls)
{
    char why[256];
    c->errors[0] = '\0';
    bool ok = c->plan->opts == NULL || !c->plan->iterate || entries_build(c, ls, why, sizeof(why));
    conn_set_state(c, C_CONNECTING); /* also on failure, so conn_broken logs and backs off */
    if (!ok) {
        conn_broken(c, why);
        return;
    }
    if (!conn_begin(c, why, sizeof(why))) {
        attempt_failed(c, why);
        return;
    }
    /* Per the libpq docs, start as if PQconnectPoll had said PGRES_POLLING_WRITING. */
    if (!poll_set(c, UV_WRITABLE))
        conn_broken(c, "cannot watch socket");
}

static void conn_start(dbconn_t *c)
{
    og_db_t *db = c->db;
    if (db->closing || c->state != C_DOWN)
        return;
    uv_timer_stop(&c->timer);
    c->last_attempt_ms = uv_now(db->loop);
    if (c->plan->resolve)
        lookups_start(c);
    else
        conn_connect(c, NULL);
}

/* Sends the unit that makes a new connection useful: the statement table (or nothing, with
 * unnamed statements: its Sync alone shows the session answers), or the listener's LISTEN. Its
 * Sync moves the connection to C_READY (unit_done). */
static void send_prepares(dbconn_t *c)
{
    og_db_t *db = c->db;
    unit_t *u = calloc(1, sizeof(*u));
    if (u == NULL || PQenterPipelineMode(c->pg) != 1) {
        unit_free(u);
        conn_broken(c, "cannot enter pipeline mode");
        return;
    }
    u->prepare = true;
    u->deadline_ms = c->attempt_deadline;
    c->prepared = db->prepared && !c->listen && !db->reader;
    bool sent = true;
    if (c->listen) {
        /* LISTEN takes no parameter: the channel is an identifier og_db_listen checked ([a-z_]+). */
        char sql[80];
        snprintf(sql, sizeof(sql), "LISTEN %s", db->channel);
        sent = PQsendQueryParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
    }
    for (int i = 0; sent && c->prepared && i < db->nstmts; i++)
        if (!db->stmts[i].read_pool)
            sent = PQsendPrepare(c->pg, db->stmts[i].name, db->stmts[i].sql, db->stmts[i].nparams, NULL);
    if (!sent || !PQpipelineSync(c->pg)) {
        unit_free(u);
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
        attempt_failed(c, PQerrorMessage(c->pg));
        break;
    }
}

/* ---- results ---------------------------------------------------------------------------- */

static void unit_done(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    if (u->prepare) {
        if (u->failed) {
            unit_free(u);
            conn_broken(c, "preparing statements failed");
            return;
        }
        conn_set_state(c, C_READY);
        conn_arm(c); /* no unit in flight yet: the attempt's deadline is over */
        c->backoff_ms = 0;
        c->lookup_warned = false;
        if (c->entries != NULL) { /* the next attempt of any connection starts here */
            c->plan->good_host = c->entries[c->entry].host;
            snprintf(c->plan->good_addr, sizeof(c->plan->good_addr), "%s", c->entries[c->entry].addr);
            entries_free(c);
        }
        char host[160];
        const char *h = PQhost(c->pg) != NULL ? PQhost(c->pg) : "";
        og_log_escape(host, sizeof(host), h, strlen(h));
        og_log(db->log, OG_LOG_INFO, conn_msg(c, MSG_CONNECTED),
               "\"conn\":%d,\"host\":\"%s\",\"port\":\"%s\"", c->idx, host,
               PQport(c->pg) != NULL ? PQport(c->pg) : "");
        unit_free(u);
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
    if (u->read_only) {
        /* The server is a standby now (a failover demoted it, or the conninfo reached the
         * wrong one): nothing of the unit was committed, and every later write here would be
         * refused the same way. Its ops fail as unavailable (503) and the connection is
         * rebuilt, which finds the read-write server by target_session_attrs. */
        for (og_db_op_t *op = u->head; op; op = op->next)
            og_db_op_clear(op);
        u->next = c->uhead; /* back in front: conn_broken fails it with the rest */
        c->uhead = u;
        if (c->utail == NULL)
            c->utail = u;
        conn_broken(c, "the server is read-only (a standby)");
        return;
    }
    conn_arm(c); /* for the next unit in flight, if any */
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
        unit_free(u);
        schedule(db);
        return;
    }
    og_db_op_t *op = u->head;
    og_db_status_t st = u->failed ? OG_DB_ERROR : OG_DB_OK;
    unit_free(u);
    while (op) {
        og_db_op_t *next = op->next;
        op->next = NULL;
        complete(op, st);
        op = next;
    }
    schedule(db);
}

/* ---- set forms --------------------------------------------------------------------------- */

/* Hands each op of group g the rows of the set form's result r that are its own: those whose
 * first column (the op's ordinal, from 1) names it, without that column. Every op gets a
 * result, with no rows when none is its own. False when out of memory. */
static bool split_result(dbconn_t *c, const group_t *g, const PGresult *r)
{
    int nf = PQnfields(r);
    if (nf < 1)
        return true;
    PGresAttDesc *attrs = malloc((size_t)nf * sizeof(*attrs)); /* nf - 1 used; never malloc(0) */
    if (attrs == NULL)
        return false;
    for (int f = 1; f < nf; f++)
        attrs[f - 1] = (PGresAttDesc){.name = PQfname(r, f),
                                      .tableid = PQftable(r, f),
                                      .columnid = PQftablecol(r, f),
                                      .format = PQfformat(r, f),
                                      .typid = PQftype(r, f),
                                      .typlen = PQfsize(r, f),
                                      .atttypmod = PQfmod(r, f)};
    bool ok = true;
    for (int i = 0; ok && i < g->nops; i++) {
        PGresult *own = PQmakeEmptyPGresult(c->pg, PGRES_TUPLES_OK);
        ok = own != NULL && PQsetResultAttrs(own, nf - 1, attrs);
        if (ok) {
            PQclear(g->ops[i]->res[0]);
            g->ops[i]->res[0] = own;
        } else {
            PQclear(own);
        }
    }
    free(attrs); /* PQsetResultAttrs copied them */
    if (!ok)
        return false;
    for (int row = 0; row < PQntuples(r); row++) {
        long ord = strtol(PQgetvalue(r, row, 0), NULL, 10);
        if (ord < 1 || ord > g->nops)
            continue;
        PGresult *own = g->ops[ord - 1]->res[0];
        int at = PQntuples(own);
        for (int f = 1; f < nf; f++) {
            bool null = PQgetisnull(r, row, f);
            if (!PQsetvalue(own, at, f - 1, null ? NULL : PQgetvalue(r, row, f),
                            null ? -1 : PQgetlength(r, row, f)))
                return false;
        }
    }
    return true;
}

/* Appends `v` to `p` as an element of an array literal: NULL, or quoted with \ before every "
 * and \. */
static char *array_element(char *p, const char *v)
{
    if (v == NULL) {
        memcpy(p, "NULL", 4);
        return p + 4;
    }
    *p++ = '"';
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            *p++ = '\\';
        *p++ = *v;
    }
    *p++ = '"';
    return p;
}

/* Builds group g's array literals: parameter k is {ops[0]'s k-th value, ops[1]'s, ...}. */
static bool group_values(const og_db_t *db, group_t *g)
{
    int np = db->stmts[g->stmt].nparams;
    size_t size = 0;
    for (int i = 0; i < g->nops; i++)
        for (int k = 0; k < np; k++) {
            const char *v = g->ops[i]->stmts[0].values[k];
            size += v != NULL ? 2 * strlen(v) + 3 : 5; /* escaped and quoted, and a comma */
        }
    size += (size_t)np * 3;
    char *p = g->buf = malloc(size);
    if (p == NULL)
        return false;
    for (int k = 0; k < np; k++) {
        g->values[k] = p;
        *p++ = '{';
        for (int i = 0; i < g->nops; i++) {
            if (i > 0)
                *p++ = ',';
            p = array_element(p, g->ops[i]->stmts[0].values[k]);
        }
        *p++ = '}';
        *p++ = '\0';
    }
    return true;
}

/* Whether op, not in a group yet, starts with statement stmt, which has a set form. */
static bool mergeable(const og_db_t *db, const og_db_op_t *op, int stmt)
{
    return !op->merged && op->nstmts >= 1 && op->stmts[0].stmt == stmt && db->stmts[stmt].many != 0;
}

/* In a write unit of several ops, gathers the ops whose first statement has a set form, by that
 * statement, into one group each (two ops or more): the group's one statement does their first
 * statements' work, before the rest of every op's statements. The ops of a batch are
 * independent of each other (any may be retried alone), so only each op's own order matters,
 * and it is kept. Without memory, the ops simply run as they are. */
static void merge_groups(const og_db_t *db, unit_t *u)
{
    for (og_db_op_t *op = u->head; op; op = op->next)
        op->merged = op->lost = false; /* a retried op is sent again: nothing of it committed */
    if (!u->write || u->nops < 2)
        return;
    for (og_db_op_t *op = u->head; op; op = op->next) {
        if (op->nstmts < 1 || !mergeable(db, op, op->stmts[0].stmt))
            continue;
        int stmt = op->stmts[0].stmt, n = 0;
        for (og_db_op_t *o = op; o; o = o->next)
            n += mergeable(db, o, stmt);
        if (n < 2)
            continue;
        group_t *gs = realloc(u->groups, (size_t)(u->ngroups + 1) * sizeof(*gs));
        if (gs == NULL)
            return;
        u->groups = gs;
        group_t *g = memset(&gs[u->ngroups], 0, sizeof(*g));
        g->stmt = db->stmts[stmt].many - 1;
        if ((g->ops = malloc((size_t)n * sizeof(*g->ops))) == NULL)
            return;
        for (og_db_op_t *o = op; o; o = o->next)
            if (mergeable(db, o, stmt))
                g->ops[g->nops++] = o;
        if (!group_values(db, g)) {
            free(g->ops);
            return;
        }
        for (int i = 0; i < g->nops; i++)
            g->ops[i]->merged = true;
        u->ngroups++;
        if (db->metrics != NULL)
            og_metrics_add(&db->metrics->db_merged, (uint64_t)g->nops);
    }
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
    if (u->cur_group < u->ngroups) {
        group_t *g = &u->groups[u->cur_group];
        if (st == PGRES_TUPLES_OK && !split_result(c, g, r)) {
            /* Out of memory for the ops' results. Not a failure of the unit: retrying the ops
             * alone would do their work twice once it commits. Like a connection lost after
             * COMMIT, they end unavailable with no results (complete). */
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
    if (c->listen) {
        deliver_notifies(c);
    } else {
        /* Behind a transaction pooler a server connection that once ran LISTEN (someone
         * else's) delivers its notifications to whichever client holds it next: drop them,
         * they would pile up in libpq until the connection closes. */
        PGnotify *n;
        while (c->pg != NULL && (n = PQnotifies(c->pg)) != NULL)
            PQfreemem(n);
    }
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

static bool send_unit(dbconn_t *c, unit_t *u)
{
    og_db_t *db = c->db;
    if (db->reader) {
        /* For the transaction (the unit, up to its Sync), never the session: see the top of
         * this file. A read that runs longer is cancelled by the server itself (57014); nothing
         * sent here can ever write; and a read is one backend, no parallel workers, so the
         * pool's size bounds the server's cores its reads take (a parallel scan takes 3). */
        static const char sql[] = "SELECT set_config('statement_timeout', $1, true), "
                                  "set_config('transaction_read_only', 'on', true), "
                                  "set_config('max_parallel_workers_per_gather', '0', true)";
        const char *values[1] = {db->statement_timeout};
        if (!PQsendQueryParams(c->pg, sql, 1, NULL, values, NULL, NULL, 0))
            return false;
        u->preamble = true;
    }
    merge_groups(db, u);
    for (int g = 0; g < u->ngroups; g++)
        if (!send_stmt(c, u->groups[g].stmt, (const char *const *)u->groups[g].values))
            return false;
    for (og_db_op_t *op = u->head; op; op = op->next)
        for (int i = op->merged ? 1 : 0; i < op->nstmts; i++)
            if (!send_stmt(c, op->stmts[i].stmt, op->stmts[i].values))
                return false;
    if (!PQpipelineSync(c->pg))
        return false;
    u->sent_us = now_us();
    /* Counted from sending, not from submission: the connection is dropped only for a server
     * that stays silent that long, never for time the ops spent queued (queue_arm bounds it).
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
    conn_arm(c);
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
        unit_free(u);
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

/* Fails the ops of `q` whose deadline has passed: they waited for a connection too long. */
static void expire_queue(og_db_t *db, opq_t *q, uint64_t now)
{
    opq_t keep = {0}, expired = {0};
    og_db_op_t *op;
    while ((op = q_pop(q)) != NULL)
        q_push(op->deadline_ms <= now ? &expired : &keep, op);
    *q = keep;
    db->stats.timeouts += expired.len;
    if (db->metrics != NULL && expired.len > 0)
        og_metrics_add(&db->metrics->db_timeouts, expired.len);
    /* Completed after the queue is whole again: a callback may submit. */
    while ((op = q_pop(&expired)) != NULL) {
        snprintf(op->error, sizeof(op->error), "no %sdatabase connection within %d ms",
                 db->reader ? "free read " : "", db->timeout_ms);
        complete(op, OG_DB_UNAVAILABLE);
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

static void run_queues(og_db_t *db)
{
    og_db_op_t *op;
    while ((op = q_pop(&db->failed)) != NULL)
        complete(op, OG_DB_UNAVAILABLE);
    expire_due(db); /* never send an op whose caller's deadline is over */

    if (db->nstate[C_READY] == 0) {
        if (db->reads.len || db->writes.len)
            nudge(db);
        /* A connection on its way up (start-up, or a reconnect the nudge just began) will
         * take the queue when ready, or the queue's deadline fails it (queue_arm); only with
         * none coming do requests fail at once. */
        if (db->nstate[C_RESOLVING] + db->nstate[C_CONNECTING] + db->nstate[C_PREPARING] > 0)
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
            unit_free(u);
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
    queue_arm(db);
    if (db->metrics != NULL) {
        og_db_metrics_t *m = db->metrics;
        og_metrics_gauge(db->reader ? &m->db_read_queue : &m->db_queue,
                         (uint64_t)(db->reads.len + db->writes.len));
        og_metrics_gauge(db->reader ? &m->db_read_connected : &m->db_connected,
                         (uint64_t)db->nstate[C_READY]);
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
    c->plan = c->listen && db->listen_own_plan ? &db->listen_plan : &db->plan;
    c->fd = -1;
    uv_timer_init(db->loop, &c->timer);
    c->timer.data = c;
    db->open_handles++;
    conn_start(c);
}

static og_db_t *pool_new(uv_loop_t *loop, og_log_t *log, const char *conninfo, int pool, int timeout_ms,
                         const og_db_stmt_t *stmts, int nstmts, bool reader, int statement_timeout_ms)
{
    og_db_t *db = calloc(1, sizeof(*db));
    if (db == NULL)
        return NULL;
    db->conns = calloc((size_t)pool, sizeof(*db->conns));
    int deadline = timeout_ms > 0 ? timeout_ms : OG_DB_TIMEOUT_DEFAULT_MS;
    if (db->conns == NULL || !plan_init(&db->plan, conninfo, deadline)) {
        free(db->conns);
        plan_free(&db->plan);
        free(db);
        return NULL;
    }
    db->loop = loop;
    db->log = log;
    db->stmts = stmts;
    db->nstmts = nstmts;
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
        conn_init(db, &db->conns[i], i);
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

void og_db_set_prepared(og_db_t *db, bool prepared)
{
    db->prepared = prepared;
}

bool og_db_set_listener(og_db_t *db, bool enabled, const char *conninfo)
{
    if (db->listener.listen || db->listen_own_plan)
        return false;
    db->listen_off = !enabled;
    if (!enabled || conninfo == NULL)
        return true;
    if (!plan_init(&db->listen_plan, conninfo, db->timeout_ms)) {
        plan_free(&db->listen_plan);
        db->listen_plan = (plan_t){0};
        return false;
    }
    db->listen_own_plan = true;
    return true;
}

bool og_db_listen(og_db_t *db, const char *channel, og_db_notify_fn fn, void *arg)
{
    if (db->closing || db->reader || db->listen_off || db->listener.listen || fn == NULL ||
        !channel_valid(channel))
        return false;
    snprintf(db->channel, sizeof(db->channel), "%s", channel);
    db->notify = fn;
    db->notify_arg = arg;
    db->listener.listen = true;
    conn_init(db, &db->listener, -1);
    return true;
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
        q_push(&db->failed, op);
        uv_idle_start(&db->idle, on_idle);
        return;
    }
#endif
    if (db->closing)
        q_push(&db->failed, op);
    else
        q_push(op->write && !db->reader ? &db->writes : &db->reads, op);
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

static void on_pool_handle_closed(uv_handle_t *h)
{
    handle_gone(h->data);
}

static void on_conn_timer_closed(uv_handle_t *h)
{
    handle_gone(((dbconn_t *)h->data)->db);
}

static void conn_close(dbconn_t *c)
{
    conn_broken(c, "closing");
    uv_close((uv_handle_t *)&c->timer, on_conn_timer_closed);
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
    uv_close((uv_handle_t *)&db->check, on_pool_handle_closed);
    uv_close((uv_handle_t *)&db->idle, on_pool_handle_closed);
    uv_close((uv_handle_t *)&db->qtimer, on_pool_handle_closed);
}
