-- Durable steps (src/data/jobs.c, sql/006_steps.sql): claiming due steps under a lease,
-- closing them with their result, counting what is due.

-- name: step_claim
-- Claims due steps of the kinds this worker runs: due, and not leased or leased by a holder
-- whose lease expired. The conditional UPDATE is the claim: two workers never get one step.
-- $1 owner = this worker
-- $2 kinds = the kinds it runs, a text[] literal
-- $3 leases = their leases in milliseconds, an int[] literal in the same order
-- $4 limit = at most this many
-- Returns id, kind, tenant id (or ''), reference (or ''), payload, claims, lag in ms.
-- columns: id, kind, tenant_id, reference, payload, claims, lag_ms
UPDATE steps s
SET lease_owner = $1,
    lease_until = now() + ($3::int[])[array_position($2::text[], s.kind)] * interval '1 millisecond',
    claims = s.claims + 1
FROM (
    SELECT id FROM steps
    WHERE due_at <= now() AND kind = ANY ($2::text[])
        AND (lease_until IS NULL OR lease_until < now())
    ORDER BY due_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED) d
WHERE s.id = d.id
RETURNING s.id, s.kind, coalesce(s.tenant_id::text, '') AS tenant_id,
    coalesce(s.reference, '') AS reference, s.payload::text, s.claims,
    greatest(0, (extract(epoch FROM now() - s.due_at) * 1000)::bigint) AS lag_ms;

-- name: step_close
-- Deletes a step its holder has finished, failing the transaction when the lease is not the
-- holder's any more (another worker took the step over).
-- $1 step_id
-- $2 owner
-- Returns one row of one void column.
-- columns: closed
SELECT og_step_close($1::bigint, $2) AS closed;

-- name: steps_due
-- How many steps are due and not running.
-- columns: due
SELECT count(*) AS due
FROM steps
WHERE due_at <= now() AND (lease_until IS NULL OR lease_until < now());
