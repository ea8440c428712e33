-- Log pages for GET /api/omni/logs, /api/sms/logs and /api/sms/otp/logs (src/product/logs/logs_api.c,
-- API.md §4 and §16).
--
-- Newest first, one page per statement, each statement reading its page through one index:
-- the primary key (tenant_id, reference) for a page by time or by reference, and an index
-- (tenant_id, <filter>, reference) for a page by to, status, channel or source (sql/009). Every
-- one ends in the reference, which is time-ordered and unique per tenant, so a page is one
-- range scan in the order of the answer, bounded by the page's range, with no sort and no visit
-- to the tenant's rows that do not match, and it stops after one page. docs/logs.md says which
-- index serves which filter and why.
--
-- The filters rank reference, to, status, then channel or source; logs_api.c runs the
-- statement of the first one present, and the lower-ranked ones are checked on the rows it
-- reads (status with channel, which bound each other in no way, has a statement of its own).
-- So the parameters are the same four, then the leading filter and those ranked below it that
-- the statement takes, in that order, NULL when absent:
--   $1 tenant_id
--   $2 lo = lowest reference (since, as the smallest reference of its millisecond)
--   $3 hi = references below this one (the lower of until, as a reference, and the cursor)
--   $4 limit
-- The log indexes are partial (sql/009_log_indexes.sql): on "<filter column> IS NOT NULL",
-- which filtering on the column implies, or, for the status of messages and OTPs (which the
-- write path filters on), on reference > 'kf_', true of every row, which only the statements
-- below state. The items are built by the views og_log_omni, og_log_sms and og_log_otp
-- (sql/009), only for the rows of the page.
-- Each statement returns page rows: a record's reference (the next page's cursor is the last
-- one shown) and its item as JSON text; so does the page of a tenant's webhook deliveries.
-- row page: cursor, item

-- name: logs_omni
-- One page of unified sends, each with its attempts in order: by time only.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_omni v
WHERE v.tenant_id = $1 AND v.reference >= $2 AND v.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_omni_reference
-- One page of unified sends: the one with this reference, if it passes the other filters.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 reference
-- $6 to = the number (E.164), or NULL
-- $7 status = status, or NULL
-- $8 channel = channel some attempt used, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_omni v
WHERE v.tenant_id = $1 AND v.reference = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.to_number = $6)
    AND ($7::text IS NULL OR v.status_now = $7)
    AND ($8::text IS NULL OR $8 IN (SELECT a.channel FROM attempts a
        WHERE a.tenant_id = v.tenant_id AND a.reference = v.reference))
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_omni_to
-- One page of unified sends to one number (messages_tenant_to); the status and channel
-- filters are checked on the number's messages, newest first.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 to = the number (E.164)
-- $6 status = status, or NULL
-- $7 channel = channel some attempt used, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_omni v
WHERE v.tenant_id = $1 AND v.to_number = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.status_now = $6)
    -- Correlated, so a probe of the message's attempts by their primary key per row, never a
    -- hash of all the tenant's attempts on the channel.
    AND ($7::text IS NULL OR $7 IN (SELECT a.channel FROM attempts a
        WHERE a.tenant_id = v.tenant_id AND a.reference = v.reference))
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_omni_status
-- One page of unified sends in one status (messages_tenant_status), as shown: a message whose row
-- says 'scheduled' is 'queued' from its due time on (og_message_status_now, sql/034). So 'queued'
-- is two ranges of the index, the rows that say 'queued' and those that say 'scheduled' and are
-- due, each read newest first and merged (a Merge Append: the page still stops after one page of
-- each); 'scheduled' is its range less the due ones.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 status
-- columns: page row
SELECT p.reference AS cursor, p.item::text AS item
FROM ((SELECT v.reference, v.item
       FROM og_log_omni v
       WHERE v.tenant_id = $1 AND v.status = $5 AND v.status_now = $5 AND v.reference > 'kf_'
           AND v.reference >= $2 AND v.reference < $3
       ORDER BY v.reference DESC
       LIMIT $4)
      UNION ALL
      (SELECT v.reference, v.item
       FROM og_log_omni v
       WHERE $5 = 'queued' AND v.tenant_id = $1 AND v.status = 'scheduled' AND v.status_now = 'queued'
           AND v.reference > 'kf_' AND v.reference >= $2 AND v.reference < $3
       ORDER BY v.reference DESC
       LIMIT $4)) p
