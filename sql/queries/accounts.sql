-- The tenants' own provider accounts (API.md §23) by the key a provider's webhook names, for the
-- webhooks in (src/product/callbacks/webhooks_in.c), each worker keeping what it read for
-- OMNIGATE_AUTH_TTL_MS (src/product/providers/accounts.c); sql/026_own_accounts.sql says how
-- each is found without a scan. Each returns the tenants whose own account the key names, oldest
-- first, at most 8 (OG_ACCOUNTS_PER_KEY: tenants may share one account), with the secret their
-- webhooks are signed with, sealed as stored (the tenant's id is its associated data).

-- name: account_twilio
-- The tenants whose own SMS account (channels.sms.account) is the Twilio account account_sid,
-- with its authToken.
-- $1 account_sid = the request's AccountSid
-- columns: tenant_id, secret
SELECT t.id::text AS tenant_id, t.settings #>> '{channels,sms,account,authToken}' AS secret
FROM tenants t
WHERE t.settings #>> '{channels,sms,account,accountSid}' = $1
ORDER BY t.created_at, t.id
LIMIT 8;

-- name: account_waha
-- The tenants with their own WAHA server (channels.whatsapp_qr.server) one of whose QR numbers
-- uses the session, with the server's webhookSecret.
-- $1 session = the event's session
-- columns: tenant_id, secret
SELECT t.id::text AS tenant_id, t.settings #>> '{channels,whatsapp_qr,server,webhookSecret}' AS secret
FROM tenants t
WHERE t.id IN (SELECT r.tenant_id FROM inbound_routes r WHERE r.kind = 'waha' AND r.key = $1)
    AND t.settings #> '{channels,whatsapp_qr,server}' IS NOT NULL
ORDER BY t.created_at, t.id
LIMIT 8;
