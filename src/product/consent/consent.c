/*
 * The consent copy. See include/product/omnigate/consent/consent.h; the statements are
 * consent_load, consent_changes and consent_sample in sql/queries/inbound.sql.
 */
#include "omnigate/consent/consent.h"

#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/costs/rates.h"
#include "omnigate/ids.h"
#include "omnigate/kmap.h"
#include "omnigate/store.h"
#include "omnigate/util.h"

#define SAMPLE_MS 10000

static const char *const kind_names[] = {"sms", "whatsapp"};
static const char *const source_names[] = {"keyword", "provider", "api"};
#define NKINDS   2
#define NSOURCES 3

struct og_consent_metrics {
    uint64_t suppressed[NKINDS][NSOURCES];
};

static const og_m_dim_t kinds_dim = {NKINDS, {"channel", NULL}, kind_names, NULL};
static const og_m_dim_t sources_dim = {NSOURCES, {"source", NULL}, source_names, NULL};

static const og_m_metric_t metrics[] = {
    {"omnigate_suppressions", OG_M_GAUGE, &kinds_dim, &sources_dim,
     offsetof(struct og_consent_metrics, suppressed), OG_M_MAX, NULL, false,
     "Suppressions in force (API.md §21) by kind of channel and by what opted the number out: an "
     "opt-out keyword, a provider's answer or the API (all instances, sampled every 10 s)."},
};

const og_m_block_t og_consent_metrics_block = OG_M_BLOCK(struct og_consent_metrics, metrics);

struct og_consent {
    og_gw_t *gw;
    struct og_consent_metrics *m; /* NULL: this worker does not sample */
    uv_timer_t timer;
    og_db_op_t op;
    bool busy;    /* op in flight */
    bool closing; /* the timer is closed: the op's end frees c */
    bool loaded;
    bool failing;               /* the last read failed (logged once) */
    char next[24];              /* where the next read of changes starts (a xid8) */
    uint64_t read_at_ms;        /* loop time of the last read that succeeded */
    uint64_t sampled_at_ms;     /* loop time of the last sample */
    uint64_t swept_at_ms;       /* loop time windows closed were last dropped */
    og_kmap_t sup;              /* (tenant, number) -> kind bits */
    og_kmap_t win;              /* (phone number id, number) -> open until, ms since the epoch */
    og_consent_wait_t *waiting; /* sends waiting for the end of a read (og_consent_wait) */
    og_rate_card_t rates;       /* the global card; currency "" when there is none */
    char rates_version[24];     /* its version (rates_current), "" when there is none */
    void (*closed)(void *arg);
    void *closed_arg;
};

unsigned og_consent_kind_of(og_channel_t ch)
{
    return ch == OG_CH_SMS ? OG_CONSENT_SMS : OG_CONSENT_WHATSAPP;
}

const char *og_consent_kind_name(unsigned kind)
{
    return kind == OG_CONSENT_SMS ? kind_names[0] : kind_names[1];
}

bool og_consent_kind_parse(const char *name, unsigned *kind)
{
    if (name != NULL && strcmp(name, kind_names[0]) == 0)
        *kind = OG_CONSENT_SMS;
    else if (name != NULL && strcmp(name, kind_names[1]) == 0)
        *kind = OG_CONSENT_WHATSAPP;
    else
        return false;
    return true;
}

/* ---- keys ------------------------------------------------------------------------------------- */

