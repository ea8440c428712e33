-- Unified sends, POST /api/omni/send (src/product/messaging/send.c): a message row is inserted
-- 'pending' before any provider is called and completed with its attempts once the send is
-- over; `omnigate serve` marks the ones a crash left pending (src/product/app/cli.c).

-- name: msg_insert
-- Records a unified send before any provider is called.
-- $1 tenant_id
-- $2 reference
-- $3 to = the number (E.164)
-- $4 text
-- $5 mode = delivery mode ('fallback' or 'all')
-- $6 channels = channels to try, as a text[] literal: {a,b}
-- $7 skipped = channels skipped (JSON array)
-- $8 fallback_on = 'delivered' or 'read', a delivery-based fallback's (API.md §11), or NULL
-- $9 fallback_after = fallbackAfterSeconds, or NULL
-- $10 wa_from = the WhatsApp number it sends from, or NULL
-- $11 sms_sender = the SMS sender, or NULL
-- $12 template = a template send's template (sql/016: name, language, wrapped, meta), or NULL
-- Counts the message in its day's usage (sql/029: each writer counts its rows).
-- Returns its reference and its day (UTC, YYYY-MM-DD: the day usage counts its attempts on,
-- sql/028).
-- columns: reference, day
WITH ins AS (
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped,
        fallback_on, fallback_after_s, whatsapp_from, sms_sender, template)
    VALUES ($1, $2, $3, $4, $5, $6::text[], $7::jsonb, $8, $9::integer, $10, $11, $12::jsonb)
    RETURNING tenant_id, reference, og_usage_day(created_at) AS day),
k AS (
    INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
    SELECT ins.tenant_id, ins.day, '', pg_backend_pid(), 1 FROM ins
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
SELECT ins.reference, ins.day::text AS day FROM ins;

-- name: msg_insert_many
-- The set form of msg_insert (sql/013_set_forms.sql): the pending rows of a write batch's
-- sends in one statement. Each parameter is an array of the sends' values, in order.
-- $1 tenant_id = tenant ids
-- $2 reference = references
-- $3 to = the number (E.164)
-- $4 text = texts
-- $5 mode = delivery modes
-- $6 channels = channels to try, each a text[] literal
-- $7 skipped = channels skipped (JSON arrays)
-- $8 fallback_on = fallbackOn values, or NULLs
-- $9 fallback_after = fallbackAfterSeconds values, or NULLs
-- $10 wa_from = the WhatsApp numbers they send from, or NULLs
-- $11 sms_sender = the SMS senders, or NULLs
-- $12 template = the sends' templates, or NULLs
-- Counts the messages in their day's usage, as msg_insert.
-- Returns one row per send: its ordinal (from 1), then msg_insert's row (every row of one
-- statement has the transaction's now() as its created_at, so one day for all).
-- columns: ord, reference, day
WITH x AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
        $8::text[], $9::integer[], $10::text[], $11::text[], $12::jsonb[]) WITH ORDINALITY
        AS x(t, r, n, b, d, c, s, o, a, w, e, p, ord)),
ins AS (
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped,
        fallback_on, fallback_after_s, whatsapp_from, sms_sender, template)
    SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p FROM x
    RETURNING tenant_id),
k AS (
    INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
    SELECT ins.tenant_id, og_usage_day(now()), '', pg_backend_pid(), count(*) FROM ins
    GROUP BY 1
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
SELECT x.ord, x.r AS reference, og_usage_day(now())::text AS day FROM x;

-- name: msg_insert_unless_nowa
-- msg_insert, unless the number is remembered as having no WhatsApp (API.md §13): the send's
-- not-on-WhatsApp lookup folded into its first write (issue 20: one statement and one round
-- trip fewer per send), for a send without an Idempotency-Key that plans a WhatsApp channel.
-- When the number is remembered nothing is written; the gateway drops the WhatsApp channels
-- and inserts with msg_insert.
-- $1 tenant_id
-- $2 reference
-- $3 to = the number (E.164): also the number looked up
-- $4 text
-- $5 mode = delivery mode ('fallback' or 'all')
-- $6 channels = channels to try, as a text[] literal: {a,b}
-- $7 skipped = channels skipped (JSON array)
-- $8 fallback_on = 'delivered' or 'read', a delivery-based fallback's (API.md §11), or NULL
-- $9 fallback_after = fallbackAfterSeconds, or NULL
-- $10 wa_from = the WhatsApp number it sends from, or NULL
-- $11 sms_sender = the SMS sender, or NULL
-- $12 template = a template send's template, or NULL
-- A message inserted counts in its day's usage, as msg_insert's.
-- Returns one row: the reference, NULL when nothing was inserted; the milliseconds the
-- number stays remembered, NULL when it is not; and the message's day as msg_insert's, NULL
-- when nothing was inserted.
-- columns: reference, left_ms, day
WITH nowa AS (
    SELECT ceil(extract(epoch FROM until - now()) * 1000)::bigint AS left_ms
    FROM not_on_whatsapp WHERE number = $3::text AND until > now()),
ins AS (
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped,
        fallback_on, fallback_after_s, whatsapp_from, sms_sender, template)
    SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text[], $7::jsonb, $8::text,
        $9::integer, $10::text, $11::text, $12::jsonb
    WHERE NOT EXISTS (SELECT FROM nowa)
    RETURNING reference, og_usage_day(created_at)::text AS day),
