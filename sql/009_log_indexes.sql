-- Logs at scale (API.md §16, docs/logs.md): every log filter is served by an index in the
-- order of the answer, and no statement of the write path can pick a wrong index.
--
-- Order. A log answers newest first, and references are time-ordered ("kf_" + ULID), so every
-- index a log page is read by ends in the reference: (tenant_id, <filter>, reference). A page
-- is then one range scan, in order, of exactly the rows that match, stopping after one page,
-- whatever the filter and however many rows the tenant has; since and until become bounds on
-- the reference (src/product/logs/logs_api.c), so the created_at indexes go.
--
-- Hidden from the write path. On a table never analyzed (a new deployment's first minute), a
-- statement such as "UPDATE messages ... WHERE tenant_id = $1 AND reference = $2" costs the
-- same through any index that holds both columns; its generic plan, made while the table is
-- tiny, took the first one (then messages_tenant_created) and kept it as the table grew: a
-- scan of the tenant's rows per update. So every index below except the primary keys is
-- partial, on a condition true of every row that only the statements meant to use it imply:
-- the "to" indexes on to_number IS NOT NULL (implied by any to_number = ...: the logs' "to"
-- pages and the OTP send and verify by number), the others on reference > 'kf_', which only
-- the log statements state (sql/queries/logs.sql). A statement that does not imply an index's
-- predicate cannot use that index at all: by reference, the primary key is the only choice.
--
-- Cost. Each index costs every insert, and an index on a column a statement changes makes
-- that update non-HOT (new index entries in every index of the table): status is such a
-- column. docs/logs.md has the figures.
--
-- On a large existing database, build the new indexes first with CREATE INDEX CONCURRENTLY
-- under the same names and definitions: this migration then only drops the old ones.

-- Messages: to and status. And the pending messages by age, for the sweep (og_sweep_pending,
-- sql/007, and msg_mark_unknown): every status change is an index change now, so the partial
-- index sql/004 dropped for HOT updates costs little again (one entry per insert, none when
-- the message completes), and the sweep reads the pending messages instead of a week of
-- messages through messages_created_brin. Its predicate names created_at, which the sweep's
-- bounds imply and a log page by status does not: such a page reads messages_tenant_status.
DROP INDEX IF EXISTS messages_tenant_created;
DROP INDEX IF EXISTS messages_created_brin;
CREATE INDEX IF NOT EXISTS messages_tenant_to ON messages (tenant_id, to_number, reference)
    WHERE to_number IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_tenant_status ON messages (tenant_id, status, reference)
    WHERE reference > 'kf_';
CREATE INDEX IF NOT EXISTS messages_pending ON messages (created_at)
    WHERE status = 'pending' AND created_at IS NOT NULL;

-- The channel filter: messages with an attempt on a channel. Unique: a message tries each of
-- its channels at most once (an attempt's seq is the channel's place in the message's
-- channels), so a page read through it lists each message once.
CREATE UNIQUE INDEX IF NOT EXISTS attempts_tenant_channel ON attempts (tenant_id, channel, reference)
    WHERE channel IS NOT NULL;

-- SMS records: to, source, and status, which is the record's (sent, failed) or its delivery's
-- (delivered, read, undelivered, failed).
DROP INDEX IF EXISTS sms_records_tenant_created;
CREATE INDEX IF NOT EXISTS sms_records_tenant_to ON sms_records (tenant_id, to_number, reference)
    WHERE to_number IS NOT NULL;
CREATE INDEX IF NOT EXISTS sms_records_tenant_status ON sms_records (tenant_id, status, reference)
    WHERE status IS NOT NULL;
CREATE INDEX IF NOT EXISTS sms_records_tenant_delivery ON sms_records (tenant_id, delivery_status, reference)
    WHERE delivery_status IS NOT NULL;
CREATE INDEX IF NOT EXISTS sms_records_tenant_source ON sms_records (tenant_id, source, reference)
    WHERE source IS NOT NULL;

-- OTPs: to (also the send limits and the verify by number) and status.
DROP INDEX IF EXISTS otp_requests_tenant_created;
DROP INDEX IF EXISTS otp_requests_tenant_number;
CREATE INDEX IF NOT EXISTS otp_requests_tenant_to ON otp_requests (tenant_id, to_number, reference)
    WHERE to_number IS NOT NULL;
CREATE INDEX IF NOT EXISTS otp_requests_tenant_status ON otp_requests (tenant_id, status, reference)
    WHERE reference > 'kf_';

-- The log items (API.md §4, §10), one view per log: each log statement reads its page through
-- its own index and takes the item from here. A view is expanded into the statement that uses
-- it, so an item is built only for the rows of the page.
CREATE VIEW og_log_omni AS
SELECT m.tenant_id, m.reference, m.to_number, m.status, json_build_object(
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
    'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) AS item
FROM messages m;

CREATE VIEW og_log_sms AS
SELECT s.tenant_id, s.reference, s.to_number, s.status, s.delivery_status, s.source, json_build_object(
    'reference', s.reference, 'source', s.source, 'to', s.to_number, 'sender', s.sender,
    'text', s.body, 'segments', s.segments, 'encoding', s.encoding, 'status', s.status,
    'providerMessageId', s.provider_message_id, 'error', s.error,
    'deliveryStatus', s.delivery_status,
    'deliveredAt', to_char(s.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) AS item
FROM sms_records s;

CREATE VIEW og_log_otp AS
SELECT o.tenant_id, o.reference, o.to_number, o.status, json_build_object(
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
        WHERE e.tenant_id = o.tenant_id AND e.otp_reference = o.reference), '[]'::json)) AS item
FROM otp_requests o;

-- The OTP send limits (sql/002) read only the number's newest OTPs: at most five can fall in
-- the last hour (the sixth is refused), and the one pending OTP a new one supersedes is the
-- newest (every send supersedes the pending one). The number's OTPs come newest first from
-- otp_requests_tenant_to; references are in time order (two sends to a number are 30 s
-- apart at least). Planned afresh on every call: a plan cached while the table was small
-- could read the tenant's OTPs by the primary key instead.
CREATE OR REPLACE FUNCTION omnigate_otp_begin(p_tenant uuid, p_to text, p_reference text, p_code_hash text,
                                              p_length integer, p_ttl_seconds integer,
                                              OUT outcome text, OUT retry_after integer, OUT expires_at timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    last_at timestamptz;
    oldest  timestamptz;
    n       integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_tenant::text || '/' || p_to, 1869442416));
    SELECT max(r.created_at), min(r.created_at), count(*) INTO last_at, oldest, n
      FROM (SELECT created_at FROM otp_requests
             WHERE tenant_id = p_tenant AND to_number = p_to
             ORDER BY reference DESC LIMIT 5) r
     WHERE r.created_at > now() - interval '1 hour';
    IF last_at IS NOT NULL AND last_at > now() - interval '30 seconds' THEN
        outcome := 'cooldown';
        retry_after := greatest(1, ceil(extract(epoch FROM last_at + interval '30 seconds' - now()))::integer);
        RETURN;
    END IF;
    IF n >= 5 THEN
        outcome := 'hourly';
        retry_after := greatest(1, ceil(extract(epoch FROM oldest + interval '1 hour' - now()))::integer);
        RETURN;
    END IF;
    UPDATE otp_requests SET status = 'superseded'
     WHERE tenant_id = p_tenant AND status = 'pending' AND reference = (
         SELECT reference FROM otp_requests
          WHERE tenant_id = p_tenant AND to_number = p_to
          ORDER BY reference DESC LIMIT 1);
    INSERT INTO otp_requests (tenant_id, reference, to_number, code_hash, length, expires_at)
    VALUES (p_tenant, p_reference, p_to, p_code_hash, p_length, now() + make_interval(secs => p_ttl_seconds))
    RETURNING otp_requests.expires_at INTO expires_at;
    outcome := 'ok';
    retry_after := 0;
