-- Idempotency keys (src/product/messaging/idem.c, API.md §6): a request with a key claims it, and its
-- answer is stored with the write that completes the request, so a repeat gets the same
-- answer.

-- name: idem_claim
-- Claims a key for as long as its request can take (the lease, API.md §15). A key older than
-- 24 h is taken over as if new (API.md §6).
-- $1 tenant_id
-- $2 key
-- $3 route
-- $4 hash = request hash
-- $5 lease_ms = lease in milliseconds
-- $6 token = the claim's token, which every later write of the claim names (sql/015)
-- Returns one row when the key is new (or taken over), none when it is taken.
-- columns: claimed
INSERT INTO idempotency_keys (tenant_id, key, route, request_hash, lease_until, claim_token)
VALUES ($1, $2, $3, $4, now() + $5::integer * interval '1 millisecond', $6)
ON CONFLICT (tenant_id, key) DO UPDATE
SET route = EXCLUDED.route, request_hash = EXCLUDED.request_hash, reference = NULL,
    response_status = NULL, response_body = NULL, created_at = now(), completed_at = NULL,
    lease_until = EXCLUDED.lease_until, claim_token = EXCLUDED.claim_token
WHERE idempotency_keys.created_at < now() - interval '24 hours'
RETURNING 1 AS claimed;

-- name: idem_get
-- Reads a key: what claimed it and, once completed, the answer it got.
-- $1 tenant_id
-- $2 key
-- Returns route, request_hash, response_status, response_body, reference, and whether the
-- claim's lease has run out.
-- columns: route, request_hash, response_status, response_body, reference, lease_over
SELECT route, request_hash, response_status, response_body, reference,
    coalesce(lease_until < now(), false) AS lease_over
FROM idempotency_keys
WHERE tenant_id = $1 AND key = $2;

-- name: idem_complete
-- Stores the answer of the request that claimed a key, while it still holds the claim (a
-- holder that lost it records nothing over the new holder's answer) and only once.
-- $1 tenant_id
-- $2 key
-- $3 status = HTTP status
-- $4 body = response body
-- $5 token = the claim's token
UPDATE idempotency_keys
SET response_status = $3, response_body = $4, completed_at = now()
WHERE tenant_id = $1 AND key = $2 AND claim_token = $5 AND completed_at IS NULL;

-- name: idem_reference
-- Records which record a claimed key is about, in the transaction that commits the record's
-- pending row, before any provider call (API.md §15); fails that transaction (SQLSTATE OG001)
-- when the request no longer holds the claim, so the row is not committed (og_idem_hold).
-- $1 tenant_id
-- $2 key
-- $3 reference
-- $4 token = the claim's token
-- columns: held
SELECT og_idem_hold($1::uuid, $2, $4, $3) AS held;

-- name: idem_stale
-- Resolves an unfinished claim whose lease ran out (og_idem_stale in sql/015): the claim
-- becomes the repeat's (its token) whatever the action.
-- $1 tenant_id
-- $2 key
-- $3 lease_ms = lease in milliseconds, for a take-over
-- $4 token = the repeat's token
-- Returns action ('takeover', 'unknown' or 'busy'), reference, attempts (JSON).
-- columns: action, reference, attempts
SELECT action, reference, attempts
FROM og_idem_stale($1::uuid, $2, $3::integer, $4);

-- name: sweep_pending
-- Marks 'unknown' the pending messages older than any send could still take.
-- $1 older_ms = older than, in milliseconds
-- columns: marked
SELECT og_sweep_pending($1::integer) AS marked;

-- name: sweep_next
-- Schedules the next run of the sweep, in the transaction that closes this one.
INSERT INTO steps (kind, reference, due_at)
VALUES ('sweep', 'sweep', now() + interval '15 seconds')
ON CONFLICT DO NOTHING;
