-- Numbers that have no WhatsApp (API.md §13), shared by every instance: a fact about the
-- number, not about a tenant. Recorded from a synchronous "not on WhatsApp" answer (Meta
-- 131026, WAHA "not registered on WhatsApp") by the send's completion write, and from a Meta
-- `failed` status with code 131026; cleared by a `delivered` or `read` WhatsApp status for the
-- number. Sends skip the WhatsApp channels for a number while `until` is ahead
-- (src/product/messaging/nowa.c caches the answer per worker for a few seconds). Expired rows are
-- deleted by the sweep step.
CREATE TABLE not_on_whatsapp (
    number      text        PRIMARY KEY, -- E.164 with '+'
    until       timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Applies what a batch of statuses (og_status_apply's argument) says about numbers: a Meta
-- failure 131026 remembers the message's number for ttl_s seconds; a delivered or read status on
-- a WhatsApp channel forgets it. Numbers come from the attempts the statuses are about
-- (statuses for attempts not recorded yet are not seen here; the sync answer usually came first).
CREATE FUNCTION og_nowa_from_statuses(p_statuses jsonb, p_ttl_s integer) RETURNS void
LANGUAGE sql AS $$
    WITH s AS (
        SELECT x.channel, x.pid, x.status, x.code
        FROM jsonb_to_recordset(p_statuses) AS x(channel text, pid text, status text, code text)
        WHERE x.channel IN ('whatsapp_meta', 'whatsapp_qr')
            AND (x.status IN ('delivered', 'read') OR (x.channel = 'whatsapp_meta' AND x.status = 'failed'
                AND x.code = '131026'))
    ), n AS (
        SELECT DISTINCT m.to_number, s.status = 'failed' AS failed
        FROM s
        JOIN attempts a ON a.channel = s.channel AND a.provider_message_id = s.pid
        JOIN messages m ON m.tenant_id = a.tenant_id AND m.reference = a.reference
    ), forget AS (
        DELETE FROM not_on_whatsapp w USING n WHERE w.number = n.to_number AND NOT n.failed
    )
    INSERT INTO not_on_whatsapp (number, until)
    SELECT to_number, now() + p_ttl_s * interval '1 second' FROM n WHERE failed
    ON CONFLICT (number) DO UPDATE SET until = EXCLUDED.until, recorded_at = now();
$$;
