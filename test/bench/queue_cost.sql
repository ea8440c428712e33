-- PostgreSQL's cost of a queued message against a sync send's, measured inside one backend (no
-- client, no network, no commit), for deciding the queue's storage (issues 31 and 32: a queued
-- message's PostgreSQL CPU <= 1.3 x a sync send's, a batched one's <= 0.7 x). Two ways of doing
-- the same work, interleaved in every round so that the machine's noise hits them alike, on
-- write batches of :n messages (fallback whatsapp_meta then sms, the first channel accepting):
--
--   sync     a sync send's statements: the pending insert and the completion (set forms, as
--            test/bench/statement_cost.sql) and the write batch's usage_add;
--   queue    a queued send's: og_queue_insert_many with its usage, the claim (og_queue_claim: the
--            entries leased) and og_queue_done_many with the write batch's usage_add.
--
-- (Until 2026-11-30 a third way modelled a queue without entries, the waiting state and lease in
-- the message row; built as such, it did not cost what the model said: docs/performance.md, "The
-- queue in the message row, built and measured". The model is gone; the design is on the branch
-- experiment/queue-in-row.)
--
-- Run it on a database of its own (test/bench/run.sh's, or one made by `omnigate migrate`). Each
-- round commits (a queue measured inside one transaction scans every row it deleted in it again),
-- and the two ways take turns at going first; the first 10 rounds are not counted (their
-- statements' first plans). No ANALYZE first: the statistics are whatever the database has, as a
-- deployment's are (sql/030's claim reads by key whatever they say).
--
--   psql "$OMNIGATE_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f test/bench/queue_cost.sql
--
-- Optional: -v fillfactor=F (messages' fillfactor for the run, given back after it; the schema's
-- is 70, sql/004), -v batches=N (default 300), -v n=M (messages per write
-- batch, default 20; a gateway not under load writes batches of a few: -v n=2 shows each call's
-- fixed cost, and a statement planned again at every call, sql/031). The result is a NOTICE: us
-- per message by phase, and the queue's total as a ratio to sync's.
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
\set fillfactor 70
\endif
\ir queue_calls.sql
SET og.batches = :batches;
SET og.n = :n;
INSERT INTO tenants (id, name, unified_api_enabled, settings)
VALUES ('00000000-0000-4000-8000-00000000c058', 'queue-cost', true, '{"channels": {"sms": {"sender": "ACME"}}}')
ON CONFLICT (id) DO NOTHING;
-- Messages' fillfactor for the run (given back at the end); pages filled from here on, both
-- ways' rows written with it.
SELECT coalesce((SELECT option_value FROM pg_options_to_table((SELECT reloptions FROM pg_class
                                                               WHERE oid = 'messages'::regclass))
                 WHERE option_name = 'fillfactor'), '100') AS fillfactor_was \gset
ALTER TABLE messages SET (fillfactor = :fillfactor);
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
    t0       timestamptz;
    s_ins    interval := '0';
    s_fin    interval := '0';
    q_ins    interval := '0';
    q_claim  interval := '0';
    q_done   interval := '0';
    r        bigint;
    refs     text[];
    tos      text[];
    att      json[];
    due_ms   bigint;
    qj       json;
    c_t      uuid[];
    c_r      text[];
    c_ch     smallint[];
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

        FOREACH way IN ARRAY (ARRAY[ARRAY[1, 2], ARRAY[2, 1]])[it % 2 + 1:it % 2 + 1] LOOP
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
        -- queue
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

        END IF;
        END LOOP;
        COMMIT;
        IF it = 10 THEN
            s_ins := '0'; s_fin := '0'; q_ins := '0'; q_claim := '0'; q_done := '0';
        END IF;
    END LOOP;
    counted := batches - 10;
    total := extract(epoch FROM s_ins + s_fin);
    RAISE NOTICE E'us per message (% batches of %):\n  sync  insert %, completion %: %\n  queue insert %, claim %, done %: % (% x sync)',
        counted, n,
        round((extract(epoch FROM s_ins) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM s_fin) * 1e6 / (counted * n))::numeric, 1),
        round((total * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_claim) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins + q_claim + q_done) * 1e6 / (counted * n))::numeric, 1),
        round((extract(epoch FROM q_ins + q_claim + q_done) / total)::numeric, 3);
END
$$;
DELETE FROM attempts WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM messages WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM usage_totals WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM queue_senders WHERE tenant_id = '00000000-0000-4000-8000-00000000c058';
DELETE FROM tenants WHERE id = '00000000-0000-4000-8000-00000000c058';
ALTER TABLE messages SET (fillfactor = :fillfactor_was);
