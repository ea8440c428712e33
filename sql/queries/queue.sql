-- Queued, scheduled and paced delivery (API.md §19; src/product/queue/, sql/018_queue.sql): a
-- queued send's row and entries, the claim of due messages with their senders' tokens, the
-- outcome of a claimed attempt, cancel, and what the queue holds.

-- name: queue_insert
-- Records a queued send: its message (status 'queued' or 'scheduled'), its senders and its
-- entries (og_queue_insert_many), before the 202 answer.
-- $1 tenant_id
-- $2 reference
-- $3 to = the number (E.164)
-- $4 text
-- $5 mode = delivery mode ('fallback' or 'all')
-- $6 channels = channels to try, as a text[] literal: {a,b}
-- $7 skipped = channels skipped (JSON array)
-- $8 fallback_on = 'delivered' or 'read', or NULL
-- $9 fallback_after = fallbackAfterSeconds, or NULL
-- $10 wa_from = the WhatsApp number it sends from, or NULL
-- $11 sms_sender = the SMS sender, or NULL
-- $12 template = a template send's template (sql/016), or NULL
-- $13 due_ms = its due time, in ms since the epoch
-- $14 valid_until_ms = validUntil, in ms since the epoch
-- $15 priority = 'high', 'normal' or 'low'
-- $16 queue = {"status": 'queued' or 'scheduled', "senders": [{"c": channel, "s": sender (Meta:
--      phone number id; QR: session; SMS: sender id), "r": rate per second, "n": tokens an attempt
--      takes (SMS: segments)}] in the message's channel order}
-- The message counts in its day's usage (og_usage_messages_add, sql/029).
-- Returns nothing.
SELECT FROM og_queue_insert_many(ARRAY[$1::uuid], ARRAY[$2::text], ARRAY[$3::text], ARRAY[$4::text],
    ARRAY[$5::text], ARRAY[$6::text], ARRAY[$7::jsonb], ARRAY[$8::text], ARRAY[$9::integer], ARRAY[$10::text],
    ARRAY[$11::text], ARRAY[$12::jsonb], ARRAY[$13::bigint], ARRAY[$14::bigint], ARRAY[$15::text],
    ARRAY[$16::json]), og_usage_messages_add(ARRAY[$1::uuid]);

-- name: queue_insert_many
-- The set form of queue_insert: a write batch's queued sends in one call. Each parameter is an
-- array of the sends' values, in order.
-- $1 tenant_id = tenant ids
-- $2 reference = references
-- $3 to = the numbers
-- $4 text = texts
-- $5 mode = delivery modes
-- $6 channels = channels to try, each a text[] literal
-- $7 skipped = channels skipped (JSON arrays)
-- $8 fallback_on = fallbackOn values, or NULLs
-- $9 fallback_after = fallbackAfterSeconds values, or NULLs
-- $10 wa_from = WhatsApp numbers, or NULLs
-- $11 sms_sender = SMS senders, or NULLs
-- $12 template = templates, or NULLs
-- $13 due_ms = due times
-- $14 valid_until_ms = validUntil values
-- $15 priority = priorities
-- $16 queue = each as queue_insert's $16
-- The messages count in their day's usage, as queue_insert's.
-- Returns nothing.
SELECT FROM og_queue_insert_many($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::jsonb[], $8::text[], $9::integer[], $10::text[], $11::text[], $12::jsonb[], $13::bigint[], $14::bigint[],
    $15::text[], $16::json[]), og_usage_messages_add($1::uuid[]);

-- name: queue_claim
-- Claims due queued messages with their senders' tokens (og_queue_claim) and returns what
-- their attempts need: each is leased to this worker, the lease standing for its attempt. Nothing
-- is joined here: the function reads the messages itself (this statement's snapshot may
-- predate a message it claims).
-- $1 owner = this worker (its lease owner)
-- $2 lease_ms = the lease, which covers one attempt and its writes
-- $3 max = at most this many messages
-- $4 senders = at most this many senders
-- $5 abandon = 'true': end the leases of holders that died first (og_queue_abandon); a worker
--    asks so about once a second (OG_QUEUE_ABANDON_MS), not with every claim
-- Returns per message: tenant id, reference, the channel's place (= the attempt's seq), lag in
-- ms, priority (0 high, 1 normal, 2 low), the channel, to, text, the WhatsApp number, the SMS
-- sender, Meta's template object ('' without one), the tenant's settings (with the first of its
-- messages in the result only; '' with the others); for its usage (sql/030): the message's day
-- (UTC, YYYY-MM-DD), whether its attempt's row is still to be written ('t': the first try on
-- this channel; a retry after a 429 writes the row again) and whether an accepted attempt wins
-- the message ('t': a fallback message of more than one channel).
-- columns: tenant_id, reference, ch, lag_ms, priority, channel, to, text, wa_from, sender,
--     template, settings, day, first_try, wins
SELECT c.tenant_id, c.reference, c.ch, c.lag_ms, c.priority, c.channel, c."to", c.text, c.wa_from, c.sender,
    c.template, c.settings, c.day, c.first_try, c.wins
FROM og_queue_claim($1, $2::integer, $3::integer, $4::integer, $5::boolean) AS c;

