"""Batches (issue 32, API.md §20): a benchmark scenario of bench.py, its figures as ratios to a
reference measured in the same run, on tenants of its own (made here), leaving nothing queued.

batch_accept: the reference first, fallback_first's wrk run (sync sends: sends/s and PostgreSQL
CPU per send). Then --batch-count (24) batches of 1,000 messages (a variable each, one number
each, on whatsapp_meta then sms, one sendAt a few seconds ahead so that all are `scheduled`
when accepted), posted by 4 threads at once, each on a keep-alive connection of its own, to a
tenant whose Meta number and SMS sender are set to 100,000 messages/s (unpaced): each batch's
answer time (target: p99 < 100 ms) and PostgreSQL CPU per accepted message. Then, from sendAt
until every message has its final status in the database (the simulator's count of Meta calls
watched, the database asked once they all arrived), PostgreSQL CPU per message (accept + drain)
/ per sync send (target <= 0.7); meanwhile GET /api/omni/batches/{id} of one batch every 50 ms
(its answer time: the counts' read, target < 10 ms; a read sums the batch's count rows, at most
one per status and PostgreSQL backend whatever the batch's size, so a 1,000-message batch reads
as a 100,000-message one would). The reference again at the end; it is the mean of the two.
"""

import http.client
import json
import shutil
import threading
import time

import queue as queue_bench

TEXT = "Hi {{name}}, your order has shipped"