k AS (
    INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages)
    SELECT $1::uuid, og_usage_day(now()), '', pg_backend_pid(), 1 FROM ins
    ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE SET messages = t.messages + EXCLUDED.messages)
SELECT (SELECT reference FROM ins), (SELECT left_ms FROM nowa), (SELECT day FROM ins);

-- name: msg_insert_unless_nowa_many
-- The set form of msg_insert_unless_nowa (sql/013_set_forms.sql): each parameter is an array
-- of the sends' values, in order.
-- $1 tenant_id = tenant ids
-- $2 reference = references
-- $3 to = the number (E.164): also the numbers looked up
-- $4 text = texts
-- $5 mode = delivery modes
-- $6 channels = channels to try, each a text[] literal
-- $7 skipped = channels skipped (JSON arrays)
-- $8 fallback_on = fallbackOn values, or NULLs
-- $9 fallback_after = fallbackAfterSeconds values, or NULLs
-- $10 wa_from = the WhatsApp numbers they send from, or NULLs
-- $11 sms_sender = the SMS senders, or NULLs
-- $12 template = the sends' templates, or NULLs
-- Returns one row per send: its ordinal (from 1), then msg_insert_unless_nowa's row
-- (og_msg_insert_unless_nowa_many, sql/028_usage_by_gateway.sql).
-- columns: ord, reference, left_ms, day
SELECT ord, reference, left_ms, day::text
FROM og_msg_insert_unless_nowa_many($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
    $6::text[], $7::jsonb[], $8::text[], $9::integer[], $10::text[], $11::text[], $12::jsonb[]);

-- name: msg_complete
-- Completes a unified send: its outcome, and its attempts in one INSERT, over 'pending' or
-- over 'unknown' when the pending sweep or a stale claim marked it so while the send still ran
-- (it did run: its truth replaces the guess, sql/015). An accepted attempt
-- is born with the delivery statuses its provider reported before this commit (API.md §10:
-- the callback can beat the completion write), and the message's status follows them.
-- $1 tenant_id
-- $2 reference
-- $3 status = 'sent' or 'failed'
-- $4 winner = winning channel, or NULL
-- $5 attempts = a JSON array of {seq, channel, status, provider_message_id, error_code,
--      error_message, provider_code, http_status, latency_ms, attempted_at_ms, content,
--      cost_micros, currency, sms_equiv_micros} (content: 'template' for Meta's template
--      message, absent for a free text; cost_micros and currency: what an accepted attempt
--      costs, absent without a rate; sms_equiv_micros: for a WhatsApp one, what its text would
--      have cost by SMS, absent without an SMS rate)
-- $6 goes_on = 'true' when a delivery-based fallback goes on after this (a step follows): the
--      message is not undelivered while its chain goes on
-- Counts its attempts and its winner in the message's day's usage (sql/029; the set form leaves
-- that to the gateway's tally, sql/028): sql/024's rule, what og_msg_complete_many's callers add.
WITH a AS (
    INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id,
        error_code, error_message, provider_code, http_status, latency_ms, attempted_at,
        delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code,
        delivery_message, content, cost_micros, cost_currency, sms_equiv_micros)
    SELECT $1, $2, x.seq, x.channel, x.status, x.provider_message_id,
        x.error_code, x.error_message, x.provider_code, x.http_status, x.latency_ms,
        to_timestamp(x.attempted_at_ms / 1000.0),
        CASE WHEN x.status = 'sent' THEN coalesce(d.status, 'sent') END, d.delivered_at,
        d.read_at, d.delivery_error, d.provider_code, d.error_message, x.content,
        CASE WHEN x.status = 'sent' THEN x.cost_micros END, CASE WHEN x.status = 'sent' THEN x.currency END,
        CASE WHEN x.status = 'sent' THEN x.sms_equiv_micros END
    FROM json_to_recordset($5::json) AS x(seq smallint, channel text, status text,
        provider_message_id text, error_code text, error_message text, provider_code text,
        http_status integer, latency_ms integer, attempted_at_ms bigint, content text,
        cost_micros bigint, currency text, sms_equiv_micros bigint)
    LEFT JOIN LATERAL og_delivery_of(x.channel, x.provider_message_id) AS d
        ON x.status = 'sent'
    RETURNING channel, status, delivery_status, cost_micros, sms_equiv_micros),
