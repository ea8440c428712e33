-- Usage without triggers on messages and attempts (issue 34: keeping the totals may cost a send
-- at most 5% of its throughput). sql/025 and sql/028 made the sync send count its own rows, but
-- sql/024's statement-level triggers on messages (insert, update) and attempts (insert) stayed,
-- skipped by a WHEN: a table with a transition-table trigger has every row its statements write
-- copied into the trigger's tuplestore, and every statement reads the WHEN again, whether the
-- trigger then runs or not. A sync send paid both on its insert and its completion, with nothing
-- to count. docs/performance.md, "Costs and usage", has the figures.
--
-- Now every writer of those rows counts what it writes, in the statement or function that writes
-- it, by the same rule (sql/024's og_usage_final, og_usage_accepted, ...):
--   - messages created: msg_insert, msg_insert_many, msg_insert_unless_nowa and
--     og_msg_insert_unless_nowa_many (sql/queries/messages.sql, inline), the queue's inserts
--     (queue_insert, queue_insert_many, og_batch_insert: og_usage_messages_add);
--   - attempts written with an outcome: msg_complete (inline), og_msg_complete_many (the gateway's
--     tally, sql/028, and the statuses it adopts), og_queue_done_many and og_queue_abandon
--     (og_usage_attempts_add, the rows they insert); fallback_begin writes a 'pending' attempt,
--     which counts nothing;
--   - winning channels set or moved: msg_complete (inline), og_msg_complete_many (the tally),
--     og_queue_done_many and og_fallback_end (og_usage_won_add).
-- The triggers that stay: attempts updated (a delivery status, a step's outcome, an upsert's
-- updated row: attempts_usage_changed) and SMS records (sms_records_usage_*): their writers are
-- many and none is a sync send's. test/e2e/test_usage.py checks the totals against a count over
-- the logs both ways, for every writer above.
--
-- A rolling upgrade: an instance still running the previous version writes with its own
-- statements (msg_insert, msg_complete, fallback_end), which count nothing once this has run:
-- its sends are missing from the totals until it is replaced. Upgrade every instance together
-- (docs/operations.md), or stop the old ones before this migration.

DROP TRIGGER messages_usage_new ON messages;
DROP TRIGGER messages_usage_won ON messages;
DROP TRIGGER attempts_usage_new ON attempts;
DROP FUNCTION og_usage_messages_new();
DROP FUNCTION og_usage_messages_won();
DROP FUNCTION og_usage_attempts_new();

-- Messages created now: one per element, in its tenant's '' row of today (a message counts on
-- the day it is created: its created_at is its transaction's now()).
CREATE FUNCTION og_usage_messages_add(p_tenant uuid[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages)
    SELECT x.t, og_usage_day(now()), '', pg_backend_pid(), count(*)
    FROM unnest(p_tenant) AS x(t)
    GROUP BY 1
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = u.messages + EXCLUDED.messages;
END
$$;

-- Attempts inserted (one per element: tenant, reference, channel, status, delivery status, cost),
-- on their messages' days, in their channels' rows; 'pending' ones count nothing yet. An upsert
-- passes only the rows it inserted (attempts_usage_changed counts those it updated).
CREATE FUNCTION og_usage_attempts_add(p_tenant uuid[], p_reference text[], p_channel text[], p_status text[],
                                      p_delivery text[], p_cost bigint[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, cost_micros)
    SELECT x.t, og_usage_day(m.created_at), x.c, pg_backend_pid(), count(*), count(*), sum(og_usage_accepted(x.s)),
        sum(og_usage_delivered(x.s, x.d)), sum(og_usage_read(x.s, x.d)), sum(og_usage_failed(x.s)),
        sum(og_usage_cost(x.s, x.co))
    FROM unnest(p_tenant, p_reference, p_channel, p_status, p_delivery, p_cost) AS x(t, r, c, s, d, co)
    JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
    WHERE og_usage_final(x.s) = 1
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, attempts = u.attempts + EXCLUDED.attempts,
        accepted = u.accepted + EXCLUDED.accepted, delivered = u.delivered + EXCLUDED.delivered,
        read = u.read + EXCLUDED.read, failed = u.failed + EXCLUDED.failed,
        cost_micros = u.cost_micros + EXCLUDED.cost_micros;
END
$$;

-- Winning channels set or moved (one per element: tenant, reference, the winner before, after):
-- for a fallback message of more than one channel, the old one loses its win and the new one
-- gains it, each with what it saved against SMS (its latest accepted attempt on that channel as
-- written when this runs: call it after the attempts). sql/024's og_usage_messages_won's rule.
CREATE FUNCTION og_usage_won_add(p_tenant uuid[], p_reference text[], p_old text[], p_new text[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO usage_totals AS u (tenant_id, day, channel, shard, won, savings_micros)
    SELECT x.t, og_usage_day(m.created_at), w.c, pg_backend_pid(), sum(w.sign),
        sum(w.sign * coalesce((
            SELECT CASE WHEN w.c <> 'sms' AND a.cost_micros IS NOT NULL THEN a.sms_equiv_micros - a.cost_micros END
            FROM attempts a
            WHERE a.tenant_id = x.t AND a.reference = x.r AND a.channel = w.c AND a.status = 'sent'
            ORDER BY a.seq DESC LIMIT 1), 0))
    FROM unnest(p_tenant, p_reference, p_old, p_new) AS x(t, r, o, n)
    JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
    CROSS JOIN LATERAL (VALUES (x.o, -1), (x.n, 1)) AS w(c, sign)
    WHERE x.o IS DISTINCT FROM x.n AND w.c IS NOT NULL
        AND m.delivery_mode = 'fallback' AND cardinality(m.channels) > 1
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET won = u.won + EXCLUDED.won, savings_micros = u.savings_micros + EXCLUDED.savings_micros;
END
$$;

-- A step's attempt completed with its provider's answer (fallback_end, sql/queries/fallback.sql;
-- a statement until now): adopting delivery statuses that came first, and an accepted one made the
-- message's winning channel, the win moved from the channel it leaves (the message is locked
-- first, so the winner read is the one replaced).
CREATE FUNCTION og_fallback_end(p_tenant uuid, p_reference text, p_seq smallint, p_status text, p_pid text,
                                p_error_code text, p_error_message text, p_provider_code text, p_http integer,
                                p_latency integer, p_cost bigint, p_currency text, p_sms_equiv bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_channel text;
    v_old     text;
BEGIN
    UPDATE attempts a
    SET status = p_status, provider_message_id = p_pid, error_code = p_error_code, error_message = p_error_message,
        provider_code = p_provider_code, http_status = p_http, latency_ms = p_latency,
        cost_micros = CASE WHEN p_status = 'sent' THEN p_cost END,
        cost_currency = CASE WHEN p_status = 'sent' THEN p_currency END,
        sms_equiv_micros = CASE WHEN p_status = 'sent' THEN p_sms_equiv END,
        delivery_status = CASE WHEN p_status = 'sent' THEN coalesce(d.status, 'sent') END,
        delivered_at = d.delivered_at, read_at = d.read_at, delivery_error = d.delivery_error,
        delivery_provider_code = d.provider_code, delivery_message = d.error_message
    FROM og_delivery_of((SELECT channel FROM attempts
                         WHERE tenant_id = p_tenant AND reference = p_reference AND seq = p_seq), p_pid) AS d
    WHERE a.tenant_id = p_tenant AND a.reference = p_reference AND a.seq = p_seq
    RETURNING a.channel INTO v_channel;
    IF p_status <> 'sent' OR v_channel IS NULL THEN
        RETURN;
    END IF;
    SELECT m.winning_channel INTO v_old FROM messages m
    WHERE m.tenant_id = p_tenant AND m.reference = p_reference
    FOR NO KEY UPDATE;
    UPDATE messages SET winning_channel = v_channel WHERE tenant_id = p_tenant AND reference = p_reference;
    PERFORM og_usage_won_add(ARRAY[p_tenant], ARRAY[p_reference], ARRAY[v_old], ARRAY[v_channel]);
END
$$;

-- The functions below are their last versions (sql/018, sql/020, sql/023, sql/028) with their
-- counting added (og_queue_done_many, og_queue_abandon, og_batch_insert) or sql/025's setting
-- for the triggers removed (og_msg_insert_unless_nowa_many, og_msg_complete_many).

-- The set form of msg_insert_unless_nowa (sql/028), counting its messages as before.
CREATE OR REPLACE FUNCTION og_msg_insert_unless_nowa_many(p_tenant uuid[], p_reference text[], p_to text[],
    p_body text[], p_mode text[], p_channels text[], p_skipped jsonb[], p_fallback_on text[],
    p_after integer[], p_from text[], p_sender text[], p_template jsonb[])
RETURNS TABLE (ord bigint, reference text, left_ms bigint, day date)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH x AS (
        SELECT x.*, (SELECT ceil(extract(epoch FROM w.until - now()) * 1000)::bigint
                     FROM not_on_whatsapp w WHERE w.number = x.n AND w.until > now()) AS left_ms
        FROM unnest(p_tenant, p_reference, p_to, p_body, p_mode, p_channels, p_skipped,
            p_fallback_on, p_after, p_from, p_sender, p_template)
            WITH ORDINALITY AS x(t, r, n, b, d, c, s, o, a, w, e, p, ord)),
    ins AS (
        INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels,
            skipped, fallback_on, fallback_after_s, whatsapp_from, sms_sender, template)
        SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p
        FROM x WHERE x.left_ms IS NULL
        RETURNING tenant_id),
    -- The day's messages (a statement's rows are all created at its transaction's now()).
    k AS (
        INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
        SELECT ins.tenant_id, og_usage_day(now()), '', pg_backend_pid(), count(*)
        FROM ins
        GROUP BY 1
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
    SELECT x.ord, CASE WHEN x.left_ms IS NULL THEN x.r END, x.left_ms,
        CASE WHEN x.left_ms IS NULL THEN og_usage_day(now()) END FROM x;
END
$$;

-- The set form of msg_complete (sql/028): its attempts and winners are the gateway's to count
-- (usage_add), the delivery statuses it adopts its own, as before.
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_adopted boolean;
BEGIN
    WITH x AS (
        SELECT * FROM unnest(p_tenant, p_reference, p_status, p_winner, p_attempts, p_goes_on)
            AS x(tenant_id, reference, status, winner, attempts, goes_on)),
    a AS (
        INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
            error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
            delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
            delivery_message, content, cost_micros, cost_currency, sms_equiv_micros)
        SELECT x.tenant_id, x.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0),
            CASE WHEN y.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code, d.error_message, y.content,
            CASE WHEN y.status = 'sent' THEN y.cost_micros END, CASE WHEN y.status = 'sent' THEN y.currency END,
            CASE WHEN y.status = 'sent' THEN y.sms_equiv_micros END
        FROM x CROSS JOIN LATERAL json_to_recordset(x.attempts) AS y(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint,
            content text, cost_micros bigint, currency text, sms_equiv_micros bigint)
        LEFT JOIN LATERAL og_delivery_of(y.channel, y.provider_message_id) AS d
            ON y.status = 'sent'
        RETURNING tenant_id, reference, status, delivery_status),
    -- The rule of msg_complete (og_message_delivery, sql/005), per message of the batch.
    s AS (
        SELECT tenant_id, reference, bool_or(delivery_status = 'read') AS is_read,
            bool_or(delivery_status = 'delivered') AS is_delivered,
            bool_and(delivery_status IN ('failed', 'undelivered')) AS all_failed
        FROM a WHERE status = 'sent'
        GROUP BY tenant_id, reference),
    u AS (
        UPDATE messages m
        SET status = CASE WHEN x.status <> 'sent' THEN x.status
                          WHEN s.is_read THEN 'read'
                          WHEN s.is_delivered THEN 'delivered'
                          WHEN s.all_failed THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                          ELSE 'sent' END,
            winning_channel = x.winner, completed_at = now()
        FROM x LEFT JOIN s ON s.tenant_id = x.tenant_id AND s.reference = x.reference
        WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown'))
    -- Whether an attempt adopted a delivery status that counts (delivered or read).
    SELECT coalesce(bool_or(a.delivery_status IN ('delivered', 'read')), false) INTO v_adopted FROM a;
    -- Rarely (a callback that beat the completion, API.md §10): delivered and read in the
    -- attempts' rows, on their messages' day. A sync send's attempts are all written here, so
    -- its messages' accepted attempts with such a status are the ones just adopted.
    IF v_adopted THEN
        INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, delivered, read)
        SELECT a.tenant_id, og_usage_day(m.created_at), a.channel, pg_backend_pid(),
            sum(og_usage_delivered(a.status, a.delivery_status)), sum(og_usage_read(a.status, a.delivery_status))
        FROM unnest(p_tenant, p_reference) AS x(tenant_id, reference)
        JOIN messages m ON m.tenant_id = x.tenant_id AND m.reference = x.reference
        JOIN attempts a ON a.tenant_id = x.tenant_id AND a.reference = x.reference
        WHERE a.status = 'sent' AND a.delivery_status IN ('delivered', 'read')
        GROUP BY 1, 2, 3
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
        SET delivered = t.delivered + EXCLUDED.delivered, read = t.read + EXCLUDED.read;
    END IF;
END
$$;

-- The outcomes of claimed queue entries (sql/023), counting the attempts they insert and the
-- winners they set.
CREATE OR REPLACE FUNCTION og_queue_done_many(p_tenant uuid[], p_ref text[], p_ch smallint[], p_owner text[],
                                   p_outcome text[], p_pid text[], p_error_code text[], p_error_message text[],
                                   p_provider_code text[], p_http integer[], p_latency integer[],
                                   p_retry_ms integer[], p_cost bigint[], p_currency text[],
                                   p_sms_equiv bigint[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
DECLARE
    -- Per release, in key order: its entry's key, what follows (retry: the same channel later),
    -- its sender, the next channel's sender (NULL: none), when to retry, whether it was the last
    -- entry a fallback could move on from.
    e_t   uuid[];
    e_r   text[];
    e_c   smallint[];
    e_o   text[];
    e_s   bigint[];
    e_nxt bigint[];
    e_at  timestamptz[];
    e_all boolean[];
    e_on  boolean[];
    e_i   integer[];     -- its place in the parameters
    e_la  timestamptz[]; -- its lease's start: its attempt's attemptedAt
    e_th  smallint[];    -- the 429s its channel answered before
    f_t   uuid[];        -- messages whose delivery-based fallback goes on
    f_r   text[];
    -- What the usage counts (og_usage_attempts_add, og_usage_won_add): the attempts inserted (a
    -- retry's row written again is attempts_usage_changed's), the winners set.
    a_t   uuid[];
    a_r   text[];
    a_c   text[];
    a_s   text[];
    a_d   text[];
    a_co  bigint[];
    w_t   uuid[];
    w_r   text[];
    w_c   text[];
    k     integer;
BEGIN
    -- The entries, locked in key order, each only while its releaser holds it.
    SELECT array_agg(y.t ORDER BY y.t, y.r, y.c), array_agg(y.r ORDER BY y.t, y.r, y.c),
        array_agg(y.c ORDER BY y.t, y.r, y.c), array_agg(y.o ORDER BY y.t, y.r, y.c),
        array_agg(y.s ORDER BY y.t, y.r, y.c),
        array_agg(CASE WHEN y.o IN ('failed', 'throttled') AND NOT y.a AND y.c + 1 < cardinality(y.ss)
                       THEN y.ss[y.c + 2] END ORDER BY y.t, y.r, y.c),
        array_agg(y.at ORDER BY y.t, y.r, y.c), array_agg(y.a ORDER BY y.t, y.r, y.c),
        array_agg(y.o = 'sent' AND NOT y.a AND y.c + 1 < cardinality(y.ss) ORDER BY y.t, y.r, y.c),
        array_agg(y.i ORDER BY y.t, y.r, y.c), array_agg(y.la ORDER BY y.t, y.r, y.c),
        array_agg(y.th ORDER BY y.t, y.r, y.c)
    INTO e_t, e_r, e_c, e_o, e_s, e_nxt, e_at, e_all, e_on, e_i, e_la, e_th
    FROM (SELECT q.tenant_id AS t, q.reference AS r, q.ch AS c, q.sender_id AS s, q.senders AS ss, q.all_mode AS a,
              CASE WHEN x.o = 'throttled' AND z.at < q.valid_until THEN 'retry' ELSE x.o END AS o, z.at,
              x.i, q.leased_at AS la, q.throttles AS th
          FROM (SELECT * FROM unnest(p_tenant, p_ref, p_ch, p_owner, p_outcome, p_retry_ms) WITH ORDINALITY
                    AS x(t, r, c, w, o, retry, i) ORDER BY 1, 2, 3) x
          JOIN LATERAL (SELECT * FROM queue_entries q
                        WHERE q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c AND q.lease_owner = x.w
                        FOR UPDATE) q ON true
          CROSS JOIN LATERAL (SELECT CASE WHEN x.o = 'throttled' THEN now() + coalesce(x.retry,
                                  1000 * least(60, 2 ^ q.throttles)::integer) * interval '1 millisecond' END AS at) z
         ) y;
    IF coalesce(cardinality(e_r), 0) <> cardinality(p_ref) THEN
        RAISE EXCEPTION 'a queue entry of this batch is not leased by its releaser any more' USING ERRCODE = 'P0001';
    END IF;
    -- The senders a provider throttled, locked in key order (as every writer of senders does).
    PERFORM 1 FROM queue_senders s
    WHERE s.id IN (SELECT x.s FROM unnest(e_s, e_o) AS x(s, o) WHERE x.o IN ('throttled', 'retry'))
    ORDER BY s.id FOR NO KEY UPDATE;
    UPDATE queue_senders s
    SET throttled_until = now() + interval '60 seconds', held_until = greatest(s.held_until, t.until),
        tokens = least(s.tokens, 0)
    FROM (SELECT x.s, max(x.at) AS until FROM unnest(e_s, e_o, e_at) AS x(s, o, at)
          WHERE x.o IN ('throttled', 'retry') GROUP BY x.s) t
    WHERE s.id = t.s;
    -- The entries: the same channel later, the next channel now, or done.
    UPDATE queue_entries q
    SET lease_owner = NULL, lease_until = NULL, due_at = x.at, throttles = q.throttles + 1
    FROM unnest(e_t, e_r, e_c, e_o, e_at) AS x(t, r, c, o, at)
    WHERE x.o = 'retry' AND q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
    UPDATE queue_entries q
    SET lease_owner = NULL, lease_until = NULL, due_at = now(), throttles = 0, ch = x.c + 1, sender_id = x.nxt
    FROM unnest(e_t, e_r, e_c, e_nxt) AS x(t, r, c, nxt)
    WHERE x.nxt IS NOT NULL AND q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
    DELETE FROM queue_entries q
    USING unnest(e_t, e_r, e_c, e_o, e_nxt) AS x(t, r, c, o, nxt)
    WHERE x.o <> 'retry' AND x.nxt IS NULL AND q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
    PERFORM og_queue_wake_sender(w.s, w.at)
    FROM (SELECT x.s, min(x.at) AS at
          FROM (SELECT nxt AS s, now() AS at FROM unnest(e_nxt) AS nxt WHERE nxt IS NOT NULL
                UNION ALL
                SELECT y.s, y.at FROM unnest(e_s, e_o, e_at) AS y(s, o, at) WHERE y.o = 'retry') x
          GROUP BY x.s ORDER BY x.s) w;
    -- The attempts, written once each, with their outcome (the lease stood for them in flight),
    -- adopting delivery statuses that came first as fallback_end does; a retry after a throttle
    -- writes its channel's row again. attemptedAt is the lease's start; throttles, the 429s its
    -- channel answered before (the entry's count). In the same statement, the messages of
    -- fallback sends, each written once (a fallback message has one entry, so one release here):
    -- the winning channel; 'queued' again while its entry waits (a retry, the next channel);
    -- else the final status, from this attempt's delivery when it was accepted ('sent' while a
    -- delivery-based fallback goes on).
    WITH att AS (
        INSERT INTO attempts AS a (tenant_id, reference, seq, channel, status, latency_ms, attempted_at, content,
                                   throttles, provider_message_id, error_code, error_message, provider_code,
                                   http_status, delivery_status, delivered_at, read_at, delivery_error,
                                   delivery_provider_code, delivery_message, cost_micros, cost_currency,
                                   sms_equiv_micros)
        -- The entries as read above (in key order, with their place in the parameters).
        SELECT x.t, x.r, x.c, m.channels[x.c + 1], CASE WHEN p_outcome[x.i] = 'sent' THEN 'sent' ELSE 'failed' END,
            p_latency[x.i], x.la,
            CASE WHEN m.channels[x.c + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END, x.th,
            p_pid[x.i], p_error_code[x.i], p_error_message[x.i], p_provider_code[x.i], p_http[x.i],
            CASE WHEN p_outcome[x.i] = 'sent' THEN coalesce(d.status, 'sent') END,
            d.delivered_at, d.read_at, d.delivery_error, d.provider_code, d.error_message,
            CASE WHEN p_outcome[x.i] = 'sent' THEN p_cost[x.i] END,
            CASE WHEN p_outcome[x.i] = 'sent' THEN p_currency[x.i] END,
            CASE WHEN p_outcome[x.i] = 'sent' THEN p_sms_equiv[x.i] END
        FROM unnest(e_t, e_r, e_c, e_i, e_la, e_th) AS x(t, r, c, i, la, th)
        JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
        LEFT JOIN LATERAL og_delivery_of(m.channels[x.c + 1], p_pid[x.i]) AS d ON p_outcome[x.i] = 'sent'
        ON CONFLICT (tenant_id, reference, seq) DO UPDATE
        SET status = EXCLUDED.status, latency_ms = EXCLUDED.latency_ms, attempted_at = EXCLUDED.attempted_at,
            throttles = EXCLUDED.throttles, provider_message_id = EXCLUDED.provider_message_id,
            error_code = EXCLUDED.error_code, error_message = EXCLUDED.error_message,
            provider_code = EXCLUDED.provider_code, http_status = EXCLUDED.http_status,
            delivery_status = EXCLUDED.delivery_status, delivered_at = EXCLUDED.delivered_at,
            read_at = EXCLUDED.read_at, delivery_error = EXCLUDED.delivery_error,
            delivery_provider_code = EXCLUDED.delivery_provider_code, delivery_message = EXCLUDED.delivery_message,
            cost_micros = EXCLUDED.cost_micros, cost_currency = EXCLUDED.cost_currency,
            sms_equiv_micros = EXCLUDED.sms_equiv_micros
        RETURNING a.tenant_id, a.reference, a.seq, a.channel, a.status, a.delivery_status, a.cost_micros,
            a.xmax = 0 AS inserted),
    u AS (
        UPDATE messages m
        SET winning_channel = CASE WHEN x.o = 'sent' THEN m.channels[x.c + 1] ELSE m.winning_channel END,
            status = CASE
                WHEN x.o = 'retry' OR x.nxt IS NOT NULL THEN 'queued'
                WHEN x.o = 'sent' THEN CASE WHEN x.fb AND m.fallback_on IS NOT NULL THEN 'sent'
                                            ELSE og_message_delivery(ARRAY[att.delivery_status]) END
                WHEN x.o = 'throttled' THEN 'expired'
                ELSE 'failed' END,
            completed_at = CASE WHEN x.o = 'retry' OR x.nxt IS NOT NULL THEN NULL ELSE now() END
        FROM unnest(e_t, e_r, e_c, e_o, e_nxt, e_all, e_on) AS x(t, r, c, o, nxt, al, fb)
        LEFT JOIN att ON att.tenant_id = x.t AND att.reference = x.r AND att.seq = x.c
        WHERE NOT x.al AND m.tenant_id = x.t AND m.reference = x.r
        RETURNING m.tenant_id, m.reference, x.fb AND m.fallback_on IS NOT NULL AS goes_on,
            CASE WHEN x.o = 'sent' THEN m.winning_channel END AS won)
    SELECT array_agg(u.tenant_id) FILTER (WHERE u.goes_on), array_agg(u.reference) FILTER (WHERE u.goes_on),
        array_agg(u.tenant_id) FILTER (WHERE u.won IS NOT NULL), array_agg(u.reference) FILTER (WHERE u.won IS NOT NULL),
        array_agg(u.won) FILTER (WHERE u.won IS NOT NULL),
        (SELECT array_agg(att.tenant_id) FROM att WHERE att.inserted),
        (SELECT array_agg(att.reference) FROM att WHERE att.inserted),
        (SELECT array_agg(att.channel) FROM att WHERE att.inserted),
        (SELECT array_agg(att.status) FROM att WHERE att.inserted),
        (SELECT array_agg(att.delivery_status) FROM att WHERE att.inserted),
        (SELECT array_agg(att.cost_micros) FROM att WHERE att.inserted)
    INTO f_t, f_r, w_t, w_r, w_c, a_t, a_r, a_c, a_s, a_d, a_co
    FROM u;
    -- Their usage. A fallback message's queue entry ends at its first accepted attempt, so the
    -- winner set here replaces none; a delivery-based fallback moves it later (og_fallback_end).
    IF a_t IS NOT NULL THEN
        PERFORM og_usage_attempts_add(a_t, a_r, a_c, a_s, a_d, a_co);
    END IF;
    IF w_t IS NOT NULL THEN
        PERFORM og_usage_won_add(w_t, w_r, array_fill(NULL::text, ARRAY[cardinality(w_t)]), w_c);
    END IF;
    -- The messages of `all` sends, after every attempt of the batch is written (two channels of
    -- one message may end in one batch): 'queued' while an entry waits; else the final status,
    -- from their accepted attempts. Two channels of one message may also end in two batches at
    -- once, each deleting its entry and seeing the other's: so the messages are locked first (in
    -- key order), and the statement after, with a snapshot taken once the other has committed,
    -- sees what it left (before, both could decide 'queued', and the message stayed so).
    IF true = ANY (e_all) THEN
        PERFORM 1 FROM messages m
        WHERE (m.tenant_id, m.reference) IN (SELECT x.t, x.r FROM unnest(e_t, e_r, e_all) AS x(t, r, al) WHERE x.al)
        ORDER BY m.tenant_id, m.reference FOR UPDATE;
        UPDATE messages m
        SET winning_channel = CASE WHEN x.o = 'sent' THEN m.channels[x.c + 1] ELSE m.winning_channel END,
            status = CASE
                WHEN w.waits THEN 'queued'
                WHEN EXISTS (SELECT 1 FROM attempts a
                             WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'sent')
                    THEN og_message_status(m.tenant_id, m.reference)
                WHEN x.o = 'throttled' THEN 'expired'
                ELSE 'failed' END,
            completed_at = CASE WHEN w.waits THEN NULL ELSE now() END
        FROM unnest(e_t, e_r, e_c, e_o, e_all) AS x(t, r, c, o, al)
        CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM queue_entries q
                                           WHERE q.tenant_id = x.t AND q.reference = x.r) AS waits) w
        WHERE x.al AND m.tenant_id = x.t AND m.reference = x.r;
    END IF;
    -- A delivery-based fallback (API.md §11) goes on from an accepted attempt as a sync send's.
    FOR k IN 1 .. coalesce(cardinality(f_t), 0) LOOP
        PERFORM og_fallback_schedule(f_t[k], f_r[k]);
    END LOOP;
END
$$;

-- Leases that ran out (sql/018), counting the 'unknown' attempts they insert.
CREATE OR REPLACE FUNCTION og_queue_abandon(p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    e record;
    n integer := 0;
    v_channel  text;
    v_inserted boolean;
BEGIN
    -- The entry, then its message (the order of a completion and a cancel), each skipped when
    -- another holds it: the claim this runs in never waits; an entry whose message is gone
    -- (retention) is deleted all the same.
    FOR e IN SELECT q.tenant_id, q.reference, q.ch, q.leased_at, q.throttles FROM queue_entries q
             WHERE q.lease_owner IS NOT NULL AND q.lease_until < now()
             ORDER BY q.lease_until LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
        PERFORM 1 FROM messages m WHERE m.tenant_id = e.tenant_id AND m.reference = e.reference
            FOR UPDATE SKIP LOCKED;
        IF NOT FOUND AND EXISTS (SELECT 1 FROM messages m
                                 WHERE m.tenant_id = e.tenant_id AND m.reference = e.reference) THEN
            CONTINUE;
        END IF;
        -- Its attempt, written now (a claim writes none): the lease stood for it.
        INSERT INTO attempts AS a (tenant_id, reference, seq, channel, status, latency_ms, attempted_at, content,
                                   throttles, error_code, error_message)
        SELECT e.tenant_id, e.reference, e.ch, m.channels[e.ch + 1], 'unknown', 0, e.leased_at,
            CASE WHEN m.channels[e.ch + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END,
            e.throttles, 'outcome_unknown',
            'the instance making this attempt stopped before recording its outcome'
        FROM messages m WHERE m.tenant_id = e.tenant_id AND m.reference = e.reference
        ON CONFLICT (tenant_id, reference, seq) DO UPDATE
        SET status = 'unknown', attempted_at = EXCLUDED.attempted_at, latency_ms = 0, provider_message_id = NULL,
            error_code = EXCLUDED.error_code, error_message = EXCLUDED.error_message, provider_code = NULL,
            http_status = NULL, throttles = EXCLUDED.throttles
        RETURNING a.channel, a.xmax = 0 INTO v_channel, v_inserted;
        -- Its usage: an attempt inserted here (one written again is attempts_usage_changed's).
        IF v_inserted THEN
            PERFORM og_usage_attempts_add(ARRAY[e.tenant_id], ARRAY[e.reference], ARRAY[v_channel],
                ARRAY['unknown'], ARRAY[NULL::text], ARRAY[NULL::bigint]);
        END IF;
        DELETE FROM queue_entries WHERE tenant_id = e.tenant_id AND reference = e.reference AND ch = e.ch;
        PERFORM og_queue_settle(e.tenant_id, e.reference, 'unknown');
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- A batch's messages (sql/020), counted as they are created.
CREATE OR REPLACE FUNCTION og_batch_insert(p_tenant uuid, p_batch text, p_rows json, p_queued integer, p_scheduled integer,
                                p_last_due_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_queue_insert_many(array_agg(p_tenant), array_agg(x.r), array_agg(x."to"), array_agg(x.text),
        array_agg(x.mode), array_agg(x.channels), array_agg(x.skipped), array_agg(x."fallbackOn"),
        array_agg(x."fallbackAfter"), array_agg(x."waFrom"), array_agg(x."smsSender"), array_agg(x.template),
        array_agg(x.due), array_agg(x.valid), array_agg(x.priority), array_agg(x.queue), p_batch)
    FROM json_to_recordset(p_rows) AS x(r text, "to" text, text text, mode text, channels text, skipped jsonb,
        "fallbackOn" text, "fallbackAfter" integer, "waFrom" text, "smsSender" text, template jsonb, due bigint,
        valid bigint, priority text, queue json);
    PERFORM og_usage_messages_add(array_fill(p_tenant, ARRAY[json_array_length(p_rows)]));
    INSERT INTO batches (tenant_id, id, total, last_due_at)
    VALUES (p_tenant, p_batch, p_queued + p_scheduled, to_timestamp(p_last_due_ms / 1000.0));
    INSERT INTO batch_counts (batch_id, shard, queued, scheduled) VALUES (p_batch, 0, p_queued, p_scheduled);
END
$$;
