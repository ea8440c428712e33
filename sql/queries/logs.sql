-- Log pages for GET /api/logs/{omni,sms,otp} (src/product/logs_api.c, API.md §7).
--
-- The three take the same nine parameters, each filter NULL when the request does not ask for
-- it; since and until are RFC 3339, the cursor is the last reference of the previous page. A
-- page is one range scan of the primary key (tenant_id, reference), newest first, and each
-- row is the reference and the item as JSON text, built by the server (the unified and OTP
-- items by og_message_item and og_otp_item of sql/010_webhooks_out.sql, which the webhook
-- events share).

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
SELECT m.reference, i::text
FROM messages m
CROSS JOIN LATERAL og_message_item(m) AS i
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
SELECT o.reference, i::text
FROM otp_requests o
CROSS JOIN LATERAL og_otp_item(o) AS i
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