u AS (
    UPDATE messages
    -- The rule of og_message_delivery (sql/005), written out: a SQL function called here would be
    -- parsed again on every execution (PostgreSQL does not inline it with a sub-select argument).
    SET status = CASE WHEN $3 <> 'sent' THEN $3 ELSE (
            SELECT CASE WHEN bool_or(delivery_status = 'read') THEN 'read'
                        WHEN bool_or(delivery_status = 'delivered') THEN 'delivered'
                        WHEN bool_and(delivery_status IN ('failed', 'undelivered'))
                            THEN CASE WHEN $6::boolean THEN 'sent' ELSE 'undelivered' END
                        ELSE 'sent' END
            FROM a WHERE status = 'sent') END,
        winning_channel = $4, completed_at = now()
    WHERE tenant_id = $1 AND reference = $2 AND status IN ('pending', 'unknown')
    -- won: a pending or unknown message has no winner yet (msg_mark_unknown sets none).
    RETURNING created_at,
        delivery_mode = 'fallback' AND cardinality(channels) > 1 AND winning_channel IS NOT NULL AS won),
-- The message's day: the completed row's, else (no longer pending: its attempts are written all
-- the same) read; none when the message is gone.
d AS (
    SELECT og_usage_day(coalesce((SELECT u.created_at FROM u),
                                 (SELECT m.created_at FROM messages m WHERE m.tenant_id = $1 AND m.reference = $2)))
        AS day),
-- Each attempt in its channel's row, the win (with what it saved against SMS) in the winner's.
k AS (
    SELECT a.channel, og_usage_final(a.status) AS n, og_usage_accepted(a.status) AS ac,
        og_usage_delivered(a.status, a.delivery_status) AS de, og_usage_read(a.status, a.delivery_status) AS rd,
        og_usage_failed(a.status) AS f, og_usage_cost(a.status, a.cost_micros) AS co, 0 AS w,
        CASE WHEN coalesce((SELECT u.won FROM u), false) AND a.channel = $4 AND a.status = 'sent'
                  AND a.channel <> 'sms' AND a.cost_micros IS NOT NULL
             THEN a.sms_equiv_micros - a.cost_micros ELSE 0 END AS sv
    FROM a
    UNION ALL
    SELECT $4::text, 0, 0, 0, 0, 0, 0, 1, 0 FROM u WHERE u.won)
INSERT INTO usage_totals AS t (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read,
                               failed, cost_micros, won, savings_micros)
SELECT $1, d.day, k.channel, pg_backend_pid(), sum(k.n), sum(k.n), sum(k.ac), sum(k.de), sum(k.rd), sum(k.f),
    sum(k.co), sum(k.w), sum(k.sv)
FROM k CROSS JOIN d
WHERE d.day IS NOT NULL
GROUP BY d.day, k.channel
ON CONFLICT (tenant_id, day, channel, shard) DO UPDATE
SET messages = t.messages + EXCLUDED.messages, attempts = t.attempts + EXCLUDED.attempts,
    accepted = t.accepted + EXCLUDED.accepted, delivered = t.delivered + EXCLUDED.delivered,
    read = t.read + EXCLUDED.read, failed = t.failed + EXCLUDED.failed,
    cost_micros = t.cost_micros + EXCLUDED.cost_micros, won = t.won + EXCLUDED.won,
    savings_micros = t.savings_micros + EXCLUDED.savings_micros;

-- name: msg_complete_many
-- The set form of msg_complete: og_msg_complete_many (sql/013_set_forms.sql). Each parameter
-- is an array of the sends' values, in order. The usage of its attempts and winners is the
-- gateway's to add (usage_add, the write batch's tally: sql/028); msg_complete alone counts its
-- own (sql/029).
-- $1 tenant_id = tenant ids
-- $2 reference = references
-- $3 status = statuses ('sent' or 'failed')
-- $4 winner = winning channels, or NULLs
-- $5 attempts = each a JSON array as msg_complete's $5
-- $6 goes_on = whether a delivery-based fallback goes on after each
-- Returns nothing.
SELECT FROM og_msg_complete_many($1::uuid[], $2::text[], $3::text[], $4::text[], $5::json[],
    $6::boolean[]);

-- name: msg_mark_unknown
-- Marks 'unknown' the messages a crash left pending: those older than any send could still
-- be running, and younger than a week (older ones are left to retention).
-- $1 older_ms = older than, in milliseconds
UPDATE messages
SET status = 'unknown', completed_at = now()
WHERE status = 'pending'
    AND created_at > now() - interval '7 days'
    AND created_at < now() - $1::bigint * interval '1 millisecond';
