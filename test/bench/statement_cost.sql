-- PostgreSQL's cost of a send's two writes, measured inside one backend (no client, no network,
-- no commit): the set forms of the pending insert and of the completion (sql/013, sql/014) on
-- batches of 20 messages, repeated. For comparing schema changes (indexes, triggers) on the same
-- database: run it before and after, a few times each, alternating. The machine is shared and
-- noisy: differences under 10% need several runs each.
--
--   psql "$OMNIGATE_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f test/bench/statement_cost.sql
--
-- Everything happens in one transaction that is rolled back: the database is left as it was.
-- The numbers (us per message) come as a NOTICE. Optional: -v batches=N (default 300).
\if :{?batches}
\else
\set batches 300
\endif
BEGIN;
INSERT INTO tenants (id, name) VALUES ('00000000-0000-4000-8000-00000000c057', 'statement-cost')
ON CONFLICT (id) DO NOTHING;
SET LOCAL og.batches = :batches;
DO $$
DECLARE
    tenant uuid := '00000000-0000-4000-8000-00000000c057';
    n int := 20;
    batches int := current_setting('og.batches')::int;
    t0 timestamptz;
    ins interval := '0';
    fin interval := '0';
    r bigint;
    refs text[];
    att json[];
BEGIN
    FOR it IN 1..batches LOOP
        r := (random() * 1e15)::bigint;
        refs := (SELECT array_agg('kf_cost' || r || '_' || i) FROM generate_series(1, n) i);
        att := (SELECT array_agg(json_build_array(json_build_object('seq', 0, 'channel', 'whatsapp_qr',
                    'status', 'sent', 'provider_message_id', 'true_cost_' || r || '_' || i,
                    'http_status', 201, 'latency_ms', 3, 'attempted_at_ms', 1764000000000)))
                FROM generate_series(1, n) i);
        t0 := clock_timestamp();
        PERFORM og_msg_insert_unless_nowa_many(array_fill(tenant, ARRAY[n]), refs,
            (SELECT array_agg('+1999' || lpad(((r + i) % 10000000)::text, 7, '0')) FROM generate_series(1, n) i),
            array_fill('Your code is 123456'::text, ARRAY[n]), array_fill('fallback'::text, ARRAY[n]),
            array_fill('{whatsapp_qr,sms}'::text, ARRAY[n]), array_fill('[]'::jsonb, ARRAY[n]),
            array_fill(NULL::text, ARRAY[n]), array_fill(NULL::int, ARRAY[n]),
            array_fill('6281234567890'::text, ARRAY[n]), array_fill('ACME'::text, ARRAY[n]),
            array_fill(NULL::jsonb, ARRAY[n]));
        ins := ins + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        PERFORM og_msg_complete_many(array_fill(tenant, ARRAY[n]), refs, array_fill('sent'::text, ARRAY[n]),
            array_fill('whatsapp_qr'::text, ARRAY[n]), att, array_fill(false, ARRAY[n]));
        fin := fin + (clock_timestamp() - t0);
    END LOOP;
    RAISE NOTICE 'us per message: pending insert %, completion % (% batches of %)',
        round((extract(epoch FROM ins) * 1e6 / (batches * n))::numeric, 2),
        round((extract(epoch FROM fin) * 1e6 / (batches * n))::numeric, 2), batches, n;
END
$$;
ROLLBACK;
