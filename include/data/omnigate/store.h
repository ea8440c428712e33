/*
 * The SQL of the request path: one table of prepared statements (prepared on every pooled
 * connection by db.c, also run by the synchronous CLI) and the row shapes they return.
 * Responsible for what is asked of PostgreSQL; not for getting it there (db.c) or for
 * HTTP (handlers). Every value travels as a parameter, never spliced into SQL text.
 */
#ifndef OMNIGATE_STORE_H
#define OMNIGATE_STORE_H

#include "omnigate/db.h"

/* RFC 3339 UTC with milliseconds, as API.md §0 wants, formatted by the server. */
#define OG_SQL_TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* Column lists of the row shapes below, shared by every statement returning that shape. */
#define OG_SQL_TENANT_COLS                                                                                   \
    "id, name, unified_api_enabled, settings::text, " OG_SQL_TS("created_at") ", " OG_SQL_TS(                \
        "updated_at") ", xmin::text"
#define OG_SQL_TOKEN_COLS                                                                                    \
    "id, name, prefix, array_to_string(scopes, ','), " OG_SQL_TS("created_at") ", " OG_SQL_TS(               \
        "last_used_at") ", " OG_SQL_TS("revoked_at")

enum og_store_stmt {
    /* $1 token hash -> token id, tenant id, scopes "a,b", revoked, unified, settings */
    OG_Q_AUTH_LOOKUP,
    /* $1 uuid[] literal of token ids: last_used_at = now() */
    OG_Q_TOKENS_TOUCH,
    /* $1 name, $2 unified (bool), $3 settings json -> tenant row */
    OG_Q_TENANT_INSERT,
    /* $1 id -> tenant row */
    OG_Q_TENANT_GET,
    /* $1 id, $2 name|NULL, $3 unified|NULL, $4 settings|NULL, $5 xmin seen|NULL -> tenant row,
     * no row when the tenant is gone or changed since $5 was read */
    OG_Q_TENANT_UPDATE,
    /* $1 tenant id, $2 name, $3 prefix, $4 hash, $5 scopes "a,b" -> token row, no row when the
     * tenant is missing or locked */
    OG_Q_TOKEN_INSERT,
    /* $1 tenant id -> unified_api_enabled (no row: no such tenant) */
    OG_Q_TENANT_UNIFIED,
    /* $1 tenant id -> token rows, oldest first */
    OG_Q_TOKEN_LIST,
    /* $1 tenant id, $2 token id -> token row (revoked_at set once; repeating is harmless) */
    OG_Q_TOKEN_REVOKE,
    /* Log pages, newest first. $1 tenant, $2 to, $3 status, $4 channel (omni) / source (sms),
     * $5 reference, $6 since, $7 until, $8 cursor (last reference of the previous page),
     * $9 limit -> one row per item: reference, item JSON text */
    OG_Q_LOGS_OMNI,
    OG_Q_LOGS_SMS,
    OG_Q_LOGS_OTP,
    /* Unified send. $1 tenant, $2 reference, $3 to, $4 text, $5 mode, $6 channels "{a,b}",
     * $7 skipped json -> reference */
    OG_Q_MSG_INSERT,
    /* $1 tenant, $2 key, $3 route, $4 request hash -> one row when the key is new (or older
     * than 24 h and taken over), none when it is taken */
    OG_Q_IDEM_CLAIM,
    /* $1 tenant, $2 key -> route, request_hash, response_status, response_body, reference */
    OG_Q_IDEM_GET,
    /* $1 tenant, $2 reference, $3 status, $4 winning channel|NULL, $5 attempts json array of
     * {seq, channel, status, provider_message_id, error_code, error_message, provider_code,
     * http_status, latency_ms, attempted_at_ms} */
    OG_Q_MSG_COMPLETE,
    /* $1 tenant, $2 reference, $3 source, $4 source reference, $5 to, $6 sender, $7 body,
     * $8 segments, $9 encoding, $10 status, $11 provider message id, $12 error json */
    OG_Q_SMS_RECORD,
    /* $1 tenant, $2 key, $3 status, $4 response body */
    OG_Q_IDEM_COMPLETE,
    /* $1 older than (ms): pending messages a crash left behind -> 'unknown' */
    OG_Q_MSG_MARK_UNKNOWN,
    /* SMS send: $1 tenant, $2 reference, $3 to, $4 sender, $5 body, $6 segments, $7 encoding ->
     * the SMS record, 'pending' until the provider answers */
    OG_Q_SMS_PENDING,
    /* $1 tenant, $2 reference, $3 status, $4 provider message id, $5 error json */
    OG_Q_SMS_FINISH,
    /* $1 tenant, $2 to, $3 reference, $4 code hash, $5 length, $6 ttl seconds ->
     * outcome ('ok', 'cooldown', 'hourly'), retry_after seconds, expires_at */
    OG_Q_OTP_BEGIN,
    /* $1 tenant, $2 reference, $3 sent (bool): status failed unless sent, event sent/send_failed */
    OG_Q_OTP_SENT,
    /* $1 tenant, $2 reference|NULL, $3 to -> reference, code_hash, status, expired (bool),
     * failed_attempts of that OTP (or the newest of the number) */
    OG_Q_OTP_FIND,
    /* $1 tenant, $2 reference -> a row when this verify won (status verified, event) */
    OG_Q_OTP_VERIFY_OK,
    /* $1 tenant, $2 reference -> failed_attempts, status after counting one wrong code
     * (verify_failed event, and locked at the fifth) */
    OG_Q_OTP_VERIFY_BAD,
    /* $1 tenant, $2 reference: a pending OTP past its time becomes expired (event) */
    OG_Q_OTP_EXPIRE,
    /* $1 tenant, $2 reference, $3 event */
    OG_Q_OTP_EVENT,
    OG_Q_PRUNE_CHECK,   /* (before) -> before as RFC 3339 UTC, is it at least 24 h ago */
    OG_Q_PRUNE_TENANTS, /* () -> id of every tenant */
    OG_Q_PRUNE_BATCH,   /* (tenant, before, limit) -> rows deleted; see sql/003_retention.sql */
    OG_Q_PRUNE_IDEM,    /* (limit) -> idempotency keys past their 24 h deleted */
    OG_Q__COUNT
};

/* Columns of a tenant row and a token row. */
enum {
    OG_TENANT_ID,
    OG_TENANT_NAME,
    OG_TENANT_UNIFIED,
    OG_TENANT_SETTINGS,
    OG_TENANT_CREATED,
    OG_TENANT_UPDATED,
    OG_TENANT_XMIN
};
enum {
    OG_TOKEN_ID,
    OG_TOKEN_NAME,
    OG_TOKEN_PREFIX,
    OG_TOKEN_SCOPES,
    OG_TOKEN_CREATED,
    OG_TOKEN_LAST_USED,
    OG_TOKEN_REVOKED
};

extern const og_db_stmt_t og_store_stmts[OG_Q__COUNT];

/* True when `s` is a canonical lowercase or uppercase UUID (36 characters): ids from URLs are
 * checked before they reach a uuid parameter, so a malformed one is a 404, not an error. */
bool og_store_uuid_valid(const char *s);

#endif
