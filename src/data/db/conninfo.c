/*
 * Where an attempt connects: the conninfo's plan, its host and port lists, the host name lookups
 * (libuv's threadpool), the host entries an attempt tries and its PQconnectStartParams arrays.
 * Not the connection's states, socket or timers (conn.c).
 *
 * The conninfo is parsed once (PQconninfoParse) into a plan; every attempt rebuilds the
 * PQconnectStartParams arrays from it, with `hostaddr` from the lookups of that attempt and
 * our keepalive defaults where the conninfo sets none.
 */
#include "db_int.h"

#include "omnigate/util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_ADDRS_MAX 8 /* addresses kept per host name, tried in the resolver's order */

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

/* ---- connection parameters -------------------------------------------------------------- */

/* libpq's syntax: no quoting. The array of `*n` pointers is followed by the cut copy of the
 * text, in one allocation. */
char **db_split_list(const char *s, int *n)
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

hkind_t db_host_kind(const char *host)
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
 * here (db_entries_build). */
bool db_plan_init(plan_t *p, const char *conninfo, int timeout_ms)
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
    p->hosts = db_split_list(host, &p->nhosts);
    p->ports = port != NULL ? db_split_list(port, &p->nports) : NULL;
    p->kinds = p->hosts != NULL ? calloc((size_t)p->nhosts, sizeof(*p->kinds)) : NULL;
    if (p->hosts == NULL || (port != NULL && p->ports == NULL) || p->kinds == NULL)
        return false;
    if (p->nports > 1 && p->nports != p->nhosts)
        return true; /* libpq refuses it without looking anything up */
    for (int i = 0; i < p->nhosts; i++) {
        p->kinds[i] = db_host_kind(p->hosts[i]);
        p->resolve |= p->kinds[i] == H_NAME;
    }
    p->iterate = true;
    p->prefer_standby = tsa != NULL && strcmp(tsa, "prefer-standby") == 0;
    return true;
}

void db_plan_free(plan_t *p)
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
        og_log(db->log, OG_LOG_WARN, db_conn_msg(c, MSG_LOOKUP),
               "\"conn\":%d,\"host\":\"%s\",\"error\":\"%s\"", c->idx, host, uv_strerror(ls->l[i].status));
    }
    for (int i = 0; i < pl->nhosts; i++)
        c->lookup_warned |= pl->kinds[i] == H_NAME && ls->l[i].status != 0;
}

/* The host entries of an attempt, from the plan and its lookups (ls, NULL without names): a
 * host whose lookup failed is left out, as libpq itself skips a host it cannot resolve. They
 * start at the entry that last got a connection ready, then go round in the conninfo's order.
 * prefer-standby is libpq's two passes: every entry as `standby`, then every entry as `any`.
 * False when none is left (`why` says so). */
bool db_entries_build(dbconn_t *c, const lookups_t *ls, char *why, size_t whylen)
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

void db_entries_free(dbconn_t *c)
{
    free(c->entries);
    c->entries = NULL;
    c->nentries = c->entry = 0;
}

/* The conninfo's own options, our keepalive defaults where it sets none, `app` as the
 * fallback_application_name, and with an entry (e) its host, address and port in place of the
 * conninfo's lists. */
bool db_params_build(const plan_t *pl, const entry_t *e, const char *app, params_t *p)
{
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
bool db_lookups_start(dbconn_t *c)
{
    og_db_t *db = c->db;
    const plan_t *pl = c->plan;
    int n = pl->nhosts;
    lookups_t *ls = calloc(1, sizeof(*ls) + (size_t)n * sizeof(ls->l[0]));
    if (ls == NULL)
        return false;
    *ls = (lookups_t){.db = db, .c = c, .n = n};
    c->lookups = ls;
    db->open_handles++; /* until its last callback (lookups_done) */
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
    return true;
}

static void lookups_done(lookups_t *ls)
{
    og_db_t *db = ls->db;
    dbconn_t *c = ls->c;
    if (c != NULL) {
        c->lookups = NULL;
        db_conn_connect(c, ls);
    }
    free(ls);
    db_handle_gone(db);
}

/* Cancelled if not started yet, else left to finish (their set is freed by the last callback,
 * see struct lookups). */
void db_lookups_abandon(dbconn_t *c)
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
