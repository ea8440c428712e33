/*
 * Tenant authentication with a per-worker cache. See include/product/omnigate/tenants/auth.h.
 */
#include "omnigate/tenants/auth.h"

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/metrics.h"
#include "omnigate/tenants/ratelimit.h"
#include "omnigate/tenants/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "omnigate/hmac.h"
#include "omnigate/api.h"
#include "omnigate/store.h"
#include "omnigate/router.h"
#include "omnigate/token.h"

typedef struct slot {
    char hash[65]; /* "" when empty */
    bool found;    /* false: a negative entry (unknown token) */
    bool revoked;
    unsigned scopes;
    char token_id[37];
    og_tenant_t *tenant;
    uint64_t fetched_ms;
} slot_t;

struct og_auth {
    uv_loop_t *loop;
    og_db_t *db;
    og_log_t *log;
    char *secret;
    og_hmac_key_t token_key;    /* HMAC-SHA256 keyed by the secret, made ready once: token hashes */
    int ttl_ms;                 /* OMNIGATE_AUTH_TTL_MS: how long a cache entry is trusted */
    og_seal_key_t seal_key;     /* opens the sealed secrets of tenant settings (settings.h) */
    og_rl_t *rl;                /* per-tenant rate limit, or NULL */
    uint64_t *refused_requests; /* counted (og_auth_metrics_block), or NULL */
    slot_t slots[OG_AUTH_CACHE_SLOTS];

    /* last_used_at batching: ids gathered since the last flush, one update in flight. */
    uv_timer_t touch_timer;
    char touch_ids[OG_AUTH_TOUCH_MAX][37];
    int ntouch;
    og_db_op_t touch_op;
    bool touch_inflight;
    char touch_param[OG_AUTH_TOUCH_MAX * 38 + 3];

    bool closing;
    void (*closed)(void *arg);
    void *closed_arg;
};

OG_M_SCALAR(og_auth_metrics_block, "omnigate_rate_limited_total", OG_M_COUNTER,
            "Tenant requests refused by the rate limit (429).");

og_tenant_t *og_tenant_ref(og_tenant_t *t)
{
    t->refs++;
    return t;
}

void og_tenant_release(og_tenant_t *t)
{
    if (t != NULL && --t->refs == 0) {
        json_decref(t->settings);
        json_decref(t->qr_down);
        free(t);
    }
}

bool og_tenant_qr_down(const og_tenant_t *t, const char *session)
{
    size_t i;
    json_t *v;
    json_array_foreach(t != NULL && session != NULL ? t->qr_down : NULL, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), session) == 0)
            return true;
    }
    return false;
}

const char *const og_scope_names[OG_SCOPE_COUNT] = {"send", "otp", "logs", "keys"};

unsigned og_scope_bit(const char *name, size_t len)
{
    for (unsigned i = 0; i < OG_SCOPE_COUNT; i++)
        if (strlen(og_scope_names[i]) == len && memcmp(name, og_scope_names[i], len) == 0)
            return 1u << i;
    return 0;
}

unsigned og_scope_parse(const char *s)
{
    unsigned out = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        out |= og_scope_bit(s, n);
        s += n;
        if (*s == ',')
            s++;
    }
    return out;
}

void og_scope_csv(unsigned scopes, char buf[OG_SCOPE_CSV_MAX])
{
    size_t len = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < OG_SCOPE_COUNT; i++)
        if (scopes & (1u << i))
            len += (size_t)snprintf(buf + len, OG_SCOPE_CSV_MAX - len, "%s%s", len ? "," : "",
                                    og_scope_names[i]);
}

static slot_t *slot_for(og_auth_t *auth, const char *hash)
{
    /* The hash is uniformly distributed hex: its first 4 digits pick the slot. */
    unsigned idx = (unsigned)strtoul((char[5]){hash[0], hash[1], hash[2], hash[3], 0}, NULL, 16);
    return &auth->slots[idx % OG_AUTH_CACHE_SLOTS];
}

static void slot_clear(slot_t *s)
{
    og_tenant_release(s->tenant);
    memset(s, 0, sizeof(*s));
}

