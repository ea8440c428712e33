"""Usage (issue 34, API.md §22): a benchmark scenario of bench.py.

usage: a tenant with --usage-messages (10,000,000) messages over the last 365 days, made in the
database as the gateway writes them (per day: the messages inserted, their attempts inserted,
their winning channels set, one statement each), their totals added as their writers would have
added them (sql/029: the writers count what they write; here one statement over the rows made,
sql/024's rule), the shards of the last two days left as 32 backends would leave them. Then GET /api/usage for the whole
year, grouped by day, by channel and by both, through the gateway (wrk, 1 connection: latency
is the target, under 50 ms) and the statement's plan with its timing (EXPLAIN ANALYZE). The
cold case: the first request after a gateway restart, timed alone. The tenant and its rows are
deleted at the end.
"""

import datetime
import json
import subprocess
import time
import urllib.request

SETTINGS = {"defaultChannels": ["whatsapp_qr", "whatsapp_meta", "sms"]}


def timed_get(b, path, token):
    req = urllib.request.Request(b.og_url(path), headers={"Authorization": "Bearer " + token})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    return (time.monotonic() - t0) * 1000, body


def generate(b, tenant, n, bench):
    per_day = max(1, n // 365)
    t0 = time.monotonic()
    # One day at a time, three statements each (as the write path makes them, only larger), fed
    # to one psql session with their values written out (a PL/pgSQL loop planned them for any
    # day, and badly).
    script = []
    for d in range(365):
        v = {"t": tenant, "per": per_day, "d": d}
        script.append("""
INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, created_at)
SELECT '%(t)s', 'ku%(d)d_' || g, '+62812' || lpad((g %% 1000000)::text, 7, '0'), 'Your code is 1234', 'fallback',
    ARRAY['whatsapp_qr', 'whatsapp_meta', 'sms'], 'sent',
    now() - interval '%(d)d days' - (g %% 80000) * interval '1 second'
FROM generate_series(1, %(per)d) g;
INSERT INTO attempts (tenant_id, reference, seq, channel, status, latency_ms, attempted_at, provider_message_id,
                      delivery_status, cost_micros, cost_currency, sms_equiv_micros)
SELECT '%(t)s', 'ku%(d)d_' || g, 0,
    CASE WHEN g %% 20 < 12 THEN 'whatsapp_qr' WHEN g %% 20 < 17 THEN 'whatsapp_meta' ELSE 'sms' END,
    'sent', 120, now(), 'p%(d)d_' || g,
    CASE WHEN g %% 10 < 7 THEN 'read' WHEN g %% 10 < 9 THEN 'delivered' ELSE 'sent' END,
    CASE WHEN g %% 20 < 12 THEN 0 WHEN g %% 20 < 17 THEN 14000 ELSE 45000 END, 'USD',
    CASE WHEN g %% 20 < 17 THEN 45000 END
FROM generate_series(1, %(per)d) g;
UPDATE messages m SET winning_channel = CASE WHEN g %% 20 < 12 THEN 'whatsapp_qr' WHEN g %% 20 < 17 THEN 'whatsapp_meta'
                                             ELSE 'sms' END
FROM generate_series(1, %(per)d) g
WHERE m.tenant_id = '%(t)s' AND m.reference = 'ku%(d)d_' || g;""" % v)
    subprocess.run(["psql", b.db_url, "-XAtq", "-v", "ON_ERROR_STOP=1"], input="".join(script), text=True,
                   check=True, capture_output=True)
    # Their totals, by sql/024's rule (what the writers add, test/e2e/test_usage.py checks it),
    # in shard 0 as the sweep's compaction leaves past days.
    b.psql("""
INSERT INTO usage_totals (tenant_id, day, channel, shard, messages)
SELECT m.tenant_id, og_usage_day(m.created_at), '', 0, count(*) FROM messages m WHERE m.tenant_id = '%(t)s' GROUP BY 1, 2;
INSERT INTO usage_totals (tenant_id, day, channel, shard, messages, attempts, accepted, delivered, read, failed,
                          cost_micros, won, savings_micros)
SELECT a.tenant_id, og_usage_day(m.created_at), a.channel, 0, sum(og_usage_final(a.status)),
    sum(og_usage_final(a.status)), sum(og_usage_accepted(a.status)), sum(og_usage_delivered(a.status, a.delivery_status)),
    sum(og_usage_read(a.status, a.delivery_status)), sum(og_usage_failed(a.status)),
    sum(og_usage_cost(a.status, a.cost_micros)), count(*) FILTER (WHERE a.channel = m.winning_channel),
    coalesce(sum(a.sms_equiv_micros - a.cost_micros) FILTER (WHERE a.channel = m.winning_channel AND a.channel <> 'sms'), 0)
FROM attempts a JOIN messages m ON m.tenant_id = a.tenant_id AND m.reference = a.reference
WHERE a.tenant_id = '%(t)s'
GROUP BY 1, 2, 3""" % {"t": tenant})
    made_s = time.monotonic() - t0
    # The last two days keep shard rows besides, spread here over 32 backends as a busy
    # instance's pools would leave them.
    b.psql("""
INSERT INTO usage_totals (tenant_id, day, channel, shard, messages, attempts, accepted)
SELECT u.tenant_id, u.day, u.channel, 1000 + s, 1, 1, 1
FROM usage_totals u CROSS JOIN generate_series(1, 32) s
WHERE u.tenant_id = '%s' AND u.day >= og_usage_day(now()) - 1""" % tenant)
    rows = int(b.psql("SELECT count(*) FROM usage_totals WHERE tenant_id = '%s'" % tenant))
    bench.log("usage: %d messages in %.0f s (%d a day); %d usage rows for the tenant" % (
        per_day * 365, made_s, per_day, rows))
    return per_day * 365, made_s, rows


def sc_usage(b, bench):
    n = b.args.usage_messages
    st, j = bench.http_json("POST", b.og_url("/admin/tenants"), bench.ADMIN,
                            {"name": "bench-usage", "unifiedApiEnabled": True, "settings": SETTINGS})
    assert st == 201, j
    tenant = j["data"]["id"]
    st, t = bench.http_json("POST", b.og_url("/admin/tenants/%s/tokens" % tenant), bench.ADMIN, {})
    assert st == 201, t
    token = t["data"]["token"]
    made, made_s, rows = generate(b, tenant, n, bench)
    until = datetime.datetime.now(datetime.timezone.utc)
    since = until - datetime.timedelta(days=365)
    q = "since=%s&until=%s" % (since.strftime("%Y-%m-%dT%H:%M:%SZ"), until.strftime("%Y-%m-%dT%H:%M:%SZ"))
    # The cold case: the first request of a restarted gateway (its connections new).
    b.stop_gateway()
    b.start_gateway()
    cold_ms, body = timed_get(b, "/api/usage?" + q, token)
    total = sum(r["messages"] for r in body["data"]["rows"])
    results = {}
    for group in ("day", "channel", "day,channel"):
        path = "/api/usage?%s&groupBy=%s" % (q, group)
        script = b.lua("usage_" + group.replace(",", "_"), "GET", path, [], [token])
        r = b.measure("usage_" + group.replace(",", "_"), b.og_url(path), conns=1, script=script,
                      note="GET /api/usage, a year of %d messages, groupBy=%s" % (made, group))
        results[group] = r
    plan = b.psql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + USAGE_SQL % {
        "t": tenant, "s": since.date().isoformat(), "u": until.date().isoformat()})
    res = dict(results["day"], scenario="usage", messages=made, messages_seen=total, rows=rows,
               generate_s=made_s, cold_ms=cold_ms, plan=plan,
               p99_by_group={g: r["p99_ms"] for g, r in results.items()},
               note="GET /api/usage for a year of %d messages (target p99 < 50 ms)" % made)
    b.results.append(res)
    bench.log("usage: a year of %d messages (%d counted by the answer), %d rows; p99 by day %.2f ms, by channel "
              "%.2f ms, by both %.2f ms; cold first request %.1f ms\n%s" % (
                  made, total, rows, results["day"]["p99_ms"], results["channel"]["p99_ms"],
                  results["day,channel"]["p99_ms"], cold_ms, plan))
    b.psql("DELETE FROM usage_totals WHERE tenant_id = '%s'; DELETE FROM attempts WHERE tenant_id = '%s'; "
           "DELETE FROM messages WHERE tenant_id = '%s'" % (tenant, tenant, tenant))


