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
import statistics
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
    g0, p0 = bench.cpu_ticks(b.og.pid), queue_bench.pg_ticks(b, bench)
    answers = post_batches(b.og_port, token, bodies, 4)
    g1, p1 = bench.cpu_ticks(b.og.pid), queue_bench.pg_ticks(b, bench)
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
         "counts_read_p99_ms": pct(reads_ms, 99), "watched_counts": counts}
    queue_bench.log("batch_accept: %d messages drained in %.2f s (%s); PostgreSQL %.1f us per batched message "
                    "(accept %.1f + drain %.1f) vs %.1f per sync send = %.3f (target <= 0.7); answers p99 %.1f ms "
                    "(target < 100); %d counts reads while draining: p50 %.2f ms, p99 %.2f ms (target < 10); "
                    "watched batch's counts at the end %s" % (
                        accepted, drain_s, "complete" if complete else "NOT COMPLETE", pg, pg_accept, pg_drain, ff_pg,
                        d["pg_ratio"], d["answer_p99_ms"], len(reads_ms), d["counts_read_p50_ms"],
                        d["counts_read_p99_ms"], json.dumps(counts)))
    b.results.append({"scenario": "batch_accept", "note": "%d batches of %d from 4 threads (req = one batch)" % (
                      count, size), "conns": 4, "duration_s": drain_s, "rps": len(ok) / max(drain_s, 1e-9),
                      "requests": len(answers), "errors": len(answers) - len(ok), "non2xx": len(answers) - len(ok),
                      "expect_errors": False, "p50_ms": d["answer_p50_ms"], "p90_ms": pct(times_ms, 90),
                      "p99_ms": d["answer_p99_ms"], "cpu_us_per_req": gw_accept * size, "pg_cpu_us_per_req": pg,
                      "rss_kib": bench.rss_kib(b.og.pid), "batch_accept": d})
