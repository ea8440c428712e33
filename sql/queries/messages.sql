-- Unified sends, POST /api/omni/send (src/product/send.c): a message row is inserted
-- 'pending' before any provider is called and completed with its attempts once the send is
-- over; `omnigate serve` marks the ones a crash left pending (src/product/cli.c).

-- name: msg_insert
-- Records a unified send before any provider is called.
-- $1 = tenant id
-- $2 = reference
-- $3 = to (E.164)
-- $4 = text
-- $5 = delivery mode ('fallback' or 'all')
-- $6 = channels to try, as a text[] literal: {a,b}
-- $7 = channels skipped (JSON array)
-- Returns the reference.
INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped)
VALUES ($1, $2, $3, $4, $5, $6::text[], $7::jsonb)
RETURNING reference;

-- name: msg_complete
-- Completes a unified send: its outcome, and its attempts in one INSERT.
-- $1 = tenant id
-- $2 = reference
-- $3 = status ('sent' or 'failed')
-- $4 = winning channel, or NULL
-- $5 = attempts, a JSON array of {seq, channel, status, provider_message_id, error_code,
--      error_message, provider_code, http_status, latency_ms, attempted_at_ms}
WITH a AS (
    INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
        error_code, error_message, provider_code, http_status, latency_ms, attempted_at)
    SELECT $1, $2, x.seq, x.channel, x.status, x.provider_message_id,
        x.error_code, x.error_message, x.provider_code, x.http_status, x.latency_ms,
        to_timestamp(x.attempted_at_ms / 1000.0)
    FROM json_to_recordset($5::json) AS x(seq smallint, channel text, status text,
        provider_message_id text, error_code text, error_message text, provider_code text,
        http_status integer, latency_ms integer, attempted_at_ms bigint))
UPDATE messages
SET status = $3, winning_channel = $4, completed_at = now()
WHERE tenant_id = $1 AND reference = $2;

-- name: msg_mark_unknown
-- Marks 'unknown' the messages a crash left pending: those older than any send could still
-- be running, and younger than a week (older ones are left to retention).
-- $1 = older than, in milliseconds
UPDATE messages
SET status = 'unknown', completed_at = now()
WHERE status = 'pending'
    AND created_at > now() - interval '7 days'
    AND created_at < now() - $1::bigint * interval '1 millisecond';
