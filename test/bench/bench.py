#!/usr/bin/env python3
"""Omnigate load benchmark driver (not a test). Started by test/bench/run.sh, which builds the
release binaries first.

In ONE run on loopback it starts a private PostgreSQL cluster (deploy/pg.sh: fsync=on,
synchronous_commit=on), the provider simulator, the gateway and (for the HTTP ceiling) nginx,
drives each scenario with wrk (Lua scripts for POST bodies and several tenants/tokens), and
records per scenario: requests/s, p50/p90/p99 latency, errors, gateway CPU us per request and
PostgreSQL CPU us per request (both from /proc accounting of the process trees), and gateway
RSS. At the end it checks durability: every send answered 2xx during the run has its message
row (and attempts) in the database.

The delivery-status scenarios (issue 13) post signed Meta status callbacks to
POST /webhooks/meta from this process (test/bench/statuses.py: wrk cannot sign), 100 statuses
per POST, each for a distinct pre-created attempt (a tenant of their own, so they never count
as sends): `statuses` at full speed, `fallback_with_statuses` as a fixed-rate stream alongside
the `fallback_first` wrk run, to compare sends/s with and without it.

The durable-step scenarios (issue 14; test/bench/steps.py): `fallback_steps` makes 10,000
delivery-fallback sends (whatsapp_meta then sms, `fallbackOn: delivered`) whose WhatsApp
attempt the simulator accepts and then fails by a signed status callback (a simulator rule), and
measures from the database the time from that callback reaching the gateway to the SMS attempt
starting (p50, p99), the steps done per second, and that every chain got exactly one SMS and
left no step; `steps_idle` measures the gateway's and PostgreSQL's CPU with 100,000 steps due
in an hour and nothing else running. The simulator runs with --callback-url pointing at the
gateway throughout; the other scenarios' recipients script no callbacks.

The log-reader scenario (issue 16; test/bench/readers.py): `fallback_readers` runs fallback_first's
wrk three times back to back, without log readers, with --readers closed-loop readers of a
tenant holding --reader-messages messages (first pages, cursor pages, filters matching nothing),
and without again, and compares the middle run with the mean of the two around it: what admins
reading logs cost the sends (their queries go to the read connections, OMNIGATE_DB_READ_POOL).

The scenarios of issue 16 (test/bench/logscale.py), each on a database of its own in the same
cluster: `cold` makes fallback sends on a database never analyzed and again after ANALYZE (the
rate of the last 5 s of each); `logs_scale` (only when asked for: it loads 10 million sends)
times every log filter's page, database and HTTP.

The tenant-webhook scenarios (issue 18; test/bench/webhooks.py): `fallback_webhooks` is
fallback_first's wrk run with each send tenant's webhook (message.sent) delivered to the
simulator's fast receiver (POST /__sim/hooks/ok), `fallback_webhook_hang` the same while one
tenant's endpoint never answers (/__sim/hooks/hang), to compare sends/s and p99;
`webhooks_drain` writes --wh-events events at once and measures events delivered per second;
`webhooks_lag` streams signed status callbacks at --wh-rate per second, each making a message
delivered (one message.delivered event each), and measures the outbox lag.

The queued-delivery scenarios (issue 31; test/bench/queue.py, whose docstring details each; the
group `queue` runs them all): `queue_drain` accepts --queue-messages queued sends (one sendAt
ahead) and times their unpaced drain, against fallback_first's sends/s and PostgreSQL CPU per
send in the same scenario; `queue_priority` puts 5 `high` messages through HTTP behind
--priority-backlog `low` ones (generated in SQL) of a sender at --priority-rate and reads when
each attempt started; `queue_pacing` (opt-in: --pacing-messages / --pacing-rate s) runs
--pacing-instances gateways on the one database against the simulator's per-sender limit and
counts each 10 s window's calls and the 429s; `queue_scale` (opt-in: it loads a million messages
into a database of its own) times the claim at --scale-sizes backlogs and measures sync p99
while --scale-backlog messages drain at each of --scale-rates; `queue_statements` (opt-in diagnostic)
restarts PostgreSQL with pg_stat_statements and lists the statements of a sync send, a queued
accept and the drain.

`batch_accept` (issue 32; test/bench/batches.py) posts --batch-count batches of 1,000 messages
from 4 threads: the answers' p99, PostgreSQL CPU per batched message (accept and drain) against
fallback_first's per send in the same scenario, and the batch counts' reads while it drains;
`batch_counts` reads the counts of a --batch-big (100,000) message batch (1,000 through HTTP, the
rest generated in SQL) every 50 ms while it drains.

`consent` (issue 33, opt-in; test/bench/consent.py) measures sync sends/s with each worker's
consent copy empty and holding --consent-rows (1,000,000) suppressions and as many WhatsApp
windows, how long the copies take to read them, and a cold start on them.

`usage` (issue 34, opt-in; test/bench/usage.py) makes a year of --usage-messages (10,000,000)
messages for one tenant as the write path makes them (the usage triggers keep the totals), then
times GET /api/usage for the year by day, channel and both (p99 target < 50 ms), its plan, and
the first request after a restart.

Usage: bench.py --omnigate BIN --sim BIN [--scenarios a,b,...] [--duration 10] [--conns 64]
                [--workers 1] [--out DIR] [--status-conns 8] [--status-rate 5000]
                [--status-attempts 1000000] [--steps-sends 10000] [--steps-conns 16]
                [--steps-history 200000] [--idle-steps 100000] [--readers 8] [--reader-messages 1000000]
                [--cold-duration 30] [--logs-messages 10000000] [--logs-queries 100]
                [--wh-events 40000] [--wh-rate 1000] [--queue-messages 20000] [--pacing-messages 5000]
                [--pacing-rate 50] [--pacing-instances 3] [--priority-backlog 100000] [--priority-rate 1000]
                [--scale-sizes 1000,100000,1000000] [--scale-backlog 100000] [--scale-rates 1000,80]
                [--consent-rows 1000000] [--usage-messages 10000000]
Scenarios: see SCENARIOS below; --scenarios also takes the groups of GROUPS (queue). Results: DIR/bench.json and DIR/bench.md.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import logscale
import batches as batches_bench
import consent as consent_bench
import usage as usage_bench
import queue as queue_bench
import readers
import statuses
import steps
import webhooks

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLK_TCK = os.sysconf("SC_CLK_TCK")
SECRET = "bench-secret-0123456789abcdef"
ADMIN = "bench-admin-token-0123456789"
QR_KEY = "bench-waha-key"
SMS_SID = "AC00000000000000000000000000bench"
SMS_TOKEN = "bench-sms-auth-token"
TENANTS = 4  # tenants (one token each) the send scenarios spread over
META_SECRET = "bench-meta-app-secret-0123"  # OMNIGATE_META_APP_SECRET: enables POST /webhooks/meta
QR_HOOK_SECRET = "bench-waha-webhook-secret"  # OMNIGATE_QR_WEBHOOK_SECRET: enables POST /webhooks/waha


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_http(url, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError(url + " did not answer 200")


def http_json(method, url, token=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


# ---- /proc accounting ---------------------------------------------------------------------

def children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid):
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children(p)
    return seen


def proc_stat(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime=14, stime=15, cutime=16, cstime=17
    return {"utime": int(fields[11]), "stime": int(fields[12]), "cutime": int(fields[13]),
            "cstime": int(fields[14])}


def cpu_ticks(root_pid):
    """CPU ticks of a process tree: every live process's own time, plus the root's reaped
    children (cutime/cstime; covers workers or backends that exited during the run)."""
    total = 0
    for p in tree(root_pid):
        try:
            st = proc_stat(p)
        except OSError:
            continue
        total += st["utime"] + st["stime"]
        if p == root_pid:
            total += st["cutime"] + st["cstime"]
    return total


def pg_role(pid):
    """What a PostgreSQL process is, from its title: backend, autovacuum, walwriter,
    checkpointer, bgwriter or other (the postmaster, launchers)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            title = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    for key, role in (("autovacuum worker", "autovacuum"), ("walwriter", "walwriter"),
                      ("checkpointer", "checkpointer"), ("background writer", "bgwriter"),
                      ("launcher", "other"), ("logger", "other")):
        if key in title:
            return role
    return "backend" if title.startswith("postgres: ") else "other"


class RoleCpu:
    """CPU ticks of a PostgreSQL tree by the role of each process (pg_role), sampled every
    period s by a thread: a process seen first after the start counts whole, one already
    running from where it was; one that exits keeps what it had at its last sample (the rest of
    it, under a period, is in `unseen`: the tree's total less the roles'). Tells the queries'
    cost (backends) from autovacuum's and the WAL writer's."""

    def __init__(self, root_pid, period=0.05):
        self.root, self.period = root_pid, period
        self.pids = {}  # pid -> [role, ticks at first sight (0 if born since), last ticks]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.total0 = cpu_ticks(root_pid)
        self.sample(first=True)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def sample(self, first=False):
        for p in tree(self.root):
            try:
                st = proc_stat(p)
            except OSError:
                continue
            t = st["utime"] + st["stime"]
            with self.lock:
                if p in self.pids:
                    self.pids[p][2] = t
                    continue
            role = "postmaster" if p == self.root else pg_role(p)
            if role is None:
                continue
            with self.lock:
                self.pids[p] = [role, t if first else 0, t]

    def run(self):
        while not self.stop.wait(self.period):
            self.sample()

    def snapshot(self):
        """Ticks per role since the start, and `unseen`."""
        self.sample()
        out = {}
        with self.lock:
            for role, base, last in self.pids.values():
                out[role] = out.get(role, 0) + last - base
        out["unseen"] = cpu_ticks(self.root) - self.total0 - sum(out.values())
        return out

    def close(self):
        self.stop.set()
        self.thread.join()


def role_us(a, b, n):
    """us per item of each role between two snapshots."""
    return dict((k, round((b.get(k, 0) - a.get(k, 0)) * 1e6 / CLK_TCK / max(n, 1), 1)) for k in sorted(set(a) | set(b)))


def cpu_ns(root_pid):
    """CPU time of a process tree in nanoseconds, for small amounts (idle): the scheduler's
    exact run time of every live thread (/proc/PID/task/TID/schedstat) rather than utime and
    stime, which are sampled per 10 ms tick. Reaped children count by their ticks, as in
    cpu_ticks."""
    total = 0
    for p in tree(root_pid):
        try:
            for tid in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/schedstat" % (p, tid)) as f:
                    total += int(f.read().split()[0])
            if p == root_pid:
                st = proc_stat(p)
                total += (st["cutime"] + st["cstime"]) * 1000000000 // CLK_TCK
        except OSError:
            continue
    return total


