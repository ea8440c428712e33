-- What accepted attempts cost (API.md §22; docs/costs.md, src/product/costs/): the cost an
-- attempt gets when its provider accepts it, priced by the gateway (og_cost_price: the rate
-- cards of sql/022) and written with the attempt by the completion writes, never rewritten when a
-- card changes. Millionths of the currency's unit, summed as integers; NULL for a failed attempt
-- or one no rate applies to.
--
-- Every attempt the gateway records: the unified send's sync attempts (msg_complete,
-- og_msg_complete_many), a queued message's (og_queue_done_many), a delivery-based fallback's
-- later ones (fallback_end), and the SMS records of POST /api/sms/send, of unified sends and of
-- OTPs.

ALTER TABLE attempts ADD COLUMN cost_micros bigint, ADD COLUMN cost_currency text,
    -- An accepted WhatsApp attempt: what its text would have cost by SMS to its recipient (the
    -- SMS rate, per segment), priced with its cost, or NULL: what fallback saved (sql/024).
    ADD COLUMN sms_equiv_micros bigint;
ALTER TABLE sms_records ADD COLUMN cost_micros bigint, ADD COLUMN cost_currency text;

-- A price in millionths as the API writes it: 4 to 6 places ("0.0450", "0.04512", "0.045125"),
-- the rule of og_price_format (src/product/costs/rates.c), which writes a send's answer
-- (test_costs.py compares the two).
CREATE FUNCTION og_price_text(micros bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN micros % 10 <> 0 THEN to_char(micros / 1000000.0, 'FM999999999990.000000')
                WHEN micros % 100 <> 0 THEN to_char(micros / 1000000.0, 'FM999999999990.00000')
                ELSE to_char(micros / 1000000.0, 'FM999999999990.0000') END
$$;

-- An attempt's `cost` (API.md §22): {"amount", "currency"}, or null.
CREATE FUNCTION og_cost_json(micros bigint, currency text) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN micros IS NOT NULL AND currency IS NOT NULL
                THEN json_build_object('amount', og_price_text(micros), 'currency', currency) END
$$;

-- The set form of msg_complete (sql/016) with each accepted attempt's cost (its JSON's
-- cost_micros and currency).
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
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
        GROUP BY tenant_id, reference)
    UPDATE messages m
    SET status = CASE WHEN x.status <> 'sent' THEN x.status
                      WHEN s.is_read THEN 'read'
                      WHEN s.is_delivered THEN 'delivered'
                      WHEN s.all_failed THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                      ELSE 'sent' END,
        winning_channel = x.winner, completed_at = now()
    FROM x LEFT JOIN s ON s.tenant_id = x.tenant_id AND s.reference = x.reference
    WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown');
END
$$;

-- The unified log item (sql/018) with each attempt's cost (null unless accepted) and the
-- message's channels in the order they were to be tried (what usage's fallback figures count).
CREATE OR REPLACE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'channels', m.channels, 'status', m.status,
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
                      AND NOT (m.status = 'queued' AND EXISTS (
                          SELECT 1 FROM queue_entries q
                          WHERE q.tenant_id = a.tenant_id AND q.reference = a.reference AND q.ch = a.seq
                              AND q.lease_owner IS NOT NULL))
                  UNION ALL
                  SELECT q.ch, m.channels[q.ch + 1], 'pending', 0,
                      CASE WHEN m.channels[q.ch + 1] = 'whatsapp_meta' AND m.template IS NOT NULL THEN 'template' END,
                      q.throttles, NULL, NULL, q.leased_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                      NULL, NULL
                  FROM queue_entries q
                  WHERE m.status = 'queued' AND q.tenant_id = m.tenant_id AND q.reference = m.reference
                      AND q.lease_owner IS NOT NULL) a), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- The SMS log item (sql/009) with the SMS's cost.
CREATE OR REPLACE VIEW og_log_sms AS
SELECT s.tenant_id, s.reference, s.to_number, s.status, s.delivery_status, s.source, json_build_object(
    'reference', s.reference, 'source', s.source, 'to', s.to_number, 'sender', s.sender,
    'text', s.body, 'segments', s.segments, 'encoding', s.encoding, 'status', s.status,
    'providerMessageId', s.provider_message_id, 'error', s.error,
    'cost', og_cost_json(s.cost_micros, s.cost_currency), 'deliveryStatus', s.delivery_status,
    'deliveredAt', to_char(s.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) AS item
FROM sms_records s;

-- og_queue_claim (sql/019) returning the message's whole template (its name, language, Meta's
-- object under "meta" and the catalogue's category, which prices it) instead of Meta's object
-- alone: src/product/queue/release.c takes both from it.
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
        coalesce(m.sms_sender, ''), coalesce(m.template::text, ''),
        CASE WHEN x.o = min(x.o) OVER (PARTITION BY x.t) THEN tn.settings::text ELSE '' END
    FROM unnest(c_t, c_r, c_ch, c_lag, c_pri) WITH ORDINALITY AS x(t, r, c, l, p, o)
    JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r
    JOIN tenants tn ON tn.id = x.t
    ORDER BY x.o;
END
$$;

-- og_queue_done_many (sql/019) with each release's cost: p_cost (millionths) and p_currency,
-- NULL without one, and p_sms_equiv (the same text by SMS, for a WhatsApp attempt); written
-- when the attempt was accepted. A new signature, so the old one goes.
DROP FUNCTION og_queue_done_many(uuid[], text[], smallint[], text[], text[], text[], text[], text[], text[],
                                 integer[], integer[], integer[]);
CREATE FUNCTION og_queue_done_many(p_tenant uuid[], p_ref text[], p_ch smallint[], p_owner text[],
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
