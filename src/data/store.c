/*
 * The prepared statements of the request path. See include/data/omnigate/store.h.
 */
#include "omnigate/store.h"

#include <ctype.h>
#include <string.h>

const og_db_stmt_t og_store_stmts[OG_Q__COUNT] = {
    [OG_Q_AUTH_LOOKUP] =
        {"auth_lookup",
         "SELECT k.id, k.tenant_id, array_to_string(k.scopes, ','), k.revoked_at IS NOT NULL, "
         "t.unified_api_enabled, t.settings::text "
         "FROM api_tokens k JOIN tenants t ON t.id = k.tenant_id WHERE k.token_hash = $1",
         1},
    [OG_Q_TOKENS_TOUCH] = {"tokens_touch",
                           "UPDATE api_tokens SET last_used_at = now() WHERE id = ANY($1::uuid[])", 1},
    [OG_Q_TENANT_INSERT] =
        {"tenant_insert",
         "INSERT INTO tenants (name, unified_api_enabled, settings) VALUES ($1, $2, $3::jsonb) "
         "RETURNING " OG_SQL_TENANT_COLS,
         3},
    [OG_Q_TENANT_GET] = {"tenant_get", "SELECT " OG_SQL_TENANT_COLS " FROM tenants WHERE id = $1", 1},
    [OG_Q_TENANT_UPDATE] = {"tenant_update",
                            "UPDATE tenants SET name = coalesce($2, name), "
                            "unified_api_enabled = coalesce($3::boolean, unified_api_enabled), "
                            "settings = coalesce($4::jsonb, settings), updated_at = now() "
                            "WHERE id = $1 AND ($5::text IS NULL OR xmin::text = $5::text) "
                            "RETURNING " OG_SQL_TENANT_COLS,
                            5},
    [OG_Q_TOKEN_INSERT] = {"token_insert",
                           "INSERT INTO api_tokens (tenant_id, name, prefix, token_hash, scopes) "
                           "SELECT id, $2, $3, $4, string_to_array($5, ',') FROM tenants "
                           "WHERE id = $1 AND unified_api_enabled RETURNING " OG_SQL_TOKEN_COLS,
                           5},
    [OG_Q_TENANT_UNIFIED] = {"tenant_unified", "SELECT unified_api_enabled FROM tenants WHERE id = $1", 1},
    [OG_Q_TOKEN_LIST] = {"token_list",
                         "SELECT " OG_SQL_TOKEN_COLS
                         " FROM api_tokens WHERE tenant_id = $1 ORDER BY created_at, id",
                         1},
    [OG_Q_TOKEN_REVOKE] = {"token_revoke",
                           "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) "
                           "WHERE tenant_id = $1 AND id = $2 RETURNING " OG_SQL_TOKEN_COLS,
                           2},
    [OG_Q_LOGS_OMNI] =
        {"logs_omni",
         "SELECT m.reference, json_build_object('reference', m.reference, 'to', m.to_number, 'text', m.body, "
         "'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel, "
         "'attempts', coalesce((SELECT json_agg(json_strip_nulls(json_build_object('channel', a.channel, "
         "'status', a.status, 'latencyMs', a.latency_ms, 'providerMessageId', a.provider_message_id, "
         "'error', CASE WHEN a.error_code IS NULL THEN NULL ELSE json_build_object('code', a.error_code, "
         "'message', a.error_message, 'providerCode', a.provider_code, 'httpStatus', a.http_status) END, "
         "'attemptedAt', " OG_SQL_TS(
             "a.attempted_at") ")) ORDER BY a.seq) FROM attempts a "
                               "WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference), '[]'::json), "
                               "'skipped', m.skipped, 'createdAt', " OG_SQL_TS(
                                   "m.created_at") ", 'completedAt', " OG_SQL_TS("m.completed_at") ")::text "
                                                                                                   "FROM "
                                                                                                   "messages "
                                                                                                   "m WHERE "
                                                                                                   "m.tenant_"
                                                                                                   "id = $1 "
                                                                                                   "AND "
                                                                                                   "($2::"
                                                                                                   "text IS "
                                                                                                   "NULL OR "
                                                                                                   "m.to_"
                                                                                                   "number = "
                                                                                                   "$2) "
                                                                                                   "AND "
                                                                                                   "($3::"
                                                                                                   "text IS "
                                                                                                   "NULL OR "
                                                                                                   "m.status "
                                                                                                   "= $3) "
                                                                                                   "AND "
                                                                                                   "($4::"
                                                                                                   "text IS "
                                                                                                   "NULL OR "
                                                                                                   "EXISTS "
                                                                                                   "(SELECT "
                                                                                                   "1 FROM "
                                                                                                   "attempts "
                                                                                                   "a WHERE "
                                                                                                   "a.tenant_"
                                                                                                   "id = "
                                                                                                   "m.tenant_"
                                                                                                   "id "
                                                                                                   "AND "
                                                                                                   "a."
                                                                                                   "reference"
                                                                                                   " = "
                                                                                                   "m."
                                                                                                   "reference"
                                                                                                   " AND "
                                                                                                   "a."
                                                                                                   "channel "
                                                                                                   "= $4)) "
                                                                                                   "AND "
                                                                                                   "($5::"
                                                                                                   "text IS "
                                                                                                   "NULL OR "
                                                                                                   "m."
                                                                                                   "reference"
                                                                                                   " = $5) "
                                                                                                   "AND "
                                                                                                   "($6::"
                                                                                                   "timestamp"
                                                                                                   "tz IS "
                                                                                                   "NULL OR "
                                                                                                   "m."
                                                                                                   "created_"
                                                                                                   "at >= "
                                                                                                   "$6) "
                                                                                                   "AND "
                                                                                                   "($7::"
                                                                                                   "timestamp"
                                                                                                   "tz IS "
                                                                                                   "NULL OR "
                                                                                                   "m."
                                                                                                   "created_"
                                                                                                   "at < $7) "
                                                                                                   "AND "
                                                                                                   "($8::"
                                                                                                   "text IS "
                                                                                                   "NULL OR "
                                                                                                   "m."
                                                                                                   "reference"
                                                                                                   " < $8) "
                                                                                                   "ORDER BY "
                                                                                                   "m."
                                                                                                   "reference"
                                                                                                   " DESC "
                                                                                                   "LIMIT $9",
         9},
    [OG_Q_LOGS_SMS] =
        {"logs_sms",
         "SELECT s.reference, json_build_object('reference', s.reference, 'source', s.source, 'to', "
         "s.to_number, "
         "'sender', s.sender, 'text', s.body, 'segments', s.segments, 'encoding', s.encoding, 'status', "
         "s.status, "
         "'providerMessageId', s.provider_message_id, 'error', s.error, 'createdAt', " OG_SQL_TS(
             "s.created_at") ")::text "
                             "FROM sms_records s WHERE s.tenant_id = $1 AND ($2::text IS NULL OR s.to_number "
                             "= $2) "
                             "AND ($3::text IS NULL OR s.status = $3) AND ($4::text IS NULL OR s.source = "
                             "$4) "
                             "AND ($5::text IS NULL OR s.reference = $5 OR s.source_reference = $5) "
                             "AND ($6::timestamptz IS NULL OR s.created_at >= $6) "
                             "AND ($7::timestamptz IS NULL OR s.created_at < $7) "
                             "AND ($8::text IS NULL OR s.reference < $8) ORDER BY s.reference DESC LIMIT $9",
         9},
    [OG_Q_LOGS_OTP] =
        {"logs_otp",
         "SELECT o.reference, json_build_object('reference', o.reference, 'to', o.to_number, 'status', "
         "o.status, "
         "'length', o.length, 'expiresAt', " OG_SQL_TS("o.expires_at") ", 'createdAt', " OG_SQL_TS(
             "o.created_at") ", 'verifiedAt', " OG_SQL_TS("o.verified_at") ", 'failedAttempts', "
                                                                           "o.failed_attempts, "
                                                                           "'history', coalesce((SELECT "
                                                                           "json_agg(json_build_object('"
                                                                           "event', "
                                                                           "e.event, 'at', " OG_SQL_TS(
                                                                               "e.at") ") ORDER BY e.id) "
                                                                                       "FROM otp_events e "
                                                                                       "WHERE "
                                                                                       "e.tenant_id = "
                                                                                       "o.tenant_id "
                                                                                       "AND e.otp_reference "
                                                                                       "= "
                                                                                       "o.reference), "
                                                                                       "'[]'::json))::text "
                                                                                       "FROM otp_requests o "
                                                                                       "WHERE o.tenant_id = "
                                                                                       "$1 AND ($2::text IS "
                                                                                       "NULL OR o.to_number "
                                                                                       "= $2) "
                                                                                       "AND ($3::text IS "
                                                                                       "NULL OR o.status = "
                                                                                       "$3) AND ($4::text IS "
                                                                                       "NULL OR $4 = 'sms') "
                                                                                       "AND ($5::text IS "
                                                                                       "NULL OR o.reference "
                                                                                       "= $5) AND "
                                                                                       "($6::timestamptz IS "
                                                                                       "NULL OR o.created_at "
                                                                                       ">= $6) "
                                                                                       "AND ($7::timestamptz "
                                                                                       "IS NULL OR "
                                                                                       "o.created_at < $7) "
                                                                                       "AND ($8::text IS "
                                                                                       "NULL OR o.reference "
                                                                                       "< $8) "
                                                                                       "ORDER BY o.reference "
                                                                                       "DESC LIMIT $9",
         9},
    [OG_Q_MSG_INSERT] =
        {"msg_insert",
         "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped) "
         "VALUES ($1, $2, $3, $4, $5, $6::text[], $7::jsonb) RETURNING reference",
         7},
    /* A key older than 24 h is taken over as if new (API.md §6). */
    [OG_Q_IDEM_CLAIM] =
        {"idem_claim",
         "INSERT INTO idempotency_keys (tenant_id, key, route, request_hash) VALUES ($1, $2, $3, $4) "
         "ON CONFLICT (tenant_id, key) DO UPDATE SET route = EXCLUDED.route, "
         "request_hash = EXCLUDED.request_hash, reference = NULL, response_status = NULL, "
         "response_body = NULL, created_at = now(), completed_at = NULL "
         "WHERE idempotency_keys.created_at < now() - interval '24 hours' RETURNING 1",
         4},
    [OG_Q_IDEM_GET] =
        {"idem_get",
         "SELECT route, request_hash, response_status, response_body, reference FROM idempotency_keys "
         "WHERE tenant_id = $1 AND key = $2",
         2},
    [OG_Q_MSG_COMPLETE] =
        {"msg_complete",
         "WITH a AS (INSERT INTO attempts (tenant_id, reference, seq, channel, status, "
         "provider_message_id, error_code, error_message, provider_code, http_status, latency_ms, "
         "attempted_at) SELECT $1, $2, x.seq, x.channel, x.status, x.provider_message_id, "
         "x.error_code, x.error_message, x.provider_code, x.http_status, x.latency_ms, "
         "to_timestamp(x.attempted_at_ms / 1000.0) FROM json_to_recordset($5::json) AS x(seq "
         "smallint, channel text, status text, provider_message_id text, error_code text, "
         "error_message text, provider_code text, http_status integer, latency_ms integer, "
         "attempted_at_ms bigint)) "
         "UPDATE messages SET status = $3, winning_channel = $4, completed_at = now() "
         "WHERE tenant_id = $1 AND reference = $2",
         5},
    [OG_Q_SMS_RECORD] =
        {"sms_record",
         "INSERT INTO sms_records (tenant_id, reference, source, source_reference, to_number, sender, "
         "body, segments, encoding, status, provider_message_id, error) "
         "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)",
         12},
    [OG_Q_IDEM_COMPLETE] =
        {"idem_complete",
         "UPDATE idempotency_keys SET response_status = $3, response_body = $4, completed_at = now() "
         "WHERE tenant_id = $1 AND key = $2",
         4},
    [OG_Q_MSG_MARK_UNKNOWN] =
        {"msg_mark_unknown",
         "UPDATE messages SET status = 'unknown', completed_at = now() WHERE status = 'pending' "
         "AND created_at > now() - interval '7 days' "
         "AND created_at < now() - $1::bigint * interval '1 millisecond'",
         1},
    [OG_Q_SMS_PENDING] =
        {"sms_pending",
         "INSERT INTO sms_records (tenant_id, reference, source, to_number, sender, body, segments, "
         "encoding, status) VALUES ($1, $2, 'sms', $3, $4, $5, $6, $7, 'pending')",
         7},
    [OG_Q_SMS_FINISH] = {"sms_finish",
                         "UPDATE sms_records SET status = $3, provider_message_id = $4, error = $5::jsonb "
                         "WHERE tenant_id = $1 AND reference = $2",
                         5},
    [OG_Q_OTP_BEGIN] = {"otp_begin",
                        "SELECT outcome, retry_after, " OG_SQL_TS(
                            "expires_at") " FROM omnigate_otp_begin($1, $2, $3, $4, $5, $6)",
                        6},
    [OG_Q_OTP_SENT] =
        {"otp_sent",
         "WITH u AS (UPDATE otp_requests SET status = CASE WHEN $3::boolean THEN status ELSE 'failed' END "
         "WHERE tenant_id = $1 AND reference = $2 RETURNING tenant_id, reference) "
         "INSERT INTO otp_events (tenant_id, otp_reference, event) SELECT tenant_id, reference, "
         "CASE WHEN $3::boolean THEN 'sent' ELSE 'send_failed' END FROM u",
         3},
    [OG_Q_OTP_FIND] =
        {"otp_find",
         "SELECT reference, code_hash, status, expires_at <= now(), failed_attempts FROM otp_requests "
         "WHERE tenant_id = $1 AND (($2::text IS NOT NULL AND reference = $2) "
         "OR ($2::text IS NULL AND to_number = $3)) ORDER BY created_at DESC, reference DESC LIMIT 1",
         3},
    [OG_Q_OTP_VERIFY_OK] =
        {"otp_verify_ok",
         "WITH u AS (UPDATE otp_requests SET status = 'verified', verified_at = now() "
         "WHERE tenant_id = $1 AND reference = $2 AND status = 'pending' AND expires_at > now() "
         "AND failed_attempts < 5 RETURNING tenant_id, reference) "
         "INSERT INTO otp_events (tenant_id, otp_reference, event) "
         "SELECT tenant_id, reference, 'verify_success' FROM u RETURNING 1",
         2},
    /* One INSERT writes both events in order (data-modifying CTEs run in no set order). */
    [OG_Q_OTP_VERIFY_BAD] =
        {"otp_verify_bad",
         "WITH u AS (UPDATE otp_requests SET failed_attempts = failed_attempts + 1, "
         "status = CASE WHEN failed_attempts + 1 >= 5 THEN 'locked' ELSE status END "
         "WHERE tenant_id = $1 AND reference = $2 AND status = 'pending' AND expires_at > now() "
         "RETURNING tenant_id, reference, failed_attempts, status), "
         "e AS (INSERT INTO otp_events (tenant_id, otp_reference, event) "
         "SELECT u.tenant_id, u.reference, v.event FROM u, "
         "(VALUES (1, 'verify_failed'), (2, 'locked')) AS v(n, event) "
         "WHERE v.n = 1 OR u.status = 'locked' ORDER BY v.n) "
         "SELECT failed_attempts, status FROM u",
         2},
    [OG_Q_OTP_EXPIRE] =
        {"otp_expire",
         "WITH u AS (UPDATE otp_requests SET status = 'expired' WHERE tenant_id = $1 AND reference = $2 "
         "AND status = 'pending' AND expires_at <= now() RETURNING tenant_id, reference) "
         "INSERT INTO otp_events (tenant_id, otp_reference, event) "
         "SELECT tenant_id, reference, 'expired' FROM u",
         2},
    [OG_Q_OTP_EVENT] = {"otp_event",
                        "INSERT INTO otp_events (tenant_id, otp_reference, event) VALUES ($1, $2, $3)", 3},
    [OG_Q_PRUNE_CHECK] = {"prune_check",
                          "SELECT " OG_SQL_TS(
                              "$1::timestamptz") ", $1::timestamptz <= now() - interval '24 hours'",
                          1},
    [OG_Q_PRUNE_TENANTS] = {"prune_tenants", "SELECT id FROM tenants ORDER BY id", 0},
    [OG_Q_PRUNE_BATCH] = {"prune_batch", "SELECT omnigate_prune_batch($1, $2, $3)", 3},
    [OG_Q_PRUNE_IDEM] =
        {"prune_idem",
         "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(SELECT ctid FROM idempotency_keys "
         "WHERE created_at < now() - interval '24 hours' LIMIT $1))",
         1},
};

bool og_store_uuid_valid(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!isxdigit((unsigned char)s[i])) {
            return false;
        }
    }
    return true;
}
