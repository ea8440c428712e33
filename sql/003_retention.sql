-- Retention (docs/operations.md): `omnigate prune --before DATE` deletes log data older than
-- DATE in small batches, one short transaction per call of omnigate_prune_batch, tenant by
-- tenant through the (tenant_id, created_at) indexes the logs already use. Writers never
-- wait: they insert new rows and touch no row older than a day, and a batch only locks the
-- rows it deletes. Children go before their parents (attempts, otp_events).
CREATE FUNCTION omnigate_prune_batch(p_tenant uuid, p_before timestamptz, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    refs text[];
    n    integer := 0;
    k    integer;
BEGIN
    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM messages
         WHERE tenant_id = p_tenant AND created_at < p_before
         ORDER BY created_at LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        DELETE FROM attempts WHERE tenant_id = p_tenant AND reference = ANY (refs);
        DELETE FROM messages WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;

    DELETE FROM sms_records WHERE tenant_id = p_tenant AND reference IN (
        SELECT reference FROM sms_records
         WHERE tenant_id = p_tenant AND created_at < p_before
         ORDER BY created_at LIMIT p_limit);
    GET DIAGNOSTICS k = ROW_COUNT;
    n := n + k;

    SELECT array_agg(reference) INTO refs FROM (
        SELECT reference FROM otp_requests
         WHERE tenant_id = p_tenant AND created_at < p_before
         ORDER BY created_at LIMIT p_limit) s;
    IF refs IS NOT NULL THEN
        DELETE FROM otp_events WHERE tenant_id = p_tenant AND otp_reference = ANY (refs);
        DELETE FROM otp_requests WHERE tenant_id = p_tenant AND reference = ANY (refs);
        n := n + cardinality(refs);
    END IF;
    RETURN n;
END
$$;
