"""Queued, scheduled and paced delivery (issue 31, API.md §19): four benchmark scenarios of
bench.py and a diagnostic, each with its figures as ratios to a reference measured in the same run, each on
tenants of its own (made here; the send tenants' settings are never changed) and leaving
nothing queued behind it.

queue_drain (unpaced): 4 tenants whose Meta number and SMS sender are set to 100,000
messages/s. Reference first: fallback_first's wrk run (same script, connections and duration:
default channels, whatsapp_qr succeeds) and the same with the queued sends' channels
(whatsapp_meta, sms) without `queue`. Then a VACUUM ANALYZE and CHECKPOINT (fresh statistics,
as autovacuum keeps them; which join the claim statement would get is reported; with
--queue-cold none: the cold case), and --queue-messages (20,000) queued sends
(`"queue": true` with one `sendAt` a few seconds ahead, so they are all `scheduled` when
accepted and become due together) posted by wrk over --conns connections, stopping at the
count (accept phase: 202s/s, PostgreSQL and gateway CPU); then from their sendAt until every
one is completed in the database (no longer scheduled, queued or pending), timed to the latest
completed_at the database recorded, not to the 0.1 s poll that saw it (drain phase: claim,
provider call, completion). Then both references again; each reference is the mean of its two
runs. Figures: drained messages/s / sync sends/s (target >= 0.8), and PostgreSQL CPU per queued
message (accept + drain) / per sync send (target <= 1.3); also per phase, write batches,
operations and WAL bytes per message, and the claim lag (omnigate_queue_lag_seconds).

queue_pacing: --pacing-instances (3) gateway instances on the one database (the bench's own and
more started here, same configuration, each `--workers` as given), one tenant whose SMS sender
ACME is set to --pacing-rate (50) messages/s, the simulator limiting ACME at the same rate
(`PUT /__sim/limits`, burst its default: one second of the rate). --pacing-messages (5,000)
queued SMS sends posted round-robin to the instances; then, from the simulator's recorded
requests (receivedAt), every full 10 s window from the first call: each within 10% of
10 x rate (target), and the simulator's `throttled` count for ACME (target 0). Also any 10 s
window (sliding), the achieved rate by the simulator's formula, and each instance's releases.

queue_priority: one tenant whose Meta number is set to --priority-rate (1,000) messages/s; a
real queued `low` send through HTTP makes its sender row, then --priority-backlog (100,000)
`low` messages are generated in SQL by copying that accepted message row (messages) and
writing the queue entries as og_queue_insert_many does (one per message, its first channel, behind
that sender, due now, oldest first), then og_queue_wake_sender. The release drains them at the
sender's rate meanwhile. Then 5 `high` queued sends through the real HTTP path, 1.5 s apart:
for each, attemptedAt (GET /api/omni/messages/{reference}) minus its createdAt (both
PostgreSQL's clock; target < 1 s) and the simulator's receivedAt of its call minus the time the
bench posted it, and how many `low` entries were still waiting. The backlog is then canceled
in SQL as og_queue_cancel would (entries deleted, messages `canceled`).

queue_scale: (1) the claim's cost against backlogs of --scale-sizes (1,000, 100,000 and
1,000,000) messages of one sender (rate 100,000/s, so every claim takes its OG_QUEUE_CLAIM_MAX), in a database
of its own in the same cluster (migrated, no gateway on it; dropped afterwards), the backlog
generated in SQL as in queue_priority and grown from one size to the next, VACUUM ANALYZE
after each growth (what autovacuum does after it). Per size, 12 claims (fewer when the smallest
size cannot hold 14 of OG_QUEUE_CLAIM_MAX: 5 of 128 at 1,000) timed from psql
(`\\timing`: the gateway's very queue_claim statement prepared and executed with its
parameters, read from release.h, autocommit as the gateway's write), the buffers one
claim touches and its join (EXPLAIN (ANALYZE, BUFFERS) EXECUTE), and EXPLAIN ANALYZE of the
claim's inner statements (the senders due, a page of entries, the next due time, the expired
leases); then, topped up to the size again, the same with the statement's join planned as
the planner plans it while messages is small and kept as a cached generic plan, as a gateway
connection keeps its plan until messages is analyzed again (a hash join reading all of
messages: og_queue_claim's rows are estimated at 1,000, PL/pgSQL's default). Target: flat (the
slowest size's median within 1.5 x the smallest's, no scan of queue_entries). (2) sync send
p99 (fallback_first's wrk run) alone, while a --scale-backlog (100,000) message backlog of
another tenant drains at each of --scale-rates (1,000 and Meta's default 80 messages/s, one run
and one backlog each), and alone again, after a warm-up run
of the same (not recorded: the first ANALYZE must not see empty tables), each run right after
a VACUUM ANALYZE and CHECKPOINT: during / mean of the two alone (target <= 1.5).

queue_statements (a diagnostic, no target): where PostgreSQL's time goes. The cluster is
restarted with pg_stat_statements (track = all, so PL/pgSQL's statements are listed too), a
warm-up run of fallback_first's sends and a VACUUM ANALYZE, then per phase (fallback_first's
sends for --duration s; up to 10,000 queued accepts; their drain) the statements by total
execution time with their calls per message; the cluster is restarted without it afterwards.

The file is named queue.py, as the benchmark's scenario files are named after what they
measure; it shadows the standard library's `queue` module for the scripts of test/bench
(bench.py imports it as queue_bench), none of which uses that module.
"""

import copy
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

import logscale
import steps


def gateway_constant(name):
    """A number the gateway's release is built with (include/product/omnigate/queue/release.h), so
    that the claims timed here take what the gateway's take."""
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "product", "omnigate",
                     "queue", "release.h")
    with open(h) as f:
        return int(re.search(r"#define %s\s+(\d+)" % name, f.read()).group(1))


CLAIM_MAX = gateway_constant("OG_QUEUE_CLAIM_MAX")
CLAIM_SENDERS = gateway_constant("OG_QUEUE_CLAIM_SENDERS")
META_NUMBER = "6281234567890"
META_ID = "109876543210"
TEXT = "Your order has shipped"
SCALE_DB = "omnigate_queue_scale"
DONE = "('sent', 'delivered', 'read', 'undelivered')"
WAITING = "('queued', 'scheduled', 'pending')"


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def iso_ms(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


def parse_iso(s):
    """'YYYY-MM-DDTHH:MM:SS.mmmZ' (the API's times) in seconds since the epoch."""
    import calendar
    base, frac = s.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1000.0


def rate_settings(b, meta_mps=None, sms_mps=None):
    """The bench tenants' settings with the Meta number's and the SMS sender ACME's rates."""
    s = copy.deepcopy(b.settings)
    if meta_mps is not None:
        s["channels"]["whatsapp_meta"]["numbers"][META_NUMBER]["messagesPerSecond"] = meta_mps
    if sms_mps is not None:
        s["channels"]["sms"]["messagesPerSecond"] = {"ACME": sms_mps}
    return s


def make_tenant(b, bench, name, settings):
    st, j = bench.http_json("POST", b.og_url("/admin/tenants"), bench.ADMIN,
                            {"name": name, "unifiedApiEnabled": True, "settings": settings})
    assert st == 201, j
    tid = j["data"]["id"]
    st, t = bench.http_json("POST", b.og_url("/admin/tenants/%s/tokens" % tid), bench.ADMIN, {})
    assert st == 201, t
    return tid, t["data"]["token"]


def in_list(ids):
    return ", ".join("'%s'" % t for t in ids)


def pg_ticks(b, bench):
    return bench.cpu_ticks(b.pg_pid)


def us_per(ticks, n, bench):
    return ticks * 1e6 / bench.CLK_TCK / max(n, 1)


# ---- wrk stopping at a count ------------------------------------------------------------------

def counted_lua(b, name, body, tokens, per_thread, marker):
    """A wrk script like bench.lua's (tokens round-robin, {n} a per-request number) whose threads
    each stop after `per_thread` answers, writing `marker`<thread> as they do."""
    p = os.path.join(b.tmp, name + ".lua")
    toks = ", ".join('"%s"' % t for t in tokens)
    with open(p, "w") as f:
        f.write("""
local tokens = { %s }
local body = [[%s]]
local counter = 0
local answered = 0
thread_id = 0
local ids = 0
function setup(thread) ids = ids + 1; thread:set("thread_id", ids) end
function request()
  counter = counter + 1
  local h = { }
  h["Authorization"] = "Bearer " .. tokens[(counter %% #tokens) + 1]
  h["Content-Type"] = "application/json"
  local b = string.gsub(body, "{n}", string.format("%%d%%05d", thread_id, counter %% 100000))
  return wrk.format("POST", "/api/omni/send", h, b)
end
function response(status, headers, body)
  answered = answered + 1
  if answered == %d then
    local f = io.open("%s" .. thread_id, "w"); f:write("done"); f:close()
    wrk.thread:stop()
  end
end
""" % (toks, body, per_thread, marker))
    return p


def wrk_count(b, bench, name, body, tokens, count, conns, threads=2):
    """Posts about `count` requests with wrk over `conns` connections and stops when each thread
    has had its share answered (wrk runs for a time: the script stops its threads, and wrk,
    which would sleep out its duration, is interrupted once every thread wrote its marker).
    Returns wrk's figures with the wall time from start to the last answer counted."""
    marker = os.path.join(b.tmp, name + ".done.")
    per = (count + threads - 1) // threads
    script = counted_lua(b, name, body, tokens, per, marker)
    argv = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d300s", "--latency", "--timeout", "10s", "-s", script,
            b.og_url("/api/omni/send")]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while p.poll() is None:
        if all(os.path.exists(marker + str(i)) for i in range(1, threads + 1)):
            break
        time.sleep(0.005)
    wall = time.monotonic() - t0
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    out, _ = p.communicate()
    r = bench.parse_wrk(out)
    r["wall_s"] = wall
    m = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out)
    r["max_ms"] = bench.to_ms(m.group(1)) if m else float("nan")
    return r


# ---- queue_drain --------------------------------------------------------------------------------