ORDER BY p.reference DESC
LIMIT $4;

-- name: logs_omni_status_channel
-- One page of unified sends in one status with an attempt on one channel: the messages of the
-- status (messages_tenant_status) and the attempts on the channel (attempts_tenant_channel),
-- both read in reference order and merged. When either has nothing in the range, the page is
-- answered at once; at worst both are read to the end of the range (docs/logs.md). The status
-- shown is the row's here (sql/034): a row that says 'scheduled' has no attempt (its first is
-- written with its outcome, or its abandon, in the statement or transaction that writes its
-- status), so it is never on this page, due or not.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 status
-- $6 channel
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_omni v
JOIN attempts a ON a.tenant_id = v.tenant_id AND a.reference = v.reference
WHERE v.tenant_id = $1 AND v.status = $5 AND v.reference > 'kf_'
    AND v.reference >= $2 AND v.reference < $3
    AND a.tenant_id = $1 AND a.channel = $6 AND a.reference >= $2 AND a.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_omni_channel
-- One page of unified sends with an attempt on one channel: the page of references is read
-- from attempts_tenant_channel (one attempt per channel and message), then each message by
-- its primary key (a lateral subquery kept apart, so it is a lookup per reference whatever
-- the statistics say).
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 channel
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM (SELECT a.reference FROM attempts a
      WHERE a.tenant_id = $1 AND a.channel = $5 AND a.reference >= $2 AND a.reference < $3
      ORDER BY a.reference DESC
      LIMIT $4) p
CROSS JOIN LATERAL (SELECT * FROM og_log_omni v
                    WHERE v.tenant_id = $1 AND v.reference = p.reference OFFSET 0) v
ORDER BY p.reference DESC;

-- name: logs_omni_batch
-- One page of a batch's sends (batchId, API.md §20; messages_tenant_batch): the batch ranks
-- above every other filter (it holds at most OMNIGATE_BATCH_MAX messages), which are checked on
-- its messages, newest first.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 batch_id
-- $6 reference = reference, or NULL
-- $7 to = the number (E.164), or NULL
-- $8 status = status, or NULL
-- $9 channel = channel some attempt used, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_omni v
WHERE v.tenant_id = $1 AND v.batch_id = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.reference = $6)
    AND ($7::text IS NULL OR v.to_number = $7)
    AND ($8::text IS NULL OR v.status_now = $8)
    AND ($9::text IS NULL OR $9 IN (SELECT a.channel FROM attempts a
        WHERE a.tenant_id = v.tenant_id AND a.reference = v.reference))
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_sms
-- One page of SMS records, whichever route sent them: by time only.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_sms v
WHERE v.tenant_id = $1 AND v.reference >= $2 AND v.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_sms_reference
-- One page of SMS records: the one with this reference, if it passes the other filters. An
-- SMS record's reference is also its source's (a unified send's SMS has the send's reference,
-- an OTP's SMS the OTP's), so this finds the SMS of a send or an OTP too.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 reference
-- $6 to = the number (E.164), or NULL
-- $7 status = status or delivery status, or NULL
-- $8 source = 'sms', 'omni' or 'otp', or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_sms v
WHERE v.tenant_id = $1 AND v.reference = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.to_number = $6)
    AND ($7::text IS NULL OR v.status = $7 OR v.delivery_status = $7)
    AND ($8::text IS NULL OR v.source = $8)
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_sms_to
-- One page of SMS records to one number (sms_records_tenant_to); the status and source
-- filters are checked on the number's records, newest first.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 to = the number (E.164)
-- $6 status = status or delivery status, or NULL
-- $7 source = source, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_sms v
WHERE v.tenant_id = $1 AND v.to_number = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.status = $6 OR v.delivery_status = $6)
    AND ($7::text IS NULL OR v.source = $7)
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_sms_status
-- One page of SMS records whose status or delivery status is this one: the record's status
-- (sent, failed) through sms_records_tenant_status and its delivery's (delivered, read,
-- undelivered, failed) through sms_records_tenant_delivery, a page of references from each,
-- merged; then each record by its primary key. The two are disjoint: a delivery status is set
-- only on a record that was sent, and 'sent' is looked up by the record's status alone (every
-- record whose delivery is 'sent' has status 'sent'). The source filter is checked on the
-- records each index gives, newest first.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 status = status or delivery status
-- $6 source = source, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM ((SELECT s.reference FROM sms_records s
       WHERE s.tenant_id = $1 AND s.status = $5 AND s.reference >= $2 AND s.reference < $3
           AND ($6::text IS NULL OR s.source = $6)
       ORDER BY s.reference DESC
       LIMIT $4)
      UNION ALL
      (SELECT s.reference FROM sms_records s
       WHERE s.tenant_id = $1 AND s.delivery_status = nullif($5, 'sent')
           AND s.reference >= $2 AND s.reference < $3 AND ($6::text IS NULL OR s.source = $6)
       ORDER BY s.reference DESC
       LIMIT $4)
      ORDER BY 1 DESC
      LIMIT $4) p
