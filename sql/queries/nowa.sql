-- Numbers without WhatsApp (src/product/messaging/nowa.c, API.md §13; sql/010_not_on_whatsapp.sql).

-- name: nowa_get
-- Whether a number is remembered as having no WhatsApp, and for how long still.
-- $1 number = E.164
-- Returns one row: the milliseconds it stays remembered, or NULL when it is not.
-- columns: left_ms
SELECT (SELECT ceil(extract(epoch FROM until - now()) * 1000)::bigint
        FROM not_on_whatsapp WHERE number = $1 AND until > now()) AS left_ms;

-- name: nowa_mark
-- Remembers that a number has no WhatsApp, for ttl seconds from now.
-- $1 number = E.164
-- $2 ttl_s = ttl in seconds
INSERT INTO not_on_whatsapp (number, until)
VALUES ($1, now() + $2::integer * interval '1 second')
ON CONFLICT (number) DO UPDATE SET until = EXCLUDED.until, recorded_at = now();

-- name: nowa_statuses
-- What a batch of delivery statuses says about numbers (og_nowa_from_statuses).
-- $1 statuses = the statuses, as status_apply takes them
-- $2 ttl_s = ttl in seconds
-- Returns one row of one void column.
-- columns: learned
SELECT og_nowa_from_statuses($1::jsonb, $2::integer) AS learned;

-- name: nowa_prune
-- Deletes what expired more than an hour ago (the sweep step).
DELETE FROM not_on_whatsapp WHERE until < now() - interval '1 hour';
