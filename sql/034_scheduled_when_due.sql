-- A scheduled message is queued from its due time on, without a write (issue 31: PostgreSQL's
-- cost of a scheduled send; docs/performance.md, "Scheduled messages queued without a write").
--
-- The claim wrote each scheduled message it took 'queued' (sql/018): a new version of the row with
-- an entry in each of its seven indexes (status is one of their columns, so never a HOT update).
-- Inside one backend (test/bench/queue_burst.sql, claims of 32) that write was 14.4 us of the
-- claim's 39.4 per message and about a fifth of the drain's WAL, paid once more by every message
-- with a sendAt. And a scheduled message past its due time, waiting behind its sender's backlog,
-- still said 'scheduled', where API.md §19 calls a message due and not yet handed over 'queued'.
--
-- Now the status a reader is shown is og_message_status_now(status, due_at): 'scheduled' reads
-- 'queued' from the due time on, and the row keeps 'scheduled' until the message's outcome (or
-- its cancel, its expiry, its abandon) writes it. Everything that shows or filters a message's
-- status reads it so: the log item (og_message_item), the log filters (og_log_omni.status_now,
-- sql/queries/logs.sql) and a refused cancel (og_queue_cancel_from). A batch's messages are still
-- written 'queued' by the claim: their batch counts them by the status in their rows (sql/033).
--
-- A rolling upgrade: the functions are the database's, so every instance claims, shows and
-- cancels by these at once; an instance of the version before filters the logs by the status in
-- the row (a scheduled message in flight is then found under 'scheduled') until it is replaced.

-- The status a message is shown with: 'scheduled' is 'queued' once due (API.md §19).
CREATE FUNCTION og_message_status_now(p_status text, p_due timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_status = 'scheduled' AND p_due <= now() THEN 'queued' ELSE p_status END
$$;

-- og_message_item (sql/023), its status as shown, a scheduled message's lease shown 'pending'.
CREATE OR REPLACE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'channels', m.channels, 'status', og_message_status_now(m.status, m.due_at),
        'winningChannel', m.winning_channel,
        'fallbackOn', m.fallback_on, 'fallbackAfterSeconds', m.fallback_after_s,
        'priority', m.priority,
        'dueAt', to_char(m.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'validUntil', to_char(m.valid_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'template', CASE WHEN m.template IS NOT NULL AND NOT (m.template ->> 'wrapped')::boolean
                         THEN json_build_object('name', m.template ->> 'name',
                                                'language', m.template ->> 'language') END,
        'attempts', coalesce((
            -- An accepted attempt has its provider's id and its delivery (API.md §10); a
            -- failed one its error, and null delivery fields.
            SELECT json_agg(CASE WHEN a.status = 'sent' THEN json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'content', coalesce(a.content, 'text'), 'throttles', a.throttles,
                    'providerMessageId', a.provider_message_id, 'fallbackReason', a.fallback_reason,
                    'cost', og_cost_json(a.cost_micros, a.cost_currency),
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
                    'content', coalesce(a.content, 'text'), 'throttles', a.throttles,
                    'fallbackReason', a.fallback_reason, 'cost', NULL,
                    'error', CASE WHEN a.error_code IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.error_code,
                            'message', a.error_message, 'providerCode', a.provider_code,
                            'httpStatus', a.http_status)) END,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', NULL, 'deliveredAt', NULL, 'readAt', NULL,
                    'deliveryError', NULL, 'statusHistory', '[]'::json) END
                ORDER BY a.seq)
            -- A queued message's attempt in flight has no row yet (it is written with its
            -- outcome): its lease stands for it, 'pending' since the lease began; a retry's row
            -- of its last try gives way to it.
            FROM (SELECT a.seq, a.channel, a.status, a.latency_ms, a.content, a.throttles, a.provider_message_id,
                      a.fallback_reason, a.attempted_at, a.delivery_status, a.delivered_at, a.read_at,
                      a.delivery_error, a.delivery_provider_code, a.delivery_message, a.error_code,
                      a.error_message, a.provider_code, a.http_status, a.cost_micros, a.cost_currency
                  FROM attempts a
                  WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference
                      AND NOT (m.status IN ('queued', 'scheduled') AND EXISTS (
                          SELECT 1 FROM queue_entries q
                          WHERE q.tenant_id = a.tenant_id AND q.reference = a.reference AND q.ch = a.seq
                              AND q.lease_owner IS NOT NULL))
                  UNION ALL
                  SELECT q.ch, m.channels[q.ch + 1], 'pending', 0,
                      CASE WHEN m.channels[q.ch + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END,
                      q.throttles, NULL, NULL, q.leased_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                      NULL, NULL
                  FROM queue_entries q
                  WHERE m.status IN ('queued', 'scheduled') AND q.tenant_id = m.tenant_id AND q.reference = m.reference
                      AND q.lease_owner IS NOT NULL) a), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- sql/020's view, with the status as shown (its `status` stays the row's: the log statements'
-- index on (tenant_id, status, reference) is read by it).
CREATE OR REPLACE VIEW og_log_omni AS
SELECT m.tenant_id, m.reference, m.to_number, m.status, i AS item, m.batch_id,
    og_message_status_now(m.status, m.due_at) AS status_now
