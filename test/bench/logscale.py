"""Logs at scale and plans that do not rot (issue 16), two benchmark scenarios of bench.py.

cold: sends on a database nobody has analyzed. A new database in the bench's cluster, migrated,
autovacuum off on its tables (so no ANALYZE happens behind the run's back), a gateway on it, a
trickle of first sends (two clients, 20 sends each, one at a time: a new deployment's first
minute, when the prepared statements settle on their generic plans), then --cold-duration
seconds (30) of fallback_first's sends; then ANALYZE and the same again. Compared: the send rate of the last 5 s of each run (sampled from the gateway's
/metrics every 0.5 s). Before issue 16 the cold run slowed down as the table grew: its prepared
UPDATE by (tenant_id, reference) kept a generic plan made on the empty table, through another
index than the primary key.

logs_scale: the log pages of a tenant with --logs-messages (10 million) unified sends and their
attempts, SMS records and OTPs, generated in SQL (test/e2e/loglib.py, as test_logs_scale.py
does with a million) in a database of their own. For each filter of each log, 100 pages: the
first and 99 at random cursors across the tenant's time. Database time: EXPLAIN (ANALYZE,
TIMING OFF) of the very prepared statement and parameters the gateway runs (planning plus
execution, as PostgreSQL counts them), in one session with plan_cache_mode auto like the
gateway's; HTTP time: the same pages through a gateway on that database. Reported: p50, p99 and
max of each, and the plan's reads. Target (API.md §16): p99 database time under 100 ms.
"""

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import loglib  # noqa: E402

COLD_DB = "omnigate_cold"
LOGS_DB = "omnigate_logs"
LOG_TABLES = ("messages", "attempts", "sms_records", "otp_requests", "otp_events", "idempotency_keys",
              "delivery_statuses", "steps")


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def psql(url, sql, timeout=3600):
    p = subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1"], input=sql, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("psql: " + p.stderr[-2000:])
    return p.stdout


def db_url(b, name):
    return b.db_url.rsplit("/", 1)[0] + "/" + name


