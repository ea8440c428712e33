-- Delivery-based fallback (API.md §11; src/product/steps/fallback.c runs its steps): the state a step
-- decides on, an attempt recorded 'pending' before its provider call and completed after it,
-- and the message's status once a step has moved the chain on.

-- name: fallback_schedule
-- Schedules the chain's next step after an accepted attempt (og_fallback_schedule).
-- $1 tenant_id
-- $2 reference
-- Returns true when the step is due now.
-- columns: due_now
SELECT og_fallback_schedule($1::uuid, $2) AS due_now;

-- name: fallback_load
-- What a fallback step decides on.
-- $1 tenant_id
-- $2 reference
-- Returns to, text, the channels (comma-separated), fallbackOn, the WhatsApp number, the SMS
-- sender, the tenant's settings, the last attempt's seq, whether the wanted status is reached,
-- the delivery status of the last accepted attempt, the seq of a 'pending' attempt (-1), and
-- Meta's template object of a template send ('' for a text send) and its category ('' when
-- unknown).
-- columns: to, text, channels, fallback_on, wa_from, sender, settings, last_seq, reached,
--     last_status, pending_seq, template, category
SELECT m.to_number AS to, m.body AS text, array_to_string(m.channels, ',') AS channels,
    m.fallback_on, coalesce(m.whatsapp_from, '') AS wa_from, coalesce(m.sms_sender, '') AS sender,
    t.settings::text,
    coalesce((SELECT max(a.seq) FROM attempts a
              WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference), -1) AS last_seq,
    EXISTS (SELECT 1 FROM attempts a
            WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference
                AND og_status_rank(a.delivery_status) >= og_status_rank(m.fallback_on)) AS reached,
    coalesce((SELECT a.delivery_status FROM attempts a
              WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'sent'
              ORDER BY a.seq DESC LIMIT 1), '') AS last_status,
    coalesce((SELECT a.seq FROM attempts a
              WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'pending'
              LIMIT 1), -1) AS pending_seq,
    coalesce((m.template -> 'meta')::text, '') AS template,
    coalesce(m.template ->> 'category', '') AS category
FROM messages m
JOIN tenants t ON t.id = m.tenant_id
WHERE m.tenant_id = $1 AND m.reference = $2;

-- name: fallback_begin
-- Records the attempt a step is about to make, before the provider is called: a step claimed
-- again after its holder died finds it 'pending' and never calls the provider a second time.
-- $1 tenant_id
-- $2 reference
-- $3 seq = seq (the channel's index in the message's channels)
-- $4 channel
-- $5 reason = why: 'status_failed', 'status_undelivered' or 'no_status_in_time'
-- $6 content = 'template' for Meta's template message, NULL for a free text
INSERT INTO attempts (tenant_id, reference, seq, channel, status, latency_ms, attempted_at,
    fallback_reason, content)
VALUES ($1, $2, $3::smallint, $4, 'pending', 0, now(), $5, $6);

-- name: fallback_end
-- Completes a step's attempt with its provider's answer, adopting statuses that came first,
-- and makes an accepted one the message's winning channel, moving the win in the usage
-- (og_fallback_end, sql/029).
-- $1 tenant_id
-- $2 reference
-- $3 seq
-- $4 status = 'sent' or 'failed'
-- $5 provider_id = provider message id, or NULL
-- $6 error_code = error code, or NULL
-- $7 error_message = error message, or NULL
-- $8 provider_code = provider code, or NULL
-- $9 http_status = HTTP status, or NULL
-- $10 latency_ms = latency in ms
-- $11 cost_micros = what it costs if accepted (sql/023), or NULL
-- $12 currency = the cost's currency, or NULL
-- $13 sms_equiv_micros = for a WhatsApp attempt, what its text would cost by SMS, or NULL
-- Returns nothing.
SELECT FROM og_fallback_end($1::uuid, $2::text, $3::smallint, $4::text, $5::text, $6::text, $7::text, $8::text,
    $9::integer, $10::integer, $11::bigint, $12::text, $13::bigint);

-- name: fallback_abandon
-- A step found the attempt of an earlier holder 'pending': that holder may have reached the
-- provider, so nothing is sent again; the attempt and the message become 'unknown'.
-- $1 tenant_id
-- $2 reference
-- $3 seq
WITH a AS (
    UPDATE attempts
    SET status = 'unknown', error_code = 'outcome_unknown',
        error_message = 'the instance making this attempt stopped before recording its outcome'
    WHERE tenant_id = $1 AND reference = $2 AND seq = $3::smallint)
UPDATE messages
SET status = 'unknown'
WHERE tenant_id = $1 AND reference = $2;

-- name: fallback_settle
-- The message's status after a step moved its chain on (og_message_status).
-- $1 tenant_id
-- $2 reference
UPDATE messages
SET status = og_message_status($1, $2)
WHERE tenant_id = $1 AND reference = $2 AND status IN ('sent', 'delivered', 'read', 'undelivered');
