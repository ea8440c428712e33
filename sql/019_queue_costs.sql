-- PostgreSQL's work per queued message (issue 31's target; docs/performance.md, queue_statements):
-- the same rules as sql/018, in fewer and cheaper statements.

-- og_queue_next_due (sql/018) in PL/pgSQL, so that its statement keeps its plan (a SQL function
-- called from PL/pgSQL is planned again on every call: 0.1 ms, once per sender of every claim).
CREATE OR REPLACE FUNCTION og_queue_next_due(p_sender bigint) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
    RETURN (SELECT min(d) FROM (
        (SELECT due_at AS d FROM queue_entries
         WHERE sender_id = p_sender AND priority = 0 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
        UNION ALL
        (SELECT due_at FROM queue_entries
         WHERE sender_id = p_sender AND priority = 1 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
        UNION ALL
        (SELECT due_at FROM queue_entries
         WHERE sender_id = p_sender AND priority = 2 AND lease_owner IS NULL ORDER BY due_at LIMIT 1)) x);
END
$$;

-- og_queue_claim (sql/018) taking a sender's due entries a page at a time in one statement
-- each, not a row at a time in a PL/pgSQL loop (whose per-row expressions cost more than the
-- rows themselves): a page is locked (SKIP LOCKED), its expired entries set apart, and its live
-- ones taken in order while the tokens before each are at least one (an SMS entry takes its
-- segments, so the last one taken may leave the bucket in debt, as before). And the tenant's
-- settings are returned with the first of its messages only ('' with the others): the worker
-- opens them once per claim (src/product/queue/release.c). Its statements keep their plans
-- (sql/018 planned each afresh on every call: about a third of a claim's time, and most of an
-- empty claim's): generic plans by key only, whatever the tables' sizes when first planned (no
-- sequential scan, no hash or merge join: a join planned while messages was small would
-- otherwise read it whole on every claim; test/bench queue_scale checks the cached plans).
CREATE OR REPLACE FUNCTION og_queue_claim(p_owner text, p_lease_ms integer, p_max integer, p_senders integer,
                                          p_abandon boolean)
RETURNS TABLE (tenant_id uuid, reference text, ch smallint, lag_ms bigint, priority smallint, channel text,
               "to" text, text text, wa_from text, sender text, template text, settings text)
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
    first  integer;     -- the first of this sender's entries in the arrays
    l_due  timestamptz; -- the last entry of the last page read at this priority: the next page starts after it
    l_id   bigint;
    pg_t   uuid[];      -- a page's entries taken
    pg_r   text[];
    pg_ch  smallint[];
    pg_lag bigint[];
    pg_tok double precision;
    x_t    uuid[];      -- ... and its expired ones
    x_r    text[];
    x_ch   smallint[];
    k      integer;
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
                    SELECT count(*)::integer, (array_agg(y.due_at ORDER BY y.due_at DESC, y.id DESC))[1],
                        (array_agg(y.id ORDER BY y.due_at DESC, y.id DESC))[1],
                        array_agg(y.tenant_id ORDER BY y.due_at, y.id) FILTER (WHERE y.take),
                        array_agg(y.reference ORDER BY y.due_at, y.id) FILTER (WHERE y.take),
                        array_agg(y.ch ORDER BY y.due_at, y.id) FILTER (WHERE y.take),
                        array_agg(greatest(0, (extract(epoch FROM now() - y.due_at) * 1000)::bigint)
                                  ORDER BY y.due_at, y.id) FILTER (WHERE y.take),
                        coalesce(sum(y.cost) FILTER (WHERE y.take), 0),
                        array_agg(y.tenant_id) FILTER (WHERE NOT y.live),
                        array_agg(y.reference) FILTER (WHERE NOT y.live),
                        array_agg(y.ch) FILTER (WHERE NOT y.live)
                    INTO got, l_due, l_id, pg_t, pg_r, pg_ch, pg_lag, pg_tok, x_t, x_r, x_ch
                    FROM (SELECT z.*, z.live AND coalesce(sum(z.cost) FILTER (WHERE z.live) OVER (
                                      ORDER BY z.due_at, z.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                                  0) <= tok - 1 AS take
                          FROM (SELECT q.id, q.tenant_id, q.reference, q.ch, q.due_at, q.valid_until > now() AS live,
                                    CASE WHEN s.channel = 'sms' THEN q.segments ELSE 1 END AS cost
                                FROM queue_entries q
                                WHERE q.sender_id = s.id AND q.priority = p AND q.lease_owner IS NULL
                                    AND q.due_at <= now() AND (l_id IS NULL OR (q.due_at, q.id) > (l_due, l_id))
                                ORDER BY q.due_at, q.id
                                LIMIT greatest(1, least(ceil(tok)::integer, p_max - taken))
                                FOR UPDATE OF q SKIP LOCKED) z) y;
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
                        c_pri := c_pri || array_fill(p::smallint, ARRAY[cardinality(pg_t)]);
                    END IF;
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
    -- committed meanwhile would be claimed and never released). In the arrays' order, the
    -- tenant's settings with its first message.
    RETURN QUERY
    SELECT x.t, x.r, x.c, x.l, x.p, m.channels[x.c + 1], m.to_number, m.body, coalesce(m.whatsapp_from, ''),
        coalesce(m.sms_sender, ''), coalesce((m.template -> 'meta')::text, ''),
        CASE WHEN x.o = min(x.o) OVER (PARTITION BY x.t) THEN tn.settings::text ELSE '' END
    FROM unnest(c_t, c_r, c_ch, c_lag, c_pri) WITH ORDINALITY AS x(t, r, c, l, p, o)
    JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
    JOIN tenants tn ON tn.id = x.t
    ORDER BY x.o;
END
$$;

-- og_queue_done_many (sql/018) with fewer reads per release: the entries are changed first,
-- then the attempts and the fallback sends' messages are written in one statement, the status
-- decided from what the batch already knows (the entry that follows, the attempt's adopted
-- delivery) instead of probing the entries and attempts again per message; `all` sends, whose
-- status depends on their other channels, as before.
CREATE OR REPLACE FUNCTION og_queue_done_many(p_tenant uuid[], p_ref text[], p_ch smallint[], p_owner text[],
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
    f_t   uuid[];        -- messages whose delivery-based fallback goes on
    f_r   text[];
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
            delivery_provider_code = EXCLUDED.delivery_provider_code, delivery_message = EXCLUDED.delivery_message
        RETURNING a.tenant_id, a.reference, a.seq, a.delivery_status),
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
        RETURNING m.tenant_id, m.reference, x.fb AND m.fallback_on IS NOT NULL AS goes_on)
    SELECT array_agg(u.tenant_id) FILTER (WHERE u.goes_on), array_agg(u.reference) FILTER (WHERE u.goes_on)
    INTO f_t, f_r
    FROM u;
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

-- og_queue_insert_many (sql/018) reading each message's senders once: its JSON (p_queue) was
-- parsed by every statement that needed a part of it (the json type is parsed on every
-- access), the senders were upserted and looked up once per (message, channel), and their
-- wake-up read the entries just written back. Now one pass turns the senders into arrays, one
-- row per (message, channel), which the statements share, and the batch's distinct senders are
-- read once and written only when one is new or its rate changed.
CREATE OR REPLACE FUNCTION og_queue_insert_many(p_tenant uuid[], p_ref text[], p_to text[], p_text text[],
                                                p_mode text[], p_channels text[], p_skipped jsonb[],
                                                p_fallback_on text[], p_fallback_after integer[], p_wa_from text[],
                                                p_sms_sender text[], p_template jsonb[], p_due_ms bigint[],
                                                p_valid_ms bigint[], p_priority text[], p_queue json[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
DECLARE
    -- Per (message, channel), in the messages' order then the channels': the message's place in
    -- the parameters, the channel's place in the message, the sender (tenant, channel, name),
    -- its rate, the tokens an attempt takes, and (once made) the sender's id.
    s_i  integer[];
    s_k  integer[];
    s_t  uuid[];
    s_c  text[];
    s_s  text[];
    s_r  double precision[];
    s_n  smallint[];
    s_id bigint[];
    -- The batch's senders, each once, in key order: tenant, channel, name, the rate wanted, and
    -- the row's id and rate.
    u_t    uuid[];
    u_c    text[];
    u_s    text[];
    u_r    double precision[];
    u_id   bigint[];
    u_rate double precision[];
BEGIN
    SELECT array_agg(x.i ORDER BY x.i, j.k), array_agg(j.k::integer ORDER BY x.i, j.k),
        array_agg(x.t ORDER BY x.i, j.k), array_agg(j.c ORDER BY x.i, j.k), array_agg(j.s ORDER BY x.i, j.k),
        array_agg(j.r ORDER BY x.i, j.k), array_agg(j.n ORDER BY x.i, j.k)
    INTO s_i, s_k, s_t, s_c, s_s, s_r, s_n
    FROM unnest(p_tenant, p_queue) WITH ORDINALITY AS x(t, q, i)
    CROSS JOIN LATERAL ROWS FROM (json_to_recordset(x.q -> 'senders')
                                  AS (c text, s text, r double precision, n smallint)) WITH ORDINALITY AS j(c, s, r, n, k);
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on,
        fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority)
    SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p, x.q ->> 'status',
        to_timestamp(x.due / 1000.0), to_timestamp(x.valid / 1000.0), x.pri
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
    -- Each (message, channel)'s sender id, by its place among the batch's senders.
    SELECT array_agg(u_id[(SELECT k.o FROM unnest(u_t, u_c, u_s) WITH ORDINALITY AS k(t, c, s, o)
                           WHERE k.t = y.t AND k.c = y.c AND k.s = y.s)] ORDER BY y.o)
    INTO s_id
    FROM unnest(s_t, s_c, s_s) WITH ORDINALITY AS y(t, c, s, o);
    -- The entries: one for the first channel (fallback) or one per channel (all), each behind its
    -- sender, whose claim is made due no later than the entry (og_queue_wake_sender).
    INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at,
                               valid_until, segments)
    SELECT x.t, x.r, (k.k - 1)::smallint, g.ids[k.k], g.ids, x.d = 'all', og_queue_priority(x.pri),
        to_timestamp(x.due / 1000.0), to_timestamp(x.valid / 1000.0), g.seg
    FROM (SELECT y.i, array_agg(y.id ORDER BY y.k) AS ids, max(y.n) AS seg
          FROM unnest(s_i, s_k, s_id, s_n) AS y(i, k, id, n) GROUP BY y.i) g
    JOIN unnest(p_tenant, p_ref, p_mode, p_priority, p_due_ms, p_valid_ms) WITH ORDINALITY
        AS x(t, r, d, pri, due, valid, i) ON x.i = g.i
    CROSS JOIN LATERAL generate_subscripts(g.ids, 1) AS k(k)
    WHERE k.k = 1 OR x.d = 'all';
    PERFORM og_queue_wake_sender(w.id, w.at)
    FROM (SELECT y.id, min(to_timestamp(p_due_ms[y.i] / 1000.0)) AS at
          FROM unnest(s_i, s_k, s_id) AS y(i, k, id)
          WHERE y.k = 1 OR p_mode[y.i] = 'all'
          GROUP BY y.id ORDER BY y.id) w;
END
$$;
