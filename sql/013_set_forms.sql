-- Set forms of the send's writes (issue 20): a write batch (src/data/db.c: the writes of one
-- loop turn, one transaction) used to run each send's pending insert and completion as
-- statements of their own, and half of what PostgreSQL spent per send went into what every
-- statement costs however small (executor start-up of the plan, its expressions, the
-- aggregate, the protocol), not into the rows. The statements msg_insert_many,
-- msg_insert_unless_nowa_many and msg_complete_many (sql/queries/messages.sql) do the same
-- work for every send of a batch in one statement; a batch that fails is retried send by send
-- with the single forms, which must keep doing exactly what these do.
--
-- The completion updates messages joined with the batch's rows, and a join gives the planner a
-- choice the single form never had: on a table never analyzed (a new deployment), the plan made
-- while messages is small hashes the batch and reads messages whole, and a cached plan keeps
-- that choice as the table grows (the same trap as sql/009's). Here the only way left to it is
-- the one every size wants: for each row of the batch, its message by the primary key (and its
-- earlier delivery statuses by theirs). The settings hold for this function's own statements
-- only (and the webhook trigger it fires, whose statements read by key too).
CREATE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
BEGIN
    WITH x AS (
        SELECT * FROM unnest(p_tenant, p_reference, p_status, p_winner, p_attempts, p_goes_on)
            AS x(tenant_id, reference, status, winner, attempts, goes_on)),
    a AS (
        INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
            error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
            delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
            delivery_message)
        SELECT x.tenant_id, x.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0),
            CASE WHEN y.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code, d.error_message
        FROM x CROSS JOIN LATERAL json_to_recordset(x.attempts) AS y(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint)
        LEFT JOIN LATERAL og_delivery_of(y.channel, y.provider_message_id) AS d
            ON y.status = 'sent'
        RETURNING tenant_id, reference, status, delivery_status),
    -- The rule of msg_complete (og_message_delivery, sql/005), per message of the batch.
    s AS (
        SELECT tenant_id, reference, bool_or(delivery_status = 'read') AS is_read,
            bool_or(delivery_status = 'delivered') AS is_delivered,
            bool_and(delivery_status IN ('failed', 'undelivered')) AS all_failed
        FROM a WHERE status = 'sent'
        GROUP BY tenant_id, reference)
    UPDATE messages m
    SET status = CASE WHEN x.status <> 'sent' THEN x.status
                      WHEN s.is_read THEN 'read'
                      WHEN s.is_delivered THEN 'delivered'
                      WHEN s.all_failed THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                      ELSE 'sent' END,
        winning_channel = x.winner, completed_at = now()
    FROM x LEFT JOIN s ON s.tenant_id = x.tenant_id AND s.reference = x.reference
    WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference;
END
$$;
