/*
 * One connection (of the pool, or the listener): its states and one transition function, socket,
 * timer, connect steps, preparing, breaking and retrying. Not where it connects (conninfo.c), the
 * units it carries once ready (pipeline.c), nor which ops go on it (pool.c).
 *
 * Each connection has one timer, whose meaning follows its state: the retry while down, the
 * attempt's deadline while it comes up, the deadline of its most urgent unit once ready.
 *
 * The listener (og_db_listen) is one more connection, kept outside the pool's array and counts:
 * it connects, backs off and changes state through the same functions, and its first unit is
 * LISTEN instead of the statement table (listen.c).
 */
#include "db_int.h"

#include "omnigate/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define NUDGE_MIN_MS   200
/* A lookup is bounded by the resolver's own timeouts (glibc: 5 s x 2 tries per server), not by
 * OMNIGATE_DB_TIMEOUT_MS: a deadline shorter than the DNS would otherwise never connect. This
 * only stops a resolver that hangs for good from holding the connection forever. */
#define LOOKUP_MAX_MS 30000

/* The legal moves, [from][to]. Every other is a bug in src/data/db/. */
static const bool conn_moves[C_NSTATES][C_NSTATES] = {
    [C_DOWN] = {[C_RESOLVING] = true, [C_CONNECTING] = true}, /* conn_resolve; db_conn_connect */
    [C_RESOLVING] = {[C_CONNECTING] = true, [C_DOWN] = true}, /* db_conn_connect; db_conn_broken */
    [C_CONNECTING] = {[C_PREPARING] = true, [C_DOWN] = true}, /* send_prepares; db_conn_broken */
    [C_PREPARING] = {[C_READY] = true, [C_DOWN] = true},      /* db_conn_up; db_conn_broken */
    [C_READY] = {[C_DOWN] = true},                            /* db_conn_broken */
};

static const char *const cstate_names[C_NSTATES] = {"down", "resolving", "connecting", "preparing", "ready"};

/* uv_poll_t lives apart from the connection: libpq may switch sockets while connecting, and
 * the old handle must finish closing (close_cb frees it) while the new one is in use. */
struct poll_h {
    uv_poll_t poll;
    dbconn_t *c;
};

static void conn_start(dbconn_t *c);
static void attempt_failed(dbconn_t *c, const char *why);
static void conn_io(dbconn_t *c, int events);

/* The texts of a connection's log lines, by its kind: a pool's, a read pool's, the listener. */
static const char *const conn_msgs[3][MSG__COUNT] = {
    {"database connected", "database connection lost", "database host lookup failed", "database host failed"},
    {"database read connection connected", "database read connection lost",
     "database read connection host lookup failed", "database read connection host failed"},
    {"database listener connected", "database listener lost", "database listener host lookup failed",
     "database listener host failed"},
};

const char *db_conn_msg(const dbconn_t *c, int which)
{
    return conn_msgs[c->listen ? 2 : c->db->reader ? 1 : 0][which];
}

/* ---- poll handling ---------------------------------------------------------------------- */

