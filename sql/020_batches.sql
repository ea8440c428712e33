-- Batches (API.md §20; src/product/queue/batch_api.c, docs/batches.md).
--
-- A batch is a row (its id, total, the latest due time of its messages, when it completed) and
-- its messages, queued sends like any other (sql/018, sql/019) that carry its id. Its counts by
-- status are kept as its messages change status, so a read sums a few rows, never its
-- messages: the accept writes its row (shard 0), and a trigger on a batch message's status
-- change adds -1 and +1 to the row of the backend that made it (shard = its pid). A backend runs
-- one transaction at a time, so two transactions never write one count row and never wait for
-- each other on it, whichever messages of a batch they end together.
--
-- A batch completes (completedAt, the event batch.completed, once) when none of its messages is
-- queued or scheduled (one whose attempt is in flight stays 'queued'): og_batch_complete, run
-- by the queue's claim about once a second (with its dead-holder check), finds the open batches
-- whose last message is due and whose counts say so. It reads committed counts only: a
-- transition is counted in the transaction that makes it, so a batch never looks complete while
-- one of its messages waits.

ALTER TABLE messages ADD COLUMN batch_id text; -- the batch it came in, or NULL
-- The batchId log filter (logs_omni_batch) and a batch's cancel: a batch's messages in reference
-- order. Partial: a message outside a batch costs no entry (batch_id never changes, so it keeps
-- status changes HOT as before).
CREATE INDEX messages_tenant_batch ON messages (tenant_id, batch_id, reference) WHERE batch_id IS NOT NULL;

CREATE TABLE batches (
    tenant_id    uuid        NOT NULL,
    id           text        NOT NULL, -- "kb_" and 26 characters
    created_at   timestamptz NOT NULL DEFAULT now(),
    total        integer     NOT NULL, -- its messages accepted
    last_due_at  timestamptz NOT NULL, -- the latest due time of its messages: not complete before
    completed_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX batches_open ON batches (last_due_at) WHERE completed_at IS NULL;

-- A batch's counts by status, in rows of (batch, shard): one per status would take two writes
-- per status change instead of one.
CREATE TABLE batch_counts (
    batch_id    text    NOT NULL,
    shard       integer NOT NULL, -- 0: written by the accept; else the pid of the backend that moved them
    queued      integer NOT NULL DEFAULT 0,
    scheduled   integer NOT NULL DEFAULT 0,
    sent        integer NOT NULL DEFAULT 0,
    delivered   integer NOT NULL DEFAULT 0,
    read        integer NOT NULL DEFAULT 0,
    failed      integer NOT NULL DEFAULT 0,
    undelivered integer NOT NULL DEFAULT 0,
    expired     integer NOT NULL DEFAULT 0,
    canceled    integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard)
);