def rss_parts_kib(root_pid):
    """(resident, of which anonymous, of which file-backed) KiB of a process tree, from
    /proc/PID/status (VmRSS, RssAnon, RssFile): anonymous is what the processes allocated,
    file-backed the pages of their program and libraries."""
    want = {"VmRSS:": 0, "RssAnon:": 1, "RssFile:": 2}
    total = [0, 0, 0]
    for p in tree(root_pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    k = line.split(None, 1)[0] if line.strip() else ""
                    if k in want:
                        total[want[k]] += int(line.split()[1])
        except OSError:
            pass
    return tuple(total)


def rss_kib(root_pid):
    return rss_parts_kib(root_pid)[0]


# ---- the pieces -----------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="omnigate-bench.")
        self.procs = []
        self.pg_dir = os.path.join(self.tmp, "pg")
        self.results = []

    def spawn(self, argv, env=None, name="proc"):
        errlog = open(os.path.join(self.tmp, name + ".log"), "ab")
        p = subprocess.Popen(argv, env=env, stdout=errlog, stderr=errlog, start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=30):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def close(self):
        for p in reversed(self.procs):
            self.stop(p)
        subprocess.run(["bash", os.path.join(ROOT, "deploy/pg.sh"), "stop", self.pg_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        real = os.path.realpath(self.pg_dir)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if real != self.pg_dir:
            shutil.rmtree(real, ignore_errors=True)

    # -- PostgreSQL
    def start_pg(self):
        port = free_port()
        out = subprocess.run(["bash", os.path.join(ROOT, "deploy/pg.sh"), "start", self.pg_dir, str(port)],
                             capture_output=True, text=True, check=True)
        self.db_url = out.stdout.strip().splitlines()[-1]
        pidfile = os.path.join(os.path.realpath(self.pg_dir), "data", "postmaster.pid")
        with open(pidfile) as f:
            self.pg_pid = int(f.readline())
        env = self.env()
        subprocess.run([self.args.omnigate, "migrate"], env=env, check=True, capture_output=True)
        log("PostgreSQL on port %d: synchronous_commit=%s fsync=%s" % (
            port, self.psql("SHOW synchronous_commit"), self.psql("SHOW fsync")))

    def psql(self, sql):
        return subprocess.run(["psql", self.db_url, "-XAtq", "-c", sql], capture_output=True, text=True,
                              check=True).stdout.strip()

    def psql_super(self, sql):
        """As the superuser (CHECKPOINT, VACUUM of every table): deploy/pg.sh's cluster has
        "postgres", trusted on loopback."""
        return subprocess.run(["psql", self.db_url.replace("//omnigate@", "//postgres@", 1), "-XAtq", "-c", sql],
                              capture_output=True, text=True, check=True).stdout.strip()

    # -- simulator
    def start_sim(self):
        """The simulator, calling the gateway back with status webhooks signed as the providers
        sign them (only for what a rule or a recipient's fourth magic digit scripts). The
        gateway's port is chosen here, before the gateway starts, and kept for its restarts."""
        self.sim_port = free_port()
        self.og_port = free_port()
        env = dict(os.environ, OMNIGATE_QR_API_KEY=QR_KEY, OMNIGATE_SMS_ACCOUNT_SID=SMS_SID,
                   OMNIGATE_SMS_AUTH_TOKEN=SMS_TOKEN, OMNIGATE_ACCESS_LOG="false",
                   OMNIGATE_META_APP_SECRET=META_SECRET, OMNIGATE_QR_WEBHOOK_SECRET=QR_HOOK_SECRET)
        self.sim = self.spawn([self.args.sim, "serve", "--listen", "127.0.0.1:%d" % self.sim_port,
                               "--callback-url", self.og_url("")], env, "sim")
        wait_http(self.sim_url("/__sim/stats"))

    def sim_url(self, path):
        return "http://127.0.0.1:%d%s" % (self.sim_port, path)

    def sim_stats(self):
        st, j = http_json("GET", self.sim_url("/__sim/stats"))
        assert st == 200, j
        return j["data"]

    def callbacks_settled(self, timeout=30):
        """Waits until the simulator has no callback under way; False when some still are."""
        end = time.monotonic() + timeout
        while self.sim_stats()["callbacks"]["pending"] > 0:
            if time.monotonic() > end:
                return False
            time.sleep(0.1)
        return True

    def env(self, extra=None):
        sim = "http://127.0.0.1:%d" % getattr(self, "sim_port", 1)
        e = dict(os.environ, OMNIGATE_DATABASE_URL=self.db_url, OMNIGATE_SECRET=SECRET,
                 OMNIGATE_ADMIN_TOKEN=ADMIN, OMNIGATE_META_BASE_URL=sim, OMNIGATE_QR_BASE_URL=sim,
                 OMNIGATE_QR_API_KEY=QR_KEY, OMNIGATE_SMS_BASE_URL=sim, OMNIGATE_SMS_ACCOUNT_SID=SMS_SID,
                 OMNIGATE_SMS_AUTH_TOKEN=SMS_TOKEN, OMNIGATE_ACCESS_LOG="false",
                 OMNIGATE_IDLE_TIMEOUT_MS="600000", OMNIGATE_META_APP_SECRET=META_SECRET,
                 OMNIGATE_QR_WEBHOOK_SECRET=QR_HOOK_SECRET,
                 # Tenant webhooks call the simulator on loopback, over http.
                 OMNIGATE_WEBHOOK_ALLOW_HTTP="true", OMNIGATE_WEBHOOK_ALLOW_PRIVATE="true",
                 OMNIGATE_PUBLIC_URL="http://127.0.0.1:%d" % getattr(self, "og_port", 1))
        if extra:
            e.update(extra)
        return e

    # -- gateway
    def start_gateway(self, extra=None, prefix=(), timeout=20, log_pipe=False):
        """The gateway; with log_pipe its stderr is a pipe a thread drains into its log file, as
        journald or a container runtime read a service's output (else the file itself)."""
        argv = list(prefix) + [self.args.omnigate, "serve", "--listen", "127.0.0.1:%d" % self.og_port,
                               "--workers", str(self.args.workers)]
        if log_pipe:
            out = open(os.path.join(self.tmp, "omnigate.log"), "ab")
            self.og = subprocess.Popen(argv, env=self.env(extra), stdout=out, stderr=subprocess.PIPE,
                                       start_new_session=True)
            self.procs.append(self.og)
            src = self.og.stderr
            threading.Thread(target=lambda: shutil.copyfileobj(src, out, 1 << 16), daemon=True).start()
        else:
            self.og = self.spawn(argv, self.env(extra), "omnigate")
        wait_http(self.og_url("/readyz"), timeout)

    def stop_gateway(self):
        self.stop(self.og)
        self.procs.remove(self.og)

    def og_url(self, path):
        return "http://127.0.0.1:%d%s" % (self.og_port, path)

    def metrics(self):
        with urllib.request.urlopen(self.og_url("/metrics"), timeout=10) as r:
            return r.read().decode()

    def make_tenants(self):
        settings = {
            "defaultChannels": ["whatsapp_qr", "whatsapp_meta", "sms"],
            "defaultWhatsappFrom": "6281234567890",
            "channels": {
                "whatsapp_qr": {"enabled": True, "numbers": {"6281234567890": {"session": "default"}}},
                "whatsapp_meta": {"enabled": True, "numbers": {"6281234567890": {
                    "phoneNumberId": "109876543210", "accessToken": "EAAGbench0000000000",
                    "wabaId": BENCH_WABA}}},
                "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"}}}
        self.settings = settings
        # A global rate card of a realistic size (API.md §22: 750 entries, a price per country
        # code and channel), so that sends price their accepted attempts as in production.
        card = {"currency": "USD", "rates": [
            {"channel": ch, "prefix": "+%d" % n, "price": "0.%04d" % (n * 7 % 10000)}
            for n in range(1, 251) for ch in ("whatsapp_qr", "whatsapp_meta", "sms")]}
        st, j = http_json("PUT", self.og_url("/admin/rates"), ADMIN, card)
        assert st == 200, j
        self.tokens, self.tenant_ids = [], []
        for i in range(TENANTS):
            st, j = http_json("POST", self.og_url("/admin/tenants"), ADMIN,
                              {"name": "bench-%d" % i, "unifiedApiEnabled": True, "settings": settings})
            assert st == 201, j
            self.tenant_ids.append(j["data"]["id"])
            st, t = http_json("POST", self.og_url("/admin/tenants/%s/tokens" % j["data"]["id"]), ADMIN, {})
            assert st == 201, t
            self.tokens.append(t["data"]["token"])
        # The pre-created messages the status scenarios deliver belong to a tenant that sends
        # nothing, so the durability check (send tenants only) never counts them.
        st, j = http_json("POST", self.og_url("/admin/tenants"), ADMIN,
                          {"name": "bench-statuses", "unifiedApiEnabled": True, "settings": settings})
        assert st == 201, j
        self.status_tenant = j["data"]["id"]

    # -- nginx
    def start_nginx(self):
        d = os.path.join(self.tmp, "nginx")
        os.makedirs(d, exist_ok=True)
        self.ng_port = free_port()
        body = '{"success":true,"message":"ok","data":{"status":"ok"}}'
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write("""worker_processes %d; worker_rlimit_nofile 65536; daemon off; pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 20000; multi_accept on; }
http { access_log off; keepalive_requests 1000000; keepalive_timeout 600s;
  client_body_temp_path %s/body; proxy_temp_path %s/proxy; fastcgi_temp_path %s/fcgi;
  uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;
  server { listen 127.0.0.1:%d; location / { default_type application/json; return 200 '%s'; } } }
""" % (self.args.workers, d, d, d, d, d, d, d, self.ng_port, body))
        self.nginx = self.spawn(["nginx", "-c", os.path.join(d, "nginx.conf"), "-p", d], None, "nginx")
        wait_http("http://127.0.0.1:%d/healthz" % self.ng_port)

    # -- wrk
    def lua(self, name, method, path, bodies, tokens):
        """A wrk script sending `bodies` round-robin with `tokens` round-robin. Each body may
        contain {n}: replaced by a per-request counter (unique recipients and OTP numbers)."""
        p = os.path.join(self.tmp, name + ".lua")
        toks = ", ".join('"%s"' % t for t in tokens) if tokens else ""
        bl = ", ".join("[[%s]]" % b for b in bodies) if bodies else ""
        with open(p, "w") as f:
            f.write("""
local tokens = { %s }
local bodies = { %s }
local counter = 0
thread_id = 0 -- a global: setup() gives each thread its own through thread:set
local ids = 0
function setup(thread) ids = ids + 1; thread:set("thread_id", ids) end
function request()
  counter = counter + 1
  local h = { }
  if #tokens > 0 then h["Authorization"] = "Bearer " .. tokens[(counter %% #tokens) + 1] end
  if #bodies == 0 then return wrk.format("%s", "%s", h) end
  h["Content-Type"] = "application/json"
  local b = bodies[(counter %% #bodies) + 1]
  b = string.gsub(b, "{n}", string.format("%%d%%05d", thread_id, counter %% 100000))
  return wrk.format("%s", "%s", h, b)
end
""" % (toks, bl, method, path, method, path))
        return p

    def wrk(self, url, conns, duration, script=None, threads=None, timeout="10s"):
        threads = threads or min(2, conns)
        argv = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency", "--timeout", timeout]
        if script:
            argv += ["-s", script]
        out = subprocess.run(argv + [url], capture_output=True, text=True).stdout
        return parse_wrk(out)

    def measure(self, name, url, conns=None, duration=None, script=None, pid=None, note="", expect_errors=False,
                **kw):
        """One scenario: wrk against url, with CPU of the target tree and of PostgreSQL."""
        conns = conns or self.args.conns
        duration = duration or self.args.duration
        pid = pid if pid is not None else self.og.pid
        log("%s: wrk -c%d -d%ds %s" % (name, conns, duration, url))
        t0, p0 = cpu_ticks(pid), cpu_ticks(self.pg_pid)
        w = self.wrk(url, conns, duration, script, **kw)
        t1, p1 = cpu_ticks(pid), cpu_ticks(self.pg_pid)
        n = max(w["requests"], 1)
        r = dict(w, scenario=name, conns=conns, duration_s=duration, note=note, expect_errors=expect_errors,
                 cpu_us_per_req=(t1 - t0) * 1e6 / CLK_TCK / n,
                 pg_cpu_us_per_req=(p1 - p0) * 1e6 / CLK_TCK / n,
                 rss_kib=rss_kib(pid))
        log("%s: %.0f req/s, p50 %.2f ms, p99 %.2f ms, errors %d, CPU %.1f us/req, PG %.1f us/req" % (
            name, r["rps"], r["p50_ms"], r["p99_ms"], r["errors"], r["cpu_us_per_req"], r["pg_cpu_us_per_req"]))
        self.results.append(r)
        return r


def to_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    if not m:
        return float("nan")
    x, u = float(m.group(1)), m.group(2)
    return {"us": x / 1000, "ms": x, "s": x * 1000, "m": x * 60000}[u]


def parse_wrk(out):
    r = {"rps": 0.0, "requests": 0, "errors": 0, "non2xx": 0, "p50_ms": float("nan"), "p90_ms": float("nan"),
         "p99_ms": float("nan"), "raw": out}
    for line in out.splitlines():
        s = line.strip()
        m = re.match(r"(\d+) requests in", s)
        if m:
            r["requests"] = int(m.group(1))
        m = re.match(r"Requests/sec:\s+([\d.]+)", s)
        if m:
            r["rps"] = float(m.group(1))
        m = re.match(r"(50|90|99)%\s+(\S+)", s)
        if m:
            r["p%s_ms" % m.group(1)] = to_ms(m.group(2))
        m = re.match(r"Non-2xx or 3xx responses:\s+(\d+)", s)
        if m:
            r["non2xx"] = int(m.group(1))
        m = re.match(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", s)
        if m:
            r["errors"] += sum(int(x) for x in m.groups())
    r["errors"] += r["non2xx"]
    return r


# ---- scenarios --------------------------------------------------------------------------------

def sc_healthz(b):
    b.measure("healthz", b.og_url("/healthz"), note="GET /healthz")


def sc_access_log(b):
    """GET /healthz with the default access log (one JSON line a request) against the same build
    without it, in one run, for each place stderr goes: a regular file (as every other scenario
    here) and a pipe a reader drains (journald, a container runtime). Per sink: off, on, off, on,
    the gateway restarted each time; the cost is the ratio of the means (issue 29: >= 0.90)."""
    for sink in ("file", "pipe"):
        runs = {"off": [], "on": []}
        for rnd in (1, 2):
            for mode in ("off", "on"):
                b.stop_gateway()
                b.start_gateway(extra={"OMNIGATE_ACCESS_LOG": "true" if mode == "on" else "false"},
                                log_pipe=sink == "pipe")
                r = b.measure("healthz_log_%s_%s_%d" % (sink, mode, rnd), b.og_url("/healthz"),
                              note="GET /healthz, access log %s, stderr a %s" % (mode, sink))
                runs[mode].append(r["rps"])
        on, off = statistics.mean(runs["on"]), statistics.mean(runs["off"])
        b.results.append({"scenario": "access_log_" + sink, "sink": sink, "rps": on, "rps_off": off,
                          "ratio": on / max(off, 1e-9), "runs": runs,
                          "note": "mean req/s of /healthz with the access log / without, stderr a " + sink})
        log("access_log_%s: %.0f req/s with, %.0f without: %.3f" % (sink, on, off, on / max(off, 1e-9)))
    b.stop_gateway()
    b.start_gateway()


def sc_nginx(b):
    b.start_nginx()
    b.measure("nginx", "http://127.0.0.1:%d/healthz" % b.ng_port, pid=b.nginx.pid,
              note="nginx static 200, same worker count: the HTTP ceiling")
    b.stop(b.nginx)


def send_script(b, name, to, mode="fallback", text="Your order has shipped"):
    body = json.dumps({"to": to, "text": text, "deliveryMode": mode})
    return b.lua(name, "POST", "/api/omni/send", [body], b.tokens)


def wal_lsn(b):
    return b.psql_super("SELECT pg_current_wal_lsn()")


def wal_since(b, lsn):
    """Bytes of WAL written since `lsn` (every process of the cluster)."""
    return int(b.psql_super("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '%s')" % lsn))


class Profile:
    """`perf record` of one process (the gateway's worker) while a scenario runs: cpu-clock
    samples (a software event: this machine's VM has no hardware counters) at 999 Hz, no call
    graphs (cheap enough not to move the scenario's own figures much). None of this runs when
    perf is missing or refuses: the benchmark goes on without a profile."""

    def __init__(self, b, pid, seconds, name):
        """pid: one process, or a list of them (profiled together)."""
        pid = ",".join(str(p) for p in pid) if isinstance(pid, list) else str(pid)
        self.path = os.path.join(b.tmp, name + ".perf.data")
        self.p = None
        if shutil.which("perf") is None:
            log("perf not found: no profile")
            return
        self.p = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-p", pid, "-o",
                                   self.path, "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)

    def finish(self, top=30):
        """{"symbols": [(pct, dso, symbol)], "dsos": [(pct, dso)], "samples": n} or None."""
        if self.p is None:
            return None
        _, err = self.p.communicate()
        if self.p.returncode != 0 or not os.path.exists(self.path):
            log("perf record failed: %s" % err.decode(errors="replace").strip()[-300:])
            return None
        out = {}
        for key, sort in (("symbols", "dso,symbol"), ("dsos", "dso")):
            r = subprocess.run(["perf", "report", "-i", self.path, "--stdio", "--no-children", "--sort", sort,
                                "--percent-limit", "0.3"], capture_output=True, text=True)
            rows = []
            for line in r.stdout.splitlines():
                m = re.match(r"\s*([\d.]+)%\s+(\S+)\s*(?:\[.\]\s+(.*))?$", line)
                if m and not line.lstrip().startswith("#"):
                    # perf 6 appends IPC columns ("-  -") where the CPU has no branch records.
                    sym = re.sub(r"(\s+-)+\s*$", "", m.group(3) or "").strip()
                    rows.append((float(m.group(1)), m.group(2), sym))
                m = re.match(r"# Samples: ([\d.]+)([KM]?)", line)
                if m:
                    out["samples"] = int(float(m.group(1)) * {"": 1, "K": 1000, "M": 1000000}[m.group(2)])
            out[key] = rows[:top]
        return out


def proc_title(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def pg_roles(pg_pid):
    """CPU ticks of each PostgreSQL process by its role (the process title without the client's
    address and state: "walwriter", "omnigate omnigate #PID" for a backend, ...), plus "reaped"
    for processes that exited (autovacuum workers, mostly)."""
    out = {"reaped": 0}
    for p in tree(pg_pid):
        try:
            st = proc_stat(p)
        except OSError:
            continue
        if p == pg_pid:
            out["reaped"] = st["cutime"] + st["cstime"]
            title = "postmaster"
        else:
            title = re.sub(r"^postgres: (\S+: )?", "", proc_title(p))
            title = re.sub(r"\s+\S*\(\d+\).*$|\s+\[local\].*$", "", title)
            title = "%s #%d" % (title, p) if "omnigate" in title or "postgres" in title else title
        out[title] = out.get(title, 0) + st["utime"] + st["stime"]
    return out


def batch_sums(text):
    """(write batches, operations in them, seconds waiting for their COMMIT) from /metrics."""
    return tuple(steps.metric(text, name) for name in (
        "omnigate_db_batch_operations_count", "omnigate_db_batch_operations_sum",
        "omnigate_db_commit_duration_seconds_sum"))


def sc_fallback_first(b):
    # An ordinary number: whatsapp_qr (first) succeeds, nothing else is called. WAL bytes per
    # send from the cluster's insert position; a perf profile of the (first) worker; where
    # PostgreSQL's CPU goes (by process) and how many operations a write batch carries.
    lsn = wal_lsn(b)
    m0, roles0 = batch_sums(b.metrics()), pg_roles(b.pg_pid)
    prof = Profile(b, children(b.og.pid)[0], b.args.duration, "fallback_first")
    backends = [p for p in children(b.pg_pid) if proc_title(p).startswith("postgres: omnigate")]
    pg_prof = Profile(b, backends, b.args.duration, "fallback_first_pg") if backends else None
    r = b.measure("fallback_first", b.og_url("/api/omni/send"), script=send_script(b, "ff", "+6281{n}"),
                  note="fallback, first channel succeeds")
    r["wal_bytes_per_req"] = wal_since(b, lsn) / max(r["requests"], 1)
    r["profile"] = prof.finish()
    r["pg_profile"] = pg_prof.finish() if pg_prof else None
    m1, roles1 = batch_sums(b.metrics()), pg_roles(b.pg_pid)
    n = max(r["requests"], 1)
    r["pg_roles_us_per_req"] = sorted(((k, (v - roles0.get(k, 0)) * 1e6 / CLK_TCK / n) for k, v in roles1.items()
                                       if v - roles0.get(k, 0) > 0), key=lambda kv: -kv[1])
    batches = max(m1[0] - m0[0], 1)
    r["batch_ops"] = (m1[1] - m0[1]) / batches
    r["batch_ms"] = (m1[2] - m0[2]) * 1000 / batches
    log("fallback_first: %.0f WAL bytes per send; %.1f ops per write batch, %.2f ms to COMMIT; PostgreSQL by "
        "process, us/send: %s" % (r["wal_bytes_per_req"], r["batch_ops"], r["batch_ms"],
                                  ", ".join("%s %.1f" % kv for kv in r["pg_roles_us_per_req"])))


BENCH_WABA = "102290129340398"
BENCH_TEMPLATE = {"name": "order_update", "language": "en_US", "status": "APPROVED", "category": "UTILITY",
                  "components": [{"type": "BODY", "text": "Hi {{1}}, your order {{2}} ships today"}]}


def load_catalogue(b):
    """The bench WABA's catalogue in the simulator: order_update and 999 generated templates (so
    a sync reads 10 pages of 100). Loaded before the tenants are made: saving their settings
    (a number with a wabaId) makes each tenant's sync due at once."""
    st, j = http_json("PUT", "http://127.0.0.1:%d/__sim/meta/wabas/%s/templates" % (b.sim_port, BENCH_WABA), None,
                      {"phoneNumberIds": ["109876543210"], "templates": [BENCH_TEMPLATE], "generate": 999})
    assert st == 200, j


def sc_templates(b):
    """Issue 30: a template send next to a free text on the same channel (whatsapp_meta only),
    alternated text, template, text, template in one run. What it must show: no extra database
    round trip for a template (the catalogue entry comes from the worker's cache; the template's
    record rides on the pending insert's write): database operations per send (from the write
    batches' operation counts in /metrics) and sends/s as a ratio to the text sends. Before it,
    the admin sync route reads the 1,000-template catalogue (10 pages) once per tenant, timed."""
    times = []
    for tid in b.tenant_ids:
        t0 = time.monotonic()
        st, j = http_json("POST", b.og_url("/admin/tenants/%s/templates/sync" % tid), ADMIN, None)
        times.append(time.monotonic() - t0)
        assert st == 200 and j["data"]["synced"] == 1000, j
    log("templates: sync of 1,000 templates (10 pages): %s s" % ", ".join("%.3f" % t for t in times))
    text = json.dumps({"to": "+6282{n}", "text": "Hi Ana, your order A-17 ships today", "channels": ["whatsapp_meta"]})
    tpl = json.dumps({"to": "+6283{n}", "channels": ["whatsapp_meta"],
                      "template": {"name": "order_update", "language": "en_US", "parameters": ["Ana", "A-17"]}})
    out = {}
    for name, body in (("meta_text", text), ("meta_template", tpl), ("meta_text2", text), ("meta_template2", tpl)):
        m0 = batch_sums(b.metrics())
        r = b.measure(name, b.og_url("/api/omni/send"), script=b.lua(name, "POST", "/api/omni/send", [body], b.tokens),
                      note="whatsapp_meta only, " + ("a template" if "template" in name else "a free text"))
        m1 = batch_sums(b.metrics())
        r["db_ops_per_send"] = (m1[1] - m0[1]) / max(r["requests"], 1)
        out[name] = r
    text_rps = (out["meta_text"]["rps"] + out["meta_text2"]["rps"]) / 2
    tpl_rps = (out["meta_template"]["rps"] + out["meta_template2"]["rps"]) / 2
    b.templates = {"sync_s": times, "ops": {k: v["db_ops_per_send"] for k, v in out.items()},
                   "rps_ratio": tpl_rps / max(text_rps, 1)}
    log("templates: database operations per send %s; template/text sends/s %.3f" % (
        ", ".join("%s %.3f" % (k, v) for k, v in b.templates["ops"].items()), b.templates["rps_ratio"]))


def sc_fallback_with_statuses(b):
    """fallback_first's wrk run again (same script, connections and duration) while a stream of
    status callbacks posts at a fixed rate: what delivery statuses cost the sends. The stream
    starts half a second before wrk and stops after it, so it covers the whole measurement."""
    first, last = b.status_ranges["fallback_with_statuses"]
    d = statuses.Driver(b.og_port, META_SECRET, first, last)
    d.paced(b.args.status_rate)
    time.sleep(0.5)
    r = b.measure("fallback_with_statuses", b.og_url("/api/omni/send"), script=send_script(b, "fs", "+6281{n}"),
                  note="fallback_first with %d statuses/s posted alongside (gateway and PostgreSQL CPU include "
                       "them)" % b.args.status_rate)
    s = d.finish()
    s["target_per_s"] = b.args.status_rate
    s["delivered_attempts"], s["delivered_messages"] = statuses.delivered_in(b.psql, b.status_tenant, first, last)
    r["stream"] = s
    log_stream("fallback_with_statuses stream", s)


def settle(b):
    """VACUUM ANALYZE of what the send and webhook scenarios write, and a CHECKPOINT, so that two
    runs compared with each other start alike (neither pays autovacuum or a checkpoint for the
    rows of the run before it)."""
    b.psql_super("VACUUM ANALYZE messages, attempts, sms_records, idempotency_keys, webhook_deliveries, "
                 "webhook_tries, steps")
    b.psql_super("CHECKPOINT")


def sc_fallback_webhooks(b):
    """fallback_first's wrk run again with every send tenant's webhook (message.sent) pointing at
    the simulator's fast receiver: each send writes an event that is delivered meanwhile."""
    settle(b)
    for t in b.tenant_ids:
        webhooks.set_webhook(b, http_json, ADMIN, t, "ok", ["message.sent"])
    h0 = webhooks.hooks_received(b)
    r = b.measure("fallback_webhooks", b.og_url("/api/omni/send"), script=send_script(b, "fw", "+6281{n}"),
                  note="fallback_first, every send's message.sent delivered to a fast receiver")
    h1 = webhooks.hooks_received(b)
    r["hooks"] = {k: h1[k] - h0[k] for k in h1}
    log("fallback_webhooks: %d events delivered during the run" % r["hooks"]["ok"])


def sc_fallback_webhook_hang(b):
    """The same while one of the 4 tenants' endpoint never answers (each of its deliveries holds
    a connection for the 15 s timeout, 8 at a time): its sends, the other tenants' sends and
    deliveries must not slow down. The webhooks are deleted afterwards."""
    settle(b)
    webhooks.set_webhook(b, http_json, ADMIN, b.tenant_ids[0], "hang", ["message.sent"])
    h0 = webhooks.hooks_received(b)
    r = b.measure("fallback_webhook_hang", b.og_url("/api/omni/send"), script=send_script(b, "fh", "+6281{n}"),
                  note="fallback_webhooks while 1 of the 4 tenants' endpoint never answers")
    h1 = webhooks.hooks_received(b)
    r["hooks"] = {k: h1[k] - h0[k] for k in h1}
    r["hang_waiting"] = int(b.psql("SELECT count(*) FROM webhook_deliveries WHERE tenant_id = '%s' AND next_at IS "
                                   "NOT NULL" % b.tenant_ids[0]))
    log("fallback_webhook_hang: %d events delivered to the other tenants, %d tries hung, %d events of the "
        "hanging tenant waiting" % (r["hooks"]["ok"], r["hooks"]["hang"], r["hang_waiting"]))
    for t in b.tenant_ids:
        webhooks.delete_webhook(b, http_json, ADMIN, t)


def sc_webhooks_drain(b):
    """--wh-events events of 4 tenants written at once; the time until all reached the receiver."""
    log("webhooks_drain: %d message.sent events of 4 tenants written in one UPDATE" % b.args.wh_events)
    d = webhooks.drain(b, http_json, ADMIN, b.settings, b.args.wh_events, cpu_ticks, CLK_TCK)
    log("webhooks_drain: %d of %d events delivered in %.2f s = %.0f events/s (peak %.0f/s), %d tries; gateway "
        "CPU %.1f us/event, PostgreSQL %.1f us/event%s" % (
            d["received"], d["events"], d["elapsed_s"], d["per_s"], d["peak_per_s"], d["tries"],
            d["cpu_us_per_event"], d["pg_cpu_us_per_event"], "" if d["complete"] else " (INCOMPLETE)"))
    b.results.append({"scenario": "webhooks_drain", "note": "%d webhook events written at once, delivered to a "
                      "fast receiver (req = one event)" % d["events"], "conns": 0, "duration_s": d["elapsed_s"],
                      "rps": d["per_s"], "requests": d["received"], "errors": d["events"] - d["received"],
                      "non2xx": 0, "expect_errors": False, "p50_ms": float("nan"), "p90_ms": float("nan"),
                      "p99_ms": float("nan"), "cpu_us_per_req": d["cpu_us_per_event"],
                      "pg_cpu_us_per_req": d["pg_cpu_us_per_event"], "rss_kib": rss_kib(b.og.pid), "webhooks": d})


def sc_webhooks_lag(b):
    """A paced stream of status callbacks (--wh-rate per second for --duration s), each making
    one of the status tenant's messages delivered: as many message.delivered events per second,
    delivered to the fast receiver. Lag per event: delivered_at - created_at."""
    first, last = b.status_ranges["webhooks_lag"]
    webhooks.set_webhook(b, http_json, ADMIN, b.status_tenant, "ok", ["message.delivered"])
    since = b.psql("SELECT now()")
    log("webhooks_lag: %d status callbacks/s for %d s, one message.delivered event each" % (
        b.args.wh_rate, b.args.duration))
    t0, p0 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    d = statuses.Driver(b.og_port, META_SECRET, first, last)
    d.paced(b.args.wh_rate)
    time.sleep(b.args.duration)
    s = d.finish()
    lg = webhooks.lag(b, b.status_tenant, "'%s'" % since)
    t1, p1 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    webhooks.delete_webhook(b, http_json, ADMIN, b.status_tenant)
    lg.update(statuses_per_s=s["statuses_per_s"], applied=s["applied"], target_per_s=b.args.wh_rate,
              status_errors=s["errors"])
    log("webhooks_lag: %.0f statuses/s applied -> %d events, %d delivered at %.0f/s; lag p50 %.1f ms, p99 %.1f "
        "ms, max %.1f ms (p50 of the wait for a first try %.1f ms, of a try %.1f ms); %d tries" % (
            s["statuses_per_s"], lg["events"], lg["delivered"], lg["per_s"], lg["p50_ms"], lg["p99_ms"],
            lg["max_ms"], lg["wait_p50_ms"], lg["try_p50_ms"], lg["tries"]))
    n = max(lg["delivered"], 1)
    b.results.append({"scenario": "webhooks_lag", "note": "status callbacks at %d/s, one message.delivered event "
                      "each (req = one event; CPU includes the callbacks)" % b.args.wh_rate, "conns": 0,
                      "duration_s": lg["span_s"], "rps": lg["per_s"], "requests": lg["delivered"],
                      "errors": lg["events"] - lg["delivered"] + s["errors"], "non2xx": 0, "expect_errors": False,
                      "p50_ms": lg["p50_ms"], "p90_ms": float("nan"), "p99_ms": lg["p99_ms"],
                      "cpu_us_per_req": (t1 - t0) * 1e6 / CLK_TCK / n, "pg_cpu_us_per_req": (p1 - p0) * 1e6 / CLK_TCK / n,
                      "rss_kib": rss_kib(b.og.pid), "webhooks": lg})


def sc_statuses(b):
    """Status callbacks alone, as fast as the gateway takes them: --status-conns connections
    each posting its next 100 statuses when the last POST is answered."""
    first, last = b.status_ranges["statuses"]
    d = statuses.Driver(b.og_port, META_SECRET, first, last)
    conns = b.args.status_conns
    log("statuses: %d connections, %d s, POSTs of %d statuses" % (conns, b.args.duration, statuses.PER_POST))
    t0, p0 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    s = d.closed_loop(conns, b.args.duration)
    t1, p1 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    s["delivered_attempts"], s["delivered_messages"] = statuses.delivered_in(b.psql, b.status_tenant, first, last)
    posts, applied = max(s["posts"], 1), max(s["applied"], 1)
    s["cpu_us_per_status"] = (t1 - t0) * 1e6 / CLK_TCK / applied
    s["pg_cpu_us_per_status"] = (p1 - p0) * 1e6 / CLK_TCK / applied
    r = {"scenario": "statuses", "note": "POST /webhooks/meta, %d statuses per POST (req = one POST)" %
         statuses.PER_POST, "conns": conns, "duration_s": round(s["wall_s"], 2), "rps": s["posts_per_s"],
         "requests": s["posts"], "errors": s["errors"], "non2xx": 0, "expect_errors": False,
         "p50_ms": s["p50_ms"], "p90_ms": s["p90_ms"], "p99_ms": s["p99_ms"],
         "cpu_us_per_req": (t1 - t0) * 1e6 / CLK_TCK / posts, "pg_cpu_us_per_req": (p1 - p0) * 1e6 / CLK_TCK / posts,
         "rss_kib": rss_kib(b.og.pid), "stream": s}
    log_stream("statuses", s)
    b.results.append(r)


def log_stream(name, s):
    log("%s: %.0f statuses/s applied (%d applied, %d duplicate, %d unknown, %d errors) in %.0f POSTs/s, "
        "p50 %.2f ms, p99 %.2f ms; driver CPU %.0f%% of a core; delivered attempts in range %d%s" % (
            name, s["statuses_per_s"], s["applied"], s["duplicate"], s["unknown"], s["errors"], s["posts_per_s"],
            s["p50_ms"], s["p99_ms"], 100 * s["driver_cpu_share"], s["delivered_attempts"],
            "; RANGE EXHAUSTED (raise --status-attempts)" if s["exhausted"] else ""))
    if s["last_error"]:
        log("%s: last error: %s" % (name, s["last_error"]))


def stream_ok(s):
    """Every status applied (none duplicate, unknown or failed) and the database agrees."""
    return (s["errors"] == 0 and s["duplicate"] == 0 and s["unknown"] == 0 and s["applied"] > 0
            and s["delivered_attempts"] == s["applied"] and s["delivered_messages"] == s["applied"])


def prepare_statuses(b, names):
    """Creates the attempts the status scenarios deliver, one disjoint range of numbers per
    scenario, before any scenario runs: fallback_first and fallback_with_statuses, compared
    with each other, then run on the same tables. fallback_steps wants a history of at least
    --steps-history such messages (its status callbacks then plan as in a production database,
    whatever other scenarios run: with a few thousand attempts, og_status_apply's matching
    EXISTS is planned as a hashed subplan, a scan of every attempt for each callback, which
    dominates the run and measures a young database's planner instead of the steps)."""
    sizes = []
    if "statuses" in names:
        sizes.append(("statuses", b.args.status_attempts))
    if "fallback_with_statuses" in names:
        # The stream's rate over its window (wrk's duration plus the lead-in and the wait for
        # wrk), with room to spare, in whole POSTs.
        n = int(b.args.status_rate * (b.args.duration + 10))
        sizes.append(("fallback_with_statuses", n + statuses.PER_POST - n % statuses.PER_POST))
    if "webhooks_lag" in names:
        n = int(b.args.wh_rate * (b.args.duration + 10))
        sizes.append(("webhooks_lag", n + statuses.PER_POST - n % statuses.PER_POST))
    if "fallback_steps" in names:
        n = b.args.steps_history - sum(n for _, n in sizes)
        if n > 0:
            sizes.append(("history", n))
    b.status_ranges, first = {}, 1
    for name, n in sizes:
        b.status_ranges[name] = (first, first + n - 1)
        first += n
    if first > 1:
        log("creating %d messages, each with a whatsapp_meta attempt and its 'sent' status (for %s)" % (
            first - 1, ", ".join(name for name, _ in sizes)))
        t = time.monotonic()
        statuses.create_attempts(b.psql, b.status_tenant, first - 1)
        # The load's dirty pages are written now rather than by a checkpoint in the middle of
        # a measurement (CHECKPOINT needs the superuser).
        b.psql_super("CHECKPOINT")
        log("created in %.0f s" % (time.monotonic() - t))


def prepare_readers(b, names):
    """The readers' tenant (with a token) and its history, before any scenario runs."""
    if "fallback_readers" not in names:
        return
    st, j = http_json("POST", b.og_url("/admin/tenants"), ADMIN,
                      {"name": "bench-readers", "unifiedApiEnabled": True})
    assert st == 201, j
    b.reader_tenant = j["data"]["id"]
    st, t = http_json("POST", b.og_url("/admin/tenants/%s/tokens" % b.reader_tenant), ADMIN, {})
    assert st == 201, t
    b.reader_token = t["data"]["token"]
    log("creating %d messages of the readers' tenant (with their attempts), then VACUUM ANALYZE" %
        b.args.reader_messages)
    t0 = time.monotonic()
    readers.create_history(b.psql, b.reader_tenant, b.args.reader_messages)
    b.psql_super("CHECKPOINT")
    log("created in %.0f s" % (time.monotonic() - t0))


def sc_fallback_readers(b):
    """fallback_first's wrk run without log readers, with --readers of them, and without again
    (same script, connections and duration); the readers start half a second before the middle
    run and stop after it. See the module doc."""
    url, script = b.og_url("/api/omni/send"), send_script(b, "fr", "+6281{n}")
    before = b.measure("fallback_readers_off", url, script=script, note="fallback_first, no log readers (before)")
    m0 = b.metrics()
    d = readers.Readers(b.og_port, b.reader_token, b.args.readers)
    d.start()
    time.sleep(0.5)
    during = b.measure("fallback_readers_on", url, script=script,
                       note="fallback_first with %d log readers alongside (%s messages in their tenant; gateway and "
                            "PostgreSQL CPU include the reads)" % (b.args.readers,
                                                                   "{:,}".format(b.args.reader_messages)))
    s = d.finish()
    m1 = b.metrics()
    after = b.measure("fallback_readers_off2", url, script=script, note="fallback_first, no log readers (after)")
    s["timeouts_metric"] = int(steps.metric(m1, "omnigate_log_query_timeouts_total")
                               - steps.metric(m0, "omnigate_log_query_timeouts_total"))
    s["messages"] = b.args.reader_messages
    during["readers"] = s
    during["baseline"] = {"rps": (before["rps"] + after["rps"]) / 2, "p99_ms": (before["p99_ms"] + after["p99_ms"]) / 2,
                          "p50_ms": (before["p50_ms"] + after["p50_ms"]) / 2}
    log("fallback_readers: %d readers: %.1f queries/s, p50 %.1f ms, p99 %.1f ms, answers %s, %d errors; sends/s "
        "%.0f with vs %.0f without (ratio %.3f), p99 %.2f vs %.2f ms (ratio %.3f)" % (
            s["readers"], s["queries_per_s"], s["p50_ms"], s["p99_ms"], json.dumps(s["answers"]), s["errors"],
            during["rps"], during["baseline"]["rps"], during["rps"] / max(during["baseline"]["rps"], 1e-9),
            during["p99_ms"], during["baseline"]["p99_ms"], during["p99_ms"] / max(during["baseline"]["p99_ms"], 1e-9)))


def readers_report(b):
    """The log-readers section: what the readers got while the sends ran."""
    r = next((r for r in b.results if "readers" in r), None)
    if r is None:
        return []
    s, base = r["readers"], r["baseline"]
    return ["", "## Log readers", "",
            "`fallback_readers`: fallback_first's wrk run (%d connections, %d s) without log readers, with %d, and "
            "without again, back to back. The readers (test/bench/readers.py) are threads of the bench process, "
            "one keep-alive connection each, asking again as soon as answered, of a tenant of their own with "
            "%s sent messages generated in SQL (references and created_at 100 ms apart; one in ten with a "
            "failed whatsapp_qr attempt before its sms one), in turn: the first page of 50, the next page by "
            "cursor, `to` a number with no message, `status=failed` (none), `channel=sms`, and the SMS log's first "
            "page. They go to the read connections (OMNIGATE_DB_READ_POOL, default 1 per worker; statement "
            "timeout OMNIGATE_LOG_QUERY_TIMEOUT_MS, default 5 s). Ratios: the run with readers over the mean of "
            "the two without." % (r["conns"], r["duration_s"], s["readers"], "{:,}".format(s["messages"])), "",
            "| readers | queries/s | p50 ms | p99 ms | max ms | answers | transport errors | sends/s with / without "
            "| send p99 ms with / without |",
            "|---:|---:|---:|---:|---:|---|---:|---:|---:|",
            "| %d | %.1f | %.1f | %.1f | %.1f | %s | %d | %.0f / %.0f = %.3f | %.2f / %.2f = %.3f |" % (
                s["readers"], s["queries_per_s"], s["p50_ms"], s["p99_ms"], s["max_ms"],
                ", ".join("%s: %d" % kv for kv in s["answers"].items()), s["errors"], r["rps"], base["rps"],
                r["rps"] / max(base["rps"], 1e-9), r["p99_ms"], base["p99_ms"], r["p99_ms"] / max(base["p99_ms"], 1e-9))]


def under_callgrind(b, name, load):
    """Runs `load()` against the gateway restarted under valgrind's callgrind (one worker),
    counting only inside uv_run (the loop: not the process's start, whose cost is fixed); the
    gateway then stops (the worker writes its counts as it exits) and is restarted as before.
    Returns (the worker's instruction total, its callgrind file, what load returned); the file
    is kept beside the report as DIR/<name>.out for callgrind_annotate."""
    out = os.path.join(b.tmp, name + ".out")
    b.stop_gateway()
    b.start_gateway(prefix=("valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=uv_run",
                            "--callgrind-out-file=%s.%%p" % out), timeout=120)
    try:
        worker = children(b.og.pid)[0]
        got = load()
    finally:
        b.stop_gateway()
        b.start_gateway()
    total, path = 0, "%s.%d" % (out, worker)
    if os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                if line.startswith("summary:") or line.startswith("totals:"):
                    total = max(total, int(line.split()[1]))
        os.makedirs(b.args.out, exist_ok=True)
        shutil.copy(path, os.path.join(b.args.out, name + ".out"))
    return total, path, got


def sc_callgrind(b):
    """Instructions per fallback send in the worker, counted by valgrind's callgrind: a
    repeatable complement of the CPU time per send, which the other processes on this machine
    make noisy. fallback_first's script runs for --duration seconds at 16 connections against
    the gateway under callgrind (under_callgrind), and the worker's total is divided by the
    sends wrk counted."""
    if shutil.which("valgrind") is None:
        log("callgrind: valgrind not found: skipped")
        return
    total, path, w = under_callgrind(b, "callgrind", lambda: b.wrk(b.og_url("/api/omni/send"), 16, b.args.duration,
                                                                   send_script(b, "cg", "+6284{n}")))
    n = max(w["requests"] - w["non2xx"], 1)
    r = {"scenario": "callgrind", "note": "fallback_first under callgrind, 16 connections: instructions per "
         "send in the worker's loop", "conns": 16, "rps": 0, "requests": w["requests"], "errors": w["errors"],
         "non2xx": w["non2xx"], "expect_errors": False, "p50_ms": float("nan"), "p90_ms": float("nan"),
         "p99_ms": float("nan"), "cpu_us_per_req": float("nan"), "pg_cpu_us_per_req": float("nan"),
         "rss_kib": 0, "instr_per_req": total / n, "callgrind_file": path}
    log("callgrind: %d sends, %.0f instructions per send in the worker (%s)" % (n, total / n, path))
    b.results.append(r)


def sc_fallback_third(b):
    # +1999 1 1 0 ...: both WhatsApp channels reject (4xx), SMS succeeds: three attempts.
    b.measure("fallback_third", b.og_url("/api/omni/send"), script=send_script(b, "ft", "+19991100{n}"),
              note="fallback, first two channels fail (4xx), SMS wins")


def sc_all3(b):
    b.measure("all3", b.og_url("/api/omni/send"), script=send_script(b, "all", "+6282{n}", mode="all"),
              note="all, three channels concurrently")


def sc_logs(b):
    b.measure("logs", b.og_url("/api/omni/logs?limit=50"), script=b.lua("logs", "GET", "/api/omni/logs?limit=50",
                                                                        [], b.tokens),
              note="GET /api/omni/logs?limit=50")


def sc_otp(b):
    # OTP send to a fresh number each time (the 30 s cooldown is per number), then a verify of
    # each number with a wrong code: the verify path (find, HMAC, conditional update, history
    # event) answering 422 otp_invalid, which is why its errors column counts every request.
    send = json.dumps({"to": "+6283{n}"})
    b.measure("otp_send", b.og_url("/api/sms/otp/send"), script=b.lua("otps", "POST", "/api/sms/otp/send", [send],
                                                                      b.tokens),
              note="OTP send (fresh number each)")
    verify = json.dumps({"to": "+6283{n}", "code": "00000000"})
    b.measure("otp_verify", b.og_url("/api/sms/otp/verify"),
              script=b.lua("otpv", "POST", "/api/sms/otp/verify", [verify], b.tokens),
              note="OTP verify (wrong code: 422 by design, counted as errors)", expect_errors=True)


def sc_slow2000(b):
    # whatsapp_qr answers after 200 ms (simulator magic digit 8): throughput should be
    # concurrency / latency = 2000 / 0.2 s = 10,000 sends/s if the loop never blocks. The next
    # two digits (whatsapp_meta, sms: ok) and the fourth (callbacks: none) are zeros, so the
    # per-request digits of {n} script nothing.
    # RSS per send in flight: on a freshly started gateway (no memory held from the earlier
    # scenarios), the process tree's RSS sampled every 0.1 s during the run, its peak minus
    # the RSS before, over the 2,000 sends in flight.
    b.stop_gateway()
    b.start_gateway()
    time.sleep(0.5)
    base = rss_parts_kib(b.og.pid)
    peak, stop = [base], threading.Event()

    def sample():
        while not stop.wait(0.1):
            now = rss_parts_kib(b.og.pid)
            if now[0] > peak[0][0]:
                peak[0] = now
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    r = b.measure("slow2000", b.og_url("/api/omni/send"), conns=2000, script=send_script(b, "slow", "+19998000{n}"),
                  note="2,000 concurrent sends, provider latency 200 ms", timeout="5s")
    stop.set()
    th.join()
    r["ideal_rps"] = 2000 / 0.2
    r["rss_base_kib"], r["rss_peak_kib"] = base[0], peak[0][0]
    r["rss_kib_per_inflight"] = (peak[0][0] - base[0]) / 2000
    # Of that growth, the anonymous part (what the gateway allocated) and the file-backed part
    # (library and program pages touched for the first time by the run's code paths).
    r["rss_anon_kib_per_inflight"] = (peak[0][1] - base[1]) / 2000
    r["rss_file_kib_per_inflight"] = (peak[0][2] - base[2]) / 2000
    log("slow2000: RSS %.1f MiB before, peak %.1f MiB: %.1f KiB per send in flight (anonymous %.1f, file %.1f)" % (
        base[0] / 1024, peak[0][0] / 1024, r["rss_kib_per_inflight"], r["rss_anon_kib_per_inflight"],
        r["rss_file_kib_per_inflight"]))


def sc_meta_down(b):
    """Issue 19: fallback sends whatsapp_meta then sms, attempt timeout 1 s, in three runs of the
    same length: Meta healthy; Meta hanging (simulator rule) with the circuit breaker; Meta
    hanging without it (OMNIGATE_CIRCUIT_BREAKER=false). No warm-up trips the breaker: each
    hanging run starts with a closed circuit, so its first second (the first 20 attempts per
    worker time out) is inside the measurement. Reported: each run's sends/s and p99, and the
    Meta requests the simulator saw in each run."""
    body = json.dumps({"to": "+6282{n}", "text": "Your order has shipped", "channels": ["whatsapp_meta", "sms"]})
    script = b.lua("metadown", "POST", "/api/omni/send", [body], b.tokens)
    extra = {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000"}

    def meta_seen():
        return b.sim_stats()["channels"]["whatsapp_meta"]["requests"]

    def run(name, env, hang, note):
        b.stop_gateway()
        b.start_gateway(dict(extra, **env))
        http_json("DELETE", b.sim_url("/__sim/rules"))
        if hang:
            st, j = http_json("POST", b.sim_url("/__sim/rules"), body={"channel": "whatsapp_meta", "behaviour": "hang"})
            assert st == 201, j
        m0 = meta_seen()
        r = b.measure(name, b.og_url("/api/omni/send"), script=script, note=note, timeout="5s")
        r["meta_requests"] = meta_seen() - m0
        log("%s: the simulator saw %d Meta requests" % (name, r["meta_requests"]))
        return r

    healthy = run("meta_healthy", {}, False, "whatsapp_meta then sms, Meta healthy (attempt timeout 1 s)")
    on = run("meta_down_breaker", {}, True, "Meta hangs, circuit breaker on")
    off = run("meta_down_nobreaker", {"OMNIGATE_CIRCUIT_BREAKER": "false"}, True, "Meta hangs, breaker off")
    http_json("DELETE", b.sim_url("/__sim/rules"))
    b.stop_gateway()
    b.start_gateway()
    for r in (on, off):
        log("%s vs meta_healthy: sends/s %.2f, p99 %.2f" % (r["scenario"], r["rps"] / max(healthy["rps"], 1),
                                                          r["p99_ms"] / max(healthy["p99_ms"], 1e-9)))


def sc_idle(b):
    """RSS per idle keep-alive connection: 10,000 connections each served one /healthz, on a
    freshly started gateway (after the load scenarios its allocator already holds freed memory
    that new connections would reuse, hiding their cost)."""
    b.stop_gateway()
    b.start_gateway()
    worker = children(b.og.pid)[0]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "test/bench/idle_conns.py"), "--port",
                          str(b.og_port), "--pid", str(worker), "--count", str(b.args.idle)],
                         capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    log("idle: %s" % d)
    b.results.append({"scenario": "idle", "note": "%d idle keep-alive connections" % b.args.idle,
                      "conns": d.get("connections", 0), "rps": 0, "requests": 0, "errors": d.get("failed", 0),
                      "non2xx": 0, "p50_ms": float("nan"), "p90_ms": float("nan"), "p99_ms": float("nan"),
                      "cpu_us_per_req": float("nan"), "pg_cpu_us_per_req": float("nan"),
                      "rss_kib": d.get("rss_after_kib", 0), "bytes_per_conn": d.get("bytes_per_conn")})


def sc_fallback_steps(b):
    """Delivery-based fallback moved on by a failed status (issue 14): --steps-sends sends over
    --steps-conns connections (steps.Sends), channels whatsapp_meta then sms, fallbackOn
    delivered. Simulator rules make Meta accept each and call back `failed` (131026) 20 ms
    after its answer, and SMS accept with no callback, so each chain is one step: the failed
    status makes it due, a worker claims it, records the SMS attempt and sends it. Measured:
    the sends (answers), the steps done per second (the gateway's /metrics, sampled every
    0.1 s, until every answered send's step is done), the gateway's and PostgreSQL's CPU per
    chain (send + callback + step), then from the database the lag of each chain and that each
    got exactly one SMS attempt and left no step. The rules are removed at the end."""
    n, conns = b.args.steps_sends, b.args.steps_conns
    rules = ({"channel": "whatsapp_meta", "behaviour": "ok", "callback": "not_on_whatsapp"},
             {"channel": "sms", "behaviour": "ok", "callback": "none"})
    for rule in rules:
        st, j = http_json("POST", b.sim_url("/__sim/rules"), body=rule)
        assert st == 201, j
    http_json("DELETE", b.sim_url("/__sim/stats"))
    m0 = b.metrics()
    done0 = steps.metric(m0, "omnigate_steps_done_total", 'kind="fallback"')
    failed0 = steps.metric(m0, "omnigate_steps_failed_total", 'kind="fallback"')
    log("fallback_steps: %d delivery-fallback sends over %d connections; WhatsApp fails by callback" % (n, conns))
    driver = steps.Sends(b.og_port, b.tokens, n, conns)
    out = {}
    th = threading.Thread(target=lambda: out.update(driver.run()), daemon=True)
    t0, p0 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    start = time.monotonic()
    th.start()
    # Sample the steps done until the sends are over and every answered one's step is done, or
    # nothing moved for 30 s (a step that failed waits for its lease to expire).
    samples, last_move, done_at = [(0.0, 0)], start, None
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        d = int(steps.metric(b.metrics(), "omnigate_steps_done_total", 'kind="fallback"') - done0)
        if d != samples[-1][1]:
            last_move = now
        samples.append((now - start, d))
        if not th.is_alive() and d >= out.get("ok", n):
            done_at = now - start
            break
        if now - last_move > 30:
            log("fallback_steps: no step done for 30 s; giving up waiting")
            break
    th.join()
    t1, p1 = cpu_ticks(b.og.pid), cpu_ticks(b.pg_pid)
    elapsed = done_at if done_at is not None else samples[-1][0]
    settled = b.callbacks_settled()
    stats = b.sim_stats()
    m1 = b.metrics()
    http_json("DELETE", b.sim_url("/__sim/rules"))
    c = steps.chains(b.psql, b.tenant_ids)
    lag = steps.lag(b.psql, b.tenant_ids)
    done = samples[-1][1]
    ch = dict(c, sends=n, answered=out["ok"], steps_done=done,
              steps_failed=int(steps.metric(m1, "omnigate_steps_failed_total", 'kind="fallback"') - failed0),
              elapsed_s=elapsed, complete=done_at is not None, steps_per_s=done / max(elapsed, 1e-9),
              steps_per_s_peak=steps.peak_rate(samples), sends_wall_s=out["wall_s"],
              sim_meta_ok=stats["channels"]["whatsapp_meta"]["ok"], sim_sms_ok=stats["channels"]["sms"]["ok"],
              callbacks=stats["callbacks"], callbacks_settled=settled, lag=lag,
              history=int(b.psql("SELECT count(*) FROM messages WHERE tenant_id = '%s'" % b.status_tenant)),
              driver_cpu_share=out["driver_cpu_share"], workers=b.args.workers,
              meta_callbacks={k: int(v - steps.callbacks_in(m0, "meta").get(k, 0))
                              for k, v in steps.callbacks_in(m1, "meta").items()},
              claim_lag=steps.histogram_delta(steps.histogram(m0, "omnigate_step_lag_seconds"),
                                              steps.histogram(m1, "omnigate_step_lag_seconds")))
    ch["ok"] = chains_ok(ch)
    chains = max(out["ok"], 1)
    r = {"scenario": "fallback_steps", "conns": conns, "duration_s": round(out["wall_s"], 2), "rps": out["rps"],
         "requests": out["ok"] + out["non2xx"], "errors": out["errors"] + out["non2xx"], "non2xx": out["non2xx"],
         "expect_errors": False, "p50_ms": out["p50_ms"], "p90_ms": out["p90_ms"], "p99_ms": out["p99_ms"],
         "note": "delivery fallback (whatsapp_meta, sms; fallbackOn delivered), WhatsApp failed by callback: "
                 "%d sends (CPU per chain: send + callback + step)" % n,
         "cpu_us_per_req": (t1 - t0) * 1e6 / CLK_TCK / chains, "pg_cpu_us_per_req": (p1 - p0) * 1e6 / CLK_TCK / chains,
         "rss_kib": rss_kib(b.og.pid), "chains": ch}
    cl = ch["claim_lag"]
    log("fallback_steps: %d sends at %.0f/s (p99 %.1f ms, %d errors); %d steps in %.2f s = %.0f steps/s (peak "
        "%.0f/s); failed -> SMS lag p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d chains, %d over 500 ms (claim "
        "lag p50 <= %g s, p99 <= %g s; %d statuses before their attempt); %d of %d messages with exactly one "
        "SMS attempt (%d none, %d several, %d pending), %d steps left; simulator SMS ok %d; %s" % (
            n, out["rps"], out["p99_ms"], r["errors"], done, elapsed, ch["steps_per_s"], ch["steps_per_s_peak"],
            lag["p50_ms"], lag["p99_ms"], lag["max_ms"], lag["count"], lag["over_500ms"], cl["p50_le_s"],
            cl["p99_le_s"], ch["meta_callbacks"].get("unknown_message", 0),
            c["one_sms"], c["messages"], c["no_sms"],
            c["several_sms"], c["pending"], c["steps_left"], ch["sim_sms_ok"], "OK" if ch["ok"] else "NOT OK"))
    if out["last_error"]:
        log("fallback_steps: last send error: %s" % out["last_error"])
    b.results.append(r)


def chains_ok(ch):
    """Every send answered, every chain moved on by its failed status exactly once (one SMS
    attempt, sent, one SMS at the simulator), no step left, the wait complete."""
    n = ch["sends"]
    return (ch["complete"] and ch["answered"] == n and ch["messages"] == n and ch["one_sms"] == n
            and ch["sms_sent"] == n and ch["no_sms"] == 0 and ch["several_sms"] == 0 and ch["pending"] == 0
            and ch["steps_left"] == 0 and ch["lag"]["count"] == n and ch["sim_sms_ok"] == n)


def sc_steps_idle(b):
    """The idle cost of pending steps: --idle-steps steps due in an hour (inserted with SQL;
    they never run, so they need no message), nothing else running, the gateway's and
    PostgreSQL's CPU over max(10 s, --duration). Before the window: VACUUM ANALYZE of the
    whole database and a CHECKPOINT (autovacuum and the checkpointer would otherwise do the
    earlier scenarios' leftovers during it), the simulator's callbacks settled, 2 s of quiet.
    The bench issues no query during the window. The steps are deleted afterwards."""
    n = b.args.idle_steps
    window = max(10, b.args.duration)
    b.psql("INSERT INTO steps (kind, tenant_id, reference, due_at) SELECT 'fallback', '%s', 'kf_IDLE' || i, "
           "now() + interval '1 hour' FROM generate_series(1, %d) i" % (b.status_tenant, n))
    log("steps_idle: %d steps due in an hour; VACUUM ANALYZE, CHECKPOINT, then %d s of nothing" % (n, window))
    b.psql_super("VACUUM ANALYZE")
    b.psql_super("CHECKPOINT")
    b.callbacks_settled()
    time.sleep(2)
    active = int(b.psql_super("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                              "AND pid <> pg_backend_pid()"))
    g0, p0, t0 = cpu_ns(b.og.pid), cpu_ns(b.pg_pid), time.monotonic()
    time.sleep(window)
    g1, p1, t1 = cpu_ns(b.og.pid), cpu_ns(b.pg_pid), time.monotonic()
    wall = t1 - t0
    pending = int(b.psql("SELECT count(*) FROM steps WHERE reference LIKE 'kf_IDLE%'"))
    due = int(b.psql("SELECT count(*) FROM steps WHERE due_at <= now()"))
    m = b.metrics()
    b.psql("DELETE FROM steps WHERE reference LIKE 'kf_IDLE%'")
    idle = {"steps": n, "steps_pending": pending, "steps_due": due, "window_s": wall, "active_backends": active,
            "steps_due_gauge": steps.metric(m, "omnigate_steps_due"),
            "gateway_core_pct": 100 * (g1 - g0) / 1e9 / wall, "pg_core_pct": 100 * (p1 - p0) / 1e9 / wall,
            "workers": b.args.workers}
    log("steps_idle: over %.1f s with %d steps pending (%d due): gateway %.3f%% of a core, PostgreSQL %.3f%% of "
        "a core (%d other active backends at the start)" % (wall, pending, due, idle["gateway_core_pct"],
                                                            idle["pg_core_pct"], active))
    b.results.append({"scenario": "steps_idle", "note": "%d steps due in an hour, nothing else running, %.0f s" % (
        n, wall), "conns": 0, "rps": 0, "requests": 0, "errors": 0, "non2xx": 0, "expect_errors": False,
        "p50_ms": float("nan"), "p90_ms": float("nan"), "p99_ms": float("nan"), "cpu_us_per_req": float("nan"),
        "pg_cpu_us_per_req": float("nan"), "rss_kib": rss_kib(b.og.pid), "steps_idle": idle})


def sc_cold(b):
    logscale.cold(b, sys.modules[__name__])


def sc_logs_scale(b):
    logscale.logs_scale(b, sys.modules[__name__])


def sc_queue_drain(b):
    queue_bench.sc_drain(b, sys.modules[__name__])


def sc_queue_pacing(b):
    queue_bench.sc_pacing(b, sys.modules[__name__])


def sc_queue_priority(b):
    queue_bench.sc_priority(b, sys.modules[__name__])


def sc_queue_scale(b):
    queue_bench.sc_scale(b, sys.modules[__name__])


def sc_queue_statements(b):
    queue_bench.sc_statements(b, sys.modules[__name__])


def sc_consent(b):
    consent_bench.sc_consent(b, sys.modules[__name__])


def sc_usage(b):
    usage_bench.sc_usage(b, sys.modules[__name__])


def sc_batch_accept(b):
    batches_bench.sc_accept(b, sys.modules[__name__])


def sc_callgrind_batch(b):
    batches_bench.sc_callgrind(b, sys.modules[__name__])


def sc_callgrind_drain(b):
    batches_bench.sc_callgrind(b, sys.modules[__name__], drain=True)


def sc_batch_counts(b):
    batches_bench.sc_counts(b, sys.modules[__name__])


SCENARIOS = {
    "nginx": sc_nginx,
    "healthz": sc_healthz,
    "access_log": sc_access_log,
    "fallback_first": sc_fallback_first,
    # Right after fallback_first: the two are compared (sends/s with and without statuses).
    "fallback_with_statuses": sc_fallback_with_statuses,
    # Its own comparison: without, with and without log readers, back to back.
    "fallback_readers": sc_fallback_readers,
    # Compared with each other (and with fallback_first): one tenant's endpoint hanging.
    "fallback_webhooks": sc_fallback_webhooks,
    "fallback_webhook_hang": sc_fallback_webhook_hang,
    "fallback_third": sc_fallback_third,
    "callgrind": sc_callgrind,
    "all3": sc_all3,
    "logs": sc_logs,
    "otp": sc_otp,
    "slow2000": sc_slow2000,
    "statuses": sc_statuses,
    "webhooks_drain": sc_webhooks_drain,
    "webhooks_lag": sc_webhooks_lag,
    "fallback_steps": sc_fallback_steps,
    "meta_down": sc_meta_down,
    "templates": sc_templates,
    # Queued delivery (issue 31, test/bench/queue.py); each leaves nothing queued behind it.
    "queue_drain": sc_queue_drain,
    "queue_priority": sc_queue_priority,
    "queue_pacing": sc_queue_pacing,
    "queue_scale": sc_queue_scale,
    # Batches (issue 32, test/bench/batches.py).
    "batch_accept": sc_batch_accept,
    "batch_counts": sc_batch_counts,
    "callgrind_batch": sc_callgrind_batch,
    "callgrind_drain": sc_callgrind_drain,
    # Consent copies (issue 33, test/bench/consent.py): loads a million suppressions and windows.
    "consent": sc_consent,
    # Usage totals (issue 34, test/bench/usage.py): a year of 10 million messages, then GET /api/usage.
    "usage": sc_usage,
    # A diagnostic: restarts PostgreSQL with pg_stat_statements, and again without.
    "queue_statements": sc_queue_statements,
    # After every load scenario: the idle window needs nothing else running.
    "steps_idle": sc_steps_idle,
    "idle": sc_idle,
    # Each on a database of its own (test/bench/logscale.py).
    "cold": sc_cold,
    "logs_scale": sc_logs_scale,
}
# Not run unless asked for (--scenarios): loading 10 million sends takes minutes; queue_pacing
# takes --pacing-messages / --pacing-rate seconds (100), queue_scale loads a million messages.
OPT_IN = ("logs_scale", "callgrind", "callgrind_batch", "callgrind_drain", "queue_pacing", "queue_scale", "queue_statements", "consent", "usage")
# Names --scenarios takes for several scenarios at once.
GROUPS = {"queue": ["queue_drain", "queue_pacing", "queue_priority", "queue_scale", "queue_statements"]}
SENDS = ("fallback_first", "fallback_with_statuses", "fallback_third", "all3", "slow2000", "fallback_steps",
         "fallback_readers", "fallback_readers_off", "fallback_readers_on", "fallback_readers_off2",
         "fallback_webhooks", "fallback_webhook_hang", "meta_text", "meta_template", "meta_text2",
         "meta_template2")


def durability(b, answered):
    """Every send answered 2xx has its row (completed: sent, or since delivered, read or
    undelivered through a status) with its winning attempt in the database. Only the send
    tenants' messages count: the status scenarios' pre-created ones are not sends."""
    mine = "tenant_id IN (%s)" % ", ".join("'%s'" % t for t in b.tenant_ids)
    done = "status IN ('sent', 'delivered', 'read', 'undelivered')"
    rows = int(b.psql("SELECT count(*) FROM messages WHERE %s AND %s" % (mine, done)))
    pending = int(b.psql("SELECT count(*) FROM messages WHERE %s AND status = 'pending'" % mine))
    orphans = int(b.psql("SELECT count(*) FROM messages m WHERE %s AND %s AND NOT EXISTS "
                         "(SELECT 1 FROM attempts a WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference "
                         "AND a.status = 'sent')" % (mine, done)))
    ok = rows >= answered and orphans == 0
    return {"answered_2xx": answered, "rows_sent": rows, "rows_pending": pending, "sent_without_attempt": orphans,
            "ok": ok}


def targets(b):
    """The issue-7 targets, each as a ratio measured in this run: (what, value, target, met)."""
    by = {r["scenario"]: r for r in b.results}
    out = []
    ng = by.get("nginx", {}).get("rps")
    if ng and "healthz" in by:
        v = by["healthz"]["rps"] / ng
        out.append(("/healthz req/s / nginx req/s", "%.2f" % v, ">= 0.80", v >= 0.8))
    for sink in ("file", "pipe"):
        if "access_log_" + sink in by:
            a = by["access_log_" + sink]
            out.append(("/healthz req/s with the access log / without, stderr a %s (same build, same run)" % sink,
                        "%.3f (%.0f of %.0f)" % (a["ratio"], a["rps"], a["rps_off"]), ">= 0.90", a["ratio"] >= 0.9))
    if "fallback_first" in by:
        f = by["fallback_first"]
        if ng:
            v = f["rps"] / ng
            out.append(("fallback first-success sends/s / nginx req/s", "%.3f" % v, ">= 0.10", v >= 0.10))
        out.append(("fallback first-success p99 at %d connections" % f["conns"], "%.1f ms" % f["p99_ms"], "<= 25 ms",
                    f["p99_ms"] <= 25))
        out.append(("gateway CPU per fallback send", "%.1f us" % f["cpu_us_per_req"], "<= 30 us",
                    f["cpu_us_per_req"] <= 30))
        # Issue 20's targets.
        if ng:
            v = f["rps"] / ng
            out.append(("fallback first-success sends/s / nginx req/s (issue 20)", "%.3f" % v, ">= 0.12", v >= 0.12))
        out.append(("fallback first-success p99 at %d connections (issue 20)" % f["conns"], "%.1f ms" % f["p99_ms"],
                    "<= 20 ms", f["p99_ms"] <= 20))
        out.append(("PostgreSQL CPU per fallback send", "%.1f us" % f["pg_cpu_us_per_req"], "<= 50 us",
                    f["pg_cpu_us_per_req"] <= 50))
        if "wal_bytes_per_req" in f:
            out.append(("WAL bytes per fallback send (whole cluster, LSN difference)", "%.0f" % f["wal_bytes_per_req"],
                        "(reported)", True))
    if "callgrind" in by:
        out.append(("worker instructions per fallback send (callgrind; reported)",
                    "%.0f" % by["callgrind"]["instr_per_req"], "(reported)", True))
    if "slow2000" in by and "rss_kib_per_inflight" in by["slow2000"]:
        r = by["slow2000"]
        out.append(("RSS per send in flight at 2,000 concurrent (peak - before) / 2,000", "%.1f KiB (%.1f -> %.1f MiB)" % (
            r["rss_kib_per_inflight"], r["rss_base_kib"] / 1024, r["rss_peak_kib"] / 1024), "<= 16 KiB",
            r["rss_kib_per_inflight"] <= 16))
        out.append(("of which anonymous (RssAnon) / file-backed (RssFile), per send in flight (reported)",
                    "%.1f / %.1f KiB" % (r["rss_anon_kib_per_inflight"], r["rss_file_kib_per_inflight"]),
                    "(reported)", True))
    if "statuses" in by:
        s = by["statuses"]["stream"]
        out.append(("statuses applied/s through POST /webhooks/meta, %d per POST" % statuses.PER_POST,
                    "%.0f" % s["statuses_per_s"], ">= 20,000", s["statuses_per_s"] >= 20000 and stream_ok(s)))
    if "fallback_with_statuses" in by and "fallback_first" in by:
        r = by["fallback_with_statuses"]
        v = r["rps"] / max(by["fallback_first"]["rps"], 1e-9)
        s = r["stream"]
        # The comparison holds only if the stream really ran at its rate, every status applied.
        full = s["statuses_per_s"] >= 0.95 * s["target_per_s"] and stream_ok(s)
        out.append(("fallback sends/s with %.0f statuses/s alongside (wanted %d) / without (fallback_first)" % (
            s["statuses_per_s"], s["target_per_s"]), "%.3f (%.0f of %.0f)" % (v, r["rps"], by["fallback_first"]["rps"]),
                    ">= 0.85", v >= 0.85 and full))
    if "fallback_readers_on" in by:
        r = by["fallback_readers_on"]
        base = r["baseline"]
        v = r["rps"] / max(base["rps"], 1e-9)
        out.append(("fallback sends/s with %d log readers / without (mean of the runs before and after)" %
                    r["readers"]["readers"], "%.3f (%.0f of %.0f)" % (v, r["rps"], base["rps"]), ">= 0.90", v >= 0.90))
        v = r["p99_ms"] / max(base["p99_ms"], 1e-9)
        out.append(("fallback send p99 with %d log readers / without" % r["readers"]["readers"],
                    "%.3f (%.2f of %.2f ms)" % (v, r["p99_ms"], base["p99_ms"]), "<= 1.10", v <= 1.10))
    if "webhooks_drain" in by:
        d = by["webhooks_drain"]["webhooks"]
        out.append(("webhook events delivered/s to a fast local receiver (%d written at once, 4 tenants)" %
                    d["events"], "%.0f" % d["per_s"], ">= 5,000", d["per_s"] >= 5000 and d["complete"]))
    if "webhooks_lag" in by:
        w = by["webhooks_lag"]["webhooks"]
        out.append(("webhook outbox lag p99 at %.0f events/s (wanted %d/s; p50 %.0f ms, %d of %d delivered)" % (
            w["per_s"], w["target_per_s"], w["p50_ms"], w["delivered"], w["events"]), "%.0f ms" % w["p99_ms"],
            "<= 1000 ms", w["p99_ms"] <= 1000 and w["delivered"] == w["events"] > 0))
    if "fallback_webhook_hang" in by and "fallback_webhooks" in by:
        h, f = by["fallback_webhook_hang"], by["fallback_webhooks"]
        v = h["rps"] / max(f["rps"], 1e-9)
        out.append(("fallback sends/s while one tenant's webhook endpoint hangs / without (fallback_webhooks)",
                    "%.3f (%.0f of %.0f)" % (v, h["rps"], f["rps"]), ">= 0.90", v >= 0.90 and h["errors"] == 0))
        v = h["p99_ms"] / max(f["p99_ms"], 1e-9)
        out.append(("fallback p99 while one tenant's webhook endpoint hangs / without", "%.3f (%.1f of %.1f ms)" % (
            v, h["p99_ms"], f["p99_ms"]), "<= 1.10", v <= 1.10))
    if "fallback_steps" in by:
        ch = by["fallback_steps"]["chains"]
        lag = ch["lag"]
        out.append(("delivery fallback: failed callback reaching the gateway -> SMS attempt starting, p99 (p50 "
                    "%.0f ms; %d of %d chains measured)" % (lag["p50_ms"], lag["count"], ch["sends"]),
                    "%.0f ms" % lag["p99_ms"], "<= 1000 ms", lag["p99_ms"] <= 1000 and lag["count"] == ch["sends"]))
        out.append(("delivery fallback: chains with exactly one SMS attempt (sent, one SMS at the provider), "
                    "steps left", "%d of %d, %d left" % (ch["one_sms"], ch["sends"], ch["steps_left"]), "all, 0",
                    ch["ok"]))
    if "steps_idle" in by:
        d = by["steps_idle"]["steps_idle"]
        for who, key in (("gateway (process tree)", "gateway_core_pct"), ("PostgreSQL (process tree)", "pg_core_pct")):
            out.append(("idle CPU with %s steps due in an hour: %s" % ("{:,}".format(d["steps"]), who),
                        "%.2f%% of a core" % d[key], "< 1%", d[key] < 1 and d["steps_pending"] == d["steps"]))
    if "idle" in by and by["idle"].get("bytes_per_conn") is not None:
        v = by["idle"]["bytes_per_conn"]
        out.append(("RSS per idle keep-alive connection", "%d bytes" % v, "<= 2048 bytes", v <= 2048))
    if "slow2000" in by:
        r = by["slow2000"]
        v = r["rps"] / r["ideal_rps"]
        out.append(("2,000 sends at 200 ms: sends/s / (concurrency / latency)", "%.2f (%.0f of %.0f)" % (
            v, r["rps"], r["ideal_rps"]), ">= 0.90", v >= 0.9))
    return out + logscale.targets(b) + queue_bench.targets(b)


def chart(b, path):
    """A PNG bar chart (gnuplot): req/s per scenario (log scale) and gateway CPU us per request."""
    if not shutil.which("gnuplot"):
        log("gnuplot not found: no chart")
        return None
    rows = []
    for r in b.results:
        if r["scenario"] == "statuses":
            # Per status, not per POST of 100: on the scale of the other rows.
            s = r["stream"]
            rows.append(("statuses (per status)", s["statuses_per_s"], s["cpu_us_per_status"],
                         s["pg_cpu_us_per_status"]))
        elif r.get("rps", 0) > 0 and "cpu_us_per_req" in r:
            cpu = r["cpu_us_per_req"] if r["cpu_us_per_req"] == r["cpu_us_per_req"] else 0
            rows.append((r["scenario"], r["rps"], cpu, r["pg_cpu_us_per_req"]))
    dat = os.path.join(b.tmp, "chart.dat")
    with open(dat, "w") as f:
        for row in rows:
            f.write('"%s" %.1f %.1f %.1f\n' % row)
    gp = os.path.join(b.tmp, "chart.gp")
    with open(gp, "w") as f:
        f.write("""set terminal png size 1100,700 font ",10" noenhanced
set output "%s"
set multiplot layout 2,1 title "Omnigate benchmark (one run, loopback, %d CPUs)"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid ytics
set xtics rotate by -20
set logscale y
set ylabel "requests/s (log)"
plot "%s" using 2:xtic(1) title "req/s" lc rgb "#3465a4"
unset logscale y
set ylabel "CPU us per request"
plot "%s" using 3:xtic(1) title "gateway" lc rgb "#73d216", "" using 4 title "PostgreSQL" lc rgb "#cc0000"
unset multiplot
""" % (path, os.cpu_count(), dat, dat))
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        log("gnuplot failed: " + r.stderr.strip())
        return None
    return path


def profile_report(b):
    """The perf profiles during fallback_first (the worker's, PostgreSQL's backends'): the shares
    by library and the top symbols."""
    r = next((r for r in b.results if r.get("profile")), None)
    if r is None:
        return []
    lines = profile_lines(r["profile"], "the worker", "WORKER", r["scenario"])
    if "batch_ops" in r:
        lines += ["", "Write batches: %.1f operations per group-committed transaction, %.2f ms from sending to "
                  "COMMIT's answer (means over the scenario, from /metrics). PostgreSQL's CPU by process, us per "
                  "send: %s." % (r["batch_ops"], r["batch_ms"],
                                 ", ".join("%s %.1f" % kv for kv in r["pg_roles_us_per_req"]))]
    if r.get("pg_profile"):
        lines += profile_lines(r["pg_profile"], "PostgreSQL's backends", "BACKENDS", r["scenario"])
    return lines


def profile_lines(p, whose, arg, scenario):
    lines = ["", "## Profile of %s during %s" % (whose, scenario), "",
             "`perf record -e cpu-clock -F 999 -p %s` for the scenario's duration (%d samples), "
             "`perf report --no-children`: self time." % (arg, p.get("samples", 0)), "",
             "| % | library |", "|---:|---|"]
    lines += ["| %.2f | %s |" % (pct, dso) for pct, dso, _ in p["dsos"]]
    lines += ["", "| % | library | symbol |", "|---:|---|---|"]
    lines += ["| %.2f | %s | `%s` |" % row for row in p["symbols"]]
    return lines


def status_report(b):
    """The delivery-status section: per status, what the driver measured and what SQL found."""
    rows = [r for r in b.results if "stream" in r]
    if not rows:
        return []
    lines = ["", "## Delivery statuses", "",
             "Signed Meta status callbacks (`POST /webhooks/meta`, %d statuses per POST, each for a distinct "
             "pre-created accepted attempt whose `sent` status is already recorded, of a tenant that sends "
             "nothing: %s such attempts, then VACUUM ANALYZE and CHECKPOINT; see create_attempts() in "
             "statuses.py) posted by test/bench/statuses.py from the bench process (wrk cannot sign): Python "
             "threads, one keep-alive connection each, bodies built and signed per POST. `statuses`: "
             "--status-conns connections, each posting again when answered. `fallback_with_statuses`: "
             "fallback_first's wrk run again while a stream posts at a fixed rate (--status-rate). Applied = "
             "counted from the answers; verified = the SQL count of delivered attempts and messages in the "
             "scenario's range equals it, none duplicate, unknown or failed. Driver CPU = the bench process's "
             "CPU during the stream, in %% of one core (of %d)." % (
                 statuses.PER_POST, "{:,}".format(sum(hi - lo + 1 for lo, hi in b.status_ranges.values())),
                 os.cpu_count()), "",
             "| scenario | conns | statuses/s applied | POSTs/s | applied | duplicate | unknown | errors | p50 ms "
             "| p90 ms | p99 ms | gateway CPU us/status | PostgreSQL CPU us/status | driver CPU | delivered in DB "
             "| verified |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        s = r["stream"]
        name = r["scenario"] if r["scenario"] == "statuses" else "%s (stream, wanted %d/s)" % (
            r["scenario"], s["target_per_s"])
        cpu = "%.1f" % s["cpu_us_per_status"] if "cpu_us_per_status" in s else "-"
        pg = "%.1f" % s["pg_cpu_us_per_status"] if "pg_cpu_us_per_status" in s else "-"
        cells = (name, s["threads"], s["statuses_per_s"], s["posts_per_s"], s["applied"], s["duplicate"],
                 s["unknown"], s["errors"], s["p50_ms"], s["p90_ms"], s["p99_ms"], cpu, pg,
                 100 * s["driver_cpu_share"], s["delivered_attempts"], "yes" if stream_ok(s) else "**no**")
        lines.append("| %s | %d | %.0f | %.0f | %d | %d | %d | %d | %.2f | %.2f | %.2f | %s | %s | %.0f%% | %d | %s |"
                     % cells)
        if s["exhausted"]:
            lines.append("")
            lines.append("**%s used up its attempts before the end: raise --status-attempts.**" % r["scenario"])
    lines += ["", "Per-status CPU of `fallback_with_statuses` is not separable from its sends: its main-table row "
              "carries both in gateway and PostgreSQL CPU per send."]
    return lines


def webhooks_report(b):
    """The tenant-webhooks section: how each webhook scenario was measured."""
    by = {r["scenario"]: r for r in b.results}
    lines = []
    if "fallback_webhooks" in by or "fallback_webhook_hang" in by:
        lines += ["", "## Tenant webhooks", "",
                  "`fallback_webhooks`: fallback_first's wrk run (same script, connections, duration) with each of "
                  "the 4 send tenants' webhook asking for message.sent, delivered to the simulator's "
                  "`POST /__sim/hooks/ok` (200 at once): every send writes an event in its completion "
                  "transaction and it is delivered during the run. `fallback_webhook_hang`: the same with tenant 0's "
                  "URL at `/__sim/hooks/hang` (never answers: 8 of its tries held open for the 15 s timeout, the "
                  "rest waiting in the outbox). Deliveries during the runs (simulator counts): %s / %s; events of "
                  "the hanging tenant waiting at the end: %s." % (
                      by.get("fallback_webhooks", {}).get("hooks", {}).get("ok", "-"),
                      by.get("fallback_webhook_hang", {}).get("hooks", {}).get("ok", "-"),
                      by.get("fallback_webhook_hang", {}).get("hang_waiting", "-"))]
    if "webhooks_drain" in by:
        d = by["webhooks_drain"]["webhooks"]
        if not lines:
            lines += ["", "## Tenant webhooks"]
        lines += ["", "`webhooks_drain`: %s message.sent events of 4 tenants written by the gateway's trigger in one "
                  "UPDATE of their messages (%.1f s), then the time from its commit until the simulator had "
                  "received all of them (sampled every 0.1 s): %.2f s, %.0f events/s (best second %.0f/s), "
                  "%d tries, %d delivered in the database; gateway CPU %.1f us and PostgreSQL CPU %.1f us per "
                  "event. Each tenant's deliveries run 8 at a time on the worker holding its step." % (
                      "{:,}".format(d["events"]), d["write_s"], d["elapsed_s"], d["per_s"], d["peak_per_s"],
                      d["tries"], d["delivered_in_db"], d["cpu_us_per_event"], d["pg_cpu_us_per_event"])]
    if "webhooks_lag" in by:
        w = by["webhooks_lag"]["webhooks"]
        if not lines:
            lines += ["", "## Tenant webhooks"]
        lines += ["", "`webhooks_lag`: signed Meta status callbacks paced at %d statuses/s (%.0f applied/s) "
                  "for the status tenant's pre-created messages, each making one message delivered: one "
                  "message.delivered event each, written by the trigger in the callback's transaction, delivered "
                  "to `/__sim/hooks/ok` (one tenant: 8 in flight). %d events, %d delivered, %.0f/s over %.1f s; lag "
                  "(delivered_at - created_at, PostgreSQL's clock) p50 %.1f ms, p99 %.1f ms, max %.1f ms." % (
                      w["target_per_s"], w["statuses_per_s"], w["events"], w["delivered"], w["per_s"], w["span_s"],
                      w["p50_ms"], w["p99_ms"], w["max_ms"])]
    return lines


def steps_report(b):
    """The durable-steps section: the fallback chains and the idle cost of pending steps."""
    by = {r["scenario"]: r for r in b.results}
    if "fallback_steps" not in by and "steps_idle" not in by:
        return []
    lines = ["", "## Durable steps", ""]
    if "fallback_steps" in by:
        ch = by["fallback_steps"]["chains"]
        lag, cb = ch["lag"], ch["callbacks"]
        lines += [
            "`fallback_steps`: %s tenant sends (`POST /api/omni/send` with a token, 4 tenants) over %d keep-alive "
            "connections from the bench process (test/bench/steps.py), each `{\"channels\":[\"whatsapp_meta\","
            "\"sms\"],\"fallbackOn\":\"delivered\"}` to its own number. Simulator rules: whatsapp_meta accepts "
            "and calls back `failed` (131026, signed) 20 ms after its answer; sms accepts, no callback. Each "
            "chain is one step, made due by the failed status. Lag = the SMS attempt's `attempted_at` (the "
            "transaction writing it `pending`, just before the provider call) minus the `failed` status's "
            "`received_at` in delivery_statuses (the transaction recording the callback), percentile_cont over "
            "the chains in SQL. Steps/s = `omnigate_steps_done_total{kind=\"fallback\"}` (sampled every 0.1 s) "
            "over the time from the first send to the last step done, for one instance with `--workers %d`; "
            "peak = the best 1 s stretch. The sends' rate bounds the steps' rate here: steps are made due only "
            "as fast as the sends and their callbacks come. Claim lag = `omnigate_step_lag_seconds` over the "
            "run (claim time minus due time, both PostgreSQL's clock; the due time is the failed status's "
            "write), as its buckets tell it (upper bounds): the part of the lag spent before a worker claimed "
            "the step; the rest is the step's load and its `pending` write. Over 500 ms: chains whose lag "
            "exceeded it. Statuses before their attempt: "
            "`omnigate_status_callbacks_total{provider=\"meta\",outcome=\"unknown_message\"}` over the run, "
            "callbacks whose write found no attempt yet (the send's completion write not committed): the "
            "completion write adopts such a status when it sees it (the step is then due at once); when "
            "neither saw the other, the once-a-second status sweep matches it, and only then is the step due "
            "(up to 1 s more). The database held %s earlier "
            "messages with an attempt and a status (--steps-history) planned with statistics; the gateway, "
            "PostgreSQL, the simulator and the driver (%.0f%% of a core) share the machine." % (
                "{:,}".format(ch["sends"]), by["fallback_steps"]["conns"], ch["workers"], ch["history"],
                100 * ch["driver_cpu_share"]), "",
            "| sends answered | sends/s | steps done | failed steps | elapsed s | steps/s | peak steps/s "
            "| lag p50 ms | lag p99 ms | lag max ms | over 500 ms | statuses before their attempt "
            "| claim lag p50 / p99 s | claims within 1 s | chains measured "
            "| one SMS | none | several | pending | steps left | SMS at simulator | callbacks ok / failed / pending "
            "| verified |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
            "|---|---|",
            "| %d | %.0f | %d | %d | %.2f | %.0f | %.0f | %.1f | %.1f | %.1f | %d | %d | <= %g / <= %g | %.1f%% | %d "
            "| %d | %d "
            "| %d | %d | %d | %d | %d / %d / %d | %s |" % (
                ch["answered"], by["fallback_steps"]["rps"], ch["steps_done"], ch["steps_failed"], ch["elapsed_s"],
                ch["steps_per_s"], ch["steps_per_s_peak"], lag["p50_ms"], lag["p99_ms"], lag["max_ms"],
                lag["over_500ms"], ch["meta_callbacks"].get("unknown_message", 0), ch["claim_lag"]["p50_le_s"],
                ch["claim_lag"]["p99_le_s"], 100 * ch["claim_lag"]["within_1s"],
                lag["count"], ch["one_sms"], ch["no_sms"], ch["several_sms"], ch["pending"], ch["steps_left"],
                ch["sim_sms_ok"], cb.get("ok", 0), cb.get("failed", 0), cb.get("pending", 0),
                "yes" if ch["ok"] else "**no**")]
        if not ch["complete"]:
            lines += ["", "**fallback_steps: not every step was done (no progress for 30 s).**"]
    if "steps_idle" in by:
        d = by["steps_idle"]["steps_idle"]
        lines += [
            "", "`steps_idle`: %s steps due in an hour inserted with SQL (`kind` fallback, no message), then "
            "VACUUM ANALYZE of the database and CHECKPOINT (so neither autovacuum nor the checkpointer works "
            "off the earlier scenarios' writes during the window), 2 s of quiet, then %.1f s with nothing "
            "running and no query from the bench. CPU = the scheduler's run time of every thread of the "
            "process tree (/proc/PID/task/TID/schedstat), in %% of one core: the gateway (supervisor and "
            "`--workers %d`: each worker claims every 0.5-1 s, and counts the steps due every fifth tick) and "
            "PostgreSQL (postmaster, its background processes and the gateway's backends)." % (
                "{:,}".format(d["steps"]), d["window_s"], d["workers"]), "",
            "| steps pending | due | gateway % of a core | PostgreSQL % of a core | window s | other active backends "
            "at the start |",
            "|---:|---:|---:|---:|---:|---:|",
            "| %d | %d | %.3f | %.3f | %.1f | %d |" % (d["steps_pending"], d["steps_due"], d["gateway_core_pct"],
                                                     d["pg_core_pct"], d["window_s"], d["active_backends"])]
    return lines


def report(b, dur, path, png):
    ceiling = next((r["rps"] for r in b.results if r["scenario"] == "nginx"), None)
    lines = ["# Omnigate benchmark", "",
             "Measured %s by `test/bench/run.sh` in one run on loopback. Machine: %d CPUs, kernel %s. "
             "Gateway: `--workers %d`, access log off, release build; PostgreSQL 15 with fsync=on, "
             "synchronous_commit=on; provider simulator on loopback (one worker); wrk, the gateway, PostgreSQL "
             "and the simulator share the machine. `x nginx` divides by nginx's req/s in the same run. "
             "The send scenarios start on the fresh database as a new deployment would: no warm-up, no "
             "ANALYZE (the `cold` scenario compares that with the same run after ANALYZE)." % (
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), os.cpu_count(), os.uname().release,
                 b.args.workers), "",
             "| scenario | what | conns | req/s | x nginx | p50 ms | p90 ms | p99 ms | errors | gateway CPU us/req "
             "| PostgreSQL CPU us/req | gateway RSS MiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in b.results:
        ratio = "%.3f" % (r["rps"] / ceiling) if ceiling and r["rps"] else "-"
        lines.append("| %s | %s | %d | %.0f | %s | %.2f | %.2f | %.2f | %d | %.1f | %.1f | %.1f |" % (
            r["scenario"], r["note"], r["conns"], r["rps"], ratio, r["p50_ms"], r["p90_ms"], r["p99_ms"],
            r["errors"], r["cpu_us_per_req"], r["pg_cpu_us_per_req"], r["rss_kib"] / 1024))
    t = targets(b)
    if t:
        lines += ["", "## Targets", "", "| target | measured | wanted | met |", "|---|---:|---:|---|"]
        lines += ["| %s | %s | %s | %s |" % (w, v, tg, "yes" if ok else "**no**") for w, v, tg, ok in t]
    lines += profile_report(b)
    lines += status_report(b)
    lines += readers_report(b)
    lines += webhooks_report(b)
    lines += steps_report(b)
    lines += logscale.report(b)
    lines += queue_bench.report(b)
    lines += usage_bench.report(b)
    if dur:
        lines += ["", "Durability: %d sends answered 2xx; %d of the send tenants' messages completed in the "
                  "database (`sent`, or `delivered`/`read`/`undelivered` since), each with its "
                  "winning attempt (%d without); %d still pending. **%s**" % (
                      dur["answered_2xx"], dur["rows_sent"], dur["sent_without_attempt"], dur["rows_pending"],
                      "OK" if dur["ok"] else "FAILED")]
    if png:
        lines += ["", "Chart: `%s`" % os.path.relpath(png, ROOT), "", "![chart](%s)" % os.path.basename(png)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    usage_bench.load_sql(ROOT)
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnigate", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--scenarios", default=",".join(s for s in SCENARIOS if s not in OPT_IN))
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--out", default=os.path.join(ROOT, "test/bench/results"))
    ap.add_argument("--status-conns", type=int, default=8,
                    help="statuses: connections posting status callbacks, each as soon as answered (on 2 "
                         "cores the rate is flat from 4 to 32: PostgreSQL is the limit, more only queue)")
    ap.add_argument("--status-rate", type=int, default=5000,
                    help="fallback_with_statuses: statuses per second posted alongside the sends (100 per POST)")
    ap.add_argument("--status-attempts", type=int, default=1000000,
                    help="statuses: pre-created attempts it may deliver (each at most once)")
    ap.add_argument("--steps-sends", type=int, default=10000,
                    help="fallback_steps: delivery-fallback sends whose WhatsApp attempt fails by callback")
    ap.add_argument("--steps-conns", type=int, default=16,
                    help="fallback_steps: connections the sends are posted over")
    ap.add_argument("--steps-history", type=int, default=200000,
                    help="fallback_steps: at least this many earlier messages with an attempt and a status in "
                         "the database (0: none beyond what other scenarios leave)")
    ap.add_argument("--idle-steps", type=int, default=100000,
                    help="steps_idle: steps due in an hour while the instance idles")
    ap.add_argument("--readers", type=int, default=8,
                    help="fallback_readers: concurrent log readers alongside the sends")
    ap.add_argument("--reader-messages", type=int, default=1000000,
                    help="fallback_readers: messages in the readers' tenant (generated in SQL)")
    ap.add_argument("--cold-duration", type=int, default=30,
                    help="cold: seconds of sends on the never-analyzed database, and again after ANALYZE")
    ap.add_argument("--logs-messages", type=int, default=10000000,
                    help="logs_scale: unified sends of the tenant whose log pages are measured")
    ap.add_argument("--logs-queries", type=int, default=100,
                    help="logs_scale: pages per filter (the first, then at random cursors)")
    ap.add_argument("--wh-events", type=int, default=40000,
                    help="webhooks_drain: webhook events written at once (over 4 tenants)")
    ap.add_argument("--wh-rate", type=int, default=1000,
                    help="webhooks_lag: status callbacks (so webhook events) per second; on 2 cores the status "
                         "path with its events saturates PostgreSQL near 1,500/s, and a lag measured past that "
                         "is the backlog's growth, not the outbox's")
    ap.add_argument("--queue-messages", type=int, default=20000,
                    help="queue_drain: queued sends accepted, then drained unpaced")
    ap.add_argument("--consent-rows", type=int, default=1000000,
                    help="consent: suppressions and windows loaded (each)")
    ap.add_argument("--usage-messages", type=int, default=10000000,
                    help="usage: messages of the tenant over the last 365 days")
    ap.add_argument("--batch-count", type=int, default=24,
                    help="batch_accept: batches of 1,000 messages posted from 4 threads")
    ap.add_argument("--batch-big", type=int, default=100000,
                    help="batch_counts: the batch whose counts are read while it drains (1,000 through "
                         "HTTP, the rest generated in SQL)")
    ap.add_argument("--queue-cold", action="store_true",
                    help="queue_drain: no VACUUM ANALYZE and CHECKPOINT before the queued phases (the cold "
                         "case: statistics as the references' runs left them, autovacuum's work inside the "
                         "measured phases)")
    ap.add_argument("--pacing-messages", type=int, default=5000,
                    help="queue_pacing: queued sends of the one paced sender")
    ap.add_argument("--pacing-rate", type=float, default=50,
                    help="queue_pacing: the sender's rate (tenant setting and simulator limit), messages/s")
    ap.add_argument("--pacing-instances", type=int, default=3,
                    help="queue_pacing: gateway instances on the one database")
    ap.add_argument("--priority-backlog", type=int, default=100000,
                    help="queue_priority: low messages queued (generated in SQL) ahead of the high ones")
    ap.add_argument("--priority-rate", type=float, default=1000,
                    help="queue_priority: their sender's rate, messages/s")
    ap.add_argument("--scale-sizes", default="1000,100000,1000000",
                    help="queue_scale: backlogs the claim is timed against (ascending)")
    ap.add_argument("--scale-backlog", type=int, default=100000,
                    help="queue_scale: messages draining while the sync sends' p99 is measured")
    ap.add_argument("--scale-rates", default="1000,80",
                    help="queue_scale: the rates that backlog drains at, messages/s, one run each (80: Meta's "
                         "default per number)")
    args = ap.parse_args()
    names = []
    for s in args.scenarios.split(","):
        for n in GROUPS.get(s, [s] if s else []):
            if n not in names:
                names.append(n)
    for n in names:
        if n not in SCENARIOS:
            sys.exit("bench: unknown scenario %s (known: %s; groups: %s)" % (n, ", ".join(SCENARIOS),
                                                                          ", ".join(GROUPS)))
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, hard), hard))

    b = Bench(args)
    try:
        b.start_pg()
        b.start_sim()
        load_catalogue(b)
        b.start_gateway()
        b.make_tenants()
        prepare_statuses(b, names)
        prepare_readers(b, names)
        for n in names:
            SCENARIOS[n](b)
        # Only fallback_steps scripts callbacks: any others would be load the scenarios did not ask for.
        log("simulator callbacks over the run: %s" % json.dumps(b.sim_stats()["callbacks"]))
        answered = sum(r["requests"] - r["non2xx"] for r in b.results if r["scenario"] in SENDS)
        dur = durability(b, answered) if any(n in SENDS for n in names) else None
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench.json"), "w") as f:
            json.dump({"results": [{k: v for k, v in r.items() if k != "raw"} for r in b.results],
                       "durability": dur, "targets": [{"what": w, "measured": v, "wanted": t, "met": ok}
                                                      for w, v, t, ok in targets(b)]}, f, indent=2)
        png = chart(b, os.path.join(args.out, "bench.png"))
        print(report(b, dur, os.path.join(args.out, "bench.md"), png))
        if dur and not dur["ok"]:
            sys.exit(1)
    finally:
        b.close()


if __name__ == "__main__":
    main()
