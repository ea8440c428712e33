-- API tokens: authentication of every API request (src/product/tenants/auth.c), and the token routes
-- of the admin API and the admin commands (src/product/tenants/admin.c, src/product/app/cli.c). Only a
-- keyed hash of a token is stored (docs/persistence.md).
--
-- A token row is its id, name, prefix, scopes as "a,b", and created_at, last_used_at and
-- revoked_at as RFC 3339 UTC with milliseconds (NULL when not set):
-- row token: id, name, prefix, scopes, created, last_used, revoked

-- name: auth_lookup
-- Finds the token behind a bearer token, with what its tenant allows.
-- $1 hash = token hash (hex HMAC-SHA256)
-- Returns token id, tenant id, scopes as "a,b", revoked (boolean), unified_api_enabled, the
-- tenant's settings as JSON text and the names of its QR sessions known not WORKING (a JSON
-- array, NULL for none: sql/027); no row for an unknown token.
-- columns: token_id, tenant_id, scopes, revoked, unified, settings, qr_down
SELECT k.id AS token_id, k.tenant_id, array_to_string(k.scopes, ',') AS scopes,
    k.revoked_at IS NOT NULL AS revoked, t.unified_api_enabled AS unified, t.settings::text,
    (SELECT json_agg(s.name) FROM qr_sessions s WHERE s.tenant_id = t.id AND s.status <> 'WORKING')::text AS qr_down
FROM api_tokens k JOIN tenants t ON t.id = k.tenant_id
WHERE k.token_hash = $1;

-- name: tokens_touch
-- Sets last_used_at of the tokens used since the last touch, all in one statement.
-- $1 ids = token ids, as a uuid[] literal: {id,id,...}
UPDATE api_tokens
SET last_used_at = now()
WHERE id = ANY($1::uuid[]);

-- name: token_insert
-- Creates a token for a tenant that may hold tokens (its unified API is enabled).
-- $1 tenant_id
-- $2 name
-- $3 prefix = prefix (the first characters of the token, for listings)
-- $4 hash = token hash (hex HMAC-SHA256)
-- $5 scopes = as "a,b"
-- Returns the token row; no row when the tenant is missing or its unified API is locked.
-- columns: token row
INSERT INTO api_tokens (tenant_id, name, prefix, token_hash, scopes)
SELECT id, $2, $3, $4, string_to_array($5, ',')
FROM tenants
WHERE id = $1 AND unified_api_enabled
RETURNING id, name, prefix, array_to_string(scopes, ',') AS scopes,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(last_used_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_used,
    to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS revoked;

-- name: token_list
-- Lists the tokens of a tenant, revoked ones included.
-- $1 tenant_id
-- Returns token rows, oldest first.
-- columns: token row
SELECT id, name, prefix, array_to_string(scopes, ',') AS scopes,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(last_used_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_used,
    to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS revoked
FROM api_tokens
WHERE tenant_id = $1
ORDER BY created_at, id;

-- name: token_revoke
-- Revokes a token. revoked_at is set once: repeating the revocation is harmless.
-- $1 tenant_id
-- $2 token_id
-- Returns the token row, or no row when the tenant has no such token.
-- columns: token row
UPDATE api_tokens
SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND id = $2
RETURNING id, name, prefix, array_to_string(scopes, ',') AS scopes,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(last_used_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_used,
    to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS revoked;
