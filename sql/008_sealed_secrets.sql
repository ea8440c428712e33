-- Secrets at rest (docs/persistence.md, "Secrets at rest"): every provider credential in
-- tenants.settings (each "accessToken" member) is stored sealed, as
-- "sealed:v1:" + base64(nonce || AES-256-GCM ciphertext || tag) under a key derived from
-- OMNIGATE_SECRET, which the database never sees. SQL cannot seal, so this migration changes
-- no row: the binary seals the credentials still in clear right after migrating (`omnigate
-- migrate`, and `omnigate serve` at start), in one transaction that locks the rows it changes.
--
-- The version matters on its own: a binary older than this one would send a sealed value as
-- its bearer token, and it refuses to start on a schema newer than it knows.

COMMENT ON COLUMN tenants.settings IS
    'Tenant settings (API.md section 5). Every accessToken is sealed: "sealed:v1:" + base64 of '
    'nonce, AES-256-GCM ciphertext and tag, key derived from OMNIGATE_SECRET (docs/persistence.md).';
