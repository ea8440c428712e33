-- Own provider accounts (API.md §23; src/product/tenants/settings.c, src/product/providers/,
-- src/product/callbacks/webhooks_in.c; docs/providers.md, "Own provider accounts").
--
-- A tenant's settings may hold its own Twilio account (channels.sms.account: accountSid,
-- authToken, baseUrl) and its own WAHA server (channels.whatsapp_qr.server: baseUrl, apiKey,
-- webhookSecret), which replace the configured ones for its sends. Their secrets are sealed in
-- the settings like every accessToken (sql/008_sealed_secrets.sql): no table holds them in
-- clear, and none holds a copy. The binary seals them (SQL cannot); this migration only makes
-- them quick to find and confines what each account may say.
--
-- Finding them: the webhooks in verify a request with the secret of the account it names, read
-- by key on a worker's cache miss (sql/queries/accounts.sql), never by a scan of the tenants:
--   - a Twilio AccountSid through the expression index below (account_twilio);
--   - a WAHA session through inbound_routes (sql/021), which already maps every session of every
--     tenant's QR numbers to its tenant (account_waha).
--
-- Confining them: an inbound message verified by tenants' own accounts (the webhook's item
-- carries "accounts": their ids) goes to one of those tenants only; one verified by the
-- configured account (no "accounts"), to a tenant without its own account of that channel. A
-- tenant's credential thus speaks for that tenant only (it cannot post a STOP for another
-- tenant's number), and a session name such as "default" may live on several servers at once.
-- Delivery statuses are not confined: they are matched by the provider's message id, which only
-- the account that sent the message knows (docs/api-decisions.md).

COMMENT ON COLUMN tenants.settings IS
    'Tenant settings (API.md sections 5 and 23). Every secret (accessToken, authToken, apiKey, '
    'webhookSecret) is sealed: "sealed:v1:" + base64 of nonce, AES-256-GCM ciphertext and tag, key '
    'derived from OMNIGATE_SECRET (docs/persistence.md).';

-- The tenants whose own SMS account is a given Twilio account (account_twilio).
CREATE INDEX tenants_sms_account ON tenants ((settings #>> '{channels,sms,account,accountSid}'));

-- og_inbound_route (sql/021) for an item verified by `p_accounts` (the tenants whose own account
-- verified it), or by the configured account (p_accounts NULL: a tenant without its own account
-- of the route's channel). Meta's routes are not concerned: Meta has one app secret.
CREATE FUNCTION og_inbound_route_by(p_kind text, p_key text, p_number text, p_accounts uuid[],
                                    OUT tenant_id uuid, OUT number text)
LANGUAGE sql STABLE AS $$
    SELECT r.tenant_id, r.number
    FROM inbound_routes r JOIN tenants t ON t.id = r.tenant_id
    WHERE r.kind = p_kind AND r.key = p_key AND (p_number IS NULL OR r.number = p_number)
        AND CASE WHEN p_accounts IS NOT NULL THEN r.tenant_id = ANY (p_accounts)
                 WHEN p_kind = 'sms' THEN t.settings #> '{channels,sms,account}' IS NULL
                 WHEN p_kind = 'waha' THEN t.settings #> '{channels,whatsapp_qr,server}' IS NULL
                 ELSE true END
    ORDER BY t.created_at, t.id
    LIMIT 1
$$;

-- og_inbound_store of sql/021, its route found by og_inbound_route_by with the item's
-- "accounts" (an array of tenant ids, or absent); nothing else changes.
CREATE OR REPLACE FUNCTION og_inbound_store(p_items jsonb, OUT stored integer, OUT duplicate integer,
                                 OUT unrouted integer, OUT opted_out integer, OUT opted_in integer)
LANGUAGE plpgsql AS $$
DECLARE
    it      jsonb;
    ch      text;
    tid     uuid;
    rnum    text;
    m       inbound_messages;
    at      timestamptz;
    word    text;
    kw      text;
    changed text[];
BEGIN
    stored := 0; duplicate := 0; unrouted := 0; opted_out := 0; opted_in := 0;
    FOR it IN SELECT * FROM jsonb_array_elements(p_items) LOOP
        ch := it ->> 'channel';
        SELECT r.tenant_id, r.number INTO tid, rnum
        FROM og_inbound_route_by(CASE ch WHEN 'whatsapp_meta' THEN 'meta' WHEN 'whatsapp_qr' THEN 'waha' ELSE 'sms' END,
                                 it ->> 'route', it ->> 'number',
                                 CASE WHEN jsonb_typeof(it -> 'accounts') = 'array' THEN
                                     ARRAY(SELECT a::uuid FROM jsonb_array_elements_text(it -> 'accounts') a) END) r;
        IF tid IS NULL THEN
            unrouted := unrouted + 1;
            CONTINUE;
        END IF;
        at := to_timestamp((it ->> 'at')::double precision);
        INSERT INTO inbound_messages (tenant_id, id, channel, provider_message_id, from_number, to_number,
            phone_number_id, session, type, body, received_at)
        VALUES (tid, nextval('inbound_messages_id'), ch, it ->> 'pid', it ->> 'from',
            CASE WHEN ch = 'sms' THEN rnum ELSE '+' || rnum END,
            it ->> 'phoneNumberId', it ->> 'session', it ->> 'type', it ->> 'text', at)
        ON CONFLICT (channel, provider_message_id) DO NOTHING
        RETURNING * INTO m;
        IF NOT FOUND THEN
            duplicate := duplicate + 1;
            CONTINUE;
        END IF;
        stored := stored + 1;
        IF ch = 'whatsapp_meta' THEN
            INSERT INTO whatsapp_windows AS w (phone_number_id, recipient, open_until, last_inbound_at)
            VALUES (m.phone_number_id, m.from_number, at + interval '24 hours', at)
            ON CONFLICT (phone_number_id, recipient) DO UPDATE
                SET open_until = greatest(w.open_until, EXCLUDED.open_until),
                    last_inbound_at = greatest(w.last_inbound_at, EXCLUDED.last_inbound_at),
                    txid = pg_current_xact_id();
        END IF;
        word := upper(btrim(m.body, E' \t\r\n'));
        kw := CASE WHEN m.type = 'text' THEN og_consent_keyword(word) END;
        IF kw IS NOT NULL THEN
            changed := og_consent_change(m.tenant_id, m.from_number,
                CASE WHEN kw = 'all' THEN ARRAY['sms', 'whatsapp'] ELSE ARRAY[og_consent_kind(ch)] END,
                kw <> 'in', 'keyword', word);
            IF kw = 'in' THEN
                opted_in := opted_in + cardinality(changed);
            ELSE
                opted_out := opted_out + cardinality(changed);
            END IF;
        END IF;
        PERFORM og_webhook_emit(m.tenant_id, 'message.received', i ->> 'id', i) FROM og_inbound_item(m) AS i;
    END LOOP;
END
$$;
