/*
 * The per-worker cache of the tenants' own provider accounts by webhook key. See
 * include/product/omnigate/providers/accounts.h. Entries are allocated on first use of their
 * slot and kept until the cache is freed: a worker sees few distinct keys (one per own account
 * or session that calls it), and a key seen once is likely to be seen again within the TTL.
 */
#include "omnigate/providers/accounts.h"

#include <stdlib.h>
#include <string.h>

struct og_accounts {
    uint64_t ttl_ms;
    og_accounts_entry_t *slot[OG_ACCOUNTS_SLOTS]; /* NULL until a key lands there */
};

og_accounts_t *og_accounts_new(int ttl_ms)
{
    og_accounts_t *c = calloc(1, sizeof(*c));
    if (c != NULL)
        c->ttl_ms = ttl_ms > 0 ? (uint64_t)ttl_ms : 1;
    return c;
}

/* Wipes and frees the entry's secrets; the entry holds no account any more. */
static void entry_clear(og_accounts_entry_t *e)
{
    for (int i = 0; i < e->n; i++) {
        if (e->acct[i].secret != NULL) {
            explicit_bzero(e->acct[i].secret, strlen(e->acct[i].secret));
            free(e->acct[i].secret);
        }
    }
    memset(e->acct, 0, sizeof(e->acct));
    e->n = 0;
}

void og_accounts_free(og_accounts_t *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < OG_ACCOUNTS_SLOTS; i++) {
        if (c->slot[i] != NULL) {
            entry_clear(c->slot[i]);
            free(c->slot[i]);
        }
    }
    free(c);
}

/* FNV-1a of the kind and the key. */
static size_t slot_of(og_account_kind_t kind, const char *key)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
    for (const unsigned char *p = (const unsigned char *)key; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (size_t)(h % OG_ACCOUNTS_SLOTS);
}

static bool same(const og_accounts_entry_t *e, og_account_kind_t kind, const char *key)
{
    return e != NULL && e->key[0] != '\0' && e->kind == kind && strcmp(e->key, key) == 0;
}

const og_accounts_entry_t *og_accounts_get(og_accounts_t *c, og_account_kind_t kind, const char *key,
                                           uint64_t now_ms)
{
    const og_accounts_entry_t *e = c->slot[slot_of(kind, key)];
    if (!same(e, kind, key) || now_ms - e->fetched_ms >= c->ttl_ms)
        return NULL;
    return e;
}

og_accounts_entry_t *og_accounts_put(og_accounts_t *c, og_account_kind_t kind, const char *key,
                                     uint64_t now_ms)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > OG_ACCOUNTS_KEY_MAX)
        return NULL;
    og_accounts_entry_t **s = &c->slot[slot_of(kind, key)];
    if (*s == NULL && (*s = calloc(1, sizeof(**s))) == NULL)
        return NULL;
    og_accounts_entry_t *e = *s;
    entry_clear(e);
    e->kind = kind;
    memcpy(e->key, key, klen + 1);
    e->fetched_ms = now_ms;
    return e;
}

bool og_accounts_add(og_accounts_entry_t *e, const char *tenant_id, const char *secret)
{
    if (e->n >= OG_ACCOUNTS_PER_KEY || tenant_id == NULL || strlen(tenant_id) >= sizeof(e->acct[0].tenant_id))
        return false;
    og_account_t *a = &e->acct[e->n];
    if (secret != NULL && (a->secret = strdup(secret)) == NULL)
        return false;
    strcpy(a->tenant_id, tenant_id);
    e->n++;
    return true;
}

void og_accounts_forget(og_accounts_t *c, og_account_kind_t kind, const char *key)
{
    og_accounts_entry_t *e = c->slot[slot_of(kind, key)];
    if (same(e, kind, key)) {
        entry_clear(e);
        e->key[0] = '\0';
    }
}
