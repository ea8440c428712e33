-- Delivery statuses from the providers' webhooks (src/product/callbacks/webhooks_in.c, API.md §10). The
-- rules (ranks, history, statuses that come before their attempt) are the functions of
-- sql/005_delivery_status.sql.

-- name: status_apply
-- Records the statuses of one webhook POST in one statement.
-- $1 statuses = the statuses, a JSON array of {channel, pid, status, at, code, error, message}
-- columns: applied, duplicate, unknown
SELECT applied, duplicate, unknown
FROM og_status_apply($1::jsonb);

-- name: status_sweep
-- Marks statuses whose attempt appeared after them, prunes week-old unmatched ones.
-- Returns how many recent statuses still wait for their attempt.
-- columns: waiting
SELECT og_status_sweep() AS waiting;
