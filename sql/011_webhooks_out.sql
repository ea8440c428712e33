-- Tenant webhooks out (API.md §12; docs/webhooks.md for tenants, docs/persistence.md for the
-- design).
--
-- A tenant has at most one webhook (its URL, the events it wants, its signing secret sealed by
-- the binary: SQL never sees it in clear). Every event is a row of webhook_deliveries, the
-- outbox, inserted by a trigger in the same transaction as the change it reports: a message
-- whose status becomes sent, failed, delivered, read or undelivered, an OTP that becomes
-- verified or locked. No webhook, a disabled one or an event the tenant did not ask for: no
-- row, and the cost is one primary-key probe of tenant_webhooks in the trigger.
--
-- Deliveries are made by one durable step per tenant (kind 'webhook', reference 'outbox',
-- src/product/tenant_webhooks/webhooks_out.c): whichever worker holds it tries that tenant's due deliveries,
-- at most 8 at a time, records each try, and ends with og_webhook_release, which schedules the
-- step again at the earliest next try. One step per tenant is what makes the limit of 8 in
-- flight hold for the tenant across every worker and instance.
--
-- The event's transaction never writes the steps table: a send's completion write (batched
-- with others, of many tenants) must not wait for, or deadlock with, another transaction over
-- a tenant's step row. It looks, without locking, whether the tenant's step is running or due;
-- if not, it asks for one with NOTIFY og_steps 'webhook', and the scheduler
-- (og_webhook_schedule, run by one worker per instance on that notification and every second)
-- creates the steps of tenants with due deliveries, or makes them due now. The one-second run
-- also catches the race of an event committing while its tenant's step ends without seeing it.

CREATE TABLE tenant_webhooks (
    tenant_id       uuid        PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    url             text        NOT NULL,
    events          text[]      NOT NULL,
    secret          text        NOT NULL,  -- "sealed:v1:..." (seal.h): whsec_ + base64 of 32 bytes
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    disabled_at     timestamptz,           -- set by a 410, or after 5 days of failed tries
    disabled_reason text,                  -- 'gone' (410) or 'failing' (5 days)
    failing_since   timestamptz            -- the first failed try since the last success
);

-- One row per event (the outbox) and its delivery state.
-- status: pending (not tried yet, or queued again), failed (the last try failed, another is
-- scheduled), delivered, exhausted (no try left, or the webhook was disabled or deleted).
CREATE SEQUENCE webhook_deliveries_id;
CREATE TABLE webhook_deliveries (
    id           bigint      PRIMARY KEY DEFAULT nextval('webhook_deliveries_id'),
    tenant_id    uuid        NOT NULL,
    -- The webhook-id header, the same on every try, and the API's id: "msg_", the id in 16 hex
    -- digits (found by the primary key) and 16 random ones (unique across installations).
    webhook_id   text        NOT NULL,
    type         text        NOT NULL,
    subject      text        NOT NULL,  -- the message's or the OTP's reference
    body         text        NOT NULL,  -- exactly the bytes sent and signed
    status       text        NOT NULL DEFAULT 'pending',
    tries        integer     NOT NULL DEFAULT 0,
    next_at      timestamptz,           -- when the next try is due; NULL once delivered or exhausted
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    last_error   text
);
ALTER SEQUENCE webhook_deliveries_id OWNED BY webhook_deliveries.id;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (tenant_id, next_at) WHERE next_at IS NOT NULL;
CREATE INDEX webhook_deliveries_page ON webhook_deliveries (tenant_id, id);
CREATE INDEX webhook_deliveries_status ON webhook_deliveries (tenant_id, status, id);

-- Every try of a delivery. error: NULL on success, else http_error (a status other than 2xx),
-- timeout, unreachable, blocked_address or error.
CREATE TABLE webhook_tries (
    delivery_id bigint      NOT NULL,
    n           integer     NOT NULL,  -- 1 for the first try
    at          timestamptz NOT NULL,
    http_status integer,
    latency_ms  integer     NOT NULL,
    error       text,
    message     text,
    PRIMARY KEY (delivery_id, n)
);

