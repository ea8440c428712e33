/*
 * The tenants' own provider accounts (API.md §23) as one worker knows them by the key a
 * provider's webhook names: a Twilio AccountSid, a WAHA session. The webhooks in
 * (callbacks/webhooks_in.h) verify a request with the secrets of the accounts its key names, read
 * from the database on a miss (sql/queries/accounts.sql) and kept here for OMNIGATE_AUTH_TTL_MS,
 * as the tenant cache keeps settings (tenants/auth.h): a provider's burst of callbacks costs one
 * query per key and TTL, a changed or removed account is honoured everywhere within that time,
 * and a key no tenant has is remembered too, so a flood of one unknown key is one query per TTL.
 * Responsible for keeping the entries and wiping their secrets; not for reading them nor for
 * what they verify.
 */
#ifndef OMNIGATE_PROVIDERS_ACCOUNTS_H
#define OMNIGATE_PROVIDERS_ACCOUNTS_H

#include <stdbool.h>
#include <stdint.h>

#define OG_ACCOUNTS_SLOTS   256 /* direct-mapped by (kind, key); a collision evicts */
#define OG_ACCOUNTS_PER_KEY 8   /* tenants kept per key: tenants may share one account */
#define OG_ACCOUNTS_KEY_MAX 64  /* bytes of a key: settings.h allows no longer sid nor session */

typedef enum og_account_kind {
    OG_ACCOUNT_TWILIO, /* key: channels.sms.account.accountSid */
    OG_ACCOUNT_WAHA,   /* key: a session of a number of a tenant with channels.whatsapp_qr.server */
} og_account_kind_t;

/* One tenant's account under a key. */
typedef struct og_account {
    char tenant_id[37];
    /* The secret its webhooks are signed with (Twilio: the auth token; WAHA: the server's
     * webhookSecret), clear, owned by the cache; NULL when it is stored sealed and did not open
     * with this OMNIGATE_SECRET (it then verifies nothing). */
    char *secret;
} og_account_t;

/* What the cache holds for one key: n accounts (0: no tenant has one, as of fetched_ms). */
typedef struct og_accounts_entry {
    og_account_kind_t kind;
    char key[OG_ACCOUNTS_KEY_MAX + 1];
    uint64_t fetched_ms; /* loop time of the read */
    int n;
    og_account_t acct[OG_ACCOUNTS_PER_KEY];
} og_accounts_entry_t;

typedef struct og_accounts og_accounts_t;

/* An empty cache whose entries are fresh for `ttl_ms` (at least 1). NULL when out of memory. */
og_accounts_t *og_accounts_new(int ttl_ms);

/* Wipes every secret and frees everything. NULL is fine. */
void og_accounts_free(og_accounts_t *c);

/* The entry of (kind, key) read less than the TTL before loop time `now_ms`, or NULL (none, or
 * too old): read the database, then og_accounts_put. Valid until the next og_accounts_put or
 * og_accounts_free. */
const og_accounts_entry_t *og_accounts_get(og_accounts_t *c, og_account_kind_t kind, const char *key,
                                           uint64_t now_ms);

/* A fresh, empty entry of (kind, key) read at `now_ms`, replacing what its slot held (secrets
 * wiped), for og_accounts_add. NULL when out of memory or `key` is longer than
 * OG_ACCOUNTS_KEY_MAX (nothing is kept). */
og_accounts_entry_t *og_accounts_put(og_accounts_t *c, og_account_kind_t kind, const char *key,
                                     uint64_t now_ms);

/* Adds a tenant's account to entry `e` (secret copied; NULL: did not open). False when the entry
 * is full (OG_ACCOUNTS_PER_KEY) or out of memory. */
bool og_accounts_add(og_accounts_entry_t *e, const char *tenant_id, const char *secret);

/* Drops the entry of (kind, key), if any (a read that could not be kept whole). */
void og_accounts_forget(og_accounts_t *c, og_account_kind_t kind, const char *key);

#endif
