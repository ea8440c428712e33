-- Queued, scheduled and paced delivery (API.md §19; src/product/queue/, docs/queueing.md).
--
-- A queued send is a message row like any other, status 'queued' (due) or 'scheduled' (due
-- later), plus one queue entry per channel it waits to try (fallback: the next one; all: every
-- one). An entry names its sender: a row per (tenant, channel, sender) holding that sender's
-- token bucket. The claim (og_queue_claim) takes a sender's tokens and its due entries in one
-- transaction, under the sender row's lock: every worker of every instance shares the rate
-- without a coordinator, and two workers never claim for one sender at once.
--
-- An entry claimed is leased to its worker in the claim's own transaction, and the lease
-- stands for its attempt in flight (the message resource shows it 'pending'): the provider is
-- called only after that commit, and a worker that dies leaves a lease that expires and an
-- attempt written 'unknown' (never a second call, the rule of §15). The outcome
-- (og_queue_done_many) writes the attempt's row, once, and deletes, moves or retries the entry
-- under the lease.
--
-- Cost flat in the backlog: the claim reads each sender's entries through
-- queue_entries_next by (sender, priority, due) and stops after what the tokens allow; the
-- senders with work are found by queue_senders_wake; nothing scans the entries.

-- New statuses: 'queued', 'scheduled', 'canceled', 'expired' (messages.status has no CHECK since
-- sql/012).
ALTER TABLE messages
    ADD COLUMN due_at      timestamptz, -- a queued send's due time (sendAt, else accepted)
    ADD COLUMN valid_until timestamptz, -- ... and how long after it a provider may still get it
    ADD COLUMN priority    text;        -- 'high', 'normal', 'low'; NULL for a sync send

