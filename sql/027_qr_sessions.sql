-- QR sessions (API.md §23; src/product/qr/sessions.c, docs/qr-sessions.md): what the gateway
-- knows of each WAHA session of a tenant's whatsapp_qr numbers.
--
-- A row is written when the tenant (or the admin) starts, stops or logs out the session through
-- the gateway (with the status WAHA answered), and by WAHA's session.status events (the webhook
-- in, og_qr_session_event), which are the truth: STOPPED, STARTING, SCAN_QR_CODE, WORKING,
-- FAILED. A session with no row is unknown: its number is tried as before. A session known not
-- WORKING makes its numbers skipped with reason session_not_connected (the workers read the
-- tenant's sessions not WORKING with its token, sql/queries/tokens.sql auth_lookup).

CREATE TABLE qr_sessions (
    tenant_id  uuid        NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text        NOT NULL,
    status     text        NOT NULL CHECK (status IN ('STOPPED', 'STARTING', 'SCAN_QR_CODE', 'WORKING', 'FAILED')),
    number     text,        -- E.164: the account linked (WAHA's me.id), while known
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- The time of the last event applied (its `timestamp`): an older one arriving late changes
    -- nothing. NULL: set by a route's answer, which any later event replaces.
    event_at   timestamptz,
    PRIMARY KEY (tenant_id, name)
);

-- The session's row as the API shows it (GET /api/whatsapp/sessions/{name}).
CREATE FUNCTION og_qr_session_item(s qr_sessions) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object('name', s.name, 'status', s.status, 'number', s.number,
        'updatedAt', to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- A session.status event of session p_session: applied to the tenant whose QR number uses it,
-- among p_accounts (the tenants whose own server's secret verified it) or, when NULL, the
-- tenants on the configured server (og_inbound_route_by, sql/026). p_number: the linked account
-- (E.164) or NULL (WAHA's `me`); an event without one keeps the number known, except
-- SCAN_QR_CODE: the phone was unlinked or logged out, and the next scan may link another. Returns the session's row as the API shows it, or NULL when no
-- tenant has the session, or when the event is older than the last one applied.
CREATE FUNCTION og_qr_session_event(p_session text, p_status text, p_number text, p_at timestamptz,
                                    p_accounts uuid[])
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
    tid uuid;
    s   qr_sessions;
BEGIN
    SELECT r.tenant_id INTO tid FROM og_inbound_route_by('waha', p_session, NULL, p_accounts) r;
    IF tid IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO qr_sessions AS q (tenant_id, name, status, number, updated_at, event_at)
    VALUES (tid, p_session, p_status, p_number, now(), p_at)
    ON CONFLICT (tenant_id, name) DO UPDATE
    SET status = EXCLUDED.status,
        number = CASE WHEN EXCLUDED.number IS NOT NULL THEN EXCLUDED.number
                      WHEN EXCLUDED.status = 'SCAN_QR_CODE' THEN NULL ELSE q.number END,
        updated_at = now(), event_at = EXCLUDED.event_at
    WHERE q.event_at IS NULL OR q.event_at <= EXCLUDED.event_at
    RETURNING * INTO s;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN og_qr_session_item(s);
END
$$;
