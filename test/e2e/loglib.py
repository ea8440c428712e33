"""Logs at scale (API.md §16, docs/logs.md), shared by test_logs_scale.py and the benchmark
(test/bench/bench.py): a tenant with many records generated in SQL, the statement and the
parameters the gateway runs for a log page (a mirror of logs_page in src/product/logs/logs_api.c),
and what a plan must not contain. Standard library only."""

import calendar
import datetime
import json
import os
import re


# ---- references and their time (src/base/ids.c) -------------------------------------------------

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ref_ms(ref):
    """The millisecond time a reference ("kf_" + 26 Crockford characters) was made at."""
    t = 0
    for ch in ref[3:13]:
        t = t * 32 + CROCKFORD.index(ch)
    return t


def ref_at(ms, tail="0" * 16):
    """A reference of millisecond `ms` with the 16 characters `tail` (the smallest by default)."""
    return "kf_" + "".join(CROCKFORD[(ms >> (5 * i)) & 31] for i in range(9, -1, -1)) + tail


# The same two in SQL, as functions of the session (pg_temp): run this text first, in the same
# psql call as the statements using them.
REF_SQL = """
CREATE FUNCTION pg_temp.og_ref_ms(r text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT sum((strpos('%(c)s', substr(r, 3 + i, 1)) - 1)::bigint << (5 * (10 - i)))::bigint
    FROM generate_series(1, 10) i $$;
CREATE FUNCTION pg_temp.og_ref_at(ms bigint, tail text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'kf_' || substr('%(c)s', ((ms >> 45) & 31)::int + 1, 1) || substr('%(c)s', ((ms >> 40) & 31)::int + 1, 1)
        || substr('%(c)s', ((ms >> 35) & 31)::int + 1, 1) || substr('%(c)s', ((ms >> 30) & 31)::int + 1, 1)
        || substr('%(c)s', ((ms >> 25) & 31)::int + 1, 1) || substr('%(c)s', ((ms >> 20) & 31)::int + 1, 1)
        || substr('%(c)s', ((ms >> 15) & 31)::int + 1, 1) || substr('%(c)s', ((ms >> 10) & 31)::int + 1, 1)
        || substr('%(c)s', ((ms >> 5) & 31)::int + 1, 1) || substr('%(c)s', (ms & 31)::int + 1, 1) || tail $$;
""" % {"c": CROCKFORD}


def age_sql(days):
    """SQL moving every record of the log tables `days` days into the past: its created_at and
    its reference (the time a log page and retention go by), keeping each reference's random
    part, in the tables that refer to it too. Schema-agnostic copies, since a reference is a
    primary key that other rows point at."""
    shift = days * 86400000
    return REF_SQL + """
CREATE TEMP TABLE aged AS
    SELECT reference AS old, pg_temp.og_ref_at(pg_temp.og_ref_ms(reference) - %(s)d, substr(reference, 14)) AS new
    FROM (SELECT reference FROM messages UNION SELECT reference FROM otp_requests
          UNION SELECT reference FROM sms_records) r;
INSERT INTO messages SELECT (jsonb_populate_record(NULL::messages,
    to_jsonb(m) || jsonb_build_object('reference', a.new))).* FROM messages m JOIN aged a ON a.old = m.reference;
INSERT INTO otp_requests SELECT (jsonb_populate_record(NULL::otp_requests,
    to_jsonb(o) || jsonb_build_object('reference', a.new))).* FROM otp_requests o JOIN aged a ON a.old = o.reference;
UPDATE attempts SET reference = a.new FROM aged a WHERE attempts.reference = a.old;
UPDATE otp_events SET otp_reference = a.new FROM aged a WHERE otp_events.otp_reference = a.old;
UPDATE sms_records SET reference = a.new, source_reference = CASE WHEN source_reference IS NULL THEN NULL ELSE a.new END
    FROM aged a WHERE sms_records.reference = a.old;
UPDATE idempotency_keys SET reference = a.new FROM aged a WHERE idempotency_keys.reference = a.old;
UPDATE queue_entries SET reference = a.new FROM aged a WHERE queue_entries.reference = a.old;
DELETE FROM messages WHERE reference IN (SELECT old FROM aged);
DELETE FROM otp_requests WHERE reference IN (SELECT old FROM aged);
UPDATE messages SET created_at = created_at - interval '%(d)d days';
UPDATE sms_records SET created_at = created_at - interval '%(d)d days';
UPDATE otp_requests SET created_at = created_at - interval '%(d)d days';
""" % {"s": shift, "d": days}