-- ---- the log items, shared by the logs (sql/queries/logs.sql) and the events ------------------
-- Declared as sets (of one row) so that PostgreSQL inlines them into the calling statement.

-- A unified log item (API.md §4, §10, §11).
CREATE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel,
        'fallbackOn', m.fallback_on, 'fallbackAfterSeconds', m.fallback_after_s,
        'attempts', coalesce((
            -- An accepted attempt has its provider's id and its delivery (API.md §10); a
            -- failed one its error, and null delivery fields.
            SELECT json_agg(CASE WHEN a.status = 'sent' THEN json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'providerMessageId', a.provider_message_id, 'fallbackReason', a.fallback_reason,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', a.delivery_status,
                    'deliveredAt',
                        to_char(a.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'readAt', to_char(a.read_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryError', CASE WHEN a.delivery_error IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.delivery_error,
                            'providerCode', a.delivery_provider_code, 'message', a.delivery_message)) END,
                    'statusHistory', coalesce((
                        SELECT json_agg(json_strip_nulls(json_build_object('status', d.status,
                                'at', to_char(d.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                'providerCode', d.provider_code))
                            ORDER BY d.at, og_status_rank(d.status))
                        FROM delivery_statuses d
                        WHERE d.channel = a.channel AND d.provider_message_id = a.provider_message_id),
                        '[]'::json))
                ELSE json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'fallbackReason', a.fallback_reason,
                    'error', CASE WHEN a.error_code IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', a.error_code,
                            'message', a.error_message, 'providerCode', a.provider_code,
                            'httpStatus', a.http_status)) END,
                    'attemptedAt',
                        to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'deliveryStatus', NULL, 'deliveredAt', NULL, 'readAt', NULL,
                    'deliveryError', NULL, 'statusHistory', '[]'::json) END
                ORDER BY a.seq)
            FROM attempts a
            WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference), '[]'::json),
        'skipped', m.skipped,
        'createdAt', to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'completedAt', to_char(m.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- An OTP log item (API.md §4): never the code.
CREATE FUNCTION og_otp_item(o otp_requests) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', o.reference, 'to', o.to_number, 'status', o.status, 'length', o.length,
        'expiresAt', to_char(o.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'createdAt', to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'verifiedAt', to_char(o.verified_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'failedAttempts', o.failed_attempts,
        'history', coalesce((
            SELECT json_agg(json_build_object(
                    'event', e.event,
                    'at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                ORDER BY e.id)
            FROM otp_events e
            WHERE e.tenant_id = o.tenant_id AND e.otp_reference = o.reference), '[]'::json))
$$;

-- ---- events ---------------------------------------------------------------------------------

-- The scheduler: every tenant with a delivery due and no step running or due gets its step,
-- due now. The tenants with undelivered deliveries are found by a skip scan of
-- webhook_deliveries_due (one probe per such tenant, however many deliveries each has).
-- Returns how many steps it made due (the caller then tells every worker: NOTIFY og_steps).
CREATE FUNCTION og_webhook_schedule() RETURNS integer
LANGUAGE plpgsql
-- Planned afresh on every call (as in sql/005): a plan cached while the tables were small (a
-- new deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n integer;
BEGIN
    WITH RECURSIVE t(tenant_id) AS (
        (SELECT tenant_id FROM webhook_deliveries WHERE next_at IS NOT NULL ORDER BY tenant_id LIMIT 1)
        UNION ALL
        SELECT (SELECT d.tenant_id FROM webhook_deliveries d
                WHERE d.next_at IS NOT NULL AND d.tenant_id > t.tenant_id
                ORDER BY d.tenant_id LIMIT 1)
        FROM t WHERE t.tenant_id IS NOT NULL),
    due AS (
        SELECT t.tenant_id FROM t
        WHERE t.tenant_id IS NOT NULL
            AND EXISTS (SELECT 1 FROM webhook_deliveries d
                        WHERE d.tenant_id = t.tenant_id AND d.next_at IS NOT NULL AND d.next_at <= now())
            AND NOT EXISTS (SELECT 1 FROM steps s
                            WHERE s.kind = 'webhook' AND s.tenant_id = t.tenant_id AND s.reference = 'outbox'
                                AND (s.due_at <= now() OR s.lease_owner IS NOT NULL))),
    up AS (
        INSERT INTO steps (kind, tenant_id, reference, due_at)
        SELECT 'webhook', tenant_id, 'outbox', now() FROM due
        ON CONFLICT (tenant_id, reference, kind) WHERE reference IS NOT NULL
        DO UPDATE SET due_at = now() WHERE steps.due_at > now() AND steps.lease_owner IS NULL
        RETURNING 1)
    SELECT count(*) INTO n FROM up;
    IF n > 0 THEN
        PERFORM pg_notify('og_steps', 'due');
    END IF;
    RETURN n;
END
$$;

-- The body of an event, {"type", "timestamp", "data"}, exactly as it is sent and signed, under
-- 20 kB: a message's text is the only thing that can make it longer (4,096 characters escaped
-- to up to 6 bytes each); it is then cut to 1,000 characters and data.textTruncated says so.
-- PL/pgSQL: its expressions are planned once per session (a SQL function that PostgreSQL does
-- not inline is planned again on every call).
CREATE FUNCTION og_webhook_body(p_type text, p_data json) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF octet_length(p_data::text) > 19900 THEN
        p_data := (p_data::jsonb || jsonb_build_object('text', left(p_data ->> 'text', 1000),
                                                       'textTruncated', true))::json;
    END IF;
    RETURN json_build_object('type', p_type,
        'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'data', p_data)::text;
END
$$;

-- The webhook-id of delivery `id`: "msg_", the id, then 53 bits of random() (PostgreSQL seeds
-- it per backend from its strong source). The id alone makes it unique here, the random part
-- across installations, so a receiver shared by two never drops one as a repeat
-- (gen_random_uuid would cost each event 15 us more). PL/pgSQL, so that it is planned once.
CREATE FUNCTION og_webhook_id_of(p_id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN 'msg_' || lpad(to_hex(p_id), 16, '0') || lpad(to_hex((random() * 9007199254740991)::bigint), 16, '0');
END
$$;

-- After writing a tenant's events: when its step is neither running nor due (none, or due later,
-- at a retry), asks the scheduler (og_webhook_schedule) for it by a notification. Reads only:
-- the event's transaction takes no lock on the steps table.
CREATE FUNCTION og_webhook_wake(p_tenant uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM steps
    WHERE kind = 'webhook' AND tenant_id = p_tenant AND reference = 'outbox'
        AND (due_at <= now() OR lease_owner IS NOT NULL);
    IF NOT FOUND THEN
        PERFORM pg_notify('og_steps', 'webhook');
    END IF;
END
$$;

-- A message's status changed. Events: message.sent when a send completes with an accepted
-- channel (from pending to anything but failed: a status that came before the completion write
-- can make it delivered at once), then message.<status> for failed, delivered, read and
-- undelivered. The item is built after the statement that changed the status, attempts
-- included, and only when an event is written.
CREATE FUNCTION og_webhook_on_message() RETURNS trigger
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
    IF OLD.status = 'pending' AND NEW.status <> 'failed' AND 'message.sent' = ANY (wanted) THEN
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

-- The WHEN clause is evaluated without calling the function: a message update that is not a
-- status change worth an event costs nothing more.
CREATE TRIGGER messages_webhook AFTER UPDATE OF status ON messages
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND NEW.status IN ('sent', 'failed', 'delivered', 'read', 'undelivered'))
EXECUTE FUNCTION og_webhook_on_message();

-- An OTP became verified or locked: otp.verified, otp.locked.
CREATE FUNCTION og_webhook_on_otp() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t text := 'otp.' || NEW.status;
BEGIN
    PERFORM 1 FROM tenant_webhooks
    WHERE tenant_id = NEW.tenant_id AND disabled_at IS NULL AND t = ANY (events);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, next_at)
    SELECT x.id, NEW.tenant_id, og_webhook_id_of(x.id), t, NEW.reference, og_webhook_body(t, i), now()
    FROM og_otp_item(NEW) AS i, LATERAL (SELECT nextval('webhook_deliveries_id') AS id) x;
    PERFORM og_webhook_wake(NEW.tenant_id);
    RETURN NULL;
END
$$;

CREATE TRIGGER otp_requests_webhook AFTER UPDATE OF status ON otp_requests
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('verified', 'locked'))
EXECUTE FUNCTION og_webhook_on_otp();

-- ---- delivery -------------------------------------------------------------------------------

-- Marks every delivery of the tenant still waiting for a try exhausted, with `why` as its last
-- error unless it has one.
CREATE FUNCTION og_webhook_exhaust(p_tenant uuid, p_why text) RETURNS void
LANGUAGE sql AS $$
    UPDATE webhook_deliveries
    SET status = 'exhausted', next_at = NULL, last_error = coalesce(last_error, p_why)
    WHERE tenant_id = p_tenant AND next_at IS NOT NULL
$$;

-- Records the tries of a batch: a JSON array of {id, at_ms (when the try started), http (the
-- status, or null), latency_ms, error (null on success), message, ok, retry_in_ms (null: no
-- try left)}. A delivery already delivered (another holder's try) stays delivered. Then the
-- webhook's health: a 410 disables it at once; a success clears failing_since; a failure sets
-- it, and disables the webhook when it is 5 days old. A disabled webhook's waiting deliveries
-- are exhausted. Returns true when this call disabled the webhook.
CREATE FUNCTION og_webhook_record(p_tenant uuid, p_tries jsonb) RETURNS boolean
LANGUAGE plpgsql
-- Plans cached per session, unlike the functions above: this runs for every few deliveries,
-- and planning it afresh costs more than running it (measured: 0.5 ms a call). So that a plan
-- cached while the table was small (a new deployment) does not scan it whole once it is large
-- (measured: 9 ms a call after 6,000 deliveries), the plans may not scan the table nor hash it:
-- index probes only, the right plan at every size.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    r        record;
    n        integer;
    any_ok   boolean;
    any_fail boolean;
    gone     boolean;
    since    timestamptz;
    reason   text;
BEGIN
    -- One primary-key update per try: a set-based UPDATE ... FROM the tries may be planned
    -- (when the table was small) with the whole table as the outer side of the join.
    FOR r IN SELECT * FROM jsonb_to_recordset(p_tries) AS x(id bigint, at_ms bigint, http integer,
            latency_ms integer, error text, message text, ok boolean, retry_in_ms bigint) LOOP
        UPDATE webhook_deliveries d
        SET tries = d.tries + 1,
            status = CASE WHEN r.ok OR d.status = 'delivered' THEN 'delivered'
                          WHEN r.retry_in_ms IS NULL THEN 'exhausted' ELSE 'failed' END,
            next_at = CASE WHEN r.ok OR d.status = 'delivered' OR r.retry_in_ms IS NULL THEN NULL
                           ELSE now() + r.retry_in_ms * interval '1 millisecond' END,
            delivered_at = CASE WHEN r.ok THEN coalesce(d.delivered_at,
                                    to_timestamp((r.at_ms + r.latency_ms) / 1000.0))
                                ELSE d.delivered_at END,
            last_error = CASE WHEN r.ok OR d.status = 'delivered' THEN NULL ELSE r.error END
        WHERE d.id = r.id AND d.tenant_id = p_tenant
        RETURNING d.tries INTO n;
        IF FOUND THEN
            INSERT INTO webhook_tries (delivery_id, n, at, http_status, latency_ms, error, message)
            VALUES (r.id, n, to_timestamp(r.at_ms / 1000.0), r.http, r.latency_ms, r.error, r.message);
        END IF;
    END LOOP;

    SELECT bool_or(ok), bool_or(NOT ok), bool_or(http = 410) INTO any_ok, any_fail, gone
    FROM jsonb_to_recordset(p_tries) AS x(ok boolean, http integer);
    IF gone THEN
        reason := 'gone';
    ELSIF any_ok THEN
        UPDATE tenant_webhooks SET failing_since = NULL
        WHERE tenant_id = p_tenant AND failing_since IS NOT NULL;
    ELSIF any_fail THEN
        UPDATE tenant_webhooks SET failing_since = now()
        WHERE tenant_id = p_tenant AND failing_since IS NULL;
        SELECT failing_since INTO since FROM tenant_webhooks WHERE tenant_id = p_tenant;
        IF since <= now() - interval '5 days' THEN
            reason := 'failing';
        END IF;
    END IF;
    IF reason IS NOT NULL THEN
        UPDATE tenant_webhooks SET disabled_at = now(), disabled_reason = reason
        WHERE tenant_id = p_tenant AND disabled_at IS NULL;
        IF FOUND THEN
            PERFORM og_webhook_exhaust(p_tenant, 'webhook_disabled');
            RETURN true;
        END IF;
    END IF;
    RETURN false;
END
$$;

-- Ends the tenant's delivery step (og_step_close: only while the caller's lease holds) and,
-- when deliveries still wait, schedules the next at the earliest of their tries. An event
-- committing meanwhile that this does not see is picked up by the scheduler's next run (see the
-- top of this file). Deliveries left waiting for a webhook that is gone or disabled (events that
-- committed while it was being deleted or disabled) are exhausted. Returns true when the next
-- step is due now.
CREATE FUNCTION og_webhook_release(p_step bigint, p_owner text, p_tenant uuid) RETURNS boolean
LANGUAGE plpgsql
-- Planned afresh on every call (as in sql/005): a plan cached while the tables were small (a
-- new deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    disabled timestamptz;
    nxt      timestamptz;
BEGIN
    SELECT disabled_at INTO disabled FROM tenant_webhooks WHERE tenant_id = p_tenant;
    IF NOT FOUND THEN
        PERFORM og_webhook_exhaust(p_tenant, 'webhook_deleted');
    ELSIF disabled IS NOT NULL THEN
        PERFORM og_webhook_exhaust(p_tenant, 'webhook_disabled');
    END IF;
    PERFORM og_step_close(p_step, p_owner);
    SELECT min(next_at) INTO nxt FROM webhook_deliveries
    WHERE tenant_id = p_tenant AND next_at IS NOT NULL;
    IF nxt IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO steps (kind, tenant_id, reference, due_at)
    VALUES ('webhook', p_tenant, 'outbox', greatest(nxt, now()))
    ON CONFLICT (tenant_id, reference, kind) WHERE reference IS NOT NULL
    DO UPDATE SET due_at = least(steps.due_at, excluded.due_at);
    RETURN nxt <= now();
END
$$;

-- The deliveries of a tenant due for a try, oldest due first, with the webhook they go to (one
-- snapshot: a delivery created after a rotation is signed with the new secret). Nothing when
-- the webhook is gone or disabled. The floor skips the front of webhook_deliveries_due, which
-- between two vacuums is mostly entries of deliveries already done: each is cheap to step
-- over, but a run loading every few milliseconds would step over thousands each time.
CREATE FUNCTION og_webhook_due(p_tenant uuid, p_leave_out bigint[], p_limit integer, p_floor timestamptz)
RETURNS TABLE (url text, secret text, id bigint, webhook_id text, tries integer, body text, next_at text)
LANGUAGE plpgsql STABLE
-- Plans cached per session, unlike the functions above: this runs for every few deliveries,
-- and planning it afresh costs more than running it (measured: 0.5 ms a call). So that a plan
-- cached while the table was small (a new deployment) does not scan it whole once it is large
-- (measured: 9 ms a call after 6,000 deliveries), the plans may not scan the table nor hash it:
-- index probes only, the right plan at every size.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    RETURN QUERY
    SELECT w.url, w.secret, d.id, d.webhook_id, d.tries, d.body, d.next_at::text
    FROM tenant_webhooks w
    CROSS JOIN LATERAL (
        SELECT x.id, x.webhook_id, x.tries, x.body, x.next_at
        FROM webhook_deliveries x
        WHERE x.tenant_id = w.tenant_id AND x.next_at <= now()
            AND x.next_at >= coalesce(p_floor - interval '1 second', '-infinity')
            AND NOT (x.id = ANY (p_leave_out))
        ORDER BY x.next_at
        LIMIT p_limit) d
    WHERE w.tenant_id = p_tenant AND w.disabled_at IS NULL;
END
$$;

-- POST /api/webhooks/deliveries/{id}/retry: one more try, now. outcome: 'ok' (with the
-- delivery's item, og_webhook_item, as it is now), 'not_found' (no such delivery for this
-- tenant) or 'disabled' (the tenant has no enabled webhook).
CREATE FUNCTION og_webhook_retry(p_tenant uuid, p_webhook_id text, OUT outcome text, OUT item json)
LANGUAGE plpgsql
-- Planned afresh on every call (as in sql/005): a plan cached while the tables were small (a
-- new deployment) would scan them whole once they are large.
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    d_id bigint;
BEGIN
    -- The id is in the webhook-id (og_webhook_id): one probe of the primary key.
    IF p_webhook_id ~ '^msg_[0-9a-f]{32}$' THEN
        SELECT d.id INTO d_id FROM webhook_deliveries d
        WHERE d.id = ('x' || substr(p_webhook_id, 5, 16))::bit(64)::bigint
            AND d.tenant_id = p_tenant AND d.webhook_id = p_webhook_id;
    END IF;
    IF d_id IS NULL THEN
        outcome := 'not_found';
        RETURN;
    END IF;
    PERFORM 1 FROM tenant_webhooks WHERE tenant_id = p_tenant AND disabled_at IS NULL;
    IF NOT FOUND THEN
        outcome := 'disabled';
        RETURN;
    END IF;
    UPDATE webhook_deliveries SET status = 'pending', next_at = now() WHERE id = d_id;
    -- Not a hot path: the step is made due here (a running one loads the delivery itself).
    INSERT INTO steps (kind, tenant_id, reference, due_at) VALUES ('webhook', p_tenant, 'outbox', now())
    ON CONFLICT (tenant_id, reference, kind) WHERE reference IS NOT NULL
    DO UPDATE SET due_at = now() WHERE steps.due_at > now() AND steps.lease_owner IS NULL;
    PERFORM pg_notify('og_steps', 'due');
    SELECT i INTO item FROM webhook_deliveries d CROSS JOIN LATERAL og_webhook_item(d) AS i WHERE d.id = d_id;
    outcome := 'ok';
END
$$;

-- A delivery as GET /api/webhooks/deliveries shows it, with its tries in order.
CREATE FUNCTION og_webhook_item(d webhook_deliveries) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', d.webhook_id, 'type', d.type, 'reference', d.subject, 'status', d.status,
        'createdAt', to_char(d.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'deliveredAt', to_char(d.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'nextTryAt', to_char(d.next_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'lastError', d.last_error,
        'tries', coalesce((
            SELECT json_agg(json_build_object(
                    'at', to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                    'httpStatus', t.http_status, 'latencyMs', t.latency_ms,
                    'error', CASE WHEN t.error IS NULL THEN NULL
                        ELSE json_strip_nulls(json_build_object('code', t.error, 'message', t.message)) END)
                ORDER BY t.n)
            FROM webhook_tries t
            WHERE t.delivery_id = d.id), '[]'::json))
$$;

-- ---- one definition of the log items ----------------------------------------------------------
-- The unified and OTP log views (sql/009) take their items from the functions above, so a log
-- page and a webhook event can never describe the same message differently. The functions are
-- inlined (one-row SQL set functions), so a page still builds items only for its own rows.
CREATE OR REPLACE VIEW og_log_omni AS
SELECT m.tenant_id, m.reference, m.to_number, m.status, i AS item
FROM messages m
CROSS JOIN LATERAL og_message_item(m) AS i;

CREATE OR REPLACE VIEW og_log_otp AS
SELECT o.tenant_id, o.reference, o.to_number, o.status, i AS item
FROM otp_requests o
CROSS JOIN LATERAL og_otp_item(o) AS i;