static void touch(og_auth_t *auth, const char *token_id)
{
    for (int i = 0; i < auth->ntouch; i++)
        if (strcmp(auth->touch_ids[i], token_id) == 0)
            return;
    if (auth->ntouch < OG_AUTH_TOUCH_MAX)
        memcpy(auth->touch_ids[auth->ntouch++], token_id, 37);
    /* Beyond that many distinct tokens in one second the extra ones wait for a later second. */
}

static void answer_error(og_http_req_t *req, const og_errcode_t *code, const char *message)
{
    og_api_error(req, code, NULL, message);
}

/* Takes a token from the tenant's bucket and puts the RateLimit-* headers on the response;
 * answers 429 rate_limited (with Retry-After) and returns false when there is none. */
static bool rate_ok(og_auth_t *auth, og_http_req_t *req, const og_tenant_t *t)
{
    if (auth->rl == NULL)
        return true;
    og_rl_result_t r = og_rl_take(auth->rl, t->id, og_settings_rate_limit(t->settings), uv_hrtime() / 1000);
    og_rl_headers(&r, req);
    if (r.allowed)
        return true;
    if (auth->refused_requests != NULL)
        og_metrics_add(auth->refused_requests, 1);
    og_api_error(req, OG_E_RATE_LIMITED, NULL, "the tenant's rate limit is exhausted: retry later");
    return false;
}

/* Decides a request from a fresh cache slot. */
static void decide(og_auth_t *auth, og_auth_req_t *a, const slot_t *s)
{
    if (!s->found || s->revoked) {
        answer_error(a->req, OG_E_UNAUTHORIZED, s->revoked ? "token revoked" : "unknown token");
    } else if (a->unified && !s->tenant->unified_api_enabled) {
        answer_error(a->req, OG_E_UNIFIED_API_LOCKED, "the tenant's plan does not include the unified API");
    } else if ((s->scopes & a->scope) != a->scope) {
        answer_error(a->req, OG_E_INSUFFICIENT_SCOPE, "the token lacks the scope this route needs");
    } else if (!rate_ok(auth, a->req, s->tenant)) {
        /* answered 429 rate_limited */
    } else {
        a->tenant = og_tenant_ref(s->tenant);
        memcpy(a->token_id, s->token_id, sizeof(a->token_id));
        a->scopes = s->scopes;
        touch(auth, s->token_id);
    }
    a->done(a);
}

static void lookup_done(og_db_op_t *op, og_db_status_t st)
{
    og_auth_req_t *a = op->arg;
    og_auth_t *auth = a->auth;
    if (st != OG_DB_OK) {
        og_answer_db_failure(a->req, auth->log, op, st, "auth lookup failed", "database unavailable");
        og_db_op_clear(op);
        a->done(a);
        return;
    }
    PGresult *r = op->res[0];
    slot_t *s = slot_for(auth, a->hash);
    slot_clear(s);
    memcpy(s->hash, a->hash, sizeof(s->hash));
    s->fetched_ms = uv_now(auth->loop);
    if (r != NULL && PQntuples(r) == 1) {
        og_tenant_t *t = calloc(1, sizeof(*t));
        json_t *settings = json_loads(PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_SETTINGS), 0, NULL);
        if (t == NULL || settings == NULL) {
            free(t);
            json_decref(settings);
            memset(s, 0, sizeof(*s));
            og_db_op_clear(op);
            answer_error(a->req, OG_E_UNAVAILABLE, "out of memory");
            a->done(a);
            return;
        }
        t->refs = 1;
        snprintf(t->id, sizeof(t->id), "%s", PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_TENANT_ID));
        t->unified_api_enabled = PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_UNIFIED)[0] == 't';
        /* Cached tenants hold their credentials clear, in memory only. */
        og_settings_open(settings, &auth->seal_key, t->id, auth->log);
        t->settings = settings;
        if (!PQgetisnull(r, 0, OG_C_AUTH_LOOKUP_QR_DOWN))
            t->qr_down = json_loads(PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_QR_DOWN), 0, NULL);
        s->tenant = t;
        s->found = true;
        s->revoked = PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_REVOKED)[0] == 't';
        s->scopes = og_scope_parse(PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_SCOPES));
        snprintf(s->token_id, sizeof(s->token_id), "%s", PQgetvalue(r, 0, OG_C_AUTH_LOOKUP_TOKEN_ID));
    }
    og_db_op_clear(op);
    decide(auth, a, s);
}