def new_database(b, name):
    b.psql_super("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
    b.psql_super("CREATE DATABASE %s OWNER omnigate" % name)
    url = db_url(b, name)
    subprocess.run([b.args.omnigate, "migrate"], env=b.env({"OMNIGATE_DATABASE_URL": url}), check=True,
                   capture_output=True)
    return url


def sends_ok(metrics_text):
    """Successful POST /api/omni/send answers so far (omnigate_http_requests_total)."""
    n = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("omnigate_http_requests_total{") and 'route="/api/omni/send"' in line \
                and 'status="200"' in line:
            n += float(line.split()[-1])
    return n


def sampled_run(b, bench, name, seconds, note):
    """fallback_first's wrk run for `seconds`, with the answered sends sampled every 0.5 s; the
    result row gets the rate of the last 5 s and the rate per 5 s window."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            try:
                samples.append((time.monotonic(), sends_ok(b.metrics())))
            except OSError:
                pass
            stop.wait(0.5)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    r = b.measure(name, b.og_url("/api/omni/send"), duration=seconds, script=bench.send_script(b, name, "+6281{n}"),
                  note=note)
    stop.set()
    th.join()
    # The last 5 s of wrk's run: samples up to the last one that still grew.
    while len(samples) > 2 and samples[-1][1] == samples[-2][1]:
        samples.pop()
    end_t, end_n = samples[-1]
    first = next(s for s in samples if s[0] >= end_t - 5.0)
    r["last5_rps"] = (end_n - first[1]) / max(end_t - first[0], 1e-9)
    r["windows_rps"] = []
    t0, n0 = samples[0]
    for t, n in samples:
        if t - t0 >= 5.0:
            r["windows_rps"].append(round((n - n0) / (t - t0)))
            t0, n0 = t, n
    log("%s: last 5 s %.0f sends/s; per 5 s: %s" % (name, r["last5_rps"], r["windows_rps"]))
    return r


def trickle(b, bench, n=20, clients=2):
    """A new deployment's first requests: `clients` clients each sending `n` sends one after
    another, so each of the gateway's connections runs its statements the few times after which
    PostgreSQL settles on a generic plan (the sixth) while the tables are still nearly empty."""
    def one(k):
        for i in range(n):
            st, j = bench.http_json("POST", b.og_url("/api/omni/send"), b.tokens[k % len(b.tokens)],
                                    {"to": "+62810%02d%04d" % (k, i), "text": "first"})
            assert st == 200, j
    ths = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()


def cold(b, bench):
    """Fallback sends on a fresh, never analyzed database, then the same after ANALYZE. `bench`
    is the bench.py module (its helpers)."""
    url = new_database(b, COLD_DB)
    for t in LOG_TABLES:
        psql(url, "ALTER TABLE %s SET (autovacuum_enabled = false)" % t)
    saved = (b.tokens, b.tenant_ids, b.status_tenant)
    b.stop_gateway()
    b.start_gateway({"OMNIGATE_DATABASE_URL": url})
    try:
        b.make_tenants()
        trickle(b, bench)
        secs = b.args.cold_duration
        c = sampled_run(b, bench, "cold", secs, "fallback_first on a fresh database, never analyzed, no warm-up, %d s "
                                         "(rate of the last 5 s below)" % secs)
        c["analyzed_before"] = psql(url, "SELECT count(*) FROM pg_stat_user_tables WHERE relname IN ('messages', "
                                         "'attempts') AND (last_autoanalyze IS NOT NULL OR last_analyze IS NOT NULL)"
                                    ).strip()
        psql(url, "ANALYZE")
        trickle(b, bench)
        w = sampled_run(b, bench, "cold_analyzed", secs, "the same %d s run on that database after ANALYZE" % secs)
        c["cold_vs_warm"] = c["last5_rps"] / max(w["last5_rps"], 1e-9)
        c["messages_after"] = int(psql(url, "SELECT count(*) FROM messages").strip())
        log("cold: last 5 s %.0f sends/s vs %.0f after ANALYZE: %.3f (messages then %d; analyzed during the cold "
            "run: %s)" % (c["last5_rps"], w["last5_rps"], c["cold_vs_warm"], c["messages_after"],
                         c["analyzed_before"]))
    finally:
        b.stop_gateway()
        b.tokens, b.tenant_ids, b.status_tenant = saved
        b.start_gateway()


# ---- logs at scale --------------------------------------------------------------------------

def log_cases():
    """(log, query, label) of each filter measured: one value that matches and one that matches
    nothing per filter (loglib.load_sql's distributions), and two combinations."""
    return [("omni", {}, "time"), ("omni", {"to": "+62811001234"}, "to"), ("omni", {"to": loglib.NOBODY}, "to (none)"),
            ("omni", {"status": "failed"}, "status"), ("omni", {"status": "unknown"}, "status (none)"),
            ("omni", {"channel": "sms"}, "channel"), ("omni", {"channel": "whatsapp_meta"}, "channel (none)"),
            ("omni", {"reference": None}, "reference"),
            ("omni", {"status": "undelivered", "channel": "whatsapp_qr"}, "status + channel"),
            ("omni", {"status": "read", "channel": "whatsapp_meta"}, "status + channel (none)"),
            # No failed send went by SMS in the data, and both are common: both indexes are read
            # to the end of the range (docs/logs.md). Five pages only: each reads millions of entries.
            ("omni", {"status": "failed", "channel": "sms"}, "status + channel (disjoint)"),
            ("sms", {}, "time"), ("sms", {"to": "+62811001237"}, "to"), ("sms", {"to": loglib.NOBODY}, "to (none)"),
            ("sms", {"status": "failed"}, "status"), ("sms", {"status": "delivered"}, "status (delivery)"),
            ("sms", {"status": "undelivered"}, "status (none)"), ("sms", {"source": "otp"}, "source"),
            ("otp", {}, "time"), ("otp", {"to": "+62813000015"}, "to"), ("otp", {"to": loglib.NOBODY}, "to (none)"),
            ("otp", {"status": "pending"}, "status"), ("otp", {"status": "locked"}, "status (none)")]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def logs_scale(b, bench):
    """The log pages of a tenant with --logs-messages sends (module docstring)."""
    n = b.args.logs_messages
    url = new_database(b, LOGS_DB)
    end_ms = int(time.time() * 1000) - 120000
    log("logs_scale: loading %d sends (with attempts, SMS records, OTPs) into %s" % (n, LOGS_DB))
    t = time.monotonic()
    psql(url, loglib.load_sql(n, n // 100, end_ms))
    load_s = time.monotonic() - t
    b.psql_super("CHECKPOINT")
    counts = {}
    for t in ("messages", "attempts", "sms_records", "otp_requests"):
        counts[t] = [int(x) for x in psql(url, "SELECT count(*), pg_total_relation_size('%s') FROM %s WHERE tenant_id = "
                                               "'%s'" % (t, t, loglib.TENANT)).strip().split("|")]
    log("logs_scale: loaded in %.0f s; the tenant's rows (and the table's bytes): %s" % (load_s, counts))
    port = bench.free_port()
    gw = b.spawn([b.args.omnigate, "serve", "--listen", "127.0.0.1:%d" % port, "--workers", str(b.args.workers)],
                 b.env({"OMNIGATE_DATABASE_URL": url}), "omnigate-logs")
    base = "http://127.0.0.1:%d" % port
    bench.wait_http(base + "/readyz")
    st, j = bench.http_json("POST", base + "/admin/tenants/%s/tokens" % loglib.TENANT, bench.ADMIN, {})
    assert st == 201, j
    token = j["data"]["token"]
    rng = random.Random(16)
    first_ms = end_ms - (n - 1) * loglib.STEP_MS
    rows = []
    stmts = loglib.statements()
    try:
        for log_, query, label in log_cases():
            queries = []
            for k in range(5 if "disjoint" in label else b.args.logs_queries):
                q = dict(query)
                if "reference" in q:
                    q["reference"] = loglib.send_ref(rng.randint(1, n), n, end_ms)
                if k > 0:
                    q["cursor"] = loglib.ref_at(rng.randint(first_ms, end_ms))
                queries.append(q)
            # Database time: the gateway's statement, prepared once, run for each page.
            script = ["PREPARE %s AS %s;" % (k, v) for k, v in stmts.items()]
            for q in queries:
                name, params = loglib.page_statement(log_, q)
                script += ["\\echo ====", "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, FORMAT JSON) EXECUTE %s(%s);" % (
                    name, ", ".join(loglib.literal(p) for p in params))]
            out = psql(url, "\n".join(script) + "\n")
            db_ms, reads, problems = [], set(), set()
            for chunk in out.split("====\n")[1:]:
                plan = json.loads(chunk)[0]
                db_ms.append(plan["Planning Time"] + plan["Execution Time"])
                reads.update(loglib.leading_index(plan)[:2])
                problems.update(loglib.plan_problems(plan))
            # HTTP time through the gateway.
            http_ms, items = [], 0
            for q in queries:
                t = time.monotonic()
                req = urllib.request.Request(base + loglib.PATHS[log_] + "?" + urllib.parse.urlencode(q),
                                             headers={"Authorization": "Bearer " + token})
                with urllib.request.urlopen(req, timeout=60) as r:
                    body = json.loads(r.read())
                http_ms.append((time.monotonic() - t) * 1000)
                items += len(body["data"]["items"])
            row = {"log": log_, "filter": label, "query": query, "statement": loglib.page_statement(log_, queries[0])[0],
                   "pages": len(queries),
                   "reads": sorted(reads), "problems": sorted(problems), "items_per_page": items / len(queries),
                   "db_p50_ms": statistics.median(db_ms), "db_p99_ms": pct(db_ms, 99), "db_max_ms": max(db_ms),
                   "http_p50_ms": statistics.median(http_ms), "http_p99_ms": pct(http_ms, 99),
                   "http_max_ms": max(http_ms)}
            rows.append(row)
            log("logs_scale: %s %-24s db p50 %.2f p99 %.2f max %.2f ms; http p50 %.2f p99 %.2f ms; %.1f items/page; "
                "%s%s" % (log_, label, row["db_p50_ms"], row["db_p99_ms"], row["db_max_ms"], row["http_p50_ms"],
                          row["http_p99_ms"], row["items_per_page"], ",".join(row["reads"]),
                          " PROBLEMS: %s" % row["problems"] if problems else ""))
    finally:
        b.stop(gw)
        b.procs.remove(gw)
    b.results.append({"scenario": "logs_scale", "note": "log pages of a tenant with %d sends" % n, "conns": 1,
                      "rps": 0, "requests": 0, "errors": 0, "non2xx": 0, "expect_errors": False,
                      "p50_ms": float("nan"), "p90_ms": float("nan"), "p99_ms": float("nan"),
                      "cpu_us_per_req": float("nan"), "pg_cpu_us_per_req": float("nan"), "rss_kib": 0,
                      "logs": {"messages": n, "load_s": load_s, "queries": b.args.logs_queries, "rows": rows,
                               "counts": counts}})


def report(b):
    """The bench.md sections of these scenarios."""
    by = {r["scenario"]: r for r in b.results}
    lines = []
    if "cold" in by and "cold_analyzed" in by:
        c, w = by["cold"], by["cold_analyzed"]
        lines += ["", "## Plans that do not rot (cold database)", "",
                  "`cold`: a new database in the same cluster, migrated, autovacuum off on its tables, no warm-up and "
                  "no ANALYZE; the gateway restarted on it with fresh tenants; fallback_first's wrk run for %d s. "
                  "`cold_analyzed`: ANALYZE, then the same run again on that database. Rates of answered sends from "
                  "`omnigate_http_requests_total`, sampled every 0.5 s; the tables were analyzed during the cold run: "
                  "%s (0 = never)." % (c["duration_s"], c["analyzed_before"]), "",
                  "| run | sends/s (wrk) | last 5 s sends/s | per 5 s window | p99 ms |", "|---|---:|---:|---|---:|"]
        for r in (c, w):
            lines.append("| %s | %.0f | %.0f | %s | %.2f |" % (r["scenario"], r["rps"], r["last5_rps"],
                                                              ", ".join(str(x) for x in r["windows_rps"]), r["p99_ms"]))
        lines += ["", "Cold / analyzed, last 5 s: **%.3f** (target >= 0.90); %d messages in the cold database at "
                  "the end." % (c["cold_vs_warm"], c["messages_after"])]
    if "logs_scale" in by:
        d = by["logs_scale"]["logs"]
        lines += ["", "## Log pages at scale", "",
                  "`logs_scale`: one tenant with %s unified sends (one every %d ms, with %s attempts, %s SMS records "
                  "and %s OTPs; test/e2e/loglib.py, loaded in %.0f s; %.1f GB in those four tables), 1%% as many of "
                  "another tenant. Per filter, "
                  "%d pages of 50: the first and the rest at random cursors over the tenant's time. Database time = "
                  "planning + execution of the gateway's prepared statement with its parameters (EXPLAIN ANALYZE, "
                  "TIMING OFF, plan_cache_mode auto); HTTP = the same pages through a gateway on that database, "
                  "from this process. `(none)`: a value nothing matches." % (
                      "{:,}".format(d["messages"]), loglib.STEP_MS, "{:,}".format(d["counts"]["attempts"][0]),
                      "{:,}".format(d["counts"]["sms_records"][0]), "{:,}".format(d["counts"]["otp_requests"][0]),
                      d["load_s"], sum(v[1] for v in d["counts"].values()) / 1e9, d["queries"]), "",
                  "| log | filter | statement | reads | pages | items/page | db p50 ms | db p99 ms | db max ms "
                  "| HTTP p50 ms | HTTP p99 ms | p99 db < 100 ms |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in d["rows"]:
            lines.append("| %s | %s | %s | %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |" % (
                r["log"], r["filter"], r["statement"], ", ".join(r["reads"]), r.get("pages", d["queries"]),
                r["items_per_page"], r["db_p50_ms"],
                r["db_p99_ms"], r["db_max_ms"], r["http_p50_ms"], r["http_p99_ms"],
                "yes" if r["db_p99_ms"] < 100 and not r["problems"] else "**no**"))
    return lines


def targets(b):
    by = {r["scenario"]: r for r in b.results}
    out = []
    if "cold" in by and "cold_vs_warm" in by["cold"]:
        v = by["cold"]["cold_vs_warm"]
        out.append(("fallback sends/s on a never-analyzed database / after ANALYZE (last 5 s of %d s)" %
                    by["cold"]["duration_s"], "%.3f" % v, ">= 0.90", v >= 0.9))
    if "logs_scale" in by:
        d = by["logs_scale"]["logs"]
        worst = max((r for r in d["rows"] if "+" not in r["filter"]), key=lambda r: r["db_p99_ms"])
        out.append(("log page database time p99, worst single filter (%s %s), %s sends" % (
            worst["log"], worst["filter"], "{:,}".format(d["messages"])), "%.1f ms" % worst["db_p99_ms"], "< 100 ms",
            worst["db_p99_ms"] < 100))
    return out
