-- Queued sends' accept inside one backend: :total queued fallback sends of one tenant (scheduled an
-- hour ahead, so nothing claims them) written by og_queue_insert_many in write batches of :k, each
-- committed; us per message, then what each statement of the accept cost per message
-- (pg_stat_statements with `pg_stat_statements.track = all`, reset at the start). The gateway's
-- write batches are about 14 queued sends under queue_drain's load (its batches_accept), so the
-- accept's fixed cost per call shows at -v k=14 and not at -v k=256 (docs/performance.md, "The
-- accept's statements by write batch").
--
--   psql "$OMNIGATE_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -v total=14336 -v k=14 -f test/bench/queue_accept.sql
--
-- Run it on a database of its own (one made by `omnigate migrate`, with pg_stat_statements loaded
-- and created): it resets the statistics and deletes its tenant's rows at the end.
\if :{?total}
\else
\set total 14336
\endif
\if :{?k}
\else
\set k 14
\endif
\ir queue_calls.sql
SET og.total = :total;
SET og.k = :k;
INSERT INTO tenants (id, name, unified_api_enabled, settings)
VALUES ('00000000-0000-4000-8000-00000000c05a', 'accept', true, '{"channels": {"sms": {"sender": "ACME"}}}')
ON CONFLICT (id) DO NOTHING;
SELECT pg_stat_statements_reset();
DO $$
DECLARE
    tenant uuid := '00000000-0000-4000-8000-00000000c05a';
    total int := current_setting('og.total')::int;
    k int := current_setting('og.k')::int;
    r bigint;
    refs text[];
    tos text[];
    due_ms bigint;
    qj json;
    t0 timestamptz;
    ta interval := '0';
BEGIN
    qj := '{"status": "scheduled", "senders": [{"c": "whatsapp_meta", "s": "100200300", "r": 100000, "n": 1},
                                           {"c": "sms", "s": "ACME", "r": 100000, "n": 1}]}';
    due_ms := (extract(epoch FROM now()) * 1000)::bigint + 3600000;
    FOR it IN 1..(total / k) LOOP
        r := (random() * 1e15)::bigint;
        refs := (SELECT array_agg('kf_ac' || r || '_' || i) FROM generate_series(1, k) i);
        tos := (SELECT array_agg('+1999' || lpad(((r + i) % 10000000)::text, 7, '0')) FROM generate_series(1, k) i);
        t0 := clock_timestamp();
        PERFORM pg_temp.bench_queue_insert(tenant, refs, tos, due_ms, qj);
        ta := ta + (clock_timestamp() - t0);
        COMMIT;
    END LOOP;
    RAISE NOTICE 'accept of %, write batches of %: % us/msg', total, k,
        round((extract(epoch FROM ta) * 1e6 / (total / k * k))::numeric, 1);
END
$$;
SELECT round((total_exec_time / (:total / :k * :k) * 1000)::numeric, 2) AS us_per_msg, calls,
    left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS statement
FROM pg_stat_statements
WHERE query NOT LIKE 'DO %' AND query NOT LIKE '%generate_series%' AND query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time DESC LIMIT 16;
DELETE FROM queue_entries WHERE tenant_id = '00000000-0000-4000-8000-00000000c05a';
DELETE FROM messages WHERE tenant_id = '00000000-0000-4000-8000-00000000c05a';
DELETE FROM queue_senders WHERE tenant_id = '00000000-0000-4000-8000-00000000c05a';
DELETE FROM usage_totals WHERE tenant_id = '00000000-0000-4000-8000-00000000c05a';
DELETE FROM tenants WHERE id = '00000000-0000-4000-8000-00000000c05a';