-- The 429s before an attempt's outcome: a throttled attempt is retried on its channel in the
-- same row (an attempt's seq is its channel's place in the message's channels, sql/009).
ALTER TABLE attempts ADD COLUMN throttles smallint NOT NULL DEFAULT 0;

CREATE TABLE queue_senders (
    id              bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       uuid             NOT NULL,
    channel         text             NOT NULL,
    sender          text             NOT NULL, -- Meta: phone number id; QR: session; SMS: sender id
    rate            double precision NOT NULL, -- per second (SMS: segments), from the settings
    tokens          double precision NOT NULL DEFAULT 0,
    refilled_at     timestamptz      NOT NULL DEFAULT now(),
    throttled_until timestamptz,               -- rate halved until then (a provider throttled it)
    held_until      timestamptz,               -- nothing released before (the provider's Retry-After)
    wake_at         timestamptz,               -- its next claim may take something; NULL: idle
    UNIQUE (tenant_id, channel, sender)
);
CREATE INDEX queue_senders_wake ON queue_senders (wake_at) WHERE wake_at IS NOT NULL;

CREATE TABLE queue_entries (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    tenant_id   uuid        NOT NULL,
    reference   text        NOT NULL,
    ch          smallint    NOT NULL, -- the channel's place in messages.channels (= its attempt's seq)
    sender_id   bigint      NOT NULL, -- queue_senders.id (no foreign key: senders are never deleted,
                                      -- and its check would lock the sender's row for every entry)
    senders     bigint[]    NOT NULL, -- the sender of each channel of the message, in order
    all_mode    boolean     NOT NULL,
    priority    smallint    NOT NULL, -- 0 high, 1 normal, 2 low
    due_at      timestamptz NOT NULL,
    valid_until timestamptz NOT NULL,
    segments    smallint    NOT NULL, -- the message's SMS segments: the tokens an attempt on sms takes
                                      -- (one on WhatsApp), whichever channel the entry is on now
    throttles   smallint    NOT NULL DEFAULT 0,
    lease_owner text,
    lease_until timestamptz,
    leased_at   timestamptz, -- the lease's start: its attempt's attemptedAt
    -- No foreign key to messages (sql/012: its lock costs every insert a WAL record); an
    -- entry whose message was pruned is claimed, not returned (no message to send), and
    -- deleted when its lease ends (og_queue_abandon).
    PRIMARY KEY (tenant_id, reference, ch)
);
CREATE INDEX queue_entries_next ON queue_entries (sender_id, priority, due_at, id) WHERE lease_owner IS NULL;
CREATE INDEX queue_entries_leases ON queue_entries (lease_until) WHERE lease_owner IS NOT NULL;

-- 0, 1, 2 of a priority's name (high first).
CREATE FUNCTION og_queue_priority(p text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE p WHEN 'high' THEN 0 WHEN 'low' THEN 2 ELSE 1 END)::smallint
$$;

-- A sender's rate now: halved for 60 s after a provider throttled it.
CREATE FUNCTION og_queue_rate(s queue_senders) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT s.rate * CASE WHEN s.throttled_until > now() THEN 0.5 ELSE 1 END
$$;

-- Tokens a sender may hold: half a second of its rate, at least one message. Below the
-- providers' own bucket (a second of the rate), so jitter between the claim and the call never
-- turns into a 429.
CREATE FUNCTION og_queue_burst(rate double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(1, rate / 2)
$$;

-- The earliest due entry of a sender not leased, or NULL: one index probe per priority.
CREATE FUNCTION og_queue_next_due(p_sender bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min(d) FROM (
        (SELECT due_at AS d FROM queue_entries
         WHERE sender_id = p_sender AND priority = 0 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
        UNION ALL
        (SELECT due_at FROM queue_entries
         WHERE sender_id = p_sender AND priority = 1 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
        UNION ALL
        (SELECT due_at FROM queue_entries
         WHERE sender_id = p_sender AND priority = 2 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)) x
$$;

-- Makes a sender's claim due no later than p_at, for entries the caller has just written (an
-- enqueue, a fallback moving on, a retry). Writes the row only when that moves its wake-up
-- earlier by more than a second, or it was idle: an enqueue behind a backlog, which is already
-- due, writes nothing and waits on no claim. Its KEY SHARE lock, held to the caller's commit,
-- is what keeps a claim from putting the sender to sleep past those entries: a claim decides a
-- sender's next wake-up (og_queue_claim) only under its FOR UPDATE lock, which conflicts with
-- this one. Either the claim holds it first, and the check below runs after that claim has
-- committed and sees its decision; or this lock comes first, the claim cannot take its own and
-- leaves the sender due. (The claim cannot see entries not yet committed: without the lock, a
-- sender due when the check ran could be put to sleep by a claim that committed before the
-- enqueue did, leaving its entries waiting forever.)
CREATE FUNCTION og_queue_wake_sender(p_sender bigint, p_at timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM queue_senders WHERE id = p_sender FOR KEY SHARE;
    UPDATE queue_senders SET wake_at = p_at
    WHERE id = p_sender AND (wake_at IS NULL OR wake_at > p_at + interval '1 second');
END
$$;

-- Queued sends, a write batch's at once (the set form of queue_insert; its single form calls
-- this with one of each): the message rows (status 'queued' or 'scheduled'), their senders
-- (made on first use in key order, so two batches making the same new senders never wait for
-- each other in a cycle; a rate kept to the settings', written only when it changed), and their
-- entries: one for the first channel (fallback) or one per channel (all), each behind its
-- sender, whose claim is made due no later than the entry (og_queue_wake_sender). p_queue, per
-- message: {"status", "senders": [{"c": channel, "s": sender, "r": rate per second, "n": tokens
-- of an attempt}]} in the message's channel order.
CREATE FUNCTION og_queue_insert_many(p_tenant uuid[], p_ref text[], p_to text[], p_text text[], p_mode text[],
                                     p_channels text[], p_skipped jsonb[], p_fallback_on text[],
                                     p_fallback_after integer[], p_wa_from text[], p_sms_sender text[],
                                     p_template jsonb[], p_due_ms bigint[], p_valid_ms bigint[],
                                     p_priority text[], p_queue json[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
BEGIN
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on,
        fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority)
    SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p, x.q ->> 'status',
        to_timestamp(x.due / 1000.0), to_timestamp(x.valid / 1000.0), x.pri
    FROM unnest(p_tenant, p_ref, p_to, p_text, p_mode, p_channels, p_skipped, p_fallback_on, p_fallback_after,
                p_wa_from, p_sms_sender, p_template, p_due_ms, p_valid_ms, p_priority, p_queue)
        AS x(t, r, n, b, d, c, s, o, a, w, e, p, due, valid, pri, q);
    -- The senders, in key order.
    INSERT INTO queue_senders (tenant_id, channel, sender, rate, tokens)
    SELECT DISTINCT ON (x.t, j.c, j.s) x.t, j.c, j.s, j.r, og_queue_burst(j.r)
    FROM unnest(p_tenant, p_queue) AS x(t, q)
    CROSS JOIN LATERAL json_to_recordset(x.q -> 'senders') AS j(c text, s text, r double precision)
    ORDER BY x.t, j.c, j.s
    ON CONFLICT (tenant_id, channel, sender) DO NOTHING;
    UPDATE queue_senders qs SET rate = w.r
    FROM (SELECT DISTINCT ON (x.t, j.c, j.s) x.t, j.c, j.s, j.r
          FROM unnest(p_tenant, p_queue) AS x(t, q)
          CROSS JOIN LATERAL json_to_recordset(x.q -> 'senders') AS j(c text, s text, r double precision)
          ORDER BY x.t, j.c, j.s) w
    WHERE qs.tenant_id = w.t AND qs.channel = w.c AND qs.sender = w.s AND qs.rate <> w.r;
    -- The entries.
    INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at,
                               valid_until, segments)
    SELECT y.t, y.r, (j.k - 1)::smallint, y.ids[j.k], y.ids, y.d = 'all', og_queue_priority(y.pri),
        to_timestamp(y.due / 1000.0), to_timestamp(y.valid / 1000.0), y.seg
    FROM (SELECT x.t, x.r, x.d, x.pri, x.due, x.valid, x.q,
              (SELECT max(v.n) FROM json_to_recordset(x.q -> 'senders') AS v(n smallint)) AS seg,
              ARRAY(SELECT qs.id
                    FROM ROWS FROM (json_to_recordset(x.q -> 'senders') AS (c text, s text))
                        WITH ORDINALITY AS v(c, s, k)
                    JOIN queue_senders qs ON qs.tenant_id = x.t AND qs.channel = v.c AND qs.sender = v.s
                    ORDER BY v.k) AS ids
          FROM unnest(p_tenant, p_ref, p_mode, p_priority, p_due_ms, p_valid_ms, p_queue)
              AS x(t, r, d, pri, due, valid, q)) y
    CROSS JOIN LATERAL generate_subscripts(y.ids, 1) AS j(k)
    WHERE j.k = 1 OR y.d = 'all';
    PERFORM og_queue_wake_sender(w.id, w.at)
    FROM (SELECT e.sender_id AS id, min(e.due_at) AS at
          FROM unnest(p_tenant, p_ref) AS x(t, r)
          JOIN queue_entries e ON e.tenant_id = x.t AND e.reference = x.r
          GROUP BY e.sender_id ORDER BY e.sender_id) w;
END
$$;

-- A message whose last entry is gone: its final status. Accepted on a channel: the status of
-- its deliveries (og_message_status, sql/006, a delivery-based fallback included); else
-- p_failed ('failed' or 'expired').
CREATE FUNCTION og_queue_settle(p_tenant uuid, p_ref text, p_failed text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref) THEN
        RETURN;
    END IF;
    UPDATE messages
    SET status = CASE WHEN EXISTS (SELECT 1 FROM attempts a
                                   WHERE a.tenant_id = p_tenant AND a.reference = p_ref AND a.status = 'sent')
                      THEN og_message_status(p_tenant, p_ref) ELSE p_failed END,
        completed_at = now()
    WHERE tenant_id = p_tenant AND reference = p_ref;
END
$$;

-- Claims due queued messages for worker p_owner: for up to p_senders senders whose claim is
-- due, oldest wake-up first, refills the sender's bucket and takes its due entries in order
-- (high, normal, low; oldest due first) while its tokens last, at most p_max in all. Entries
-- past their validity end 'expired' instead. Each entry taken is leased for p_lease_ms (its
-- lease standing for its attempt until the outcome writes it), a scheduled message becoming
-- 'queued', in this transaction. With p_abandon, first ends the leases of holders that died
-- (og_queue_abandon). Returns, per message, what its attempt needs.
CREATE FUNCTION og_queue_claim(p_owner text, p_lease_ms integer, p_max integer, p_senders integer,
                               p_abandon boolean)
RETURNS TABLE (tenant_id uuid, reference text, ch smallint, lag_ms bigint, priority smallint, channel text,
               "to" text, text text, wa_from text, sender text, template text, settings text)
LANGUAGE plpgsql
-- Planned afresh on every call, and by key only: the claimed messages are read by their primary
-- key (a join planned while the table was small would otherwise read it whole on every claim).
SET plan_cache_mode = force_custom_plan SET enable_hashjoin = off SET enable_mergejoin = off AS $$
#variable_conflict use_column
DECLARE
    s      queue_senders%ROWTYPE;
    e      record;
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
    first  integer;     -- the first of this sender's entries in the arrays
    l_due  timestamptz; -- the last entry read at this priority: the next page starts after it
    l_id   bigint;
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
                    got := 0;
                    -- Entries locked by another (a cancel, a completion) are skipped: a claim
                    -- never waits for a row (they may wait for a sender a claim holds).
                    FOR e IN SELECT q.id, q.tenant_id, q.reference, q.ch, q.due_at, q.valid_until, q.segments
                             FROM queue_entries q
                             WHERE q.sender_id = s.id AND q.priority = p AND q.lease_owner IS NULL
                                 AND q.due_at <= now() AND (l_id IS NULL OR (q.due_at, q.id) > (l_due, l_id))
                             ORDER BY q.due_at, q.id
                             LIMIT greatest(1, least(ceil(tok)::integer, p_max - taken))
                             FOR UPDATE OF q SKIP LOCKED LOOP
                        got := got + 1;
                        l_due := e.due_at;
                        l_id := e.id;
                        IF e.valid_until <= now() THEN
                            -- Expired now, unless its message is busy (a completion of another of
                            -- its channels, a cancel): then by a later claim.
                            PERFORM 1 FROM messages m WHERE m.tenant_id = e.tenant_id AND m.reference = e.reference
                                FOR UPDATE SKIP LOCKED;
                            IF FOUND THEN
                                PERFORM og_queue_expire(e.tenant_id, e.reference, e.ch);
                                gone := gone + 1;
                            END IF;
                            EXIT WHEN gone >= 1000;
                            CONTINUE;
                        END IF;
                        EXIT WHEN tok < 1 OR taken >= p_max;
                        tok := tok - CASE WHEN s.channel = 'sms' THEN e.segments ELSE 1 END;
                        taken := taken + 1;
                        c_t := c_t || e.tenant_id;
                        c_r := c_r || e.reference;
                        c_ch := c_ch || e.ch;
                        c_lag := c_lag || greatest(0, (extract(epoch FROM now() - e.due_at) * 1000)::bigint);
                        c_pri := c_pri || p::smallint;
                    END LOOP;
                    EXIT WHEN got = 0 OR tok < 1 OR taken >= p_max OR gone >= 1000;
                END LOOP;
            END LOOP;
        END IF;
        -- This sender's entries taken, leased in one statement (before the next-due probe).
        UPDATE queue_entries q
        SET lease_owner = p_owner, lease_until = now() + p_lease_ms * interval '1 millisecond', leased_at = now()
        FROM unnest(c_t[first:], c_r[first:], c_ch[first:]) AS x(t, r, c)
        WHERE q.tenant_id = x.t AND q.reference = x.r AND q.ch = x.c;
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
    -- write of its row fewer; a scheduled one that came due says so now, unless its row is busy
    -- (a cancel, which then finds its entry leased; its completion will write its status).
    UPDATE messages m SET status = 'queued'
    WHERE (m.tenant_id, m.reference) IN (
        SELECT mm.tenant_id, mm.reference FROM messages mm JOIN unnest(c_t, c_r) AS x(t, r)
            ON mm.tenant_id = x.t AND mm.reference = x.r
        WHERE mm.status = 'scheduled'
        FOR UPDATE OF mm SKIP LOCKED);
    -- No attempt row yet: the lease stands for the attempt in flight (og_message_item shows it
    -- 'pending'); its row is written once, with its outcome (og_queue_done_many), or 'unknown'
    -- when its holder died (og_queue_abandon).
    -- What the attempts need, read here: a statement of this function sees the messages it has
    -- just locked, which the snapshot of the statement that called it may predate (a message
    -- committed meanwhile would be claimed and never released).
    RETURN QUERY
    SELECT x.t, x.r, x.c, x.l, x.p, m.channels[x.c + 1], m.to_number, m.body, coalesce(m.whatsapp_from, ''),
        coalesce(m.sms_sender, ''), coalesce((m.template -> 'meta')::text, ''), tn.settings::text
    FROM unnest(c_t, c_r, c_ch, c_lag, c_pri) AS x(t, r, c, l, p)
    JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
    JOIN tenants tn ON tn.id = x.t;
END
$$;

-- An entry past its validity: gone, and its message 'expired' once no entry is left and no
-- channel accepted it.
CREATE FUNCTION og_queue_expire(p_tenant uuid, p_ref text, p_ch smallint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref AND ch = p_ch;
    PERFORM og_queue_settle(p_tenant, p_ref, 'expired');
END
$$;

-- Leases of holders that died (their lease ran out): the attempt may have reached its provider,
-- so it is never made again: it and (once no entry is left) its message become 'unknown'.
CREATE FUNCTION og_queue_abandon(p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    e record;
    n integer := 0;
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
            http_status = NULL, throttles = EXCLUDED.throttles;
        DELETE FROM queue_entries WHERE tenant_id = e.tenant_id AND reference = e.reference AND ch = e.ch;
        PERFORM og_queue_settle(e.tenant_id, e.reference, 'unknown');
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- The outcomes of claimed entries' attempts, for a write batch's releases at once (the set form
-- of queue_done; its single form calls this with one of each), under the leases of p_owner:
-- when an entry is not leased by its owner any more the transaction fails, and the batch is
-- retried one release at a time, so a holder whose lease ran out records nothing. Per release:
-- the attempt's row written (adopting delivery statuses that came first, as fallback_end),
-- then by p_outcome ('sent', 'failed', or 'throttled' = provider_rate_limited, with the
-- provider's Retry-After in p_retry_ms, NULL: 1, 2, 4 ... 60 s by the entry's throttles):
--   sent       the entry is done; the message settles (a delivery-based fallback goes on);
--   failed     fallback: the entry moves to the next channel, due now behind its sender;
--              all (or no channel left): done;
--   throttled  the same channel again after the wait while validUntil allows, the sender's
--              rate halved for 60 s and nothing of it released before the wait ends; else as
--              failed, ending 'expired' when no channel is left.
-- The message row is written once, whatever happened. Set-based: a statement per step for the
-- whole batch, reading rows by key only (the plan settings below, as og_msg_complete_many).
CREATE FUNCTION og_queue_done_many(p_tenant uuid[], p_ref text[], p_ch smallint[], p_owner text[],
                                   p_outcome text[], p_pid text[], p_error_code text[], p_error_message text[],
                                   p_provider_code text[], p_http integer[], p_latency integer[],
                                   p_retry_ms integer[])
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
    f     record;
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
    -- The attempts, written once each, with their outcome (the lease stood for them in flight),
    -- adopting delivery statuses that came first as fallback_end does; a retry after a throttle
    -- writes its channel's row again. attemptedAt is the lease's start; throttles, the 429s its
    -- channel answered before (the entry's count).
    INSERT INTO attempts AS a (tenant_id, reference, seq, channel, status, latency_ms, attempted_at, content,
                               throttles, provider_message_id, error_code, error_message, provider_code,
                               http_status, delivery_status, delivered_at, read_at, delivery_error,
                               delivery_provider_code, delivery_message)
    -- The entries as read above (in key order, with their place in the parameters).
    SELECT x.t, x.r, x.c, m.channels[x.c + 1], CASE WHEN p_outcome[x.i] = 'sent' THEN 'sent' ELSE 'failed' END,
        p_latency[x.i], x.la,
        CASE WHEN m.channels[x.c + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END, x.th,
        p_pid[x.i], p_error_code[x.i], p_error_message[x.i], p_provider_code[x.i], p_http[x.i],
        CASE WHEN p_outcome[x.i] = 'sent' THEN coalesce(d.status, 'sent') END,
        d.delivered_at, d.read_at, d.delivery_error, d.provider_code, d.error_message
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
        delivery_provider_code = EXCLUDED.delivery_provider_code, delivery_message = EXCLUDED.delivery_message;
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
    -- The messages, each written once: the winning channel; 'queued' again while an entry
    -- waits; else the final status ('sent' while a delivery-based fallback goes on).
    UPDATE messages m
    SET winning_channel = CASE WHEN x.o = 'sent' THEN m.channels[x.c + 1] ELSE m.winning_channel END,
        status = CASE
            WHEN x.fb AND m.fallback_on IS NOT NULL THEN 'sent'
            WHEN EXISTS (SELECT 1 FROM queue_entries q WHERE q.tenant_id = m.tenant_id AND q.reference = m.reference)
                THEN 'queued'
            WHEN EXISTS (SELECT 1 FROM attempts a
                         WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'sent')
                THEN og_message_status(m.tenant_id, m.reference)
            WHEN x.o = 'throttled' THEN 'expired'
            ELSE 'failed' END,
        completed_at = CASE
            WHEN EXISTS (SELECT 1 FROM queue_entries q WHERE q.tenant_id = m.tenant_id AND q.reference = m.reference)
                THEN NULL ELSE now() END
    FROM unnest(e_t, e_r, e_c, e_o, e_all, e_on) AS x(t, r, c, o, a, fb)
    WHERE m.tenant_id = x.t AND m.reference = x.r;
    -- A delivery-based fallback (API.md §11) goes on from an accepted attempt as a sync send's.
    IF NOT true = ANY (e_on) THEN
        RETURN;
    END IF;
    FOR f IN SELECT x.t, x.r FROM unnest(e_t, e_r, e_on) AS x(t, r, fb)
             JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
             WHERE x.fb AND m.fallback_on IS NOT NULL LOOP
        PERFORM og_fallback_schedule(f.t, f.r);
    END LOOP;
END
$$;

-- Cancels a queued or scheduled message no provider is working on (API.md §19): its entries go
-- and it becomes 'canceled'. Locks its entries, then the message: the order of a completion
-- (og_queue_done_many), while a claim skips what is locked. So a claim and a cancel serialize
-- without a deadlock: a message is canceled or sent, never both.
-- Returns the message's status afterwards ('canceled' when it is), NULL when there is no such
-- message.
CREATE FUNCTION og_queue_cancel(p_tenant uuid, p_ref text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    PERFORM 1 FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref ORDER BY ch FOR UPDATE;
    SELECT status INTO st FROM messages WHERE tenant_id = p_tenant AND reference = p_ref FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF st NOT IN ('queued', 'scheduled')
       OR EXISTS (SELECT 1 FROM queue_entries
                  WHERE tenant_id = p_tenant AND reference = p_ref AND lease_owner IS NOT NULL)
       OR EXISTS (SELECT 1 FROM attempts
                  WHERE tenant_id = p_tenant AND reference = p_ref AND status IN ('sent', 'unknown')) THEN
        RETURN st;
    END IF;
    DELETE FROM queue_entries WHERE tenant_id = p_tenant AND reference = p_ref;
    UPDATE messages SET status = 'canceled', completed_at = now()
    WHERE tenant_id = p_tenant AND reference = p_ref;
    RETURN 'canceled';
END
$$;

-- Events of part three: message.canceled and message.expired; message.sent when a message
-- leaves 'pending', 'unknown', 'queued' or 'scheduled' for a status that says a provider
-- accepted it.
CREATE OR REPLACE FUNCTION og_webhook_on_message() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted text[];
    types  text[] := '{}';
BEGIN
    SELECT events INTO wanted FROM tenant_webhooks
    WHERE tenant_id = NEW.tenant_id AND disabled_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF OLD.status IN ('pending', 'unknown', 'queued', 'scheduled')
            AND NEW.status IN ('sent', 'delivered', 'read', 'undelivered') AND 'message.sent' = ANY (wanted) THEN
        types := types || 'message.sent'::text;
    END IF;
    IF NEW.status IN ('failed', 'delivered', 'read', 'undelivered', 'canceled', 'expired')
            AND 'message.' || NEW.status = ANY (wanted) THEN
        types := types || ('message.' || NEW.status);
    END IF;
    IF cardinality(types) = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, next_at)
    SELECT x.id, NEW.tenant_id, x.webhook_id, x.t, NEW.reference, og_webhook_body(x.t, i), now()
    FROM og_message_item(NEW) AS i,
        LATERAL (SELECT y.id, y.t, og_webhook_id_of(y.id) AS webhook_id
                 FROM (SELECT nextval('webhook_deliveries_id') AS id, t FROM unnest(types) AS t) y) x;
    PERFORM og_webhook_wake(NEW.tenant_id);
    RETURN NULL;
END
$$;

-- The unified log item (sql/016) with a queued send's priority, due time and validity (null
-- for a sync send), and each attempt's throttles (the 429s its channel answered before).
CREATE OR REPLACE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel,
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
                    'fallbackReason', a.fallback_reason,
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
                      a.error_message, a.provider_code, a.http_status
                  FROM attempts a
                  WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference
                      AND NOT (m.status = 'queued' AND EXISTS (
                          SELECT 1 FROM queue_entries q
                          WHERE q.tenant_id = a.tenant_id AND q.reference = a.reference AND q.ch = a.seq
                              AND q.lease_owner IS NOT NULL))
                  UNION ALL
                  SELECT q.ch, m.channels[q.ch + 1], 'pending', 0,
                      CASE WHEN m.channels[q.ch + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END,
                      q.throttles, NULL, NULL, q.leased_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
                  FROM queue_entries q
                  WHERE m.status = 'queued' AND q.tenant_id = m.tenant_id AND q.reference = m.reference
                      AND q.lease_owner IS NOT NULL) a), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- The trigger of sql/011 for the new events (its WHEN keeps updates that are no event free).
DROP TRIGGER messages_webhook ON messages;
CREATE TRIGGER messages_webhook AFTER UPDATE OF status ON messages
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND NEW.status IN ('sent', 'failed', 'delivered', 'read', 'undelivered', 'canceled', 'expired'))
EXECUTE FUNCTION og_webhook_on_message();

-- Retention (sql/009) skips a message still waiting in the queue: scheduled up to 35 days ahead
-- and valid up to 48 h after (API.md §19), it is not log data yet, and its entries would be
-- left without it. It goes once it has ended. (The rows it skips are read again by each batch:
-- at most the queued messages older than the cut-off.)
CREATE OR REPLACE FUNCTION omnigate_prune_batch(p_tenant uuid, p_before text, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    refs text[];
    n    integer := 0;
BEGIN
    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM messages
         WHERE tenant_id = p_tenant AND reference < p_before AND status NOT IN ('queued', 'scheduled')
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        WITH a AS (
            DELETE FROM attempts WHERE tenant_id = p_tenant AND reference = ANY (refs)
            RETURNING channel, provider_message_id)
        DELETE FROM delivery_statuses d USING a
        WHERE d.channel = a.channel AND d.provider_message_id = a.provider_message_id;
        DELETE FROM messages WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM sms_records
         WHERE tenant_id = p_tenant AND reference < p_before
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        WITH s AS (
            DELETE FROM sms_records WHERE tenant_id = p_tenant AND reference = ANY (refs)
            RETURNING provider_message_id)
        DELETE FROM delivery_statuses d USING s
        WHERE d.channel = 'sms' AND d.provider_message_id = s.provider_message_id;
        n := n + cardinality(refs);
    END IF;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM otp_requests
         WHERE tenant_id = p_tenant AND reference < p_before
         ORDER BY reference LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        DELETE FROM otp_events WHERE tenant_id = p_tenant AND otp_reference = ANY (refs);
        DELETE FROM otp_requests WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;
    RETURN n;
END
$$;
