-- Delivery statuses from the providers' webhooks (API.md §10).
--
-- Every status a provider reports is one row of delivery_statuses, keyed by what the provider
-- knows: the channel, its own message id and the status. That row is at once the history of
-- an attempt and, while no attempt has that id yet (the provider called back before our
-- completion write committed), the status waiting for it: nothing is moved when the attempt
-- appears. A repeat of a status is the same key and changes nothing.
--
-- An attempt's delivery state is a function of all its rows (og_delivery_of), never of the
-- order they came in: the best status by rank (sent < failed = undelivered < delivered <
-- read), so nothing moves backwards and out-of-order arrivals end in the same state. It is
-- computed when the attempt is inserted (statuses that came first) and again whenever a new
-- row for it arrives. A message's status follows its accepted attempts (og_message_delivery).

CREATE TABLE delivery_statuses (
    channel             text        NOT NULL,
    provider_message_id text        NOT NULL,
    status              text        NOT NULL
                                    CHECK (status IN ('sent', 'delivered', 'read', 'failed', 'undelivered')),
    at                  timestamptz NOT NULL,  -- the provider's time of the status
    provider_code       text,                  -- the provider's error code, failures only
    delivery_error      text,                  -- our error code (API.md §10), failures only
    error_message       text,                  -- the provider's explanation, failures only
    received_at         timestamptz NOT NULL DEFAULT now(),
    -- False while no attempt or SMS record has this id: a status waiting for its attempt, or
    -- one for a message that is not ours (pruned after 7 days).
    matched             boolean     NOT NULL,
    PRIMARY KEY (channel, provider_message_id, status)
);
CREATE INDEX delivery_statuses_unmatched ON delivery_statuses (received_at) WHERE NOT matched;

-- No CHECK on the attempts' new columns: only this gateway writes them, and every CHECK costs
-- each insert a parse of its expression (measured on the send path).
ALTER TABLE attempts
    ADD COLUMN delivery_status        text,
    ADD COLUMN delivered_at           timestamptz,
    ADD COLUMN read_at                timestamptz,
    ADD COLUMN delivery_error         text,
    ADD COLUMN delivery_provider_code text,
    ADD COLUMN delivery_message       text;
-- One lookup from a provider's message id to its attempt.
CREATE INDEX attempts_provider_message ON attempts (channel, provider_message_id)
    WHERE provider_message_id IS NOT NULL;

ALTER TABLE sms_records
    ADD COLUMN delivery_status text
        CHECK (delivery_status IN ('sent', 'delivered', 'read', 'failed', 'undelivered')),
    ADD COLUMN delivered_at    timestamptz;
