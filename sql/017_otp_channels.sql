-- OTP over WhatsApp (API.md §18; src/product/messaging/otp.c, docs/otp.md): an OTP is sent on
-- `channels` in fallback order (whatsapp_meta with the tenant's authentication template, sms),
-- one code whichever channel delivers it.
--
-- otp_requests.channel is the channel that delivered the code: NULL until one did, and for an
-- OTP no channel delivered (status 'failed'). otp_events.channel is the channel of a 'sent' or
-- 'send_failed' event (NULL for the others), otp_events.error the attempt's error object of a
-- 'send_failed' ({code, message, providerCode?, httpStatus?}, the code masked as everywhere).
--
-- Every OTP before this migration was sent by SMS. Each column is added with the default 'sms'
-- and the default dropped at once: PostgreSQL (11 and later) keeps the constant as the value of
-- the rows that exist, without rewriting the tables, and new rows get NULL unless the statement
-- names a channel. og_otp_item below shows a channel only where it applies (a failed OTP has
-- none; verify, lock and expiry events have none), so the old rows read right.
ALTER TABLE otp_requests ADD COLUMN channel text DEFAULT 'sms';
ALTER TABLE otp_requests ALTER COLUMN channel DROP DEFAULT;
ALTER TABLE otp_events ADD COLUMN channel text DEFAULT 'sms';
ALTER TABLE otp_events ALTER COLUMN channel DROP DEFAULT;
ALTER TABLE otp_events ADD COLUMN error jsonb;

-- An OTP log item (API.md §4, sql/011) with the channel that delivered the code and each
-- history event's channel and error. Still never the code.
CREATE OR REPLACE FUNCTION og_otp_item(o otp_requests) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', o.reference, 'to', o.to_number, 'status', o.status, 'length', o.length,
        'channel', CASE WHEN o.status <> 'failed' THEN o.channel END,
        'expiresAt', to_char(o.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'createdAt', to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'verifiedAt', to_char(o.verified_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'failedAttempts', o.failed_attempts,
        'history', coalesce((
            SELECT json_agg(json_build_object(
                    'event', e.event,
                    'channel', CASE WHEN e.event IN ('sent', 'send_failed') THEN e.channel END,
                    'error', CASE WHEN e.event = 'send_failed' THEN e.error END,
                    'at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                ORDER BY e.id)
            FROM otp_events e
            WHERE e.tenant_id = o.tenant_id AND e.otp_reference = o.reference), '[]'::json))
$$;
