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
-- sql/queries/logs.sql), a refused cancel (og_queue_cancel_from) and a batch's counts once all its
-- messages are due (og_batch_item). A batch counts its message 'queued' from its claim, as
-- before: the claim counts the ones it counts itself (sql/033) without writing them, and their
-- outcome and abandon count a row that still says 'scheduled' from 'queued'; the others (`all`
-- sends, delivery-based fallbacks, counted by the trigger) are still written 'queued' by the claim.
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

-- og_batch_item (sql/020), its counts as shown once every message of the batch is due (its
-- last_due_at passed: the latest sendAt of its messages, or its cancel): a message counted
-- 'scheduled' is shown 'queued' then, as the message itself is, though no claim has taken it yet.
-- Before that a due one still counts 'scheduled' (a batch whose messages have sendAts of their own):
-- the counts are kept as rows change, never computed from due times on a read.
CREATE OR REPLACE FUNCTION og_batch_item(b batches) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'batchId', b.id,
        'createdAt', to_char(b.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'total', b.total,
        'counts', (SELECT json_build_object(
                       'queued', coalesce(sum(c.queued), 0)
                           + CASE WHEN d.due THEN coalesce(sum(c.scheduled), 0) ELSE 0 END,
                       'scheduled', CASE WHEN d.due THEN 0 ELSE coalesce(sum(c.scheduled), 0) END,
                       'sent', coalesce(sum(c.sent), 0), 'delivered', coalesce(sum(c.delivered), 0),
                       'read', coalesce(sum(c.read), 0), 'failed', coalesce(sum(c.failed), 0),
                       'undelivered', coalesce(sum(c.undelivered), 0), 'expired', coalesce(sum(c.expired), 0),
                       'canceled', coalesce(sum(c.canceled), 0))
                   FROM batch_counts c WHERE c.batch_id = b.id),
        'completedAt', to_char(b.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    -- Whether its last message is due: its status as shown, the one rule of when 'scheduled' is 'queued'.
    FROM (SELECT og_message_status_now('scheduled', b.last_due_at) = 'queued' AS due) d
$$;

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

-- og_queue_claim (sql/033), a scheduled message not written as it comes due.
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
    o_t    uuid[];      -- ... and the batch messages it writes 'queued', for the trigger to count
    o_r    text[];
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
    -- half the claim). Its batch, if it has one, counts it 'queued' now: this claim counts the
    -- messages og_batch_counted_by_writer names (read, not written: nothing else writes them while
    -- their entry is leased, and their outcome and abandon count from 'queued'); the others (`all`
    -- sends, delivery-based fallbacks) are written 'queued' as before, for the trigger to count,
    -- unless the row is busy (a cancel, which then finds its entry leased; a delivery status of
    -- another channel): the trigger counts it from 'scheduled' when it is next written.
    -- Each message found from the arrays by key (a LATERAL subquery cannot be joined the other
    -- way round), the written ones by their row's address: whatever the statistics when the
    -- generic plan was made, no plan reads messages beyond the claimed ones (sql/030; sql/023's
    -- semi-join, planned while messages looked nearly empty, read the whole primary key once per
    -- claimed message).
    SELECT array_agg(l.batch_id) FILTER (WHERE l.mine), array_agg(x.t) FILTER (WHERE NOT l.mine),
        array_agg(x.r) FILTER (WHERE NOT l.mine)
    INTO b_id, o_t, o_r
    FROM unnest(c_t, c_r) AS x(t, r)
    CROSS JOIN LATERAL (SELECT mm.batch_id, og_batch_counted_by_writer(mm.batch_id, mm.delivery_mode,
                                                                       mm.fallback_on) AS mine
                        FROM messages mm
                        WHERE mm.tenant_id = x.t AND mm.reference = x.r AND mm.status = 'scheduled'
                            AND mm.batch_id IS NOT NULL) l;
    IF o_t IS NOT NULL THEN
        UPDATE messages m SET status = 'queued'
        WHERE m.ctid = ANY (ARRAY(
            SELECT l.ctid
            FROM unnest(o_t, o_r) AS x(t, r)
            CROSS JOIN LATERAL (SELECT mm.ctid FROM messages mm
                                WHERE mm.tenant_id = x.t AND mm.reference = x.r AND mm.status = 'scheduled'
                                FOR UPDATE OF mm SKIP LOCKED) l));
    END IF;
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


-- og_queue_done_many (sql/033), a batch message's row that still says 'scheduled' counted from 'queued'.
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
    -- The batch messages whose status change this function counts itself (og_batch_counts_add):
    -- their batch, their status before and after.
    b_id  text[];
    b_was text[];
    b_now text[];
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
    -- Batch messages counted by this statement (og_batch_counts_add, sql/033), not row by row:
    -- `was`, read with the release, is the status the update replaces as its batch counted it
    -- (nothing else writes the status of a message counted so while its entry is leased:
    -- og_batch_counted_by_writer); a row that still says 'scheduled' was counted 'queued' by its
    -- claim (sql/034).
    PERFORM set_config('omnigate.batch_counts', 'by_writer', true);
    WITH y AS (
        SELECT x.t, x.r, x.c, x.i, x.la, x.th, x.o, x.nxt, x.al, x.fb, m.channels[x.c + 1] AS channel,
            m.template IS NOT NULL AS tpl, CASE m.status WHEN 'scheduled' THEN 'queued' ELSE m.status END AS was,
            og_batch_counted_by_writer(m.batch_id, m.delivery_mode, m.fallback_on) AS mine, d.status AS d_status, d.delivered_at, d.read_at, d.delivery_error,
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
            CASE WHEN y.o = 'sent' THEN m.winning_channel END AS won,
            CASE WHEN y.mine THEN m.batch_id END AS b_id, y.was AS b_was, m.status AS b_now)
    SELECT array_agg(u.tenant_id) FILTER (WHERE u.goes_on), array_agg(u.reference) FILTER (WHERE u.goes_on),
        array_agg(u.tenant_id) FILTER (WHERE u.won IS NOT NULL), array_agg(u.reference) FILTER (WHERE u.won IS NOT NULL),
        array_agg(u.won) FILTER (WHERE u.won IS NOT NULL),
        (SELECT array_agg(att.tenant_id) FROM att WHERE att.inserted),
        (SELECT array_agg(att.reference) FROM att WHERE att.inserted),
        (SELECT array_agg(att.channel) FROM att WHERE att.inserted),
        (SELECT array_agg(att.status) FROM att WHERE att.inserted),
        (SELECT array_agg(att.delivery_status) FROM att WHERE att.inserted),
        (SELECT array_agg(att.cost_micros) FROM att WHERE att.inserted),
        array_agg(u.b_id) FILTER (WHERE u.b_id IS NOT NULL), array_agg(u.b_was) FILTER (WHERE u.b_id IS NOT NULL),
        array_agg(u.b_now) FILTER (WHERE u.b_id IS NOT NULL)
    INTO f_t, f_r, w_t, w_r, w_c, a_t, a_r, a_c, a_s, a_d, a_co, b_id, b_was, b_now
    FROM u;
    PERFORM set_config('omnigate.batch_counts', '', true);
    IF b_id IS NOT NULL THEN
        PERFORM og_batch_counts_add(b_id, b_was, b_now);
    END IF;
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

-- og_queue_abandon (sql/029), a batch message whose row still says 'scheduled' counted as its
-- claim counted it.
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
        -- A scheduled message's row still says so (sql/034), where its batch counts it 'queued'
        -- since its claim: written 'queued' first, as its claim counted it, for its settling below
        -- to count from (the trigger counts the others: rows their claim found busy).
        PERFORM set_config('omnigate.batch_counts', 'by_writer', true);
        UPDATE messages m SET status = 'queued'
        WHERE m.tenant_id = e.tenant_id AND m.reference = e.reference AND m.status = 'scheduled'
            AND m.batch_id IS NOT NULL;
        PERFORM set_config('omnigate.batch_counts', '', true);
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
