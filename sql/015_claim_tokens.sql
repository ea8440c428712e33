-- Claims that check their owner (API.md §6, §15; docs/api-decisions.md "Never sent twice").
--
-- A request with an Idempotency-Key claims it with a token of its own (idem_claim). Every
-- later write of the claim names that token: recording the reference in the transaction of
-- the pending row (og_idem_hold, which fails that transaction when the claim was taken over,
-- so the row is not committed and no provider is called), and storing the answer
-- (idem_complete, which changes nothing for a holder that lost its claim). A repeat that
-- resolves a claim past its lease (og_idem_stale) hands the claim to its own token, whether it
-- takes it over (nothing was recorded under it) or answers 502 outcome_unknown for it.
--
-- Status writes name the status they expect. A send's completion (msg_complete, sms_finish,
-- og_msg_complete_many) finds its row 'pending', or 'unknown' when the pending sweep or a
-- stale claim marked it so while the send was still running: the send did run, so its
-- attempts and its outcome are recorded over 'unknown' (the truth, not the guess), and the
-- message.sent event fires then, once (it fires when a message leaves 'pending' or 'unknown').

ALTER TABLE idempotency_keys ADD COLUMN claim_token text;

-- Records the reference of a claimed key, only while `p_token` still holds the claim; else
-- fails the transaction with SQLSTATE OG001 (OG_IDEM_LOST_SQLSTATE in messaging/idem.h).
CREATE FUNCTION og_idem_hold(p_tenant uuid, p_key text, p_token text, p_reference text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_keys SET reference = p_reference
    WHERE tenant_id = p_tenant AND key = p_key AND claim_token = p_token AND completed_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the idempotency claim of this request was taken over' USING ERRCODE = 'OG001';
    END IF;
END
$$;

-- og_idem_stale (sql/007) with the repeat's token.
DROP FUNCTION og_idem_stale(uuid, text, integer);
CREATE FUNCTION og_idem_stale(p_tenant uuid, p_key text, p_lease_ms integer, p_token text,
                              OUT action text, OUT reference text, OUT attempts json)
-- Planned afresh on every call, as sql/009 set it (the pending messages' index would otherwise
-- compete with the primary key).
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
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
        SET created_at = now(), lease_until = now() + p_lease_ms * interval '1 millisecond',
            claim_token = p_token
        WHERE tenant_id = p_tenant AND key = p_key;
        action := 'takeover';
        RETURN;
    END IF;
    action := 'unknown';
    reference := k.reference;
    -- The repeat stores the key's answer now: the first holder's completion no longer may.
    UPDATE idempotency_keys SET claim_token = p_token WHERE tenant_id = p_tenant AND key = p_key;
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

-- message.sent also for a message that leaves 'unknown' (sql/011).
CREATE OR REPLACE FUNCTION og_webhook_on_message() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted text[];
    types  text[] := '{}';
BEGIN
    SELECT events INTO wanted FROM tenant_webhooks
    WHERE tenant_id = NEW.tenant_id AND disabled_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF OLD.status IN ('pending', 'unknown') AND NEW.status <> 'failed' AND 'message.sent' = ANY (wanted) THEN
        types := types || 'message.sent'::text;
    END IF;
    IF NEW.status IN ('failed', 'delivered', 'read', 'undelivered')
            AND 'message.' || NEW.status = ANY (wanted) THEN
        types := types || ('message.' || NEW.status);
    END IF;
    IF cardinality(types) = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, next_at)
    SELECT x.id, NEW.tenant_id, x.webhook_id, x.t, NEW.reference, og_webhook_body(x.t, i), now()
    FROM og_message_item(NEW) AS i,
        LATERAL (SELECT y.id, y.t, og_webhook_id_of(y.id) AS webhook_id
                 FROM (SELECT nextval('webhook_deliveries_id') AS id, t FROM unnest(types) AS t) y) x;
    PERFORM og_webhook_wake(NEW.tenant_id);
    RETURN NULL;
END
$$;

-- The completion's set form (sql/013, sql/014) guarded by the status it expects.
CREATE OR REPLACE FUNCTION og_msg_complete_many(p_tenant uuid[], p_reference text[], p_status text[],
                                     p_winner text[], p_attempts json[], p_goes_on boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    WITH x AS (
        SELECT * FROM unnest(p_tenant, p_reference, p_status, p_winner, p_attempts, p_goes_on)
            AS x(tenant_id, reference, status, winner, attempts, goes_on)),
    a AS (
        INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
            error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
            delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
            delivery_message)
        SELECT x.tenant_id, x.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0),
            CASE WHEN y.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code, d.error_message
        FROM x CROSS JOIN LATERAL json_to_recordset(x.attempts) AS y(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint)
        LEFT JOIN LATERAL og_delivery_of(y.channel, y.provider_message_id) AS d
            ON y.status = 'sent'
        RETURNING tenant_id, reference, status, delivery_status),
    -- The rule of msg_complete (og_message_delivery, sql/005), per message of the batch.
    s AS (
        SELECT tenant_id, reference, bool_or(delivery_status = 'read') AS is_read,
            bool_or(delivery_status = 'delivered') AS is_delivered,
            bool_and(delivery_status IN ('failed', 'undelivered')) AS all_failed
        FROM a WHERE status = 'sent'
        GROUP BY tenant_id, reference)
    UPDATE messages m
    SET status = CASE WHEN x.status <> 'sent' THEN x.status
                      WHEN s.is_read THEN 'read'
                      WHEN s.is_delivered THEN 'delivered'
                      WHEN s.all_failed THEN CASE WHEN x.goes_on THEN 'sent' ELSE 'undelivered' END
                      ELSE 'sent' END,
        winning_channel = x.winner, completed_at = now()
    FROM x LEFT JOIN s ON s.tenant_id = x.tenant_id AND s.reference = x.reference
    WHERE m.tenant_id = x.tenant_id AND m.reference = x.reference AND m.status IN ('pending', 'unknown');
END
$$;
