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
 * A read pool (og_db_new_reader) differs in three places only: its connections' first unit sets
 * the session (statement_timeout, read-only, no parallel workers) instead of preparing; its statements go out
 * as text with their parameters (PQsendQueryParams: the unnamed statement, planned for the values at hand);
 * and a connection takes a unit only when it has none in flight (pick).
 */
#include "omnigate/db.h"
#include "omnigate/metrics.h"
#include "omnigate/util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

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

/* What the conninfo says, parsed once by og_db_new. */
typedef struct plan {
    PQconninfoOption *opts; /* NULL when it did not parse: every attempt fails with `error` */
    char *error;
    int nopts;
    /* Filled only when some host is a name (`resolve`): the host and port lists (from the
     * conninfo, else PGHOST/PGPORT), cut at the commas. nports is 0, 1 or nhosts. */
    bool resolve;
    char **hosts, **ports;
    int nhosts, nports;
    hkind_t *kinds;
    /* Our keepalive parameters, derived from the timeout. */
    char ka_idle[16], ka_interval[16], user_timeout[16];
} plan_t;

typedef struct dbconn dbconn_t;

typedef struct unit {
    og_db_op_t *head, *tail;
    int nops;
    bool write;
    bool prepare; /* the statement-preparing unit sent right after connecting */
    bool failed;
    uint64_t sent_us;
    uint64_t deadline_ms; /* sending + the timeout (the attempt's deadline, for the preparing unit) */
    og_db_op_t *cur;      /* op the next result belongs to */
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
    int idx;     /* position in the pool; -1 for the listener */
    bool listen; /* the pool's listener: never picked, not in nstate nor the stats */
    PGconn *pg;
    cstate_t state;
    poll_h_t *ph;
    int fd;
    int events;
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
    lookup_t l[]; /* db->plan.nhosts */
};

typedef struct opq {
    og_db_op_t *head, *tail;
    size_t len;
} opq_t;

