"""Delivery statuses for the benchmark (issue 13): the attempts they are applied to, and the
load generator that posts them to POST /webhooks/meta (API.md §10), signed as Meta signs.

wrk cannot sign (its Lua has no HMAC), so the POSTs come from this process: threads, each with
one keep-alive http.client connection. Each POST carries 100 statuses for 100 distinct attempts
that exist and have no status yet, so every status is "applied" (none duplicate, none unknown):
ids come from one shared counter over a range of pre-created attempts, never reused. Bodies are
built and signed on the fly (a few tens of microseconds each); the driver's own CPU is measured
(getrusage of this process) and reported, so a driver that became the bottleneck would show.
"""

import hashlib
import hmac
import http.client
import json
import math
import resource
import threading
import time

PER_POST = 100
PATH = "/webhooks/meta"
# The body of a Meta status callback (API.md §10) around its statuses, as Meta sends it.
HEAD = ('{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"field":"messages",'
        '"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881",'
        '"phone_number_id":"109876543210"},"statuses":[')
TAIL = "]}}]}]}"
STATUS = '{"id":"wamid.B%d","status":"delivered","timestamp":"%d","recipient_id":"6281234567890"}'


def create_attempts(psql, tenant_id, count):
    """`count` sent messages of `tenant_id`, each with one accepted whatsapp_meta attempt whose
    provider message id is wamid.B<n> (n = 1..count) and references kb_<n, 9 digits> (so a
    range of n is a range of references), and the history a production database holds for
    them: Meta's first callback, `sent`, recorded and matched. The posted `delivered` is then a
    new status of each (applied). Then VACUUM ANALYZE of the three tables, so the measurements
    plan with statistics, as in production. delivery_statuses matters most: left empty (or
    analyzed empty), a send's completion write keeps a generic plan that reads all of
    delivery_statuses for each send (its `adopted` step, sql/queries/messages.sql), and sends
    slow down as statuses arrive."""
    psql("INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, "
         "winning_channel, completed_at) SELECT '%s', 'kb_' || lpad(i::text, 9, '0'), '+6281234567890', "
         "'Your order has shipped', 'fallback', '{whatsapp_meta}', 'sent', 'whatsapp_meta', now() "
         "FROM generate_series(1, %d) i" % (tenant_id, count))
    psql("INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, latency_ms, "
         "attempted_at, delivery_status) SELECT '%s', 'kb_' || lpad(i::text, 9, '0'), 0, 'whatsapp_meta', "
         "'sent', 'wamid.B' || i, 5, now(), 'sent' FROM generate_series(1, %d) i" % (tenant_id, count))
    psql("INSERT INTO delivery_statuses (channel, provider_message_id, status, at, matched) "
         "SELECT 'whatsapp_meta', 'wamid.B' || i, 'sent', now(), true FROM generate_series(1, %d) i" % count)
    for t in ("messages", "attempts", "delivery_statuses"):
        psql("VACUUM ANALYZE " + t)


def delivered_in(psql, tenant_id, first, last):
    """(delivered attempts, delivered messages) among the pre-created ones numbered first..last."""
    where = "tenant_id = '%s' AND reference BETWEEN 'kb_%09d' AND 'kb_%09d'" % (tenant_id, first, last)
    a = int(psql("SELECT count(*) FROM attempts WHERE %s AND delivery_status = 'delivered'" % where))
    m = int(psql("SELECT count(*) FROM messages WHERE %s AND status = 'delivered'" % where))
    return a, m


def percentile(sorted_ms, p):
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(math.ceil(p / 100 * len(sorted_ms))) - 1)]


def applied(status, data):
    """The counts of a status POST's answer."""
    if status != 200:
        raise RuntimeError("%d %s" % (status, data[:200]))
    d = json.loads(data)["data"]
    return {"applied": d["applied"], "duplicate": d["duplicate"], "unknown": d["unknown"]}


