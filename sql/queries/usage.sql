-- Usage (API.md §22; sql/024_usage.sql, src/product/costs/usage_api.c).

-- name: usage_get
-- A tenant's (or every tenant's) usage over whole UTC days, from the totals (never the logs):
-- GET /api/usage's data, {"currency", "rows", "fallback"}, or NULL when the tenant does not
-- exist. Rows by day (messages: created that day), by channel (messages: with an attempt on
-- it) or by both, in day and channel order; cost and savings in the tenant's card's currency,
-- else the global card's (null without a card).
-- $1 tenant_id = the tenant, or NULL for every tenant
-- $2 since = the first day (YYYY-MM-DD)
-- $3 until = the last day, included
-- $4 group_by = 'day', 'channel' or 'day,channel'
-- columns: usage
WITH cur AS (
    SELECT coalesce((SELECT t.settings -> 'rates' ->> 'currency' FROM tenants t WHERE t.id = $1::uuid),
                    (SELECT r.card ->> 'currency' FROM rate_card r)) AS c),
t AS (
    SELECT u.day, u.channel, sum(u.messages) AS messages, sum(u.attempts) AS attempts,
        sum(u.accepted) AS accepted, sum(u.delivered) AS delivered, sum(u.read) AS read, sum(u.failed) AS failed,
        sum(u.segments) AS segments, sum(u.cost_micros) AS cost, sum(u.won) AS won,
        sum(u.savings_micros) AS savings
    FROM usage_totals u
    WHERE ($1::uuid IS NULL OR u.tenant_id = $1::uuid) AND u.day BETWEEN $2::date AND $3::date
    GROUP BY u.day, u.channel),
g AS (
    SELECT CASE WHEN $4 <> 'channel' THEN t.day END AS day, CASE WHEN $4 <> 'day' THEN t.channel END AS channel,
        sum(t.messages) AS messages, sum(t.attempts) AS attempts, sum(t.accepted) AS accepted,
        sum(t.delivered) AS delivered, sum(t.read) AS read, sum(t.failed) AS failed,
        sum(t.segments) AS segments, sum(t.cost) AS cost
    -- By day, a day's messages are its '' row's and the rest its channels'; by channel, the
    -- channels' rows only.
    FROM (SELECT t.day, t.channel, CASE WHEN ($4 = 'day') = (t.channel = '') THEN t.messages ELSE 0 END AS messages,
              t.attempts, t.accepted, t.delivered, t.read, t.failed, t.segments, t.cost
          FROM t WHERE $4 = 'day' OR t.channel <> '') t
    GROUP BY 1, 2)
SELECT CASE WHEN $1::uuid IS NULL OR EXISTS (SELECT 1 FROM tenants WHERE id = $1::uuid) THEN json_build_object(
    'currency', (SELECT c FROM cur),
    'rows', coalesce((
        SELECT json_agg((CASE WHEN g.day IS NOT NULL THEN jsonb_build_object('day', g.day::text) ELSE '{}' END
                         || CASE WHEN g.channel IS NOT NULL THEN jsonb_build_object('channel', g.channel) ELSE '{}' END
                         || jsonb_build_object('messages', g.messages, 'attempts', g.attempts,
                                               'accepted', g.accepted, 'delivered', g.delivered, 'read', g.read,
                                               'failed', g.failed, 'segments', g.segments,
                                               'cost', og_cost_json(g.cost::bigint, (SELECT c FROM cur))))
                        ORDER BY g.day, array_position(ARRAY['whatsapp_qr', 'whatsapp_meta', 'sms'], g.channel))
        FROM g), '[]'::json),
    'fallback', (SELECT json_build_object(
                     'messages', coalesce(sum(t.won), 0),
                     'wonBy', json_build_object(
                         'whatsapp_qr', coalesce(sum(t.won) FILTER (WHERE t.channel = 'whatsapp_qr'), 0),
                         'whatsapp_meta', coalesce(sum(t.won) FILTER (WHERE t.channel = 'whatsapp_meta'), 0),
                         'sms', coalesce(sum(t.won) FILTER (WHERE t.channel = 'sms'), 0)),
                     'savings', og_cost_json(coalesce(sum(t.savings), 0)::bigint, (SELECT c FROM cur)))
                 FROM t))::text END AS usage;

-- name: usage_compact
-- Merges past days' shards of the usage totals (og_usage_compact; the sweep).
-- $1 limit = at most this many rows
-- columns: merged
SELECT og_usage_compact($1::integer) AS merged;