struct og_db {
    uv_loop_t *loop;
    og_log_t *log;
    plan_t plan;
    int timeout_ms;
    const og_db_stmt_t *stmts;
    int nstmts;
    /* A read pool (og_db_new_reader): every op is a read, see the top of this file. */
    bool reader;
    char statement_timeout[16]; /* reader: the session's statement_timeout, in ms, as text */
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
    struct og_metrics_slot *metrics;
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
static void conn_io(dbconn_t *c, int events);
static void schedule(og_db_t *db);

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

/* The texts of a connection's log lines, by its kind: a pool's, a read pool's, the listener. */
enum { MSG_CONNECTED, MSG_LOST, MSG_LOOKUP, MSG__COUNT };
static const char *const conn_msgs[3][MSG__COUNT] = {
    {"database connected", "database connection lost", "database host lookup failed"},
    {"database read connection connected", "database read connection lost",
     "database read connection host lookup failed"},
    {"database listener connected", "database listener lost", "database listener host lookup failed"},
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

static void complete(og_db_op_t *op, og_db_status_t st)
{
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

static void on_poll(uv_poll_t *p, int status, int events)
{
    poll_h_t *ph = p->data;
    dbconn_t *c = ph->c;
    if (status < 0 && c->state == C_CONNECTING) {
        /* A refused or failed connect shows as POLLERR, which libuv reports as UV_EBADF after
         * stopping the handle. libpq must see it (SO_ERROR): it then tries the host's next
         * address or the next host, or fails with the real reason. */
        c->events = 0;
        conn_io(c, 0);
        return;
    }
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

/* The attempt gives up its lookups: cancelled if not started yet, else left to finish (their
 * set is freed by the last callback, see struct lookups). */
static void lookups_abandon(dbconn_t *c)
{
    lookups_t *ls = c->lookups;
    if (ls == NULL)
        return;
    c->lookups = NULL;
    ls->c = NULL;
    for (int i = 0; i < c->db->plan.nhosts; i++)
        if (ls->l[i].pending)
            uv_cancel((uv_req_t *)&ls->l[i].req);
}

static void conn_broken(dbconn_t *c, const char *why)
{
    og_db_t *db = c->db;
    bool was_ready = c->state == C_READY;
    if (c->state != C_DOWN && !db->closing) {
        char esc[256];
        og_log_escape(esc, sizeof(esc), why ? why : "", why ? strlen(why) : 0);
        og_log(db->log, was_ready ? OG_LOG_WARN : OG_LOG_DEBUG, conn_msg(c, MSG_LOST),
               "\"conn\":%d,\"error\":\"%s\"", c->idx, esc);
    }
    lookups_abandon(c);
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
    int n = db->plan.nhosts;
    lookups_t *ls = calloc(1, sizeof(*ls) + (size_t)n * sizeof(ls->l[0]));
    conn_set_state(c, C_RESOLVING);
    if (ls == NULL) {
        conn_broken(c, "out of memory");
        return;
    }
    ls->db = db;
    ls->c = c;
    c->lookups = ls;
    db->open_handles++;
    c->attempt_deadline = uv_now(db->loop) + LOOKUP_MAX_MS;
    conn_arm(c);
    /* As libpq asks (fe-connect.c): any family, stream sockets. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    for (int i = 0; i < n; i++) {
        lookup_t *l = &ls->l[i];
        l->set = ls;
        if (db->plan.kinds[i] != H_NAME)
            continue;
        int r = uv_getaddrinfo(db->loop, &l->req, on_lookup, db->plan.hosts[i], NULL, &hints);
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
 * cannot see: libpq then resolves them, as before). Environment defaults apply as in libpq. */
static bool plan_init(plan_t *p, const char *conninfo, int timeout_ms)
{
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
    if (host == NULL && opt_value(p->opts, "service") == NULL && getenv("PGSERVICE") == NULL)
        host = getenv("PGHOST");
    if (hostaddr == NULL)
        hostaddr = getenv("PGHOSTADDR");
    if (port == NULL)
        port = getenv("PGPORT");
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

/* One host entry handed to libpq: a name with several addresses gives several entries. */
typedef struct entry {
    const char *host, *addr, *port;
} entry_t;

enum { L_HOST, L_ADDR, L_PORT, L_COUNT };

typedef struct params {
    const char **kw, **val; /* one allocation: val points into kw's */
    int n;
    char *lists[L_COUNT]; /* owned: host, hostaddr and port lists built from the entries */
} params_t;

static void params_add(params_t *p, const char *kw, const char *val)
{
    p->kw[p->n] = kw;
    p->val[p->n] = val;
    p->n++;
}

/* Joins one field of the entries with commas (libpq's list syntax); NULL without memory. */
static char *join_entries(const entry_t *e, int n, size_t field)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(*(const char *const *)((const char *)&e[i] + field)) + 1;
    char *out = malloc(len), *w = out;
    for (int i = 0; out != NULL && i < n; i++) {
        const char *v = *(const char *const *)((const char *)&e[i] + field);
        size_t l = strlen(v);
        if (i > 0)
            *w++ = ',';
        memcpy(w, v, l);
        w += l;
    }
    if (out != NULL)
        *w = '\0';
    return out;
}

/* Logs each host name whose lookup failed, once until the connection is ready again. */
static void log_lookup_failures(dbconn_t *c, const lookups_t *ls)
{
    og_db_t *db = c->db;
    for (int i = 0; i < db->plan.nhosts && !c->lookup_warned; i++) {
        if (db->plan.kinds[i] != H_NAME || ls->l[i].status == 0)
            continue;
        char host[160];
        og_log_escape(host, sizeof(host), db->plan.hosts[i], strlen(db->plan.hosts[i]));
        og_log(db->log, OG_LOG_WARN, conn_msg(c, MSG_LOOKUP), "\"conn\":%d,\"host\":\"%s\",\"error\":\"%s\"",
               c->idx, host, uv_strerror(ls->l[i].status));
    }
    for (int i = 0; i < db->plan.nhosts; i++)
        c->lookup_warned |= db->plan.kinds[i] == H_NAME && ls->l[i].status != 0;
}

/* The host, hostaddr and port lists of an attempt from its lookups (ls). A host whose lookup
 * failed is left out, as libpq itself skips a host it cannot resolve; false when none is
 * left (`why` says so). */
static bool params_hosts(dbconn_t *c, const lookups_t *ls, params_t *p, char *why, size_t whylen)
{
    const plan_t *pl = &c->db->plan;
    entry_t *e = calloc((size_t)pl->nhosts * HOST_ADDRS_MAX, sizeof(*e));
    if (e == NULL) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    int n = 0;
    for (int i = 0; i < pl->nhosts; i++) {
        const char *port = pl->nports > 1 ? pl->ports[i] : "";
        if (pl->kinds[i] == H_SOCKET)
            e[n++] = (entry_t){pl->hosts[i], "", port};
        else if (pl->kinds[i] == H_NUMERIC)
            e[n++] = (entry_t){pl->hosts[i], pl->hosts[i], port};
        for (int a = 0; pl->kinds[i] == H_NAME && a < ls->l[i].naddrs; a++)
            e[n++] = (entry_t){pl->hosts[i], ls->l[i].addrs[a], port};
    }
    log_lookup_failures(c, ls);
    bool ok = false;
    if (n == 0) { /* every host is a name, and none resolved */
        snprintf(why, whylen, "could not look up host \"%.100s\": %s", pl->hosts[0],
                 uv_strerror(ls->l[0].status));
    } else {
        p->lists[L_HOST] = join_entries(e, n, offsetof(entry_t, host));
        p->lists[L_ADDR] = join_entries(e, n, offsetof(entry_t, addr));
        p->lists[L_PORT] = pl->nports > 1 ? join_entries(e, n, offsetof(entry_t, port)) : NULL;
        ok = p->lists[L_HOST] != NULL && p->lists[L_ADDR] != NULL &&
             (pl->nports <= 1 || p->lists[L_PORT] != NULL);
        if (!ok)
            snprintf(why, whylen, "out of memory");
    }
    free(e);
    if (!ok)
        return false;
    params_add(p, "host", p->lists[L_HOST]);
    params_add(p, "hostaddr", p->lists[L_ADDR]);
    if (p->lists[L_PORT] != NULL)
        params_add(p, "port", p->lists[L_PORT]);
    else if (pl->nports == 1 && opt_value(pl->opts, "port") != NULL)
        params_add(p, "port", opt_value(pl->opts, "port"));
    return true;
}

static void params_free(params_t *p)
{
    free(p->kw);
    for (int i = 0; i < L_COUNT; i++)
        free(p->lists[i]);
}

/* The PQconnectStartParams arrays of one attempt: the conninfo's own options, our keepalive
 * defaults where it sets none, and with lookups (ls) the host lists params_hosts builds. */
static bool params_build(dbconn_t *c, const lookups_t *ls, params_t *p, char *why, size_t whylen)
{
    const plan_t *pl = &c->db->plan;
    const char *const ka[][2] = {
        {"keepalives", "1"},
        {"keepalives_idle", pl->ka_idle},
        {"keepalives_interval", pl->ka_interval},
        {"keepalives_count", "3"},
        {"tcp_user_timeout", pl->user_timeout},
    };
    size_t cap = (size_t)pl->nopts + sizeof(ka) / sizeof(ka[0]) + 4; /* + host lists + NULL */
    *p = (params_t){.kw = calloc(2 * cap, sizeof(char *))};
    if (p->kw == NULL) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    p->val = p->kw + cap;
    for (const PQconninfoOption *o = pl->opts; o->keyword != NULL; o++) {
        bool ours = ls != NULL && (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
                                   strcmp(o->keyword, "port") == 0);
        if (o->val != NULL && !ours)
            params_add(p, o->keyword, o->val);
    }
    for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++)
        if (opt_value(pl->opts, ka[i][0]) == NULL)
            params_add(p, ka[i][0], ka[i][1]);
    return ls == NULL || params_hosts(c, ls, p, why, whylen);
}

/* ---- connecting ------------------------------------------------------------------------- */

/* Starts libpq's connection, with the lookups' addresses when there were lookups (ls). */
static void conn_connect(dbconn_t *c, const lookups_t *ls)
{
    og_db_t *db = c->db;
    params_t p = {0};
    char why[256] = "out of memory"; /* unless the plan or params_build says otherwise */
    if (db->plan.opts == NULL)
        snprintf(why, sizeof(why), "%s", db->plan.error);
    else if (params_build(c, ls, &p, why, sizeof(why)))
        c->pg = PQconnectStartParams(p.kw, p.val, 0); /* libpq copies what it keeps */
    params_free(&p);
    conn_set_state(c, C_CONNECTING); /* also on failure, so conn_broken logs and backs off */
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        if (c->pg != NULL)
            snprintf(why, sizeof(why), "%s", PQerrorMessage(c->pg));
        conn_broken(c, why);
        return;
    }
    PQsetnonblocking(c->pg, 1);
    c->attempt_deadline = uv_now(db->loop) + (uint64_t)db->timeout_ms;
    conn_arm(c);
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
    if (db->plan.resolve)
        lookups_start(c);
    else
        conn_connect(c, NULL);
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
    u->deadline_ms = c->attempt_deadline;
    bool sent = true;
    if (c->listen) {
        /* LISTEN takes no parameter: the channel is an identifier og_db_listen checked ([a-z_]+). */
        char sql[80];
        snprintf(sql, sizeof(sql), "LISTEN %s", db->channel);
        sent = PQsendQueryParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
    } else if (db->reader) {
        /* For the session: a read that runs longer is cancelled by the server itself (57014);
         * nothing sent here can ever write; and a read is one backend, no parallel workers, so
         * the pool's size bounds the server's cores its reads take (a parallel scan takes 3). */
        static const char sql[] = "SELECT set_config('statement_timeout', $1, false), "
                                  "set_config('default_transaction_read_only', 'on', false), "
                                  "set_config('max_parallel_workers_per_gather', '0', false)";
        const char *values[1] = {db->statement_timeout};
        sent = PQsendQueryParams(c->pg, sql, 1, NULL, values, NULL, NULL, 0);
    }
    for (int i = 0; sent && !c->listen && !db->reader && i < db->nstmts; i++)
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
        conn_arm(c); /* no unit in flight yet: the attempt's deadline is over */
        c->backoff_ms = 0;
        c->lookup_warned = false;
        og_log(db->log, OG_LOG_INFO, conn_msg(c, MSG_CONNECTED), "\"conn\":%d", c->idx);
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
            const char *const *values = op->stmts[i].values;
            if (db->reader ? !PQsendQueryParams(c->pg, s->sql, s->nparams, NULL, values, NULL, NULL, 0)
                           : !PQsendQueryPrepared(c->pg, s->name, s->nparams, values, NULL, NULL, 0))
                return false;
        }
    }
    if (!PQpipelineSync(c->pg))
        return false;
    u->sent_us = now_us();
    /* Counted from sending, not from submission: the connection is dropped only for a server
     * that stays silent that long, never for time the ops spent queued (queue_arm bounds it).
     * A read pool's server cancels a statement at its statement_timeout: its units get that
     * much more, so the server's answer (57014) comes first unless the server is silent. */
    u->deadline_ms = uv_now(db->loop) + (uint64_t)db->timeout_ms + db->unit_grace_ms;
    u->cur = u->head;
    u->cur_stmt = 0;
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
    queue_arm(db);
    if (db->metrics != NULL) {
        og_metrics_slot_t *m = db->metrics;
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

bool og_db_listen(og_db_t *db, const char *channel, og_db_notify_fn fn, void *arg)
{
    if (db->closing || db->reader || db->listener.listen || fn == NULL || !channel_valid(channel))
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