def sc_drain(b, bench):
    n = b.args.queue_messages
    ids, tokens = [], []
    for i in range(4):
        t, k = make_tenant(b, bench, "bench-q-drain-%d" % i, rate_settings(b, meta_mps=100000, sms_mps=100000))
        ids.append(t)
        tokens.append(k)
    url = b.og_url("/api/omni/send")
    ff_body = json.dumps({"to": "+6281{n}", "text": TEXT, "deliveryMode": "fallback"})
    meta_body = json.dumps({"to": "+6285{n}", "text": TEXT, "channels": ["whatsapp_meta", "sms"]})
    ff_script = b.lua("qd_ff", "POST", "/api/omni/send", [ff_body], tokens)
    meta_script = b.lua("qd_meta", "POST", "/api/omni/send", [meta_body], tokens)

    def refs(tag):
        lsn = bench.wal_lsn(b)
        ff = b.measure("queue_drain_sync_ff" + tag, url, script=ff_script,
                       note="reference: fallback_first's sends (whatsapp_qr wins), the drain tenants")
        ff["wal_bytes_per_req"] = bench.wal_since(b, lsn) / max(ff["requests"], 1)
        meta = b.measure("queue_drain_sync_meta" + tag, url, script=meta_script,
                         note="reference: the queued sends' body without queue (whatsapp_meta wins)")
        return ff, meta

    ff1, meta1 = refs("")
    # Fresh statistics for the queued phases (as autovacuum keeps them in a running deployment),
    # unless --queue-cold: the cold case, measured without any manual step.
    if not b.args.queue_cold:
        bench.settle(b)
    claim_join = claim_plan(b.psql)

    # Accept: every send scheduled for one sendAt, far enough ahead for the accepts to finish
    # first (a quarter of the sync rate, at least; the drain starts at that time in any case).
    margin = 2.0 + n / max(0.25 * ff1["rps"], 500.0)
    due = time.time() + margin
    body = json.dumps({"to": "+6285{n}", "text": TEXT, "channels": ["whatsapp_meta", "sms"], "queue": True,
                       "sendAt": iso_ms(due)})
    log("queue_drain: %d queued sends (sendAt in %.1f s) over %d connections" % (n, margin, b.args.conns))
    mine = "tenant_id IN (%s) AND status = 'scheduled'" % in_list(ids)
    lsn, m0 = bench.wal_lsn(b), b.metrics()
    roles = bench.RoleCpu(b.pg_pid)
    r0 = roles.snapshot()
    g0, p0 = bench.cpu_ticks(b.og.pid), pg_ticks(b, bench)
    acc = wrk_count(b, bench, "qd_accept", body, tokens, n, b.args.conns)
    g1, p1 = bench.cpu_ticks(b.og.pid), pg_ticks(b, bench)
    r1 = roles.snapshot()
    m1 = b.metrics()
    wal_accept = bench.wal_since(b, lsn)
    accepted_at = time.time()
    time.sleep(0.3)  # the accepts wrk stopped waiting for commit all the same
    accepted = int(b.psql("SELECT count(*) FROM messages WHERE " + mine))
    overlap = accepted_at > due
    log("queue_drain: %d accepted (%d answered by wrk, %d non-2xx) in %.2f s = %.0f/s, p99 %.1f ms; PostgreSQL %.1f "
        "us, gateway %.1f us per accept%s" % (accepted, acc["requests"], acc["non2xx"], acc["wall_s"],
                                             accepted / acc["wall_s"], acc["p99_ms"],
                                             us_per(p1 - p0, accepted, bench), us_per(g1 - g0, accepted, bench),
                                             "; ACCEPTS RAN PAST sendAt" if overlap else ""))

    # Drain: from sendAt until none is scheduled, queued or pending. The simulator's count of
    # Meta calls is sampled (cheap), the database asked only once they all arrived.
    sim0 = b.sim_stats()["channels"]["whatsapp_meta"]["requests"]
    while time.time() < due - 0.05:
        time.sleep(0.01)
    lsn2, m2 = bench.wal_lsn(b), b.metrics()
    g2, p2 = bench.cpu_ticks(b.og.pid), pg_ticks(b, bench)
    r2 = roles.snapshot()
    while time.time() < due:
        time.sleep(0.001)
    t0 = time.monotonic()
    samples, done_at, last_move = [(0.0, 0)], None, t0
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        c = b.sim_stats()["channels"]["whatsapp_meta"]["requests"] - sim0
        if c != samples[-1][1]:
            last_move = now
        samples.append((now - t0, c))
        if c >= accepted:
            left = int(b.psql("SELECT count(*) FROM messages WHERE tenant_id IN (%s) AND status IN %s" % (
                in_list(ids), WAITING)))
            if left == 0:
                done_at = time.monotonic() - t0
                break
        if now - last_move > 30:
            log("queue_drain: nothing released for 30 s; giving up")
            break
    g3, p3 = bench.cpu_ticks(b.og.pid), pg_ticks(b, bench)
    r3 = roles.snapshot()
    roles.close()
    m3 = b.metrics()
    wal_drain = bench.wal_since(b, lsn2)
    # The drain's end is the last completion the database recorded (completed_at, the same
    # clock as sendAt), not when this loop's 0.1 s polling noticed it.
    last_done = b.psql("SELECT extract(epoch FROM max(completed_at)) FROM messages WHERE tenant_id IN (%s) AND "
                       "priority IS NOT NULL AND to_number LIKE '+6285%%'" % in_list(ids))
    elapsed = (float(last_done) - due if done_at is not None and last_done
               else (done_at if done_at is not None else samples[-1][0]))
    first = next((t for t, c in samples if c > 0), float("nan"))
    states = dict((k, int(v)) for k, v in (row.split("|") for row in b.psql(
        "SELECT status, count(*) FROM messages WHERE tenant_id IN (%s) AND to_number LIKE '+6285%%' AND "
        "priority IS NOT NULL GROUP BY status" % in_list(ids)).splitlines() if row))
    one_attempt = int(b.psql(
        "SELECT count(*) FROM messages m WHERE m.tenant_id IN (%s) AND m.priority IS NOT NULL AND (SELECT count(*) "
        "FROM attempts a WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference AND a.status = 'sent') = 1"
        % in_list(ids)))
    entries_left = int(b.psql("SELECT count(*) FROM queue_entries WHERE tenant_id IN (%s)" % in_list(ids)))
    now_d = drain_now(b, bench, ids, tokens, n)
    ff2, meta2 = refs("2")

    ff_rps = (ff1["rps"] + ff2["rps"]) / 2
    meta_rps = (meta1["rps"] + meta2["rps"]) / 2
    ff_pg = (ff1["pg_cpu_us_per_req"] + ff2["pg_cpu_us_per_req"]) / 2
    meta_pg = (meta1["pg_cpu_us_per_req"] + meta2["pg_cpu_us_per_req"]) / 2
    ff_gw = (ff1["cpu_us_per_req"] + ff2["cpu_us_per_req"]) / 2
    ff_wal = (ff1["wal_bytes_per_req"] + ff2["wal_bytes_per_req"]) / 2
    meta_gw = (meta1["cpu_us_per_req"] + meta2["cpu_us_per_req"]) / 2
    per_s = accepted / max(elapsed, 1e-9)
    pg_accept, pg_drain = us_per(p1 - p0, accepted, bench), us_per(p3 - p2, accepted, bench)
    gw_accept, gw_drain = us_per(g1 - g0, accepted, bench), us_per(g3 - g2, accepted, bench)
    ba, bd = bench.batch_sums(m0), bench.batch_sums(m1)
    bd0, bd1 = bench.batch_sums(m2), bench.batch_sums(m3)
    lag = steps.histogram_delta(steps.histogram(m2, "omnigate_queue_lag_seconds"),
                                steps.histogram(m3, "omnigate_queue_lag_seconds"))
    d = {"messages": n, "accepted": accepted, "accept_wall_s": acc["wall_s"], "accept_per_s": accepted / acc["wall_s"],
         "accept_p50_ms": acc["p50_ms"], "accept_p99_ms": acc["p99_ms"], "accept_non2xx": acc["non2xx"],
         "accept_errors": acc["errors"], "overlap": overlap, "margin_s": margin,
         "accept_retries": int(steps.metric(m1, "omnigate_db_batch_retries_total")
                               - steps.metric(m0, "omnigate_db_batch_retries_total")),
         "accept_max_ms": acc.get("max_ms", float("nan")),
         "drain_s": elapsed, "complete": done_at is not None, "drain_per_s": per_s,
         "first_call_s": first, "peak_per_s": steps.peak_rate(samples),
         "calls_per_s": accepted / max(samples[-1][0] - first, 1e-9) if first == first else float("nan"),
         "states": states, "one_sent_attempt": one_attempt, "entries_left": entries_left,
         "pg_us_accept": pg_accept, "pg_us_drain": pg_drain, "pg_us": pg_accept + pg_drain,
         "gw_us_accept": gw_accept, "gw_us_drain": gw_drain, "gw_us": gw_accept + gw_drain,
         "wal_accept": wal_accept / max(accepted, 1), "wal_drain": wal_drain / max(accepted, 1),
         "batches_accept": (bd[0] - ba[0]) / max(accepted, 1), "ops_accept": (bd[1] - ba[1]) / max(accepted, 1),
         "batches_drain": (bd1[0] - bd0[0]) / max(accepted, 1), "ops_drain": (bd1[1] - bd0[1]) / max(accepted, 1),
         # PostgreSQL's CPU per message by process role (bench.RoleCpu): the accepts, the drain.
         "pg_roles": {"accept": bench.role_us(r0, r1, accepted), "drain": bench.role_us(r2, r3, accepted)},
         "claim_lag": lag, "ff_rps": ff_rps, "meta_rps": meta_rps, "ff_pg_us": ff_pg, "meta_pg_us": meta_pg,
         "ff_gw_us": ff_gw, "meta_gw_us": meta_gw,
         "ff_wal": ff_wal, "claim_join": claim_join,
         "runs": {"ff": [ff1["rps"], ff2["rps"]], "meta": [meta1["rps"], meta2["rps"]]}}
    d["ratio_ff"] = per_s / max(ff_rps, 1e-9)
    d["ratio_meta"] = per_s / max(meta_rps, 1e-9)
    d["pg_ratio_ff"] = d["pg_us"] / max(ff_pg, 1e-9)
    d["pg_ratio_meta"] = d["pg_us"] / max(meta_pg, 1e-9)
    d["now"] = now_d
    d["pg_ratio_now_ff"] = now_d["pg_us"] / max(ff_pg, 1e-9)
    d["ok"] = (d["complete"] and entries_left == 0 and one_attempt == accepted
               and set(states) <= {"sent", "delivered", "read"} and now_d["complete"])
    log("queue_drain: PostgreSQL us per scheduled message by process role: %s" % json.dumps(d["pg_roles"]))
    log("queue_drain: due now: %d queued sends accepted and drained together in %.2f s (%.0f/s); PostgreSQL %.1f us "
        "per queued message vs %.1f per sync send = %.3f" % (now_d["accepted"], now_d["wall_s"], now_d["per_s"],
                                                              now_d["pg_us"], ff_pg, d["pg_ratio_now_ff"]))
    log("queue_drain: %d drained in %.2f s from sendAt = %.0f/s (first call at %.2f s, best 1 s %.0f/s); vs sync "
        "%.0f/s (fallback_first) = %.3f, %.0f/s (same channels) = %.3f; PostgreSQL %.1f us per queued message "
        "(accept %.1f + drain %.1f) vs %.1f per sync send = %.3f (same channels %.1f = %.3f); %s" % (
            accepted, elapsed, per_s, first, d["peak_per_s"], ff_rps, d["ratio_ff"], meta_rps, d["ratio_meta"],
            d["pg_us"], pg_accept, pg_drain, ff_pg, d["pg_ratio_ff"], meta_pg, d["pg_ratio_meta"],
            "verified" if d["ok"] else "NOT VERIFIED: %s, %d with one sent attempt, %d entries left" % (
                json.dumps(states), one_attempt, entries_left)))
    b.results.append({"scenario": "queue_drain", "note": "%d queued (one sendAt), drained unpaced (req = one "
                      "message; CPU = accept + drain)" % accepted, "conns": b.args.conns, "duration_s": elapsed,
                      "rps": per_s, "requests": accepted, "errors": acc["errors"], "non2xx": acc["non2xx"],
                      "expect_errors": False, "p50_ms": acc["p50_ms"], "p90_ms": acc["p90_ms"],
                      "p99_ms": acc["p99_ms"], "cpu_us_per_req": d["gw_us"], "pg_cpu_us_per_req": d["pg_us"],
                      "rss_kib": bench.rss_kib(b.og.pid), "queue_drain": d})


