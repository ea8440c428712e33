"""Fixtures and helpers for the end-to-end suite: the real `omnigate` binary on loopback.

Standard library only. Every socket operation is bounded by a timeout so a hung server fails
a test instead of hanging CI. The binary comes from OMNIGATE_BIN (set by test/e2e/meson.build);
when it is unset the build tree's build-test/src/omnigate or build/src/omnigate is used.
"""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import oacheck

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Generous for ASan/UBSan builds on a 2-core CI machine.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0
IO_TIMEOUT = 5.0

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer", "SUMMARY: AddressSanitizer")


def omnigate_bin():
    path = os.environ.get("OMNIGATE_BIN")
    if path:
        return path
    for cand in ("build-test/src/omnigate", "build/src/omnigate"):
        p = os.path.join(ROOT, cand)
        if os.path.exists(p):
            return p
    pytest.fail("OMNIGATE_BIN is not set and no built binary was found")


def have_test_routes():
    return os.environ.get("OMNIGATE_TEST_ROUTES", "1") == "1"


def wait_for(pred, timeout, interval=0.05):
    """Polls pred() until it is truthy or `timeout` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return pred()


from pgcluster import free_port  # noqa: E402,F401  (one list of handed-out ports)


def base_env(extra=None):
    """The environment for the binary: inherited minus any OMNIGATE_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIGATE_")}
    # Servers in tests stop at once on SIGTERM unless a test asks for the production delay.
    env["OMNIGATE_DRAIN_DELAY_MS"] = "0"
    if extra:
        env.update(extra)
    return env


def run_cli(args, env=None, timeout=15):
    """Runs a short omnigate command (version, --help, bad config) and returns CompletedProcess."""
    return subprocess.run([omnigate_bin()] + list(args), env=base_env(env), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------------------------
# HTTP on raw sockets


class Response:
    def __init__(self, version, status, reason, headers, body):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value) as received
        self.body = body
        self.raw_len = None  # bytes of status line + headers + body as received

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    @property
    def request_id(self):
        return self.header("X-Request-Id")

    def __repr__(self):
        return "<Response %s %d %r headers=%r body=%r>" % (self.version, self.status, self.reason,
                                                          self.headers, self.body[:300])


class Closed(Exception):
    """The peer closed the connection (EOF or reset) before a full response arrived."""


