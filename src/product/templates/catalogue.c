/*
 * The per-worker template cache. See include/product/omnigate/templates/catalogue.h.
 */
#include "omnigate/templates/catalogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/store.h"

typedef struct slot {
    char *key;       /* "waba\x1fname\x1flanguage", malloc'd; NULL when free */
    json_t *item;    /* the entry, NULL: not in the catalogue */
    uint64_t at;     /* loop time it was read */
    bool refreshing; /* a background read is in flight for it */
} slot_t;

struct og_tpl_cache {
    uv_loop_t *loop;
    og_db_t *db;
    slot_t slot[OG_TPL_CACHE_SLOTS];
};

/* One read waiting for the database; freed in its callback. `op` is the caller's, or (a
 * background refresh) `own`. */
typedef struct lookup {
    og_tpl_cache_t *c;
    og_db_op_t *op;
    og_db_op_t own;
    char *key;
    char waba[48];
    char *name;
    char language[32];
    og_tpl_found_fn done; /* NULL: a background refresh */
    void *arg;
} lookup_t;

og_tpl_cache_t *og_tpl_cache_new(uv_loop_t *loop, og_db_t *db)
{
    og_tpl_cache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->loop = loop;
    c->db = db;
    return c;
}

void og_tpl_cache_free(og_tpl_cache_t *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < OG_TPL_CACHE_SLOTS; i++) {
        free(c->slot[i].key);
        json_decref(c->slot[i].item);
    }
    free(c);
}

static char *make_key(const char *waba_id, const char *name, const char *language)
{
    size_t n = strlen(waba_id) + strlen(name) + strlen(language) + 3;
    char *k = malloc(n);
    if (k != NULL)
        snprintf(k, n, "%s\x1f%s\x1f%s", waba_id, name, language);
    return k;
}

static slot_t *slot_for(og_tpl_cache_t *c, const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return &c->slot[h % OG_TPL_CACHE_SLOTS];
}

/* Keeps `item` (a new reference, may be NULL) as the entry of `key` (taken). */
static void store(og_tpl_cache_t *c, char *key, json_t *item)
{
    slot_t *s = slot_for(c, key);
    bool same = s->key != NULL && strcmp(s->key, key) == 0;
    free(s->key);
    json_decref(s->item);
    s->key = key;
    s->item = item;
    s->at = uv_now(c->loop);
    s->refreshing = same && s->refreshing;
}

static void read_done(og_db_op_t *op, og_db_status_t st)
{
    lookup_t *l = op->arg;
    json_t *item = NULL;
    const PGresult *r = op->res[0];
    if (st == OG_DB_OK && r != NULL && PQntuples(r) == 1 &&
        (item = json_loads(PQgetvalue(r, 0, OG_TEMPLATE_ITEM), 0, NULL)) == NULL)
        st = OG_DB_ERROR; /* not the JSON og_template_item makes */
    bool ok = st == OG_DB_OK;
    slot_t *s = slot_for(l->c, l->key);
    bool mine = s->key != NULL && strcmp(s->key, l->key) == 0;
    if (mine)
        s->refreshing = false;
    if (ok) {
        store(l->c, l->key, json_incref(item));
        l->key = NULL;
    }
    if (l->done != NULL)
        l->done(l->arg, st, item); /* the caller's op: the caller clears it */
    else
        og_db_op_clear(op);
    json_decref(item);
    free(l->key);
    free(l->name);
    free(l);
}

static void submit(og_tpl_cache_t *c, lookup_t *l, og_db_op_t *op)
{
    l->op = op;
    memset(op, 0, sizeof(*op));
    op->nstmts = 1;
    og_q_tpl_get(&op->stmts[0],
                 &(og_q_tpl_get_t){.waba_id = l->waba, .name = l->name, .language = l->language});
    op->done = read_done;
    op->arg = l;
    og_db_submit(c->db, op);
}

static lookup_t *lookup_new(og_tpl_cache_t *c, char *key, const char *waba_id, const char *name,
                            const char *language)
{
    lookup_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->c = c;
    l->key = key;
    l->name = strdup(name);
    snprintf(l->waba, sizeof(l->waba), "%s", waba_id);
    snprintf(l->language, sizeof(l->language), "%s", language);
    if (l->name == NULL) {
        free(l);
        return NULL;
    }
    return l;
}

void og_tpl_lookup(og_tpl_cache_t *c, og_db_op_t *op, const char *waba_id, const char *name,
                   const char *language, og_tpl_found_fn done, void *arg)
{
    char *key = make_key(waba_id, name, language);
    if (key == NULL) {
        done(arg, OG_DB_ERROR, NULL);
        return;
    }
    slot_t *s = slot_for(c, key);
    uint64_t age = uv_now(c->loop) - s->at;
    if (s->key != NULL && strcmp(s->key, key) == 0 && age < OG_TPL_CACHE_MS) {
        if (age >= OG_TPL_CACHE_MS / 2 && !s->refreshing) {
            /* Read it again now, in the background, so the send after its end need not wait. */
            lookup_t *bg = lookup_new(c, strdup(key), waba_id, name, language);
            if (bg != NULL && bg->key != NULL) {
                s->refreshing = true;
                submit(c, bg, &bg->own);
            } else if (bg != NULL) {
                free(bg->name);
                free(bg);
            }
        }
        free(key);
        json_t *item = json_incref(s->item); /* done may look another template up */
        done(arg, OG_DB_OK, item);
        json_decref(item);
        return;
    }
    lookup_t *l = lookup_new(c, key, waba_id, name, language);
    if (l == NULL) {
        free(key);
        done(arg, OG_DB_ERROR, NULL);
        return;
    }
    l->done = done;
    l->arg = arg;
    submit(c, l, op);
}

void og_tpl_cache_forget(og_tpl_cache_t *c, const char *waba_id, const char *name, const char *language)
{
    char *key = make_key(waba_id, name, language);
    if (key == NULL)
        return;
    slot_t *s = slot_for(c, key);
    if (s->key != NULL && strcmp(s->key, key) == 0)
        s->at = uv_now(c->loop) - OG_TPL_CACHE_MS; /* expired: the next lookup reads it */
    free(key);
}

char *og_tpl_change_json(const char *waba_id, const char *name, const char *language, const char *status)
{
    json_t *changes = json_pack("[{s:s,s:s,s:s,s:s}]", "waba", waba_id, "name", name, "language", language,
                                "status", status);
    char *text = changes != NULL ? json_dumps(changes, JSON_COMPACT) : NULL;
    json_decref(changes);
    return text;
}

const char *og_tpl_status_of_meta_code(const char *code)
{
    if (code == NULL)
        return NULL;
    if (strcmp(code, "132001") == 0)
        return "MISSING";
    if (strcmp(code, "132015") == 0)
        return "PAUSED";
    if (strcmp(code, "132016") == 0)
        return "DISABLED";
    return NULL;
}