/* "+" and 1-15 digits as a number (E.164 has no leading zero, so it is unique). */
static bool number_word(const char *number, uint64_t *out)
{
    if (number == NULL || number[0] != '+')
        return false;
    uint64_t v = 0;
    size_t n = 0;
    for (const char *p = number + 1; *p; p++, n++) {
        if (*p < '0' || *p > '9' || n == 15)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return n > 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool sup_key(const char *tenant_id, const char *number, og_kmap_key_t *k)
{
    uint64_t w[2] = {0, 0};
    int nhex = 0;
    for (const char *p = tenant_id; p != NULL && *p; p++) {
        if (*p == '-')
            continue;
        int v = hexval(*p);
        if (v < 0 || nhex == 32)
            return false;
        w[nhex / 16] = w[nhex / 16] << 4 | (uint64_t)v;
        nhex++;
    }
    k->w[0] = w[0];
    k->w[1] = w[1];
    return nhex == 32 && number_word(number, &k->w[2]);
}

static bool win_key(const char *phone_number_id, const char *number, og_kmap_key_t *k)
{
    uint64_t h = 14695981039346656037ULL; /* FNV-1a */
    size_t n = 0;
    for (const char *p = phone_number_id; p != NULL && *p; p++, n++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    k->w[0] = h;
    k->w[1] = n;
    return n > 0 && number_word(number, &k->w[2]);
}

unsigned og_consent_suppressed(const og_consent_t *c, const char *tenant_id, const char *number)
{
    og_kmap_key_t k;
    if (c == NULL || !sup_key(tenant_id, number, &k))
        return 0;
    return (unsigned)og_kmap_get(&c->sup, &k);
}

bool og_consent_window_open(const og_consent_t *c, const char *phone_number_id, const char *number)
{
    og_kmap_key_t k;
    if (c == NULL || !win_key(phone_number_id, number, &k))
        return false;
    return og_kmap_get(&c->win, &k) > og_ids_now_ms();
}

const og_rate_card_t *og_consent_rates(const og_consent_t *c)
{
    return c != NULL && c->rates.currency[0] ? &c->rates : NULL;
}

bool og_consent_ready(const og_consent_t *c)
{
    return c == NULL || c->loaded;
}

void og_consent_wait(og_consent_t *c, og_consent_wait_t *w)
{
    if (og_consent_ready(c)) {
        w->done(w);
        return;
    }
    w->next = c->waiting;
    c->waiting = w;
}

/* Runs the sends waiting for a read's end. */
static void resume_waiting(og_consent_t *c)
{
    og_consent_wait_t *w = c->waiting;
    c->waiting = NULL;
    while (w != NULL) {
        og_consent_wait_t *next = w->next;
        w->done(w);
        w = next;
    }
}

bool og_consent_opted_out(const og_consent_t *c, const char *tenant_id, const char *number, unsigned *out,
                          og_err_t *err)
{
    if (!og_consent_ready(c))
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL,
                           "the opt-out list is not loaded yet: retry in a second");
    *out = og_consent_suppressed(c, tenant_id, number);
    return true;
}

/* ---- reading ---------------------------------------------------------------------------------- */

/* Applies one row of consent_load or consent_changes to the maps; false when out of memory. */
static bool apply(og_kmap_t *sup, og_kmap_t *win, const PGresult *r, int i)
{
    if (PQgetisnull(r, i, OG_CONSENT_WHAT))
        return true; /* the row of nothing */
    const char *what = PQgetvalue(r, i, OG_CONSENT_WHAT);
    const char *number = PQgetvalue(r, i, OG_CONSENT_NUMBER);
    const char *kind = PQgetvalue(r, i, OG_CONSENT_KIND);
    og_kmap_key_t k;
    if (what[0] == 's') {
        unsigned bit;
        if (!sup_key(PQgetvalue(r, i, OG_CONSENT_TENANT_ID), number, &k) ||
            !og_consent_kind_parse(kind, &bit))
            return true; /* not a number or kind of ours: nothing a send could match */
        uint64_t v = og_kmap_get(sup, &k);
        v = PQgetvalue(r, i, OG_CONSENT_ACTIVE)[0] == 't' ? v | bit : v & ~(uint64_t)bit;
        return og_kmap_put(sup, &k, v);
    }
    if (!win_key(kind, number, &k))
        return true;
    uint64_t until = strtoull(PQgetvalue(r, i, OG_CONSENT_UNTIL_MS), NULL, 10);
    uint64_t v = og_kmap_get(win, &k);
    return og_kmap_put(win, &k, until > v ? until : v);
}

static bool window_open(void *arg, const og_kmap_key_t *k, uint64_t v)
{
    (void)k;
    return v > *(const uint64_t *)arg;
}

static void log_failure(og_consent_t *c, og_db_op_t *op, const char *what)
{
    og_log(&c->gw->w->log, OG_LOG_WARN, what, "\"sqlstate\":\"%s\",\"error\":\"%s\"", op->sqlstate,
           op->error);
}

static void consent_free(og_consent_t *c)
{
    void (*closed)(void *) = c->closed;
    void *arg = c->closed_arg;
    og_rate_card_clear(&c->rates);
    og_kmap_clear(&c->sup);
    og_kmap_clear(&c->win);
    free(c);
    closed(arg);
}

static void sampled(og_consent_t *c, const PGresult *r)
{
    uint64_t n[NKINDS][NSOURCES] = {{0}};
    for (int i = 0; i < PQntuples(r); i++) {
        const char *kind = PQgetvalue(r, i, OG_C_CONSENT_SAMPLE_KIND);
        const char *source = PQgetvalue(r, i, OG_C_CONSENT_SAMPLE_SOURCE);
        for (int k = 0; k < NKINDS; k++)
            for (int s = 0; s < NSOURCES; s++)
                if (strcmp(kind, kind_names[k]) == 0 && strcmp(source, source_names[s]) == 0)
                    n[k][s] = strtoull(PQgetvalue(r, i, OG_C_CONSENT_SAMPLE_N), NULL, 10);
    }
    for (int k = 0; k < NKINDS; k++)
        for (int s = 0; s < NSOURCES; s++)
            og_metrics_gauge(&c->m->suppressed[k][s], n[k][s]);
}

/* The global card as rates_current read it: none, the same version, or a new one. */
static void rates_read(og_consent_t *c, const PGresult *r)
{
    if (PQntuples(r) == 0) {
        og_rate_card_clear(&c->rates);
        c->rates_version[0] = '\0';
        return;
    }
    if (PQgetisnull(r, 0, OG_C_RATES_CURRENT_CARD))
        return; /* the version this worker has */
    json_t *j = json_loads(PQgetvalue(r, 0, OG_C_RATES_CURRENT_CARD), 0, NULL);
    og_rate_card_t card = {0};
    og_err_t err = {0};
    if (j == NULL || !og_rate_card_parse(j, "", &card, &err)) {
        /* Checked when it was put: out of memory. Kept as it was, read again next time. */
        og_log(&c->gw->w->log, OG_LOG_ERROR, "rates: cannot read the global card", NULL);
        json_decref(j);
        return;
    }
    json_decref(j);
    og_rate_card_clear(&c->rates);
    c->rates = card;
    snprintf(c->rates_version, sizeof(c->rates_version), "%s", PQgetvalue(r, 0, OG_C_RATES_CURRENT_VERSION));
    /* Once per worker and version: from here on this worker prices with it (docs/costs.md). */
    og_log(&c->gw->w->log, OG_LOG_INFO, "rates: global card loaded", "\"version\":\"%s\"", c->rates_version);
}

static void read_done(og_db_op_t *op, og_db_status_t st)
{
    og_consent_t *c = container_of(op, og_consent_t, op);
    const PGresult *r = op->res[0];
    if (st != OG_DB_OK || r == NULL || PQntuples(r) == 0 || op->res[1] == NULL) {
        if (!c->failing) /* once per outage, not every second */
            log_failure(c, op, c->loaded ? "consent: reading changes failed" : "consent: loading failed");
        c->failing = true;
    } else {
        if (c->failing)
            og_log(&c->gw->w->log, OG_LOG_INFO, "consent: reading again", NULL);
        c->failing = false;
        uint64_t now = uv_now(&c->gw->w->loop);
        bool full = op->stmts[0].stmt == OG_Q_CONSENT_LOAD;
        og_kmap_t sup = OG_KMAP_INIT, win = OG_KMAP_INIT;
        og_kmap_t *ps = full ? &sup : &c->sup, *pw = full ? &win : &c->win;
        bool ok = true;
        for (int i = 0; i < PQntuples(r) && ok; i++)
            ok = apply(ps, pw, r, i);
        rates_read(c, op->res[1]);
        if (!ok) {
            /* Out of memory part way: what was applied stands; reading everything again later
             * puts the copy right (a full load changed nothing yet). */
            og_log(&c->gw->w->log, OG_LOG_ERROR, "consent: out of memory applying changes", NULL);
            c->read_at_ms = 0;
            og_kmap_clear(&sup);
            og_kmap_clear(&win);
        } else {
            if (full) {
                og_kmap_clear(&c->sup);
                og_kmap_clear(&c->win);
                c->sup = sup;
                c->win = win;
                c->loaded = true;
            }
            snprintf(c->next, sizeof(c->next), "%s", PQgetvalue(r, 0, OG_CONSENT_NEXT));
            c->read_at_ms = now;
        }
        if (op->nstmts > 2 && op->res[2] != NULL && c->m != NULL)
            sampled(c, op->res[2]);
        if (now - c->swept_at_ms >= 60000) {
            uint64_t wall = og_ids_now_ms();
            og_kmap_filter(&c->win, window_open, &wall);
            c->swept_at_ms = now;
        }
    }
    og_db_op_clear(op);
    c->busy = false;
    if (c->closing)
        consent_free(c);
    else
        resume_waiting(c);
}

static void on_timer(uv_timer_t *t)
{
    og_consent_t *c = container_of(t, og_consent_t, timer);
    if (c->busy)
        return;
    uint64_t now = uv_now(&c->gw->w->loop);
    c->busy = true;
    c->op = (og_db_op_t){.nstmts = 2, .done = read_done};
    if (!c->loaded || c->read_at_ms == 0 || now - c->read_at_ms >= OG_CONSENT_RELOAD_MS)
        og_q_consent_load(&c->op.stmts[0]);
    else
        og_q_consent_changes(&c->op.stmts[0], &(og_q_consent_changes_t){.since = c->next});
    og_q_rates_current(&c->op.stmts[1],
                       &(og_q_rates_current_t){.have = c->rates_version[0] ? c->rates_version : NULL});
    if (c->m != NULL && (c->sampled_at_ms == 0 || now - c->sampled_at_ms >= SAMPLE_MS)) {
        og_q_consent_sample(&c->op.stmts[c->op.nstmts++]);
        c->sampled_at_ms = now;
    }
    og_db_submit(c->gw->db, &c->op);
}

og_consent_t *og_consent_start(og_gw_t *gw, bool sample)
{
    og_consent_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->gw = gw;
    c->m = sample ? og_worker_metrics(gw->w, &og_consent_metrics_block) : NULL;
    c->swept_at_ms = uv_now(&gw->w->loop);
    uv_timer_init(&gw->w->loop, &c->timer);
    uv_timer_start(&c->timer, on_timer, 0, OG_CONSENT_READ_MS);
    uv_unref((uv_handle_t *)&c->timer);
    return c;
}

static void timer_closed(uv_handle_t *h)
{
    og_consent_t *c = container_of((uv_timer_t *)h, og_consent_t, timer);
    if (c->busy) {
        c->closing = true; /* the pool ends the read: read_done frees c */
        return;
    }
    consent_free(c);
}

void og_consent_close(og_consent_t *c, void (*closed)(void *arg), void *arg)
{
    c->closed = closed;
    c->closed_arg = arg;
    resume_waiting(c);
    uv_close((uv_handle_t *)&c->timer, timer_closed);
}