CREATE INDEX sms_records_provider_message ON sms_records (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_status_check
    CHECK (status IN ('pending', 'sent', 'failed', 'unknown', 'delivered', 'read', 'undelivered'));

-- Already-sent attempts and SMS records of earlier versions start as 'sent'.
UPDATE attempts SET delivery_status = 'sent' WHERE status = 'sent';
UPDATE sms_records SET delivery_status = 'sent' WHERE status = 'sent';

CREATE FUNCTION og_status_rank(s text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE s WHEN 'sent' THEN 1 WHEN 'failed' THEN 2 WHEN 'undelivered' THEN 2
                  WHEN 'delivered' THEN 3 WHEN 'read' THEN 4 ELSE 0 END
$$;

-- The delivery state of the accepted attempt (or SMS) with this channel and message id, from
-- every status recorded for it; all NULL when there is none (the caller keeps 'sent').
-- delivered_at: the first delivered or read (a read message was delivered); the error: that
-- of the best status when it is a failure.
CREATE TYPE og_delivery AS (
    status         text,
    delivered_at   timestamptz,
    read_at        timestamptz,
    delivery_error text,
    provider_code  text,
    error_message  text
);
-- Declared as a set (of exactly one row: an aggregate without GROUP BY) so that PostgreSQL
-- inlines it into the calling statement instead of running a function per row.
CREATE FUNCTION og_delivery_of(p_channel text, p_pid text) RETURNS SETOF og_delivery
LANGUAGE sql STABLE AS $$
    SELECT (array_agg(status ORDER BY og_status_rank(status) DESC, at))[1],
           min(at) FILTER (WHERE status IN ('delivered', 'read')),
           min(at) FILTER (WHERE status = 'read'),
           (array_agg(delivery_error ORDER BY og_status_rank(status) DESC, at))[1],
           (array_agg(provider_code ORDER BY og_status_rank(status) DESC, at))[1],
           (array_agg(error_message ORDER BY og_status_rank(status) DESC, at))[1]
    FROM delivery_statuses
    WHERE channel = p_channel AND provider_message_id = p_pid
$$;

-- A message's status from the delivery statuses of its accepted attempts: read when any was
-- read, delivered when any was delivered, undelivered when every one failed, else sent.
CREATE FUNCTION og_message_delivery(statuses text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN 'read' = ANY (statuses) THEN 'read'
                WHEN 'delivered' = ANY (statuses) THEN 'delivered'
                WHEN cardinality(statuses) > 0
                     AND statuses <@ ARRAY['failed', 'undelivered'] THEN 'undelivered'
                ELSE 'sent' END
$$;

-- Recomputes the attempts and SMS records with these (channel, message id) pairs, and the
-- messages of those attempts. Returns how many pairs matched an attempt or an SMS record.
CREATE FUNCTION og_status_recompute(p_channel text[], p_pid text[]) RETURNS integer
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    t_tenant uuid[];
    t_ref    text[];
    n_att    integer;
    n_sms    integer;
BEGIN
    -- Rows are locked in one order (attempts, then messages, then SMS records, each sorted by
    -- key) before they are updated, so two batches touching the same rows wait for each other
    -- instead of deadlocking.
    PERFORM 1 FROM attempts a, unnest(p_channel, p_pid) AS k(channel, pid)
     WHERE a.channel = k.channel AND a.provider_message_id = k.pid AND a.status = 'sent'
     ORDER BY a.tenant_id, a.reference, a.seq
     FOR UPDATE OF a;
    WITH u AS (
        UPDATE attempts a
        SET delivery_status = coalesce(d.status, 'sent'), delivered_at = d.delivered_at,
            read_at = d.read_at, delivery_error = d.delivery_error,
            delivery_provider_code = d.provider_code, delivery_message = d.error_message
        FROM unnest(p_channel, p_pid) AS k(channel, pid)
        CROSS JOIN LATERAL og_delivery_of(k.channel, k.pid) AS d
        WHERE a.channel = k.channel AND a.provider_message_id = k.pid AND a.status = 'sent'
        RETURNING a.tenant_id, a.reference),
    r AS (SELECT DISTINCT tenant_id, reference FROM u ORDER BY tenant_id, reference)
    SELECT array_agg(tenant_id), array_agg(reference), (SELECT count(*) FROM u)
      INTO t_tenant, t_ref, n_att
      FROM r;

    IF t_ref IS NOT NULL THEN
        PERFORM 1 FROM messages m, unnest(t_tenant, t_ref) AS r(tenant_id, reference)
         WHERE m.tenant_id = r.tenant_id AND m.reference = r.reference
         ORDER BY m.tenant_id, m.reference
         FOR UPDATE OF m;
        UPDATE messages m
        SET status = og_message_delivery(ARRAY(
                SELECT a.delivery_status FROM attempts a
                WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'sent'))
        FROM unnest(t_tenant, t_ref) AS r(tenant_id, reference)
        WHERE m.tenant_id = r.tenant_id AND m.reference = r.reference
            AND m.status IN ('sent', 'delivered', 'read', 'undelivered');
    END IF;

    PERFORM 1 FROM sms_records s, unnest(p_channel, p_pid) AS k(channel, pid)
     WHERE k.channel = 'sms' AND s.provider_message_id = k.pid AND s.status = 'sent'
     ORDER BY s.tenant_id, s.reference
     FOR UPDATE OF s;
    UPDATE sms_records s
    SET delivery_status = coalesce(d.status, 'sent'), delivered_at = d.delivered_at
    FROM unnest(p_channel, p_pid) AS k(channel, pid)
    CROSS JOIN LATERAL og_delivery_of(k.channel, k.pid) AS d
    WHERE k.channel = 'sms' AND s.provider_message_id = k.pid AND s.status = 'sent';
    GET DIAGNOSTICS n_sms = ROW_COUNT;
    RETURN n_att + n_sms;
END
$$;

-- Records a batch of statuses from one webhook POST: a JSON array of {channel, pid, status,
-- at (Unix seconds), code, error, message}. A repeat changes nothing; a status whose message id
-- no attempt has yet is kept unmatched. Returns (applied, duplicate, unknown): new statuses
-- that matched an attempt or SMS record, repeats, and new statuses waiting unmatched.
CREATE FUNCTION og_status_apply(p_statuses jsonb, OUT applied integer, OUT duplicate integer,
                                OUT unknown integer)
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    t_channel text[];
    t_pid     text[];
    n_in      integer;
BEGIN
    WITH i AS (
        SELECT DISTINCT ON (channel, pid, status) channel, pid, status, to_timestamp(at) AS at,
            code, error, message
        FROM jsonb_to_recordset(p_statuses) AS x(channel text, pid text, status text,
            at double precision, code text, error text, message text)
        ORDER BY channel, pid, status, at),
    ins AS (
        INSERT INTO delivery_statuses (channel, provider_message_id, status, at, provider_code,
            delivery_error, error_message, matched)
        SELECT i.channel, i.pid, i.status, i.at, i.code, i.error, i.message,
            EXISTS (SELECT 1 FROM attempts a
                    WHERE a.channel = i.channel AND a.provider_message_id = i.pid)
            OR (i.channel = 'sms' AND EXISTS (SELECT 1 FROM sms_records s
                    WHERE s.provider_message_id = i.pid))
        FROM i
        ON CONFLICT DO NOTHING
        RETURNING channel, provider_message_id, matched)
    SELECT count(*) FILTER (WHERE matched), count(*) FILTER (WHERE NOT matched),
           array_agg(channel) FILTER (WHERE matched),
           array_agg(provider_message_id) FILTER (WHERE matched)
      INTO applied, unknown, t_channel, t_pid
      FROM ins;
    n_in := jsonb_array_length(p_statuses);
    duplicate := n_in - applied - unknown;
    IF applied > 0 THEN
        PERFORM og_status_recompute(t_channel, t_pid);
    END IF;
END
$$;

-- Statuses whose attempt appeared after them stay unmatched until this sweep marks them: the
-- completion write applies them (og_delivery_of) but does not mark them, which would cost
-- every send a join; and a status committed while the attempt's insert was in flight is seen
-- by neither transaction. Adopts statuses received in the last 30 minutes (longer than any
-- send can take) whose attempt now exists, prunes unmatched ones older than 7 days (at most
-- 1,000 per call), and returns how many recent ones still wait.
CREATE FUNCTION og_status_sweep() RETURNS integer
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    t_channel text[];
    t_pid     text[];
    waiting   integer;
BEGIN
    WITH m AS (
        UPDATE delivery_statuses d SET matched = true
        WHERE NOT d.matched AND d.received_at > now() - interval '30 minutes'
            AND (EXISTS (SELECT 1 FROM attempts a
                         WHERE a.channel = d.channel AND a.provider_message_id = d.provider_message_id)
                 OR (d.channel = 'sms' AND EXISTS (SELECT 1 FROM sms_records s
                         WHERE s.provider_message_id = d.provider_message_id)))
        RETURNING d.channel, d.provider_message_id)
    SELECT array_agg(channel), array_agg(provider_message_id) INTO t_channel, t_pid FROM m;
    IF t_channel IS NOT NULL THEN
        PERFORM og_status_recompute(t_channel, t_pid);
    END IF;
    DELETE FROM delivery_statuses
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM delivery_statuses
        WHERE NOT matched AND received_at < now() - interval '7 days'
        LIMIT 1000));
    SELECT count(*) INTO waiting FROM delivery_statuses
    WHERE NOT matched AND received_at > now() - interval '30 minutes';
    RETURN waiting;
END
$$;

-- Retention (sql/003) now also deletes the statuses of the attempts and SMS records it deletes.
CREATE OR REPLACE FUNCTION omnigate_prune_batch(p_tenant uuid, p_before timestamptz, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    refs text[];
    n    integer := 0;
    k    integer;
BEGIN
    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM messages
         WHERE tenant_id = p_tenant AND created_at < p_before
         ORDER BY created_at LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        WITH a AS (
            DELETE FROM attempts WHERE tenant_id = p_tenant AND reference = ANY (refs)
            RETURNING channel, provider_message_id)
        DELETE FROM delivery_statuses d USING a
        WHERE d.channel = a.channel AND d.provider_message_id = a.provider_message_id;
        DELETE FROM messages WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;

    WITH s AS (
        DELETE FROM sms_records WHERE tenant_id = p_tenant AND reference IN (
            SELECT reference FROM sms_records
             WHERE tenant_id = p_tenant AND created_at < p_before
             ORDER BY created_at LIMIT p_limit)
        RETURNING provider_message_id),
    d AS (
        DELETE FROM delivery_statuses d USING s
        WHERE d.channel = 'sms' AND d.provider_message_id = s.provider_message_id)
    SELECT count(*) INTO k FROM s;
    n := n + k;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM otp_requests
         WHERE tenant_id = p_tenant AND created_at < p_before
         ORDER BY created_at LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        DELETE FROM otp_events WHERE tenant_id = p_tenant AND otp_reference = ANY (refs);
        DELETE FROM otp_requests WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;
    RETURN n;
END
$$;