class Conn:
    """One client connection with a receive buffer, so pipelined responses can be read one by one."""

    def __init__(self, port, timeout=IO_TIMEOUT, host="127.0.0.1", bufsize=None):
        if bufsize is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:
            # Small kernel buffers, set before connecting so the window is small from the start
            # (and the kernel does not tune them up): what the peer cannot send shows at once.
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, bufsize)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        self.sock.settimeout(timeout)
        self.buf = b""
        self.eof = False
        # Responses from a gateway are checked against the OpenAPI document (oacheck.py): the
        # requests written on the socket are followed to know what each response answers.
        self.tracker = oacheck.RequestTracker() if oacheck.is_gateway(port) else None
        if self.tracker is not None:
            self.sock = oacheck.TrackedSocket(self.sock, self.tracker)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def settimeout(self, t):
        self.sock.settimeout(t)

    def _fill(self, deadline):
        """Reads more bytes into buf; raises Closed on EOF/reset, socket.timeout after deadline."""
        if self.eof:
            raise Closed("connection already closed; buffered %r" % self.buf[:200])
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out waiting for data; buffered %r" % self.buf[:200])
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError) as e:
            self.eof = True
            raise Closed("connection reset: %s; buffered %r" % (e, self.buf[:200]))
        if not chunk:
            self.eof = True
            raise Closed("connection closed by peer; buffered %r" % self.buf[:200])
        self.buf += chunk

    def read_response(self, timeout=IO_TIMEOUT, head=False):
        """Reads exactly one response (an interim 1xx counts as one) and returns a Response. A
        gateway's response is checked against the OpenAPI document (oacheck.py)."""
        resp = self._read_response(timeout, head)
        if self.tracker is not None and resp.status >= 200:
            req = self.tracker.next_request()
            # A success answers a request sent whole, which a test's writer thread may not have
            # recorded yet (TrackedSocket.send records what the kernel took, after taking it):
            # wait for that record rather than check the answer against no request.
            deadline = time.monotonic() + 2
            while req is False and resp.status < 400 and time.monotonic() < deadline:
                time.sleep(0.001)
                req = self.tracker.next_request()
            method, target = req if req else (None, None)
            oacheck.note_response(method, target, resp, head=head or method == "HEAD")
        return resp

    def _read_response(self, timeout, head):
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buf:
            self._fill(deadline)
        head_bytes, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head_bytes.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        assert len(parts) >= 2 and parts[0].startswith("HTTP/1."), "bad status line %r" % lines[0]
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            assert sep, "bad header line %r" % line
            headers.append((k.strip(), v.strip()))
        resp = Response(version, status, reason, headers, b"")
        resp.raw_len = len(head_bytes) + 4
        if status < 200 or status in (204, 304) or head:
            return resp
        te = resp.header("Transfer-Encoding")
        if te is not None and "chunked" in te.lower():
            resp.body = self._read_chunked(deadline)
            resp.raw_len = None  # not tracked for chunked responses
            return resp
        cl = resp.header("Content-Length")
        assert cl is not None, "response without Content-Length or chunked: %r" % resp
        n = int(cl)
        while len(self.buf) < n:
            self._fill(deadline)
        resp.body, self.buf = self.buf[:n], self.buf[n:]
        resp.raw_len += n
        return resp

    def _read_chunked(self, deadline):
        body = b""
        while True:
            while b"\r\n" not in self.buf:
                self._fill(deadline)
            line, self.buf = self.buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            while len(self.buf) < size + 2:
                self._fill(deadline)
            body += self.buf[:size]
            self.buf = self.buf[size + 2:]
            if size == 0:
                return body

    def wait_closed(self, timeout=IO_TIMEOUT):
        """Reads until the peer closes. Returns (seconds waited, bytes received meanwhile).
        Fails the test if the connection is still open after `timeout`."""
        start = time.monotonic()
        deadline = start + timeout
        data = self.buf
        self.buf = b""
        while not self.eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail("connection still open after %.1f s (received %r)" % (timeout, data[:200]))
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                self.eof = True
                break
            if not chunk:
                self.eof = True
                break
            data += chunk
        return time.monotonic() - start, data

    def is_open_after(self, seconds):
        """True when the connection is still open (no EOF, no data) after `seconds`."""
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(1)
        except socket.timeout:
            return True
        except (ConnectionResetError, BrokenPipeError):
            return False
        if chunk:
            self.buf += chunk
            return True
        return False


def request_bytes(method, path, headers=None, body=None, version="HTTP/1.1", host=True):
    """Serializes one request. `headers` is a list of (name, value); Content-Length is added when
    a body is given and no Content-Length / Transfer-Encoding header is."""
    headers = list(headers or [])
    names = {k.lower() for k, _ in headers}
    if host and "host" not in names:
        headers.insert(0, ("Host", "127.0.0.1"))
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        headers.append(("Content-Length", str(len(body))))
    out = "%s %s %s\r\n" % (method, path, version)
    out += "".join("%s: %s\r\n" % (k, v) for k, v in headers)
    out += "\r\n"
    return out.encode("latin-1") + (body or b"")


def chunked(body, sizes):
    """Encodes `body` in the chunked transfer coding, cutting it into chunks of `sizes` (cycled)."""
    out = b""
    i = 0
    k = 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        k += 1
        part = body[i:i + n]
        i += n
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


# --------------------------------------------------------------------------------------------
# The server process


