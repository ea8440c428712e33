-- Inbound messages and consent (API.md §21; src/product/consent/, docs/inbound.md).
--
-- Inbound: a provider's webhook (Meta's messages, WAHA's message event, Twilio's inbound SMS)
-- is routed to the tenant that owns the receiving number or session (inbound_routes, kept from
-- the tenants' settings by a trigger), stored once per (channel, provider message id), and
-- reported to the tenant's webhook as message.received; all in og_inbound_store, one statement
-- per webhook POST.
--
-- The WhatsApp window: an inbound message to a Meta phone number id opens (phone number id,
-- sender) until its receivedAt + 24 h (whatsapp_windows).
--
-- Consent: a (tenant, number, kind) row of suppressions per kind of channel ('sms', or
-- 'whatsapp' for both WhatsApp channels), changed by keywords (og_inbound_store), by providers'
-- opt-out answers (the triggers below) and by the API, each change an event with its source.
-- An opt-in keeps the row, suppressed false, for a day: the workers' copies
-- (src/product/consent/consent.c) read the rows changed since their last read, deletions
-- included, by the transaction id each row carries (txid), so a send checks consent and the
-- window without a round trip. A row written by a transaction still running when a copy read
-- has a txid at or above that read's snapshot xmin, which is where the next read starts.

-- ---- routes ---------------------------------------------------------------------------------

-- Where inbound messages go: kind 'meta' (key: the phone number id), 'waha' (key: the session)
-- or 'sms' (key: the receiving number), and the tenant's number it arrived at (digits, as
-- settings key it; '+' and the digits for sms).
CREATE TABLE inbound_routes (
    kind      text NOT NULL,
    key       text NOT NULL,
    number    text NOT NULL,
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    PRIMARY KEY (kind, key, number, tenant_id)
);
CREATE INDEX inbound_routes_tenant ON inbound_routes (tenant_id);

-- A tenant's routes from its settings: its Meta numbers' phone number ids, its QR numbers'
-- sessions, its channels.sms.inboundNumbers.
CREATE FUNCTION og_inbound_routes_of(p_tenant uuid, p_settings jsonb)
RETURNS TABLE (kind text, key text, number text, tenant_id uuid)
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'meta', n.value ->> 'phoneNumberId', n.key, p_tenant
    FROM jsonb_each(coalesce(p_settings -> 'channels' -> 'whatsapp_meta' -> 'numbers', '{}')) n
    WHERE jsonb_typeof(n.value) = 'object' AND n.value ? 'phoneNumberId'
    UNION
    SELECT 'waha', n.value ->> 'session', n.key, p_tenant
    FROM jsonb_each(coalesce(p_settings -> 'channels' -> 'whatsapp_qr' -> 'numbers', '{}')) n
    WHERE jsonb_typeof(n.value) = 'object' AND n.value ? 'session'
    UNION
    SELECT 'sms', x.value, x.value, p_tenant
    FROM jsonb_array_elements_text(coalesce(p_settings -> 'channels' -> 'sms' -> 'inboundNumbers', '[]')) x
$$;

CREATE FUNCTION og_inbound_routes_keep() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM inbound_routes r WHERE r.tenant_id = NEW.id;
    INSERT INTO inbound_routes (kind, key, number, tenant_id)
    SELECT * FROM og_inbound_routes_of(NEW.id, NEW.settings) x WHERE x.key IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER tenants_inbound_routes AFTER INSERT OR UPDATE OF settings ON tenants
FOR EACH ROW EXECUTE FUNCTION og_inbound_routes_keep();

INSERT INTO inbound_routes (kind, key, number, tenant_id)
SELECT x.* FROM tenants t, og_inbound_routes_of(t.id, t.settings) x WHERE x.key IS NOT NULL;