FROM messages m
CROSS JOIN LATERAL og_message_item(m) AS i;

-- og_queue_cancel_from (sql/033): a message it may not cancel is answered with its status as
-- shown; `was` stays the row's (what a batch's cancel counts from).
CREATE OR REPLACE FUNCTION og_queue_cancel_from(p_tenant uuid, p_ref text, OUT outcome text, OUT was text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref ORDER BY ch FOR UPDATE;
    SELECT status, og_message_status_now(status, due_at) INTO was, outcome
    FROM messages WHERE tenant_id = p_tenant AND reference = p_ref FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF was NOT IN ('queued', 'scheduled')
       OR EXISTS (SELECT 1 FROM queue_entries
                  WHERE tenant_id = p_tenant AND reference = p_ref AND lease_owner IS NOT NULL)
       OR EXISTS (SELECT 1 FROM attempts
                  WHERE tenant_id = p_tenant AND reference = p_ref AND status IN ('sent', 'unknown')) THEN
        RETURN;
    END IF;
    DELETE FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref;
    UPDATE messages SET status = 'canceled', completed_at = now()
    WHERE tenant_id = p_tenant AND reference = p_ref;
    outcome := 'canceled';
END
$$;

-- og_queue_claim (sql/033), a scheduled message outside a batch not written as it comes due.
CREATE OR REPLACE FUNCTION og_queue_claim(p_owner text, p_lease_ms integer, p_max integer, p_senders integer,
                                          p_abandon boolean)
RETURNS TABLE (tenant_id uuid, reference text, ch smallint, lag_ms bigint, priority smallint, channel text,
               "to" text, text text, wa_from text, sender text, template text, settings text,
               day text, first_try boolean, wins boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off AS $$
#variable_conflict use_column
DECLARE
    s      queue_senders%ROWTYPE;
    eff    double precision;
    tok    double precision;
    p      integer;
    got    integer;
    taken  integer := 0;
    gone   integer := 0; -- entries expired by this claim: at most 1000, the rest by the next ones
    nxt    timestamptz;
    c_t    uuid[] := '{}';
    c_r    text[] := '{}';
    c_ch   smallint[] := '{}';
    c_lag  bigint[] := '{}';
    c_pri  smallint[] := '{}';
    c_th   smallint[] := '{}'; -- the 429s its channel answered before (0: its attempt's row is not written yet)
    c_tid  tid[] := '{}';      -- the entries' rows, as locked: the lease writes them by address
    first  integer;     -- the first of this sender's entries in the arrays
    l_due  timestamptz; -- the last entry of the last page read at this priority: the next page starts after it
    l_id   bigint;
    pg_t   uuid[];      -- a page's entries taken
    pg_r   text[];
    pg_ch  smallint[];
    pg_lag bigint[];
    pg_tok double precision;
    pg_th  smallint[];
    pg_tid tid[];
    x_t    uuid[];      -- ... and its expired ones
    x_r    text[];
    x_ch   smallint[];
    k      integer;
    b_id   text[];      -- the batch of each message whose status this claim counts itself
BEGIN
    IF p_abandon THEN
        PERFORM og_queue_abandon(p_max);
    END IF;
    -- Senders locked FOR NO KEY UPDATE: the KEY SHARE lock of an enqueue in flight does not
    -- keep a claim from taking their due entries (og_queue_wake_sender).
    FOR s IN SELECT * FROM queue_senders qs
             WHERE qs.wake_at <= now() ORDER BY qs.wake_at LIMIT p_senders FOR NO KEY UPDATE SKIP LOCKED LOOP
        EXIT WHEN taken >= p_max;
        eff := og_queue_rate(s);
        tok := least(og_queue_burst(eff),
                     s.tokens + eff * greatest(0, extract(epoch FROM now() - s.refilled_at)));
        first := cardinality(c_t) + 1;
        IF s.held_until IS NULL OR s.held_until <= now() THEN
            FOR p IN 0 .. 2 LOOP
                EXIT WHEN tok < 1 OR taken >= p_max OR gone >= 1000;
                l_due := NULL;
                l_id := NULL;
                LOOP -- pages of this priority while the tokens last, each after the last one read
                    -- Entries locked by another (a cancel, a completion) are skipped: a claim
                    -- never waits for a row (they may wait for a sender a claim holds).
                    -- Each array in the page's order from its one sorted subquery (sql/030: an
                    -- ORDER BY per aggregate was a sort per array), the last entry read last.
                    SELECT count(*)::integer, (array_agg(y.due_at))[count(*)], (array_agg(y.id))[count(*)],
                        array_agg(y.tenant_id) FILTER (WHERE y.take),
                        array_agg(y.reference) FILTER (WHERE y.take),
                        array_agg(y.ch) FILTER (WHERE y.take),
                        array_agg(greatest(0, (extract(epoch FROM now() - y.due_at) * 1000)::bigint))
                            FILTER (WHERE y.take),
                        coalesce(sum(y.cost) FILTER (WHERE y.take), 0),
                        array_agg(y.throttles) FILTER (WHERE y.take),
                        array_agg(y.tid) FILTER (WHERE y.take),
                        array_agg(y.tenant_id) FILTER (WHERE NOT y.live),
                        array_agg(y.reference) FILTER (WHERE NOT y.live),
                        array_agg(y.ch) FILTER (WHERE NOT y.live)
                    INTO got, l_due, l_id, pg_t, pg_r, pg_ch, pg_lag, pg_tok, pg_th, pg_tid, x_t, x_r, x_ch
                    FROM (SELECT z.*, z.live AND coalesce(sum(z.cost) FILTER (WHERE z.live) OVER (
                                      ORDER BY z.due_at, z.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                                  0) <= tok - 1 AS take
                          FROM (SELECT q.ctid AS tid, q.id, q.tenant_id, q.reference, q.ch, q.due_at, q.throttles,
                                    q.valid_until > now() AS live,
                                    CASE WHEN s.channel = 'sms' THEN q.segments ELSE 1 END AS cost
                                FROM queue_entries q
                                WHERE q.sender_id = s.id AND q.priority = p AND q.lease_owner IS NULL
                                    AND q.due_at <= now() AND (l_id IS NULL OR (q.due_at, q.id) > (l_due, l_id))
                                ORDER BY q.due_at, q.id
                                LIMIT greatest(1, least(ceil(tok)::integer, p_max - taken))
                                FOR UPDATE OF q SKIP LOCKED) z
                          ORDER BY z.due_at, z.id) y;
                    -- Expired now, unless its message is busy (a completion of another of its
                    -- channels, a cancel): then by a later claim.
                    FOR k IN 1 .. coalesce(cardinality(x_t), 0) LOOP
                        EXIT WHEN gone >= 1000;
                        PERFORM 1 FROM messages m WHERE m.tenant_id = x_t[k] AND m.reference = x_r[k]
                            FOR UPDATE SKIP LOCKED;
                        IF FOUND THEN
                            PERFORM og_queue_expire(x_t[k], x_r[k], x_ch[k]);
                            gone := gone + 1;
                        END IF;
                    END LOOP;
                    IF pg_t IS NOT NULL THEN
                        tok := tok - pg_tok;
                        taken := taken + cardinality(pg_t);
                        c_t := c_t || pg_t;
                        c_r := c_r || pg_r;
                        c_ch := c_ch || pg_ch;
                        c_lag := c_lag || pg_lag;
                        c_th := c_th || pg_th;
                        c_tid := c_tid || pg_tid;
                        c_pri := c_pri || array_fill(p::smallint, ARRAY[cardinality(pg_t)]);
                    END IF;
                    EXIT WHEN got = 0 OR tok < 1 OR taken >= p_max OR gone >= 1000;
                END LOOP;
            END LOOP;
        END IF;
        -- This sender's entries taken, leased in one statement (before the next-due probe), each
        -- by the address of the row its page locked (sql/031: no second lookup by key).
        IF cardinality(c_tid) >= first THEN
            UPDATE queue_entries q
            SET lease_owner = p_owner, lease_until = now() + p_lease_ms * interval '1 millisecond', leased_at = now()
            WHERE q.ctid = ANY (c_tid[first:]) AND q.lease_owner IS NULL;
            GET DIAGNOSTICS k = ROW_COUNT;
            IF k <> cardinality(c_tid) - first + 1 THEN
                RAISE EXCEPTION 'queue claim: % of % entries leased', k, cardinality(c_tid) - first + 1
                    USING ERRCODE = 'P0001';
            END IF;
        END IF;
        -- Its next wake-up, decided under FOR UPDATE: when an enqueue, a fallback or a retry
        -- holds the sender's KEY SHARE lock (og_queue_wake_sender), entries this claim cannot
        -- see yet may be due now, and the sender stays due; else the probe below, a statement
        -- after every such writer committed, sees all of its entries.
        PERFORM 1 FROM queue_senders qs WHERE qs.id = s.id FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            nxt := og_queue_next_due(s.id);
        ELSE
            nxt := now();
        END IF;
        IF nxt IS NOT NULL THEN
            nxt := greatest(nxt, s.held_until,
                            CASE WHEN tok < 1 THEN now() + (1 - tok) / eff * interval '1 second' END);
        END IF;
        UPDATE queue_senders qs SET tokens = tok, refilled_at = now(), wake_at = nxt WHERE qs.id = s.id;
    END LOOP;
    IF taken = 0 THEN
        RETURN;
    END IF;
    -- A message stays 'queued' while its attempt is in flight (its lease says 'pending'): one
    -- write of its row fewer. A scheduled one that came due is shown 'queued' from its due time
    -- (og_message_status_now) and keeps 'scheduled' in its row until its outcome writes it
    -- (sql/034: its write here was a new version of the row and an entry in each of its indexes,
    -- a third of the claim). A batch's message is written 'queued' still: its batch counts it so
    -- (og_batch_counts_add here for the ones og_batch_counted_by_writer names, the trigger for the
    -- others), and its outcome, its cancel and its abandon count from the status in its row.
    -- Each message found from the arrays by key (a LATERAL subquery cannot be joined the other
    -- way round) and written by its row's address: whatever the statistics when the generic plan
    -- was made, no plan reads messages beyond the claimed ones (sql/030; sql/023's semi-join, planned
    -- while messages looked nearly empty, read the whole primary key once per claimed message).
    -- A busy row (a cancel, which then finds its entry leased) is skipped: its completion will
    -- write its status.
    PERFORM set_config('omnigate.batch_counts', 'by_writer', true);
    WITH up AS (
        UPDATE messages m SET status = 'queued'
        WHERE m.ctid = ANY (ARRAY(
            SELECT l.ctid
            FROM unnest(c_t, c_r) AS x(t, r)
            CROSS JOIN LATERAL (SELECT mm.ctid FROM messages mm
                                WHERE mm.tenant_id = x.t AND mm.reference = x.r AND mm.status = 'scheduled'
                                    AND mm.batch_id IS NOT NULL
                                FOR UPDATE OF mm SKIP LOCKED) l))
        RETURNING m.batch_id, og_batch_counted_by_writer(m.batch_id, m.delivery_mode, m.fallback_on) AS mine)
    SELECT array_agg(up.batch_id) FILTER (WHERE up.mine) INTO b_id FROM up;
    PERFORM set_config('omnigate.batch_counts', '', true);
    IF b_id IS NOT NULL THEN
        PERFORM og_batch_counts_add(b_id, array_fill('scheduled'::text, ARRAY[cardinality(b_id)]),
                                    array_fill('queued'::text, ARRAY[cardinality(b_id)]));
    END IF;
    -- No attempt row yet: the lease stands for the attempt in flight (og_message_item shows it
    -- 'pending'); its row is written once, with its outcome (og_queue_done_many), or 'unknown'
    -- when its holder died (og_queue_abandon).
    -- What the attempts need, read here: a statement of this function sees the messages it has
    -- just locked, which the snapshot of the statement that called it may predate (a message
    -- committed meanwhile would be claimed and never released). In the arrays' order, the
    -- tenant's settings with its first message.
    RETURN QUERY
    SELECT x.t, x.r, x.c, x.l, x.p, m.channels[x.c + 1], m.to_number, m.body, coalesce(m.whatsapp_from, ''),
        coalesce(m.sms_sender, ''), coalesce(m.template::text, ''),
        CASE WHEN x.o = min(x.o) OVER (PARTITION BY x.t) THEN tn.settings::text ELSE '' END,
        og_usage_day(m.created_at)::text, x.th = 0, m.delivery_mode = 'fallback' AND cardinality(m.channels) > 1
    FROM unnest(c_t, c_r, c_ch, c_lag, c_pri, c_th) WITH ORDINALITY AS x(t, r, c, l, p, th, o)
    -- By key from the arrays, as above (OFFSET 0: kept a subquery, never turned into a join).
    CROSS JOIN LATERAL (SELECT * FROM messages mm WHERE mm.tenant_id = x.t AND mm.reference = x.r OFFSET 0) m
    CROSS JOIN LATERAL (SELECT t.settings FROM tenants t WHERE t.id = x.t OFFSET 0) tn
    ORDER BY x.o;
END
$$;
