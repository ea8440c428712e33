-- One-time passwords, POST /api/sms/otp/send and /verify (src/product/messaging/otp.c, API.md §3).
-- Every change of an OTP's status writes its event in the same statement, so the history
-- that the logs show cannot miss a step. The send limits live in omnigate_otp_begin
-- (sql/002_otp.sql).
--
-- An OTP row, what a verify judges, is its reference, code_hash, status, whether it expired
-- (boolean) and failed_attempts:
-- row otp: reference, code_hash, status, expired, failed_attempts

-- name: otp_begin
-- Starts an OTP, unless the number's send limits refuse it; supersedes the pending one.
-- $1 tenant_id
-- $2 to = the number (E.164)
-- $3 reference
-- $4 code_hash
-- $5 length = code length
-- $6 ttl_s = time to live, in seconds
-- Returns outcome ('ok', 'cooldown' or 'hourly'), retry_after in seconds, and expires_at
-- as RFC 3339 UTC with milliseconds.
-- columns: outcome, retry_after, expires_at
SELECT outcome, retry_after,
    to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_at
FROM omnigate_otp_begin($1, $2, $3, $4, $5, $6);

-- name: otp_sent
-- Records how the code went out (API.md §18): the channel that delivered it (the OTP fails
-- when none did) and one history event per attempt in the order they were made, 'sent' or
-- 'send_failed' with its channel and, failed, its error (sql/017).
-- $1 tenant_id
-- $2 reference
-- $3 channel = the channel that delivered the code, NULL when none did
-- $4 events = a JSON array of {event, channel, error}, one per attempt, in order
WITH u AS (
    UPDATE otp_requests
    SET status = CASE WHEN $3::text IS NULL THEN 'failed' ELSE status END, channel = $3::text
    WHERE tenant_id = $1 AND reference = $2
    RETURNING tenant_id, reference)
INSERT INTO otp_events (tenant_id, otp_reference, event, channel, error)
SELECT u.tenant_id, u.reference, e.event, e.channel, e.error
FROM u, ROWS FROM (json_to_recordset($4::json) AS (event text, channel text, error jsonb))
    WITH ORDINALITY AS e(event, channel, error, n)
ORDER BY e.n;

-- name: otp_find
-- Finds the OTP a verify is about, by its reference.
-- $1 tenant_id
-- $2 reference
-- columns: otp row
SELECT reference, code_hash, status, expires_at <= now() AS expired, failed_attempts
FROM otp_requests
WHERE tenant_id = $1 AND reference = $2;

-- name: otp_find_to
-- Finds the OTP a verify by number is about: the number's newest (otp_requests_tenant_to;
-- references are in time order, and two sends to one number are 30 s apart at least).
-- $1 tenant_id
-- $2 to = the number (E.164)
-- columns: otp row
SELECT reference, code_hash, status, expires_at <= now() AS expired, failed_attempts
FROM otp_requests
WHERE tenant_id = $1 AND to_number = $2
ORDER BY reference DESC
LIMIT 1;

-- name: otp_verify_ok
-- Verifies an OTP on the right code, if it is still pending, unexpired and not locked.
-- $1 tenant_id
-- $2 reference
-- Returns a row when this verify won (status verified, event 'verify_success'), none when
-- the OTP was no longer pending.
-- columns: verified
WITH u AS (
    UPDATE otp_requests
    SET status = 'verified', verified_at = now()
    WHERE tenant_id = $1 AND reference = $2 AND status = 'pending' AND expires_at > now()
        AND failed_attempts < 5
    RETURNING tenant_id, reference)
INSERT INTO otp_events (tenant_id, otp_reference, event)
SELECT tenant_id, reference, 'verify_success'
FROM u
RETURNING 1 AS verified;

-- name: otp_verify_bad
-- Counts a wrong code against a pending OTP: event 'verify_failed', and the OTP is locked
-- (event 'locked') at the fifth. One INSERT writes both events in order, since
-- data-modifying CTEs run in no set order.
-- $1 tenant_id
-- $2 reference
-- Returns failed_attempts and status after the count; no row when the OTP was no longer
-- pending.
-- columns: failed_attempts, status
WITH u AS (
    UPDATE otp_requests
    SET failed_attempts = failed_attempts + 1,
        status = CASE WHEN failed_attempts + 1 >= 5 THEN 'locked' ELSE status END
    WHERE tenant_id = $1 AND reference = $2 AND status = 'pending' AND expires_at > now()
    RETURNING tenant_id, reference, failed_attempts, status),
e AS (
    INSERT INTO otp_events (tenant_id, otp_reference, event)
    SELECT u.tenant_id, u.reference, v.event
    FROM u, (VALUES (1, 'verify_failed'), (2, 'locked')) AS v(n, event)
    WHERE v.n = 1 OR u.status = 'locked'
    ORDER BY v.n)
SELECT failed_attempts, status
FROM u;

-- name: otp_expire
-- Expires a pending OTP past its time, with its event 'expired'.
-- $1 tenant_id
-- $2 reference
WITH u AS (
    UPDATE otp_requests
    SET status = 'expired'
    WHERE tenant_id = $1 AND reference = $2 AND status = 'pending' AND expires_at <= now()
    RETURNING tenant_id, reference)
INSERT INTO otp_events (tenant_id, otp_reference, event)
SELECT tenant_id, reference, 'expired'
FROM u;

-- name: otp_event
-- Records an event of an OTP whose status does not change (a verify refused).
-- $1 tenant_id
-- $2 reference
-- $3 event
INSERT INTO otp_events (tenant_id, otp_reference, event)
VALUES ($1, $2, $3);