-- name: queue_done
-- The outcome of a claimed message's attempt and what follows it (og_queue_done_many: the
-- attempt's row, the next channel, a retry after a throttle, the final status), under this
-- worker's lease: the transaction fails when the lease was lost.
-- $1 tenant_id
-- $2 reference
-- $3 ch = the channel's place (the attempt's seq)
-- $4 owner = this worker
-- $5 outcome = 'sent', 'failed' or 'throttled' (provider_rate_limited)
-- $6 provider_id = provider message id, or NULL
-- $7 error_code = error code, or NULL
-- $8 error_message = error message, or NULL
-- $9 provider_code = provider code, or NULL
-- $10 http_status = HTTP status, or NULL
-- $11 latency_ms = latency in ms
-- $12 retry_ms = the provider's Retry-After in ms, or NULL
-- $13 cost_micros = what the attempt costs if accepted (sql/023), or NULL
-- $14 currency = the cost's currency, or NULL
-- $15 sms_equiv_micros = for a WhatsApp attempt, what its text would cost by SMS, or NULL
-- Counts its attempt and win in the usage itself (run alone: no write batch's tally counts it).
-- Returns nothing.
SELECT FROM og_queue_done_many(ARRAY[$1::uuid], ARRAY[$2::text], ARRAY[$3::smallint], ARRAY[$4::text],
    ARRAY[$5::text], ARRAY[$6::text], ARRAY[$7::text], ARRAY[$8::text], ARRAY[$9::text], ARRAY[$10::integer],
    ARRAY[$11::integer], ARRAY[$12::integer], ARRAY[$13::bigint], ARRAY[$14::text], ARRAY[$15::bigint], true);

-- name: queue_done_many
-- The set form of queue_done: a write batch's releases in one call. Each parameter is an array
-- of the releases' values, in order.
-- $1 tenant_id = tenant ids
-- $2 reference = references
-- $3 ch = the channels' places
-- $4 owner = the releasing workers
-- $5 outcome = outcomes
-- $6 provider_id = provider message ids, or NULLs
-- $7 error_code = error codes, or NULLs
-- $8 error_message = error messages, or NULLs
-- $9 provider_code = provider codes, or NULLs
-- $10 http_status = HTTP statuses, or NULLs
-- $11 latency_ms = latencies in ms
-- $12 retry_ms = Retry-After values in ms, or NULLs
-- $13 cost_micros = costs, or NULLs
-- $14 currency = their currencies, or NULLs
-- $15 sms_equiv_micros = the same texts' SMS costs, or NULLs
-- Their attempts and wins are counted by the gateway's tally of the write batch (usage_add, as a
-- sync send's completion: sql/030), not here; queue_done, alone, counts for itself.
-- Returns nothing.
SELECT FROM og_queue_done_many($1::uuid[], $2::text[], $3::smallint[], $4::text[], $5::text[], $6::text[],
    $7::text[], $8::text[], $9::text[], $10::integer[], $11::integer[], $12::integer[], $13::bigint[],
    $14::text[], $15::bigint[], false);

-- name: queue_cancel
-- Cancels a queued or scheduled message no provider is working on (og_queue_cancel).
-- $1 tenant_id
-- $2 reference
-- Returns its status afterwards ('canceled' when it is), NULL when there is no such message.
-- columns: status
SELECT og_queue_cancel($1::uuid, $2) AS status;

-- name: queue_message
-- One message as its unified log item (GET /api/omni/messages/{reference}).
-- $1 tenant_id
-- $2 reference
-- Returns one row, or none.
-- columns: item
SELECT og_message_item(m)::text AS item
FROM messages m
WHERE m.tenant_id = $1 AND m.reference = $2;

-- name: queue_list
-- A tenant's senders with anything queued or scheduled (GET /api/omni/queue), as JSON items.
-- $1 tenant_id
-- columns: item
SELECT json_build_object(
        'channel', s.channel, 'sender', s.sender,
        'queued', count(*) FILTER (WHERE q.due_at <= now()),
        'scheduled', count(*) FILTER (WHERE q.due_at > now()),
        'oldestDueAt', to_char(min(q.due_at) FILTER (WHERE q.due_at <= now()) AT TIME ZONE 'UTC',
                               'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'messagesPerSecond', s.rate,
        'throttledUntil', CASE WHEN s.throttled_until > now() THEN
            to_char(s.throttled_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END)::text AS item
FROM queue_senders s
JOIN queue_entries q ON q.sender_id = s.id
WHERE s.tenant_id = $1
GROUP BY s.id
ORDER BY s.channel, s.sender;

-- name: queue_depth
-- What the queue holds by priority, for the metrics (one worker samples it).
-- columns: priority, depth
SELECT priority, count(*) AS depth
FROM queue_entries
GROUP BY priority
ORDER BY priority;

-- name: queue_debit
-- Sync sends' provider calls taken from their senders' buckets (API.md §19: they count against
-- the rate, never held), gathered by a worker and written every tick. Senders without a row
-- (nothing ever queued) are left alone: no bucket to share.
-- $1 debits = a JSON array of {t: tenant id, c: channel, s: sender, n: tokens}
-- The rows are locked in key order first (as every writer of senders does): two workers'
-- debits of the same senders never wait for each other in a cycle.
WITH d AS (
    SELECT d.t, d.c, d.s, sum(d.n) AS n
    FROM json_to_recordset($1::json) AS d(t uuid, c text, s text, n double precision)
    GROUP BY d.t, d.c, d.s
), l AS (
    SELECT s.id, d.n
    FROM queue_senders s
    JOIN d ON s.tenant_id = d.t AND s.channel = d.c AND s.sender = d.s
    ORDER BY s.id
    FOR NO KEY UPDATE OF s
)
UPDATE queue_senders s
SET tokens = s.tokens - l.n
FROM l
WHERE s.id = l.id;
