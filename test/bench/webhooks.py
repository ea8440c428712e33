"""Tenant webhooks out for the benchmark (issue 18): the receiver is the simulator's
POST /__sim/hooks/ok (answers 200 at once) and /__sim/hooks/hang (never answers); the events
are written by the gateway's own triggers (sql/011_webhooks_out.sql), from real status changes.

- drain(): --wh-events events of 4 tenants written at once (their messages' status set to
  `sent` in one UPDATE: the trigger writes one message.sent delivery each), then the time until
  the simulator has received all of them: events delivered per second, as fast as the gateway
  goes (each tenant's deliveries run 8 at a time on whichever worker holds its step).
- lag(): the status tenant (whose pre-created messages the status driver delivers) gets a
  webhook for message.delivered; a paced stream of signed Meta status callbacks makes each of
  its messages `delivered` at --wh-rate per second, so the outbox receives that many events per
  second from the real path (callback -> og_status_apply -> trigger). Lag = delivered_at minus
  created_at of each delivery (both PostgreSQL's clock), p50 and p99 over the window.
"""

import time

HOOK_EVENTS_SENT = ["message.sent"]


def set_webhook(b, http_json, admin, tenant_id, mode, events):
    st, j = http_json("PUT", b.og_url("/admin/tenants/%s/webhook" % tenant_id), admin,
                      {"url": b.sim_url("/__sim/hooks/" + mode), "events": events})
    assert st == 200, j
    return j["data"]


def delete_webhook(b, http_json, admin, tenant_id):
    st, j = http_json("DELETE", b.og_url("/admin/tenants/%s/webhook" % tenant_id), admin)
    assert st in (200, 404), j


def hooks_received(b):
    return b.sim_stats()["hooks"]


def drain(b, http_json, admin, settings, n, cpu_ticks, clk_tck):
    """Writes n message.sent events over 4 tenants at once and times their delivery."""
    tenants = []
    for i in range(4):
        st, j = http_json("POST", b.og_url("/admin/tenants"), admin,
                          {"name": "bench-wh-%d" % i, "unifiedApiEnabled": True, "settings": settings})
        assert st == 201, j
        tenants.append(j["data"]["id"])
        set_webhook(b, http_json, admin, tenants[-1], "ok", HOOK_EVENTS_SENT)
    per = n // len(tenants)
    for t in tenants:
        b.psql("INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels) "
               "SELECT '%s', 'kw_' || lpad(i::text, 9, '0'), '+6281234567890', 'Your order has shipped', "
               "'fallback', '{sms}' FROM generate_series(1, %d) i" % (t, per))
    b.psql("VACUUM ANALYZE messages")
    ok0 = hooks_received(b)["ok"]
    g0, p0 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    t_write = time.monotonic()
    # One statement, one transaction: the events become visible (and the steps due) at its commit.
    b.psql("UPDATE messages SET status = 'sent', completed_at = now() WHERE tenant_id IN (%s) AND reference "
           "LIKE 'kw_%%'" % ", ".join("'%s'" % t for t in tenants))
    t0 = time.monotonic()
    total = per * len(tenants)
    samples = [(0.0, 0)]
    last_move = t0
    while True:
        time.sleep(0.1)
        got = hooks_received(b)["ok"] - ok0
        now = time.monotonic()
        if got != samples[-1][1]:
            last_move = now
        samples.append((now - t0, got))
        if got >= total or now - last_move > 30:
            break
    elapsed = samples[-1][0]
    g1, p1 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    where = "tenant_id IN (%s)" % ", ".join("'%s'" % t for t in tenants)
    delivered = int(b.psql("SELECT count(*) FROM webhook_deliveries WHERE %s AND status = 'delivered'" % where))
    tries = int(b.psql("SELECT count(*) FROM webhook_tries t JOIN webhook_deliveries d ON d.id = t.delivery_id "
                       "WHERE d.%s" % where))
    for t in tenants:
        delete_webhook(b, http_json, admin, t)
    got = samples[-1][1]
    return {"events": total, "received": got, "delivered_in_db": delivered, "tries": tries,
            "write_s": t0 - t_write, "elapsed_s": elapsed, "per_s": got / max(elapsed, 1e-9),
            "peak_per_s": peak(samples), "complete": got >= total and delivered == total,
            "cpu_us_per_event": (g1 - g0) * 1e6 / clk_tck / max(got, 1),
            "pg_cpu_us_per_event": (p1 - p0) * 1e6 / clk_tck / max(got, 1)}


def peak(samples, window=1.0):
    """The best rate over `window` seconds of (t, count) samples."""
    best, j = 0.0, 0
    for i in range(len(samples)):
        while samples[i][0] - samples[j][0] > window:
            j += 1
        if samples[i][0] - samples[j][0] >= window * 0.9:
            best = max(best, (samples[i][1] - samples[j][1]) / (samples[i][0] - samples[j][0]))
    return best


def lag(b, tenant_id, since_sql, settle_timeout=60):
    """Waits until the tenant's outbox is empty, then the lag of its deliveries created since
    `since_sql` (a timestamptz literal)."""
    end = time.monotonic() + settle_timeout
    while time.monotonic() < end:
        if int(b.psql("SELECT count(*) FROM webhook_deliveries WHERE tenant_id = '%s' AND next_at IS NOT NULL"
                      % tenant_id)) == 0:
            break
        time.sleep(0.2)
    row = b.psql(
        "SELECT count(*), count(*) FILTER (WHERE status = 'delivered'), "
        "coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - created_at)), 0) "
        "* 1000, coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - "
        "created_at)), 0) * 1000, coalesce(max(extract(epoch FROM delivered_at - created_at)), 0) * 1000, "
        "coalesce(extract(epoch FROM max(delivered_at) - min(created_at)), 0), "
        "(SELECT count(*) FROM webhook_tries t JOIN webhook_deliveries d ON d.id = t.delivery_id "
        " WHERE d.tenant_id = '%s' AND d.created_at >= %s), "
        "(SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.at - d.created_at)), 0) "
        " * 1000 FROM webhook_tries t JOIN webhook_deliveries d ON d.id = t.delivery_id "
        " WHERE d.tenant_id = '%s' AND d.created_at >= %s AND t.n = 1), "
        "(SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY t.latency_ms), 0) "
        " FROM webhook_tries t JOIN webhook_deliveries d ON d.id = t.delivery_id "
        " WHERE d.tenant_id = '%s' AND d.created_at >= %s) "
        "FROM webhook_deliveries WHERE tenant_id = '%s' AND created_at >= %s" % (
            tenant_id, since_sql, tenant_id, since_sql, tenant_id, since_sql, tenant_id, since_sql))
    n, ok, p50, p99, mx, span, tries, wait50, try50 = row.split("|")
    return {"events": int(n), "delivered": int(ok), "p50_ms": float(p50), "p99_ms": float(p99),
            "max_ms": float(mx), "span_s": float(span), "tries": int(tries), "wait_p50_ms": float(wait50),
            "try_p50_ms": float(try50), "per_s": int(ok) / max(float(span), 1e-9)}
