-- Usage of the sync send counted by the gateway (issue 34: the totals may cost a send at most 5%
-- of its throughput). sql/025 counted a completion's attempts and winner in its set form, a
-- grouped aggregate over the attempts joined to the messages: measured with callgrind on a
-- single-user backend, PostgreSQL's cost there is per statement and per executor node (their
-- start-up, each aggregate's), hardly per row, and it was paid by every set-form call, about 9%
-- of a send's instructions. The gateway knows every fact those counts need (each attempt's
-- channel, outcome and cost, the winner, the mode, the message's day) and a write batch holds many
-- completions: it now sums them by tenant, day and channel itself and writes them once per write
-- batch, in the batch's transaction, with one plain upsert (usage_add, sql/queries/usage.sql; the
-- pool's tally, og_db_set_tally). A completion alone in its write batch runs msg_complete, the
-- single form, whose attempts sql/024's triggers count as before (a one-send call of this set form
-- costs a backend a quarter more than the single form with its triggers: measured, and the
-- gateway adds nothing for it). docs/performance.md, "Costs and usage", has the figures.
--
-- What PostgreSQL still counts:
--   - the day's messages, in the insert's set form (a remembered not-on-WhatsApp number makes it
--     insert nothing, which only the statement knows); every row a statement inserts has the
--     transaction's now() as its created_at, so the count is grouped by tenant alone and the day
--     computed once per group (sql/025 computed it for every row and grouped by it too);
--   - a delivery status the completion adopts (a callback that beat the write, API.md §10), which
--     the gateway cannot know: og_msg_complete_many counts it, with a statement it runs only then
--     (a row trigger with a WHEN did it first: its WHEN is read again for every statement that
--     inserts attempts, which cost more than the check);
--   - every other writer, by sql/024's triggers, as before.
-- The gateway's rule for a completion's attempts is sql/024's (og_usage_final, ...) for what a
-- completion writes: an attempt is 'sent' or 'failed', never pending (src/product/costs/usage.c).
-- test/e2e/test_usage.py checks the totals against a count over the logs both ways.

-- The inserts return the message's day (og_usage_day(created_at)), which its completion counts
-- on: og_msg_insert_unless_nowa_many gains a column.
DROP FUNCTION og_msg_insert_unless_nowa_many(uuid[], text[], text[], text[], text[], text[], jsonb[], text[],
    integer[], text[], text[], jsonb[]);

-- The set form of msg_insert_unless_nowa (sql/016) counting its messages, with each inserted
-- message's day.
CREATE FUNCTION og_msg_insert_unless_nowa_many(p_tenant uuid[], p_reference text[], p_to text[],
    p_body text[], p_mode text[], p_channels text[], p_skipped jsonb[], p_fallback_on text[],
    p_after integer[], p_from text[], p_sender text[], p_template jsonb[])
RETURNS TABLE (ord bigint, reference text, left_ms bigint, day date)
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
        RETURNING tenant_id),
    -- The day's messages (og_usage_messages_new's count).
    k AS (
        INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
        SELECT ins.tenant_id, og_usage_day(now()), '', pg_backend_pid(), count(*)
        FROM ins
        GROUP BY 1
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
    SELECT x.ord, CASE WHEN x.left_ms IS NULL THEN x.r END, x.left_ms,
        CASE WHEN x.left_ms IS NULL THEN og_usage_day(now()) END FROM x;
    PERFORM set_config('omnigate.usage', '', true);
END
$$;

-- The set form of msg_complete (sql/023), with sql/025's setting: the attempts and the winner
-- are the gateway's to count (usage_add), and the statement-level triggers skip them; a
-- delivery status adopted here is counted here, in a statement only run when there is one.
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_adopted boolean;
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
    PERFORM set_config('omnigate.usage', '', true);
END
$$;