# ---- queue_pacing -------------------------------------------------------------------------------

def drain_now(b, bench, ids, tokens, n):
    """queue_drain's second case: queued sends due now (no sendAt, so never 'scheduled'), the
    common queued send, accepted by wrk while the release drains them, as in production: the
    PostgreSQL CPU from the first accept until the last of them is completed, per message (the
    bench's own counting queries taken out)."""
    body = json.dumps({"to": "+6286{n}", "text": TEXT, "channels": ["whatsapp_meta", "sms"], "queue": True})
    where = "tenant_id IN (%s) AND to_number LIKE '+6286%%'" % in_list(ids)
    log("queue_drain: %d queued sends due now over %d connections, drained meanwhile" % (n, b.args.conns))
    own = [0]

    def count(sql):
        q0 = pg_ticks(b, bench)
        v = int(b.psql(sql))
        own[0] += pg_ticks(b, bench) - q0
        return v
    sim0 = b.sim_stats()["channels"]["whatsapp_meta"]["requests"]
    p0 = pg_ticks(b, bench)
    acc = wrk_count(b, bench, "qd_now", body, tokens, n, b.args.conns)
    # Done when the simulator has had at least the calls of the sends wrk saw answered (it polls
    # cheaply) and the database has none of them waiting (accepts wrk stopped waiting for count
    # too: they are queued, or already done, by then).
    complete, end = False, time.monotonic() + 120
    while time.monotonic() < end:
        if (b.sim_stats()["channels"]["whatsapp_meta"]["requests"] - sim0 >= acc["requests"]
                and count("SELECT count(*) FROM messages WHERE %s AND status IN %s" % (where, WAITING)) == 0):
            complete = True
            break
        time.sleep(0.05)
    p1 = pg_ticks(b, bench)
    accepted = count("SELECT count(*) FROM messages WHERE " + where)
    last = float(b.psql("SELECT extract(epoch FROM max(completed_at) - min(created_at)) FROM messages WHERE " + where)
                 or "nan")
    return {"accepted": accepted, "answered": acc["requests"], "complete": complete, "wall_s": last,
            "per_s": accepted / max(last, 1e-9), "pg_us": us_per(p1 - p0 - own[0], accepted, bench)}


def start_instance(b, bench, i):
    """Another gateway instance on the bench's database (same configuration, its own port)."""
    port = bench.free_port()
    argv = [b.args.omnigate, "serve", "--listen", "127.0.0.1:%d" % port, "--workers", str(b.args.workers)]
    p = b.spawn(argv, b.env(), "omnigate-%d" % i)
    bench.wait_http("http://127.0.0.1:%d/readyz" % port)
    return p, port


