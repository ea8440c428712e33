-- WhatsApp templates (API.md §18; src/product/templates/).
--
-- The catalogue: each WABA's templates as Meta lists them (GET /{wabaId}/message_templates),
-- one row per (WABA, name, language), replaced by each sync (og_templates_sync) and updated at
-- once by Meta's message_template_status_update webhook and by a send Meta refused for the
-- template (132001, 132015, 132016). It is a fact about the WABA, shared by the tenants whose
-- numbers belong to it; a tenant sees the templates of its numbers' WABAs. `parameters` are the
-- body's placeholders in order ("1","2" or the names); `buttons` keep Meta's index, type, text
-- and whether Meta wants a parameter for it (a URL with a placeholder, an OTP code button).
CREATE TABLE wa_templates (
    waba_id          text        NOT NULL,
    name             text        NOT NULL,
    language         text        NOT NULL,
    status           text        NOT NULL,
    category         text,
    parameter_format text        NOT NULL, -- 'positional' or 'named'
    parameters       text[]      NOT NULL,
    body             text        NOT NULL,
    buttons          jsonb       NOT NULL DEFAULT '[]'::jsonb,
    meta_id          text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (waba_id, name, language)
);

-- The template of a template send (or of a free text wrapped by outsideWindow: template):
-- {"name", "language", "wrapped", "meta"}, meta being Meta's `template` object as the send made
-- it, so a later step of a delivery-based fallback sends the same (src/product/steps/fallback.c).
-- Written by the pending insert itself (one more parameter, NULL for a text send): a template
-- send costs no statement and no round trip more than a text send (issue 30, test/bench
-- scenario templates).
ALTER TABLE messages ADD COLUMN template jsonb;

-- What an attempt sent: NULL is a free text ('text' in the logs), 'template' Meta's template
-- message (a template send, or a free text wrapped by outsideWindow: template).
ALTER TABLE attempts ADD COLUMN content text;

-- The set form of msg_insert_unless_nowa (sql/014) with the template.
DROP FUNCTION og_msg_insert_unless_nowa_many(uuid[], text[], text[], text[], text[], text[], jsonb[], text[],
    integer[], text[], text[]);
CREATE FUNCTION og_msg_insert_unless_nowa_many(p_tenant uuid[], p_reference text[], p_to text[],
    p_body text[], p_mode text[], p_channels text[], p_skipped jsonb[], p_fallback_on text[],
    p_after integer[], p_from text[], p_sender text[], p_template jsonb[])
RETURNS TABLE (ord bigint, reference text, left_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH x AS (
        SELECT x.*, (SELECT ceil(extract(epoch FROM w.until - now()) * 1000)::bigint
                     FROM not_on_whatsapp w WHERE w.number = x.n AND w.until > now()) AS left_ms
        FROM unnest(p_tenant, p_reference, p_to, p_body, p_mode, p_channels, p_skipped,
            p_fallback_on, p_after, p_from, p_sender, p_template)
            WITH ORDINALITY AS x(t, r, n, b, d, c, s, o, a, w, e, p, ord)),
    ins AS (
        INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels,
            skipped, fallback_on, fallback_after_s, whatsapp_from, sms_sender, template)
        SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p
        FROM x WHERE x.left_ms IS NULL)
    SELECT x.ord, CASE WHEN x.left_ms IS NULL THEN x.r END, x.left_ms FROM x;
END
$$;

-- The set form of msg_complete (sql/015, which guards the status) with the attempts' content.
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
            delivery_message, content)
        SELECT x.tenant_id, x.reference, y.seq, y.channel, y.status, y.provider_message_id,
            y.error_code, y.error_message, y.provider_code, y.http_status, y.latency_ms,
            to_timestamp(y.attempted_at_ms / 1000.0),
            CASE WHEN y.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
            d.read_at, d.delivery_error, d.provider_code, d.error_message, y.content
        FROM x CROSS JOIN LATERAL json_to_recordset(x.attempts) AS y(seq smallint, channel text,
            status text, provider_message_id text, error_code text, error_message text,
            provider_code text, http_status integer, latency_ms integer, attempted_at_ms bigint,
            content text)
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

-- The unified log item (sql/011) with the message's template and each attempt's content.
CREATE OR REPLACE FUNCTION og_message_item(m messages) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'reference', m.reference, 'to', m.to_number, 'text', m.body,
        'deliveryMode', m.delivery_mode, 'status', m.status, 'winningChannel', m.winning_channel,
        'fallbackOn', m.fallback_on, 'fallbackAfterSeconds', m.fallback_after_s,
        'template', CASE WHEN m.template IS NOT NULL AND NOT (m.template ->> 'wrapped')::boolean
                         THEN json_build_object('name', m.template ->> 'name',
                                                'language', m.template ->> 'language') END,
        'attempts', coalesce((
            -- An accepted attempt has its provider's id and its delivery (API.md §10); a
            -- failed one its error, and null delivery fields.
            SELECT json_agg(CASE WHEN a.status = 'sent' THEN json_build_object(
                    'channel', a.channel, 'status', a.status, 'latencyMs', a.latency_ms,
                    'content', coalesce(a.content, 'text'),
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
                    'content', coalesce(a.content, 'text'),
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

-- A template as GET /api/whatsapp/templates shows it (API.md §18), and as the send path's
-- per-worker cache reads it (sql/queries/templates.sql).
CREATE FUNCTION og_template_item(w wa_templates) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'wabaId', w.waba_id, 'name', w.name, 'language', w.language, 'status', w.status,
        'category', w.category, 'parameterFormat', w.parameter_format,
        'parameters', to_json(w.parameters), 'body', w.body, 'buttons', w.buttons,
        'updatedAt', to_char(w.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- The list routes read a tenant's page in name order.
CREATE INDEX wa_templates_name ON wa_templates (name, language, waba_id);