class Server:
    """One `omnigate serve` supervisor with its workers, stderr captured to a file."""

    def __init__(self, args=(), env=None, workers=1, tmpdir=None):
        self.port = free_port()
        oacheck.register_gateway(self.port)
        self.workers = workers
        self.args = ["serve", "--listen", "127.0.0.1:%d" % self.port, "--workers", str(workers)] + list(args)
        self.env = base_env(env)
        # `serve` needs a database (API.md §9). Tests of the HTTP layer alone give it one that
        # refuses connections: the gateway serves /healthz and answers 503 where it needs it.
        if "OMNIGATE_DATABASE_URL" not in self.env:
            self.env["OMNIGATE_DATABASE_URL"] = "postgresql://omnigate@127.0.0.1:1/none?connect_timeout=1"
            self.env.setdefault("OMNIGATE_SECRET", "e2e-unused-secret-0123456789")
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="omnigate-e2e-")
        self.log_path = os.path.join(self.tmpdir, "server-%d.stderr" % self.port)
        self.proc = None
        self.returncode = None

    # lifecycle ---------------------------------------------------------------------------

    def spawn(self):
        """Starts the process without waiting for it to serve."""
        # A server stopped and started again is running again: make_server's teardown must stop
        # it (it skips servers whose returncode is set, which the earlier stop() had set).
        self.returncode = None
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([omnigate_bin()] + self.args, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log)
        return self

    def start(self):
        """Starts the process and waits until /healthz answers and every worker has started."""
        self.spawn()
        deadline = time.monotonic() + START_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("omnigate exited with %d at start:\n%s" % (self.proc.returncode, self.stderr()))
            try:
                with Conn(self.port, timeout=2) as c:
                    c.send(request_bytes("GET", "/healthz"))
                    r = c.read_response(timeout=2)
                    if r.status == 200 and self._all_workers_started():
                        return self
                    last = r
            except (OSError, Closed) as e:
                last = e
            time.sleep(0.05)
        self.kill()
        raise AssertionError("omnigate did not answer /healthz within %.0f s (last: %r):\n%s"
                             % (START_TIMEOUT, last, self.stderr()))

    def _all_workers_started(self):
        """Every worker has logged "worker started" (its signal handlers are in place), so a test
        that stops the server right away exercises the drain, not a start-up race. The start-up
        race has its own test (test_lifecycle.py)."""
        started = {r.get("pid") for r in self.log_records() if r.get("msg") == "worker started"}
        return len(started & set(self.worker_pids())) >= self.workers

    def workers_connected(self):
        """Every worker has logged "database connected": each connects on its own, so one
        worker's 200 from /readyz says nothing of another's."""
        connected = {r.get("pid") for r in self.log_records() if r.get("msg") == "database connected"}
        return connected >= set(self.worker_pids())

    @property
    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        """Waits for exit; returns the exit code or None when still running after `timeout`."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def kill(self):
        if self.proc and self.proc.poll() is None:
            for pid in self.worker_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)
        self.returncode = self.proc.returncode if self.proc else None

    def stop(self):
        """SIGTERM, wait for a graceful exit, SIGKILL as a fallback. Returns the exit code, or None
        if it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            self.returncode = self.proc.returncode
            return self.returncode
        workers = self.worker_pids()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait()
        if rc is None:
            self.kill()
            return None
        # Workers must not outlive the supervisor.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p in workers):
            time.sleep(0.05)
        for p in workers:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)
                raise AssertionError("worker %d survived its supervisor" % p)
        return rc

    def close_log(self):
        try:
            self._log.close()
        except Exception:
            pass

    # inspection ---------------------------------------------------------------------------

    def worker_pids(self):
        if self.proc is None:
            return []
        return child_pids(self.proc.pid)

    def stderr(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_records(self):
        """Every stderr line that is a JSON object."""
        out = []
        for line in self.stderr().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def wait_log(self, pred, timeout=5.0):
        """Waits until a log record satisfies `pred`; returns it (None after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            for rec in self.log_records():
                if pred(rec):
                    return rec
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def sanitizer_reports(self):
        text = self.stderr()
        return [m for m in SANITIZER_MARKERS if m in text]

    # convenience --------------------------------------------------------------------------

    def conn(self, timeout=IO_TIMEOUT, bufsize=None):
        return Conn(self.port, timeout=timeout, bufsize=bufsize)

    def request(self, method, path, headers=None, body=None, timeout=IO_TIMEOUT):
        """One request on a fresh connection; returns the Response."""
        with self.conn(timeout) as c:
            c.send(request_bytes(method, path, headers, body))
            return c.read_response(timeout=timeout, head=(method == "HEAD"))


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def child_pids(pid):
    """Live children of `pid`: /proc/<pid>/task/<pid>/children, else a scan of /proc."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split() if pid_alive(int(x))]
    except OSError:
        pass
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(name))
        except (OSError, IndexError, ValueError):
            pass
    return sorted(out)


def assert_clean_exit(srv, rc):
    """A graceful stop must exit 0 with no sanitizer report."""
    reports = srv.sanitizer_reports()
    assert not reports, "sanitizer report in server stderr (%s):\n%s" % (reports, srv.stderr()[-6000:])
    assert rc == 0, "server exit code %r after SIGTERM (expected 0); stderr tail:\n%s" % (rc, srv.stderr()[-4000:])


@pytest.fixture
def make_server(tmp_path):
    """Factory: make_server(args=[...], env={...}, workers=N) starts a private server that is
    stopped (and checked for a clean exit) at teardown."""
    servers = []

    def factory(args=(), env=None, workers=1, start=True):
        srv = Server(args=args, env=env, workers=workers, tmpdir=str(tmp_path))
        servers.append(srv)
        if start:
            srv.start()
        return srv

    yield factory
    stop_servers(servers)