void og_auth_tenant(og_auth_t *auth, og_auth_req_t *a)
{
    a->auth = auth;
    a->tenant = NULL;
    a->token_id[0] = '\0';
    a->scopes = 0;
    size_t len;
    const char *v = og_http_req_header(a->req, "authorization", &len);
    if (v == NULL || len < 7 || strncasecmp(v, "Bearer ", 7) != 0) {
        answer_error(a->req, OG_E_UNAUTHORIZED, "missing bearer token");
        a->done(a);
        return;
    }
    const char *tok = v + 7;
    size_t tlen = len - 7;
    while (tlen > 0 && *tok == ' ')
        tok++, tlen--;
    if (!og_token_format_valid(tok, tlen)) {
        answer_error(a->req, OG_E_UNAUTHORIZED, "malformed bearer token");
        a->done(a);
        return;
    }
    if (a->op == NULL) { /* a route that gave no operation (auth.h): a bug, not the client's */
        og_api_error(a->req, OG_E_INTERNAL_ERROR, NULL, "authentication has no database operation");
        a->done(a);
        return;
    }
    if (auth->db == NULL) {
        answer_error(a->req, OG_E_UNAVAILABLE, "no database configured");
        a->done(a);
        return;
    }
    og_token_hash_with(&auth->token_key, tok, tlen, a->hash);
    slot_t *s = slot_for(auth, a->hash);
    if (s->hash[0] != '\0' && strcmp(s->hash, a->hash) == 0 &&
        uv_now(auth->loop) - s->fetched_ms < (uint64_t)auth->ttl_ms) {
        decide(auth, a, s);
        return;
    }
    og_db_op_t *op = a->op;
    og_db_op_clear(op);
    op->nstmts = 1;
    og_q_auth_lookup(&op->stmts[0], &(og_q_auth_lookup_t){.hash = a->hash});
    op->write = false;
    op->done = lookup_done;
    op->arg = a;
    og_db_submit(auth->db, op);
}

bool og_auth_admin(og_http_req_t *req, const char *admin_token)
{
    size_t len;
    const char *v = og_http_req_header(req, "authorization", &len);
    if (admin_token == NULL) {
        answer_error(req, OG_E_UNAUTHORIZED, "the admin API is disabled (OMNIGATE_ADMIN_TOKEN is not set)");
        return false;
    }
    if (v == NULL || len < 7 || strncasecmp(v, "Bearer ", 7) != 0) {
        answer_error(req, OG_E_UNAUTHORIZED, "missing bearer token");
        return false;
    }
    /* Compare digests so neither the content nor the length of the admin token leaks
     * through timing. */
    unsigned char want[SHA256_DIGEST_LENGTH], got[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)admin_token, strlen(admin_token), want);
    SHA256((const unsigned char *)v + 7, len - 7, got);
    if (CRYPTO_memcmp(want, got, sizeof(want)) != 0) {
        answer_error(req, OG_E_UNAUTHORIZED, "invalid admin token");
        return false;
    }
    return true;
}

/* ---- last_used_at batching -------------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h);

static void touch_done(og_db_op_t *op, og_db_status_t st)
{
    og_auth_t *auth = op->arg;
    if (st == OG_DB_ERROR)
        og_log(auth->log, OG_LOG_WARN, "last_used_at update failed", "\"error\":\"%s\"", op->error);
    og_db_op_clear(op);
    auth->touch_inflight = false;
    if (auth->closing)
        uv_close((uv_handle_t *)&auth->touch_timer, on_timer_closed);
}

/* Writes the last-use times gathered, unless none, one is in flight, or no connection is up: then
 * they wait for a later second (a write queued meanwhile would wait OMNIGATE_DB_TIMEOUT_MS for a
 * connection, and a worker's exit with it). */
