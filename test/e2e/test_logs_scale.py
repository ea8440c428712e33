"""Issue 16 (API.md §16, docs/logs.md): logs at scale. A tenant with a million unified sends
(and their attempts, SMS records and OTPs, generated in SQL) on the migrated schema: every
filter of every log, including filters that match nothing, is served by an index range scan
in the order of the answer (no sequential scan, no sort of the tenant's rows) in the plan of
the very statement the gateway runs, generic and custom; and the page answers over HTTP from
the real binary in under 100 ms. Also: paging by cursor stays exact under every filter while
records arrive, and no statement of the write path picks a wrong index on a database that was
never analyzed."""

import json
import re
import statistics
import subprocess
import threading
import time
import urllib.parse
import uuid

import pytest

from conftest import Server, assert_error, assert_ok, wait_for
from gwlib import call, gateway_env, migrate, new_token, query_url
import loglib
from loglib import NOBODY, REF_SQL, TENANT, ref_ms

N = 1000000  # unified sends of TENANT
N_OTHER = 50000  # of another tenant, whose rows no page may read
PAGE_BUDGET_S = 0.100


def psql(url, sql, timeout=120):
    p = subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1"], input=sql, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def new_database(pg_session):
    name = "t_logs_" + uuid.uuid4().hex[:10]
    if hasattr(pg_session, "create_database"):
        return name, pg_session.create_database(name)
    pg_session.psql("CREATE DATABASE %s" % name)
    return name, pg_session.url_for(name)


def drop_database(pg_session, name):
    if hasattr(pg_session, "drop_database"):
        pg_session.drop_database(name)
    else:
        pg_session.psql("DROP DATABASE %s WITH (FORCE)" % name)


@pytest.fixture(scope="module")
def big(pg_session, tmp_path_factory):
    """The migrated database with TENANT's million sends, and a gateway on it with a token of
    TENANT (.token). .end_ms is the time of the newest send."""
    name, url = new_database(pg_session)
    srv = None
    try:
        migrate(url)
        end_ms = int(time.time() * 1000) - 60000
        t = time.monotonic()
        psql(url, loglib.load_sql(N, N_OTHER, end_ms), timeout=300)
        load_s = time.monotonic() - t
        srv = Server(env=gateway_env(url), workers=1, tmpdir=str(tmp_path_factory.mktemp("logs")))
        srv.start()
        assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
        srv.db_url, srv.end_ms, srv.load_s = url, end_ms, load_s
        srv.token = new_token(srv, TENANT)["token"]
        yield srv
    finally:
        if srv is not None:
            rc = srv.stop()
            srv.close_log()
            assert not srv.sanitizer_reports(), srv.stderr()[-4000:]
            assert rc == 0, srv.stderr()[-4000:]
        drop_database(pg_session, name)


def ref(srv, i):
    """The reference of TENANT's send i (1..N)."""
    return loglib.send_ref(i, N, srv.end_ms)


