#!/usr/bin/env python3
"""The template sync's cost (API.md §18): how long POST /admin/tenants/{id}/templates/sync takes
to read a WABA of 1,000 templates from Meta (10 pages of 100, from the provider simulator) and
replace its catalogue in one write, on a release build. Target: under 2 s.

A private PostgreSQL cluster (test/e2e/pgcluster.py), the simulator and a one-worker gateway on
loopback. The simulator's WABA gets `--templates` generated templates (its `generate`); a tenant
whose Meta number names that WABA is created (its own sync runs first and is waited for); then
the admin sync is timed `--runs` times: the first replaces rows that are already equal (no row
written), so the catalogue is emptied in SQL before each timed run to time the full insert, and
then timed once more unchanged. Printed: each run's wall time and the median.

usage: python3 test/bench/templates_sync.py --omnigate build-rel/src/omnigate \
           --sim build-rel/test/sim/omnigate-sim [--templates 1000] [--runs 5]
(build with: meson setup build-rel -Dbuildtype=release && ninja -C build-rel)
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from pgcluster import PgCluster  # noqa: E402

ADMIN = "bench-admin-token-0123456789"
SECRET = "bench-secret-0123456789abcdef"
META_TOKEN = "EAAGbenchAccessToken0123456789"
WABA = "102290129340398"
NUMBER = "6281234567890"
TARGET_S = 2.0


def log(msg):
    print("templates_sync: " + msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def call(base, method, path, body=None, token=ADMIN, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": "Bearer " + token}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "null")


def env_of(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIGATE_")}
    env.update(extra)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--omnigate", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--templates", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="og-bench-tpl-")
    procs = []
    try:
        with PgCluster() as pg:
            url = pg.url
            p = subprocess.run([a.omnigate, "migrate"], env=env_of({"OMNIGATE_DATABASE_URL": url,
                                                                   "OMNIGATE_SECRET": SECRET}),
                               capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise RuntimeError("migrate: " + p.stderr)
            sim_port, gw_port = free_port(), free_port()
            sim_log = open(os.path.join(tmp, "sim.log"), "wb")
            sim = subprocess.Popen([a.sim, "--listen", "127.0.0.1:%d" % sim_port],
                                   env=env_of({"OMNIGATE_ACCESS_LOG": "false"}), stdout=sim_log, stderr=sim_log)
            procs.append(sim)
            wait_port(sim_port, sim, "simulator")
            sim_base = "http://127.0.0.1:%d" % sim_port
            st, j = call(sim_base, "PUT", "/__sim/meta/wabas/%s/templates" % WABA, {"generate": a.templates})
            if st != 200:
                raise RuntimeError("simulator PUT: %d %s" % (st, j))
            gw_log = open(os.path.join(tmp, "gw.log"), "wb")
            gw = subprocess.Popen([a.omnigate, "serve"], stdout=gw_log, stderr=gw_log, env=env_of({
                "OMNIGATE_LISTEN": "127.0.0.1:%d" % gw_port, "OMNIGATE_WORKERS": "1",
                "OMNIGATE_DATABASE_URL": url, "OMNIGATE_SECRET": SECRET, "OMNIGATE_ADMIN_TOKEN": ADMIN,
                "OMNIGATE_META_BASE_URL": sim_base, "OMNIGATE_ACCESS_LOG": "false", "OMNIGATE_LOG_LEVEL": "warn",
                "OMNIGATE_DRAIN_DELAY_MS": "0"}))
            procs.append(gw)
            wait_port(gw_port, gw, "gateway")
            base = "http://127.0.0.1:%d" % gw_port
            deadline = time.monotonic() + 20
            while call(base, "GET", "/readyz")[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("gateway not ready")
                time.sleep(0.05)
            st, j = call(base, "POST", "/admin/tenants", {"name": "bench-templates", "settings": {
                "channels": {"whatsapp_meta": {"enabled": True, "numbers": {NUMBER: {
                    "phoneNumberId": "109876543210", "accessToken": META_TOKEN, "wabaId": WABA}}}}}})
            if st != 201:
                raise RuntimeError("tenant: %d %s" % (st, j))
            tenant = j["data"]["id"]
            count = lambda: int(pg.scalar("SELECT count(*) FROM wa_templates WHERE waba_id = '%s'" % WABA))
            deadline = time.monotonic() + 60
            while count() != a.templates:  # the sync the save made due
                if time.monotonic() > deadline:
                    raise RuntimeError("the save's sync did not finish: %d rows" % count())
                time.sleep(0.05)
            times = []
            for i in range(a.runs + 1):
                unchanged = i == a.runs
                if not unchanged:
                    pg.psql("DELETE FROM wa_templates WHERE waba_id = '%s'" % WABA)
                t0 = time.monotonic()
                st, j = call(base, "POST", "/admin/tenants/%s/templates/sync" % tenant)
                wall = time.monotonic() - t0
                if st != 200 or j["data"]["synced"] != a.templates or count() != a.templates:
                    raise RuntimeError("sync: %d %s, %d rows" % (st, j, count()))
                log("run %d%s: %.3f s, synced %d" % (i + 1, " (catalogue unchanged)" if unchanged else "", wall,
                                                      j["data"]["synced"]))
                if not unchanged:
                    times.append(wall)
            med = statistics.median(times)
            print("template sync of %d templates (%d pages): median %.3f s, min %.3f s, max %.3f s over %d runs; "
                  "target < %.1f s: %s" % (a.templates, (a.templates + 99) // 100, med, min(times), max(times),
                                            len(times), TARGET_S, "met" if med < TARGET_S else "MISSED"))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    main()
