-- Usage kept by the send's own set forms (issue 34: the totals may cost a send at most 5% of its
-- throughput). sql/024's statement-level triggers cost a sync send about 28 us of PostgreSQL
-- (30%): three per write batch (the messages inserted, the attempts inserted, the winners set),
-- each with its transition tables, its PL/pgSQL call, its join back to messages. The sync
-- send's two set forms now add their counts themselves, in the statement they already run,
-- from the rows it returns: og_msg_insert_unless_nowa_many the day's messages,
-- og_msg_complete_many the attempts and the winners (no transition table, no join to messages:
-- the UPDATE returns the day). docs/performance.md, "Costs and usage", has the figures.
--
-- The counting rule stays in one place: og_usage_final, og_usage_accepted, ... (sql/024), which
-- both the triggers and these statements call (PostgreSQL inlines them). The triggers stay for
-- every other writer (the single forms a failed batch retries with, the queue, fallback steps,
-- statuses arriving later, SMS records): a set form that counts its rows itself says so for
-- the length of its statements (the setting omnigate.usage, below), and the triggers on the
-- same tables skip (their WHEN). test/e2e/test_usage.py checks the totals against a count over the logs both ways.

-- The setting a set form above holds while its statements run (transaction-local, set and
-- cleared around them with set_config; an error rolls it back with the statement): 'inline'
-- says the running statement counts its own rows, and the triggers' WHEN skips them. Spelled
-- out in each place rather than wrapped in functions: a SQL function in a trigger's WHEN or a
-- PERFORM is planned again on every call (it is never inlined there), which cost more than the
-- triggers it was to spare (measured with callgrind, docs/performance.md).

DROP TRIGGER messages_usage_new ON messages;
DROP TRIGGER messages_usage_won ON messages;
DROP TRIGGER attempts_usage_new ON attempts;
CREATE TRIGGER messages_usage_new AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
WHEN (current_setting('omnigate.usage', true) IS DISTINCT FROM 'inline')
EXECUTE FUNCTION og_usage_messages_new();
CREATE TRIGGER messages_usage_won AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
WHEN (current_setting('omnigate.usage', true) IS DISTINCT FROM 'inline')
EXECUTE FUNCTION og_usage_messages_won();
CREATE TRIGGER attempts_usage_new AFTER INSERT ON attempts
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
WHEN (current_setting('omnigate.usage', true) IS DISTINCT FROM 'inline')
EXECUTE FUNCTION og_usage_attempts_new();

-- The set form of msg_insert_unless_nowa (sql/016) counting its messages.
CREATE OR REPLACE FUNCTION og_msg_insert_unless_nowa_many(p_tenant uuid[], p_reference text[], p_to text[],
    p_body text[], p_mode text[], p_channels text[], p_skipped jsonb[], p_fallback_on text[],
    p_after integer[], p_from text[], p_sender text[], p_template jsonb[])
RETURNS TABLE (ord bigint, reference text, left_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('omnigate.usage', 'inline', true);
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
        RETURNING tenant_id, created_at),
    -- The day's messages (og_usage_messages_new's count).
    k AS (
        INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
        SELECT ins.tenant_id, og_usage_day(ins.created_at), '', pg_backend_pid(), count(*)
        FROM ins
        GROUP BY 1, 2
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
    SELECT x.ord, CASE WHEN x.left_ms IS NULL THEN x.r END, x.left_ms FROM x;
    PERFORM set_config('omnigate.usage', '', true);
END
$$;

-- The set form of msg_complete (sql/023) counting its attempts and winners.
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM set_config('omnigate.usage', 'inline', true);
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
        RETURNING tenant_id, reference, channel, status, delivery_status, cost_micros, sms_equiv_micros),
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
        WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown')
        -- won: a pending or unknown message has no winner yet (msg_mark_unknown sets none).
        RETURNING m.tenant_id, m.reference, m.created_at,
            m.delivery_mode = 'fallback' AND cardinality(m.channels) > 1 AND m.winning_channel IS NOT NULL AS won,
            m.winning_channel),
    -- What og_usage_attempts_new and og_usage_messages_won count: the attempts in their
    -- channel's row, a fallback message's win in its winner's, on the message's day.
    k AS (
        SELECT a.tenant_id, og_usage_day(u.created_at) AS day, a.channel, og_usage_final(a.status) AS m,
            og_usage_accepted(a.status) AS ac, og_usage_delivered(a.status, a.delivery_status) AS de,
            og_usage_read(a.status, a.delivery_status) AS rd, og_usage_failed(a.status) AS f,
            og_usage_cost(a.status, a.cost_micros) AS co, 0 AS w,
            CASE WHEN u.won AND a.channel = u.winning_channel AND a.status = 'sent' AND a.channel <> 'sms'
                      AND a.cost_micros IS NOT NULL
                 THEN a.sms_equiv_micros - a.cost_micros ELSE 0 END AS sv
        FROM a JOIN u ON u.tenant_id = a.tenant_id AND u.reference = a.reference
        UNION ALL
        SELECT u.tenant_id, og_usage_day(u.created_at), u.winning_channel, 0, 0, 0, 0, 0, 0, 1, 0
        FROM u WHERE u.won)
    INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                                   failed, segments, cost_micros, won, savings_micros)
    SELECT k.tenant_id, k.day, k.channel, pg_backend_pid(), sum(k.m), sum(k.m), sum(k.ac), sum(k.de), sum(k.rd),
        sum(k.f), 0, sum(k.co), sum(k.w), sum(k.sv)
    FROM k
    GROUP BY 1, 2, 3
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = t.messages + EXCLUDED.messages, attempts = t.attempts + EXCLUDED.attempts,
        accepted = t.accepted + EXCLUDED.accepted, delivered = t.delivered + EXCLUDED.delivered,
        read = t.read + EXCLUDED.read, failed = t.failed + EXCLUDED.failed,
        segments = t.segments + EXCLUDED.segments, cost_micros = t.cost_micros + EXCLUDED.cost_micros,
        won = t.won + EXCLUDED.won, savings_micros = t.savings_micros + EXCLUDED.savings_micros;
    PERFORM set_config('omnigate.usage', '', true);
END
$$;