CROSS JOIN LATERAL (SELECT * FROM og_log_sms v
                    WHERE v.tenant_id = $1 AND v.reference = p.reference OFFSET 0) v
ORDER BY p.reference DESC;

-- name: logs_sms_source
-- One page of SMS records of one source (sms_records_tenant_source).
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 source
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_sms v
WHERE v.tenant_id = $1 AND v.source = $5 AND v.reference >= $2 AND v.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_otp
-- One page of OTP requests, each with its history of events in order: by time only.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_otp v
WHERE v.tenant_id = $1 AND v.reference >= $2 AND v.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_otp_reference
-- One page of OTP requests: the one with this reference, if it passes the other filters.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 reference
-- $6 to = the number (E.164), or NULL
-- $7 status = status, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_otp v
WHERE v.tenant_id = $1 AND v.reference = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.to_number = $6)
    AND ($7::text IS NULL OR v.status = $7)
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_otp_to
-- One page of OTP requests to one number (otp_requests_tenant_to, which the OTP send's limits
-- and the verify by number read too); the status filter is checked on the number's OTPs.
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 to = the number (E.164)
-- $6 status = status, or NULL
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_otp v
WHERE v.tenant_id = $1 AND v.to_number = $5 AND v.reference >= $2 AND v.reference < $3
    AND ($6::text IS NULL OR v.status = $6)
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_otp_status
-- One page of OTP requests in one status (otp_requests_tenant_status).
-- $1 tenant_id
-- $2 lo = lowest reference
-- $3 hi = references below this one
-- $4 limit
-- $5 status
-- columns: page row
SELECT v.reference AS cursor, v.item::text AS item
FROM og_log_otp v
WHERE v.tenant_id = $1 AND v.status = $5 AND v.reference > 'kf_'
    AND v.reference >= $2 AND v.reference < $3
ORDER BY v.reference DESC
LIMIT $4;

-- name: logs_tenant
-- Whether a tenant exists, for the admin mirrors of the logs (GET /admin/tenants/{id}/...):
-- read in the same round trip as the page, on the same read connection, so an unknown tenant
-- is a 404 rather than an empty page. Unlike the statements above it returns one column.
-- $1 tenant_id
-- columns: found
SELECT 1 AS found
FROM tenants
WHERE id = $1;
