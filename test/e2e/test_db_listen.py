"""og_db_listen (src/data/db/listen.c): one dedicated connection LISTENing on a channel, driven by the
worker's loop, that reports every (re)connect and every notification and closes cleanly.

The driver is og-dblisten (test/e2e/dblisten.c, linked against og_data only); its path comes
from OMNIGATE_DBLISTEN_BIN (test/e2e/meson.build). It prints "connected" for each (re)connect,
"notify <payload>" for each notification and "closed" when og_db_close has finished, and exits
0 only when no handle was left open. Standard library only.
"""

import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import SANITIZER_MARKERS, free_port

# Generous for ASan/UBSan builds on a 2-core machine. The listener's backoff grows to 5 s, so a
# server that stays away for a few seconds may take up to 5 s more to be noticed back.
LINE_TIMEOUT = 10.0
RECONNECT_TIMEOUT = 15.0
EXIT_TIMEOUT = 10.0


def dblisten_bin():
    path = os.environ.get("OMNIGATE_DBLISTEN_BIN")
    if not path:
        pytest.skip("OMNIGATE_DBLISTEN_BIN is not set: point it at the built og-dblisten")
    return path


def psql(url, sql):
    """Runs `sql` as one psql -c (one implicit transaction unless it says BEGIN/COMMIT)."""
    p = subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


class Listener:
    """og-dblisten on `url`, its stdout lines gathered by a thread so tests wait with deadlines."""

    def __init__(self, url):
        self.proc = subprocess.Popen([dblisten_bin(), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.err = []
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
                        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self, stream, into):
        for line in stream:
            with self.cond:
                into.append(line.rstrip("\n"))
                self.cond.notify_all()

    def snapshot(self):
        with self.cond:
            return list(self.lines)

    def wait_lines(self, n, timeout=LINE_TIMEOUT):
        """Waits until at least `n` lines have arrived; returns all of them (fails on timeout)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.lines) < n:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._pumping()):
                    break  # out of time, or it exited and every line is in
                self.cond.wait(min(left, 0.2))
            lines = list(self.lines)
        assert len(lines) >= n, "expected %d lines, got %r; stderr: %s" % (n, lines, "\n".join(self.err[-20:]))
        return lines

    def no_line_beyond(self, n, timeout):
        """True when no line beyond the first `n` arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.lines) <= n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self.cond.wait(left)
            return False

    def _pumping(self):
        return any(t.is_alive() for t in self.threads)

    def stop(self, how="quit"):
        """Stops it by a "quit" line or SIGTERM and checks a clean exit: 0, "closed", no report."""
        if how == "quit":
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=EXIT_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self.threads:
                t.join(timeout=5)
            self.proc.stdin.close()
        err = "\n".join(self.err)
        assert rc == 0, "exit %d; stderr:\n%s" % (rc, err)
        assert not [m for m in SANITIZER_MARKERS if m in err], err
        lines = self.snapshot()
        assert lines and lines[-1] == "closed", lines
        return lines

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def listen():
    started = []

    def start(url):
        lst = Listener(url)
        started.append(lst)
        return lst

    yield start
    for lst in started:
        lst.kill()


def listener_backend(url):
    """The pid of the backend that runs the listener's LISTEN, once it is visible."""
    deadline = time.monotonic() + LINE_TIMEOUT
    while True:
        pid = psql(url, "select pid from pg_stat_activity where datname = current_database() "
                        "and query = 'LISTEN og_steps'")
        if pid or time.monotonic() > deadline:
            return pid
        time.sleep(0.05)


def test_connected_comes_first_then_a_notification_arrives(fresh_db, listen):
    """"connected" is the first line; NOTIFY og_steps, 'x' arrives as "notify x"; other channels do not."""
    lst = listen(fresh_db)
    assert lst.wait_lines(1) == ["connected"]
    psql(fresh_db, "NOTIFY og_other, 'not for us'")
    psql(fresh_db, "NOTIFY og_steps, 'x'")
    assert lst.wait_lines(2) == ["connected", "notify x"]
    assert lst.stop() == ["connected", "notify x", "closed"]


def test_every_notification_of_one_transaction_arrives_in_order(fresh_db, listen):
    """Several notifications committed together all arrive, in order; a rolled-back one never does."""
    lst = listen(fresh_db)
    assert lst.wait_lines(1) == ["connected"]
    psql(fresh_db, "BEGIN; NOTIFY og_steps, 'rolled back'; ROLLBACK")
    psql(fresh_db, "BEGIN; NOTIFY og_steps, 'a'; NOTIFY og_steps, 'b'; SELECT pg_notify('og_steps', 'c'); "
                   "NOTIFY og_steps; COMMIT")
    expected = ["connected", "notify a", "notify b", "notify c", "notify "]
    assert lst.wait_lines(len(expected)) == expected
    assert lst.stop() == expected + ["closed"]


def test_reconnects_after_its_backend_is_terminated(fresh_db, listen):
    """pg_terminate_backend of the listener's backend: a new "connected" soon after, and later
    notifications arrive on the new backend."""
    lst = listen(fresh_db)
    assert lst.wait_lines(1) == ["connected"]
    old = listener_backend(fresh_db)
    assert old, "no backend runs LISTEN og_steps"
    assert psql(fresh_db, "select pg_terminate_backend(%s)" % old) == "t"
    assert lst.wait_lines(2, timeout=RECONNECT_TIMEOUT) == ["connected", "connected"]
    new = listener_backend(fresh_db)
    assert new and new != old
    psql(fresh_db, "NOTIFY og_steps, 'after'")
    assert lst.wait_lines(3) == ["connected", "connected", "notify after"]
    assert lst.stop(how="term") == ["connected", "connected", "notify after", "closed"]


def test_reconnects_after_the_server_restarts(pg_private, listen):
    """Stopping and starting PostgreSQL: a new "connected" within seconds, then notifications again."""
    url = pg_private.url
    lst = listen(url)
    assert lst.wait_lines(1) == ["connected"]
    pg_private.stop()
    pg_private.start()
    assert lst.wait_lines(2, timeout=RECONNECT_TIMEOUT) == ["connected", "connected"]
    psql(url, "NOTIFY og_steps, 'back'")
    assert lst.wait_lines(3) == ["connected", "connected", "notify back"]
    assert lst.stop() == ["connected", "connected", "notify back", "closed"]


def test_waits_for_a_server_that_is_down_at_start(pg_private, listen):
    """A database down at start is retried in the background: "connected" once it is up."""
    url = pg_private.url
    pg_private.stop()
    lst = listen(url)
    assert lst.no_line_beyond(0, timeout=1.0), lst.snapshot()
    pg_private.start()
    assert lst.wait_lines(1, timeout=RECONNECT_TIMEOUT) == ["connected"]
    psql(url, "NOTIFY og_steps, 'up'")
    assert lst.wait_lines(2) == ["connected", "notify up"]
    assert lst.stop() == ["connected", "notify up", "closed"]


def test_closes_at_once_while_the_database_is_unreachable(listen):
    """Closing while the listener is down or connecting never waits for the network."""
    lst = listen("postgresql://omnigate@127.0.0.1:%d/omnigate?connect_timeout=30" % free_port())
    assert lst.no_line_beyond(0, timeout=0.5), lst.snapshot()
    t0 = time.monotonic()
    assert lst.stop() == ["closed"]
    assert time.monotonic() - t0 < 5.0
