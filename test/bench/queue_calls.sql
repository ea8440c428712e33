-- The queue's set forms as test/bench/queue_cost.sql and test/bench/queue_burst.sql call them
-- (included with \ir): one write batch's accept of n queued fallback sends (whatsapp_meta then
-- sms, the same text, valid an hour past their due time), and one write batch's outcomes, every
-- release accepted by its provider. Temporary functions: gone with the session. Each adds one SQL
-- function call per write batch to what is timed (a few us, under 1 us per message at 20 a batch).

-- og_queue_insert_many of one tenant's sends to `tos`, references `refs`, due at `due_ms`, each
-- with the queue JSON `qj` (its status and senders).
CREATE FUNCTION pg_temp.bench_queue_insert(tenant uuid, refs text[], tos text[], due_ms bigint, qj json)
RETURNS void
LANGUAGE sql AS $$
    SELECT og_queue_insert_many(array_fill(tenant, ARRAY[cardinality(refs)]), refs, tos,
        array_fill('Your code is 123456'::text, ARRAY[cardinality(refs)]),
        array_fill('fallback'::text, ARRAY[cardinality(refs)]),
        array_fill('{whatsapp_meta,sms}'::text, ARRAY[cardinality(refs)]),
        array_fill('[]'::jsonb, ARRAY[cardinality(refs)]), array_fill(NULL::text, ARRAY[cardinality(refs)]),
        array_fill(NULL::int, ARRAY[cardinality(refs)]), array_fill('6281234567890'::text, ARRAY[cardinality(refs)]),
        array_fill('ACME'::text, ARRAY[cardinality(refs)]), array_fill(NULL::jsonb, ARRAY[cardinality(refs)]),
        array_fill(due_ms, ARRAY[cardinality(refs)]), array_fill(due_ms + 3600000, ARRAY[cardinality(refs)]),
        array_fill('normal'::text, ARRAY[cardinality(refs)]), array_fill(qj, ARRAY[cardinality(refs)]))
$$;

-- og_queue_done_many of the releases claimed by `owner` (c_t, c_r, c_ch as og_queue_claim returned
-- them), each sent (provider id 'wamid.' || reference, 5000 micros); the usage by the gateway's tally.
CREATE FUNCTION pg_temp.bench_queue_done(c_t uuid[], c_r text[], c_ch smallint[], owner text)
RETURNS void
LANGUAGE sql AS $$
    SELECT og_queue_done_many(c_t, c_r, c_ch, array_fill(owner, ARRAY[cardinality(c_r)]),
        array_fill('sent'::text, ARRAY[cardinality(c_r)]), (SELECT array_agg('wamid.' || x) FROM unnest(c_r) x),
        array_fill(NULL::text, ARRAY[cardinality(c_r)]), array_fill(NULL::text, ARRAY[cardinality(c_r)]),
        array_fill(NULL::text, ARRAY[cardinality(c_r)]), array_fill(200, ARRAY[cardinality(c_r)]),
        array_fill(3, ARRAY[cardinality(c_r)]), array_fill(NULL::int, ARRAY[cardinality(c_r)]),
        array_fill(5000::bigint, ARRAY[cardinality(c_r)]), array_fill('USD'::text, ARRAY[cardinality(c_r)]),
        array_fill(7000::bigint, ARRAY[cardinality(c_r)]), false)
$$;
