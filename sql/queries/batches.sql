-- Batches (API.md §20; src/product/queue/batch_api.c, sql/020_batches.sql): a batch's accepted
-- messages, its counts, its cancel, and the completion of finished batches.

-- name: batch_insert
-- Records a batch: its row, its first counts and its messages (og_batch_insert: queued sends,
-- through og_queue_insert_many), before the 202 answer.
-- $1 tenant_id
-- $2 batch_id = "kb_" and 26 characters
-- $3 rows = a JSON array of the accepted messages, each an object of queue_insert's
--    parameters by name: r (reference), to, text, mode, channels, skipped, fallbackOn,
--    fallbackAfter, waFrom, smsSender, template, due, valid, priority, queue
-- $4 queued = how many of them are due now
-- $5 scheduled = how many are due later
-- $6 last_due_ms = the latest due time, in ms since the epoch
-- Returns nothing.
SELECT FROM og_batch_insert($1::uuid, $2, $3::json, $4::integer, $5::integer, $6::bigint);

-- name: batch_get
-- A batch as its resource (GET /api/omni/batches/{batchId}): total, counts, completedAt.
-- $1 tenant_id
-- $2 batch_id
-- Returns one row, or none.
-- columns: item
SELECT og_batch_item(b)::text AS item
FROM batches b
WHERE b.tenant_id = $1 AND b.id = $2;

-- name: batch_cancel
-- Cancels every message of a batch no provider is working on (og_batch_cancel).
-- $1 tenant_id
-- $2 batch_id
-- Returns how many were canceled, NULL when the tenant has no such batch.
-- columns: canceled
SELECT og_batch_cancel($1::uuid, $2) AS canceled;

-- name: batch_complete
-- Completes the finished batches (og_batch_complete), with their batch.completed events; the
-- queue's claim asks so about once a second (OG_QUEUE_ABANDON_MS).
-- $1 max = at most this many batches
-- columns: completed
SELECT og_batch_complete($1::integer) AS completed;