TENANT = "11111111-1111-4111-8111-111111111111"
OTHER = "22222222-2222-4222-8222-222222222222"
STEP_MS = 100  # one message every 100 ms: a million is about 28 hours
NOBODY = "+62899999999"  # a number nothing was sent to
BIG_TABLES = ("messages", "attempts", "sms_records", "otp_requests", "otp_events")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _b32(expr, shift):
    return "substr('%s', ((%s >> %d) & 31)::int + 1, 1)" % (CROCKFORD, expr, shift)


def load_sql(n, n_other, end_ms):
    """SQL that fills the log tables: `n` unified sends of TENANT, one every STEP_MS, the last
    at `end_ms`, and `n_other` of OTHER, with their attempts, SMS records, OTPs and OTP events,
    then statistics (ANALYZE, as autovacuum would). Send i (1..n) of a tenant:
    - to "+62811" + i % 10000 (6 digits): 100 sends per number when n is a million;
    - status failed when i % 20 == 0, undelivered when i % 100 == 1, else read, delivered or
      sent by i % 3; never pending or unknown (a live gateway would sweep old pending sends);
    - one attempt: whatsapp_qr when i % 10 < 7, else sms; never whatsapp_meta;
    - an SMS record (source omni) for each sms attempt: failed when i % 50 == 7, else read or
      delivered; never undelivered. One more SMS (source sms, delivery sent) when i % 10 == 0;
    - an OTP when i % 10 == 5 (to "+62813" + i % 5000), verified, expired or pending by i % 10
      of i / 10, never locked, with its SMS (source otp) and one event.
    The indexes (but the primary keys) and the foreign keys are dropped for the load and
    made again after (the foreign keys NOT VALID: the generated rows are consistent), which is
    several times faster than inserting through them. Runs as the tables' owner."""
    ref = "'kf_' || h.code || l.code || upper(lpad(to_hex(g.i), 16, '0'))"
    return """
SET maintenance_work_mem = '256MB';
CREATE TEMP TABLE idx AS
    SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
    WHERE c.relname IN ('messages', 'attempts', 'sms_records', 'otp_requests', 'otp_events') AND NOT i.indisprimary;
DO $$ DECLARE r record; BEGIN FOR r IN SELECT name FROM idx LOOP EXECUTE 'DROP INDEX ' || r.name; END LOOP; END $$;
ALTER TABLE otp_events DROP CONSTRAINT otp_events_tenant_id_otp_reference_fkey;
INSERT INTO tenants (id, name, unified_api_enabled) VALUES ('%(t)s', 'logs-at-scale', true), ('%(o)s', 'other', true);
CREATE TEMP TABLE g AS
    SELECT t.id AS tenant_id, t.n, i, %(end)d - (t.n - i) * %(step)d AS ms
    FROM (VALUES ('%(t)s'::uuid, %(n)d), ('%(o)s'::uuid, %(no)d)) t(id, n), generate_series(1, t.n) i;
-- References: the 8 characters of the time's top 40 bits, then the 2 of its low 10 bits, each
-- computed once per value rather than once per row.
CREATE TEMP TABLE hi AS
    SELECT b, %(hi)s AS code FROM generate_series((SELECT min(ms) >> 10 FROM g), (SELECT max(ms) >> 10 FROM g)) b;
CREATE TEMP TABLE lo AS SELECT k, %(lo)s AS code FROM generate_series(0, 1023) k;
CREATE TEMP TABLE r AS
    SELECT g.*, %(ref)s AS reference, to_timestamp(g.ms / 1000.0) AS at
    FROM g JOIN hi h ON h.b = g.ms >> 10 JOIN lo l ON l.k = g.ms & 1023;
INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, winning_channel,
                      created_at, completed_at)
SELECT tenant_id, reference, '+62811' || lpad((i %% 10000)::text, 6, '0'), 'Your order ' || i || ' has shipped',
       'fallback', '{whatsapp_qr,sms}',
       CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i %% 100 = 1 THEN 'undelivered'
            WHEN i %% 3 = 0 THEN 'read' WHEN i %% 3 = 1 THEN 'delivered' ELSE 'sent' END,
       CASE WHEN i %% 20 = 0 THEN NULL WHEN i %% 10 < 7 THEN 'whatsapp_qr' ELSE 'sms' END,
       at, at + interval '200 milliseconds'
FROM r;
INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, error_code, latency_ms,
                      attempted_at, delivery_status)
SELECT tenant_id, reference, CASE WHEN i %% 10 < 7 THEN 0 ELSE 1 END,
       CASE WHEN i %% 10 < 7 THEN 'whatsapp_qr' ELSE 'sms' END,
       CASE WHEN i %% 20 = 0 THEN 'failed' ELSE 'sent' END,
       CASE WHEN i %% 20 = 0 THEN NULL ELSE 'pm-' || reference END,
       CASE WHEN i %% 20 = 0 THEN 'provider_rejected' END, 180, at,
       CASE WHEN i %% 20 = 0 THEN NULL WHEN i %% 3 = 0 THEN 'read' ELSE 'delivered' END
FROM r;
INSERT INTO sms_records (tenant_id, reference, source, to_number, sender, body, segments, encoding, status,
                         provider_message_id, delivery_status, created_at)
SELECT tenant_id, reference, 'omni', '+62811' || lpad((i %% 10000)::text, 6, '0'), 'ACME', 'Your order has shipped',
       1, 'gsm7', CASE WHEN i %% 50 = 7 THEN 'failed' ELSE 'sent' END,
       CASE WHEN i %% 50 = 7 THEN NULL ELSE 'pm-' || reference END,
       CASE WHEN i %% 50 = 7 THEN NULL WHEN i %% 3 = 0 THEN 'read' ELSE 'delivered' END, at
FROM r WHERE i %% 10 >= 7;
INSERT INTO sms_records (tenant_id, reference, source, to_number, sender, body, segments, encoding, status,
                         provider_message_id, delivery_status, created_at)
SELECT tenant_id, left(reference, 13) || 'S' || right(reference, 15), 'sms', '+62812' || lpad((i %% 10000)::text, 6, '0'),
       'ACME', 'Hello', 1, 'gsm7', 'sent', 'ps-' || reference, 'sent', at
FROM r WHERE i %% 10 = 0;
INSERT INTO otp_requests (tenant_id, reference, to_number, code_hash, length, status, failed_attempts, expires_at,
                          created_at, verified_at)
SELECT tenant_id, left(reference, 13) || 'T' || right(reference, 15), '+62813' || lpad((i %% 5000)::text, 6, '0'),
       md5(reference), 6, CASE WHEN i / 10 %% 10 < 6 THEN 'verified' WHEN i / 10 %% 10 < 9 THEN 'expired' ELSE 'pending' END,
       0, at + interval '5 minutes', at, CASE WHEN i / 10 %% 10 < 6 THEN at + interval '20 seconds' END
FROM r WHERE i %% 10 = 5;
INSERT INTO sms_records (tenant_id, reference, source, source_reference, to_number, sender, body, segments, encoding,
                         status, provider_message_id, delivery_status, created_at)
SELECT tenant_id, reference, 'otp', reference, to_number, 'ACME', 'Your verification code is ******', 1, 'gsm7',
       'sent', 'po-' || reference, 'delivered', created_at
FROM otp_requests;
INSERT INTO otp_events (tenant_id, otp_reference, event, at) SELECT tenant_id, reference, 'sent', created_at FROM otp_requests;
DO $$ DECLARE r record; BEGIN FOR r IN SELECT def FROM idx LOOP EXECUTE r.def; END LOOP; END $$;
ALTER TABLE otp_events ADD CONSTRAINT otp_events_tenant_id_otp_reference_fkey
    FOREIGN KEY (tenant_id, otp_reference) REFERENCES otp_requests (tenant_id, reference) NOT VALID;
ANALYZE messages, attempts, sms_records, otp_requests, otp_events, tenants;
""" % {"t": TENANT, "o": OTHER, "n": n, "no": n_other, "end": end_ms, "step": STEP_MS, "ref": ref,
       "hi": " || ".join(_b32("b", s) for s in (35, 30, 25, 20, 15, 10, 5, 0)),
       "lo": _b32("k", 5) + " || " + _b32("k", 0)}


