-- QR sessions (API.md §23; sql/027_qr_sessions.sql, src/product/qr/sessions.c).

-- name: qr_session_get
-- A tenant's session as the API shows it, and the tenant's settings (the session's numbers and
-- WAHA server: the admin routes have no tenant of a token to read them from).
-- $1 tenant_id
-- $2 name = the session
-- Returns one row when the tenant exists (session NULL when the gateway knows nothing of it yet);
-- none for an unknown tenant.
-- columns: session, settings
SELECT (SELECT og_qr_session_item(s)::text FROM qr_sessions s WHERE s.tenant_id = t.id AND s.name = $2) AS session,
    t.settings::text AS settings
FROM tenants t
WHERE t.id = $1;

-- name: qr_session_put
-- Records what WAHA answered to a route's start, stop or logout: the session's status, and its
-- number unless `keep` (stop keeps the number linked; start and logout write what WAHA said).
-- The status is as of when the call was sent: a session.status event that happened since
-- (applied before this answer is written, as when WAHA's next move is quick: STARTING then
-- SCAN_QR_CODE 50 ms after a logout) is newer and stays, and an event of later still replaces it
-- (og_qr_session_event). The number is as of when the answer came: the events WAHA sent while
-- it acted carry the number it had before (a logout's STOPPED event still names the account it
-- unlinks, and its STARTING event names none, which keeps the number known), so only an event
-- stamped after the answer (a scan) outranks the answer's number.
-- $1 tenant_id
-- $2 name = the session
-- $3 status = STOPPED, STARTING, SCAN_QR_CODE, WORKING or FAILED
-- $4 number = the linked account (E.164) or NULL
-- $5 keep = true: keep the number known
-- $6 at_ms = when the call was sent (ms since the epoch)
-- $7 answered_ms = when its answer came (ms since the epoch)
-- Returns the session as it stands, always one row: the upsert updates the row even when an event
-- is newer (writing back what it holds: each column's CASE keeps the row's value then; a NULL
-- event_at, no event yet, is never newer), so that RETURNING gives the row as committed last. A
-- read after the upsert would use the statement's snapshot, which does not see an event's row
-- committed while this statement waited for it (the route's worker crashed on the empty answer).
-- columns: session
INSERT INTO qr_sessions AS q (tenant_id, name, status, number, event_at)
VALUES ($1, $2, $3, $4, to_timestamp($6::bigint / 1000.0))
ON CONFLICT (tenant_id, name) DO UPDATE
SET status = CASE WHEN q.event_at > EXCLUDED.event_at THEN q.status ELSE EXCLUDED.status END,
    number = CASE WHEN q.event_at > to_timestamp($7::bigint / 1000.0) THEN q.number
                  WHEN $5::boolean THEN coalesce(EXCLUDED.number, q.number)
                  ELSE EXCLUDED.number END,
    updated_at = CASE WHEN q.event_at > EXCLUDED.event_at THEN q.updated_at ELSE now() END,
    event_at = greatest(q.event_at, EXCLUDED.event_at)
RETURNING og_qr_session_item(q)::text AS session;

-- name: qr_session_event
-- A session.status event from WAHA (og_qr_session_event).
-- $1 session
-- $2 status
-- $3 number = the linked account (E.164) or NULL
-- $4 at_ms = the event's timestamp (ms since the epoch)
-- $5 accounts = the tenants whose own server verified it, as a uuid[] literal, or NULL: the
--    configured server
-- columns: session
SELECT og_qr_session_event($1, $2, $3, to_timestamp($4::bigint / 1000.0), $5::uuid[])::text AS session;
