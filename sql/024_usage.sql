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
-- The triggers that join a statement's old and new rows set hash joins on: the set functions
-- that fire them turn them off for their own statements (sql/013, sql/019), and a nested loop
-- over two transition tables of a large write batch would cost its square.
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

-- Adds each element's counts to its (tenant, day, channel) row of this backend: the one write
-- of every trigger below. The keys must be distinct (the callers group by them).
CREATE FUNCTION og_usage_add(p_t uuid[], p_day date[], p_ch text[], p_messages bigint[], p_attempts bigint[],
                             p_accepted bigint[], p_delivered bigint[], p_read bigint[], p_failed bigint[],
                             p_segments bigint[], p_cost bigint[], p_won bigint[], p_savings bigint[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT x.t, x.d, x.c, pg_backend_pid(), x.m, x.a, x.ac, x.de, x.rd, x.f, x.s, x.co, x.w, x.sv
    FROM unnest(p_t, p_day, p_ch, p_messages, p_attempts, p_accepted, p_delivered, p_read, p_failed, p_segments,
                p_cost, p_won, p_savings) AS x(t, d, c, m, a, ac, de, rd, f, s, co, w, sv)
    WHERE (x.m, x.a, x.ac, x.de, x.rd, x.f, x.s, x.co, x.w, x.sv) <> (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    ORDER BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        segments = u.segments + EXCLUDED.segments, cost_micros = u.cost_micros + EXCLUDED.cost_micros,
        won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros
$$;

-- The UTC day of a time: the day usage counts it on.
CREATE FUNCTION og_usage_day(t timestamptz) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (t AT TIME ZONE 'UTC')::date
$$;

-- What one attempt (or SMS record) counts, by its status, delivery status and cost: the rule of
-- the header, in one place for every trigger.
CREATE FUNCTION og_usage_counts(status text, delivery_status text, cost bigint,
                                OUT attempts bigint, OUT accepted bigint, OUT delivered bigint, OUT read bigint,
                                OUT failed bigint, OUT cost_micros bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (status IN ('sent', 'failed', 'unknown'))::int::bigint, (status = 'sent')::int::bigint,
        (status = 'sent' AND delivery_status IN ('delivered', 'read'))::int::bigint,
        (status = 'sent' AND delivery_status = 'read')::int::bigint,
        (status IN ('failed', 'unknown'))::int::bigint, CASE WHEN status = 'sent' THEN coalesce(cost, 0) ELSE 0 END
$$;

-- Messages: the day's count, as they are created.
CREATE FUNCTION og_usage_messages_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_usage_add(array_agg(x.t), array_agg(x.d), array_agg(''::text), array_agg(x.n), array_agg(0::bigint),
                         array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint),
                         array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint))
    FROM (SELECT n.tenant_id AS t, og_usage_day(n.created_at) AS d, count(*) AS n
          FROM new_rows n GROUP BY 1, 2) x
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_usage_new AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_messages_new();

-- Messages: a fallback message's winning channel, as it is set or moved (won, savings).
CREATE FUNCTION og_usage_messages_won() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on AS $$
BEGIN
    PERFORM og_usage_add(array_agg(y.t), array_agg(y.d), array_agg(y.c), array_agg(0::bigint),
                         array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint),
                         array_agg(0::bigint), array_agg(0::bigint), array_agg(0::bigint), array_agg(y.w),
                         array_agg(y.sv))
    FROM (SELECT z.t, z.d, z.c, sum(z.sign)::bigint AS w, sum(z.sign * z.sv)::bigint AS sv
          FROM (SELECT n.tenant_id AS t, og_usage_day(n.created_at) AS d, w.c, w.sign,
                    coalesce((SELECT CASE WHEN w.c <> 'sms' AND a.cost_micros IS NOT NULL
                                          THEN a.sms_equiv_micros - a.cost_micros END
                              FROM attempts a
                              WHERE a.tenant_id = n.tenant_id AND a.reference = n.reference AND a.channel = w.c
                                  AND a.status = 'sent'
                              ORDER BY a.seq DESC LIMIT 1), 0) AS sv
                FROM new_rows n
                JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference
                CROSS JOIN LATERAL (VALUES (o.winning_channel, -1), (n.winning_channel, 1)) AS w(c, sign)
                WHERE o.winning_channel IS DISTINCT FROM n.winning_channel AND w.c IS NOT NULL
                    AND n.delivery_mode = 'fallback' AND cardinality(n.channels) > 1) z
          GROUP BY 1, 2, 3) y
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_usage_won AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_messages_won();

-- Attempts and SMS records: each row's counts with a sign (1 new, -1 old), added on its day.
-- An attempt counts on its message's day, in its channel's row. An SMS record of the SMS route
-- or an OTP counts as a message of its own on its day ('' row: messages, at its insert) with
-- its one sms attempt; a unified send's SMS record (source 'omni') brings only the segments of
-- its accepted SMS to its message's sms row.
CREATE FUNCTION og_usage_rows_add(p_t uuid[], p_r text[], p_ch text[], p_src text[], p_at timestamptz[],
                                  p_st text[], p_ds text[], p_cost bigint[], p_seg integer[], p_sign bigint[],
                                  p_new boolean[])
RETURNS void
LANGUAGE sql AS $$
    SELECT og_usage_add(array_agg(y.t), array_agg(y.d), array_agg(y.c), array_agg(y.m), array_agg(y.a),
                        array_agg(y.ac), array_agg(y.de), array_agg(y.rd), array_agg(y.f), array_agg(y.s),
                        array_agg(y.co), array_agg(0::bigint), array_agg(0::bigint))
    FROM (SELECT z.t, z.d, v.c, sum(z.sign * v.m)::bigint AS m, sum(z.sign * v.a)::bigint AS a,
              sum(z.sign * v.ac)::bigint AS ac, sum(z.sign * v.de)::bigint AS de, sum(z.sign * v.rd)::bigint AS rd,
              sum(z.sign * v.f)::bigint AS f, sum(z.sign * v.s)::bigint AS s, sum(z.sign * v.co)::bigint AS co
          FROM (SELECT x.*, CASE WHEN x.src IN ('sms', 'otp') THEN og_usage_day(x.at)
                                 ELSE (SELECT og_usage_day(m.created_at) FROM messages m
                                       WHERE m.tenant_id = x.t AND m.reference = x.r) END AS d
                FROM unnest(p_t, p_r, p_ch, p_src, p_at, p_st, p_ds, p_cost, p_seg, p_sign, p_new)
                    AS x(t, r, ch, src, at, st, ds, cost, seg, sign, nw)) z
          CROSS JOIN LATERAL og_usage_counts(z.st, z.ds, z.cost) k
          CROSS JOIN LATERAL (
              -- an attempt's counts (the segments of an accepted SMS record too)
              SELECT z.ch AS c, CASE WHEN z.src = 'omni' THEN 0 ELSE k.attempts END AS m,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.attempts END AS a,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.accepted END AS ac,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.delivered END AS de,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.read END AS rd,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.failed END AS f,
                  CASE WHEN z.src IS NOT NULL THEN k.accepted * z.seg ELSE 0 END AS s,
                  CASE WHEN z.src = 'omni' THEN 0 ELSE k.cost_micros END AS co
              UNION ALL
              -- an SMS record of its own: a message on its day, once (at its insert)
              SELECT '', 1, 0, 0, 0, 0, 0, 0, 0 WHERE z.src IN ('sms', 'otp') AND z.nw) v
          WHERE z.d IS NOT NULL
          GROUP BY 1, 2, 3) y
    HAVING count(*) > 0
$$;

-- Attempts: written (the sync completion, a queue release, a step's 'pending' row).
CREATE FUNCTION og_usage_attempts_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_usage_rows_add(array_agg(n.tenant_id), array_agg(n.reference), array_agg(n.channel),
                              array_agg(NULL::text), array_agg(NULL::timestamptz), array_agg(n.status),
                              array_agg(n.delivery_status), array_agg(n.cost_micros), array_agg(0),
                              array_agg(1::bigint), array_agg(true))
    FROM new_rows n
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

-- Attempts: changed (an outcome, a delivery status, a retry after a throttle): new minus old,
-- for the rows whose counts may have changed.
CREATE FUNCTION og_usage_attempts_changed() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on AS $$
BEGIN
    PERFORM og_usage_rows_add(array_agg(x.t), array_agg(x.r), array_agg(x.c), array_agg(NULL::text),
                              array_agg(NULL::timestamptz), array_agg(x.st), array_agg(x.ds), array_agg(x.co),
                              array_agg(0), array_agg(x.sign), array_agg(false))
    FROM (SELECT n.tenant_id AS t, n.reference AS r, v.*
          FROM new_rows n
          JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference AND o.seq = n.seq
          CROSS JOIN LATERAL (VALUES (n.channel, n.status, n.delivery_status, n.cost_micros, 1::bigint),
                                     (o.channel, o.status, o.delivery_status, o.cost_micros, -1::bigint))
              AS v(c, st, ds, co, sign)
          WHERE (n.channel, n.status, n.delivery_status, n.cost_micros)
                IS DISTINCT FROM (o.channel, o.status, o.delivery_status, o.cost_micros)) x
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_usage_new AFTER INSERT ON attempts
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_attempts_new();
CREATE TRIGGER attempts_usage_changed AFTER UPDATE ON attempts
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION og_usage_attempts_changed();

-- SMS records: made (POST /api/sms/send's 'pending' one, a unified send's or an OTP's at its end).
CREATE FUNCTION og_usage_sms_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_usage_rows_add(array_agg(n.tenant_id), array_agg(n.reference), array_agg('sms'::text),
                              array_agg(n.source), array_agg(n.created_at), array_agg(n.status),
                              array_agg(n.delivery_status), array_agg(n.cost_micros), array_agg(n.segments),
                              array_agg(1::bigint), array_agg(true))
    FROM new_rows n
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

-- SMS records: changed (an outcome, a delivery status).
CREATE FUNCTION og_usage_sms_changed() RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = on SET enable_mergejoin = on AS $$
BEGIN
    PERFORM og_usage_rows_add(array_agg(x.t), array_agg(x.r), array_agg('sms'::text), array_agg(x.src),
                              array_agg(x.at), array_agg(x.st), array_agg(x.ds), array_agg(x.co), array_agg(x.seg),
                              array_agg(x.sign), array_agg(false))
    FROM (SELECT n.tenant_id AS t, n.reference AS r, n.source AS src, n.created_at AS at, v.*
          FROM new_rows n
          JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.reference = n.reference
          CROSS JOIN LATERAL (VALUES (n.status, n.delivery_status, n.cost_micros, n.segments, 1::bigint),
                                     (o.status, o.delivery_status, o.cost_micros, o.segments, -1::bigint))
              AS v(st, ds, co, seg, sign)
          WHERE (n.status, n.delivery_status, n.cost_micros, n.segments)
                IS DISTINCT FROM (o.status, o.delivery_status, o.cost_micros, o.segments)) x
    HAVING count(*) > 0;
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
