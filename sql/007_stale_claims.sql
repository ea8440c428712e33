-- Idempotency keys and pending work after an instance dies (API.md §15).
--
-- A claim has a lease: the longest its request could still take. The route records, in the
-- transaction that commits its pending row (before any provider call), which record the key
-- is about. A repeat that finds the claim unfinished past its lease resolves it here: with no
-- record, nothing was sent and the repeat takes the claim over; with a record, the first
-- request may have sent, so it is never sent again: the message becomes 'unknown' and the
-- repeat answers 502 outcome_unknown (the caller stores that answer for every later repeat).

ALTER TABLE idempotency_keys ADD COLUMN lease_until timestamptz;

-- Returns the action for an unfinished claim of (tenant, key) whose lease has run out:
-- 'takeover' (claimed again, lease renewed: go on as a new request), 'unknown' (with the
-- record's reference and the attempts recorded for it), or 'busy' when the lease still
-- holds or the claim finished meanwhile.
CREATE FUNCTION og_idem_stale(p_tenant uuid, p_key text, p_lease_ms integer,
                              OUT action text, OUT reference text, OUT attempts json)
LANGUAGE plpgsql AS $$
DECLARE
    k idempotency_keys%ROWTYPE;
BEGIN
    SELECT * INTO k FROM idempotency_keys WHERE tenant_id = p_tenant AND key = p_key FOR UPDATE;
    IF NOT FOUND OR k.completed_at IS NOT NULL OR k.lease_until IS NULL OR k.lease_until > now() THEN
        action := 'busy';
        RETURN;
    END IF;
    IF k.reference IS NULL OR k.route = 'otp_verify' THEN
        -- Nothing irreversible happened under this claim: it is the repeat's now.
        UPDATE idempotency_keys
        SET created_at = now(), lease_until = now() + p_lease_ms * interval '1 millisecond'
        WHERE tenant_id = p_tenant AND key = p_key;
        action := 'takeover';
        RETURN;
    END IF;
    action := 'unknown';
    reference := k.reference;
    IF k.route = 'omni' THEN
        UPDATE messages SET status = 'unknown', completed_at = now()
        WHERE tenant_id = p_tenant AND messages.reference = k.reference AND status = 'pending';
    ELSIF k.route = 'sms' THEN
        UPDATE sms_records SET status = 'unknown'
        WHERE tenant_id = p_tenant AND sms_records.reference = k.reference AND status = 'pending';
    END IF;
    SELECT coalesce(json_agg(json_build_object('channel', a.channel, 'status', a.status)
                             ORDER BY a.seq), '[]'::json)
    INTO attempts
    FROM attempts a WHERE a.tenant_id = p_tenant AND a.reference = k.reference;
END
$$;

-- Pending messages older than any send could take become 'unknown' (run by the `sweep` step,
-- at least every 30 s by some live instance). Returns how many.
CREATE FUNCTION og_sweep_pending(p_older_ms integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    UPDATE messages SET status = 'unknown', completed_at = now()
    WHERE status = 'pending'
        AND created_at > now() - interval '7 days'
        AND created_at < now() - p_older_ms * interval '1 millisecond';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The sweep is one step that reschedules itself every 15 s (src/product/steps/pending_sweep.c): whichever
-- live worker claims it runs it, so it runs while any instance lives. One per database.
CREATE UNIQUE INDEX steps_singleton ON steps (kind) WHERE tenant_id IS NULL AND reference IS NOT NULL;
INSERT INTO steps (kind, reference, due_at) VALUES ('sweep', 'sweep', now());