def send_ref(i, n, end_ms):
    """The reference load_sql gives send i of n (of either tenant)."""
    return ref_at(end_ms - (n - i) * STEP_MS, "%016X" % i)


# ---- the statement of a page (src/product/logs/logs_api.c, logs_page) -----------------------------

RANKS = {"omni": ("reference", "to", "status", "channel"),
         "sms": ("reference", "to", "status", "source"),
         "otp": ("reference", "to", "status")}
PATHS = {"omni": "/api/omni/logs", "sms": "/api/sms/logs", "otp": "/api/sms/otp/logs"}
HIGHEST = "kf_8" + "0" * 25  # past every reference: one past OG_IDS_TIME_MAX


def rfc3339_ms(s):
    """Milliseconds of an RFC 3339 time, rounded up (og_time_parse_rfc3339)."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)", s)
    assert m, s
    secs = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
    ns = int((m.group(7) or "0").ljust(9, "0"))
    if m.group(8) not in ("Z", "z"):
        off = int(m.group(8)[1:3]) * 60 + int(m.group(8)[4:6])
        secs -= off * 60 if m.group(8)[0] == "+" else -off * 60
    return secs * 1000 + (ns + 999999) // 1000000


def rfc3339(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def page_statement(log, query, tenant=TENANT):
    """(statement name, parameters) of the page GET <log path>?<query> asks for: the leading
    filter's statement, with the range, the limit + 1 and the filters from the leading one down."""
    lo = ref_at(max(rfc3339_ms(query["since"]), 0)) if "since" in query else ref_at(0)
    hi = ref_at(max(rfc3339_ms(query["until"]), 0)) if "until" in query else HIGHEST
    if "cursor" in query and query["cursor"] < hi:
        hi = query["cursor"]
    params = [tenant, lo, hi, str(int(query.get("limit", 50)) + 1)]
    ranks = RANKS[log]
    for i, f in enumerate(ranks):
        if query.get(f):
            name = "logs_%s_%s" % (log, f)
            if f == "status" and log == "omni" and query.get("channel"):
                name = "logs_omni_status_channel"
            nparams = max(int(x) for x in re.findall(r"\$(\d+)", statements()[name]))
            return name, (params + [query.get(x) for x in ranks[i:]])[:nparams]
    return "logs_" + log, params


