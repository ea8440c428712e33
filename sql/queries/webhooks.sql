-- Tenant webhooks out (API.md §12; sql/011_webhooks_out.sql has the tables, the events and the
-- rules): the webhook of a tenant for the admin API and `omnigate admin`
-- (src/product/tenant_webhooks/webhook_api.c, src/product/app/cli.c), the delivery step
-- (src/product/tenant_webhooks/webhooks_out.c) and the tenant's deliveries routes.
--
-- A webhook row is its url, events as a JSON array, the sealed secret, created_at, updated_at
-- and disabled_at (RFC 3339 UTC with milliseconds, disabled_at NULL while enabled),
-- disabled_reason, and whether the statement created it:
-- row wh: url, events, secret, created, updated, disabled, disabled_reason, inserted

-- name: wh_put
-- Creates the tenant's webhook with a new secret, or changes its URL and events (keeping its
-- secret) and enables it again.
-- $1 tenant_id
-- $2 url
-- $3 events = a text[] literal
-- $4 secret = the sealed secret, used when the webhook is created
-- Returns the webhook row; no row when there is no such tenant.
-- columns: wh row
INSERT INTO tenant_webhooks AS w (tenant_id, url, events, secret)
SELECT t.id, $2, $3::text[], $4
FROM tenants t
WHERE t.id = $1
ON CONFLICT (tenant_id) DO UPDATE
SET url = excluded.url, events = excluded.events, updated_at = now(), disabled_at = NULL,
    disabled_reason = NULL, failing_since = NULL
RETURNING w.url, array_to_json(w.events)::text AS events, w.secret,
    to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(w.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated,
    to_char(w.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS disabled,
    w.disabled_reason, w.xmax = 0 AS inserted;

-- name: wh_get
-- Reads the tenant's webhook.
-- $1 tenant_id
-- Returns the webhook row, or no row.
-- columns: wh row
SELECT url, array_to_json(events)::text AS events, secret,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated,
    to_char(disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS disabled,
    disabled_reason, false AS inserted
FROM tenant_webhooks
WHERE tenant_id = $1;

-- name: wh_delete
-- Deletes the tenant's webhook; the deliveries still waiting for a try are exhausted.
-- $1 tenant_id
-- Returns the webhook row as it was, or no row.
-- columns: wh row
WITH w AS (
    DELETE FROM tenant_webhooks
    WHERE tenant_id = $1
    RETURNING *),
x AS (
    UPDATE webhook_deliveries
    SET status = 'exhausted', next_at = NULL, last_error = coalesce(last_error, 'webhook_deleted')
    WHERE tenant_id = $1 AND next_at IS NOT NULL AND EXISTS (SELECT 1 FROM w))
SELECT url, array_to_json(events)::text AS events, secret,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated,
    to_char(disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS disabled,
    disabled_reason, false AS inserted
FROM w;

-- name: wh_rotate
-- Replaces the secret of the tenant's webhook.
-- $1 tenant_id
-- $2 secret = the new secret, sealed
-- Returns the webhook row, or no row.
-- columns: wh row
UPDATE tenant_webhooks
SET secret = $2, updated_at = now()
WHERE tenant_id = $1
RETURNING url, array_to_json(events)::text AS events, secret,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated,
    to_char(disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS disabled,
    disabled_reason, false AS inserted;

-- name: wh_due
-- The deliveries of a tenant due for a try, with the webhook they go to (og_webhook_due).
-- $1 tenant_id
-- $2 exclude = ids to leave out (being tried or recorded by the caller), a bigint[] literal
-- $3 limit = at most this many
-- $4 floor = only deliveries due from a second before it on (the latest next_at this caller
--      loaded), or NULL for all
-- Returns url, sealed secret, id, webhook id, tries so far, body, next_at (as text, a floor).
-- columns: url, secret, id, webhook_id, tries, body, next_at
SELECT url, secret, id, webhook_id, tries, body, next_at
FROM og_webhook_due($1::uuid, $2::bigint[], $3::integer, $4::timestamptz);

-- name: wh_record
-- Records tries of a tenant's deliveries (og_webhook_record).
-- $1 tenant_id
-- $2 tries = a JSON array of {id, at_ms, http, latency_ms, error, message, ok, retry_in_ms}
-- Returns true when they disabled the webhook.
-- columns: disabled
SELECT og_webhook_record($1::uuid, $2::jsonb) AS disabled;

-- name: wh_release
-- Ends a tenant's delivery step and schedules the next when deliveries wait (og_webhook_release).
-- $1 step_id
-- $2 owner = lease owner
-- $3 tenant_id
-- Returns true when the next step is due now.
-- columns: due_now
SELECT og_webhook_release($1::bigint, $2, $3::uuid) AS due_now;

-- name: wh_sample
-- The outbox gauges: events still to deliver, the age of the oldest in microseconds, and the
-- webhooks disabled.
-- columns: depth, oldest_us, disabled
SELECT count(*) AS depth,
    coalesce((extract(epoch FROM now() - min(created_at)) * 1e6)::bigint, 0) AS oldest_us,
    (SELECT count(*) FROM tenant_webhooks WHERE disabled_at IS NOT NULL) AS disabled
FROM webhook_deliveries
WHERE next_at IS NOT NULL;

-- name: wh_deliveries
-- One page of a tenant's deliveries, newest first (GET /api/webhooks/deliveries).
-- $1 tenant_id
-- $2 status = status, or NULL
-- $3 cursor = ids below it, or NULL
-- $4 limit
-- columns: page row
SELECT d.id AS cursor, i::text AS item
FROM webhook_deliveries d
CROSS JOIN LATERAL og_webhook_item(d) AS i
WHERE d.tenant_id = $1
    AND ($2::text IS NULL OR d.status = $2)
    AND ($3::bigint IS NULL OR d.id < $3)
ORDER BY d.id DESC
LIMIT $4;

-- name: wh_retry
-- Queues one more try of a tenant's delivery, now (og_webhook_retry).
-- $1 tenant_id
-- $2 delivery_id = the delivery's id (webhook-id)
-- Returns the outcome ('ok', 'not_found' or 'disabled') and, when ok, the delivery's item JSON
-- text.
-- columns: outcome, item
SELECT outcome, item::text AS item
FROM og_webhook_retry($1::uuid, $2);

-- name: wh_schedule
-- Gives every tenant with a delivery due and no step running or due its step, due now
-- (og_webhook_schedule; one worker per instance, on NOTIFY og_steps 'webhook' and every second).
-- Returns how many steps it made due.
-- columns: due
SELECT og_webhook_schedule() AS due;
