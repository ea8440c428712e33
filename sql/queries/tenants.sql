-- Tenants, for the admin API (src/product/tenants/admin.c) and the admin commands (src/product/app/cli.c).
--
-- A tenant row is its id, name, unified_api_enabled, settings as JSON text, created_at and
-- updated_at as RFC 3339 UTC with milliseconds (API.md §0), and xmin as text: the row version
-- a conditional update compares.
-- row tenant: id, name, unified, settings, created, updated, xmin

-- name: tenant_insert
-- Creates a tenant.
-- $1 name
-- $2 unified = unified API enabled (boolean)
-- $3 settings = settings (JSON text)
-- $4 id = id, or NULL for a random one (the caller that seals secrets with the id chooses it)
-- columns: tenant row
INSERT INTO tenants (id, name, unified_api_enabled, settings)
VALUES (coalesce($4::uuid, gen_random_uuid()), $1, $2, $3::jsonb)
RETURNING id, name, unified_api_enabled AS unified, settings::text,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated, xmin::text;

-- name: tenant_get
-- Reads one tenant.
-- $1 tenant_id
-- Returns the tenant row, or no row when there is no such tenant.
-- columns: tenant row
SELECT id, name, unified_api_enabled AS unified, settings::text,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated, xmin::text
FROM tenants
WHERE id = $1;

-- name: tenant_update
-- Changes the fields given (NULL keeps a field), only if the row is still the version read.
-- $1 tenant_id
-- $2 name = name, or NULL
-- $3 unified = unified API enabled (boolean), or NULL
-- $4 settings = settings (JSON text), or NULL
-- $5 xmin = xmin of the row as read, or NULL to change it whatever its version
-- Returns the tenant row; no row when the tenant is gone or changed since $5 was read.
-- columns: tenant row
UPDATE tenants
SET name = coalesce($2, name),
    unified_api_enabled = coalesce($3::boolean, unified_api_enabled),
    settings = coalesce($4::jsonb, settings),
    updated_at = now()
WHERE id = $1 AND ($5::text IS NULL OR xmin::text = $5::text)
RETURNING id, name, unified_api_enabled AS unified, settings::text,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated, xmin::text;

-- name: tenant_unified
-- Whether a tenant may use the unified API (and hold tokens).
-- $1 tenant_id
-- Returns unified_api_enabled, or no row when there is no such tenant.
-- columns: unified
SELECT unified_api_enabled AS unified
FROM tenants
WHERE id = $1;

-- name: tenants_unsealed
-- The tenants whose settings hold a provider credential (an accessToken, authToken, apiKey or
-- webhookSecret, at any depth: tenants/settings.h) still in clear: written before secrets were
-- sealed (sql/008_sealed_secrets.sql), or by hand. Run inside a transaction, it locks them, so a
-- concurrent run waits and then no longer sees them.
-- Returns id, settings as JSON text.
-- columns: id, settings
SELECT id, settings::text
FROM tenants
WHERE settings @? 'lax $.**.accessToken ? (@.type() == "string" && !(@ starts with "sealed:"))'
    OR settings @? 'lax $.**.authToken ? (@.type() == "string" && !(@ starts with "sealed:"))'
    OR settings @? 'lax $.**.apiKey ? (@.type() == "string" && !(@ starts with "sealed:"))'
    OR settings @? 'lax $.**.webhookSecret ? (@.type() == "string" && !(@ starts with "sealed:"))'
ORDER BY id
FOR UPDATE;

-- name: tenant_seal
-- Stores the settings of a tenant with their credentials sealed; not a change of the settings,
-- so updated_at stays.
-- $1 tenant_id
-- $2 settings = settings (JSON text)
UPDATE tenants
SET settings = $2::jsonb
WHERE id = $1;

-- name: tenants_list
-- One page of tenants, newest first (GET /admin/tenants, `omnigate admin list-tenants`), paged
-- like the logs: the cursor is the last tenant id of the previous page, and the page is the
-- tenants created before it (ties on the time broken by id). The name filter is a
-- case-insensitive substring match: strpos on lower(), so '%' and '_' in the input are plain
-- characters (docs/api-decisions.md). No index: tenants are made by an admin, a few thousand
-- at most, and the filter is checked on each of them in order.
-- $1 cursor = the cursor (a tenant id), or NULL for the first page
-- $2 name = part of the name, or NULL
-- $3 limit
-- columns: tenant row
SELECT t.id, t.name, t.unified_api_enabled AS unified, t.settings::text,
    to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
    to_char(t.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated,
    t.xmin::text
FROM tenants t
WHERE ($1::uuid IS NULL
        OR (t.created_at, t.id) < (SELECT c.created_at, c.id FROM tenants c WHERE c.id = $1::uuid))
    AND ($2::text IS NULL OR strpos(lower(t.name), lower($2::text)) > 0)
ORDER BY t.created_at DESC, t.id DESC
LIMIT $3;
