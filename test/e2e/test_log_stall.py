"""Issue 15: nothing blocks the loop. A log reader that stops reading costs log lines (dropped,
counted in /metrics, marked in the log), never answers; the loop-lag metrics show a callback
that does block the loop."""

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time

import pytest

from conftest import SANITIZER_MARKERS, Conn, Server, have_test_routes, omnigate_bin, request_bytes, wait_for
from gwlib import gateway_env, migrate


class PipedServer(Server):
    """A gateway whose stderr is a pipe the test reads only when it chooses to (the fixtures'
    Server writes it to a file, which never fills)."""

    def spawn(self):
        self.proc = subprocess.Popen([omnigate_bin()] + self.args, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.out = b""
        self.reader = None
        return self

    def _all_workers_started(self):
        # Its log is in the pipe, unread: count the workers instead.
        return len(self.worker_pids()) >= self.workers

    def start_reading(self):
        """Reads the pipe from now on until it closes, as a log collector that caught up would."""
        def run():
            while True:
                chunk = self.proc.stderr.read1(65536)
                if not chunk:
                    return
                self.out += chunk
        self.reader = threading.Thread(target=run, daemon=True)
        self.reader.start()

    def wait_quiet(self, quiet=0.3, timeout=10):
        """Waits until the pipe has given nothing for `quiet` seconds: the workers have written
        out what they kept."""
        deadline = time.monotonic() + timeout
        seen, since = len(self.out), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if len(self.out) != seen:
                seen, since = len(self.out), time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
        raise AssertionError("the log kept coming for %d s" % timeout)

    def stderr(self):
        return self.out.decode("utf-8", "replace")

    def finish(self):
        """Reads the rest of the pipe while the server stops; returns the exit code."""
        if self.reader is None:
            self.start_reading()
        rc = self.stop()
        self.reader.join(10)
        return rc

    def close_log(self):
        pass


@pytest.fixture
def piped_gateway(fresh_db, tmp_path):
    migrate(fresh_db)
    servers = []

    def factory(workers=2, env=None):
        srv = PipedServer(env=gateway_env(fresh_db, env), workers=workers, tmpdir=str(tmp_path))
        servers.append(srv)
        return srv.start()

    yield factory
    for srv in servers:
        if srv.proc.poll() is None:
            srv.finish()


def scrape(srv):
    r = srv.request("GET", "/metrics")
    assert r.status == 200
    samples = {}
    for line in r.body.decode().splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def test_stalled_log_reader_costs_lines_not_answers(piped_gateway):
    """With stderr a pipe nobody reads and the access log on, 6000 requests (the access lines
    fill the 64 KiB pipe about 20 times over) all answer fast, so no worker waits for the pipe;
    /metrics counts the lines dropped. Once the pipe is read again, every line that comes out
    is one whole JSON object, each worker's access lines in the order of its requests, and the
    "log lines dropped" lines account for every dropped line."""
    srv = piped_gateway(workers=2, env={"OMNIGATE_ACCESS_LOG": "true"})
    n, conns = 6000, 4
    worst = 0.0
    cs = [Conn(srv.port) for _ in range(conns)]
    try:
        for i in range(n):
            c = cs[i % conns]
            t0 = time.monotonic()
            c.send(request_bytes("GET", "/healthz"))
            r = c.read_response()
            worst = max(worst, time.monotonic() - t0)
            assert r.status == 200
    finally:
        for c in cs:
            c.close()
    # A worker that waited for the pipe would never answer again (nobody reads it); a second
    # is room for a loaded CI machine, not for a stall.
    assert worst < 1.0, "slowest /healthz took %.3f s" % worst
    dropped = scrape(srv)["omnigate_log_lines_dropped_total"]
    assert dropped > 0

    srv.start_reading()
    srv.wait_quiet()
    # Lines after the gap: a fresh connection each, so both workers log one (SO_REUSEPORT).
    for _ in range(20):
        assert srv.request("GET", "/healthz").status == 200
    # (The first scrape's own access line may have been dropped after it answered.)
    dropped = scrape(srv)["omnigate_log_lines_dropped_total"]
    rc = srv.finish()
    text = srv.stderr()
    assert not [m for m in SANITIZER_MARKERS if m in text], text[-6000:]
    assert rc == 0

    records = []
    for line in text.split("\n")[:-1]:
        rec = json.loads(line)  # a torn or interleaved line fails here
        assert isinstance(rec, dict) and "time" in rec and "pid" in rec, line
        records.append(rec)
    assert text.endswith("\n")
    last = {}
    for rec in records:
        if rec.get("msg") == "access":
            seq = int(rec["requestId"].rsplit("-", 1)[1], 16)
            assert seq > last.get(rec["pid"], 0), rec
            last[rec["pid"]] = seq
    gaps = [rec["lines"] for rec in records if rec.get("msg") == "log lines dropped"]
    assert gaps and sum(gaps) == dropped
    accessed = sum(1 for rec in records if rec.get("msg") == "access")
    assert accessed + dropped >= n + 20 + 2  # every request logged or counted (and the scrapes)


def test_stalled_log_reader_does_not_stop_the_supervisor(piped_gateway):
    """With the pipe full, workers killed by SIGKILL are still reaped and restarted (each
    death and restart is a supervisor log line: one written blocking would stop it for good),
    and SIGTERM still drains and stops the server."""
    srv = piped_gateway(workers=2, env={"OMNIGATE_ACCESS_LOG": "true"})
    # One page of pipe: the supervisor's lines cannot all fit in what the workers leave.
    fcntl.fcntl(srv.proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    c = Conn(srv.port)
    try:
        for _ in range(200):  # about 250 bytes an access line
            c.send(request_bytes("GET", "/healthz"))
            assert c.read_response().status == 200
    finally:
        c.close()
    # The pipe fills (the workers write their buffered lines within 100 ms): what is in it then
    # leaves no room for another access line.
    def queued():
        return struct.unpack("i", fcntl.ioctl(srv.proc.stderr.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    assert wait_for(lambda: queued() > 4096 - 300, 5), queued()
    for _ in range(3):
        old = set(srv.worker_pids())
        os.kill(sorted(old)[0], signal.SIGKILL)
        assert wait_for(lambda: len(set(srv.worker_pids()) - old) == 1 and len(srv.worker_pids()) == 2, 15), \
            "a killed worker was not replaced while the log pipe was full"
    assert srv.request("GET", "/healthz").status == 200
    rc = srv.finish()
    assert rc == 0
    msgs = [json.loads(line).get("msg") for line in srv.stderr().split("\n")[:-1]]
    assert "supervisor exiting" in msgs


@pytest.mark.skipif(not have_test_routes(), reason="needs -Dtest_routes=true")
def test_loop_lag_shows_a_blocked_loop(piped_gateway):
    """GET /__test/block?ms=400 holds a worker's loop for 400 ms: its lag timer (due every
    100 ms) runs at least 300 ms late, which omnigate_loop_lag_max_seconds (the largest lag
    of the last 10 s) and the omnigate_loop_lag_seconds histogram show."""
    srv = piped_gateway(workers=1)
    srv.start_reading()
    # A few ticks of an idle loop.
    assert wait_for(lambda: scrape(srv)["omnigate_loop_lag_seconds_count"] >= 3, 5)
    s = scrape(srv)
    assert s["omnigate_loop_lag_max_seconds"] < 0.3
    assert s["omnigate_loop_lag_seconds_count"] >= 1
    idle_slow = s['omnigate_loop_lag_seconds_bucket{le="+Inf"}'] - s['omnigate_loop_lag_seconds_bucket{le="0.25"}']

    t0 = time.monotonic()
    assert srv.request("GET", "/__test/block?ms=400").status == 200
    assert time.monotonic() - t0 >= 0.4
    s = scrape(srv)
    assert s["omnigate_loop_lag_max_seconds"] >= 0.3
    slow = s['omnigate_loop_lag_seconds_bucket{le="+Inf"}'] - s['omnigate_loop_lag_seconds_bucket{le="0.25"}']
    assert slow == idle_slow + 1
    assert srv.finish() == 0