def driver_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Poster:
    """POSTs from several threads, each on its own keep-alive connection, recording each one's
    latency and what it counted (under a lock). `unit` is the counter every POST adds 1 to."""

    def __init__(self, port, unit, counts):
        self.port = port
        self.unit = unit
        self.lock = threading.Lock()
        self.lat_ms = []
        self.counts = dict(counts, **{unit: 0, "errors": 0})
        self.last_error = None

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def post(self, conn, path, body, headers, judge):
        """One POST; judge(status, body) returns the counts it adds (raising: an error). Returns
        the connection to use next (a new one after an error)."""
        t0 = time.perf_counter()
        try:
            conn.request("POST", path, body, headers)
            r = conn.getresponse()
            c = judge(r.status, r.read())
        except Exception as e:
            c = {"errors": 1}
            self.last_error = str(e)
            conn.close()
            conn = self.connect()
        ms = (time.perf_counter() - t0) * 1000
        with self.lock:
            self.lat_ms.append(ms)
            self.counts[self.unit] += 1
            for k, v in c.items():
                self.counts[k] += v
        return conn


class Driver(Poster):
    """Posts batches of statuses for the attempts numbered first..last, each number once."""

    def __init__(self, port, secret, first, last):
        super().__init__(port, "posts", {"applied": 0, "duplicate": 0, "unknown": 0})
        self.secret = secret.encode()
        self.next = first
        self.last = last
        self.stop = threading.Event()
        self.threads = []
        self.exhausted = False

    def take(self):
        """The first number of the next batch, or None when the range is used up."""
        with self.lock:
            if self.next + PER_POST - 1 > self.last:
                self.exhausted = True
                return None
            n = self.next
            self.next += PER_POST
            return n

    def body(self, first):
        ts = int(time.time())
        b = (HEAD + ",".join(STATUS % (n, ts) for n in range(first, first + PER_POST)) + TAIL).encode()
        return b, "sha256=" + hmac.new(self.secret, b, hashlib.sha256).hexdigest()

    def signed(self, conn, first):
        """One signed POST of the batch starting at `first`; returns the connection to use next."""
        body, sig = self.body(first)
        return self.post(conn, PATH, body, {"Content-Type": "application/json", "X-Hub-Signature-256": sig},
                         applied)

    def closed_loop(self, conns, duration):
        """`conns` connections, each posting its next batch as soon as the last is answered."""
        def run():
            conn = self.connect()
            while not self.stop.is_set():
                n = self.take()
                if n is None:
                    break
                conn = self.signed(conn, n)
            conn.close()
        self.start([run] * conns)
        # Until the duration is over, or sooner if every thread stopped (the range used up).
        end = time.monotonic() + duration
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        return self.finish()

    def paced(self, statuses_per_s):
        """Starts an open-loop stream: batches at fixed instants (statuses_per_s / 100 POSTs a
        second over several connections, so one slow answer does not delay the others); a
        connection that falls behind posts at once until it has caught up. finish() stops it."""
        posts_per_s = statuses_per_s / PER_POST
        k = max(4, math.ceil(posts_per_s / 10))
        period = k / posts_per_s
        t0 = time.monotonic()

        def run(offset):
            conn = self.connect()
            due = t0 + offset
            while not self.stop.is_set():
                wait = due - time.monotonic()
                if wait > 0 and self.stop.wait(wait):
                    break
                n = self.take()
                if n is None:
                    break
                conn = self.signed(conn, n)
                due += period
            conn.close()
        self.start([lambda o=i * period / k: run(o) for i in range(k)])
        self.target_per_s = statuses_per_s

    def start(self, fns):
        self.cpu0 = driver_cpu_s()
        self.t0 = time.monotonic()
        for f in fns:
            t = threading.Thread(target=f, daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self):
        """Stops the threads (an in-flight POST completes) and returns what they measured."""
        self.stop.set()
        for t in self.threads:
            t.join(60)
        wall = time.monotonic() - self.t0
        cpu = driver_cpu_s() - self.cpu0
        lat = sorted(self.lat_ms)
        c = self.counts
        out = dict(c, wall_s=wall, statuses_per_s=c["applied"] / wall, posts_per_s=c["posts"] / wall,
                   p50_ms=percentile(lat, 50), p90_ms=percentile(lat, 90), p99_ms=percentile(lat, 99),
                   driver_cpu_share=cpu / wall, driver_cpu_us_per_status=cpu * 1e6 / max(c["applied"], 1),
                   threads=len(self.threads), exhausted=self.exhausted, last_error=self.last_error)
        return out
