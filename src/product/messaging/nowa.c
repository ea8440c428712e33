/*
 * Numbers not on WhatsApp. See include/product/omnigate/messaging/nowa.h.
 */
#include "omnigate/messaging/nowa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/store.h"

typedef struct slot {
    char number[20]; /* "" when free */
    bool remembered;
    uint64_t until_ms; /* loop time this answer is good until */
} slot_t;

struct og_nowa {
    uv_loop_t *loop;
    og_db_t *db;
    char ttl_s[16];
    slot_t slot[OG_NOWA_SLOTS];
};

/* One check waiting for the database; freed in its callback. */
typedef struct check {
    og_nowa_t *n;
    og_db_op_t *op;
    char number[20];
    void (*done)(void *arg, bool remembered);
    void *arg;
} check_t;

og_nowa_t *og_nowa_new(uv_loop_t *loop, og_db_t *db, int ttl_s)
{
    og_nowa_t *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->loop = loop;
    n->db = db;
    snprintf(n->ttl_s, sizeof(n->ttl_s), "%d", ttl_s);
    return n;
}

void og_nowa_free(og_nowa_t *n)
{
    free(n);
}

static slot_t *slot_for(og_nowa_t *n, const char *number)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = number; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return &n->slot[h % OG_NOWA_SLOTS];
}

static void cache(og_nowa_t *n, const char *number, bool remembered, uint64_t for_ms)
{
    slot_t *s = slot_for(n, number);
    snprintf(s->number, sizeof(s->number), "%s", number);
    s->remembered = remembered;
    s->until_ms = uv_now(n->loop) + (for_ms < OG_NOWA_CACHE_MS ? for_ms : OG_NOWA_CACHE_MS);
}

static void read_done(og_db_op_t *op, og_db_status_t st)
{
    check_t *c = op->arg;
    bool remembered = false;
    const PGresult *r = op->res[0];
    if (st == OG_DB_OK && r != NULL && PQntuples(r) == 1) {
        /* The row's remaining life in ms, NULL when the number is not remembered. */
        remembered = !PQgetisnull(r, 0, OG_C_NOWA_GET_LEFT_MS);
        uint64_t left =
            remembered ? strtoull(PQgetvalue(r, 0, OG_C_NOWA_GET_LEFT_MS), NULL, 10) : OG_NOWA_CACHE_MS;
        cache(c->n, c->number, remembered, left);
    }
    og_db_op_clear(op);
    void (*done)(void *, bool) = c->done;
    void *arg = c->arg;
    free(c);
    done(arg, remembered);
}

bool og_nowa_cached(og_nowa_t *n, const char *number, bool *remembered)
{
    slot_t *s = slot_for(n, number);
    if (strcmp(s->number, number) != 0 || uv_now(n->loop) >= s->until_ms)
        return false;
    *remembered = s->remembered;
    return true;
}

void og_nowa_learn(og_nowa_t *n, const char *number, bool remembered, uint64_t left_ms)
{
    cache(n, number, remembered, remembered ? left_ms : OG_NOWA_CACHE_MS);
}

void og_nowa_check(og_nowa_t *n, og_db_op_t *op, const char *number, void (*done)(void *arg, bool remembered),
                   void *arg)
{
    bool remembered;
    if (og_nowa_cached(n, number, &remembered)) {
        done(arg, remembered);
        return;
    }
    check_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        done(arg, false);
        return;
    }
    c->n = n;
    c->op = op;
    snprintf(c->number, sizeof(c->number), "%s", number);
    c->done = done;
    c->arg = arg;
    memset(op, 0, sizeof(*op));
    op->nstmts = 1;
    og_q_nowa_get(&op->stmts[0], &(og_q_nowa_get_t){.number = c->number});
    op->done = read_done;
    op->arg = c;
    og_db_submit(n->db, op);
}

int og_nowa_mark_stmt(og_nowa_t *n, og_db_op_t *op, int slot, const char *number)
{
    cache(n, number, true, OG_NOWA_CACHE_MS);
    og_q_nowa_mark(&op->stmts[slot], &(og_q_nowa_mark_t){.number = number, .ttl_s = n->ttl_s});
    return 1;
}

/* What og_nowa_from_statuses (sql/010) acts on. */
static bool relevant(const json_t *s)
{
    const char *ch = json_string_value(json_object_get(s, "channel"));
    const char *st = json_string_value(json_object_get(s, "status"));
    const char *code = json_string_value(json_object_get(s, "code"));
    if (ch == NULL || st == NULL || (strcmp(ch, "whatsapp_meta") != 0 && strcmp(ch, "whatsapp_qr") != 0))
        return false;
    return strcmp(st, "delivered") == 0 || strcmp(st, "read") == 0 ||
           (strcmp(ch, "whatsapp_meta") == 0 && strcmp(st, "failed") == 0 && code != NULL &&
            strcmp(code, "131026") == 0);
}

int og_nowa_statuses_stmt(og_nowa_t *n, og_db_op_t *op, int slot, const json_t *statuses, const char *json)
{
    size_t i;
    json_t *s;
    bool any = false;
    json_array_foreach(statuses, i, s) any = any || relevant(s);
    if (!any)
        return 0;
    og_q_nowa_statuses(&op->stmts[slot], &(og_q_nowa_statuses_t){.statuses = json, .ttl_s = n->ttl_s});
    return 1;
}
