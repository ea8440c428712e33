-- Rate cards (API.md §22; sql/022_rates.sql, src/product/costs/).

-- name: rates_get
-- The global card as GET /admin/rates shows it: {"currency", "rates", "updatedAt"}; no row
-- when none was ever put.
-- columns: card
SELECT (card || jsonb_build_object('updatedAt',
        to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text AS card
FROM rate_card;

-- name: rates_put
-- Replaces the global card (checked by the gateway) and returns it as rates_get does.
-- $1 card = {"currency", "rates"}
-- columns: card
INSERT INTO rate_card AS r (one, card) VALUES (true, $1::jsonb)
ON CONFLICT (one) DO UPDATE SET card = EXCLUDED.card, updated_at = now()
RETURNING (r.card || jsonb_build_object('updatedAt',
        to_char(r.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text AS card;

-- name: rates_current
-- The global card as a worker keeps it (read with its consent copy, src/product/consent/
-- consent.c): its version, and the card itself only when the worker's is another version.
-- $1 have = the version the worker has, or NULL
-- columns: version, card
SELECT v.version, CASE WHEN v.version IS DISTINCT FROM $1 THEN r.card::text END AS card
FROM rate_card r
CROSS JOIN LATERAL (SELECT (extract(epoch FROM r.updated_at) * 1000000)::bigint::text AS version) v;
