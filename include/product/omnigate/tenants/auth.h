/*
 * Tenant authentication (API.md §1): bearer token -> tenant, scopes and plan flag, through a
 * per-worker cache so the hot path stays off the database. A cache entry lives
 * OMNIGATE_AUTH_TTL_MS (1 s); after that the next request re-reads the token and its tenant, so a
 * revocation or a plan change made on any instance takes effect everywhere within that time
 * (plus one query). Unknown tokens are cached too, so a flood of one bad token is one query a
 * second. last_used_at is written in batches once a second, not per request. Responsible for
 * deciding who is calling and whether they may; not for what they asked.
 */
#ifndef OMNIGATE_TENANTS_AUTH_H
#define OMNIGATE_TENANTS_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "omnigate/db.h"
#include "omnigate/http.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

#define OG_AUTH_CACHE_SLOTS 4096 /* direct-mapped by token hash; a collision just evicts */
#define OG_AUTH_TOUCH_MAX   256  /* token ids gathered for one last_used_at update */

/* A token's scopes (API.md §1, §23), one bit each. keys (manage the tenant's own tokens and
 * webhook) is opt-in: OG_SCOPE_DEFAULT, what a token gets when its creation names no scopes, leaves
 * it out; OG_SCOPE_ALL has every bit. */
enum {
    OG_SCOPE_SEND = 1,
    OG_SCOPE_OTP = 2,
    OG_SCOPE_LOGS = 4,
    OG_SCOPE_KEYS = 8,
    OG_SCOPE_DEFAULT = OG_SCOPE_SEND | OG_SCOPE_OTP | OG_SCOPE_LOGS,
    OG_SCOPE_ALL = OG_SCOPE_DEFAULT | OG_SCOPE_KEYS
};

/* The scopes' names in their one order (send, otp, logs, keys): og_scope_names[i] is bit 1 << i.
 * Stored tokens, answers and error messages list scopes in this order. */
#define OG_SCOPE_COUNT 4
extern const char *const og_scope_names[OG_SCOPE_COUNT];

/* The bit of scope `name` (`len` bytes), or 0 for a name that is no scope. */
unsigned og_scope_bit(const char *name, size_t len);

/* The bits of a comma-separated list of names ("send,logs"); unknown names are left out. */
unsigned og_scope_parse(const char *csv);

/* Writes `scopes` as the comma-separated list of their names, in order, to buf (at least
 * OG_SCOPE_CSV_MAX bytes); "" for none. */
#define OG_SCOPE_CSV_MAX 32
void og_scope_csv(unsigned scopes, char buf[OG_SCOPE_CSV_MAX]);

/* A tenant as a request sees it. Reference-counted: the cache holds one reference, every
 * request working for the tenant holds one, so a refresh never pulls settings from under a
 * send in progress. */
typedef struct og_tenant {
    int refs;
    char id[37];
    bool unified_api_enabled;
    json_t *settings; /* never NULL */
    /* The names of the tenant's QR sessions known not WORKING (API.md §23, sql/027), as its token's
     * lookup read them: a JSON array, or NULL for none. */
    json_t *qr_down;
} og_tenant_t;

/* Whether the tenant's QR session `session` is known not WORKING (t->qr_down). */
bool og_tenant_qr_down(const og_tenant_t *t, const char *session);

og_tenant_t *og_tenant_ref(og_tenant_t *t);
void og_tenant_release(og_tenant_t *t);

typedef struct og_auth og_auth_t;
typedef struct og_auth_req og_auth_req_t;

/* Called once. On success `tenant` holds a reference the caller releases; on failure the
 * request has already been answered (401, 403, 503) and `tenant` is NULL. */
typedef void (*og_auth_done_fn)(og_auth_req_t *a);

struct og_auth_req {
    /* in */
    og_http_req_t *req;
    unsigned scope; /* OG_SCOPE_* the route needs */
    bool unified;   /* route of the unified API: refused while the plan locks it */
    og_auth_done_fn done;
    /* The caller's database operation, which the lookup of a token not in the cache uses; free
     * (cleared) again when done runs. One operation serves a request's every step in turn. */
    og_db_op_t *op;
    /* out */
    og_tenant_t *tenant;
    char token_id[37];
    unsigned scopes; /* the calling token's OG_SCOPE_* (what a token it creates may have at most) */
    /* private */
    og_auth_t *auth;
    char hash[65];
};

/* `db` may be NULL (no database configured: every tenant request answers 503). */
/* The rate limit's metric block (metrics.h): one counter, of tenant requests refused. The app
 * registers it (worker.h). */
extern const og_m_block_t og_auth_metrics_block;

/* Enforces each tenant's rateLimitPerSecond with `rl` (owned by the caller, may be NULL)
 * after authentication succeeded; refusals are counted in `refused` (the block in the worker's
 * slot, may be NULL). */
struct og_rl;
void og_auth_set_rate_limit(og_auth_t *auth, struct og_rl *rl, uint64_t *refused);

og_auth_t *og_auth_new(uv_loop_t *loop, og_db_t *db, og_log_t *log, const char *secret, int ttl_ms);

/* Authenticates a->req; a->done is called once, possibly before this returns. */
void og_auth_tenant(og_auth_t *auth, og_auth_req_t *a);

/* Checks the admin bearer token against `admin_token` (NULL: admin API disabled). Answers
 * 401 itself and returns false when it does not match. */
bool og_auth_admin(og_http_req_t *req, const char *admin_token);

/* For an admin route about the tenant of the path ({id}): checks the admin token and reads the id,
 * a UUID, into `id`; false after answering 401, or 404 not_found for an id that is no UUID (no
 * such tenant). Used by the admin mirrors (logs/logs_api.h, tenant_webhooks/webhook_api.h). */
bool og_auth_admin_tenant(og_http_req_t *req, const og_route_match_t *m, const char *admin_token,
                          char id[37]);

/* Flushes pending last_used_at updates, closes the timer, frees everything once closed. */
void og_auth_close(og_auth_t *auth, void (*closed)(void *arg), void *arg);

#endif