-- The tenant a message of route kind p_kind, key p_key goes to, and the tenant's number it
-- came to; p_number (may be NULL) narrows it to that number. Two tenants claiming one route:
-- the older tenant (docs/inbound.md).
CREATE FUNCTION og_inbound_route(p_kind text, p_key text, p_number text, OUT tenant_id uuid, OUT number text)
LANGUAGE sql STABLE AS $$
    SELECT r.tenant_id, r.number
    FROM inbound_routes r JOIN tenants t ON t.id = r.tenant_id
    WHERE r.kind = p_kind AND r.key = p_key AND (p_number IS NULL OR r.number = p_number)
    ORDER BY t.created_at, t.id
    LIMIT 1
$$;

-- ---- inbound messages -----------------------------------------------------------------------

CREATE SEQUENCE inbound_messages_id;
CREATE TABLE inbound_messages (
    tenant_id           uuid        NOT NULL,
    id                  bigint      NOT NULL,
    channel             text        NOT NULL, -- whatsapp_meta, whatsapp_qr, sms
    provider_message_id text        NOT NULL,
    from_number         text        NOT NULL, -- E.164
    to_number           text        NOT NULL, -- E.164: the tenant's number it came to
    phone_number_id     text,                 -- Meta's, else NULL
    session             text,                 -- WAHA's, else NULL
    type                text        NOT NULL, -- text, or what the provider says it is (image, ...)
    body                text,                 -- its text (a caption, a button's title), or NULL
    received_at         timestamptz NOT NULL, -- the provider's time
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
-- Once per provider message id: a provider retrying its webhook stores nothing twice.
CREATE UNIQUE INDEX inbound_messages_provider ON inbound_messages (channel, provider_message_id);
-- GET /api/inbound?from=: a number's messages, newest first.
CREATE INDEX inbound_messages_from ON inbound_messages (tenant_id, from_number, id);
-- Retention (omnigate prune, prune_inbound) by time, tenant by tenant.
CREATE INDEX inbound_messages_created ON inbound_messages (tenant_id, created_at);

-- An inbound item (API.md §21), as the list and the event message.received show it.
CREATE FUNCTION og_inbound_item(m inbound_messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', 'in_' || m.id, 'channel', m.channel, 'from', m.from_number, 'to', m.to_number,
        'type', m.type, 'text', m.body, 'providerMessageId', m.provider_message_id,
        'phoneNumberId', m.phone_number_id, 'session', m.session,
        'receivedAt', to_char(m.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- ---- the WhatsApp window --------------------------------------------------------------------

CREATE TABLE whatsapp_windows (
    phone_number_id text        NOT NULL,
    recipient       text        NOT NULL, -- E.164
    open_until      timestamptz NOT NULL,
    last_inbound_at timestamptz NOT NULL,
    txid            xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (phone_number_id, recipient)
);
CREATE INDEX whatsapp_windows_txid ON whatsapp_windows (txid);
CREATE INDEX whatsapp_windows_recipient ON whatsapp_windows (recipient);
CREATE INDEX whatsapp_windows_until ON whatsapp_windows (open_until);

-- ---- consent --------------------------------------------------------------------------------

CREATE TABLE suppressions (
    tenant_id  uuid        NOT NULL,
    number     text        NOT NULL, -- E.164
    kind       text        NOT NULL, -- 'sms' or 'whatsapp'
    suppressed boolean     NOT NULL, -- false: opted back in (kept a day for the copies)
    source     text        NOT NULL, -- keyword, provider, api
    reason     text,
    changed_at timestamptz NOT NULL DEFAULT now(),
    txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (tenant_id, number, kind)
);
CREATE INDEX suppressions_txid ON suppressions (txid);
CREATE INDEX suppressions_list ON suppressions (tenant_id, number, kind) WHERE suppressed;
CREATE INDEX suppressions_opted_in ON suppressions (changed_at) WHERE NOT suppressed;

-- The kind of consent a channel belongs to.
CREATE FUNCTION og_consent_kind(p_channel text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_channel = 'sms' THEN 'sms' ELSE 'whatsapp' END
$$;

-- The kind a provider's error code says the recipient opted out of (Twilio 21610, Meta 131050),
-- or NULL. The error's name for it is og_webhook_delivery_error's (src/product/callbacks).
CREATE FUNCTION og_consent_code_kind(p_code text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_code WHEN '21610' THEN 'sms' WHEN '131050' THEN 'whatsapp' END
$$;

-- A suppression item (API.md §21).
CREATE FUNCTION og_suppression_item(s suppressions) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object('to', s.number, 'channel', s.kind, 'source', s.source, 'reason', s.reason,
        'createdAt', to_char(s.changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- One event of tenant p_tenant to its webhook (API.md §12), when the webhook is enabled and wants
-- p_type: its outbox row (subject p_subject, data p_data), and the scheduler asked for the
-- tenant's step (og_webhook_wake, sql/011). The events of §21 are made here.
CREATE FUNCTION og_webhook_emit(p_tenant uuid, p_type text, p_subject text, p_data json) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    PERFORM 1 FROM tenant_webhooks w
    WHERE w.tenant_id = p_tenant AND w.disabled_at IS NULL AND p_type = ANY (w.events);
    IF FOUND THEN
        id := nextval('webhook_deliveries_id');
        INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, next_at)
        VALUES (id, p_tenant, og_webhook_id_of(id), p_type, p_subject, og_webhook_body(p_type, p_data), now());
        PERFORM og_webhook_wake(p_tenant);
    END IF;
END
$$;

-- Opts p_number of tenant p_tenant out of (p_out) or back into the kinds p_kinds, from
-- p_source with p_reason. Writes only the kinds whose state changes, each with its event
-- (recipient.opted_out or recipient.opted_in, when the tenant's webhook wants it). Returns the
-- kinds changed.
CREATE FUNCTION og_consent_change(p_tenant uuid, p_number text, p_kinds text[], p_out boolean,
                                  p_source text, p_reason text) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    changed text[];
    t       text := CASE WHEN p_out THEN 'recipient.opted_out' ELSE 'recipient.opted_in' END;
BEGIN
    WITH c AS (
        INSERT INTO suppressions AS s (tenant_id, number, kind, suppressed, source, reason)
        SELECT p_tenant, p_number, k, p_out, p_source, p_reason
        FROM unnest(p_kinds) k
        WHERE p_out OR EXISTS (SELECT FROM suppressions x
                               WHERE x.tenant_id = p_tenant AND x.number = p_number AND x.kind = k
                                   AND x.suppressed)
        ON CONFLICT (tenant_id, number, kind) DO UPDATE
            SET suppressed = EXCLUDED.suppressed, source = EXCLUDED.source, reason = EXCLUDED.reason,
                changed_at = now(), txid = pg_current_xact_id()
            WHERE s.suppressed IS DISTINCT FROM EXCLUDED.suppressed
        RETURNING s.kind)
    SELECT array_agg(kind ORDER BY kind) INTO changed FROM c;
    IF changed IS NULL THEN
        RETURN '{}';
    END IF;
    PERFORM og_webhook_emit(p_tenant, t, p_number,
                            json_build_object('to', p_number, 'channel', k, 'source', p_source, 'reason', p_reason))
    FROM unnest(changed) k;
    RETURN changed;
END
$$;

-- The keywords of API.md §21, p_word being the whole text trimmed and in upper case: 'all' for
-- STOPALL (every kind), 'out' for the other opt-out words, 'in' for the opt-in ones, else NULL.
CREATE FUNCTION og_consent_keyword(p_word text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_word = 'STOPALL' THEN 'all'
        WHEN p_word IN ('STOP', 'UNSUBSCRIBE', 'CANCEL', 'END', 'QUIT', 'REVOKE', 'OPTOUT') THEN 'out'
        WHEN p_word IN ('START', 'YES', 'UNSTOP') THEN 'in'
    END
$$;

-- A provider said the recipient of tenant p_tenant's message p_reference opted out (code
-- p_code, og_consent_code_kind).
CREATE FUNCTION og_consent_provider(p_tenant uuid, p_number text, p_code text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_number IS NOT NULL AND og_consent_code_kind(p_code) IS NOT NULL THEN
        PERFORM og_consent_change(p_tenant, p_number, ARRAY[og_consent_code_kind(p_code)], true, 'provider',
                                  p_code);
    END IF;
END
$$;

-- The triggers: a refused attempt (provider_code), a failed delivery of an attempt
-- (delivery_provider_code), an SMS record (error.providerCode: SMS sends, the sms attempts of
-- unified sends, OTPs) and an OTP sent on WhatsApp (otp_events.error.providerCode). Their WHEN
-- clauses (og_consent_code_kind, the one list of opt-out codes, inlined there) are evaluated
-- without calling the trigger's function: a row without an opt-out code costs nothing more.
CREATE FUNCTION og_consent_on_attempt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_consent_provider(NEW.tenant_id,
        (SELECT m.to_number FROM messages m WHERE m.tenant_id = NEW.tenant_id AND m.reference = NEW.reference),
        CASE WHEN og_consent_code_kind(NEW.delivery_provider_code) IS NOT NULL THEN NEW.delivery_provider_code
             ELSE NEW.provider_code END);
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_consent AFTER INSERT OR UPDATE OF provider_code, delivery_provider_code ON attempts
FOR EACH ROW
WHEN (og_consent_code_kind(NEW.provider_code) IS NOT NULL
      OR og_consent_code_kind(NEW.delivery_provider_code) IS NOT NULL)
EXECUTE FUNCTION og_consent_on_attempt();

CREATE FUNCTION og_consent_on_sms() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_consent_provider(NEW.tenant_id, NEW.to_number, NEW.error ->> 'providerCode');
    RETURN NULL;
END
$$;

CREATE TRIGGER sms_records_consent AFTER INSERT OR UPDATE OF error ON sms_records
FOR EACH ROW
WHEN (og_consent_code_kind(NEW.error ->> 'providerCode') IS NOT NULL)
EXECUTE FUNCTION og_consent_on_sms();

CREATE FUNCTION og_consent_on_otp_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_consent_provider(NEW.tenant_id,
        (SELECT o.to_number FROM otp_requests o
         WHERE o.tenant_id = NEW.tenant_id AND o.reference = NEW.otp_reference),
        NEW.error ->> 'providerCode');
    RETURN NULL;
END
$$;

CREATE TRIGGER otp_events_consent AFTER INSERT ON otp_events
FOR EACH ROW
WHEN (og_consent_code_kind(NEW.error ->> 'providerCode') IS NOT NULL)
EXECUTE FUNCTION og_consent_on_otp_event();

-- ---- storing ----------------------------------------------------------------------------------

-- Stores the inbound messages of one webhook POST (p_items, a JSON array written by
-- src/product/callbacks/webhooks_in.c: {"channel", "pid", "from", "route", "number", "type",
-- "text", "at" (Unix seconds), "phoneNumberId", "session"}; "route" is the route's key and
-- "number", when known, the tenant's number it came to, digits for WhatsApp). Each routed one
-- is stored once; a new one opens its Meta window, applies its keyword, and is an event
-- message.received. Returns the counts: stored, duplicate, unrouted, and the consent changes
-- the keywords made (opted_out, opted_in: kinds changed).
CREATE FUNCTION og_inbound_store(p_items jsonb, OUT stored integer, OUT duplicate integer,
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
        FROM og_inbound_route(CASE ch WHEN 'whatsapp_meta' THEN 'meta' WHEN 'whatsapp_qr' THEN 'waha' ELSE 'sms' END,
                              it ->> 'route', it ->> 'number') r;
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

-- ---- upkeep -----------------------------------------------------------------------------------

-- Windows closed a day ago and opt-ins a day old: the copies have long read them (a copy that
-- read nothing for 10 minutes reads everything again, src/product/consent/consent.c).
CREATE FUNCTION og_consent_prune() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    k integer;
BEGIN
    DELETE FROM whatsapp_windows WHERE open_until < now() - interval '1 day';
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM suppressions WHERE NOT suppressed AND changed_at < now() - interval '1 day';
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN n + k;
END
$$;
