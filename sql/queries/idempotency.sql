-- Idempotency keys (src/product/idem.c, API.md §6): a request with a key claims it, and its
-- answer is stored with the write that completes the request, so a repeat gets the same
-- answer.

-- name: idem_claim
-- Claims a key. A key older than 24 h is taken over as if new (API.md §6).
-- $1 = tenant id
-- $2 = key
-- $3 = route
-- $4 = request hash
-- Returns one row when the key is new (or taken over), none when it is taken.
INSERT INTO idempotency_keys (tenant_id, key, route, request_hash)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, key) DO UPDATE
SET route = EXCLUDED.route, request_hash = EXCLUDED.request_hash, reference = NULL,
    response_status = NULL, response_body = NULL, created_at = now(), completed_at = NULL
WHERE idempotency_keys.created_at < now() - interval '24 hours'
RETURNING 1;

-- name: idem_get
-- Reads a key: what claimed it and, once completed, the answer it got.
-- $1 = tenant id
-- $2 = key
-- Returns route, request_hash, response_status, response_body, reference.
SELECT route, request_hash, response_status, response_body, reference
FROM idempotency_keys
WHERE tenant_id = $1 AND key = $2;

-- name: idem_complete
-- Stores the answer of the request that claimed a key.
-- $1 = tenant id
-- $2 = key
-- $3 = HTTP status
-- $4 = response body
UPDATE idempotency_keys
SET response_status = $3, response_body = $4, completed_at = now()
WHERE tenant_id = $1 AND key = $2;