def post_batches(port, token, bodies, threads):
    """Posts `bodies` from `threads` threads, each on its own keep-alive connection; returns each
    answer's (status, seconds, batchId)."""
    out, lock, nxt = [], threading.Lock(), [0]

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                if nxt[0] >= len(bodies):
                    break
                body = bodies[nxt[0]]
                nxt[0] += 1
            t0 = time.monotonic()
            conn.request("POST", "/api/omni/batches", body=body,
                         headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            dt = time.monotonic() - t0
            bid = json.loads(data)["data"]["batchId"] if r.status == 202 else None
            with lock:
                out.append((r.status, dt, bid))
        conn.close()

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def sc_accept(b, bench):
    count, size = b.args.batch_count, 1000
    tid, token = queue_bench.make_tenant(b, bench, "bench-batches",
                                         queue_bench.rate_settings(b, meta_mps=100000, sms_mps=100000))
    url = b.og_url("/api/omni/send")
    ff_script = b.lua("ba_ff", "POST", "/api/omni/send",
                      [json.dumps({"to": "+6281{n}", "text": "Your order has shipped", "deliveryMode": "fallback"})],
                      [token])
    ff1 = b.measure("batch_accept_sync_ff", url, script=ff_script, note="reference: fallback_first's sends")

    margin = 3.0 + count * size / 5000.0
    due = time.time() + margin
    bodies = [json.dumps({"defaults": {"channels": ["whatsapp_meta", "sms"], "text": TEXT,
                                       "sendAt": queue_bench.iso_ms(due)},
                          "messages": [{"to": "+6286%03d%06d" % (k, i), "variables": {"name": "N%d" % i}}
                                       for i in range(size)]}) for k in range(count)]
    queue_bench.log("batch_accept: %d batches of %d (sendAt in %.1f s) from 4 threads" % (count, size, margin))
    sim0 = b.sim_stats()["channels"]["whatsapp_meta"]["requests"]
    roles = bench.RoleCpu(b.pg_pid)
    r0 = roles.snapshot()
    g0, p0 = bench.cpu_ticks(b.og.pid), queue_bench.pg_ticks(b, bench)
    answers = post_batches(b.og_port, token, bodies, 4)
    g1, p1 = bench.cpu_ticks(b.og.pid), queue_bench.pg_ticks(b, bench)
    r1 = roles.snapshot()
    ok = [a for a in answers if a[0] == 202]
    accepted = len(ok) * size
    times_ms = [a[1] * 1000 for a in ok]
    pg_accept = queue_bench.us_per(p1 - p0, accepted, bench)
    gw_accept = queue_bench.us_per(g1 - g0, accepted, bench)
    queue_bench.log("batch_accept: %d of %d answered 202; answer p50 %.1f ms, p99 %.1f ms, max %.1f ms; PostgreSQL "
                    "%.1f us and gateway %.1f us per accepted message%s" % (
                        len(ok), count, pct(times_ms, 50), pct(times_ms, 99), max(times_ms or [float("nan")]),
                        pg_accept, gw_accept, "; ACCEPTS RAN PAST sendAt" if time.time() > due else ""))

    # The drain, with the counts of one batch read every 50 ms.
    watch = ok[0][2] if ok else None
    reads_ms, stop = [], threading.Event()

    def reader():
        conn = http.client.HTTPConnection("127.0.0.1", b.og_port, timeout=10)
        while not stop.is_set():
            t0 = time.monotonic()
            conn.request("GET", "/api/omni/batches/" + watch, headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                reads_ms.append((time.monotonic() - t0) * 1000)
            stop.wait(0.05)
        conn.close()

    while time.time() < due:
        time.sleep(0.005)
    r_due = roles.snapshot()
    rd = threading.Thread(target=reader)
    if watch:
        rd.start()
    t0, last, last_move, complete = time.monotonic(), 0, time.monotonic(), False
    while True:
        time.sleep(0.1)
        c = b.sim_stats()["channels"]["whatsapp_meta"]["requests"] - sim0
        if c != last:
            last, last_move = c, time.monotonic()
        if c >= accepted:
            left = int(b.psql("SELECT count(*) FROM messages WHERE tenant_id = '%s' AND status IN %s" % (
                tid, queue_bench.WAITING)))
            if left == 0:
                complete = True
                break
        if time.monotonic() - last_move > 30:
            queue_bench.log("batch_accept: nothing released for 30 s; giving up")
            break
    p2 = queue_bench.pg_ticks(b, bench)
    r2 = roles.snapshot()
    roles.close()
    stop.set()
    if watch:
        rd.join()
    drain_s = time.monotonic() - t0
    pg_drain = queue_bench.us_per(p2 - p1, accepted, bench)
    ff2 = b.measure("batch_accept_sync_ff2", url, script=ff_script, note="reference again")
    ff_pg = (ff1["pg_cpu_us_per_req"] + ff2["pg_cpu_us_per_req"]) / 2
    pg = pg_accept + pg_drain
    counts = json.loads(b.psql("SELECT og_batch_item(b)::text FROM batches b WHERE b.id = '%s'" % watch))["counts"] \
        if watch else {}
    d = {"batches": count, "size": size, "answered_202": len(ok), "answer_p50_ms": pct(times_ms, 50),
         "answer_p99_ms": pct(times_ms, 99), "pg_us_accept": pg_accept, "gw_us_accept": gw_accept, "pg_us_drain": pg_drain, "pg_us": pg,
         "ff_pg_us": ff_pg, "pg_ratio": pg / max(ff_pg, 1e-9), "drain_s": drain_s, "complete": complete,
         "counts_reads": len(reads_ms), "counts_read_p50_ms": pct(reads_ms, 50),
         "counts_read_p99_ms": pct(reads_ms, 99), "watched_counts": counts,
         # PostgreSQL's CPU per batched message by process role (bench.RoleCpu): the accept, the
         # wait for the sendAt (counted in the drain above), the drain from the sendAt.
         "pg_roles": {"accept": bench.role_us(r0, r1, accepted), "wait": bench.role_us(r1, r_due, accepted),
                      "drain": bench.role_us(r_due, r2, accepted)}}
    queue_bench.log("batch_accept: %d messages drained in %.2f s (%s); PostgreSQL %.1f us per batched message "
                    "(accept %.1f + drain %.1f) vs %.1f per sync send = %.3f (target <= 0.7); answers p99 %.1f ms "
                    "(target < 100); %d counts reads while draining: p50 %.2f ms, p99 %.2f ms (target < 10); "
                    "watched batch's counts at the end %s" % (
                        accepted, drain_s, "complete" if complete else "NOT COMPLETE", pg, pg_accept, pg_drain, ff_pg,
                        d["pg_ratio"], d["answer_p99_ms"], len(reads_ms), d["counts_read_p50_ms"],
                        d["counts_read_p99_ms"], json.dumps(counts)))
    queue_bench.log("batch_accept: PostgreSQL us per batched message by process role: %s" % json.dumps(d["pg_roles"]))
    b.results.append({"scenario": "batch_accept", "note": "%d batches of %d from 4 threads (req = one batch)" % (
                      count, size), "conns": 4, "duration_s": drain_s, "rps": len(ok) / max(drain_s, 1e-9),
                      "requests": len(answers), "errors": len(answers) - len(ok), "non2xx": len(answers) - len(ok),
                      "expect_errors": False, "p50_ms": d["answer_p50_ms"], "p90_ms": pct(times_ms, 90),
                      "p99_ms": d["answer_p99_ms"], "cpu_us_per_req": gw_accept * size, "pg_cpu_us_per_req": pg,
                      "rss_kib": bench.rss_kib(b.og.pid), "batch_accept": d})


def sc_callgrind(b, bench, drain=False, count=8, size=1000):
    """Instructions per batched message in the gateway's worker (valgrind's callgrind, counting
    inside uv_run: bench.under_callgrind, as for sends): `count` batches of `size` messages like
    batch_accept's, posted one at a time. callgrind_batch: all scheduled an hour ahead (no drain
    runs meanwhile), then canceled: the accept alone. callgrind_drain (`drain`): due now, and
    counted until none of them waits: the accept, the claims, the provider calls and the
    outcomes, i.e. what a queued message costs the worker against a sync send's callgrind figure.
    Repeatable where CPU time is not: the gateway's side, apart from PostgreSQL's."""
    name = "callgrind_drain" if drain else "callgrind_batch"
    if shutil.which("valgrind") is None:
        queue_bench.log("%s: valgrind not found: skipped" % name)
        return
    tid, token = queue_bench.make_tenant(b, bench, "bench-" + name.replace("_", "-"),
                                         queue_bench.rate_settings(b, meta_mps=100000, sms_mps=100000))
    defaults = {"channels": ["whatsapp_meta", "sms"], "text": TEXT}
    if not drain:
        defaults["sendAt"] = queue_bench.iso_ms(time.time() + 3600)
    bodies = [json.dumps({"defaults": defaults,
                          "messages": [{"to": "+6287%03d%06d" % (k, i), "variables": {"name": "N%d" % i}}
                                       for i in range(size)]}) for k in range(count)]

    def load():
        answers = post_batches(b.og_port, token, bodies, 1)
        left, end = None, time.monotonic() + 600
        while drain and time.monotonic() < end:
            left = int(b.psql("SELECT count(*) FROM messages WHERE tenant_id = '%s' AND status IN %s" % (
                tid, queue_bench.WAITING)))
            if left == 0:
                break
            time.sleep(0.5)
        return answers, left

    total, path, (answers, left) = bench.under_callgrind(b, name, load)
    ok = [a for a in answers if a[0] == 202]
    if not drain:
        for a in ok:
            bench.http_json("POST", b.og_url("/api/omni/batches/%s/cancel" % a[2]), token=token)
    n = max(len(ok) * size, 1)
    queue_bench.log("%s: %d of %d batches of %d answered 202%s; %.0f instructions per batched message in the worker "
                    "(%s)" % (name, len(ok), count, size,
                              "" if not drain else ", %s waiting at the end" % left, total / n, path))
    b.results.append({"scenario": name, "note": "%d batches of %d under callgrind, one at a time%s: instructions "
                      "per batched message in the worker's loop" % (count, size, ", drained" if drain else ""),
                      "conns": 1, "rps": 0, "requests": len(answers), "errors": len(answers) - len(ok),
                      "non2xx": len(answers) - len(ok), "expect_errors": False, "p50_ms": float("nan"),
                      "p90_ms": float("nan"), "p99_ms": float("nan"), "cpu_us_per_req": float("nan"),
                      "pg_cpu_us_per_req": float("nan"), "rss_kib": 0, "instr_per_msg": total / n,
                      "callgrind_file": path, "left": left})


def sc_counts(b, bench):
    """batch_counts: the counts of a 100,000-message batch read while it drains. A real batch of
    1,000 (through HTTP, scheduled a minute ahead so that nothing of it drains yet) is grown in
    SQL to --batch-big messages: its message rows copied (reference kq_<n>, to a number each,
    the batch's id, `queued`, due now, oldest first) with their queue entries as
    og_queue_insert_many writes them for a fallback send (one, behind the tenant's Meta number),
    the batch's total and first counts raised as og_batch_insert writes them, then the sender
    woken. The tenant's senders are unpaced (100,000/s), so it drains at the gateway's pace;
    meanwhile GET /api/omni/batches/{id} every 50 ms (target: < 10 ms), until nothing of it
    waits but the 1,000 scheduled; then those are canceled and the batch must complete."""
    big = b.args.batch_big
    tid, token = queue_bench.make_tenant(b, bench, "bench-batch-counts",
                                         queue_bench.rate_settings(b, meta_mps=100000, sms_mps=100000))
    body = json.dumps({"defaults": {"channels": ["whatsapp_meta", "sms"], "text": TEXT,
                                    "sendAt": queue_bench.iso_ms(time.time() + 60)},
                       "messages": [{"to": "+6287000%06d" % i, "variables": {"name": "N%d" % i}}
                                    for i in range(1000)]})
    (st, dt, bid), = post_batches(b.og_port, token, [body], 1)
    assert st == 202, st
    model = b.psql("SELECT reference FROM messages WHERE batch_id = '%s' ORDER BY reference LIMIT 1" % bid)
    sid = int(b.psql("SELECT id FROM queue_senders WHERE tenant_id = '%s' AND channel = 'whatsapp_meta'" % tid))
    n = big - 1000
    queue_bench.log("batch_counts: batch %s grown by %d messages in SQL" % (bid, n))
    b.psql("BEGIN; "
           "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, skipped, "
           "fallback_on, fallback_after_s, whatsapp_from, sms_sender, template, status, due_at, valid_until, "
           "priority, created_at, batch_id) "
           "SELECT m.tenant_id, 'kq_' || lpad(i::text, 9, '0'), '+6288' || lpad(i::text, 8, '0'), m.body, "
           "m.delivery_mode, m.channels, m.skipped, m.fallback_on, m.fallback_after_s, m.whatsapp_from, m.sms_sender, "
           "m.template, 'queued', now() - (%(n)d - i) * interval '1 ms', now() + interval '36000 s', m.priority, "
           "now(), m.batch_id "
           "FROM messages m, generate_series(1, %(n)d) i WHERE m.tenant_id = '%(t)s' AND m.reference = '%(r)s'; "
           "INSERT INTO queue_entries (tenant_id, reference, ch, sender_id, senders, all_mode, priority, due_at, "
           "valid_until, segments) "
           "SELECT '%(t)s', 'kq_' || lpad(i::text, 9, '0'), 0, %(s)d, ARRAY[%(s)d]::bigint[], false, 1, "
           "now() - (%(n)d - i) * interval '1 ms', now() + interval '36000 s', 1 FROM generate_series(1, %(n)d) i; "
           "UPDATE batches SET total = total + %(n)d, last_due_at = greatest(last_due_at, now()) "
           "WHERE id = '%(b)s'; "
           "UPDATE batch_counts SET queued = queued + %(n)d WHERE batch_id = '%(b)s' AND shard = 0; "
           "SELECT og_queue_wake_sender(%(s)d, now()); COMMIT"
           % {"t": tid, "r": model, "s": sid, "n": n, "b": bid})
    reads_ms, seen = [], []
    conn = http.client.HTTPConnection("127.0.0.1", b.og_port, timeout=10)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        s0 = time.monotonic()
        conn.request("GET", "/api/omni/batches/" + bid, headers={"Authorization": "Bearer " + token})
        r = conn.getresponse()
        data = json.loads(r.read())
        reads_ms.append((time.monotonic() - s0) * 1000)
        c = data["data"]["counts"]
        seen.append(c["queued"])
        if c["queued"] == 0:
            break
        time.sleep(0.05)
    drain_s = time.monotonic() - t0
    st, j = bench.http_json("POST", b.og_url("/api/omni/batches/%s/cancel" % bid), token, {})
    canceled = j["data"]["canceled"] if st == 200 else None
    done = None
    for _ in range(100):
        st, j = bench.http_json("GET", b.og_url("/api/omni/batches/" + bid), token)
        if j["data"]["completedAt"]:
            done = j["data"]
            break
        time.sleep(0.1)
    total = sum(done["counts"].values()) if done else None
    ok = done is not None and total == big and canceled == 1000 and done["total"] == big
    queue_bench.log("batch_counts: %d-message batch drained (queued 0) in %.1f s; %d counts reads meanwhile: p50 "
                    "%.2f ms, p99 %.2f ms, max %.2f ms (target < 10); then %s canceled, completed: %s, counts sum "
                    "%s of %d total; %s" % (big, drain_s, len(reads_ms), pct(reads_ms, 50), pct(reads_ms, 99),
                                            max(reads_ms), canceled, bool(done), total, big,
                                            "verified" if ok else "NOT VERIFIED: %s" % json.dumps(done)))
    b.results.append({"scenario": "batch_counts", "note": "GET of a %d-message batch while it drains" % big,
                      "conns": 1, "duration_s": drain_s, "rps": len(reads_ms) / max(drain_s, 1e-9),
                      "requests": len(reads_ms), "errors": 0 if ok else 1, "non2xx": 0, "expect_errors": False,
                      "p50_ms": pct(reads_ms, 50), "p90_ms": pct(reads_ms, 90), "p99_ms": pct(reads_ms, 99),
                      "cpu_us_per_req": float("nan"), "pg_cpu_us_per_req": float("nan"),
                      "rss_kib": bench.rss_kib(b.og.pid),
                      "batch_counts": {"size": big, "reads": len(reads_ms), "drain_s": drain_s, "ok": ok}})