static void on_poll_closed(uv_handle_t *h)
{
    poll_h_t *ph = h->data;
    og_db_t *db = ph->c->db;
    free(ph);
    db_handle_gone(db);
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
        /* POLLERR (a refused connect, a reset), which libuv reports as UV_EBADF after stopping
         * the handle: not a bad descriptor, and not the reason to log. libpq must see it: while
         * connecting (SO_ERROR) it tries the next address or fails with the real reason; once
         * connected it reads what arrived before the error, then says what happened. */
        c->events = 0;
        if (c->state == C_CONNECTING) {
            conn_io(c, 0);
            return;
        }
        db_read_results(c);
        if (c->state != C_DOWN)
            db_conn_broken(c, "error on the connection's socket");
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

bool db_conn_flush(dbconn_t *c)
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

static void on_timer(uv_timer_t *t);

/* The attempt's deadline while it comes up, its most urgent unit once ready (stopped with none
 * in flight). Not for C_DOWN (the retry). */
void db_conn_arm(dbconn_t *c)
{
    uint64_t due = c->state == C_READY ? db_units_deadline(c) : c->attempt_deadline;
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

void db_conn_broken(dbconn_t *c, const char *why)
{
    og_db_t *db = c->db;
    bool was_ready = c->state == C_READY;
    if (c->state != C_DOWN && !db->closing) {
        char esc[1024];
        og_log_escape(esc, sizeof(esc), why ? why : "", why ? strlen(why) : 0);
        og_log(db->log, was_ready ? OG_LOG_WARN : OG_LOG_DEBUG, db_conn_msg(c, MSG_LOST),
               "\"conn\":%d,\"error\":\"%s\"", c->idx, esc);
    }
    db_lookups_abandon(c);
    db_entries_free(c);
    poll_drop(c);
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    if (c->state != C_DOWN) /* closing the pool breaks connections that are down already */
        conn_set_state(c, C_DOWN);
    db_units_fail(c);
    if (db->closing)
        return;
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (c->backoff_ms > BACKOFF_MAX_MS)
        c->backoff_ms = BACKOFF_MAX_MS;
    uv_timer_start(&c->timer, on_timer, c->backoff_ms, 0);
    db_schedule(db);
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
        if (db_units_deadline(c) > uv_now(db->loop)) {
            db_conn_arm(c); /* the unit it was armed for is done; a later one is due later */
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
    db_conn_broken(c, why);
}

/* ---- connecting ------------------------------------------------------------------------- */

/* Starts libpq's connection to the current entry (or, without entries, to what the conninfo
 * says). False when libpq refused at once: `why` says why. */
static bool conn_begin(dbconn_t *c, char *why, size_t whylen)
{
    og_db_t *db = c->db;
    params_t p = {0};
    /* application_name, unless the conninfo or PGAPPNAME says: pg_stat_activity (and PgBouncer's
     * SHOW CLIENTS) tell the write pool, the read pool and the listener apart. */
    const char *app = c->listen ? "omnigate-listen" : db->reader ? "omnigate-read" : "omnigate";
    snprintf(why, whylen, "out of memory"); /* unless the plan or libpq says otherwise */
    if (c->plan->opts == NULL)
        snprintf(why, whylen, "%s", c->plan->error);
    else if (db_params_build(c->plan, c->entries != NULL ? &c->entries[c->entry] : NULL, app, &p))
        c->pg = PQconnectStartParams(p.kw, p.val, 0); /* libpq copies what it keeps */
    free(p.kw);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        if (c->pg != NULL)
            snprintf(why, whylen, "%s", PQerrorMessage(c->pg));
        return false;
    }
    PQsetnonblocking(c->pg, 1);
    c->attempt_deadline = uv_now(db->loop) + (uint64_t)db->timeout_ms;
    db_conn_arm(c);
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
        og_log(db->log, OG_LOG_DEBUG, db_conn_msg(c, MSG_HOST),
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
                db_conn_broken(c, "cannot watch socket");
            return;
        }
        why = next_why; /* refused at once: on to the one after */
    }
    char all[sizeof(c->errors) + 256];
    snprintf(all, sizeof(all), "%s%s", c->errors, why);
    db_conn_broken(c, all);
}

void db_conn_connect(dbconn_t *c, const lookups_t *ls)
{
    char why[256];
    c->errors[0] = '\0';
    bool ok = c->plan->opts == NULL || !c->plan->iterate || db_entries_build(c, ls, why, sizeof(why));
    conn_set_state(c, C_CONNECTING); /* also on failure, so db_conn_broken logs and backs off */
    if (!ok) {
        db_conn_broken(c, why);
        return;
    }
    if (!conn_begin(c, why, sizeof(why))) {
        attempt_failed(c, why);
        return;
    }
    /* Per the libpq docs, start as if PQconnectPoll had said PGRES_POLLING_WRITING. */
    if (!poll_set(c, UV_WRITABLE))
        db_conn_broken(c, "cannot watch socket");
}

/* Looks the plan's host names up first, on the threadpool (conninfo.c), which then connects
 * (db_conn_connect). */
static void conn_resolve(dbconn_t *c)
{
    conn_set_state(c, C_RESOLVING);
    c->attempt_deadline = uv_now(c->db->loop) + LOOKUP_MAX_MS;
    db_conn_arm(c);
    if (!db_lookups_start(c))
        db_conn_broken(c, "out of memory");
}

static void conn_start(dbconn_t *c)
{
    og_db_t *db = c->db;
    if (db->closing || c->state != C_DOWN)
        return;
    uv_timer_stop(&c->timer);
    c->last_attempt_ms = uv_now(db->loop);
    if (c->plan->resolve)
        conn_resolve(c);
    else
        db_conn_connect(c, NULL);
}

void db_conn_nudge(dbconn_t *c, uint64_t now)
{
    if (c->state == C_DOWN && now - c->last_attempt_ms >= NUDGE_MIN_MS)
        conn_start(c);
}

/* Sends the unit that makes a new connection useful: the statement table (or nothing, with
 * unnamed statements: its Sync alone shows the session answers), or the listener's LISTEN. Its
 * Sync moves the connection to C_READY (db_conn_up). */
static void send_prepares(dbconn_t *c)
{
    og_db_t *db = c->db;
    unit_t *u = calloc(1, sizeof(*u));
    if (u == NULL || PQenterPipelineMode(c->pg) != 1) {
        db_unit_free(u);
        db_conn_broken(c, "cannot enter pipeline mode");
        return;
    }
    u->prepare = true;
    u->deadline_ms = c->attempt_deadline;
    c->prepared = db->prepared && !c->listen && !db->reader;
    bool sent = !c->listen || db_listen_send(c);
    for (int i = 0; sent && c->prepared && i < db->nstmts; i++)
        if (!db->stmts[i].read_pool)
            sent = PQsendPrepare(c->pg, db->stmts[i].name, db->stmts[i].sql, db->stmts[i].nparams, NULL);
    if (!sent || !PQpipelineSync(c->pg)) {
        db_unit_free(u);
        db_conn_broken(c, PQerrorMessage(c->pg));
        return;
    }
    c->uhead = c->utail = u;
    conn_set_state(c, C_PREPARING);
    if (!db_conn_flush(c))
        db_conn_broken(c, PQerrorMessage(c->pg));
}

static void connect_step(dbconn_t *c)
{
    PostgresPollingStatusType r = PQconnectPoll(c->pg);
    switch (r) {
    case PGRES_POLLING_READING:
        if (!poll_set(c, UV_READABLE))
            db_conn_broken(c, "cannot watch socket");
        break;
    case PGRES_POLLING_WRITING:
        if (!poll_set(c, UV_WRITABLE))
            db_conn_broken(c, "cannot watch socket");
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

void db_conn_up(dbconn_t *c)
{
    og_db_t *db = c->db;
    conn_set_state(c, C_READY);
    db_conn_arm(c); /* no unit in flight yet: the attempt's deadline is over */
    c->backoff_ms = 0;
    c->lookup_warned = false;
    if (c->entries != NULL) { /* the next attempt of any connection starts here */
        c->plan->good_host = c->entries[c->entry].host;
        snprintf(c->plan->good_addr, sizeof(c->plan->good_addr), "%s", c->entries[c->entry].addr);
        db_entries_free(c);
    }
    char host[160];
    const char *h = PQhost(c->pg) != NULL ? PQhost(c->pg) : "";
    og_log_escape(host, sizeof(host), h, strlen(h));
    og_log(db->log, OG_LOG_INFO, db_conn_msg(c, MSG_CONNECTED), "\"conn\":%d,\"host\":\"%s\",\"port\":\"%s\"",
           c->idx, host, PQport(c->pg) != NULL ? PQport(c->pg) : "");
    if (c->listen) {
        db_listen_up(c);
        return;
    }
    if (db->listener.listen) /* the database is back: so may the listener be */
        db_conn_nudge(&db->listener, uv_now(db->loop));
    db_schedule(db);
}

static void conn_io(dbconn_t *c, int events)
{
    if (c->state == C_CONNECTING) {
        connect_step(c);
        return;
    }
    if (events & UV_WRITABLE) {
        if (!db_conn_flush(c)) {
            db_conn_broken(c, PQerrorMessage(c->pg));
            return;
        }
    }
    if (events & (UV_READABLE | UV_DISCONNECT))
        db_read_results(c);
}

/* ---- setting up and closing ------------------------------------------------------------- */

void db_conn_init(og_db_t *db, dbconn_t *c, int idx)
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

static void on_conn_timer_closed(uv_handle_t *h)
{
    db_handle_gone(((dbconn_t *)h->data)->db);
}

void db_conn_close(dbconn_t *c)
{
    db_conn_broken(c, "closing");
    uv_close((uv_handle_t *)&c->timer, on_conn_timer_closed);
}
