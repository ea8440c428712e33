-- Durable steps (src/data/jobs.c) and delivery-based fallback (API.md §11).
--
-- A step is work due at a time, kept here rather than in a worker's memory. Any worker of any
-- instance claims due steps with FOR UPDATE SKIP LOCKED, setting a lease (owner, until); a
-- worker that dies loses nothing, its lease expires and another takes the step. A step is
-- closed (deleted) by og_step_close in the same transaction that records its result, and only
-- by the lease owner: a holder whose lease was taken over cannot record anything.

CREATE TABLE steps (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL,
    tenant_id   uuid,
    reference   text,
    payload     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    due_at      timestamptz NOT NULL,
    lease_owner text,
    lease_until timestamptz,
    claims      integer     NOT NULL DEFAULT 0,  -- times claimed; > 1: a holder died or gave up
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX steps_due ON steps (due_at);
-- One pending step per message and kind: the chain of a delivery-based fallback.
CREATE UNIQUE INDEX steps_subject ON steps (tenant_id, reference, kind) WHERE reference IS NOT NULL;

CREATE FUNCTION og_step_close(p_id bigint, p_owner text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM steps WHERE id = p_id AND lease_owner = p_owner;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % is not leased by %', p_id, p_owner USING ERRCODE = 'P0001';
    END IF;
END
$$;

-- Delivery-based fallback: what the chain waits for, and the senders the send resolved, so a
-- later step sends from the same numbers.
ALTER TABLE messages
    ADD COLUMN fallback_on      text, -- 'delivered' or 'read' (no CHECK: each costs every write a parse)
    ADD COLUMN fallback_after_s integer,
    ADD COLUMN whatsapp_from    text,
    ADD COLUMN sms_sender       text;
ALTER TABLE attempts
    ADD COLUMN fallback_reason text; -- status_failed, status_undelivered, no_status_in_time

-- The statuses of a message decide its chain: when the attempt the chain waits on fails, the
-- next step is due now (and every worker is told); when any attempt reaches the wanted status
-- the chain ends (its step is deleted, unless a worker holds it: it checks again itself).
CREATE FUNCTION og_fallback_on_status(p_tenant uuid[], p_ref text[]) RETURNS void
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n integer;
BEGIN
    DELETE FROM steps st
    USING unnest(p_tenant, p_ref) AS r(tenant_id, reference), messages m
    WHERE st.kind = 'fallback' AND st.tenant_id = r.tenant_id AND st.reference = r.reference
        AND st.lease_owner IS NULL
        AND m.tenant_id = r.tenant_id AND m.reference = r.reference AND m.fallback_on IS NOT NULL
        AND EXISTS (SELECT 1 FROM attempts a
                    WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference
                        AND og_status_rank(a.delivery_status) >= og_status_rank(m.fallback_on));
    WITH due AS (
        UPDATE steps st SET due_at = now()
        FROM unnest(p_tenant, p_ref) AS r(tenant_id, reference)
        WHERE st.kind = 'fallback' AND st.tenant_id = r.tenant_id AND st.reference = r.reference
            AND st.lease_owner IS NULL AND st.due_at > now()
            AND (SELECT a.delivery_status FROM attempts a
                 WHERE a.tenant_id = r.tenant_id AND a.reference = r.reference AND a.status = 'sent'
                 ORDER BY a.seq DESC LIMIT 1) IN ('failed', 'undelivered')
        RETURNING 1)
    SELECT count(*) INTO n FROM due;
    IF n > 0 THEN
        PERFORM pg_notify('og_steps', 'fallback');
    END IF;
END
$$;

-- og_status_recompute of sql/005, with the fallback hook: a message whose chain still waits
-- is 'sent', not 'undelivered', until the chain ends.
CREATE OR REPLACE FUNCTION og_status_recompute(p_channel text[], p_pid text[]) RETURNS integer
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    t_tenant uuid[];
    t_ref    text[];
    n_att    integer;
    n_sms    integer;
BEGIN
    PERFORM 1 FROM attempts a, unnest(p_channel, p_pid) AS k(channel, pid)
     WHERE a.channel = k.channel AND a.provider_message_id = k.pid AND a.status = 'sent'
     ORDER BY a.tenant_id, a.reference, a.seq
     FOR UPDATE OF a;
    WITH u AS (
        UPDATE attempts a
        SET delivery_status = coalesce(d.status, 'sent'), delivered_at = d.delivered_at,
            read_at = d.read_at, delivery_error = d.delivery_error,
            delivery_provider_code = d.provider_code, delivery_message = d.error_message
        FROM unnest(p_channel, p_pid) AS k(channel, pid)
        CROSS JOIN LATERAL og_delivery_of(k.channel, k.pid) AS d
        WHERE a.channel = k.channel AND a.provider_message_id = k.pid AND a.status = 'sent'
        RETURNING a.tenant_id, a.reference),
    r AS (SELECT DISTINCT tenant_id, reference FROM u ORDER BY tenant_id, reference)
    SELECT array_agg(tenant_id), array_agg(reference), (SELECT count(*) FROM u)
      INTO t_tenant, t_ref, n_att
      FROM r;

    IF t_ref IS NOT NULL THEN
        PERFORM 1 FROM messages m, unnest(t_tenant, t_ref) AS r(tenant_id, reference)
         WHERE m.tenant_id = r.tenant_id AND m.reference = r.reference
         ORDER BY m.tenant_id, m.reference
         FOR UPDATE OF m;
        PERFORM og_fallback_on_status(t_tenant, t_ref);
        UPDATE messages m
        SET status = x.s
        FROM (SELECT r.tenant_id, r.reference, og_message_status(r.tenant_id, r.reference) AS s
              FROM unnest(t_tenant, t_ref) AS r(tenant_id, reference)) x
        WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference
            AND m.status IN ('sent', 'delivered', 'read', 'undelivered') AND m.status <> x.s;
    END IF;

    PERFORM 1 FROM sms_records s, unnest(p_channel, p_pid) AS k(channel, pid)
     WHERE k.channel = 'sms' AND s.provider_message_id = k.pid AND s.status = 'sent'
     ORDER BY s.tenant_id, s.reference
     FOR UPDATE OF s;
    UPDATE sms_records s
    SET delivery_status = coalesce(d.status, 'sent'), delivered_at = d.delivered_at
    FROM unnest(p_channel, p_pid) AS k(channel, pid)
    CROSS JOIN LATERAL og_delivery_of(k.channel, k.pid) AS d
    WHERE k.channel = 'sms' AND s.provider_message_id = k.pid AND s.status = 'sent';
    GET DIAGNOSTICS n_sms = ROW_COUNT;
    RETURN n_att + n_sms;
END
$$;

-- A completed message's status from its accepted attempts (the rule of og_message_delivery,
-- written out over the rows: a call of og_message_delivery with a sub-select argument is not
-- inlined and would parse its body again on every execution), except that 'undelivered' waits
-- while a fallback step is still pending for it.
CREATE FUNCTION og_message_status(p_tenant uuid, p_ref text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN bool_or(a.delivery_status = 'read') THEN 'read'
                WHEN bool_or(a.delivery_status = 'delivered') THEN 'delivered'
                WHEN bool_and(a.delivery_status IN ('failed', 'undelivered'))
                    THEN CASE WHEN EXISTS (SELECT 1 FROM steps st
                                           WHERE st.kind = 'fallback' AND st.tenant_id = p_tenant
                                               AND st.reference = p_ref)
                              THEN 'sent' ELSE 'undelivered' END
                ELSE 'sent' END
    FROM attempts a
    WHERE a.tenant_id = p_tenant AND a.reference = p_ref AND a.status = 'sent'
$$;

-- Schedules the next step of a message's delivery-based fallback chain after an accepted
-- attempt: due when its fallbackAfterSeconds run out, or now when the accepted attempt has
-- already failed (its status came before this commit); nothing when the wanted status is
-- already reached. Returns true when the step is due now (every worker is told).
CREATE FUNCTION og_fallback_schedule(p_tenant uuid, p_ref text) RETURNS boolean
LANGUAGE plpgsql
-- Planned afresh on every call: a plan cached while the tables were small (a new
-- deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    wanted text;
    after_s integer;
    last_status text;
    due timestamptz;
BEGIN
    SELECT fallback_on, fallback_after_s INTO wanted, after_s
    FROM messages WHERE tenant_id = p_tenant AND reference = p_ref;
    IF wanted IS NULL OR EXISTS (
            SELECT 1 FROM attempts
            WHERE tenant_id = p_tenant AND reference = p_ref
                AND og_status_rank(delivery_status) >= og_status_rank(wanted)) THEN
        RETURN false;
    END IF;
    SELECT delivery_status INTO last_status FROM attempts
    WHERE tenant_id = p_tenant AND reference = p_ref AND status = 'sent'
    ORDER BY seq DESC LIMIT 1;
    due := CASE WHEN last_status IN ('failed', 'undelivered') THEN now()
                ELSE now() + after_s * interval '1 second' END;
    INSERT INTO steps (kind, tenant_id, reference, due_at) VALUES ('fallback', p_tenant, p_ref, due);
    IF due <= now() THEN
        PERFORM pg_notify('og_steps', 'fallback');
        RETURN true;
    END IF;
    RETURN false;
END
$$;