def cases(srv):
    """(log, query, whether the page has items) for every filter of every log, with a value
    that matches and one that matches nothing, since/until, a cursor, and combinations; the
    values come from the distributions of loglib.load_sql."""
    mid = srv.end_ms - (N // 2) * loglib.STEP_MS
    window = {"since": loglib.rfc3339(mid - 3600000), "until": loglib.rfc3339(mid)}
    before_all = {"until": loglib.rfc3339(srv.end_ms - (N + 10) * loglib.STEP_MS)}
    cursor = {"cursor": ref(srv, N // 3)}
    unknown_ref = ref(srv, 0)[:13] + "Z" * 16
    otp_ref = ref(srv, 15)[:13] + "T" + ref(srv, 15)[14:]
    out = []
    for log in ("omni", "sms", "otp"):
        out += [(log, {}, True), (log, window, True), (log, before_all, False), (log, cursor, True),
                (log, {"to": NOBODY}, False), (log, {"reference": unknown_ref}, False)]
    return out + [
        ("omni", {"reference": ref(srv, 12345)}, True), ("omni", {"to": "+62811001234"}, True),
        ("omni", {"status": "failed"}, True), ("omni", {"status": "undelivered"}, True),
        ("omni", {"status": "read"}, True), ("omni", {"status": "pending"}, False), ("omni", {"status": "unknown"}, False),
        ("omni", {"status": "queued"}, False), ("omni", {"status": "scheduled"}, False),
        ("omni", {"channel": "sms"}, True), ("omni", {"channel": "whatsapp_qr"}, True),
        ("omni", {"channel": "whatsapp_meta"}, False), ("omni", dict({"status": "failed"}, **cursor), True),
        ("omni", dict({"channel": "sms"}, **window), True),
        ("omni", {"to": "+62811001237", "status": "read", "channel": "sms"}, True),
        ("omni", {"to": "+62811001234", "channel": "sms"}, False),
        ("omni", {"status": "undelivered", "channel": "whatsapp_qr"}, True),
        ("omni", {"status": "read", "channel": "whatsapp_meta"}, False), ("omni", {"status": "unknown", "channel": "sms"}, False),
        ("sms", {"reference": ref(srv, 12347)}, True), ("sms", {"to": "+62811001237"}, True),
        ("sms", {"status": "sent"}, True), ("sms", {"status": "failed"}, True), ("sms", {"status": "delivered"}, True),
        ("sms", {"status": "read"}, True), ("sms", {"status": "undelivered"}, False),
        ("sms", {"source": "omni"}, True), ("sms", {"source": "sms"}, True), ("sms", {"source": "otp"}, True),
        ("sms", {"status": "sent", "source": "otp"}, True), ("sms", dict({"source": "otp"}, **window), True),
        ("sms", {"to": "+62811001237", "status": "failed"}, False),
        ("otp", {"reference": otp_ref}, True), ("otp", {"to": "+62813000015"}, True),
        ("otp", {"status": "verified"}, True), ("otp", {"status": "expired"}, True), ("otp", {"status": "pending"}, True),
        ("otp", {"status": "locked"}, False), ("otp", {"to": "+62813000095", "status": "pending"}, True),
        ("otp", {"to": "+62813000015", "status": "pending"}, False), ("otp", dict({"status": "expired"}, **window), True)]


def statement_rows(srv, pages):
    """The references each (statement, parameters) returns, run by psql in one session."""
    lines = ["PREPARE %s AS %s;" % (k, v) for k, v in loglib.statements().items()]
    for name, params in pages:
        lines += ["\\echo ====", "EXECUTE %s(%s);" % (name, ", ".join(loglib.literal(p) for p in params))]
    out = psql(srv.db_url, "\n".join(lines) + "\n")
    return [[line.split("|", 1)[0] for line in chunk.splitlines() if line] for chunk in out.split("====\n")[1:]]


def explained(srv, cases_, analyze=False):
    out = psql(srv.db_url, loglib.explain_script([(log, q) for log, q, _ in cases_], analyze=analyze))
    return loglib.split_explained(out)


def page(srv, log, query, timeout=10):
    path = loglib.PATHS[log] + ("?" + urllib.parse.urlencode(query) if query else "")
    t = time.monotonic()
    r = call(srv, "GET", path, token=srv.token, timeout=timeout)
    return time.monotonic() - t, assert_ok(r)["data"]


# Which index a page by each filter reads first, in a generic plan (custom plans may prefer the
# primary key in reference order when the statistics say the filter keeps most rows).
EXPECTED = {"logs_omni": "messages_pkey", "logs_omni_reference": "messages_pkey", "logs_omni_to": "messages_tenant_to",
            "logs_omni_status": "messages_tenant_status", "logs_omni_channel": "attempts_tenant_channel",
            "logs_sms": "sms_records_pkey", "logs_sms_reference": "sms_records_pkey",
            "logs_sms_to": "sms_records_tenant_to", "logs_sms_source": "sms_records_tenant_source",
            "logs_otp": "otp_requests_pkey", "logs_otp_reference": "otp_requests_pkey",
            "logs_otp_to": "otp_requests_tenant_to", "logs_otp_status": "otp_requests_tenant_status"}
EXPECTED_ALL = {"logs_omni_status_channel": {"messages_tenant_status", "attempts_tenant_channel"},
                "logs_sms_status": {"sms_records_tenant_status", "sms_records_tenant_delivery"}}


def test_every_filter_is_an_index_range_scan_in_order(big):
    """The plan of each page's statement, with the parameters the gateway passes, generic and
    custom: no sequential or bitmap scan of a big table, no sort of its rows, and (generic) the
    filter's own index; the same statement gives the rows the gateway answers."""
    t = time.monotonic()
    cs = cases(big)
    bad = []
    for mode, log, query, name, plan in explained(big, cs):
        problems = loglib.plan_problems(plan)
        used = loglib.leading_index(plan)
        if mode == "force_generic_plan":
            if name in EXPECTED and (not used or used[0] != EXPECTED[name]):
                problems.append("reads %s first, not %s" % (used, EXPECTED[name]))
            if name in EXPECTED_ALL and not EXPECTED_ALL[name] <= set(used):
                problems.append("reads %s, not all of %s" % (used, sorted(EXPECTED_ALL[name])))
        if problems:
            bad.append("%s %s %s -> %s: %s" % (mode, log, json.dumps(query), name, "; ".join(problems)))
    assert not bad, "\n".join(bad)
    # The statements and parameters above are the ones the gateway runs: the same rows.
    rows = statement_rows(big, [loglib.page_statement(log, q) for log, q, _ in cs])
    for (log, query, _), want in zip(cs, rows):
        _, data = page(big, log, query)
        assert [i["reference"] for i in data["items"]] == want[:50], (log, query)
    print("loaded %d + %d sends in %.1f s; plans and rows of %d pages checked in %.1f s" % (
        N, N_OTHER, big.load_s, len(cs), time.monotonic() - t))


def test_every_filter_answers_over_http_within_100ms(big):
    """Each page of a single filter, a filter that matches nothing included, answers over HTTP
    within 100 ms (the median of three requests), database and gateway together; so do the
    combinations one of whose filters bounds the rows read (reference, to)."""
    slow = []
    for log, query, _ in cases(big):
        if query.get("status") and (query.get("channel") or query.get("source")) and not query.get("to"):
            continue  # two filters, neither bounding the other: docs/logs.md (timed in the benchmark)
        times = [page(big, log, query)[0] for _ in range(3)]
        if statistics.median(times) >= PAGE_BUDGET_S:
            slow.append("%s %s: %s" % (log, json.dumps(query), ", ".join("%.0f ms" % (x * 1000) for x in times)))
    assert not slow, "\n".join(slow)


def test_filters_answer_what_they_say(big):
    """The answers are right, not only fast: filters that match nothing answer no item, and the
    others only items that match, newest first, within since/until and below the cursor."""
    for log, query, some in cases(big):
        _, data = page(big, log, query)
        items = data["items"]
        refs = [i["reference"] for i in items]
        assert refs == sorted(refs, reverse=True) and len(set(refs)) == len(refs), (log, query)
        assert bool(items) == some, (log, query, refs[:3])
        for it in items:
            if "to" in query:
                assert it["to"] == query["to"]
            if "status" in query:
                assert query["status"] in (it["status"], it.get("deliveryStatus"))
            if "channel" in query:
                assert query["channel"] in [a["channel"] for a in it["attempts"]]
            if "source" in query:
                assert it["source"] == query["source"]
            if "reference" in query:
                assert it["reference"] == query["reference"]
            t = ref_ms(it["reference"])
            if "since" in query:
                assert t >= loglib.rfc3339_ms(query["since"])
            if "until" in query:
                assert t < loglib.rfc3339_ms(query["until"])
            if "cursor" in query:
                assert it["reference"] < query["cursor"]


def test_since_until_must_name_a_real_time(big):
    """since and until are checked in full (a day that does not exist, an hour past 23), and
    a cursor must be a reference this API made: 422 naming the parameter, never a database
    error."""
    for q, field in (("since=2026-02-30T00:00:00Z", "since"), ("until=2026-11-22T24:00:00Z", "until"),
                     ("since=2026-11-22T10:00:00%2B24:00", "since"), ("cursor=kf_8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "cursor")):
        for log in ("omni", "sms", "otp"):
            assert_error(call(big, "GET", loglib.PATHS[log] + "?" + q, token=big.token), 422, "validation_failed",
                         field)
    for log in ("omni", "sms", "otp"):
        assert_ok(call(big, "GET", loglib.PATHS[log] + "?since=2024-02-29T23:59:60.5%2B01:00", token=big.token))


# ---- paging -----------------------------------------------------------------------------------

def test_paging_is_exact_under_every_filter_while_records_arrive(big):
    """Paging by cursor (limit 7) under each filter gives every record that matched when the
    first page was asked for exactly once, newest first, while new records matching the same
    filters keep arriving: being newer, they can only come before the first page's records,
    never inside a later page."""
    recent = {"since": loglib.rfc3339(big.end_ms - 100000 + 1)}  # the last 1,000 generated sends
    filters = [("omni", {"to": "+62811004321"}), ("omni", dict({"status": "undelivered"}, **recent)),
               ("omni", dict({"channel": "sms"}, **recent)),
               ("omni", dict({"status": "failed", "channel": "whatsapp_qr"}, **recent)),
               ("omni", {"to": "+62811001111", "status": "delivered"}), ("omni", recent),
               ("omni", {"since": loglib.rfc3339(big.end_ms - 300000), "until": loglib.rfc3339(big.end_ms - 250000)}),
               ("sms", {"to": "+62812004320"}), ("sms", dict({"status": "read"}, **recent)),
               ("sms", dict({"status": "failed"}, **recent)), ("sms", dict({"source": "otp"}, **recent)),
               ("otp", {"to": "+62813000015"}), ("otp", dict({"status": "pending"}, **recent)), ("otp", recent)]
    tables = {"omni": "messages", "sms": "sms_records", "otp": "otp_requests"}
    stop = threading.Event()
    inserted = []

    def insert_new():
        """Records of now matching those filters: sends to the two numbers (undelivered,
        delivered, failed), SMS records (read, otp) and OTPs (pending)."""
        k = 0
        while not stop.is_set():
            k += 1
            now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
            psql(big.db_url, REF_SQL + """
INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status)
SELECT '%(t)s', pg_temp.og_ref_at(%(now)s, 'N' || lpad((%(k)d * 10 + j)::text, 15, '0')), to_number, 'new',
       'fallback', '{sms}', status
FROM (VALUES (1, '+62811004321', 'undelivered'), (2, '+62811001111', 'delivered'),
             (3, '+62811001111', 'failed')) v(j, to_number, status);
INSERT INTO otp_requests (tenant_id, reference, to_number, code_hash, length, status, expires_at)
VALUES ('%(t)s', pg_temp.og_ref_at(%(now)s, 'N' || lpad((%(k)d * 10)::text, 15, '0')), '+62813000015', 'h', 6,
        'pending', now());
INSERT INTO sms_records (tenant_id, reference, source, to_number, body, segments, encoding, status, delivery_status)
VALUES ('%(t)s', pg_temp.og_ref_at(%(now)s, 'N' || lpad((%(k)d * 10)::text, 15, '0')), 'otp', '+62812004320', 'x', 1,
        'gsm7', 'sent', 'read');
""" % {"t": TENANT, "k": k, "now": now})
            inserted.append(k)
            time.sleep(0.005)

    th = threading.Thread(target=insert_new, daemon=True)
    th.start()
    try:
        assert wait_for(lambda: len(inserted) >= 2, 10)
        for log, query in filters:
            # What matches at the start: the newest reference then, and the statement's answer
            # to a page of every record at or below it.
            start = psql(big.db_url, "SELECT max(reference) FROM %s" % tables[log]).strip()
            name, params = loglib.page_statement(log, query)
            params[3] = "100000"
            before = [r for r in statement_rows(big, [(name, params)])[0] if r <= start]
            assert 7 < len(before) < 2000, (log, query, len(before))
            seen, cursor, pages = [], None, 0
            while True:
                q = dict(query, limit=7)
                if cursor:
                    q["cursor"] = cursor
                data = page(big, log, q)[1]
                pages += 1
                seen += [i["reference"] for i in data["items"]]
                cursor = data["nextCursor"]
                if cursor is None:
                    break
                assert pages < 1000
            assert seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen), (log, query)
            old = [r for r in seen if r <= start]
            assert old == before, (log, query, len(old), len(before))
            assert all(r > start for r in seen[:len(seen) - len(old)]), (log, query)
    finally:
        stop.set()
        th.join(30)
    assert len(inserted) > 5


# ---- the write path on a database never analyzed --------------------------------------------

WRITE_TABLES = ("messages", "attempts", "sms_records", "otp_requests", "otp_events", "idempotency_keys",
                "delivery_statuses")
# Statements that find their rows some other way than by key: what they may use instead.
NOT_BY_KEY = {"msg_mark_unknown": "messages_pending", "otp_find_to": "otp_requests_tenant_to",
              "prune_idem": None, "steps_due": None, "step_claim": None}


def test_write_path_plans_on_a_never_analyzed_database(fresh_db):
    """On a freshly migrated database (tables empty, never analyzed, as in a new deployment's
    first minute), every statement of sql/queries that touches a record by its key, planned
    generically (the plan a prepared statement keeps), reads that record through the table's
    primary key: none through a log index (which hold the same columns), none by a scan. The
    functions of the write path plan afresh on every call (force_custom_plan), so a plan made
    on the small table cannot outlive it."""
    migrate(fresh_db)
    stmts = []
    for path in sorted(__import__("glob").glob(loglib.ROOT + "/sql/queries/*.sql")):
        name = None
        for line in open(path).read().splitlines():
            m = re.match(r"--\s*name:\s*(\S+)", line)
            if m:
                name = m.group(1)
                stmts.append([name, []])
            elif name and line.strip() and not line.lstrip().startswith("--"):
                stmts[-1][1].append(line)
    script = ["SET plan_cache_mode = force_generic_plan;"]
    for name, body in stmts:
        sql = "\n".join(body).rstrip().rstrip(";")
        n = max([int(x) for x in re.findall(r"\$(\d+)", sql)] or [0])
        script.append("PREPARE %s AS %s;" % (name, sql))
        script.append("\\echo ==== %s" % name)
        script.append("EXPLAIN (FORMAT JSON) EXECUTE %s%s;" % (name, "(%s)" % ", ".join(["NULL"] * n) if n else ""))
    out = psql(fresh_db, "\n".join(script) + "\n")
    bad = []
    for chunk in out.split("==== ")[1:]:
        name, _, body = chunk.partition("\n")
        if name.startswith("logs_"):
            continue  # the log pages: test_every_filter_is_an_index_range_scan_in_order
        plan = json.loads(body)[0]["Plan"]
        nodes = []

        def walk(n):
            nodes.append(n)
            for c in n.get("Plans", []):
                walk(c)
        walk(plan)
        for n in nodes:
            rel = n.get("Relation Name")
            if rel not in WRITE_TABLES or "Scan" not in n["Node Type"]:
                continue
            idx = n.get("Index Name")
            if name in NOT_BY_KEY:
                if NOT_BY_KEY[name] and idx != NOT_BY_KEY[name]:
                    bad.append("%s: %s on %s (%s), not %s" % (name, n["Node Type"], rel, idx, NOT_BY_KEY[name]))
                continue
            if n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan"):
                bad.append("%s: %s on %s" % (name, n["Node Type"], rel))
            elif idx and not idx.endswith("_pkey") and idx != "attempts_provider_message":
                bad.append("%s: %s on %s through %s" % (name, n["Node Type"], rel, idx))
    assert not bad, "\n".join(bad)
    fns = ("og_status_apply", "og_status_recompute", "og_status_sweep", "og_fallback_on_status", "og_fallback_schedule",
           "omnigate_otp_begin", "og_idem_stale")
    rows = query_url(fresh_db, "SELECT proname, coalesce(array_to_string(proconfig, ','), '') FROM pg_proc "
                               "WHERE proname IN (%s)" % ", ".join("'%s'" % f for f in fns))
    assert sorted(r[0] for r in rows) == sorted(fns)
    for fn, config in rows:
        assert "plan_cache_mode=force_custom_plan" in config, fn