def report(b):
    r = next((r for r in b.results if r["scenario"] == "usage"), None)
    if r is None:
        return []
    return ["", "## Usage (issue 34)", "",
            "A year of %d messages for one tenant (%d usage rows after the sweep's compaction, the last two "
            "days in 32 shards), made in %.0f s. GET /api/usage for the year: p99 %.2f ms by day, %.2f ms by "
            "channel, %.2f ms by both (target < 50 ms); the first request after a restart %.1f ms. The "
            "statement's plan (usage_rows; the gateway groups its rows):" % (
                r["messages"], r["rows"], r["generate_s"], r["p99_by_group"]["day"], r["p99_by_group"]["channel"],
                r["p99_by_group"]["day,channel"], r["cold_ms"]), "", "```", r["plan"], "```"]


# usage_rows of sql/queries/usage.sql with its parameters filled in, for EXPLAIN.
USAGE_SQL = None


def load_sql(root):
    """usage_rows' text from sql/queries/usage.sql, its parameters as %-placeholders."""
    global USAGE_SQL
    text = open(root + "/sql/queries/usage.sql").read()
    body = text.split("-- name: usage_rows", 1)[1].split("-- name:", 1)[0]
    sql = "\n".join(line for line in body.splitlines() if not line.startswith("--")).strip().rstrip(";")
    sql = sql.replace("%", "%%")
    for k, v in (("$1::uuid", "'%(t)s'::uuid"), ("$2::date", "'%(s)s'::date"), ("$3::date", "'%(u)s'::date")):
        sql = sql.replace(k, v)
    USAGE_SQL = sql
