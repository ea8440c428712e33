-- A scheduled burst drained inside one backend: :total queued sends of one tenant, all due at one
-- moment, then og_queue_claim and og_queue_done_many in claims of :n until none is left, each round
-- committed; us per message of the claim and of the outcome by tenth of the drain (does a claim cost
-- more as its sender's drained entries pile up? how much does a bigger claim or write batch save?
-- docs/performance.md, "A claim's outcomes written together").
--
--   psql "$OMNIGATE_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -v total=10240 -v n=128 -f test/bench/queue_burst.sql
--
-- Run it on a database of its own (one made by `omnigate migrate`): it deletes its tenant's rows at
-- the end. Defaults: -v total=10240 -v n=128 (the gateway's OG_QUEUE_CLAIM_MAX); -v batch=1 puts
-- the burst in one batch (its counts kept by the claim and the outcome: docs/batches.md).
\if :{?total}
\else
\set total 10240
\endif
\if :{?n}
\else
\set n 128
\endif
\if :{?batch}
\else
\set batch 0
\endif
\ir queue_calls.sql
SET og.total = :total;
SET og.n = :n;
SET og.batch = :batch;
INSERT INTO tenants (id, name, unified_api_enabled, settings)
VALUES ('00000000-0000-4000-8000-00000000c059', 'burst', true, '{"channels": {"sms": {"sender": "ACME"}}}')
ON CONFLICT (id) DO NOTHING;
DO $$
DECLARE
    tenant uuid := '00000000-0000-4000-8000-00000000c059';
    total int := current_setting('og.total')::int;
    n int := current_setting('og.n')::int;
    k int := 256;
    r bigint;
    refs text[];
    tos text[];
    due_ms bigint;
    qj json;
    c_t uuid[]; c_r text[]; c_ch smallint[];
    t0 timestamptz;
    tc interval := '0'; td interval := '0';
    done int := 0;
    slice int := 0;
    line text := '';
BEGIN
    qj := '{"status": "scheduled", "senders": [{"c": "whatsapp_meta", "s": "100200300", "r": 100000, "n": 1},
                                           {"c": "sms", "s": "ACME", "r": 100000, "n": 1}]}';
    due_ms := (extract(epoch FROM now()) * 1000)::bigint + 2000;
    FOR it IN 1..(total / k) LOOP
        r := (random() * 1e15)::bigint;
        refs := (SELECT array_agg('kf_bu' || r || '_' || i) FROM generate_series(1, k) i);
        tos := (SELECT array_agg('+1999' || lpad(((r + i) % 10000000)::text, 7, '0')) FROM generate_series(1, k) i);
        PERFORM pg_temp.bench_queue_insert(tenant, refs, tos, due_ms, qj);
        IF current_setting('og.batch') = '1' THEN
            INSERT INTO batches (tenant_id, id, total, last_due_at)
            VALUES (tenant, 'kb_burst', 0, now()) ON CONFLICT DO NOTHING;
            UPDATE messages SET batch_id = 'kb_burst' WHERE tenant_id = tenant AND reference = ANY (refs);
        END IF;
        COMMIT;
    END LOOP;
    PERFORM pg_sleep(2.5); -- until they are due (now() is the transaction's start)
    COMMIT;
    LOOP
        t0 := clock_timestamp();
        SELECT array_agg(c.tenant_id), array_agg(c.reference), array_agg(c.ch) INTO c_t, c_r, c_ch
        FROM og_queue_claim('bu-owner', 60000, n, 32, false) AS c;
        tc := tc + (clock_timestamp() - t0);
        EXIT WHEN c_r IS NULL;
        t0 := clock_timestamp();
        PERFORM pg_temp.bench_queue_done(c_t, c_r, c_ch, 'bu-owner');
        td := td + (clock_timestamp() - t0);
        COMMIT;
        done := done + cardinality(c_r);
        slice := slice + cardinality(c_r);
        IF slice >= total / 10 THEN
            line := line || format(E'\n  at %s: claim %s, done %s us/msg', done,
                round((extract(epoch FROM tc) * 1e6 / slice)::numeric, 1), round((extract(epoch FROM td) * 1e6 / slice)::numeric, 1));
            tc := '0'; td := '0'; slice := 0;
        END IF;
    END LOOP;
    RAISE NOTICE 'burst of %, claims of %:%', total, n, line;
END
$$;
DELETE FROM batch_counts WHERE batch_id = 'kb_burst';
DELETE FROM batches WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM attempts WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM messages WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM queue_entries WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM queue_senders WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM usage_totals WHERE tenant_id = '00000000-0000-4000-8000-00000000c059';
DELETE FROM tenants WHERE id = '00000000-0000-4000-8000-00000000c059';
