-- The set forms linear in their write batch (issues 31 and 32: PostgreSQL's cost of a send under
-- load; measured with test/bench/queue_cost.sql, docs/performance.md).
--
-- og_msg_complete_many (a write batch's sync completions) decided each message's status from the
-- aggregate of the attempts it had just inserted, joined back to the batch's rows, and
-- og_queue_done_many (a write batch's releases) found each release's attempt among those it had
-- just inserted the same way. Both functions turn hash and merge joins off (a plan that reads a
-- table whole is never wanted there), so each join of two of the statement's own row sets was a
-- nested loop: n x n rows compared per call. auto_explain of a batch of 200: 19,900 and 39,800
-- rows removed by the join filters; in one backend a completion cost 80 us per message at
-- batches of 20 and 117 at 200, a release's outcome 87 and 201. A gateway under load writes
-- batches of up to 256 (OG_DB_MAX_BATCH): the cost per send grew with the load.
--
-- Now each statement reads its rows once (the attempts with the delivery statuses they adopt, the
-- releases with their messages' columns), and both of its writes take them from there: the
-- messages' statuses from an aggregate of those rows per message, by key, without a join of two
-- row sets.
--
-- og_queue_insert_many (a write batch's queued sends, or a batch) looked each (message, channel)'s
-- sender up among the batch's senders row by row: with the sends of many tenants in one write
-- batch, rows x senders (200 tenants: 160,000 rows; in one backend 50 us per message from one
-- tenant, 110-210 from 256). Each row now carries its sender's rank in the senders' order.
--
-- Signatures and results are unchanged: instances of either version run side by side.

-- og_msg_complete_many (sql/029).
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_adopted boolean;
BEGIN
    -- Each attempt of the batch with the delivery status it adopts (a message without attempts:
    -- one row without), read once (y) for the attempts' insert and the messages' statuses: the
    -- rule of msg_complete (og_message_delivery, sql/005) per message, an aggregate of its rows
    -- (s: read 1, delivered 2, every accepted one failed 3, else 0). (sql/032: the statuses were
    -- the aggregate of the attempts inserted, joined back to the batch's rows: a nested loop over
    -- both, n x n rows compared per write batch.)
    WITH y AS (
        SELECT x.o, x.tenant_id, x.reference, z.seq, z.channel,
            z.status, z.provider_message_id, z.error_code, z.error_message, z.provider_code, z.http_status,
            z.latency_ms, z.attempted_at_ms, z.content, z.cost_micros, z.currency, z.sms_equiv_micros,
            CASE WHEN z.status = 'sent' THEN coalesce(d.status, 'sent') END AS delivery_status, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code AS d_code, d.error_message AS d_message
        FROM unnest(p_tenant, p_reference, p_attempts) WITH ORDINALITY AS x(tenant_id, reference, attempts, o)
        LEFT JOIN LATERAL json_to_recordset(x.attempts) AS z(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint,
            content text, cost_micros bigint, currency text, sms_equiv_micros bigint) ON true
        LEFT JOIN LATERAL og_delivery_of(z.channel, z.provider_message_id) AS d
            ON z.status = 'sent'),
    a AS (
        INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
            error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
            delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
            delivery_message, content, cost_micros, cost_currency, sms_equiv_micros)
        SELECT y.tenant_id, y.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0), y.delivery_status, y.delivered_at,
            y.read_at, y.delivery_error, y.d_code, y.d_message, y.content,
            CASE WHEN y.status = 'sent' THEN y.cost_micros END, CASE WHEN y.status = 'sent' THEN y.currency END,
            CASE WHEN y.status = 'sent' THEN y.sms_equiv_micros END
        FROM y WHERE y.seq IS NOT NULL),
    s AS (
        SELECT y.o, CASE WHEN bool_or(y.delivery_status = 'read') THEN 1
                         WHEN bool_or(y.delivery_status = 'delivered') THEN 2
                         WHEN bool_and(y.delivery_status IN ('failed', 'undelivered')) THEN 3
                         ELSE 0 END::smallint AS code
        FROM y GROUP BY y.o),
    -- The messages, each found by key from the batch's arrays (whatever the statistics, no plan
    -- reads messages beyond them: a statement driven by s, whose size the planner guesses from
    -- the attempts' JSON, was planned on a new database as a read of all of messages per call),
    -- its code taken from s by its place in the batch (a smallint array: one lookup per row).
    u AS (
        UPDATE messages m
        SET status = CASE WHEN x.status <> 'sent' THEN x.status
                          ELSE CASE (SELECT array_agg(s.code ORDER BY s.o) FROM s)[x.o]
                                   WHEN 1 THEN 'read' WHEN 2 THEN 'delivered'
                                   WHEN 3 THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                                   ELSE 'sent' END END,
            winning_channel = x.winner, completed_at = now()
        FROM unnest(p_tenant, p_reference, p_status, p_winner, p_goes_on) WITH ORDINALITY
            AS x(tenant_id, reference, status, winner, goes_on, o)
        WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown'))
    -- Whether an attempt adopted a delivery status that counts (delivered or read).
    SELECT coalesce(bool_or(y.delivery_status IN ('delivered', 'read')), false) INTO v_adopted FROM y;
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

-- og_queue_done_many (sql/031).
CREATE OR REPLACE FUNCTION og_queue_done_many(p_tenant uuid[], p_ref text[], p_ch smallint[], p_owner text[],
                                   p_outcome text[], p_pid text[], p_error_code text[], p_error_message text[],
                                   p_provider_code text[], p_http integer[], p_latency integer[],
                                   p_retry_ms integer[], p_cost bigint[], p_currency text[],
                                   p_sms_equiv bigint[], p_count boolean)
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_seqscan = off AS $$
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
    e_tid tid[];         -- its row, as locked
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
    v_throttled boolean;
    v_retry     boolean;
    v_moves     boolean;
    v_ends      boolean; -- an entry of an outcome other than sent ends
BEGIN
    -- The entries, each only while its releaser holds it, in key order; each array in that order
    -- from one sorted subquery (an ORDER BY per aggregate was a sort per array: twelve). A sent
    -- attempt's entry always ends: it is deleted here, the delete standing for its lock (one write
    -- of its row, not a lock then a delete: sql/031). Any other outcome's entry is locked here and
    -- written below as the outcome says (retried, moved on, or deleted by address).
    WITH x AS (
        SELECT * FROM unnest(p_tenant, p_ref, p_ch, p_owner, p_outcome, p_retry_ms) WITH ORDINALITY
            AS x(t, r, c, w, o, retry, i)),
    d AS (
        DELETE FROM queue_entries q
        USING (SELECT * FROM x WHERE x.o = 'sent' ORDER BY x.t, x.r, x.c) x
        WHERE q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c AND q.lease_owner = x.w
        RETURNING q.tenant_id AS t, q.reference AS r, q.ch AS c, q.sender_id AS s, q.senders AS ss, q.all_mode AS a,
            x.o, NULL::timestamptz AS at, x.i, q.leased_at AS la, q.throttles AS th, NULL::tid AS tid),
    held AS (
        SELECT q.tenant_id AS t, q.reference AS r, q.ch AS c, q.sender_id AS s, q.senders AS ss, q.all_mode AS a,
            CASE WHEN x.o = 'throttled' AND z.at < q.valid_until THEN 'retry' ELSE x.o END AS o, z.at,
            x.i, q.leased_at AS la, q.throttles AS th, q.tid
        FROM (SELECT * FROM x WHERE x.o <> 'sent' ORDER BY x.t, x.r, x.c) x
        JOIN LATERAL (SELECT q.ctid AS tid, q.* FROM queue_entries q
                      WHERE q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c AND q.lease_owner = x.w
                      FOR UPDATE) q ON true
        CROSS JOIN LATERAL (SELECT CASE WHEN x.o = 'throttled' THEN now() + coalesce(x.retry,
                                1000 * least(60, 2 ^ q.throttles)::integer) * interval '1 millisecond' END AS at) z)
    SELECT array_agg(y.t), array_agg(y.r), array_agg(y.c), array_agg(y.o), array_agg(y.s),
        array_agg(CASE WHEN y.o IN ('failed', 'throttled') AND NOT y.a AND y.c + 1 < cardinality(y.ss)
                       THEN y.ss[y.c + 2] END),
        array_agg(y.at), array_agg(y.a), array_agg(y.o = 'sent' AND NOT y.a AND y.c + 1 < cardinality(y.ss)),
        array_agg(y.i), array_agg(y.la), array_agg(y.th), array_agg(y.tid)
    INTO e_t, e_r, e_c, e_o, e_s, e_nxt, e_at, e_all, e_on, e_i, e_la, e_th, e_tid
    FROM (SELECT * FROM d UNION ALL SELECT * FROM held ORDER BY 1, 2, 3) y;
    IF coalesce(cardinality(e_r), 0) <> cardinality(p_ref) THEN
        RAISE EXCEPTION 'a queue entry of this batch is not leased by its releaser any more' USING ERRCODE = 'P0001';
    END IF;
    -- What the batch holds, so that a statement with nothing to do is not run (each costs its
    -- executor's start and end, per call: sql/030): throttles, retries, entries moving on.
    v_throttled := 'throttled' = ANY (e_o) OR 'retry' = ANY (e_o);
    v_retry := 'retry' = ANY (e_o);
    v_moves := cardinality(array_remove(e_nxt, NULL)) > 0;
    -- (A failed or expired entry may move on instead: the delete then finds nothing of it.)
    v_ends := NOT (e_o <@ ARRAY['sent', 'retry']);
    -- The senders a provider throttled, locked in key order (as every writer of senders does).
    IF v_throttled THEN
        PERFORM 1 FROM queue_senders s
        WHERE s.id IN (SELECT x.s FROM unnest(e_s, e_o) AS x(s, o) WHERE x.o IN ('throttled', 'retry'))
        ORDER BY s.id FOR NO KEY UPDATE;
        UPDATE queue_senders s
        SET throttled_until = now() + interval '60 seconds', held_until = greatest(s.held_until, t.until),
            tokens = least(s.tokens, 0)
        FROM (SELECT x.s, max(x.at) AS until FROM unnest(e_s, e_o, e_at) AS x(s, o, at)
              WHERE x.o IN ('throttled', 'retry') GROUP BY x.s) t
        WHERE s.id = t.s;
    END IF;
    -- The entries: the same channel later, the next channel now, or done.
    IF v_retry THEN
        UPDATE queue_entries q
        SET lease_owner = NULL, lease_until = NULL, due_at = x.at, throttles = q.throttles + 1
        FROM unnest(e_t, e_r, e_c, e_o, e_at) AS x(t, r, c, o, at)
        WHERE x.o = 'retry' AND q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
    END IF;
    IF v_moves THEN
        UPDATE queue_entries q
        SET lease_owner = NULL, lease_until = NULL, due_at = now(), throttles = 0, ch = x.c + 1, sender_id = x.nxt
        FROM unnest(e_t, e_r, e_c, e_nxt) AS x(t, r, c, nxt)
        WHERE x.nxt IS NOT NULL AND q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
    END IF;
    -- (By the address of the row locked above: sql/031.)
    -- The other outcomes' entries that end (a sent attempt's was deleted above), by the address
    -- of the row locked above.
    IF v_ends THEN
        DELETE FROM queue_entries q
        WHERE q.ctid = ANY (ARRAY(SELECT x.tid FROM unnest(e_tid, e_o, e_nxt) AS x(tid, o, nxt)
                                  WHERE x.o NOT IN ('sent', 'retry') AND x.nxt IS NULL));
    END IF;
    IF v_retry OR v_moves THEN
        PERFORM og_queue_wake_sender(w.s, w.at)
        FROM (SELECT x.s, min(x.at) AS at
              FROM (SELECT nxt AS s, now() AS at FROM unnest(e_nxt) AS nxt WHERE nxt IS NOT NULL
                    UNION ALL
                    SELECT y.s, y.at FROM unnest(e_s, e_o, e_at) AS y(s, o, at) WHERE y.o = 'retry') x
              GROUP BY x.s ORDER BY x.s) w;
    END IF;
    -- The attempts, written once each, with their outcome (the lease stood for them in flight),
    -- adopting delivery statuses that came first as fallback_end does; a retry after a throttle
    -- writes its channel's row again. attemptedAt is the lease's start; throttles, the 429s its
    -- channel answered before (the entry's count). In the same statement, the messages of
    -- fallback sends, each written once (a fallback message has one entry, so one release here):
    -- the winning channel; 'queued' again while its entry waits (a retry, the next channel);
    -- else the final status, from this attempt's delivery when it was accepted ('sent' while a
    -- delivery-based fallback goes on).
    -- The releases with what their attempts and messages need, read once (y, used by both writes):
    -- the message's channel and template, the delivery status an accepted attempt adopts.
    -- (sql/032: the messages' statement found each release's attempt by joining the attempts
    -- inserted, a nested loop over them: n x n rows compared per write batch.)
    WITH y AS (
        SELECT x.t, x.r, x.c, x.i, x.la, x.th, x.o, x.nxt, x.al, x.fb, m.channels[x.c + 1] AS channel,
            m.template IS NOT NULL AS tpl, d.status AS d_status, d.delivered_at, d.read_at, d.delivery_error,
            d.provider_code AS d_code, d.error_message AS d_message
        FROM unnest(e_t, e_r, e_c, e_i, e_la, e_th, e_o, e_nxt, e_all, e_on) AS x(t, r, c, i, la, th, o, nxt, al, fb)
        JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
        LEFT JOIN LATERAL og_delivery_of(m.channels[x.c + 1], p_pid[x.i]) AS d ON p_outcome[x.i] = 'sent'),
    att AS (
        INSERT INTO attempts AS a (tenant_id, reference, seq, channel, status, latency_ms, attempted_at, content,
                                   throttles, provider_message_id, error_code, error_message, provider_code,
                                   http_status, delivery_status, delivered_at, read_at, delivery_error,
                                   delivery_provider_code, delivery_message, cost_micros, cost_currency,
                                   sms_equiv_micros)
        SELECT y.t, y.r, y.c, y.channel, CASE WHEN p_outcome[y.i] = 'sent' THEN 'sent' ELSE 'failed' END,
            p_latency[y.i], y.la, CASE WHEN y.channel = 'whatsapp_meta' AND y.tpl THEN 'template' END, y.th,
            p_pid[y.i], p_error_code[y.i], p_error_message[y.i], p_provider_code[y.i], p_http[y.i],
            CASE WHEN p_outcome[y.i] = 'sent' THEN coalesce(y.d_status, 'sent') END,
            y.delivered_at, y.read_at, y.delivery_error, y.d_code, y.d_message,
            CASE WHEN p_outcome[y.i] = 'sent' THEN p_cost[y.i] END,
            CASE WHEN p_outcome[y.i] = 'sent' THEN p_currency[y.i] END,
            CASE WHEN p_outcome[y.i] = 'sent' THEN p_sms_equiv[y.i] END
        FROM y
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
        SET winning_channel = CASE WHEN y.o = 'sent' THEN y.channel ELSE m.winning_channel END,
            status = CASE
                WHEN y.o = 'retry' OR y.nxt IS NOT NULL THEN 'queued'
                WHEN y.o = 'sent' THEN CASE WHEN y.fb AND m.fallback_on IS NOT NULL THEN 'sent'
                                            ELSE og_message_delivery(ARRAY[coalesce(y.d_status, 'sent')]) END
                WHEN y.o = 'throttled' THEN 'expired'
                ELSE 'failed' END,
            completed_at = CASE WHEN y.o = 'retry' OR y.nxt IS NOT NULL THEN NULL ELSE now() END
        FROM y
        WHERE NOT y.al AND m.tenant_id = y.t AND m.reference = y.r
        RETURNING m.tenant_id, m.reference, y.fb AND m.fallback_on IS NOT NULL AS goes_on,
            CASE WHEN y.o = 'sent' THEN m.winning_channel END AS won)
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
    -- Counted here (p_count: the single form, queue_done), or by the gateway's tally of the write
    -- batch (queue_done_many, sql/030), which knows each release's attempt, whether its row is new
    -- (the claim's first_try) and whether it wins; the delivery statuses an attempt adopted are
    -- the database's to count either way.
    IF p_count THEN
        IF a_t IS NOT NULL THEN
            PERFORM og_usage_attempts_add(a_t, a_r, a_c, a_s, a_d, a_co);
        END IF;
        IF w_t IS NOT NULL THEN
            PERFORM og_usage_won_add(w_t, w_r, array_fill(NULL::text, ARRAY[cardinality(w_t)]), w_c);
        END IF;
    ELSIF 'delivered' = ANY (a_d) OR 'read' = ANY (a_d) THEN
        INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, delivered, read)
        SELECT x.t, og_usage_day(m.created_at), x.c, pg_backend_pid(), sum(og_usage_delivered(x.s, x.d)),
            sum(og_usage_read(x.s, x.d))
        FROM unnest(a_t, a_r, a_c, a_s, a_d) AS x(t, r, c, s, d)
        JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
        WHERE x.d IN ('delivered', 'read')
        GROUP BY 1, 2, 3
        ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
        SET delivered = t.delivered + EXCLUDED.delivered, read = t.read + EXCLUDED.read;
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

-- og_queue_insert_many (sql/020, its plans as sql/031 keeps them).
CREATE OR REPLACE FUNCTION og_queue_insert_many(p_tenant uuid[], p_ref text[], p_to text[], p_text text[], p_mode text[],
                                     p_channels text[], p_skipped jsonb[], p_fallback_on text[],
                                     p_fallback_after integer[], p_wa_from text[], p_sms_sender text[],
                                     p_template jsonb[], p_due_ms bigint[], p_valid_ms bigint[], p_priority text[],
                                     p_queue json[], p_batch text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    -- Per (message, channel), in the messages' order then the channels': the message's place in
    -- the parameters, the channel's place in the message, the sender (tenant, channel, name),
    -- its rate, the tokens an attempt takes, and (once made) the sender's id.
    s_i   integer[];
    s_k   integer[];
    s_t   uuid[];
    s_c   text[];
    s_s   text[];
    s_r   double precision[];
    s_n   smallint[];
    s_id  bigint[];
    s_rk  integer[]; -- its sender's place among the batch's senders (u_*, below)
    -- ... and the message's reference, whether it is an `all` send, its priority, due time and
    -- validity (ms), so that its entries are written from these rows alone: a join back to the
    -- messages' parameters was a nested loop over both (hash and merge joins are off here), 32 ms
    -- of a 1,000-message batch's 60.
    s_ref text[];
    s_all boolean[];
    s_pri text[];
    s_due bigint[];
    s_val bigint[];
    -- The batch's senders, each once, in key order: tenant, channel, name, the rate wanted, and
    -- the row's id and rate.
    u_t    uuid[];
    u_c    text[];
    u_s    text[];
    u_r    double precision[];
    u_id   bigint[];
    u_rate double precision[];
BEGIN
    -- One sort, then each array in its order (a sorted subquery under aggregates without a
    -- join, as PostgreSQL's documentation of aggregates allows; an ORDER BY per array_agg was a
    -- sort per array).
    SELECT array_agg(z.i), array_agg(z.k), array_agg(z.t), array_agg(z.c), array_agg(z.s), array_agg(z.r),
        array_agg(z.n), array_agg(z.ref), array_agg(z.al), array_agg(z.pri), array_agg(z.due), array_agg(z.val),
        array_agg(z.rk)
    INTO s_i, s_k, s_t, s_c, s_s, s_r, s_n, s_ref, s_all, s_pri, s_due, s_val, s_rk
    FROM (SELECT x.i::integer AS i, j.k::integer AS k, x.t, j.c, j.s, j.r, j.n, x.r AS ref, x.d = 'all' AS al, x.pri,
              x.due, x.valid AS val, dense_rank() OVER (ORDER BY x.t, j.c, j.s)::integer AS rk
          FROM unnest(p_tenant, p_ref, p_mode, p_priority, p_due_ms, p_valid_ms, p_queue) WITH ORDINALITY
              AS x(t, r, d, pri, due, valid, q, i)
          CROSS JOIN LATERAL ROWS FROM (json_to_recordset(x.q -> 'senders')
                                        AS (c text, s text, r double precision, n smallint)) WITH ORDINALITY
              AS j(c, s, r, n, k)
          ORDER BY x.i, j.k) z;
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on,
        fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority, batch_id)
    SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p, x.q ->> 'status',
        to_timestamp(x.due / 1000.0), to_timestamp(x.valid / 1000.0), x.pri, p_batch
    FROM unnest(p_tenant, p_ref, p_to, p_text, p_mode, p_channels, p_skipped, p_fallback_on, p_fallback_after,
                p_wa_from, p_sms_sender, p_template, p_due_ms, p_valid_ms, p_priority, p_queue)
        AS x(t, r, n, b, d, c, s, o, a, w, e, p, due, valid, pri, q);
    -- The batch's senders, each once, in key order: made on first use (two batches making the
    -- same new senders never wait for each other in a cycle), a rate kept to the settings'
    -- (written only when it changed). Read once; written only when one is missing or changed.
    SELECT array_agg(d.t ORDER BY d.t, d.c, d.s), array_agg(d.c ORDER BY d.t, d.c, d.s),
        array_agg(d.s ORDER BY d.t, d.c, d.s), array_agg(d.r ORDER BY d.t, d.c, d.s)
    INTO u_t, u_c, u_s, u_r
    FROM (SELECT DISTINCT ON (y.t, y.c, y.s) y.t, y.c, y.s, y.r
          FROM unnest(s_t, s_c, s_s, s_r) AS y(t, c, s, r) ORDER BY y.t, y.c, y.s) d;
    -- Twice at most: the second time every sender exists, made here or by a batch that committed.
    LOOP
        SELECT array_agg(qs.id ORDER BY y.o), array_agg(qs.rate ORDER BY y.o) INTO u_id, u_rate
        FROM unnest(u_t, u_c, u_s) WITH ORDINALITY AS y(t, c, s, o)
        LEFT JOIN queue_senders qs ON qs.tenant_id = y.t AND qs.channel = y.c AND qs.sender = y.s;
        EXIT WHEN array_position(u_id, NULL) IS NULL;
        INSERT INTO queue_senders (tenant_id, channel, sender, rate, tokens)
        SELECT y.t, y.c, y.s, y.r, og_queue_burst(y.r)
        FROM unnest(u_t, u_c, u_s, u_r, u_id) WITH ORDINALITY AS y(t, c, s, r, id, o)
        WHERE y.id IS NULL ORDER BY y.o
        ON CONFLICT (tenant_id, channel, sender) DO NOTHING;
    END LOOP;
    IF EXISTS (SELECT 1 FROM unnest(u_rate, u_r) AS y(was, r) WHERE y.was <> y.r) THEN
        UPDATE queue_senders qs SET rate = y.r
        FROM unnest(u_id, u_r) AS y(id, r)
        WHERE qs.id = y.id AND qs.rate <> y.r;
    END IF;
    -- Each (message, channel)'s sender id, by its place among the batch's senders: its rank in
    -- their order, from the first statement (sql/032: it was looked up among them, row by row).
    SELECT array_agg(u_id[y.rk] ORDER BY y.o) INTO s_id FROM unnest(s_rk) WITH ORDINALITY AS y(rk, o);
    -- The entries: one for the first channel (fallback) or one per channel (all), each behind its
    -- sender, whose claim is made due no later than the entry (og_queue_wake_sender).
    INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at,
                               valid_until, segments)
    SELECT y.t, y.r, (y.k - 1)::smallint, y.id, y.ids, y.al, og_queue_priority(y.pri), to_timestamp(y.due / 1000.0),
        to_timestamp(y.val / 1000.0), y.seg
    FROM (SELECT z.*, array_agg(z.id) OVER w AS ids, max(z.n) OVER w AS seg
          FROM unnest(s_i, s_k, s_t, s_ref, s_all, s_pri, s_due, s_val, s_id, s_n)
              AS z(i, k, t, r, al, pri, due, val, id, n)
          WINDOW w AS (PARTITION BY z.i ORDER BY z.k ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) y
    WHERE y.k = 1 OR y.al;
    PERFORM og_queue_wake_sender(w.id, w.at)
    FROM (SELECT y.id, min(to_timestamp(y.due / 1000.0)) AS at
          FROM unnest(s_k, s_all, s_due, s_id) AS y(k, al, due, id)
          WHERE y.k = 1 OR y.al
          GROUP BY y.id ORDER BY y.id) w;
END
$$;
