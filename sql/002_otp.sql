-- OTP abuse limits, enforced in PostgreSQL so they hold across instances and concurrent
-- requests (API.md §3): per tenant and number, one send per 30 s and five per hour. The
-- advisory lock serializes sends for one tenant + number until the transaction commits; a
-- new OTP supersedes the pending one. Failed sends count too: they cost as much and are what
-- SMS pumping looks like.
CREATE FUNCTION omnigate_otp_begin(p_tenant uuid, p_to text, p_reference text, p_code_hash text,
                                   p_length integer, p_ttl_seconds integer,
                                   OUT outcome text, OUT retry_after integer, OUT expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    last_at timestamptz;
    oldest  timestamptz;
    n       integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_tenant::text || '/' || p_to, 1869442416));
    SELECT max(r.created_at), min(r.created_at), count(*) INTO last_at, oldest, n
      FROM otp_requests r
     WHERE r.tenant_id = p_tenant AND r.to_number = p_to AND r.created_at > now() - interval '1 hour';
    IF last_at IS NOT NULL AND last_at > now() - interval '30 seconds' THEN
        outcome := 'cooldown';
        retry_after := greatest(1, ceil(extract(epoch FROM last_at + interval '30 seconds' - now()))::integer);
        RETURN;
    END IF;
    IF n >= 5 THEN
        outcome := 'hourly';
        retry_after := greatest(1, ceil(extract(epoch FROM oldest + interval '1 hour' - now()))::integer);
        RETURN;
    END IF;
    UPDATE otp_requests SET status = 'superseded'
     WHERE tenant_id = p_tenant AND to_number = p_to AND status = 'pending';
    INSERT INTO otp_requests (tenant_id, reference, to_number, code_hash, length, expires_at)
    VALUES (p_tenant, p_reference, p_to, p_code_hash, p_length, now() + make_interval(secs => p_ttl_seconds))
    RETURNING otp_requests.expires_at INTO expires_at;
    outcome := 'ok';
    retry_after := 0;
END
$$;
