-- PostgreSQL's cost of a queued message against a sync send's, measured inside one backend (no
-- client, no network, no commit), for deciding the queue's storage (issues 31 and 32: a queued
-- message's PostgreSQL CPU <= 1.3 x a sync send's, a batched one's <= 0.7 x). Three ways of doing
-- the same work, interleaved in every round so that the machine's noise hits them alike, on
-- write batches of :n messages (fallback whatsapp_meta then sms, the first channel accepting):
--
--   sync     a sync send's statements: the pending insert and the completion (set forms, as
--            test/bench/statement_cost.sql) and the write batch's usage_add;
--   queue    a queued send's today (sql/018-031): og_queue_insert_many with its usage, the
--            claim (og_queue_claim: the entries leased) and og_queue_done_many;
--   rows     a model of the design docs/performance.md proposes: no entry table, the waiting
--            state in the message row (a partial index on (sender, priority, due) of waiting
--            messages), the lease in columns no index names (a HOT update) with one row per
--            claim for dead holders, the outcome written as a sync send's completion. Only its
--            statements exist, here (the columns and the index are made in this transaction);
--            the other paths (throttles, fallback, all mode, cancel, expiry) are not modelled.
--
-- Run it on a database of its own (test/bench/run.sh's, or one made by `omnigate migrate`): it adds
-- the model's columns to messages for the run and drops them at the end, with its rows. Each round
-- commits (a queue measured inside one transaction scans every row it deleted in it again), and
-- the three ways take turns at going first; the first 10 rounds are not counted (their statements'
-- first plans). No ANALYZE first: the statistics are whatever the database has, as a deployment's
-- are (sql/030's claim reads by key whatever they say).
--
--   psql "$OMNIGATE_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f test/bench/queue_cost.sql
--
-- Optional: -v fillfactor=F (messages' fillfactor for the run, default 100: room for the
-- model's lease to be a HOT update), -v batches=N (default 300), -v n=M (messages per write
-- batch, default 20; a gateway not under load writes batches of a few: -v n=2 shows each call's
-- fixed cost, and a statement planned again at every call, sql/031). The result is a NOTICE: us per message by phase, and
-- each way's total as a ratio to sync's.
\if :{?batches}
\else
\set batches 300
\endif
\if :{?n}
\else
\set n 20
\endif
\if :{?fillfactor}
\else
\set fillfactor 100
\endif
\ir queue_calls.sql
SET og.batches = :batches;
SET og.n = :n;
INSERT INTO tenants (id, name, unified_api_enabled, settings)
VALUES ('00000000-0000-4000-8000-00000000c058', 'queue-cost', true, '{"channels": {"sms": {"sender": "ACME"}}}')
ON CONFLICT (id) DO NOTHING;
-- The model's columns and index (rolled back with the rest).
ALTER TABLE messages
    ADD COLUMN q_sender   bigint,      -- the sender whose queue it waits in (NULL: not waiting)
    ADD COLUMN q_ch       smallint,    -- the channel's place (its attempt's seq)
    ADD COLUMN q_pri      smallint,    -- 0 high, 1 normal, 2 low
    ADD COLUMN q_senders  bigint[],    -- each channel's sender
    ADD COLUMN q_segments smallint,
    ADD COLUMN lease_owner text,       -- the lease: in no index, so taking it is a HOT update
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN leased_at   timestamptz;
CREATE INDEX messages_waiting ON messages (q_sender, q_pri, due_at) WHERE q_sender IS NOT NULL;
-- Room on each page for a HOT lease (-v fillfactor=N, pages filled from here on; the sync and
-- queue ways' rows are written with it too).
ALTER TABLE messages SET (fillfactor = :fillfactor);
CREATE TABLE queue_cost_claims (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL, lease_until timestamptz NOT NULL, tenants uuid[] NOT NULL, refs text[] NOT NULL);
CREATE INDEX ON queue_cost_claims (lease_until);
-- A write batch's usage_add (sql/queries/usage.sql) as the gateway's tally makes it for n accepted
-- whatsapp_meta attempts, each winning its message.
CREATE FUNCTION pg_temp.queue_cost_usage(tenant uuid, n int) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages, attempts, accepted, failed,
        cost_micros, won, savings_micros)
    SELECT x.t, x.d, x.c, pg_backend_pid(), x.a, x.a, x.ac, x.f, x.co, x.w, x.sv
    FROM unnest(ARRAY[tenant], ARRAY[current_date], ARRAY['whatsapp_meta'], ARRAY[n::bigint], ARRAY[n::bigint],
                ARRAY[0::bigint], ARRAY[5000 * n::bigint], ARRAY[n::bigint], ARRAY[2000 * n::bigint])
        AS x(t, d, c, a, ac, f, co, w, sv)
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
    SET messages = t.messages + EXCLUDED.messages, attempts = t.attempts + EXCLUDED.attempts,
        accepted = t.accepted + EXCLUDED.accepted, failed = t.failed + EXCLUDED.failed,
        cost_micros = t.cost_micros + EXCLUDED.cost_micros, won = t.won + EXCLUDED.won,
        savings_micros = t.savings_micros + EXCLUDED.savings_micros
$$;
DO $$
DECLARE
    tenant   uuid := '00000000-0000-4000-8000-00000000c058';
    n        int := current_setting('og.n')::int;
    batches  int := current_setting('og.batches')::int;
    claim_ids bigint[];
    cid      bigint;
    -- The session's planner settings, given back after each of the model's rounds.
    planner  text[] := ARRAY[current_setting('enable_hashjoin'), current_setting('enable_mergejoin'),
                             current_setting('enable_seqscan')];
    t0       timestamptz;
    s_ins    interval := '0';
    s_fin    interval := '0';
    q_ins    interval := '0';
    q_claim  interval := '0';
    q_done   interval := '0';
    m_ins    interval := '0';
    m_claim  interval := '0';
    m_done   interval := '0';
    r        bigint;
    refs     text[];
    tos      text[];
    att      json[];
    due_ms   bigint;
    qj       json;
    c_t      uuid[];
    c_r      text[];
    c_ch     smallint[];
    u_id     bigint[];
    s        queue_senders%ROWTYPE;
    eff      double precision;
    tok      double precision;
    nxt      timestamptz;
    got      int;
    settings text;
    a_t      uuid[];
    a_r      text[];
    a_c      text[];
    a_s      text[];
    a_d      text[];
    a_co     bigint[];
    total    double precision;
    way      int;
    counted  int;
BEGIN
    qj := '{"status": "queued", "senders": [{"c": "whatsapp_meta", "s": "100200300", "r": 100000, "n": 1},
                                           {"c": "sms", "s": "ACME", "r": 100000, "n": 1}]}';
    FOR it IN 1..batches LOOP
        r := (random() * 1e15)::bigint;
        tos := (SELECT array_agg('+1999' || lpad(((r + i) % 10000000)::text, 7, '0')) FROM generate_series(1, n) i);
        due_ms := (extract(epoch FROM now()) * 1000)::bigint - 1000;

        FOREACH way IN ARRAY (ARRAY[ARRAY[1, 2, 3], ARRAY[2, 3, 1], ARRAY[3, 1, 2]])[it % 3 + 1:it % 3 + 1] LOOP
        IF way = 1 THEN
        -- sync
        refs := (SELECT array_agg('kf_qcs' || r || '_' || i) FROM generate_series(1, n) i);
        att := (SELECT array_agg(json_build_array(json_build_object('seq', 0, 'channel', 'whatsapp_meta',
                    'status', 'sent', 'provider_message_id', 'wamid.qcs' || r || '_' || i,
                    'http_status', 200, 'latency_ms', 3, 'attempted_at_ms', due_ms, 'cost_micros', 5000,
                    'currency', 'USD', 'sms_equiv_micros', 7000)))
                FROM generate_series(1, n) i);
        t0 := clock_timestamp();
        PERFORM og_msg_insert_unless_nowa_many(array_fill(tenant, ARRAY[n]), refs, tos,
            array_fill('Your code is 123456'::text, ARRAY[n]), array_fill('fallback'::text, ARRAY[n]),
            array_fill('{whatsapp_meta,sms}'::text, ARRAY[n]), array_fill('[]'::jsonb, ARRAY[n]),
            array_fill(NULL::text, ARRAY[n]), array_fill(NULL::int, ARRAY[n]),
            array_fill('6281234567890'::text, ARRAY[n]), array_fill('ACME'::text, ARRAY[n]),
            array_fill(NULL::jsonb, ARRAY[n]));
        s_ins := s_ins + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        PERFORM og_msg_complete_many(array_fill(tenant, ARRAY[n]), refs, array_fill('sent'::text, ARRAY[n]),
            array_fill('whatsapp_meta'::text, ARRAY[n]), att, array_fill(false, ARRAY[n]));
        PERFORM pg_temp.queue_cost_usage(tenant, n);
        s_fin := s_fin + (clock_timestamp() - t0);

        ELSIF way = 2 THEN
        -- queue (today's storage)
        refs := (SELECT array_agg('kf_qcq' || r || '_' || i) FROM generate_series(1, n) i);
        t0 := clock_timestamp();
        PERFORM pg_temp.bench_queue_insert(tenant, refs, tos, due_ms, qj);
        PERFORM og_usage_messages_add(array_fill(tenant, ARRAY[n]));
        q_ins := q_ins + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        SELECT array_agg(c.tenant_id), array_agg(c.reference), array_agg(c.ch) INTO c_t, c_r, c_ch
        FROM og_queue_claim('qc-owner', 60000, n, 32, false) AS c;
        q_claim := q_claim + (clock_timestamp() - t0);
        IF coalesce(cardinality(c_r), 0) <> n THEN
            RAISE EXCEPTION 'queue: claimed % of %', coalesce(cardinality(c_r), 0), n;
        END IF;
        t0 := clock_timestamp();
        PERFORM pg_temp.bench_queue_done(c_t, c_r, c_ch, 'qc-owner');
        -- The write batch's tally, as the gateway sums it (sql/030), in sync's usage_add.
        PERFORM pg_temp.queue_cost_usage(tenant, n);
        q_done := q_done + (clock_timestamp() - t0);

        ELSE
        -- rows (the model), planned as the queue's functions are (their SET clauses: a nested
        -- loop by key, never a scan of messages, whatever the statistics say)
        PERFORM set_config('enable_hashjoin', 'off', false), set_config('enable_mergejoin', 'off', false),
            set_config('enable_seqscan', 'off', false);
        refs := (SELECT array_agg('kf_qcm' || r || '_' || i) FROM generate_series(1, n) i);
        t0 := clock_timestamp();
        -- The write batch's senders, each once (the gateway would pass them so: no JSON per
        -- message), read by key; made and re-rated as today only when missing or changed.
        SELECT array_agg(qs.id ORDER BY y.o) INTO u_id
        FROM unnest(ARRAY[tenant, tenant], ARRAY['whatsapp_meta', 'sms'], ARRAY['100200300', 'ACME'],
                    ARRAY[100000, 100000]::double precision[]) WITH ORDINALITY AS y(t, c, s, r, o)
        JOIN queue_senders qs ON qs.tenant_id = y.t AND qs.channel = y.c AND qs.sender = y.s AND qs.rate = y.r;
        INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on,
            fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority,
            q_sender, q_ch, q_pri, q_senders, q_segments)
        SELECT tenant, x.r, x.n, 'Your code is 123456', 'fallback', '{whatsapp_meta,sms}', '[]', NULL, NULL,
            '6281234567890', 'ACME', NULL, 'queued', to_timestamp(due_ms / 1000.0),
            to_timestamp((due_ms + 3600000) / 1000.0), 'normal', u_id[1], 0, 1, u_id, 1
        FROM unnest(refs, tos) AS x(r, n);
        PERFORM og_usage_messages_add(array_fill(tenant, ARRAY[n]));
        PERFORM og_queue_wake_sender(u_id[1], to_timestamp(due_ms / 1000.0));
        m_ins := m_ins + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        c_t := '{}';
        c_r := '{}';
        c_ch := '{}';
        claim_ids := '{}';
        FOR s IN SELECT * FROM queue_senders qs
                 WHERE qs.wake_at <= now() ORDER BY qs.wake_at LIMIT 32 FOR NO KEY UPDATE SKIP LOCKED LOOP
            eff := og_queue_rate(s);
            tok := least(og_queue_burst(eff), s.tokens + eff * greatest(0, extract(epoch FROM now() - s.refilled_at)));
            WITH l AS (
                UPDATE messages m
                SET lease_owner = 'qc-owner', lease_until = now() + interval '60 seconds', leased_at = now()
                WHERE (m.tenant_id, m.reference) IN (
                    SELECT w.tenant_id, w.reference FROM messages w
                    WHERE w.q_sender = s.id AND w.q_pri = 1 AND w.due_at <= now() AND w.q_sender IS NOT NULL
                        AND w.lease_owner IS NULL
                    ORDER BY w.due_at LIMIT least(ceil(tok)::int, n) FOR UPDATE SKIP LOCKED)
                RETURNING m.tenant_id, m.reference, m.q_ch, m.channels[m.q_ch + 1] AS channel, m.to_number,
                    m.body, m.whatsapp_from, m.sms_sender, m.template)
            SELECT c_t || array_agg(l.tenant_id), c_r || array_agg(l.reference), c_ch || array_agg(l.q_ch),
                count(*)
            INTO c_t, c_r, c_ch, got FROM l;
            INSERT INTO queue_cost_claims (owner, lease_until, tenants, refs)
            VALUES ('qc-owner', now() + interval '60 seconds', c_t, c_r) RETURNING id INTO cid;
            claim_ids := claim_ids || cid;
            nxt := (SELECT min(d) FROM (
                (SELECT due_at AS d FROM messages WHERE q_sender = s.id AND q_pri = 0 AND q_sender IS NOT NULL
                     AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
                UNION ALL
                (SELECT due_at FROM messages WHERE q_sender = s.id AND q_pri = 1 AND q_sender IS NOT NULL
                     AND lease_owner IS NULL ORDER BY due_at LIMIT 1)
                UNION ALL
                (SELECT due_at FROM messages WHERE q_sender = s.id AND q_pri = 2 AND q_sender IS NOT NULL
                     AND lease_owner IS NULL ORDER BY due_at LIMIT 1)) x);
            UPDATE queue_senders qs SET tokens = tok - got, refilled_at = now(), wake_at = nxt WHERE qs.id = s.id;
        END LOOP;
        SELECT tn.settings::text INTO settings FROM tenants tn WHERE tn.id = tenant;
        m_claim := m_claim + (clock_timestamp() - t0);
        IF cardinality(c_r) <> n THEN
            RAISE EXCEPTION 'rows: claimed % of %', cardinality(c_r), n;
        END IF;
        t0 := clock_timestamp();
        -- Each release read once (y), as og_queue_done_many does since sql/032: the update does
        -- not find its attempt by joining the attempts inserted (n x n rows compared).
        WITH x AS (
            SELECT * FROM unnest(c_t, c_r, c_ch) AS x(t, r, c)),
        y AS (
            SELECT x.t, x.r, x.c, m.channels[x.c + 1] AS channel, m.leased_at, d.status AS d_status,
                d.delivered_at, d.read_at, d.delivery_error, d.provider_code AS d_code, d.error_message AS d_message
            FROM x
            JOIN messages m ON m.tenant_id = x.t AND m.reference = x.r AND m.lease_owner = 'qc-owner'
            LEFT JOIN LATERAL og_delivery_of(m.channels[x.c + 1], 'wamid.' || x.r) AS d ON true),
        att AS (
            INSERT INTO attempts AS a (tenant_id, reference, seq, channel, status, latency_ms, attempted_at,
                                       throttles, provider_message_id, http_status, delivery_status, delivered_at,
                                       read_at, delivery_error, delivery_provider_code, delivery_message,
                                       cost_micros, cost_currency, sms_equiv_micros)
            SELECT y.t, y.r, y.c, y.channel, 'sent', 3, y.leased_at, 0, 'wamid.' || y.r, 200,
                coalesce(y.d_status, 'sent'), y.delivered_at, y.read_at, y.delivery_error, y.d_code, y.d_message,
                5000, 'USD', 7000
            FROM y
            ON CONFLICT (tenant_id, reference, seq) DO UPDATE
            SET status = EXCLUDED.status, latency_ms = EXCLUDED.latency_ms, attempted_at = EXCLUDED.attempted_at,
                throttles = EXCLUDED.throttles, provider_message_id = EXCLUDED.provider_message_id
            RETURNING a.tenant_id, a.reference, a.seq, a.channel, a.status, a.delivery_status, a.cost_micros,
                a.xmax = 0 AS inserted),
        u AS (
            UPDATE messages m
            SET winning_channel = y.channel, status = og_message_delivery(ARRAY[coalesce(y.d_status, 'sent')]),
                completed_at = now(), q_sender = NULL, lease_owner = NULL, lease_until = NULL
            FROM y
            WHERE m.tenant_id = y.t AND m.reference = y.r
            RETURNING m.tenant_id)
        SELECT (SELECT array_agg(att.tenant_id) FROM att), (SELECT array_agg(att.reference) FROM att),
            (SELECT array_agg(att.channel) FROM att), (SELECT array_agg(att.status) FROM att),
            (SELECT array_agg(att.delivery_status) FROM att), (SELECT array_agg(att.cost_micros) FROM att),
            count(*)
        INTO a_t, a_r, a_c, a_s, a_d, a_co, got FROM u;
        IF got <> n THEN
            RAISE EXCEPTION 'rows: completed % of %', got, n;
        END IF;
        -- The claim's row ends with its last outcome (here every outcome of it is in this batch),
        -- by the id its holder keeps.
        DELETE FROM queue_cost_claims c WHERE c.id = ANY (claim_ids);
        -- Usage by the write batch's tally, as queue_done_many's (sql/030).
        PERFORM pg_temp.queue_cost_usage(tenant, n);
        m_done := m_done + (clock_timestamp() - t0);
        PERFORM set_config('enable_hashjoin', planner[1], false), set_config('enable_mergejoin', planner[2], false),
            set_config('enable_seqscan', planner[3], false);
        END IF;
        END LOOP;
        COMMIT;
        IF it = 10 THEN
            s_ins := '0'; s_fin := '0'; q_ins := '0'; q_claim := '0'; q_done := '0'; m_ins := '0'; m_claim := '0';
            m_done := '0';
        END IF;
    END LOOP;
    counted := batches - 10;
    total := extract(epoch FROM s_ins + s_fin);
    RAISE NOTICE E'us per message (% batches of %):\n  sync  insert %, completion %: %\n  queue insert %, claim %, done %: % (% x sync)\n  rows  insert %, claim %, done %: % (% x sync)',
        counted, n,
        round((extract(epoch FROM s_ins) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM s_fin) * 1e6 / (counted * n))::numeric, 1),
        round((total * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_claim) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins + q_claim + q_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins + q_claim + q_done) / total)::numeric, 3),
        round((extract(epoch FROM m_ins) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM m_claim) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM m_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM m_ins + m_claim + m_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM m_ins + m_claim + m_done) / total)::numeric, 3);
END
$$;
DELETE FROM attempts WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM messages WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM usage_totals WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM queue_senders WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM tenants WHERE id = '00000000-0000-4000-8000-00000000c058';
DROP TABLE queue_cost_claims;
DROP INDEX messages_waiting;
ALTER TABLE messages RESET (fillfactor);
ALTER TABLE messages DROP COLUMN q_sender, DROP COLUMN q_ch, DROP COLUMN q_pri, DROP COLUMN q_senders,
    DROP COLUMN q_segments, DROP COLUMN lease_owner, DROP COLUMN lease_until, DROP COLUMN leased_at;
