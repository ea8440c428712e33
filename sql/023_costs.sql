-- What accepted attempts cost (API.md §22; docs/costs.md, src/product/costs/): the cost an
-- attempt gets when its provider accepts it, priced by the gateway (og_cost_price: the rate
-- cards of sql/022) and written with the attempt by the completion writes, never rewritten when a
-- card changes. Millionths of the currency's unit, summed as integers; NULL for a failed attempt
-- or one no rate applies to.
--
-- This step covers the sends the gateway completes in the request: the unified send's attempts
-- (msg_complete, og_msg_complete_many), POST /api/sms/send and the OTP's SMS (sms_records).

ALTER TABLE attempts ADD COLUMN cost_micros bigint, ADD COLUMN cost_currency text;
ALTER TABLE sms_records ADD COLUMN cost_micros bigint, ADD COLUMN cost_currency text;

-- A price in millionths as the API writes it: 4 to 6 places ("0.0450", "0.04512", "0.045125"),
-- the rule of og_price_format (src/product/costs/rates.c), which writes a send's answer
-- (test_costs.py compares the two).
CREATE FUNCTION og_price_text(micros bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN micros % 10 <> 0 THEN to_char(micros / 1000000.0, 'FM999999999990.000000')
                WHEN micros % 100 <> 0 THEN to_char(micros / 1000000.0, 'FM999999999990.00000')
                ELSE to_char(micros / 1000000.0, 'FM999999999990.0000') END
$$;

-- An attempt's `cost` (API.md §22): {"amount", "currency"}, or null.
CREATE FUNCTION og_cost_json(micros bigint, currency text) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN micros IS NOT NULL THEN json_build_object('amount', og_price_text(micros), 'currency', currency) END
$$;

-- The set form of msg_complete (sql/016) with each accepted attempt's cost (its JSON's
-- cost_micros and currency).
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    WITH x AS (
        SELECT * FROM unnest(p_tenant, p_reference, p_status, p_winner, p_attempts, p_goes_on)
            AS x(tenant_id, reference, status, winner, attempts, goes_on)),
    a AS (
        INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
            error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
            delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
            delivery_message, content, cost_micros, cost_currency)
        SELECT x.tenant_id, x.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0),
            CASE WHEN y.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code, d.error_message, y.content,
            CASE WHEN y.status = 'sent' THEN y.cost_micros END, CASE WHEN y.status = 'sent' THEN y.currency END
        FROM x CROSS JOIN LATERAL json_to_recordset(x.attempts) AS y(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint,
            content text, cost_micros bigint, currency text)
        LEFT JOIN LATERAL og_delivery_of(y.channel, y.provider_message_id) AS d
            ON y.status = 'sent'
        RETURNING tenant_id, reference, status, delivery_status),
    -- The rule of msg_complete (og_message_delivery, sql/005), per message of the batch.
    s AS (
        SELECT tenant_id, reference, bool_or(delivery_status = 'read') AS is_read,
            bool_or(delivery_status = 'delivered') AS is_delivered,
            bool_and(delivery_status IN ('failed', 'undelivered')) AS all_failed
        FROM a WHERE status = 'sent'
        GROUP BY tenant_id, reference)
    UPDATE messages m
    SET status = CASE WHEN x.status <> 'sent' THEN x.status
                      WHEN s.is_read THEN 'read'
                      WHEN s.is_delivered THEN 'delivered'
                      WHEN s.all_failed THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                      ELSE 'sent' END,
        winning_channel = x.winner, completed_at = now()
    FROM x LEFT JOIN s ON s.tenant_id = x.tenant_id AND s.reference = x.reference
    WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown');
END
$$;

-- The unified log item (sql/018) with each attempt's cost (null unless accepted).
CREATE OR REPLACE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel,
        'fallbackOn', m.fallback_on, 'fallbackAfterSeconds', m.fallback_after_s,
        'priority', m.priority,
        'dueAt', to_char(m.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'validUntil', to_char(m.valid_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'template', CASE WHEN m.template IS NOT NULL AND NOT (m.template ->> 'wrapped')::boolean
                         THEN json_build_object('name', m.template ->> 'name',
                                                'language', m.template ->> 'language') END,
        'attempts', coalesce((
            -- An accepted attempt has its provider's id and its delivery (API.md §10); a
            -- failed one its error, and null delivery fields.
            SELECT json_agg(CASE WHEN a.status = 'sent' THEN json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'content', coalesce(a.content, 'text'), 'throttles', a.throttles,
                    'providerMessageId', a.provider_message_id, 'fallbackReason', a.fallback_reason,
                    'cost', og_cost_json(a.cost_micros, a.cost_currency),
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
                    'content', coalesce(a.content, 'text'), 'throttles', a.throttles,
                    'fallbackReason', a.fallback_reason, 'cost', NULL,
                    'error', CASE WHEN a.error_code IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.error_code,
                            'message', a.error_message, 'providerCode', a.provider_code,
                            'httpStatus', a.http_status)) END,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', NULL, 'deliveredAt', NULL, 'readAt', NULL,
                    'deliveryError', NULL, 'statusHistory', '[]'::json) END
                ORDER BY a.seq)
            -- A queued message's attempt in flight has no row yet (it is written with its
            -- outcome): its lease stands for it, 'pending' since the lease began; a retry's row
            -- of its last try gives way to it.
            FROM (SELECT a.seq, a.channel, a.status, a.latency_ms, a.content, a.throttles, a.provider_message_id,
                      a.fallback_reason, a.attempted_at, a.delivery_status, a.delivered_at, a.read_at,
                      a.delivery_error, a.delivery_provider_code, a.delivery_message, a.error_code,
                      a.error_message, a.provider_code, a.http_status, a.cost_micros, a.cost_currency
                  FROM attempts a
                  WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference
                      AND NOT (m.status = 'queued' AND EXISTS (
                          SELECT 1 FROM queue_entries q
                          WHERE q.tenant_id = a.tenant_id AND q.reference = a.reference AND q.ch = a.seq
                              AND q.lease_owner IS NOT NULL))
                  UNION ALL
                  SELECT q.ch, m.channels[q.ch + 1], 'pending', 0,
                      CASE WHEN m.channels[q.ch + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END,
                      q.throttles, NULL, NULL, q.leased_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                      NULL, NULL
                  FROM queue_entries q
                  WHERE m.status = 'queued' AND q.tenant_id = m.tenant_id AND q.reference = m.reference
                      AND q.lease_owner IS NOT NULL) a), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- The SMS log item (sql/009) with the SMS's cost.
CREATE OR REPLACE VIEW og_log_sms AS
SELECT s.tenant_id, s.reference, s.to_number, s.status, s.delivery_status, s.source, json_build_object(
    'reference', s.reference, 'source', s.source, 'to', s.to_number, 'sender', s.sender,
    'text', s.body, 'segments', s.segments, 'encoding', s.encoding, 'status', s.status,
    'providerMessageId', s.provider_message_id, 'error', s.error,
    'cost', og_cost_json(s.cost_micros, s.cost_currency), 'deliveryStatus', s.delivery_status,
    'deliveredAt', to_char(s.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) AS item
FROM sms_records s;
