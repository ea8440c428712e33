"""Log readers for the benchmark (issue 16): what admins reading logs cost the tenants sending.

A tenant of its own ("bench-readers") gets a history of --reader-messages sent messages (one
accepted whatsapp_qr attempt each, one in ten with a failed whatsapp_qr attempt then an sms
one), generated in SQL with time-ordered references (ULIDs of their created_at, 100 ms apart,
as the gateway makes them), then VACUUM ANALYZE. Readers are threads of this process, each
with one keep-alive connection, asking GET /api/omni/logs (and /api/sms/logs) of that tenant
again as soon as answered, cycling through what an admin asks: the first page, the next
pages by cursor, and filters that match little or nothing (`to` a number with no message,
`status=failed`, `channel=sms`), the expensive ones. Answers are counted by status and error
code (200, 503 query_timeout, 503 unavailable, ...), latencies kept for percentiles.
"""

import http.client
import json
import threading
import time

from statuses import percentile

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
NO_SUCH_NUMBER = "%2B6289999999999"
QUERIES = [
    "/api/omni/logs?limit=50",
    "cursor",  # the page after the last first page this reader saw
    "/api/omni/logs?limit=50&to=" + NO_SUCH_NUMBER,
    "/api/omni/logs?limit=50&status=failed",
    "/api/omni/logs?limit=50&channel=sms",
    "/api/sms/logs?limit=50",
]


def _crockford_sql(expr, chars):
    """SQL text for `chars` Crockford base32 digits of the bigint `expr`, most significant first."""
    digits = ["substr('%s', ((%s >> %d) & 31)::int + 1, 1)" % (CROCKFORD, expr, 5 * (chars - 1 - k))
              for k in range(chars)]
    return " || ".join(digits)


def create_history(psql, tenant_id, count):
    """`count` sent messages of `tenant_id`, newest now, 100 ms apart, each with its attempts (see
    the module doc); references are 'kf_' + the ULID of created_at (10 digits of milliseconds,
    then 16 of the row number), so they sort as the gateway's own do."""
    ms = "(extract(epoch FROM t.at) * 1000)::bigint"
    ref = "'kf_' || %s || '000000' || %s" % (_crockford_sql(ms, 10), _crockford_sql("t.i::bigint", 10))
    psql("INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, "
         "winning_channel, created_at, completed_at) "
         "SELECT '%(t)s', %(ref)s, '+6281' || lpad((t.i %% 100000)::text, 9, '0'), 'Your order has shipped', "
         "'fallback', '{whatsapp_qr,sms}', 'sent', CASE WHEN t.i %% 10 = 0 THEN 'sms' ELSE 'whatsapp_qr' END, "
         "t.at, t.at + interval '5 ms' "
         "FROM (SELECT i, now() - (%(n)d - i) * interval '100 ms' AS at FROM generate_series(1, %(n)d) i) t"
         % {"t": tenant_id, "ref": ref, "n": count})
    psql("INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, error_code, "
         "latency_ms, attempted_at) "
         "SELECT m.tenant_id, m.reference, 0, 'whatsapp_qr', "
         "CASE WHEN m.winning_channel = 'sms' THEN 'failed' ELSE 'sent' END, "
         "CASE WHEN m.winning_channel = 'sms' THEN NULL ELSE 'wa.' || m.reference END, "
         "CASE WHEN m.winning_channel = 'sms' THEN 'provider_error' END, 5, m.created_at "
         "FROM messages m WHERE m.tenant_id = '%s'" % tenant_id)
    psql("INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, latency_ms, "
         "attempted_at) SELECT m.tenant_id, m.reference, 1, 'sms', 'sent', 'SM' || m.reference, 5, m.created_at "
         "FROM messages m WHERE m.tenant_id = '%s' AND m.winning_channel = 'sms'" % tenant_id)
    for t in ("messages", "attempts"):
        psql("VACUUM ANALYZE " + t)


class Readers:
    """`n` closed-loop log readers of one tenant (token), on the gateway at 127.0.0.1:port."""

    def __init__(self, port, token, n):
        self.port, self.token, self.n = port, token, n
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.lat_ms = []
        self.answers = {}  # "200", "503 query_timeout", ... -> count
        self.errors = 0
        self.last_error = None
        self.threads = []

    def _one(self, idx):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        hdrs = {"Authorization": "Bearer " + self.token}
        cursor, k = None, idx  # each reader starts elsewhere in the cycle
        while not self.stop_flag.is_set():
            q = QUERIES[k % len(QUERIES)]
            k += 1
            if q == "cursor":
                if cursor is None:
                    continue
                q = "/api/omni/logs?limit=50&cursor=" + cursor
            t = time.monotonic()
            try:
                conn.request("GET", q, headers=hdrs)
                r = conn.getresponse()
                body = r.read()
            except (OSError, http.client.HTTPException) as e:
                with self.lock:
                    self.errors += 1
                    self.last_error = repr(e)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                continue
            ms = (time.monotonic() - t) * 1000
            key = str(r.status)
            try:
                j = json.loads(body)
                if r.status != 200:
                    key += " " + j["error"]["code"]
                elif q.endswith("logs?limit=50"):
                    cursor = j["data"]["nextCursor"]
            except (ValueError, KeyError, TypeError):
                key += " (not JSON)"
            with self.lock:
                self.lat_ms.append(ms)
                self.answers[key] = self.answers.get(key, 0) + 1
        conn.close()

    def start(self):
        self.t0 = time.monotonic()
        for i in range(self.n):
            th = threading.Thread(target=self._one, args=(i,), daemon=True)
            th.start()
            self.threads.append(th)

    def finish(self):
        self.stop_flag.set()
        for th in self.threads:
            th.join(70)
        wall = time.monotonic() - self.t0
        lat = sorted(self.lat_ms)
        return {"readers": self.n, "wall_s": wall, "queries": len(lat), "queries_per_s": len(lat) / max(wall, 1e-9),
                "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else float("nan"),
                "answers": dict(sorted(self.answers.items())), "errors": self.errors, "last_error": self.last_error}