def metrics_of(port):
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def post_queued(ports, token, bodies, conns):
    """Posts `bodies` round-robin over `ports`, `conns` keep-alive connections (threads), each
    posting its next when the last is answered. Returns (statuses by code, errors, wall s)."""
    lock = threading.Lock()
    nxt = [0]
    got = {}
    errors = [0]

    def loop(port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                if nxt[0] >= len(bodies):
                    break
                i = nxt[0]
                nxt[0] += 1
            try:
                conn.request("POST", "/api/omni/send", bodies[i], {"Content-Type": "application/json",
                                                                   "Authorization": "Bearer " + token})
                r = conn.getresponse()
                r.read()
                with lock:
                    got[r.status] = got.get(r.status, 0) + 1
            except Exception:
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()
    t0 = time.monotonic()
    threads = [threading.Thread(target=loop, args=(ports[i % len(ports)],), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors[0], time.monotonic() - t0


def windows(ts_ms, width_ms=10000):
    """Counts of the fixed windows [first + k*width, first + (k+1)*width) that end by the last
    call, what is left after them, and the min and max count of any window of that width
    starting at a call and ending by the last call (sliding)."""
    if not ts_ms:
        return [], 0, 0, 0
    first, last = ts_ms[0], ts_ms[-1]
    fixed, k, j = [], 0, 0
    while first + (k + 1) * width_ms <= last:
        lo, hi = first + k * width_ms, first + (k + 1) * width_ms
        fixed.append(sum(1 for t in ts_ms if lo <= t < hi))
        k += 1
    rest = sum(1 for t in ts_ms if t >= first + k * width_ms)
    lo_c, hi_c = None, 0
    for i, t in enumerate(ts_ms):
        if t + width_ms > last:
            break
        while j < len(ts_ms) and ts_ms[j] < t + width_ms:
            j += 1
        c = j - i
        lo_c = c if lo_c is None else min(lo_c, c)
        hi_c = max(hi_c, c)
    return fixed, rest, lo_c or 0, hi_c


def sc_pacing(b, bench):
    n, rate, inst = b.args.pacing_messages, b.args.pacing_rate, b.args.pacing_instances
    tid, token = make_tenant(b, bench, "bench-q-pacing", rate_settings(b, sms_mps=rate))
    bench.http_json("DELETE", b.sim_url("/__sim/limits"))
    st, j = bench.http_json("PUT", b.sim_url("/__sim/limits"), body={"channel": "sms", "sender": "ACME",
                                                                       "perSecond": rate})
    assert st in (200, 201), j
    burst = j["data"]["burst"]
    extra = [start_instance(b, bench, i + 2) for i in range(inst - 1)]
    ports = [b.og_port] + [port for _, port in extra]
    bench.http_json("DELETE", b.sim_url("/__sim/requests"))
    rel0 = [steps.metric(metrics_of(p), "omnigate_queue_released_total", 'channel="sms"') for p in ports]
    procs = [b.og.pid] + [p.pid for p, _ in extra]
    g0 = [bench.cpu_ticks(p) for p in procs]
    p0 = pg_ticks(b, bench)
    bodies = [json.dumps({"to": "+6286%07d" % i, "text": TEXT, "channels": ["sms"], "queue": True}).encode()
              for i in range(n)]
    log("queue_pacing: %d instances, SMS sender ACME at %g/s (simulator limit %g/s, burst %g); %d queued sends" % (
        inst, rate, rate, burst, n))
    t0 = time.monotonic()
    got, errors, post_s = post_queued(ports, token, bodies, 4 * inst)
    log("queue_pacing: posted in %.2f s: %s, %d errors" % (post_s, json.dumps(got), errors))
    accepted = got.get(202, 0)
    deadline = t0 + accepted / rate * 1.5 + 30

    def lim():
        st, j = bench.http_json("GET", b.sim_url("/__sim/limits"))
        return next(x for x in j["data"]["items"] if x["channel"] == "sms" and x["sender"] == "ACME")
    while time.monotonic() < deadline:
        x = lim()
        if x["accepted"] + x["throttled"] >= accepted:
            break
        time.sleep(1)
    time.sleep(0.5)
    wall = time.monotonic() - t0
    g1 = [bench.cpu_ticks(p) for p in procs]
    p1 = pg_ticks(b, bench)
    x = lim()
    st, reqs = bench.http_json("GET", b.sim_url("/__sim/requests?channel=sms"))
    ts = sorted(r["receivedAt"] for r in reqs["data"]["items"] if (r.get("to") or "").startswith("+6286"))
    rel1 = [steps.metric(metrics_of(p), "omnigate_queue_released_total", 'channel="sms"') for p in ports]
    fixed, rest, slo, shi = windows(ts)
    want = 10 * rate
    bucket = x["buckets"][0] if x.get("buckets") else {}
    achieved = ((x["acceptedTokens"] - x["burst"]) / ((bucket["lastAcceptedAt"] - bucket["firstAcceptedAt"]) / 1000.0)
                if bucket.get("lastAcceptedAt") and bucket["lastAcceptedAt"] > bucket["firstAcceptedAt"]
                else float("nan"))
    row = b.psql("SELECT count(*) FILTER (WHERE m.status IN %s), count(*) FILTER (WHERE m.status IN %s), "
                 "coalesce(sum((SELECT sum(a.throttles) FROM attempts a WHERE a.tenant_id = m.tenant_id AND "
                 "a.reference = m.reference)), 0) FROM messages m WHERE m.tenant_id = '%s'" % (DONE, WAITING, tid))
    sent, waiting, throttles = (int(v) for v in row.split("|"))
    for p, _ in extra:
        b.stop(p)
        b.procs.remove(p)
    bench.http_json("DELETE", b.sim_url("/__sim/limits"))
    d = {"messages": n, "accepted": accepted, "post_s": post_s, "post_errors": errors, "answers": got,
         "instances": inst, "workers": b.args.workers, "rate": rate, "sim_burst": burst, "calls": len(ts),
         "span_s": (ts[-1] - ts[0]) / 1000.0 if ts else 0, "windows": fixed, "rest": rest, "want": want,
         "sliding_min": slo, "sliding_max": shi, "throttled": x["throttled"], "sim_accepted": x["accepted"],
         "achieved_per_s": achieved, "released_by_instance": [int(a - b0) for a, b0 in zip(rel1, rel0)],
         "sent": sent, "waiting": waiting, "throttles_in_db": throttles, "wall_s": wall,
         "gw_us": sum(us_per(a - c, max(len(ts), 1), bench) for a, c in zip(g1, g0)),
         "pg_us": us_per(p1 - p0, max(len(ts), 1), bench),
         "gw_core_pct": 100 * sum(a - c for a, c in zip(g1, g0)) / bench.CLK_TCK / wall,
         "pg_core_pct": 100 * (p1 - p0) / bench.CLK_TCK / wall}
    d["windows_ok"] = bool(fixed) and all(abs(c - want) <= 0.1 * want for c in fixed)
    d["ok"] = d["windows_ok"] and x["throttled"] == 0 and sent == accepted == n and len(ts) == n
    log("queue_pacing: %d calls over %.1f s; 10 s windows %s (wanted %d +-10%%; rest %d); any 10 s window %d-%d; "
        "simulator: %d accepted, %d throttled, achieved %.2f/s; released by instance %s; %d sent, %d waiting, %d "
        "throttles in the database" % (len(ts), d["span_s"], fixed, want, rest, slo, shi, x["accepted"],
                                        x["throttled"], achieved, d["released_by_instance"], sent, waiting, throttles))
    b.results.append({"scenario": "queue_pacing", "note": "%d instances, one SMS sender at %g/s, %d queued (req = one "
                      "call; CPU of all instances)" % (inst, rate, n), "conns": 4 * inst, "duration_s": d["span_s"],
                      "rps": len(ts) / max(d["span_s"], 1e-9), "requests": len(ts), "errors": errors + x["throttled"],
                      "non2xx": n - accepted, "expect_errors": False, "p50_ms": float("nan"), "p90_ms": float("nan"),
                      "p99_ms": float("nan"), "cpu_us_per_req": d["gw_us"], "pg_cpu_us_per_req": d["pg_us"],
                      "rss_kib": bench.rss_kib(b.og.pid), "queue_pacing": d})


# ---- generated backlogs ---------------------------------------------------------------------------

def one_queued(b, bench, token, body):
    st, j = bench.http_json("POST", b.og_url("/api/omni/send"), token, body)
    assert st == 202, j
    return j["data"]["reference"]


def wait_status(b, bench, token, ref, statuses, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st, j = bench.http_json("GET", b.og_url("/api/omni/messages/" + ref), token)
        if st == 200 and j["data"]["status"] in statuses:
            return j["data"]
        time.sleep(0.02)
    raise RuntimeError("message %s not %s within %d s" % (ref, statuses, timeout))


def generate_backlog(psql, tenant_id, model_ref, sender_id, first, count, priority, prefix):
    """`count` queued messages copied from the accepted message `model_ref` (every column
    queue_insert writes, reference kq_<n> and to <prefix><n> of their own), and their entries
    as og_queue_insert_many writes them for a fallback send (one, its first channel, behind
    `sender_id`), due now, oldest first (1 ms apart), valid 10 h; then the sender woken as
    og_queue_insert_many wakes it (og_queue_wake_sender). One transaction."""
    last = first + count - 1
    psql("BEGIN; "
         "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, fallback_on, "
         "fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, priority, created_at) "
         "SELECT m.tenant_id, 'kq_' || lpad(i::text, 9, '0'), '%(p)s' || lpad(i::text, 8, '0'), m.body, "
         "m.delivery_mode, m.channels, m.skipped, m.fallback_on, m.fallback_after_s, m.whatsapp_from, m.sms_sender, "
         "m.template, 'queued', now() - (%(l)d - i) * interval '1 ms', now() + interval '36000 s', '%(pr)s', "
         "now() - (%(l)d - i) * interval '1 ms' "
         "FROM messages m, generate_series(%(f)d, %(l)d) i WHERE m.tenant_id = '%(t)s' AND m.reference = '%(r)s'; "
         "INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at, "
         "valid_until, segments) "
         "SELECT '%(t)s', 'kq_' || lpad(i::text, 9, '0'), 0, %(s)d, ARRAY[%(s)d]::bigint[], false, "
         "og_queue_priority('%(pr)s'), now() - (%(l)d - i) * interval '1 ms', now() + interval '36000 s', 1 "
         "FROM generate_series(%(f)d, %(l)d) i; "
         "SELECT og_queue_wake_sender(%(s)d, now()); COMMIT"
         % {"t": tenant_id, "r": model_ref, "s": sender_id, "f": first, "l": last, "pr": priority, "p": prefix})


def cancel_backlog(b, tenant_id, sender_id):
    """What og_queue_cancel does, for every entry of the sender no worker holds: entries
    deleted, their messages canceled; then waits for the held ones to finish."""
    b.psql("WITH d AS (DELETE FROM queue_entries WHERE sender_id = %d AND lease_owner IS NULL "
           "RETURNING tenant_id, reference) UPDATE messages m SET status = 'canceled', completed_at = now() "
           "FROM d WHERE m.tenant_id = d.tenant_id AND m.reference = d.reference" % sender_id)
    end = time.monotonic() + 30
    while time.monotonic() < end and int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d" %
                                                 sender_id)) > 0:
        time.sleep(0.2)
    return int(b.psql("SELECT count(*) FROM messages WHERE tenant_id = '%s' AND status = 'canceled'" % tenant_id))


def paced_tenant(b, bench, name, rate, prefix):
    """A tenant whose Meta number is paced at `rate`, its sender row made by a real queued low
    send (waited for: sent); returns (tenant id, token, that message's reference, sender id)."""
    tid, token = make_tenant(b, bench, name, rate_settings(b, meta_mps=rate))
    ref = one_queued(b, bench, token, {"to": prefix + "00000000", "text": TEXT, "channels": ["whatsapp_meta"],
                                       "queue": True, "priority": "low"})
    wait_status(b, bench, token, ref, ("sent", "delivered", "read"))
    sid = int(b.psql("SELECT id FROM queue_senders WHERE tenant_id = '%s' AND channel = 'whatsapp_meta'" % tid))
    return tid, token, ref, sid


# ---- queue_priority --------------------------------------------------------------------------------

def sc_priority(b, bench):
    n, rate = b.args.priority_backlog, b.args.priority_rate
    tid, token, model, sid = paced_tenant(b, bench, "bench-q-priority", rate, "+6287")
    log("queue_priority: generating %d low messages behind sender %d (%g/s)" % (n, sid, rate))
    t = time.monotonic()
    generate_backlog(b.psql, tid, model, sid, 1, n, "low", "+6287")
    gen_s = time.monotonic() - t
    time.sleep(2)  # the release under way at the sender's rate
    highs = []
    for k in range(5):
        waiting_before = int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d AND priority = 2" % sid))
        to = "+62879%07d" % k
        t_post = time.time()
        ref = one_queued(b, bench, token, {"to": to, "text": "Your code is 1234", "channels": ["whatsapp_meta"],
                                           "queue": True, "priority": "high"})
        end = time.monotonic() + 10
        item = None
        while time.monotonic() < end:
            st, j = bench.http_json("GET", b.og_url("/api/omni/messages/" + ref), token)
            if st == 200 and j["data"]["attempts"] and j["data"]["attempts"][0].get("attemptedAt"):
                item = j["data"]
                break
            time.sleep(0.01)
        waiting_after = int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d AND priority = 2" % sid))
        st, rq = bench.http_json("GET", b.sim_url("/__sim/requests?channel=whatsapp_meta&to=" + to.lstrip("+")))
        recv = [r["receivedAt"] for r in rq["data"]["items"]]
        h = {"reference": ref, "waiting_before": waiting_before, "waiting_after": waiting_after,
             "attempted": item is not None}
        if item:
            h["attempt_s"] = parse_iso(item["attempts"][0]["attemptedAt"]) - parse_iso(item["createdAt"])
            h["attempt_vs_post_s"] = parse_iso(item["attempts"][0]["attemptedAt"]) - t_post
        h["provider_s"] = (recv[0] / 1000.0 - t_post) if recv else float("nan")
        highs.append(h)
        log("queue_priority: high #%d: attempt %.3f s after its acceptance (%.3f s after the POST), at the provider "
            "%.3f s after the POST; %d low waiting before, %d after" % (
                k + 1, h.get("attempt_s", float("nan")), h.get("attempt_vs_post_s", float("nan")), h["provider_s"],
                waiting_before, waiting_after))
        time.sleep(1.5)
    released = n - int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d" % sid))
    canceled = cancel_backlog(b, tid, sid)
    worst = max((h.get("attempt_s", float("inf")) for h in highs), default=float("inf"))
    d = {"backlog": n, "rate": rate, "generate_s": gen_s, "highs": highs, "worst_s": worst,
         "released_meanwhile": released, "canceled": canceled,
         "min_waiting": min(h["waiting_after"] for h in highs)}
    d["ok"] = all(h["attempted"] for h in highs) and worst < 1.0
    log("queue_priority: worst high %.3f s behind %d..%d low (backlog %d generated in %.1f s; %d released at %g/s "
        "meanwhile, %d canceled after)" % (worst, d["min_waiting"], max(h["waiting_before"] for h in highs), n, gen_s,
                                           released, rate, canceled))
    b.results.append({"scenario": "queue_priority", "note": "5 high queued behind %d low of their sender at %g/s "
                      "(p50/p99/max column: attempt after acceptance, ms)" % (n, rate), "conns": 1,
                      "duration_s": 0, "rps": 0, "requests": len(highs),
                      "errors": sum(1 for h in highs if not h["attempted"]), "non2xx": 0, "expect_errors": False,
                      "p50_ms": 1000 * statistics.median(h.get("attempt_s", float("nan")) for h in highs),
                      "p90_ms": float("nan"), "p99_ms": 1000 * worst, "cpu_us_per_req": float("nan"),
                      "pg_cpu_us_per_req": float("nan"), "rss_kib": bench.rss_kib(b.og.pid), "queue_priority": d})


# ---- queue_scale ------------------------------------------------------------------------------------

def claim_statement():
    """The gateway's queue_claim statement, from sql/queries/queue.sql."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sql", "queries",
                           "queue.sql")) as f:
        text = f.read()
    block = text.split("-- name: queue_claim", 1)[1].split("-- name:", 1)[0]
    return "\n".join(line for line in block.splitlines() if not line.startswith("--")).strip().rstrip(";")


def claim_plan(psql):
    """The join the claim statement gets planned with now (EXPLAIN, nothing executed): its
    parameters do not change its estimates, so this is the plan a gateway connection makes
    when it plans the statement again (after the tables' next ANALYZE)."""
    out = psql("BEGIN; PREPARE qclaim(text, integer, integer, integer, boolean) AS %s; "
               "EXPLAIN EXECUTE qclaim('bench', 60000, %d, %d, true); DEALLOCATE qclaim; ROLLBACK" %
               (claim_statement(), CLAIM_MAX, CLAIM_SENDERS))
    return "hash join, Seq Scan on messages" if "Seq Scan on messages" in out else (
        "nested loop, messages_pkey" if "messages_pkey" in out else "none outside og_queue_claim")


INNER = [
    ("senders due", "SELECT * FROM queue_senders qs WHERE qs.wake_at <= now() ORDER BY qs.wake_at LIMIT 32 "
                    "FOR NO KEY UPDATE SKIP LOCKED"),
    ("a page of entries", "SELECT q.tenant_id, q.reference, q.ch, q.due_at, q.valid_until, q.segments "
                          "FROM queue_entries q WHERE q.sender_id = %(s)d AND q.priority = 1 AND q.lease_owner IS NULL "
                          "AND q.due_at <= now() ORDER BY q.due_at, q.id LIMIT " + str(CLAIM_MAX) + " FOR UPDATE SKIP LOCKED"),
    ("next due (og_queue_next_due)", "SELECT og_queue_next_due(%(s)d)"),
    ("next due, priority 1 branch", "SELECT due_at FROM queue_entries WHERE sender_id = %(s)d AND priority = 1 AND "
                                    "lease_owner IS NULL ORDER BY due_at LIMIT 1"),
    ("expired leases (og_queue_abandon)", "SELECT q.tenant_id, q.reference, q.ch FROM queue_entries q "
                                          "WHERE q.lease_owner IS NOT NULL AND q.lease_until < now() "
                                          "ORDER BY q.lease_until LIMIT " + str(CLAIM_MAX) + " FOR UPDATE SKIP LOCKED"),
]


def explain(url, sql):
    """(first plan line naming its node and index, shared buffers hit+read, execution ms)."""
    out = logscale.psql(url, "BEGIN;\nEXPLAIN (ANALYZE, BUFFERS) %s;\nROLLBACK;\n" % sql)
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    nodes = [re.sub(r"\s+\(cost=.*$", "", l.lstrip("-> ").strip()) for l in lines
             if "cost=" in l and ("Scan" in l or "Result" in l)]
    buf = 0
    for l in lines:
        m = re.match(r"Buffers: shared (.*)", l)
        if m:
            buf = sum(int(x) for x in re.findall(r"(?:hit|read)=(\d+)", m.group(1)))
            break
    ms = next((float(m.group(1)) for m in (re.match(r"Execution Time: ([\d.]+) ms", x) for x in lines) if m),
              float("nan"))
    return {"plan": "; ".join(dict.fromkeys(n for n in nodes if "Scan" in n)) or (nodes[0] if nodes else "?"),
            "buffers": buf, "ms": ms}


def time_claims(url, claims, stale_join=False):
    """`claims` executions of the gateway's queue_claim statement, prepared in one psql session,
    autocommit (as the gateway's write: each time includes its COMMIT), after one untimed; their
    times (ms, psql's \\timing), the shared buffers one more claim touches and its join plan
    (EXPLAIN (ANALYZE, BUFFERS) EXECUTE). stale_join: the statement's plan made with nested
    loops and merge joins off, then kept (a generic plan, cached, as a gateway connection keeps
    it until the tables are analyzed again): the hash join over all of messages that the planner
    picks while messages is small (og_queue_claim's rows are estimated at 1,000, PL/pgSQL's
    default); the function's own statements are planned as usual."""
    execute = "EXECUTE claim('bench-scale', 3600000, %d, %d, true);\n" % (CLAIM_MAX, CLAIM_SENDERS)
    script = "\\set ON_ERROR_STOP 1\n"
    if stale_join:
        script += "SET plan_cache_mode = force_generic_plan;\nSET enable_nestloop = off;\nSET enable_mergejoin = off;\n"
    script += "PREPARE claim(text, integer, integer, integer, boolean) AS %s;\n" % claim_statement()
    if stale_join:
        script += "EXPLAIN " + execute + "RESET enable_nestloop;\nRESET enable_mergejoin;\n"
    script += "\\o /dev/null\n" + execute + "\\o\n\\timing on\n"
    for _ in range(claims):
        script += "\\o /dev/null\n" + execute + "\\o\n"
    script += "\\timing off\nSELECT 'EXPLAIN';\nEXPLAIN (ANALYZE, BUFFERS) " + execute
    out = logscale.psql(url, script)
    times = [float(x) for x in re.findall(r"^Time: ([\d.]+) ms", out, re.M)]
    plan = out.split("\nEXPLAIN\n", 1)[-1]
    buf = re.search(r"Buffers: shared ([^\n]*)", plan)
    buffers = sum(int(x) for x in re.findall(r"(?:hit|read)=(\d+)", buf.group(1))) if buf else 0
    rows = re.search(r"rows=(\d+) loops=1\)", plan)
    join = "hash join, Seq Scan on messages" if "Seq Scan on messages" in plan else (
        "nested loop, messages_pkey" if "messages_pkey" in plan else "none outside og_queue_claim")
    return {"times": times, "buffers": buffers, "rows": int(rows.group(1)) if rows else -1, "join": join}


def summary(times):
    if not times:
        return {"median_ms": float("nan"), "p90_ms": float("nan"), "max_ms": float("nan")}
    t = sorted(times)
    return {"median_ms": statistics.median(t), "p90_ms": t[int(0.9 * (len(t) - 1))], "max_ms": t[-1]}


def claim_cost(b, bench, sizes, claims=12):
    """See the module doc: per size, the claim with fresh statistics and with the stale join."""
    url = logscale.new_database(b, SCALE_DB)

    def q(sql):
        return logscale.psql(url, sql)
    try:
        tid = q("INSERT INTO tenants (name, unified_api_enabled, settings) VALUES ('bench-q-scale', true, '{}') "
                "RETURNING id").strip().splitlines()[0]
        # The model message: what queue_insert writes for {"to", "text", "channels": ["whatsapp_meta"],
        # "queue": true} of a tenant with the bench's settings.
        q("INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, whatsapp_from, "
          "status, due_at, valid_until, priority) VALUES ('%s', 'kq_model', '+628800000000', '%s', 'fallback', "
          "'{whatsapp_meta}', '%s', 'sent', now(), now(), 'normal')" % (tid, TEXT, META_NUMBER))
        sid = int(q("INSERT INTO queue_senders (tenant_id, channel, sender, rate, tokens) "
                    "VALUES ('%s', 'whatsapp_meta', '%s', 100000, 1) RETURNING id" % (tid, META_ID))
                  .strip().splitlines()[0])
        have = [0]

        def top_up(size):
            """Generates what brings the waiting entries (not leased) back to `size`, then VACUUM
            ANALYZE (what autovacuum does after such a growth)."""
            t = time.monotonic()
            waiting = int(q("SELECT count(*) FROM queue_entries WHERE lease_owner IS NULL").strip())
            add = size - waiting
            if add > 0:
                generate_backlog(q, tid, "kq_model", sid, have[0] + 1, add, "normal", "+6288")
                have[0] += add
            q("VACUUM ANALYZE queue_entries; VACUUM ANALYZE queue_senders; VACUUM ANALYZE messages; "
              "VACUUM ANALYZE attempts")
            return time.monotonic() - t, add
        rows = []
        for size in sizes:
            gen, add = top_up(size)
            fresh = time_claims(url, claims)
            inner = [dict(explain(url, sql % {"s": sid}), what=what) for what, sql in INNER]
            messages = int(q("SELECT count(*) FROM messages").strip())
            gen2, _ = top_up(size)
            stale = time_claims(url, claims, stale_join=True)
            r = {"size": size, "messages": messages, "generated": add, "generate_s": gen + gen2,
                 "fresh": dict(summary(fresh["times"]), buffers=fresh["buffers"], rows=fresh["rows"],
                               join=fresh["join"], claims=len(fresh["times"])),
                 "stale": dict(summary(stale["times"]), buffers=stale["buffers"], rows=stale["rows"],
                               join=stale["join"], claims=len(stale["times"])),
                 "inner": inner}
            rows.append(r)
            log("queue_scale: %d waiting (%d messages in the table): claim of %d median %.2f ms (p90 %.2f, max %.2f), "
                "%d buffers, %s; with the stale join %.2f ms, %d buffers, %s; inner: %s" % (
                    size, messages, CLAIM_MAX, r["fresh"]["median_ms"], r["fresh"]["p90_ms"], r["fresh"]["max_ms"],
                    r["fresh"]["buffers"], r["fresh"]["join"], r["stale"]["median_ms"], r["stale"]["buffers"],
                    r["stale"]["join"], "; ".join("%s %s %d buffers %.3f ms" % (i["what"], i["plan"], i["buffers"],
                                                                             i["ms"]) for i in inner)))
        return rows
    finally:
        b.psql_super("DROP DATABASE IF EXISTS %s WITH (FORCE)" % SCALE_DB)


def sc_scale(b, bench):
    sizes = [int(x) for x in b.args.scale_sizes.split(",")]
    log("queue_scale: the claim's cost at %s waiting (database %s)" % (sizes, SCALE_DB))
    # Each phase takes its timed claims, one untimed before them and one EXPLAIN ANALYZE after, from
    # a backlog topped up to its size: the smallest size must hold them all (12 claims of 64 did).
    claims = claim_cost(b, bench, sizes, max(3, min(12, min(sizes) // CLAIM_MAX - 2)))

    # Sync p99 alone, while a backlog drains (at each rate), alone again.
    n = b.args.scale_backlog
    rates = [float(x) for x in b.args.scale_rates.split(",")]
    url, script = b.og_url("/api/omni/send"), bench.send_script(b, "qs", "+6281{n}")
    # A warm-up run (not recorded) before the first ANALYZE: analyzed empty (a fresh database),
    # the tables would get the gateway's statements planned for empty tables, and the first run
    # alone would measure that instead (the `cold` scenario's subject).
    log("queue_scale: warm-up, wrk -c%d -d%ds (not recorded)" % (b.args.conns, b.args.duration))
    b.wrk(url, b.args.conns, b.args.duration, script)
    bench.settle(b)

    def checkpoints():
        return int(b.psql_super("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"))

    def run(name, note):
        """A wrk run with what its write batches did (/metrics): operations per batch, ms from
        a batch's send to its COMMIT's answer, and the batch count; and the cluster's WAL bytes
        and checkpoints begun meanwhile (the drain's WAL shares the sends' flushes)."""
        t0, lsn, c0 = b.metrics(), bench.wal_lsn(b), checkpoints()
        r = b.measure(name, url, script=script, note=note)
        t1 = b.metrics()
        r["wal_mb"], r["checkpoints"] = bench.wal_since(b, lsn) / 1e6, checkpoints() - c0
        m0, m1 = bench.batch_sums(t0), bench.batch_sums(t1)
        k = max(m1[0] - m0[0], 1)
        h = steps.histogram_delta(steps.histogram(t0, "omnigate_db_commit_duration_seconds"),
                                  steps.histogram(t1, "omnigate_db_commit_duration_seconds"))
        r["batches"] = {"count": int(m1[0] - m0[0]), "ops": (m1[1] - m0[1]) / k, "ms": 1000 * (m1[2] - m0[2]) / k,
                        "p50_le_ms": 1000 * h["p50_le_s"], "p99_le_ms": 1000 * h["p99_le_s"]}
        return r
    alone1 = run("queue_scale_alone", "fallback_first's sends, no backlog (before)")
    drains = []
    for i, rate in enumerate(rates):
        tid, token, model, sid = paced_tenant(b, bench, "bench-q-scale-%d" % i, rate, "+6288")
        t = time.monotonic()
        generate_backlog(b.psql, tid, model, sid, 1, n, "normal", "+6288")
        gen_s = time.monotonic() - t
        bench.settle(b)  # as before the runs alone: each run starts after a CHECKPOINT
        w0 = int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d" % sid))
        r = run("queue_scale_draining" + ("" if i == 0 else "_%g" % rate),
                "fallback_first's sends while %d queued of another tenant drain at %g/s (CPU includes the drain)" % (
                    n, rate))
        w1 = int(b.psql("SELECT count(*) FROM queue_entries WHERE sender_id = %d" % sid))
        canceled = cancel_backlog(b, tid, sid)
        drains.append({"rate": rate, "run": r, "generate_s": gen_s, "waiting_start": w0, "waiting_end": w1,
                       "drained_per_s": (w0 - w1) / max(r["duration_s"], 1e-9), "canceled": canceled})
    bench.settle(b)
    alone2 = run("queue_scale_alone2", "fallback_first's sends, no backlog (after)")
    base_p99 = (alone1["p99_ms"] + alone2["p99_ms"]) / 2
    base_rps = (alone1["rps"] + alone2["rps"]) / 2

    def row(name, r):
        return {"name": name, "rps": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                "pg_us": r["pg_cpu_us_per_req"], "gw_us": r["cpu_us_per_req"], "batches": r["batches"],
                "wal_mb": r["wal_mb"], "checkpoints": r["checkpoints"]}
    d = {"claims": claims, "backlog": n, "p99_alone": [alone1["p99_ms"], alone2["p99_ms"]], "base_p99": base_p99,
         "base_rps": base_rps,
         "drains": [{k: v for k, v in x.items() if k != "run"} for x in drains],
         "runs": [row("alone (before)", alone1)] + [row("while %s drain at %g/s (%d drained: %.0f/s)" % (
             "{:,}".format(n), x["rate"], x["waiting_start"] - x["waiting_end"], x["drained_per_s"]), x["run"])
             for x in drains] + [row("alone (after)", alone2)]}
    for x in d["drains"]:
        r = next(y["run"] for y in drains if y["rate"] == x["rate"])
        x["p99_ms"], x["rps"] = r["p99_ms"], r["rps"]
        x["p99_ratio"] = r["p99_ms"] / max(base_p99, 1e-9)
        x["rps_ratio"] = r["rps"] / max(base_rps, 1e-9)
    fresh = [c["fresh"]["median_ms"] for c in claims]
    stale = [c["stale"]["median_ms"] for c in claims]
    d["claim_ratio"] = max(fresh) / max(fresh[0], 1e-9)
    d["stale_ratio"] = max(stale) / max(stale[0], 1e-9)
    d["buffer_ratio"] = max(c["fresh"]["buffers"] for c in claims) / max(claims[0]["fresh"]["buffers"], 1)
    d["plans_indexed"] = all("Seq Scan on queue_entries" not in i["plan"] for c in claims for i in c["inner"])
    log("queue_scale: claim median, largest over the smallest backlog's: %.3f (buffers %.3f; with the stale join "
        "%.3f); sync p99 alone %.2f / %.2f ms; %s" % (
            d["claim_ratio"], d["buffer_ratio"], d["stale_ratio"], alone1["p99_ms"], alone2["p99_ms"], "; ".join(
                "while draining at %g/s (%.0f/s achieved): p99 %.2f ms = %.3f, sends/s %.3f" % (
                    x["rate"], x["drained_per_s"], x["p99_ms"], x["p99_ratio"], x["rps_ratio"]) for x in d["drains"])))
    drains[0]["run"]["queue_scale"] = d


# ---- queue_statements (diagnostic) ----------------------------------------------------------------

def restart_pg(b, bench, preload):
    """Restarts the bench's cluster (deploy/pg.sh, same directory and port) with
    pg_stat_statements loaded (tracking nested statements too) or without it again; the
    gateway reconnects by itself."""
    if preload:
        b.psql_super("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    else:
        b.psql_super("ALTER SYSTEM RESET shared_preload_libraries")
        b.psql_super("ALTER SYSTEM RESET pg_stat_statements.track")
        b.psql_super("ALTER SYSTEM RESET pg_stat_statements.track_planning")
    port = b.db_url.rsplit(":", 1)[1].split("/")[0]
    pg = os.path.join(bench.ROOT, "deploy/pg.sh")
    subprocess.run(["bash", pg, "stop", b.pg_dir], check=True, capture_output=True)
    subprocess.run(["bash", pg, "start", b.pg_dir, port], check=True, capture_output=True)
    with open(os.path.join(os.path.realpath(b.pg_dir), "data", "postmaster.pid")) as f:
        b.pg_pid = int(f.readline())
    if preload:
        b.psql_super("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        b.psql_super("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
        b.psql_super("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
        b.psql_super("SELECT pg_reload_conf()")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        st, j = bench.http_json("GET", b.og_url("/readyz"))
        if st == 200:
            break
        time.sleep(0.2)
    time.sleep(1)  # every connection of the pool back


def statements(b, n):
    """pg_stat_statements since its last reset, the gateway's database: per statement (nested
    ones too: PL/pgSQL's), calls per message, rows, mean and total execution ms and planning ms,
    top 30 by execution and planning time."""
    out = b.psql_super("SELECT calls, rows, total_exec_time, total_plan_time, toplevel, "
                       "regexp_replace(left(query, 110), '\\s+', ' ', 'g') FROM pg_stat_statements "
                       "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                       "AND query NOT LIKE '%%pg_stat_statements%%' "
                       "ORDER BY total_exec_time + total_plan_time DESC LIMIT 30")
    rows = []
    for line in out.splitlines():
        calls, nrows, total, plan, top, q = line.split("|", 5)
        rows.append({"calls": int(calls), "rows": int(nrows), "per_msg": int(calls) / max(n, 1),
                     "total_ms": float(total), "plan_ms": float(plan), "mean_plan_ms": float(plan) / max(int(calls), 1),
                     "mean_ms": float(total) / max(int(calls), 1), "toplevel": top == "t", "query": q})
    return rows


def sc_statements(b, bench):
    """Where PostgreSQL's time goes, per statement, for a sync send, a queued accept and the
    drain (a diagnostic, not a target; see the module doc)."""
    n = min(b.args.queue_messages, 10000)
    ids, tokens = [], []
    for i in range(4):
        t, k = make_tenant(b, bench, "bench-q-stmts-%d" % i, rate_settings(b, meta_mps=100000, sms_mps=100000))
        ids.append(t)
        tokens.append(k)
    log("queue_statements: restarting PostgreSQL with pg_stat_statements (track = all)")
    restart_pg(b, bench, True)
    out = {}
    try:
        url = b.og_url("/api/omni/send")
        script = b.lua("qst_ff", "POST", "/api/omni/send",
                       [json.dumps({"to": "+6281{n}", "text": TEXT, "deliveryMode": "fallback"})], tokens)
        # As in queue_scale: a warm-up (not recorded) so that the ANALYZE does not see empty tables.
        b.wrk(url, b.args.conns, b.args.duration, script)
        bench.settle(b)
        b.psql_super("SELECT pg_stat_statements_reset()")
        ff = b.measure("queue_statements_sync", url, script=script,
                       note="fallback_first's sends with pg_stat_statements loaded (diagnostic)")
        out["sync"] = {"messages": ff["requests"], "statements": statements(b, ff["requests"])}
        due = time.time() + 2.0 + n / 1000.0
        body = json.dumps({"to": "+6285{n}", "text": TEXT, "channels": ["whatsapp_meta", "sms"], "queue": True,
                           "sendAt": iso_ms(due)})
        b.psql_super("SELECT pg_stat_statements_reset()")
        wrk_count(b, bench, "qst_accept", body, tokens, n, b.args.conns)
        time.sleep(0.3)
        got = int(b.psql("SELECT count(*) FROM messages WHERE tenant_id IN (%s) AND status = 'scheduled'" %
                         in_list(ids)))
        out["accept"] = {"messages": got, "statements": statements(b, got)}
        # Reset and counted just before the sendAt: nothing of these is sent before it, and a claim
        # at it may come before a reset after it (its calls were then counted in sim0, and the
        # drain waited for calls that never came, its 120 s of timers counted as its own).
        while time.time() < due - 0.2:
            time.sleep(0.01)
        b.psql_super("SELECT pg_stat_statements_reset()")
        sim0 = b.sim_stats()["channels"]["whatsapp_meta"]["requests"]
        end = time.monotonic() + 120
        while time.monotonic() < end and b.sim_stats()["channels"]["whatsapp_meta"]["requests"] - sim0 < got:
            time.sleep(0.1)
        while time.monotonic() < end and int(b.psql("SELECT count(*) FROM messages WHERE tenant_id IN (%s) AND "
                                                    "status IN %s" % (in_list(ids), WAITING))) > 0:
            time.sleep(0.1)
        out["drain"] = {"messages": got, "statements": statements(b, got)}
    finally:
        log("queue_statements: restarting PostgreSQL without pg_stat_statements")
        restart_pg(b, bench, False)
    for phase, v in out.items():
        log("queue_statements: %s, %d messages: %s" % (phase, v["messages"], "; ".join(
            "%.3f x %.3f ms (planning %.3f ms; %d rows) %s" % (
                r["per_msg"], r["mean_ms"], r["mean_plan_ms"], r["rows"], r["query"][:90])
            for r in v["statements"])))
    b.results.append({"scenario": "queue_statements", "note": "diagnostic: pg_stat_statements of a sync send, a "
                      "queued accept and the drain", "conns": b.args.conns, "duration_s": 0, "rps": 0,
                      "requests": 0, "errors": 0, "non2xx": 0, "expect_errors": False, "p50_ms": float("nan"),
                      "p90_ms": float("nan"), "p99_ms": float("nan"), "cpu_us_per_req": float("nan"),
                      "pg_cpu_us_per_req": float("nan"), "rss_kib": bench.rss_kib(b.og.pid), "queue_statements": out})


# ---- the report -------------------------------------------------------------------------------------

def report(b):
    by = {r["scenario"]: r for r in b.results}
    keys = ("queue_drain", "queue_pacing", "queue_priority", "queue_scale_draining", "queue_statements")
    if not any(k in by for k in keys):
        return []
    lines = ["", "## Queued delivery (issue 31)"]
    if "queue_drain" in by:
        d = by["queue_drain"]["queue_drain"]
        lag = d["claim_lag"]
        lines += ["", "`queue_drain`: 4 tenants, their Meta number and SMS sender at 100,000 messages/s (unpaced). "
                  "%s queued sends `{\"channels\":[\"whatsapp_meta\",\"sms\"],\"queue\":true,\"sendAt\":T}` posted by "
                  "wrk (%d connections; T %.1f s after the start, so all are accepted `scheduled` and become due "
                  "together%s), then the drain timed from T to the last completion the database recorded (the latest "
                  "`completed_at`; the simulator's Meta calls sampled every 0.1 s until none is scheduled, queued or "
                  "pending, the database asked once they all arrived). References, "
                  "each the mean of a run before and one after (wrk, %d connections, %d s): fallback_first's sends "
                  "(whatsapp_qr wins) and the queued body without `queue` (whatsapp_meta wins). PostgreSQL and "
                  "gateway CPU per message: the process trees' CPU over the accept phase plus over the drain "
                  "phase, over the messages." % (
                      "{:,}".format(d["accepted"]), b.args.conns, d["margin_s"],
                      "; **the accepts ran past T**" if d["overlap"] else "", b.args.conns, b.args.duration), "",
                  "| phase | messages | s | per s | p50 / p99 ms | PostgreSQL us/msg | gateway us/msg | WAL bytes/msg "
                  "| write batches/msg | db ops/msg |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
                  "| accept (202) | %d | %.2f | %.0f | %.1f / %.1f | %.1f | %.1f | %.0f | %.3f | %.3f |" % (
                      d["accepted"], d["accept_wall_s"], d["accept_per_s"], d["accept_p50_ms"], d["accept_p99_ms"],
                      d["pg_us_accept"], d["gw_us_accept"], d["wal_accept"], d["batches_accept"], d["ops_accept"]),
                  "| drain (claim, call, completion) | %d | %.2f | %.0f | claim lag <= %g / <= %g s | %.1f | %.1f "
                  "| %.0f | %.3f | %.3f |" % (
                      d["accepted"], d["drain_s"], d["drain_per_s"], lag["p50_le_s"], lag["p99_le_s"],
                      d["pg_us_drain"], d["gw_us_drain"], d["wal_drain"], d["batches_drain"], d["ops_drain"]),
                  "| queued, total | | | | | %.1f | %.1f | %.0f | | |" % (d["pg_us"], d["gw_us"],
                                                                      d["wal_accept"] + d["wal_drain"]),
                  "| sync, fallback_first's sends (mean of 2) | | | %.0f | | %.1f | %.1f | %.0f | | |" % (
                      d["ff_rps"], d["ff_pg_us"], d["ff_gw_us"], d["ff_wal"]),
                  "| sync, same channels (mean of 2) | | | %.0f | | %.1f | %.1f | | | |" % (
                      d["meta_rps"], d["meta_pg_us"], d["meta_gw_us"]), "",
                  "Accepts: max latency %.0f ms; %d write batch(es) failed and were retried op by op "
                  "(omnigate_db_batch_retries_total) meanwhile." % (d["accept_max_ms"], d["accept_retries"]), "",
                  "Drained %.0f/s (first call %.2f s after T; best 1 s %.0f/s): **%.3f** x fallback_first's sends/s "
                  "(%s), %.3f x the same channels' (%s). PostgreSQL CPU per queued message **%.3f** x a "
                  "fallback_first send's, %.3f x a same-channel send's. Final statuses %s, %d with exactly one sent "
                  "attempt, %d entries left: %s. The claim's join, planned after the ANALYZE before the accepts: "
                  "%s." % (
                      d["drain_per_s"], d["first_call_s"], d["peak_per_s"], d["ratio_ff"],
                      " / ".join("%.0f" % x for x in d["runs"]["ff"]), d["ratio_meta"],
                      " / ".join("%.0f" % x for x in d["runs"]["meta"]), d["pg_ratio_ff"], d["pg_ratio_meta"],
                      json.dumps(d["states"]), d["one_sent_attempt"], d["entries_left"],
                      "verified" if d["ok"] else "**not verified**", d["claim_join"])]
        if "now" in d:
            lines += ["", "Then %d queued sends due now (no sendAt: `queued` from the start, the common case) "
                      "posted by wrk and drained meanwhile: all completed %.1f s after the first was accepted "
                      "(%.0f/s, accept and drain together); PostgreSQL CPU per message **%.3f** x a fallback_first "
                      "send's (%.1f us, the bench's counting queries taken out)." % (
                          d["now"]["accepted"], d["now"]["wall_s"], d["now"]["per_s"], d["pg_ratio_now_ff"],
                          d["now"]["pg_us"])]
    if "queue_pacing" in by:
        d = by["queue_pacing"]["queue_pacing"]
        lines += ["", "`queue_pacing`: %d gateway instances (`--workers %d` each) on one database, one tenant whose "
                  "SMS sender ACME is set to %g messages/s, the simulator limiting ACME at %g/s (burst %g); %s queued "
                  "SMS sends posted round-robin to the instances (%.1f s; %s). Windows from the simulator's "
                  "`receivedAt` of each call, 10 s each from the first call (full windows only; %d calls after "
                  "them); any 10 s: every window starting at a call and ending by the last." % (
                      d["instances"], d["workers"], d["rate"], d["rate"], d["sim_burst"], "{:,}".format(d["messages"]),
                      d["post_s"], json.dumps(d["answers"]), d["rest"]), "",
                  "| calls | span s | 10 s windows (wanted %d +-10%%) | any 10 s min-max | achieved /s | 429s "
                  "(simulator) | throttles in the database | released by instance | sent | PostgreSQL %% of a core "
                  "| gateways %% of a core |" % d["want"],
                  "|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|",
                  "| %d | %.1f | %s | %d-%d | %.2f | %d | %d | %s | %d | %.1f | %.1f |" % (
                      d["calls"], d["span_s"], ", ".join(str(c) for c in d["windows"]), d["sliding_min"],
                      d["sliding_max"], d["achieved_per_s"], d["throttled"], d["throttles_in_db"],
                      " / ".join(str(x) for x in d["released_by_instance"]), d["sent"], d["pg_core_pct"],
                      d["gw_core_pct"])]
    if "queue_priority" in by:
        d = by["queue_priority"]["queue_priority"]
        lines += ["", "`queue_priority`: one tenant's Meta number at %g messages/s; %s `low` messages generated in "
                  "SQL behind it (%.1f s; see test/bench/queue.py: the accepted message row copied, the entries as "
                  "og_queue_insert_many writes them), draining at its rate; then 5 `high` queued sends through "
                  "`POST /api/omni/send`, 1.5 s apart. Attempt = its attemptedAt - its createdAt (GET "
                  "/api/omni/messages/{reference}; PostgreSQL's clock); provider = the simulator's receivedAt - "
                  "the bench's POST." % (d["rate"], "{:,}".format(d["backlog"]), d["generate_s"]), "",
                  "| high | low waiting before / after | attempt s | attempt - POST s | provider - POST s |",
                  "|---:|---|---:|---:|---:|"]
        for i, h in enumerate(d["highs"]):
            lines.append("| %d | %s / %s | %.3f | %.3f | %.3f |" % (
                i + 1, "{:,}".format(h["waiting_before"]), "{:,}".format(h["waiting_after"]),
                h.get("attempt_s", float("nan")), h.get("attempt_vs_post_s", float("nan")), h["provider_s"]))
        lines += ["", "%d low released meanwhile, %d canceled after." % (d["released_meanwhile"], d["canceled"])]
    if "queue_scale_draining" in by:
        d = by["queue_scale_draining"]["queue_scale"]
        lines += ["", "`queue_scale`: the gateway's `queue_claim` statement (sql/queries/queue.sql: og_queue_claim "
                  "joined to messages and tenants) prepared in psql and executed with the gateway's parameters "
                  "(%d messages, %d senders; autocommit, so each time includes its COMMIT), %d times after one "
                  "untimed, against one sender's backlog (rate 100,000/s: every claim takes %d), generated in a "
                  "database of its own (see the module doc of test/bench/queue.py) and grown from one size to the "
                  "next, VACUUM ANALYZE after each growth. *Fresh*: planned in that session with those statistics. "
                  "*Stale join*: the statement's join planned with nested loops off and kept as a cached generic "
                  "plan: the plan the planner makes while messages is small (og_queue_claim is estimated at 1,000 "
                  "rows, PL/pgSQL's default), which a gateway connection keeps until messages is analyzed again. "
                  "Buffers = shared hit + read of one claim (EXPLAIN (ANALYZE, BUFFERS) EXECUTE)." % (
                      CLAIM_MAX, CLAIM_SENDERS, d["claims"][0]["fresh"]["claims"], CLAIM_MAX), "",
                  "| waiting | messages in the table | fresh: median / p90 / max ms | us per message | buffers | join "
                  "| stale join: median ms | buffers | join |",
                  "|---:|---:|---|---:|---:|---|---:|---:|---|"]
        for c in d["claims"]:
            f, st = c["fresh"], c["stale"]
            lines.append("| %s | %s | %.2f / %.2f / %.2f | %.1f | %d | %s | %.2f | %d | %s |" % (
                "{:,}".format(c["size"]), "{:,}".format(c["messages"]), f["median_ms"], f["p90_ms"], f["max_ms"],
                1000 * f["median_ms"] / CLAIM_MAX, f["buffers"], f["join"], st["median_ms"], st["buffers"], st["join"]))
        lines += ["", "The claim's inner statements (EXPLAIN (ANALYZE, BUFFERS) with the sender's id: plan; buffers; "
                  "ms) at each size:", "",
                  "| statement | " + " | ".join("{:,}".format(c["size"]) for c in d["claims"]) + " |",
                  "|---|" + "---|" * len(d["claims"])]
        for k, (what, _) in enumerate(INNER):
            lines.append("| %s | %s |" % (what, " | ".join("%s; %d; %.3f" % (
                c["inner"][k]["plan"], c["inner"][k]["buffers"], c["inner"][k]["ms"]) for c in d["claims"])))
        lines += ["", "Sync sends (fallback_first's wrk run, %d connections, %d s) alone, while %s queued messages of "
                  "another tenant (generated as in queue_priority, one sender) drain at each rate, alone again (a "
                  "warm-up run before them, not recorded; each run after a VACUUM ANALYZE and CHECKPOINT; each "
                  "backlog canceled after its run). Write batches: the gateway's /metrics over each run "
                  "(omnigate_db_batch_operations, omnigate_db_commit_duration_seconds: from a batch's send to its "
                  "COMMIT's answer); while a backlog drains they carry the sync sends' writes and the release's "
                  "claims and completions alike." % (b.args.conns, b.args.duration, "{:,}".format(d["backlog"])), "",
                  "| run | sends/s | p50 ms | p99 ms | PostgreSQL us/send | gateway us/send | write batches "
                  "| ops per batch | ms per batch: mean, p50, p99 (bucket bounds) | WAL MB | checkpoints |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in d["runs"]:
            bt = r["batches"]
            lines.append("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %d | %.1f | %.2f, <= %g, <= %g | %.1f | %d |" % (
                r["name"], r["rps"], r["p50_ms"], r["p99_ms"], r["pg_us"], r["gw_us"], bt["count"], bt["ops"],
                bt["ms"], bt["p50_le_ms"], bt["p99_le_ms"], r["wal_mb"], r["checkpoints"]))
    if "queue_statements" in by:
        v = by["queue_statements"]["queue_statements"]
        lines += ["", "`queue_statements` (diagnostic): the cluster restarted with pg_stat_statements "
                  "(`track = all`: PL/pgSQL's statements too, marked *nested*); per "
                  "phase, the statements by total execution time (wall time in the executor: lock waits and time "
                  "off the CPU included), calls per message and mean ms. Sync: fallback_first's sends; accept: "
                  "queued sends (one sendAt ahead); drain: from that sendAt until all are completed."]
        for phase in ("sync", "accept", "drain"):
            if phase not in v:
                continue
            lines += ["", "%s (%s messages):" % (phase, "{:,}".format(v[phase]["messages"])), "",
                      "| statement | top / nested | calls per message | mean ms | total ms |",
                      "|---|---|---:|---:|---:|"]
            for r in v[phase]["statements"]:
                lines.append("| `%s` | %s | %.3f | %.3f | %.0f |" % (
                    r["query"].replace("|", "\\|").replace("`", "'"), "top" if r["toplevel"] else "nested",
                    r["per_msg"], r["mean_ms"], r["total_ms"]))
    return lines


def targets(b):
    by = {r["scenario"]: r for r in b.results}
    out = []
    if "queue_drain" in by:
        d = by["queue_drain"]["queue_drain"]
        out.append(("queued messages drained/s (unpaced, %d) / sync fallback_first sends/s (same channels: %.3f)" % (
            d["accepted"], d["ratio_meta"]), "%.3f (%.0f of %.0f)" % (d["ratio_ff"], d["drain_per_s"], d["ff_rps"]),
            ">= 0.80", d["ratio_ff"] >= 0.8 and d["ok"]))
        out.append(("PostgreSQL CPU per queued message (accept %.0f + drain %.0f us) / per sync send (same channels: "
                    "%.3f)" % (d["pg_us_accept"], d["pg_us_drain"], d["pg_ratio_meta"]),
                    "%.3f (%.1f of %.1f us)" % (d["pg_ratio_ff"], d["pg_us"], d["ff_pg_us"]), "<= 1.30",
                    d["pg_ratio_ff"] <= 1.3))
        if "now" in d:
            out.append(("... the same for queued sends due now (never scheduled), accepted while they drain "
                        "(%d in %.1f s)" % (d["now"]["accepted"], d["now"]["wall_s"]),
                        "%.3f (%.1f of %.1f us)" % (d["pg_ratio_now_ff"], d["now"]["pg_us"], d["ff_pg_us"]),
                        "<= 1.30", d["pg_ratio_now_ff"] <= 1.3 and d["now"]["complete"]))
    if "queue_pacing" in by:
        d = by["queue_pacing"]["queue_pacing"]
        worst = max((abs(c - d["want"]) / d["want"] for c in d["windows"]), default=float("nan"))
        out.append(("pacing, %d instances, one sender at %g/s: worst 10 s window off the rate (%s)" % (
            d["instances"], d["rate"], ", ".join(str(c) for c in d["windows"])), "%.1f%%" % (100 * worst), "<= 10%",
            d["windows_ok"]))
        out.append(("pacing: 429s from the simulator's limit (%d calls)" % d["calls"], "%d" % d["throttled"], "0",
                    d["throttled"] == 0 and d["ok"]))
    if "queue_priority" in by:
        d = by["queue_priority"]["queue_priority"]
        out.append(("a high message's attempt after its acceptance, behind %s low of its sender (worst of 5)" %
                    "{:,}".format(d["min_waiting"]), "%.3f s" % d["worst_s"], "< 1 s", d["ok"]))
    if "queue_scale_draining" in by:
        d = by["queue_scale_draining"]["queue_scale"]
        cs = d["claims"]
        out.append(("claim of %d, fresh plan: slowest median over the smallest backlog's (%s)" % (CLAIM_MAX, ", ".join(
            "%s: %.2f ms" % ("{:,}".format(c["size"]), c["fresh"]["median_ms"]) for c in cs)),
            "%.3f" % d["claim_ratio"], "<= 1.5 (flat)", d["claim_ratio"] <= 1.5 and d["plans_indexed"]))
        out.append(("claim of %d with the join planned while messages was small (%s; reported)" % (CLAIM_MAX, ", ".join(
            "%s: %.2f ms" % ("{:,}".format(c["size"]), c["stale"]["median_ms"]) for c in cs)),
            "%.3f" % d["stale_ratio"], "(reported)", True))
        for x in d["drains"]:
            out.append(("sync send p99 while %s queued drain at %g/s / alone (sends/s %.3f)" % (
                "{:,}".format(d["backlog"]), x["rate"], x["rps_ratio"]),
                "%.3f (%.2f of %.2f ms)" % (x["p99_ratio"], x["p99_ms"], d["base_p99"]), "<= 1.50",
                x["p99_ratio"] <= 1.5))
    return out
