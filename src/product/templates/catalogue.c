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

/* True when s is non-empty and every byte is a letter, digit or _ (nothing to quote). */
static bool plain(const char *s)
{
    if (s == NULL || *s == '\0')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

bool og_tpl_mark_init(og_tpl_mark_t *m, const char *waba_id, const char *name, const char *language,
                      const char *status)
{
    if (!plain(waba_id) || !plain(name) || !plain(language) || !plain(status))
        return false;
    return snprintf(m->waba, sizeof(m->waba), "{%s}", waba_id) < (int)sizeof(m->waba) &&
           snprintf(m->name, sizeof(m->name), "{%s}", name) < (int)sizeof(m->name) &&
           snprintf(m->language, sizeof(m->language), "{%s}", language) < (int)sizeof(m->language) &&
           snprintf(m->status, sizeof(m->status), "{%s}", status) < (int)sizeof(m->status);
}

int og_tpl_mark_stmt(og_tpl_cache_t *c, og_db_op_t *op, int slot, const og_tpl_mark_t *m)
{
    /* The literals are "{value}": the cache's key is the values themselves. */
    char waba[48], name[528], language[32];
    snprintf(waba, sizeof(waba), "%.*s", (int)strlen(m->waba) - 2, m->waba + 1);
    snprintf(name, sizeof(name), "%.*s", (int)strlen(m->name) - 2, m->name + 1);
    snprintf(language, sizeof(language), "%.*s", (int)strlen(m->language) - 2, m->language + 1);
    og_tpl_cache_forget(c, waba, name, language);
    og_q_tpl_set_status(&op->stmts[slot], &(og_q_tpl_set_status_t){.waba_ids = m->waba,
                                                                   .names = m->name,
                                                                   .languages = m->language,
                                                                   .statuses = m->status});
    return 1;
}

void og_tpl_marks_free(char *lits[4])
{
    for (int i = 0; i < 4; i++) {
        free(lits[i]);
        lits[i] = NULL;
    }
}

int og_tpl_marks_stmt(og_db_op_t *op, int slot, const json_t *marks, char *lits[4])
{
    static const char *const keys[4] = {"waba", "name", "language", "status"};
    size_t cap[4] = {3, 3, 3, 3}, len[4] = {0, 0, 0, 0};
    size_t i;
    json_t *m;
    for (int k = 0; k < 4; k++)
        lits[k] = NULL;
    json_array_foreach(marks, i, m)
    {
        for (int k = 0; k < 4; k++) {
            const char *v = json_string_value(json_object_get(m, keys[k]));
            cap[k] += (v != NULL ? strlen(v) : 0) + 1;
        }
    }
    for (int k = 0; k < 4; k++) {
        if ((lits[k] = malloc(cap[k])) == NULL) {
            og_tpl_marks_free(lits);
            return -1;
        }
        lits[k][len[k]++] = '{';
    }
    int n = 0;
    json_array_foreach(marks, i, m)
    {
        const char *v[4];
        for (int k = 0; k < 4; k++)
            v[k] = json_string_value(json_object_get(m, keys[k]));
        og_tpl_mark_t check; /* the same rules as one mark's: nothing to quote, sizes that fit */
        if (!og_tpl_mark_init(&check, v[0], v[1], v[2], v[3]))
            continue;
        for (int k = 0; k < 4; k++) {
            if (n > 0)
                lits[k][len[k]++] = ',';
            size_t l = strlen(v[k]);
            memcpy(lits[k] + len[k], v[k], l);
            len[k] += l;
        }
        n++;
    }
    if (n == 0) {
        og_tpl_marks_free(lits);
        return 0;
    }
    for (int k = 0; k < 4; k++) {
        lits[k][len[k]++] = '}';
        lits[k][len[k]] = '\0';
    }
    og_q_tpl_set_status(&op->stmts[slot], &(og_q_tpl_set_status_t){.waba_ids = lits[0],
                                                                   .names = lits[1],
                                                                   .languages = lits[2],
                                                                   .statuses = lits[3]});
    return 1;
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