-- The status a batch counts a message under (API.md §20): one whose provider has not answered
-- yet counts as 'queued'; one whose provider's answer was lost (§15: 'unknown') as 'failed'.
CREATE FUNCTION og_batch_status(s text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE s WHEN 'pending' THEN 'queued' WHEN 'unknown' THEN 'failed' ELSE s END
$$;

-- A batch message's status change, counted in its backend's row: one write (HOT: nothing of it
-- is indexed but its key). The row is updated, made the first time only (an INSERT ... ON
-- CONFLICT tries the insertion first on every call). No other transaction writes it: it is its
-- backend's, and a backend runs one transaction at a time.
CREATE FUNCTION og_batch_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    was  text := og_batch_status(OLD.status);
    now_ text := og_batch_status(NEW.status);
    k    integer;
BEGIN
    IF was = now_ THEN
        RETURN NULL;
    END IF;
    -- The row is made (all zeros) the first time this backend counts for the batch, then updated.
    FOR k IN 1 .. 2 LOOP
        UPDATE batch_counts c
        SET queued = c.queued + (now_ = 'queued')::integer - (was = 'queued')::integer,
            scheduled = c.scheduled + (now_ = 'scheduled')::integer - (was = 'scheduled')::integer,
            sent = c.sent + (now_ = 'sent')::integer - (was = 'sent')::integer,
            delivered = c.delivered + (now_ = 'delivered')::integer - (was = 'delivered')::integer,
            read = c.read + (now_ = 'read')::integer - (was = 'read')::integer,
            failed = c.failed + (now_ = 'failed')::integer - (was = 'failed')::integer,
            undelivered = c.undelivered + (now_ = 'undelivered')::integer - (was = 'undelivered')::integer,
            expired = c.expired + (now_ = 'expired')::integer - (was = 'expired')::integer,
            canceled = c.canceled + (now_ = 'canceled')::integer - (was = 'canceled')::integer
        WHERE c.batch_id = NEW.batch_id AND c.shard = pg_backend_pid();
        EXIT WHEN FOUND;
        INSERT INTO batch_counts (batch_id, shard) VALUES (NEW.batch_id, pg_backend_pid());
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_batch_count AFTER UPDATE OF status ON messages
FOR EACH ROW
WHEN (NEW.batch_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION og_batch_count();

-- A batch as GET /api/omni/batches/{batchId} shows it: every status of the counts, 0 when none.
CREATE FUNCTION og_batch_item(b batches) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'batchId', b.id,
        'createdAt', to_char(b.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'total', b.total,
        'counts', (SELECT json_build_object(
                       'queued', coalesce(sum(c.queued), 0), 'scheduled', coalesce(sum(c.scheduled), 0),
                       'sent', coalesce(sum(c.sent), 0), 'delivered', coalesce(sum(c.delivered), 0),
                       'read', coalesce(sum(c.read), 0), 'failed', coalesce(sum(c.failed), 0),
                       'undelivered', coalesce(sum(c.undelivered), 0), 'expired', coalesce(sum(c.expired), 0),
                       'canceled', coalesce(sum(c.canceled), 0))
                   FROM batch_counts c WHERE c.batch_id = b.id),
        'completedAt', to_char(b.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;

-- A batch's accepted messages, in one transaction with its row and its first counts. p_rows: a
-- JSON array, per message, of queue_insert's parameters (sql/queries/queue.sql) by name: r
-- (reference), to, text, mode, channels (a text[] literal), skipped, fallbackOn, fallbackAfter,
-- waFrom, smsSender, template, due (ms), valid (ms), priority, queue; how many of them are due
-- now (queued) and later (scheduled), and the latest due time (ms), which the caller knows.
CREATE FUNCTION og_batch_insert(p_tenant uuid, p_batch text, p_rows json, p_queued integer, p_scheduled integer,
                                p_last_due_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM og_queue_insert_many(array_agg(p_tenant), array_agg(x.r), array_agg(x."to"), array_agg(x.text),
        array_agg(x.mode), array_agg(x.channels), array_agg(x.skipped), array_agg(x."fallbackOn"),
        array_agg(x."fallbackAfter"), array_agg(x."waFrom"), array_agg(x."smsSender"), array_agg(x.template),
        array_agg(x.due), array_agg(x.valid), array_agg(x.priority), array_agg(x.queue), p_batch)
    FROM json_to_recordset(p_rows) AS x(r text, "to" text, text text, mode text, channels text, skipped jsonb,
        "fallbackOn" text, "fallbackAfter" integer, "waFrom" text, "smsSender" text, template jsonb, due bigint,
        valid bigint, priority text, queue json);
    INSERT INTO batches (tenant_id, id, total, last_due_at)
    VALUES (p_tenant, p_batch, p_queued + p_scheduled, to_timestamp(p_last_due_ms / 1000.0));
    INSERT INTO batch_counts (batch_id, shard, queued, scheduled) VALUES (p_batch, 0, p_queued, p_scheduled);
END
$$;

-- Cancels every message of a batch no provider is working on (og_queue_cancel, one at a time in
-- reference order: the order of a completion's locks). Returns how many it canceled, NULL when
-- the tenant has no such batch. Makes the batch's last due time now at most: a scheduled batch
-- canceled whole completes at the next og_batch_complete.
CREATE FUNCTION og_batch_cancel(p_tenant uuid, p_batch text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m record;
    n integer := 0;
BEGIN
    UPDATE batches SET last_due_at = least(last_due_at, now())
    WHERE tenant_id = p_tenant AND id = p_batch;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR m IN SELECT reference FROM messages
             WHERE tenant_id = p_tenant AND batch_id = p_batch AND status IN ('queued', 'scheduled')
             ORDER BY reference LOOP
        IF og_queue_cancel(p_tenant, m.reference) = 'canceled' THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Completes up to p_max open batches whose last message is due and none of whose messages is
-- queued or scheduled any more: completedAt, and the event batch.completed for a tenant whose
-- webhook wants it (once: the update that sets completedAt writes it). Returns how many.
CREATE FUNCTION og_batch_complete(p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n       integer;
    tenants uuid[];
BEGIN
    WITH done AS (
        UPDATE batches b SET completed_at = now()
        FROM (SELECT o.tenant_id, o.id FROM batches o
              WHERE o.completed_at IS NULL AND o.last_due_at <= now()
                  AND coalesce((SELECT sum(c.queued + c.scheduled) FROM batch_counts c WHERE c.batch_id = o.id), 0) = 0
              ORDER BY o.last_due_at
              LIMIT p_max
              FOR UPDATE OF o SKIP LOCKED) o
        WHERE b.tenant_id = o.tenant_id AND b.id = o.id AND b.completed_at IS NULL
        RETURNING b.*),
    ev AS (
        INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, next_at)
        SELECT x.id, d.tenant_id, og_webhook_id_of(x.id), 'batch.completed', d.id,
            og_webhook_body('batch.completed',
                og_batch_item(ROW(d.tenant_id, d.id, d.created_at, d.total, d.last_due_at, d.completed_at)::batches)), now()
        FROM done d
        JOIN tenant_webhooks w ON w.tenant_id = d.tenant_id AND w.disabled_at IS NULL
            AND 'batch.completed' = ANY (w.events)
        CROSS JOIN LATERAL (SELECT nextval('webhook_deliveries_id') AS id) x
        RETURNING tenant_id)
    SELECT (SELECT count(*) FROM done), coalesce(array_agg(DISTINCT e.tenant_id), '{}') INTO n, tenants
    FROM ev e;
    PERFORM og_webhook_wake(t) FROM unnest(tenants) AS t;
    RETURN n;
END
$$;

-- Retention (prune_batch): a tenant's batches made before p_before (a reference: the batch ids
-- share its time layout) that have completed, with their counts; up to p_limit. A batch still
-- waiting on a scheduled message is kept, as its messages are (sql/018).
CREATE FUNCTION og_batch_prune(p_tenant uuid, p_before text, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ids text[];
BEGIN
    SELECT array_agg(id) INTO ids FROM (
        SELECT id FROM batches
        WHERE tenant_id = p_tenant AND id < 'kb_' || substr(p_before, 4) AND completed_at IS NOT NULL
        ORDER BY id LIMIT p_limit) b;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM batch_counts WHERE batch_id = ANY (ids);
    DELETE FROM batches WHERE tenant_id = p_tenant AND id = ANY (ids);
    RETURN cardinality(ids);
END
$$;

-- The unified log's view (sql/011) with the batch of each message, for the batchId filter.
CREATE OR REPLACE VIEW og_log_omni AS
SELECT m.tenant_id, m.reference, m.to_number, m.status, i AS item, m.batch_id
FROM messages m
CROSS JOIN LATERAL og_message_item(m) AS i;

-- og_queue_insert_many (sql/019) with the batch of its messages (NULL: queued sends, one each),
-- and its entries written without a join (below: it grew as the square of the messages).
DROP FUNCTION og_queue_insert_many(uuid[], text[], text[], text[], text[], text[], jsonb[], text[], integer[], text[],
                                   text[], jsonb[], bigint[], bigint[], text[], json[]);
CREATE FUNCTION og_queue_insert_many(p_tenant uuid[], p_ref text[], p_to text[], p_text text[], p_mode text[],
                                     p_channels text[], p_skipped jsonb[], p_fallback_on text[],
                                     p_fallback_after integer[], p_wa_from text[], p_sms_sender text[],
                                     p_template jsonb[], p_due_ms bigint[], p_valid_ms bigint[], p_priority text[],
                                     p_queue json[], p_batch text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
DECLARE
    -- Per (message, channel), in the messages' order then the channels': the message's place in
    -- the parameters, the channel's place in the message, the sender (tenant, channel, name),
    -- its rate, the tokens an attempt takes, and (once made) the sender's id.
    s_i   integer[];
    s_k   integer[];
    s_t   uuid[];
    s_c   text[];
    s_s   text[];
    s_r   double precision[];
    s_n   smallint[];
    s_id  bigint[];
    -- ... and the message's reference, whether it is an `all` send, its priority, due time and
    -- validity (ms), so that its entries are written from these rows alone: a join back to the
    -- messages' parameters was a nested loop over both (hash and merge joins are off here), 32 ms
    -- of a 1,000-message batch's 60.
    s_ref text[];
    s_all boolean[];
    s_pri text[];
    s_due bigint[];
    s_val bigint[];
    -- The batch's senders, each once, in key order: tenant, channel, name, the rate wanted, and
    -- the row's id and rate.
    u_t    uuid[];
    u_c    text[];
    u_s    text[];
    u_r    double precision[];
    u_id   bigint[];
    u_rate double precision[];
BEGIN
    -- One sort, then each array in its order (a sorted subquery under aggregates without a
    -- join, as PostgreSQL's documentation of aggregates allows; an ORDER BY per array_agg was a
    -- sort per array).
    SELECT array_agg(z.i), array_agg(z.k), array_agg(z.t), array_agg(z.c), array_agg(z.s), array_agg(z.r),
        array_agg(z.n), array_agg(z.ref), array_agg(z.al), array_agg(z.pri), array_agg(z.due), array_agg(z.val)
    INTO s_i, s_k, s_t, s_c, s_s, s_r, s_n, s_ref, s_all, s_pri, s_due, s_val
    FROM (SELECT x.i::integer AS i, j.k::integer AS k, x.t, j.c, j.s, j.r, j.n, x.r AS ref, x.d = 'all' AS al, x.pri,
              x.due, x.valid AS val
          FROM unnest(p_tenant, p_ref, p_mode, p_priority, p_due_ms, p_valid_ms, p_queue) WITH ORDINALITY
              AS x(t, r, d, pri, due, valid, q, i)
          CROSS JOIN LATERAL ROWS FROM (json_to_recordset(x.q -> 'senders')
                                        AS (c text, s text, r double precision, n smallint)) WITH ORDINALITY
              AS j(c, s, r, n, k)
          ORDER BY x.i, j.k) z;
    INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on,
        fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority, batch_id)
    SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e, x.p, x.q ->> 'status',
        to_timestamp(x.due / 1000.0), to_timestamp(x.valid / 1000.0), x.pri, p_batch
    FROM unnest(p_tenant, p_ref, p_to, p_text, p_mode, p_channels, p_skipped, p_fallback_on, p_fallback_after,
                p_wa_from, p_sms_sender, p_template, p_due_ms, p_valid_ms, p_priority, p_queue)
        AS x(t, r, n, b, d, c, s, o, a, w, e, p, due, valid, pri, q);
    -- The batch's senders, each once, in key order: made on first use (two batches making the
    -- same new senders never wait for each other in a cycle), a rate kept to the settings'
    -- (written only when it changed). Read once; written only when one is missing or changed.
    SELECT array_agg(d.t ORDER BY d.t, d.c, d.s), array_agg(d.c ORDER BY d.t, d.c, d.s),
        array_agg(d.s ORDER BY d.t, d.c, d.s), array_agg(d.r ORDER BY d.t, d.c, d.s)
    INTO u_t, u_c, u_s, u_r
    FROM (SELECT DISTINCT ON (y.t, y.c, y.s) y.t, y.c, y.s, y.r
          FROM unnest(s_t, s_c, s_s, s_r) AS y(t, c, s, r) ORDER BY y.t, y.c, y.s) d;
    -- Twice at most: the second time every sender exists, made here or by a batch that committed.
    LOOP
        SELECT array_agg(qs.id ORDER BY y.o), array_agg(qs.rate ORDER BY y.o) INTO u_id, u_rate
        FROM unnest(u_t, u_c, u_s) WITH ORDINALITY AS y(t, c, s, o)
        LEFT JOIN queue_senders qs ON qs.tenant_id = y.t AND qs.channel = y.c AND qs.sender = y.s;
        EXIT WHEN array_position(u_id, NULL) IS NULL;
        INSERT INTO queue_senders (tenant_id, channel, sender, rate, tokens)
        SELECT y.t, y.c, y.s, y.r, og_queue_burst(y.r)
        FROM unnest(u_t, u_c, u_s, u_r, u_id) WITH ORDINALITY AS y(t, c, s, r, id, o)
        WHERE y.id IS NULL ORDER BY y.o
        ON CONFLICT (tenant_id, channel, sender) DO NOTHING;
    END LOOP;
    IF EXISTS (SELECT 1 FROM unnest(u_rate, u_r) AS y(was, r) WHERE y.was <> y.r) THEN
        UPDATE queue_senders qs SET rate = y.r
        FROM unnest(u_id, u_r) AS y(id, r)
        WHERE qs.id = y.id AND qs.rate <> y.r;
    END IF;
    -- Each (message, channel)'s sender id, by its place among the batch's senders.
    SELECT array_agg(u_id[(SELECT k.o FROM unnest(u_t, u_c, u_s) WITH ORDINALITY AS k(t, c, s, o)
                           WHERE k.t = y.t AND k.c = y.c AND k.s = y.s)] ORDER BY y.o)
    INTO s_id
    FROM unnest(s_t, s_c, s_s) WITH ORDINALITY AS y(t, c, s, o);
    -- The entries: one for the first channel (fallback) or one per channel (all), each behind its
    -- sender, whose claim is made due no later than the entry (og_queue_wake_sender).
    INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at,
                               valid_until, segments)
    SELECT y.t, y.r, (y.k - 1)::smallint, y.id, y.ids, y.al, og_queue_priority(y.pri), to_timestamp(y.due / 1000.0),
        to_timestamp(y.val / 1000.0), y.seg
    FROM (SELECT z.*, array_agg(z.id) OVER w AS ids, max(z.n) OVER w AS seg
          FROM unnest(s_i, s_k, s_t, s_ref, s_all, s_pri, s_due, s_val, s_id, s_n)
              AS z(i, k, t, r, al, pri, due, val, id, n)
          WINDOW w AS (PARTITION BY z.i ORDER BY z.k ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) y
    WHERE y.k = 1 OR y.al;
    PERFORM og_queue_wake_sender(w.id, w.at)
    FROM (SELECT y.id, min(to_timestamp(y.due / 1000.0)) AS at
          FROM unnest(s_k, s_all, s_due, s_id) AS y(k, al, due, id)
          WHERE y.k = 1 OR y.al
          GROUP BY y.id ORDER BY y.id) w;
END
$$;
