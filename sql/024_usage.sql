-- Usage (API.md §22; docs/costs.md, src/product/costs/usage_api.c): totals per tenant, UTC day
-- and channel, kept as messages and attempts are written, so that GET /api/usage sums a few
-- rows per day and never reads the logs.
--
-- What counts (the log's own rules, checked both ways by test/e2e/test_usage.py):
--   - a unified message, on the day it was created (messages.created_at, UTC); its attempts and
--     their deliveries on that same day, whenever they happen;
--   - an SMS of POST /api/sms/send or of an OTP (sms_records, source 'sms' or 'otp'): a message
--     of one sms attempt, on the day its record was made; the SMS of a unified send (source
--     'omni') only brings its segments to its message's sms attempt;
--   - an attempt counts once it has an outcome ('pending' counts nothing yet): `attempts`,
--     `accepted` ('sent'), `failed` ('failed' or 'unknown'), `delivered` (its delivery status
--     reached delivered: delivered or read), `read`, `segments` (accepted SMS), `cost` (its
--     cost, sql/023); a channel's `messages` are its attempts (a message has one per channel);
--   - the channel '' row holds the day's messages, created whatever became of them;
--   - `won`: the fallback messages with more than one channel that the channel won (its
--     winning channel, which a delivery-based fallback may move later), and `savings_micros`,
--     for the WhatsApp channels, what those would have cost by SMS minus what they cost
--     (attempts.sms_equiv_micros and cost_micros; nothing when either is unknown).
--
-- Cost: each trigger is one statement, kept planned (plan_cache_mode = force_generic_plan, as
-- the set forms do, sql/014); the counting rule is in functions PostgreSQL inlines. (A first
-- version passing arrays through two layers of functions cost a one-send statement 120-300 us of
-- the backend; docs/performance.md has the figures.) The triggers that join a statement's old
-- and new rows set hash joins on: the set functions that fire them turn them off for their own
-- statements (sql/013, sql/019), and a nested loop over two transition tables of a large write
-- batch would cost its square.
--
-- How: statement-level triggers with transition tables add each statement's changes, new
-- minus old, grouped by (tenant, day, channel), to the rows of the backend that runs it (shard
-- = its pid), as the batch counts do (sql/020): no two transactions write one row, so none waits
-- for another. A write batch of many sends adds its changes in one statement. og_usage_compact
-- (the sweep) merges the shards of past days into shard 0, so a day keeps a handful of rows.

CREATE TABLE usage_totals (
    tenant_id      uuid    NOT NULL,
    day            date    NOT NULL,
    channel        text    NOT NULL, -- '' for the day's messages as a whole
    shard          integer NOT NULL, -- the pid of the backend that wrote it; 0: merged
    messages       bigint  NOT NULL DEFAULT 0,
    attempts       bigint  NOT NULL DEFAULT 0,
    accepted       bigint  NOT NULL DEFAULT 0,
    delivered      bigint  NOT NULL DEFAULT 0,
    read           bigint  NOT NULL DEFAULT 0,
    failed         bigint  NOT NULL DEFAULT 0,
    segments       bigint  NOT NULL DEFAULT 0,
    cost_micros    bigint  NOT NULL DEFAULT 0,
    won            bigint  NOT NULL DEFAULT 0,
    savings_micros bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, channel, shard)
);
-- /admin/usage (every tenant) by day.
CREATE INDEX usage_totals_day ON usage_totals (day);

-- The UTC day of a time: the day usage counts it on.
CREATE FUNCTION og_usage_day(t timestamptz) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (t AT TIME ZONE 'UTC')::date
$$;