END
$$;

-- A stale claim's message is found by its key; planned afresh for the reason above (the
-- pending messages' index would otherwise compete with the primary key).
ALTER FUNCTION og_idem_stale(uuid, text, integer) SET plan_cache_mode = force_custom_plan;

-- Retention by reference (its time is the record's creation time): a batch is a range of the
-- primary key from the oldest, and the created_at indexes it used are gone. p_before is the
-- smallest reference of the cut-off's millisecond (src/product/app/cli.c computes it).
DROP FUNCTION omnigate_prune_batch(uuid, timestamptz, integer);
CREATE FUNCTION omnigate_prune_batch(p_tenant uuid, p_before text, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    refs text[];
    n    integer := 0;
BEGIN
    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM messages
         WHERE tenant_id = p_tenant AND reference < p_before
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        WITH a AS (
            DELETE FROM attempts WHERE tenant_id = p_tenant AND reference = ANY (refs)
            RETURNING channel, provider_message_id)
        DELETE FROM delivery_statuses d USING a
        WHERE d.channel = a.channel AND d.provider_message_id = a.provider_message_id;
        DELETE FROM messages WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM sms_records
         WHERE tenant_id = p_tenant AND reference < p_before
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        WITH s AS (
            DELETE FROM sms_records WHERE tenant_id = p_tenant AND reference = ANY (refs)
            RETURNING provider_message_id)
        DELETE FROM delivery_statuses d USING s
        WHERE d.channel = 'sms' AND d.provider_message_id = s.provider_message_id;
        n := n + cardinality(refs);
    END IF;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM otp_requests
         WHERE tenant_id = p_tenant AND reference < p_before
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        DELETE FROM otp_events WHERE tenant_id = p_tenant AND otp_reference = ANY (refs);
        DELETE FROM otp_requests WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;
    RETURN n;
END
$$;