static void touch_flush(og_auth_t *auth)
{
    if (auth->ntouch == 0 || auth->touch_inflight || auth->db == NULL || !og_db_ready(auth->db))
        return;
    char *p = auth->touch_param;
    *p++ = '{';
    for (int i = 0; i < auth->ntouch; i++) {
        if (i > 0)
            *p++ = ',';
        size_t n = strlen(auth->touch_ids[i]);
        memcpy(p, auth->touch_ids[i], n);
        p += n;
    }
    *p++ = '}';
    *p = '\0';
    auth->ntouch = 0;
    memset(&auth->touch_op, 0, sizeof(auth->touch_op));
    auth->touch_op.nstmts = 1;
    og_q_tokens_touch(&auth->touch_op.stmts[0], &(og_q_tokens_touch_t){.ids = auth->touch_param});
    auth->touch_op.write = true;
    auth->touch_op.done = touch_done;
    auth->touch_op.arg = auth;
    auth->touch_inflight = true;
    og_db_submit(auth->db, &auth->touch_op);
}

static void on_touch_timer(uv_timer_t *t)
{
    touch_flush(t->data);
}

bool og_auth_admin_tenant(og_http_req_t *req, const og_route_match_t *m, const char *admin_token, char id[37])
{
    if (!og_auth_admin(req, admin_token))
        return false;
    if (!og_route_param(m, "id", id, 37) || !og_store_uuid_valid(id)) {
        og_api_error(req, OG_E_NOT_FOUND, NULL, "no such tenant");
        return false;
    }
    return true;
}

void og_auth_set_rate_limit(og_auth_t *auth, og_rl_t *rl, uint64_t *refused)
{
    auth->rl = rl;
    auth->refused_requests = refused;
}

og_auth_t *og_auth_new(uv_loop_t *loop, og_db_t *db, og_log_t *log, const char *secret, int ttl_ms)
{
    og_auth_t *auth = calloc(1, sizeof(*auth));
    if (auth == NULL)
        return NULL;
    auth->secret = strdup(secret ? secret : "");
    if (auth->secret == NULL) {
        free(auth);
        return NULL;
    }
    /* Without a usable key every sealed credential stays sealed: its channel fails
     * not_configured, which is what a wrong OMNIGATE_SECRET does too. */
    og_settings_key(&auth->seal_key, secret);
    /* Not ready (OpenSSL failed): every hash is "" and matches no token, as og_token_hash. */
    og_hmac_key_init(&auth->token_key, OG_HMAC_SHA256, auth->secret, strlen(auth->secret));
    auth->loop = loop;
    auth->db = db;
    auth->log = log;
    auth->ttl_ms = ttl_ms > 0 ? ttl_ms : 1000;
    uv_timer_init(loop, &auth->touch_timer);
    auth->touch_timer.data = auth;
    uv_timer_start(&auth->touch_timer, on_touch_timer, 1000, 1000);
    uv_unref((uv_handle_t *)&auth->touch_timer);
    return auth;
}

static void on_timer_closed(uv_handle_t *h)
{
    og_auth_t *auth = h->data;
    for (int i = 0; i < OG_AUTH_CACHE_SLOTS; i++)
        slot_clear(&auth->slots[i]);
    void (*cb)(void *) = auth->closed;
    void *arg = auth->closed_arg;
    OPENSSL_cleanse(auth->secret, strlen(auth->secret));
    og_seal_key_clear(&auth->seal_key);
    og_hmac_key_clear(&auth->token_key);
    free(auth->secret);
    free(auth);
    if (cb != NULL)
        cb(arg);
}

void og_auth_close(og_auth_t *auth, void (*closed)(void *arg), void *arg)
{
    auth->closing = true;
    auth->closed = closed;
    auth->closed_arg = arg;
    /* The last batch of last_used_at goes out first; the caller closes the pool after us. With
     * no connection up it is dropped: a token's last use is not worth a drain that waits for the
     * database to come back. */
    touch_flush(auth);
    if (!auth->touch_inflight && auth->ntouch > 0 && auth->db != NULL)
        og_log(auth->log, OG_LOG_WARN, "tokens' last use not written: database unreachable", "\"tokens\":%d",
               auth->ntouch);
    if (!auth->touch_inflight)
        uv_close((uv_handle_t *)&auth->touch_timer, on_timer_closed);
}