def statements():
    """name -> SQL of every statement of sql/queries/logs.sql, as the gateway prepares them."""
    out, name = {}, None
    with open(os.path.join(ROOT, "sql/queries/logs.sql")) as f:
        for line in f.read().splitlines():
            m = re.match(r"--\s*name:\s*(\S+)", line)
            if m:
                name = m.group(1)
                out[name] = []
            elif name and line.strip() and not line.lstrip().startswith("--"):
                out[name].append(line)
    return {k: "\n".join(v).rstrip().rstrip(";") for k, v in out.items()}


def literal(v):
    return "NULL" if v is None else "'" + str(v).replace("'", "''") + "'"


def explain_script(cases, modes=("force_generic_plan", "force_custom_plan"), analyze=False):
    """psql input preparing every log statement and explaining each (log, query) case in each
    plan_cache_mode, as JSON; split the output with split_explained."""
    lines = ["SET jit = off;"]
    for name, sql in statements().items():
        lines.append("PREPARE %s AS %s;" % (name, sql))
    for mode in modes:
        lines.append("SET plan_cache_mode = %s;" % mode)
        for log, query in cases:
            name, params = page_statement(log, query)
            lines.append("\\echo ==== %s" % json.dumps([mode, log, query, name]))
            lines.append("EXPLAIN (FORMAT JSON%s) EXECUTE %s(%s);" % (
                ", ANALYZE, BUFFERS" if analyze else "", name, ", ".join(literal(p) for p in params)))
    return "\n".join(lines) + "\n"


def split_explained(out):
    """[(mode, log, query, statement, plan JSON)] from the output of explain_script."""
    res = []
    for chunk in out.split("==== ")[1:]:
        head, _, body = chunk.partition("\n")
        mode, log, query, name = json.loads(head)
        res.append((mode, log, query, name, json.loads(body)[0]))
    return res


def plan_problems(plan):
    """What a log page's plan must not do: scan one of the big tables sequentially (or by a
    bitmap, which reads every match before the first row), or sort rows of them (a Sort whose
    input reads a big table with no Limit in between: sorting a page read in order is fine)."""
    problems = []

    def walk(node, limited):
        kind, rel = node["Node Type"], node.get("Relation Name")
        if rel in BIG_TABLES and kind in ("Seq Scan", "Bitmap Heap Scan"):
            problems.append("%s on %s" % (kind, rel))
        if kind == "Sort" and not limited and reads_big(node):
            problems.append("Sort over %s" % ", ".join(sorted(tables(node))))
        for child in node.get("Plans", []):
            walk(child, (limited or kind == "Limit") and kind != "Sort")

    def tables(node):
        out = {node["Relation Name"]} if node.get("Relation Name") in BIG_TABLES else set()
        for child in node.get("Plans", []):
            if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
                out |= tables(child)
        return out

    def reads_big(node):
        # A Sort directly over limited inputs only (a Merge of page-sized subqueries) is fine.
        def unlimited(n):
            if n["Node Type"] == "Limit":
                return False
            if n.get("Relation Name") in BIG_TABLES:
                return True
            return any(unlimited(c) for c in n.get("Plans", [])
                       if c.get("Parent Relationship") not in ("SubPlan", "InitPlan"))
        return any(unlimited(c) for c in node.get("Plans", []))

    walk(plan["Plan"], False)
    return problems


def leading_index(plan):
    """The indexes of the big tables the plan reads, in plan order (the page's own reads
    first), without the lookups of its items' subplans."""
    out = []

    def walk(node):
        if node.get("Relation Name") in BIG_TABLES and node.get("Index Name"):
            out.append(node["Index Name"])
        for child in node.get("Plans", []):
            if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
                walk(child)
    walk(plan["Plan"])
    return out
