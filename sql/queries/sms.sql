-- SMS records, one per SMS sent, whichever route sent it: POST /api/sms/send records it
-- 'pending' and finishes it once the provider answered; the unified send and the OTP send
-- record theirs in one go when done (src/product/messaging/otp.c, src/product/messaging/send.c).

-- name: sms_pending
-- Records an SMS of POST /api/sms/send before the provider is called.
-- $1 tenant_id
-- $2 reference
-- $3 to = the number (E.164)
-- $4 sender
-- $5 text
-- $6 segments
-- $7 encoding
INSERT INTO sms_records (tenant_id, reference, source, to_number, sender, body, segments,
    encoding, status)
VALUES ($1, $2, 'sms', $3, $4, $5, $6, $7, 'pending');

-- name: sms_finish
-- Finishes an SMS of POST /api/sms/send with what the provider answered, and the delivery
-- statuses the provider reported before this commit: over 'pending', or over 'unknown' when
-- a stale claim marked it so while it ran (it did send: the truth replaces the guess).
-- $1 tenant_id
-- $2 reference
-- $3 status = 'sent' or 'failed'
-- $4 provider_id = provider message id, or NULL
-- $5 error = a JSON object, or NULL
-- $6 cost_micros = what it cost when sent (sql/023), or NULL
-- $7 currency = the cost's currency, or NULL
UPDATE sms_records s
SET status = $3, provider_message_id = $4, error = $5::jsonb,
    cost_micros = CASE WHEN $3 = 'sent' THEN $6::bigint END, cost_currency = CASE WHEN $3 = 'sent' THEN $7 END,
    delivery_status = CASE WHEN $3 = 'sent' THEN coalesce(d.status, 'sent') END,
    delivered_at = d.delivered_at
FROM og_delivery_of('sms', $4) AS d
-- The status test is an expression no index holds: its record is read by the primary key only
-- (a generic plan on a small table would otherwise take sms_records_tenant_status, whose
-- first columns are the same; test_logs_scale.py).
WHERE s.tenant_id = $1 AND s.reference = $2 AND coalesce(s.status, '') IN ('pending', 'unknown');

-- name: sms_record
-- Records an SMS a unified send or an OTP send has sent (or failed to send), with the
-- delivery statuses the provider reported before this commit. A queued message's retry on SMS
-- after a throttle (API.md §19) writes its record again: only the throttled try's ('failed';
-- its outcome was unique until queued sends could retry a channel: the retry's insert failed on
-- the key, and its message ended `unknown`). The conflict clause costs every insert here about
-- 1 us (25 against 24 in one backend, 20,000 inserts).
-- $1 tenant_id
-- $2 reference
-- $3 source = 'omni' or 'otp'
-- $4 source_reference = reference of the OTP it carried, or NULL
-- $5 to = the number (E.164)
-- $6 sender
-- $7 text = the text (of an OTP, with the code masked)
-- $8 segments
-- $9 encoding
-- $10 status = 'sent' or 'failed'
-- $11 provider_id = provider message id, or NULL
-- $12 error = a JSON object, or NULL
-- $13 cost_micros = what it cost when sent (sql/023), or NULL
-- $14 currency = the cost's currency, or NULL
INSERT INTO sms_records (tenant_id, reference, source, source_reference, to_number, sender,
    body, segments, encoding, status, provider_message_id, error, delivery_status, delivered_at,
    cost_micros, cost_currency)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb,
    CASE WHEN $10 = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
    CASE WHEN $10 = 'sent' THEN $13::bigint END, CASE WHEN $10 = 'sent' THEN $14 END
FROM og_delivery_of('sms', $11) AS d
ON CONFLICT (tenant_id, reference) DO UPDATE
SET status = EXCLUDED.status, provider_message_id = EXCLUDED.provider_message_id, error = EXCLUDED.error,
    delivery_status = EXCLUDED.delivery_status, delivered_at = EXCLUDED.delivered_at,
    cost_micros = EXCLUDED.cost_micros, cost_currency = EXCLUDED.cost_currency
WHERE sms_records.status = 'failed';
