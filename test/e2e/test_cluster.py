"""Issue 6: three instances behind haproxy (Debian package) on loopback, one PostgreSQL, the
provider simulator. Sends are driven through haproxy while one instance is killed with
SIGKILL and another drained with SIGTERM; afterwards every send answered 2xx is in the
database with all its attempts, haproxy stopped routing to the dead instance within its check
interval, an idempotent repeat through haproxy was sent once and the OTP limits held across
instances. The figures are printed (pytest -s shows them) and written to
<builddir>/junit/../cluster-figures.json when OMNIGATE_CLUSTER_FIGURES is set."""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import Closed, Conn, free_port, request_bytes, wait_for
from gwlib import SETTINGS_ALL, magic, new_tenant, new_token, provider_env, query_url, sim  # noqa: F401

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
CHECK_INTER_MS = 500
FALL = 2


class Haproxy:
    def __init__(self, tmp, backends):
        self.port = free_port()
        self.sock = os.path.join(tmp, "haproxy.sock")
        cfg = os.path.join(tmp, "haproxy.cfg")
        # The servers, the checks and the retry policy of deploy/haproxy.cfg.
        env = dict(os.environ, OMNIGATE_LB_BIND="127.0.0.1:%d" % self.port, OMNIGATE_LB_STATS_SOCKET=self.sock,
                   OMNIGATE_LB_STATS_BIND="127.0.0.1:%d" % free_port())
        for i, port in enumerate(backends):
            env["OMNIGATE_LB_SERVER%d" % (i + 1)] = "127.0.0.1:%d" % port
        src = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "haproxy.cfg")
        shutil.copy(src, cfg)
        self.log = open(os.path.join(tmp, "haproxy.log"), "wb")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], env=env, stdout=self.log, stderr=self.log)
        assert wait_for(lambda: self.status("omnigate", "og1") is not None, 10), open(self.log.name).read()

    def stats(self):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            s.connect(self.sock)
            s.sendall(b"show stat\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
            s.close()
        except OSError:
            return None
        lines = out.decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        return [dict(zip(head, ln.split(","))) for ln in lines[1:] if ln]

    def status(self, backend, server):
        for row in self.stats() or []:
            if row["pxname"] == backend and row["svname"] == server:
                return row["status"]
        return None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def sigkill_instance(srv):
    """SIGKILL the supervisor and its workers at once: a crash, not a drain."""
    workers = srv.worker_pids()
    os.kill(srv.pid, signal.SIGKILL)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    srv.proc.wait(10)


@pytest.mark.skipif(not os.path.exists(HAPROXY), reason="haproxy is not installed (deploy/install-deps.sh)")
def test_three_instances_behind_haproxy_kill_and_drain(make_gateway, sim, fresh_db, tmp_path):
    sim.clear()
    env = provider_env(sim, {"OMNIGATE_DRAIN_DELAY_MS": str(CHECK_INTER_MS * (FALL + 1)),
                             "OMNIGATE_ATTEMPT_TIMEOUT_MS": "2000", "OMNIGATE_DB_TIMEOUT_MS": "1000"})
    inst = [make_gateway(workers=1, env=env, url=fresh_db) for _ in range(3)]
    for s in inst:
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(inst[0], settings=SETTINGS_ALL)
    tok = new_token(inst[0], t["id"])["token"]
    lb = Haproxy(str(tmp_path), [s.port for s in inst])
    try:
        assert wait_for(lambda: all(lb.status("omnigate", "og%d" % i) == "UP" for i in (1, 2, 3)), 10)
        figures = run_load(lb, inst, tok, fresh_db, sim)
    finally:
        lb.stop()
    print("\ncluster figures: " + json.dumps(figures))
    out = os.environ.get("OMNIGATE_CLUSTER_FIGURES")
    if out:
        with open(out, "w") as f:
            json.dump(figures, f, indent=2)


def run_load(lb, inst, tok, db, sim):
    stop = threading.Event()
    lock = threading.Lock()
    answered = {}        # idempotency key -> reference, for every 2xx
    failed = []          # (key, phase, what) for every non-2xx or transport error
    phase = ["before"]

    def client(i):
        conn, n = None, 0
        while not stop.is_set():
            n += 1
            key = "c%02d-%05d" % (i, n)
            body = json.dumps({"to": magic(0, 0, 0, "%02d%02d" % (i, n % 100)), "text": "lb %s" % key})
            hdrs = [("Authorization", "Bearer " + tok), ("Content-Type", "application/json"),
                    ("Idempotency-Key", key)]
            try:
                if conn is None:
                    conn = Conn(lb.port, timeout=15)
                conn.send(request_bytes("POST", "/api/omni/send", hdrs, body))
                r = conn.read_response(timeout=15)
            except (Closed, OSError) as e:
                with lock:
                    failed.append((key, phase[0], type(e).__name__, body))
                if conn:
                    conn.close()
                conn = None
                continue
            with lock:
                if r.status == 200:
                    answered[key] = r.json()["data"]["reference"]
                else:
                    failed.append((key, phase[0], r.status, body))
            if (r.header("Connection") or "").lower() == "close":
                conn.close()
                conn = None

    threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
    for th in threads:
        th.start()
    time.sleep(1.5)

    # SIGKILL instance 1 (og1): measure until haproxy has it DOWN.
    phase[0] = "kill"
    t_kill = time.monotonic()
    sigkill_instance(inst[0])
    assert wait_for(lambda: lb.status("omnigate", "og1") == "DOWN", 5)
    route_around_s = time.monotonic() - t_kill
    time.sleep(1.0)

    # SIGTERM instance 2 (og2): it drains and exits 0; haproxy takes it out via /readyz 503.
    phase[0] = "drain"
    t_drain = time.monotonic()
    inst[1].signal(signal.SIGTERM)
    assert wait_for(lambda: lb.status("omnigate", "og2") in ("DOWN", "NOLB", "MAINT"), 5)
    drain_out_s = time.monotonic() - t_drain
    rc = inst[1].wait(20)
    phase[0] = "after"
    time.sleep(1.0)
    stop.set()
    for th in threads:
        th.join(20)
    assert rc == 0

    # Every send answered 2xx is in the database, sent, with all its attempts (one here).
    refs = sorted(answered.values())
    rows = query_url(db, "SELECT m.reference FROM messages m WHERE m.status = 'sent' "
                         "AND (SELECT count(*) FROM attempts a WHERE a.tenant_id = m.tenant_id "
                         "AND a.reference = m.reference) = 1")
    committed = {r[0] for r in rows}
    in_db = len(set(refs) & committed)
    assert in_db == len(refs), (in_db, len(refs))
    assert len(set(refs)) == len(refs)
    kill_failures = [f for f in failed if f[1] == "kill"]
    drain_failures = [f for f in failed if f[1] == "drain"]
    # Outside the kill window nothing fails; during the drain nothing fails either.
    assert [f for f in failed if f[1] in ("before", "after")] == [], failed
    assert drain_failures == [], drain_failures
    # At most the requests in flight on the killed instance fail (one per client at most).
    assert len(kill_failures) <= 12, kill_failures
    # haproxy routed around the dead instance within its check interval x fall (+ one interval).
    assert route_around_s <= (CHECK_INTER_MS * (FALL + 1)) / 1000.0 + 0.5, route_around_s

    # Every send that failed during the kill is retried with its key until it is resolved
    # (API.md §15): sent (200, maybe replayed), failed (502 delivery_failed) or 502
    # outcome_unknown once the dead instance's claim is past its lease (the send budget:
    # 3 x 2 x 1 s + 3 x 2 s + 5 s = 17 s). None stays unresolved, none is lost, none is sent twice.
    resolved = {}

    def retry(f):
        key, body = f[0], f[3]
        hdrs = [("Authorization", "Bearer " + tok), ("Content-Type", "application/json"), ("Idempotency-Key", key)]
        try:
            with Conn(lb.port, timeout=15) as c:
                c.send(request_bytes("POST", "/api/omni/send", hdrs, body))
                r = c.read_response(timeout=15)
        except (Closed, OSError):
            return False
        if r.status == 200:
            resolved[key] = "sent"
        elif r.status == 502:
            resolved[key] = r.json()["error"]["code"]
        return key in resolved
    for f in kill_failures:
        assert wait_for(lambda f=f: retry(f), 30), f
    outcomes = {k: sorted(resolved.values()).count(k) for k in ("sent", "delivery_failed", "outcome_unknown")}
    assert sum(outcomes.values()) == len(kill_failures), (outcomes, resolved)
    # No key has two messages, and the provider got at most one request per message.
    per_key = query_url(db, "SELECT count(*) FROM idempotency_keys k JOIN messages m ON m.tenant_id = k.tenant_id "
                            "AND m.reference = k.reference GROUP BY k.key HAVING count(*) > 1")
    assert per_key == []
    sent_rows = int(query_url(db, "SELECT count(*) FROM messages WHERE status = 'sent'")[0][0])
    unknown_rows = int(query_url(db, "SELECT count(*) FROM messages WHERE status = 'unknown'")[0][0])
    pending_rows = int(query_url(db, "SELECT count(*) FROM messages WHERE status = 'pending'")[0][0])
    provider_requests = len(sim.requests("whatsapp_qr"))
    assert sent_rows <= provider_requests <= sent_rows + unknown_rows, (sent_rows, unknown_rows, provider_requests)
    assert pending_rows == 0, pending_rows

    # An idempotent repeat through haproxy is answered from the first send, sent once.
    key, ref = next(iter(answered.items()))
    before = len(sim.requests("whatsapp_qr"))
    r = call_lb(lb, tok, key, "POST", {"to": "+19990000000", "text": "ignored"})
    assert r.status == 422  # same key, different body: refused
    body_key = "repeat-through-lb"
    r1 = call_lb(lb, tok, body_key, "POST", {"to": "+6281234567001", "text": "once"})
    r2 = call_lb(lb, tok, body_key, "POST", {"to": "+6281234567001", "text": "once"})
    assert r1.status == 200 and r2.status == 200 and r2.header("Idempotency-Replayed") == "true"
    assert r1.json()["data"]["reference"] == r2.json()["data"]["reference"]
    assert len(sim.requests("whatsapp_qr")) == before + 1

    # OTP limits hold across the instances behind haproxy: 4 simultaneous sends, one passes.
    statuses = []
    barrier = threading.Barrier(4)

    def otp():
        barrier.wait()
        statuses.append(call_lb(lb, tok, None, "POST", {"to": "+6281234567002"}, "/api/sms/otp/send").status)
    ts = [threading.Thread(target=otp) for _ in range(4)]
    for x in ts:
        x.start()
    for x in ts:
        x.join(15)
    assert sorted(statuses) == [200, 429, 429, 429], statuses

    return {"sendsAnswered2xx": len(refs), "sendsInDatabase": in_db, "failedDuringKill": len(kill_failures),
            "retriedAfterKill": outcomes, "providerRequests": provider_requests, "messagesSent": sent_rows,
            "messagesUnknown": unknown_rows,
            "failedDuringKillDetail": sorted({str(f[2]) for f in kill_failures}),
            "failedDuringDrain": len(drain_failures), "routeAroundDeadSeconds": round(route_around_s, 3),
            "drainedOutOfRotationSeconds": round(drain_out_s, 3),
            "checkIntervalMs": CHECK_INTER_MS, "fall": FALL}


def call_lb(lb, tok, key, method, body, path="/api/omni/send"):
    hdrs = [("Authorization", "Bearer " + tok), ("Content-Type", "application/json")]
    if key:
        hdrs.append(("Idempotency-Key", key))
    with Conn(lb.port, timeout=15) as c:
        c.send(request_bytes(method, path, hdrs, json.dumps(body)))
        return c.read_response(timeout=15)