-- What one attempt (or SMS record) of status st, delivery status ds and cost counts: the rule of
-- the header, once; each an expression PostgreSQL puts in place of the call.
CREATE FUNCTION og_usage_final(st text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (st IN ('sent', 'failed', 'unknown'))::integer $$;
CREATE FUNCTION og_usage_accepted(st text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (st = 'sent')::integer $$;
CREATE FUNCTION og_usage_failed(st text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (st IN ('failed', 'unknown'))::integer $$;
CREATE FUNCTION og_usage_delivered(st text, ds text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (st = 'sent' AND coalesce(ds IN ('delivered', 'read'), false))::integer
$$;
CREATE FUNCTION og_usage_read(st text, ds text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (st = 'sent' AND coalesce(ds = 'read', false))::integer $$;
CREATE FUNCTION og_usage_cost(st text, cost bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT CASE WHEN st = 'sent' THEN coalesce(cost, 0) ELSE 0 END $$;

-- Each trigger below is one statement: its rows' counts grouped by (tenant, day, channel) and
-- added to this backend's rows by the same upsert (the columns it does not count are 0).

-- Messages: the day's count, as they are created.
CREATE FUNCTION og_usage_messages_new() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT n.tenant_id, og_usage_day(n.created_at), '', pg_backend_pid(), count(*), 0, 0, 0, 0, 0, 0, 0, 0, 0
    FROM new_rows n
    GROUP BY 1, 2
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_usage_new AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_messages_new();

-- Messages: a fallback message's winning channel, as it is set or moved (won, savings).
CREATE FUNCTION og_usage_messages_won() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT n.tenant_id, og_usage_day(n.created_at), w.c, pg_backend_pid(), 0, 0, 0, 0, 0, 0, 0, 0, sum(w.sign),
        sum(w.sign * coalesce((
            SELECT CASE WHEN w.c <> 'sms' AND a.cost_micros IS NOT NULL THEN a.sms_equiv_micros - a.cost_micros END
            FROM attempts a
            WHERE a.tenant_id = n.tenant_id AND a.reference = n.reference AND a.channel = w.c AND a.status = 'sent'
            ORDER BY a.seq DESC LIMIT 1), 0))
    FROM new_rows n
    JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference
    CROSS JOIN LATERAL (VALUES (o.winning_channel, -1), (n.winning_channel, 1)) AS w(c, sign)
    WHERE o.winning_channel IS DISTINCT FROM n.winning_channel AND w.c IS NOT NULL
        AND n.delivery_mode = 'fallback' AND cardinality(n.channels) > 1
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_usage_won AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_messages_won();

-- Attempts: written (the sync completion, a queue release, a step's 'pending' row, which counts
-- nothing yet), on their message's day, in their channel's row. The segments of an accepted SMS
-- come with its SMS record (below).
CREATE FUNCTION og_usage_attempts_new() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT n.tenant_id, og_usage_day(m.created_at), n.channel, pg_backend_pid(), count(*), count(*),
        sum(og_usage_accepted(n.status)), sum(og_usage_delivered(n.status, n.delivery_status)),
        sum(og_usage_read(n.status, n.delivery_status)), sum(og_usage_failed(n.status)), 0,
        sum(og_usage_cost(n.status, n.cost_micros)), 0, 0
    FROM new_rows n
    JOIN messages m ON m.tenant_id = n.tenant_id AND m.reference = n.reference
    WHERE og_usage_final(n.status) = 1
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

-- Attempts: changed (an outcome, a delivery status, a retry after a throttle): the new counts
-- minus the old ones of the rows whose counts may have changed.
CREATE FUNCTION og_usage_attempts_changed() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT c.tenant_id, og_usage_day(m.created_at), v.ch, pg_backend_pid(), sum(v.sign * og_usage_final(v.st)),
        sum(v.sign * og_usage_final(v.st)), sum(v.sign * og_usage_accepted(v.st)),
        sum(v.sign * og_usage_delivered(v.st, v.ds)), sum(v.sign * og_usage_read(v.st, v.ds)),
        sum(v.sign * og_usage_failed(v.st)), 0, sum(v.sign * og_usage_cost(v.st, v.co)), 0, 0
    FROM (SELECT n.tenant_id, n.reference, n.channel AS nch, n.status AS nst, n.delivery_status AS nds,
              n.cost_micros AS nco, o.channel AS och, o.status AS ost, o.delivery_status AS ods, o.cost_micros AS oco
          FROM new_rows n
          JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference AND o.seq = n.seq
          WHERE (n.channel, n.status, n.delivery_status, n.cost_micros)
                IS DISTINCT FROM (o.channel, o.status, o.delivery_status, o.cost_micros)) c
    CROSS JOIN LATERAL (VALUES (c.nch, c.nst, c.nds, c.nco, 1), (c.och, c.ost, c.ods, c.oco, -1))
        AS v(ch, st, ds, co, sign)
    JOIN messages m ON m.tenant_id = c.tenant_id AND m.reference = c.reference
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_usage_new AFTER INSERT ON attempts
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_attempts_new();
CREATE TRIGGER attempts_usage_changed AFTER UPDATE ON attempts
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_attempts_changed();

-- SMS records: made (POST /api/sms/send's 'pending' one, a unified send's or an OTP's at its
-- end). A record of the SMS route or an OTP is a message of its own on its day ('' row) with its
-- one sms attempt; a unified send's (source 'omni') brings only the segments of its accepted
-- SMS to its message's sms row.
CREATE FUNCTION og_usage_sms_new() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT x.t, x.d, x.c, pg_backend_pid(), sum(x.m), sum(x.a), sum(x.ac), sum(x.de), sum(x.rd), sum(x.f), sum(x.s),
        sum(x.co), 0, 0
    FROM (SELECT n.tenant_id AS t, og_usage_day(n.created_at) AS d, '' AS c, 1 AS m, 0 AS a, 0 AS ac, 0 AS de,
              0 AS rd, 0 AS f, 0 AS s, 0::bigint AS co
          FROM new_rows n WHERE n.source IN ('sms', 'otp')
          UNION ALL
          SELECT n.tenant_id, og_usage_day(n.created_at), 'sms', 1, 1, og_usage_accepted(n.status),
              og_usage_delivered(n.status, n.delivery_status), og_usage_read(n.status, n.delivery_status),
              og_usage_failed(n.status), og_usage_accepted(n.status) * n.segments, og_usage_cost(n.status, n.cost_micros)
          FROM new_rows n WHERE n.source IN ('sms', 'otp') AND og_usage_final(n.status) = 1
          UNION ALL
          SELECT n.tenant_id, og_usage_day(m.created_at), 'sms', 0, 0, 0, 0, 0, 0, n.segments, 0
          FROM new_rows n JOIN messages m ON m.tenant_id = n.tenant_id AND m.reference = n.reference
          WHERE n.source = 'omni' AND n.status = 'sent') x
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

-- SMS records: changed (an outcome, a delivery status): new counts minus old.
CREATE FUNCTION og_usage_sms_changed() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT c.tenant_id, CASE WHEN c.source = 'omni' THEN (SELECT og_usage_day(m.created_at) FROM messages m
                                                           WHERE m.tenant_id = c.tenant_id AND m.reference = c.reference)
                             ELSE og_usage_day(c.created_at) END,
        'sms', pg_backend_pid(), sum(v.own * v.sign * og_usage_final(v.st)), sum(v.own * v.sign * og_usage_final(v.st)),
        sum(v.own * v.sign * og_usage_accepted(v.st)), sum(v.own * v.sign * og_usage_delivered(v.st, v.ds)),
        sum(v.own * v.sign * og_usage_read(v.st, v.ds)), sum(v.own * v.sign * og_usage_failed(v.st)),
        sum(v.sign * og_usage_accepted(v.st) * v.seg), sum(v.own * v.sign * og_usage_cost(v.st, v.co)), 0, 0
    FROM (SELECT n.tenant_id, n.reference, n.source, n.created_at, n.status AS nst, n.delivery_status AS nds,
              n.cost_micros AS nco, n.segments AS nseg, o.status AS ost, o.delivery_status AS ods,
              o.cost_micros AS oco, o.segments AS oseg
          FROM new_rows n
          JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference
          WHERE (n.status, n.delivery_status, n.cost_micros, n.segments)
                IS DISTINCT FROM (o.status, o.delivery_status, o.cost_micros, o.segments)) c
    CROSS JOIN LATERAL (VALUES (c.nst, c.nds, c.nco, c.nseg, 1, (c.source <> 'omni')::integer),
                               (c.ost, c.ods, c.oco, c.oseg, -1, (c.source <> 'omni')::integer))
        AS v(st, ds, co, seg, sign, own)
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
    RETURN NULL;
END
$$;

CREATE TRIGGER sms_records_usage_new AFTER INSERT ON sms_records
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_sms_new();
CREATE TRIGGER sms_records_usage_changed AFTER UPDATE ON sms_records
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_sms_changed();

-- Merges the shards of days before yesterday into shard 0 (the sweep, about once a minute): a
-- day's rows stay a handful, whatever backends wrote them. A backend writing a late status of
-- an old day makes a shard row again, merged the next time. At most p_limit rows a call.
CREATE FUNCTION og_usage_compact(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH d AS (
        DELETE FROM usage_totals u
        WHERE (u.tenant_id, u.day, u.channel, u.shard) IN (
            SELECT v.tenant_id, v.day, v.channel, v.shard FROM usage_totals v
            WHERE v.day < og_usage_day(now()) - 1 AND v.shard <> 0
            LIMIT p_limit FOR UPDATE SKIP LOCKED)
        RETURNING u.*),
    g AS (
        SELECT d.tenant_id, d.day, d.channel, sum(d.messages) AS m, sum(d.attempts) AS a, sum(d.accepted) AS ac,
            sum(d.delivered) AS de, sum(d.read) AS rd, sum(d.failed) AS f, sum(d.segments) AS s,
            sum(d.cost_micros) AS co, sum(d.won) AS w, sum(d.savings_micros) AS sv, count(*) AS n
        FROM d GROUP BY 1, 2, 3),
    i AS (
        INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered,
                                       read, failed, segments, cost_micros, won, savings_micros)
        SELECT g.tenant_id, g.day, g.channel, 0, g.m, g.a, g.ac, g.de, g.rd, g.f, g.s, g.co, g.w, g.sv FROM g
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
        SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
            accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
            read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
            segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
            won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros)
    SELECT coalesce(sum(g.n), 0) INTO n FROM g;
    RETURN n;
END
$$;

-- A tenant's (p_tenant) or every tenant's (NULL) totals per day and channel over [p_since,
-- p_until], shards summed: usage_rows (sql/queries/usage.sql), which the gateway groups as the
-- request asks. Two statements, each with its own plan: a tenant's rows by the primary key,
-- every tenant's by day.
CREATE FUNCTION og_usage_sums(p_tenant uuid, p_since date, p_until date)
RETURNS TABLE (day date, channel text, messages bigint, attempts bigint, accepted bigint, delivered bigint,
               read bigint, failed bigint, segments bigint, cost_micros bigint, won bigint, savings_micros bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_tenant IS NOT NULL THEN
        RETURN QUERY
        SELECT u.day, u.channel, sum(u.messages)::bigint, sum(u.attempts)::bigint, sum(u.accepted)::bigint,
            sum(u.delivered)::bigint, sum(u.read)::bigint, sum(u.failed)::bigint, sum(u.segments)::bigint,
            sum(u.cost_micros)::bigint, sum(u.won)::bigint, sum(u.savings_micros)::bigint
        FROM usage_totals u
        WHERE u.tenant_id = p_tenant AND u.day BETWEEN p_since AND p_until
        GROUP BY u.day, u.channel;
    ELSE
        RETURN QUERY
        SELECT u.day, u.channel, sum(u.messages)::bigint, sum(u.attempts)::bigint, sum(u.accepted)::bigint,
            sum(u.delivered)::bigint, sum(u.read)::bigint, sum(u.failed)::bigint, sum(u.segments)::bigint,
            sum(u.cost_micros)::bigint, sum(u.won)::bigint, sum(u.savings_micros)::bigint
        FROM usage_totals u
        WHERE u.day BETWEEN p_since AND p_until
        GROUP BY u.day, u.channel;
    END IF;
END
$$;
