"""Durable steps for the benchmark (issue 14): the delivery-fallback sends whose first channel
fails by callback, what the database says about their chains, and the idle cost of pending
steps.

The sends come from this process (threads, one keep-alive http.client connection each, a
shared counter up to the wanted count), not from wrk: wrk runs for a time, not a number of
requests, and the checks need to know exactly which sends were answered. Each is a tenant
send (POST /api/omni/send with a token, round-robin over the bench tenants) to its own
recipient +6284<7 digits>, a prefix no other scenario uses, so SQL finds the scenario's
messages by tenant and recipient.
"""

import json
import re
import threading
import time

import statuses

PREFIX = "+6284"
CHANNELS = ["whatsapp_meta", "sms"]
TEXT = "Your order has shipped"


def mine(tenant_ids):
    """The SQL condition selecting the scenario's messages (alias m)."""
    return "m.tenant_id IN (%s) AND m.to_number LIKE '%s%%'" % (", ".join("'%s'" % t for t in tenant_ids), PREFIX)


class Sends(statuses.Poster):
    """`count` delivery-fallback sends over `conns` connections, each posting its next send
    when the last is answered."""

    def __init__(self, port, tokens, count, conns):
        super().__init__(port, "requests", {"ok": 0, "non2xx": 0})
        self.tokens = tokens
        self.count = count
        self.conns = conns
        self.next = 0

    def take(self):
        with self.lock:
            if self.next >= self.count:
                return None
            self.next += 1
            return self.next

    def body(self, i):
        return json.dumps({"to": "%s%07d" % (PREFIX, i), "text": TEXT, "deliveryMode": "fallback",
                           "channels": CHANNELS, "fallbackOn": "delivered"}).encode()

    def answered(self, status, data):
        if 200 <= status < 300:
            return {"ok": 1}
        self.last_error = "%d %s" % (status, data[:200])
        return {"non2xx": 1}

    def send(self, conn, i):
        headers = {"Content-Type": "application/json",
                   "Authorization": "Bearer " + self.tokens[i % len(self.tokens)]}
        return self.post(conn, "/api/omni/send", self.body(i), headers, self.answered)

    def run(self):
        def loop():
            conn = self.connect()
            while True:
                i = self.take()
                if i is None:
                    break
                conn = self.send(conn, i)
            conn.close()
        cpu0 = statuses.driver_cpu_s()
        t0 = time.monotonic()
        threads = [threading.Thread(target=loop, daemon=True) for _ in range(self.conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        lat = sorted(self.lat_ms)
        pct = statuses.percentile
        return dict(self.counts, wall_s=wall, rps=self.counts["requests"] / wall, p50_ms=pct(lat, 50),
                    p90_ms=pct(lat, 90), p99_ms=pct(lat, 99),
                    driver_cpu_share=(statuses.driver_cpu_s() - cpu0) / wall, last_error=self.last_error)


def metric(text, name, labels=""):
    """The value of one sample of a Prometheus text page (0 when absent): `labels` is the
    label set as written, e.g. 'kind="fallback"'."""
    want = name + ("{" + labels + "}" if labels else "")
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == want:
            return float(parts[1])
    return 0.0


def chains(psql, tenant_ids):
    """What the database holds for the scenario's chains: messages, how many got exactly one,
    none or several SMS attempts, how many have their SMS attempt sent, how many an attempt still
    pending, and the steps left for them."""
    row = psql("SELECT count(*), count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n = 0), "
               "count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE sent = 1), "
               "count(*) FILTER (WHERE pending > 0) FROM ("
               "SELECT (SELECT count(*) FROM attempts a WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference "
               "AND a.channel = 'sms') AS n, "
               "(SELECT count(*) FROM attempts a WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference "
               "AND a.channel = 'sms' AND a.status = 'sent') AS sent, "
               "(SELECT count(*) FROM attempts a WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference "
               "AND a.status = 'pending') AS pending "
               "FROM messages m WHERE %s) x" % mine(tenant_ids))
    msgs, one, none, several, sent, pending = (int(v) for v in row.split("|"))
    left = int(psql("SELECT count(*) FROM steps s JOIN messages m ON m.tenant_id = s.tenant_id "
                    "AND m.reference = s.reference WHERE %s" % mine(tenant_ids)))
    return {"messages": msgs, "one_sms": one, "no_sms": none, "several_sms": several, "sms_sent": sent,
            "pending": pending, "steps_left": left}


def lag(psql, tenant_ids):
    """Per chain, the time from the whatsapp_meta attempt's `failed` status reaching the
    gateway (delivery_statuses.received_at: the status write's transaction) to the SMS attempt
    starting (its attempted_at: the transaction writing it 'pending' just before the provider
    call), for the chains moved on by that status; count, p50, p99, max in ms, and how many took
    over 500 ms."""
    row = psql("WITH x AS (SELECT extract(epoch FROM s.attempted_at - d.received_at) * 1000 AS ms "
               "FROM messages m "
               "JOIN attempts w ON w.tenant_id = m.tenant_id AND w.reference = m.reference AND w.seq = 0 "
               "JOIN delivery_statuses d ON d.channel = 'whatsapp_meta' "
               "AND d.provider_message_id = w.provider_message_id AND d.status = 'failed' "
               "JOIN attempts s ON s.tenant_id = m.tenant_id AND s.reference = m.reference AND s.seq = 1 "
               "AND s.fallback_reason = 'status_failed' WHERE %s) "
               "SELECT count(*), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 'NaN'), "
               "coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'NaN'), coalesce(max(ms), 'NaN'), "
               "count(*) FILTER (WHERE ms > 500) FROM x" % mine(tenant_ids))
    n, p50, p99, mx, slow = row.split("|")
    return {"count": int(n), "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(mx),
            "over_500ms": int(slow)}


def peak_rate(samples, window=1.0):
    """The highest rate over any stretch of at least `window` seconds of (time, count) samples."""
    best, j = 0.0, 0
    for i in range(len(samples)):
        while j < len(samples) and samples[j][0] - samples[i][0] < window:
            j += 1
        if j == len(samples):
            break
        t, c = samples[j][0] - samples[i][0], samples[j][1] - samples[i][1]
        best = max(best, c / t)
    return best



def callbacks_in(text, provider):
    """The gateway's status callbacks of one provider by outcome (applied, duplicate,
    unknown_message: its attempt was not recorded yet, ...): omnigate_status_callbacks_total."""
    out = {}
    pat = re.compile(r'^omnigate_status_callbacks_total\{(.*)\} (\S+)$')
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("provider") == provider:
                out[labels.get("outcome", "")] = float(m.group(2))
    return out


def histogram(text, name):
    """A Prometheus histogram of a text page as [(upper bound, cumulative count)], +Inf last."""
    out = []
    pat = re.compile(r'^%s_bucket\{le="([^"]+)"\} (\S+)$' % re.escape(name))
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            out.append((float(m.group(1)), float(m.group(2))))
    return out


def histogram_delta(before, after):
    """What a histogram counted between two pages, with estimated p50 and p99: the upper bound
    of the bucket each falls in (what the buckets can tell), and the share within 1 s."""
    b = dict(before)
    buckets = [(le, c - b.get(le, 0.0)) for le, c in after]
    total = buckets[-1][1] if buckets else 0.0

    def bound(p):
        for le, c in buckets:
            if total and c >= p * total:
                return le
        return float("nan")
    within_1s = next((c for le, c in buckets if le == 1.0), float("nan"))
    return {"count": int(total), "p50_le_s": bound(0.5), "p99_le_s": bound(0.99),
            "within_1s": within_1s / total if total else float("nan")}
