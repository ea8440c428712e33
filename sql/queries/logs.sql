-- Log pages for GET /api/logs/{omni,sms,otp} (src/product/logs_api.c, API.md §7).
--
-- The three take the same nine parameters, each filter NULL when the request does not ask for
-- it; since and until are RFC 3339, the cursor is the last reference of the previous page. A
-- page is one range scan of the primary key (tenant_id, reference), newest first, and each
-- row is the reference and the item as JSON text, built by the server.

-- name: logs_omni
-- One page of unified sends, each with its attempts in order.
-- $1 = tenant id
-- $2 = to (E.164), or NULL
-- $3 = status, or NULL
-- $4 = channel some attempt used, or NULL
-- $5 = reference, or NULL
-- $6 = since: created at or after, or NULL
-- $7 = until: created before, or NULL
-- $8 = cursor: references below it, or NULL
-- $9 = limit
-- Returns reference, item JSON text.
SELECT m.reference, json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel,
        'fallbackOn', m.fallback_on, 'fallbackAfterSeconds', m.fallback_after_s,
        'attempts', coalesce((
            -- An accepted attempt has its provider's id and its delivery (API.md §10); a
            -- failed one its error, and null delivery fields.
            SELECT json_agg(CASE WHEN a.status = 'sent' THEN json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'providerMessageId', a.provider_message_id, 'fallbackReason', a.fallback_reason,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', a.delivery_status,
                    'deliveredAt',
                        to_char(a.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'readAt', to_char(a.read_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryError', CASE WHEN a.delivery_error IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.delivery_error,
                            'providerCode', a.delivery_provider_code, 'message', a.delivery_message)) END,
                    'statusHistory', coalesce((
                        SELECT json_agg(json_strip_nulls(json_build_object('status', d.status,
                                'at', to_char(d.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                'providerCode', d.provider_code))
                            ORDER BY d.at, og_status_rank(d.status))
                        FROM delivery_statuses d
                        WHERE d.channel = a.channel AND d.provider_message_id = a.provider_message_id),
                        '[]'::json))
                ELSE json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'fallbackReason', a.fallback_reason,
                    'error', CASE WHEN a.error_code IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.error_code,
                            'message', a.error_message, 'providerCode', a.provider_code,
                            'httpStatus', a.http_status)) END,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', NULL, 'deliveredAt', NULL, 'readAt', NULL,
                    'deliveryError', NULL, 'statusHistory', '[]'::json) END
                ORDER BY a.seq)
            FROM attempts a
            WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
FROM messages m
WHERE m.tenant_id = $1
    AND ($2::text IS NULL OR m.to_number = $2)
    AND ($3::text IS NULL OR m.status = $3)
    AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM attempts a
        WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.channel = $4))
    AND ($5::text IS NULL OR m.reference = $5)
    AND ($6::timestamptz IS NULL OR m.created_at >= $6)
    AND ($7::timestamptz IS NULL OR m.created_at < $7)
    AND ($8::text IS NULL OR m.reference < $8)
ORDER BY m.reference DESC
LIMIT $9;

-- name: logs_sms
-- One page of SMS records, whichever route sent them.
-- $1 = tenant id
-- $2 = to (E.164), or NULL
-- $3 = status or delivery status (delivered, read, undelivered, failed), or NULL
-- $4 = source ('sms', 'omni' or 'otp'), or NULL
-- $5 = reference (the record's own or its source's), or NULL
-- $6 = since: created at or after, or NULL
-- $7 = until: created before, or NULL
-- $8 = cursor: references below it, or NULL
-- $9 = limit
-- Returns reference, item JSON text.
SELECT s.reference, json_build_object(
        'reference', s.reference, 'source', s.source, 'to', s.to_number, 'sender', s.sender,
        'text', s.body, 'segments', s.segments, 'encoding', s.encoding, 'status', s.status,
        'providerMessageId', s.provider_message_id, 'error', s.error,
        'deliveryStatus', s.delivery_status,
        'deliveredAt', to_char(s.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
FROM sms_records s
WHERE s.tenant_id = $1
    AND ($2::text IS NULL OR s.to_number = $2)
    AND ($3::text IS NULL OR s.status = $3 OR s.delivery_status = $3)
    AND ($4::text IS NULL OR s.source = $4)
    AND ($5::text IS NULL OR s.reference = $5 OR s.source_reference = $5)
    AND ($6::timestamptz IS NULL OR s.created_at >= $6)
    AND ($7::timestamptz IS NULL OR s.created_at < $7)
    AND ($8::text IS NULL OR s.reference < $8)
ORDER BY s.reference DESC
LIMIT $9;

-- name: logs_otp
-- One page of OTP requests, each with its history of events in order.
-- $1 = tenant id
-- $2 = to (E.164), or NULL
-- $3 = status, or NULL
-- $4 = source, or NULL: every OTP goes by SMS, so only 'sms' matches (the route passes NULL)
-- $5 = reference, or NULL
-- $6 = since: created at or after, or NULL
-- $7 = until: created before, or NULL
-- $8 = cursor: references below it, or NULL
-- $9 = limit
-- Returns reference, item JSON text.
SELECT o.reference, json_build_object(
        'reference', o.reference, 'to', o.to_number, 'status', o.status, 'length', o.length,
        'expiresAt', to_char(o.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'createdAt', to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'verifiedAt', to_char(o.verified_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'failedAttempts', o.failed_attempts,
        'history', coalesce((
            SELECT json_agg(json_build_object(
                    'event', e.event,
                    'at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                ORDER BY e.id)
            FROM otp_events e
            WHERE e.tenant_id = o.tenant_id AND e.otp_reference = o.reference), '[]'::json))::text
FROM otp_requests o
WHERE o.tenant_id = $1
    AND ($2::text IS NULL OR o.to_number = $2)
    AND ($3::text IS NULL OR o.status = $3)
    AND ($4::text IS NULL OR $4 = 'sms')
    AND ($5::text IS NULL OR o.reference = $5)
    AND ($6::timestamptz IS NULL OR o.created_at >= $6)
    AND ($7::timestamptz IS NULL OR o.created_at < $7)
    AND ($8::text IS NULL OR o.reference < $8)
ORDER BY o.reference DESC
LIMIT $9;