def stop_servers(servers):
    """Stops what is still running of `servers` (SIGTERM) and checks each once: exit code 0 and
    no sanitizer report, or only the latter for one its test stopped; fails the test with what
    did not pass."""
    errors = []
    for srv in servers:
        if srv.proc is None or getattr(srv, "checked", False):
            continue
        srv.checked = True
        if srv.returncode is not None or srv.proc.poll() is not None:
            # The test stopped it itself and made its own assertions; still check sanitizers.
            reports = srv.sanitizer_reports()
            if reports:
                errors.append("sanitizer report (%s):\n%s" % (reports, srv.stderr()[-6000:]))
            srv.close_log()
            continue
        rc = srv.stop()
        srv.close_log()
        reports = srv.sanitizer_reports()
        if reports:
            errors.append("sanitizer report (%s):\n%s" % (reports, srv.stderr()[-6000:]))
        elif rc != 0:
            errors.append("server on port %d exited with %r at teardown; stderr tail:\n%s"
                          % (srv.port, rc, srv.stderr()[-4000:]))
    if errors:
        pytest.fail("\n\n".join(errors))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A shared server (2 workers, default limits) for tests that do not change settings or
    kill processes. Checked for a clean SIGTERM exit when the module ends."""
    srv = Server(workers=2, tmpdir=str(tmp_path_factory.mktemp("shared")))
    srv.start()
    yield srv
    rc = srv.stop()
    srv.close_log()
    assert_clean_exit(srv, rc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test (or its teardown) that received a response the OpenAPI document does not allow
    fails, with what did not match (oacheck.py)."""
    outcome = yield
    if call.when not in ("call", "teardown"):
        return
    problems = oacheck.take()
    if not problems:
        return
    rep = outcome.get_result()
    text = "responses that do not match src/product/static/openapi.json:\n  " + "\n  ".join(problems[:20])
    if len(problems) > 20:
        text += "\n  ... and %d more" % (len(problems) - 20)
    if rep.passed:
        rep.outcome = "failed"
        rep.longrepr = text
    else:
        rep.sections.append(("OpenAPI", text))


def pytest_sessionfinish(session):
    if os.environ.get("OMNIGATE_OPENAPI_COVERAGE") and oacheck.seen:
        oacheck.write_coverage(os.environ["OMNIGATE_OPENAPI_COVERAGE"])


needs_test_routes = pytest.mark.skipif(not have_test_routes(),
                                       reason="binary built without -Dtest_routes=true")


# --------------------------------------------------------------------------------------------
# Assertions on the API.md §0 envelope


def assert_envelope(resp):
    """Every JSON response: application/json, success/message/data, a valid X-Request-Id."""
    ctype = resp.header("Content-Type", "")
    assert ctype.split(";")[0].strip().lower() == "application/json", "Content-Type %r in %r" % (ctype, resp)
    rid = resp.request_id
    assert rid is not None and REQUEST_ID_RE.match(rid), "bad X-Request-Id %r in %r" % (rid, resp)
    j = resp.json()
    assert isinstance(j, dict), j
    assert isinstance(j.get("success"), bool), j
    assert isinstance(j.get("message"), str), j
    assert "data" in j, j
    return j


def assert_ok(resp, status=200):
    assert resp.status == status, resp
    j = assert_envelope(resp)
    assert j["success"] is True, j
    assert "error" not in j, j
    return j


def assert_error(resp, status, code, field=None):
    """A failure: exact status, success false, error.code, data null, and error.field if given."""
    assert resp.status == status, "expected %d %s, got %r" % (status, code, resp)
    j = assert_envelope(resp)
    assert j["success"] is False, j
    assert j["message"], j
    assert isinstance(j.get("error"), dict), j
    assert j["error"].get("code") == code, "expected error.code %r, got %r" % (code, j)
    if field is not None:
        assert j["error"].get("field") == field, j
    return j


# --------------------------------------------------------------------------------------------
# PostgreSQL and gateway fixtures (a real cluster, never a mock)

# The clusters of every test: the gateway's role owns its database and is no superuser, as in
# deploy/pg.sh, so a missing grant fails here as it would in production (pgcluster.py).
from pgcluster import fresh_db, pg_private, pg_session  # noqa: E402,F401
from gwlib import make_gateway, sim  # noqa: E402,F401
