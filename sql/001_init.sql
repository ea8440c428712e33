-- Omnigate schema, version 1: tenants and tokens, messages and their attempts, SMS records,
-- OTPs and their history, idempotency keys.
--
-- Volume rules: every table that logs read leads its keys with tenant_id, so a log page is
-- one index range scan and the schema can later be sharded by tenant (Citus distribution
-- column). Message-like keys are time-ordered references ("kf_" + ULID, API.md §2), so
-- indexes grow at their right edge and the tables can be range-partitioned by month on
-- created_at without changing any key the code uses (not done yet: a plan the keys keep open).

CREATE TABLE tenants (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name                text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    unified_api_enabled boolean     NOT NULL DEFAULT false,
    settings            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

-- Only a keyed hash of each token is stored (HMAC-SHA256 with OMNIGATE_SECRET, hex).
CREATE TABLE api_tokens (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid        NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         text        NOT NULL DEFAULT '',
    prefix       text        NOT NULL,
    token_hash   text        NOT NULL UNIQUE,
    scopes       text[]      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at);

-- One row per POST /api/omni/send, inserted 'pending' before any provider is called.
-- status: pending -> sent | failed; 'unknown' for rows a crash left pending.
CREATE TABLE messages (
    tenant_id       uuid        NOT NULL,
    reference       text        NOT NULL,
    to_number       text        NOT NULL,
    body            text        NOT NULL,
    delivery_mode   text        NOT NULL CHECK (delivery_mode IN ('fallback', 'all')),
    channels        text[]      NOT NULL,
    skipped         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'sent', 'failed', 'unknown')),
    winning_channel text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    PRIMARY KEY (tenant_id, reference)
);
CREATE INDEX messages_tenant_created ON messages (tenant_id, created_at DESC, reference DESC);
CREATE INDEX messages_pending ON messages (created_at) WHERE status = 'pending';

CREATE TABLE attempts (
    tenant_id           uuid        NOT NULL,
    reference           text        NOT NULL,
    seq                 smallint    NOT NULL,
    channel             text        NOT NULL,
    status              text        NOT NULL,
    provider_message_id text,
    error_code          text,
    error_message       text,
    provider_code       text,
    http_status         integer,
    latency_ms          integer     NOT NULL,
    attempted_at        timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, reference, seq),
    FOREIGN KEY (tenant_id, reference) REFERENCES messages (tenant_id, reference)
);

-- Every SMS delivery, whatever its source (an SMS send, the sms attempt of a unified send,
-- an OTP). OTP codes are masked in body.
CREATE TABLE sms_records (
    tenant_id           uuid        NOT NULL,
    reference           text        NOT NULL,
    source              text        NOT NULL CHECK (source IN ('sms', 'omni', 'otp')),
    source_reference    text,
    to_number           text        NOT NULL,
    sender              text,
    body                text        NOT NULL,
    segments            integer     NOT NULL,
    encoding            text        NOT NULL CHECK (encoding IN ('gsm7', 'ucs2')),
    status              text        NOT NULL,
    provider_message_id text,
    error               jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, reference)
);
CREATE INDEX sms_records_tenant_created ON sms_records (tenant_id, created_at DESC, reference DESC);

-- One-time passwords: the code is stored only as an HMAC keyed by OMNIGATE_SECRET.
CREATE TABLE otp_requests (
    tenant_id       uuid        NOT NULL,
    reference       text        NOT NULL,
    to_number       text        NOT NULL,
    code_hash       text        NOT NULL,
    length          smallint    NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'verified', 'expired', 'locked', 'failed', 'superseded')),
    failed_attempts smallint    NOT NULL DEFAULT 0,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    verified_at     timestamptz,
    PRIMARY KEY (tenant_id, reference)
);
CREATE INDEX otp_requests_tenant_created ON otp_requests (tenant_id, created_at DESC, reference DESC);
CREATE INDEX otp_requests_tenant_number ON otp_requests (tenant_id, to_number, created_at DESC);

CREATE TABLE otp_events (
    tenant_id     uuid        NOT NULL,
    otp_reference text        NOT NULL,
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    event         text        NOT NULL
                              CHECK (event IN ('sent', 'send_failed', 'verify_success', 'verify_failed', 'locked', 'expired')),
    at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, otp_reference, id),
    FOREIGN KEY (tenant_id, otp_reference) REFERENCES otp_requests (tenant_id, reference)
);

-- Idempotency-Key (API.md §6). The primary key is the cross-instance guarantee: the first
-- request commits its row before anything else (its pending message comes after); a repeat
-- finds the row. response_status is NULL while the first request is in flight; the answer is
-- stored in the same transaction as the request's final rows.
CREATE TABLE idempotency_keys (
    tenant_id       uuid        NOT NULL,
    key             text        NOT NULL,
    route           text        NOT NULL,
    request_hash    text        NOT NULL,
    reference       text,
    response_status integer,
    response_body   text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
