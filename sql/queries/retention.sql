-- Retention, `omnigate prune --before DATE` (src/product/app/cli.c, docs/operations.md): log
-- data older than DATE is deleted in small batches, one short transaction each, so writers
-- never wait. The batches are omnigate_prune_batch (sql/003_retention.sql; by reference since
-- sql/009_log_indexes.sql).

-- name: prune_check
-- Reads --before as PostgreSQL does, and whether it is at least 24 h ago: sends may still be
-- in flight, and idempotency keys live 24 h.
-- $1 before = a date or an RFC 3339 time
-- Returns before as RFC 3339 UTC with milliseconds, and whether it is old enough (boolean).
-- columns: before, old_enough
SELECT to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS before,
    $1::timestamptz <= now() - interval '24 hours' AS old_enough;

-- name: prune_tenants
-- Lists every tenant, for pruning tenant by tenant.
-- columns: id
SELECT id
FROM tenants
ORDER BY id;

-- name: prune_batch
-- Deletes one batch of a tenant's log data created before a time: records whose reference is
-- below the smallest reference of that time's millisecond (omnigate_prune_batch, sql/009), and
-- completed batches (API.md §20) made before it (og_batch_prune, sql/020).
-- $1 tenant_id
-- $2 before = the time, as a reference
-- $3 batch = batch size
-- Returns the number of rows deleted.
-- columns: deleted
SELECT omnigate_prune_batch($1, $2, $3) + og_batch_prune($1::uuid, $2, $3::integer) AS deleted;

-- name: prune_idem
-- Deletes one batch of idempotency keys past their 24 h.
-- $1 batch = batch size
DELETE FROM idempotency_keys
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM idempotency_keys
    WHERE created_at < now() - interval '24 hours'
    LIMIT $1));

-- name: prune_webhooks
-- Deletes one batch of a tenant's webhook deliveries created before a time and done with
-- (delivered or exhausted), with their tries.
-- $1 tenant_id
-- $2 before = the time (RFC 3339)
-- $3 batch = batch size
-- Returns the number of deliveries deleted.
-- columns: deleted
WITH d AS (
    DELETE FROM webhook_deliveries
    WHERE id = ANY (ARRAY(
        SELECT id
        FROM webhook_deliveries
        WHERE tenant_id = $1 AND created_at < $2::timestamptz AND next_at IS NULL
        ORDER BY id
        LIMIT $3))
    RETURNING id),
t AS (
    DELETE FROM webhook_tries w
    USING d
    WHERE w.delivery_id = d.id)
SELECT count(*) AS deleted
FROM d;

-- name: prune_inbound
-- Deletes one batch of a tenant's inbound messages (API.md §21) stored before a time.
-- $1 tenant_id
-- $2 before = the time (RFC 3339)
-- $3 batch = batch size
-- Returns the number of messages deleted.
-- columns: deleted
WITH d AS (
    DELETE FROM inbound_messages
    WHERE tenant_id = $1 AND id = ANY (ARRAY(
        SELECT id FROM inbound_messages
        WHERE tenant_id = $1 AND created_at < $2::timestamptz
        ORDER BY created_at
        LIMIT $3::integer))
    RETURNING 1)
SELECT count(*) AS deleted FROM d;
