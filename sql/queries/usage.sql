-- Usage (API.md §22; sql/024_usage.sql, src/product/costs/usage_api.c): read from the totals,
-- never from the logs; the gateway groups the rows and writes the answer.

-- name: usage_rows
-- A tenant's (or every tenant's) totals per UTC day and channel ('' for a day's messages as a
-- whole) over whole days, in day and channel order ('', whatsapp_qr, whatsapp_meta, sms).
-- $1 tenant_id = the tenant, or NULL for every tenant
-- $2 since = the first day (YYYY-MM-DD)
-- $3 until = the last day, included
-- columns: day, channel, messages, attempts, accepted, delivered, read, failed, segments,
--     cost_micros, won, savings_micros
SELECT s.day::text AS day, s.channel, s.messages, s.attempts, s.accepted, s.delivered, s.read, s.failed,
    s.segments, s.cost_micros, s.won, s.savings_micros
FROM og_usage_sums($1::uuid, $2::date, $3::date) s
ORDER BY s.day, array_position(ARRAY['', 'whatsapp_qr', 'whatsapp_meta', 'sms'], s.channel);

-- name: usage_currency
-- Whether the tenant exists (true for every tenant: NULL), and the currency its usage is in: its
-- card's, else the global card's, else NULL.
-- $1 tenant_id = the tenant, or NULL for every tenant
-- columns: known, currency
SELECT $1::uuid IS NULL OR EXISTS (SELECT 1 FROM tenants WHERE id = $1::uuid) AS known,
    coalesce((SELECT t.settings -> 'rates' ->> 'currency' FROM tenants t WHERE t.id = $1::uuid),
             (SELECT r.card ->> 'currency' FROM rate_card r)) AS currency;

-- name: usage_compact
-- Merges past days' shards of the usage totals (og_usage_compact; the sweep).
-- $1 limit = at most this many rows
-- columns: merged
SELECT og_usage_compact($1::integer) AS merged;

-- name: usage_add
-- The usage a write batch's sync sends add (the pool's tally, og_db_set_tally; sql/028): each
-- parameter an array, one element per (tenant, day, channel) of the batch, summed by the gateway
-- (src/product/costs/usage.c), added to this backend's rows as sql/024's triggers add theirs.
-- $1 tenant_id = tenant ids
-- $2 day = their days (UTC, YYYY-MM-DD)
-- $3 channel = their channels
-- $4 attempts = attempts with an outcome (each also a message of its channel)
-- $5 accepted = attempts accepted
-- $6 failed = attempts failed
-- $7 cost_micros = what the accepted attempts cost
-- $8 won = fallback messages the channel won
-- $9 savings_micros = what those wins saved against SMS
INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages, attempts, accepted, failed,
    cost_micros, won, savings_micros)
SELECT x.t, x.d, x.c, pg_backend_pid(), x.a, x.a, x.ac, x.f, x.co, x.w, x.sv
FROM unnest($1::uuid[], $2::date[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
    $8::bigint[], $9::bigint[]) AS x(t, d, c, a, ac, f, co, w, sv)
ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
SET messages = t.messages + EXCLUDED.messages, attempts = t.attempts + EXCLUDED.attempts,
    accepted = t.accepted + EXCLUDED.accepted, failed = t.failed + EXCLUDED.failed,
    cost_micros = t.cost_micros + EXCLUDED.cost_micros, won = t.won + EXCLUDED.won,
    savings_micros = t.savings_micros + EXCLUDED.savings_micros;
