-- Inbound messages, consent and recipients (API.md §21; sql/021_inbound.sql,
-- src/product/callbacks/inbound.c, src/product/consent/).
--
-- The rows of a consent copy's reads (consent_load, consent_changes): where the next read of
-- changes starts (the snapshot's xmin, in every row; one row of NULLs but `next` when there is
-- nothing), then what: 's' (tenant_id, number, kind, active: a suppression in force or not) or
-- 'w' (number, the phone number id in kind, until_ms: a window).
-- row consent: next, what, tenant_id, number, kind, active, until_ms

-- name: inbound_store
-- Stores the inbound messages of one webhook POST (og_inbound_store).
-- $1 items = a JSON array of inbound messages as og_inbound_store takes them
-- columns: stored, duplicate, unrouted, opted_out, opted_in
SELECT stored, duplicate, unrouted, opted_out, opted_in FROM og_inbound_store($1::jsonb);

-- name: inbound_list
-- One page of a tenant's inbound messages, newest first (the cursor is the last one's id).
-- $1 tenant_id
-- $2 from = the sender (E.164), or NULL
-- $3 channel = whatsapp_qr, whatsapp_meta or sms, or NULL
-- $4 since_ms = received at or after this time (ms since the epoch), or NULL
-- $5 until_ms = received before this time (ms since the epoch), or NULL
-- $6 after = the cursor: ids below this one, or NULL for the first page
-- $7 limit
-- columns: page row
SELECT m.id::text AS cursor, og_inbound_item(m)::text AS item
FROM inbound_messages m
WHERE m.tenant_id = $1
    AND ($2::text IS NULL OR m.from_number = $2)
    AND ($3::text IS NULL OR m.channel = $3)
    AND ($4::bigint IS NULL OR m.received_at >= to_timestamp($4::bigint / 1000.0))
    AND ($5::bigint IS NULL OR m.received_at < to_timestamp($5::bigint / 1000.0))
    AND ($6::bigint IS NULL OR m.id < $6::bigint)
ORDER BY m.id DESC
LIMIT $7;

-- name: consent_load
-- What a worker's copy holds (src/product/consent/consent.c): every suppression in force and
-- every open window.
-- columns: consent row
SELECT s.next, x.what, x.tenant_id, x.number, x.kind, x.active, x.until_ms
FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS next) s
LEFT JOIN LATERAL (
    SELECT 's' AS what, p.tenant_id::text AS tenant_id, p.number, p.kind, true AS active, NULL::bigint AS until_ms
    FROM suppressions p WHERE p.suppressed
    UNION ALL
    SELECT 'w', NULL, w.recipient, w.phone_number_id, true, (extract(epoch FROM w.open_until) * 1000)::bigint
    FROM whatsapp_windows w WHERE w.open_until > now()) x ON true;

-- name: consent_changes
-- consent_load's rows changed by transactions from `since` on (suppressions opted back in
-- included, active false), and where the next read starts.
-- $1 since = the previous read's next
-- columns: consent row
SELECT s.next, x.what, x.tenant_id, x.number, x.kind, x.active, x.until_ms
FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS next) s
LEFT JOIN LATERAL (
    SELECT 's' AS what, p.tenant_id::text AS tenant_id, p.number, p.kind, p.suppressed AS active,
        NULL::bigint AS until_ms
    FROM suppressions p WHERE p.txid >= $1::xid8
    UNION ALL
    SELECT 'w', NULL, w.recipient, w.phone_number_id, true, (extract(epoch FROM w.open_until) * 1000)::bigint
    FROM whatsapp_windows w WHERE w.txid >= $1::xid8) x ON true;

-- name: consent_prune
-- Closed windows and old opt-ins (og_consent_prune; the sweep step).
-- columns: pruned
SELECT og_consent_prune() AS pruned;

-- name: suppression_list
-- One page of a tenant's suppressions in force, by number and kind (the cursor is the last
-- one's "number/kind").
-- $1 tenant_id
-- $2 to = the number (E.164), or NULL
-- $3 kind = sms or whatsapp, or NULL
-- $4 after = the cursor, or NULL for the first page (checked by the route: "+digits/kind")
-- $5 limit
-- columns: page row
SELECT p.number || '/' || p.kind AS cursor, og_suppression_item(p)::text AS item
FROM suppressions p
WHERE p.tenant_id = $1 AND p.suppressed
    AND ($2::text IS NULL OR p.number = $2)
    AND ($3::text IS NULL OR p.kind = $3)
    AND ($4::text IS NULL OR (p.number, p.kind) > (split_part($4, '/', 1), split_part($4, '/', 2)))
ORDER BY p.number, p.kind
LIMIT $5;

-- name: suppression_change
-- Opts a number of a tenant out of kinds, or back into them (og_consent_change, source api).
-- $1 tenant_id
-- $2 to = the number (E.164)
-- $3 kinds = a text[] literal of kinds: {sms,whatsapp}
-- $4 out = 'true' to opt out, 'false' to opt in
-- $5 reason = the reason given, or NULL
-- columns: changed
SELECT array_to_json(og_consent_change($1::uuid, $2::text, $3::text[], $4::boolean, 'api', $5::text))::text
    AS changed;

-- name: suppression_kinds
-- The kinds a number of a tenant is opted out of, as a JSON array (after suppression_change, in
-- its transaction: a statement does not see what a function it calls wrote).
-- $1 tenant_id
-- $2 to = the number (E.164)
-- columns: suppressed
SELECT coalesce(json_agg(p.kind ORDER BY p.kind), '[]')::text AS suppressed
FROM suppressions p WHERE p.tenant_id = $1 AND p.number = $2 AND p.suppressed;

-- name: recipient_get
-- What a tenant knows of a number (API.md §21 GET /api/recipients/{to}) as its JSON; NULL when
-- there is no such tenant (the admin mirror's 404).
-- $1 tenant_id
-- $2 to = the number (E.164)
-- columns: recipient
SELECT CASE WHEN EXISTS (SELECT FROM tenants t WHERE t.id = $1) THEN json_build_object(
    'to', $2::text,
    'suppressed', (SELECT coalesce(json_agg(p.kind ORDER BY p.kind), '[]') FROM suppressions p
                   WHERE p.tenant_id = $1 AND p.number = $2 AND p.suppressed),
    'suppressions', (SELECT coalesce(json_agg(og_suppression_item(p) ORDER BY p.kind), '[]') FROM suppressions p
                     WHERE p.tenant_id = $1 AND p.number = $2 AND p.suppressed),
    'notOnWhatsappUntil', (SELECT to_char(n.until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                           FROM not_on_whatsapp n WHERE n.number = $2 AND n.until > now()),
    'whatsappWindows', (SELECT coalesce(json_agg(json_build_object('phoneNumberId', w.phone_number_id,
                            'openUntil', to_char(w.open_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                            ORDER BY w.phone_number_id), '[]')
                        FROM whatsapp_windows w
                        WHERE w.recipient = $2 AND w.open_until > now()
                            AND w.phone_number_id IN (SELECT r.key FROM inbound_routes r
                                                      WHERE r.tenant_id = $1 AND r.kind = 'meta')),
    'lastInboundAt', (SELECT to_char(max(m.received_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                      FROM inbound_messages m WHERE m.tenant_id = $1 AND m.from_number = $2)
)::text END AS recipient;

-- name: consent_sample
-- Suppressions in force by kind and source, for the metrics (one worker samples it).
-- columns: kind, source, n
SELECT kind, source, count(*) AS n FROM suppressions WHERE suppressed GROUP BY kind, source;
