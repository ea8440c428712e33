"""The process: supervisor and workers, graceful drain on SIGTERM/SIGINT, a killed worker
replaced, configuration errors at start, `version` and `--help`. One scenario per test."""

import os
import re
import signal
import socket
import time

import pytest

from conftest import (ROOT, wait_for, Closed, assert_clean_exit, assert_ok, child_pids, free_port, needs_test_routes,
                      pid_alive, request_bytes, run_cli)


def in_flight(srv, request_id):
    """Waits until a worker has started GET /__test/sleep of `request_id` (its log line)."""
    assert srv.wait_log(lambda r: r.get("msg") == "test sleep started" and r.get("requestId") == request_id,
                        10), srv.stderr()[-4000:]


def test_supervisor_forks_the_configured_number_of_workers(make_server):
    """--workers 3 gives a supervisor with exactly three worker children."""
    srv = make_server(workers=3)
    pids = wait_for(lambda: len(srv.worker_pids()) == 3 and srv.worker_pids(), 10)
    assert pids and len(pids) == 3, "children: %r" % srv.worker_pids()
    assert srv.pid not in pids


@needs_test_routes
def test_sigterm_finishes_in_flight_request_then_exits_0(make_server):
    """SIGTERM while GET /__test/sleep?ms=1500 is in flight: that request completes with 200,
    then the process exits 0."""
    srv = make_server(workers=1)
    with srv.conn(timeout=10) as c:
        start = time.monotonic()
        c.send(request_bytes("GET", "/__test/sleep?ms=1500", [("X-Request-Id", "in-flight")]))
        in_flight(srv, "in-flight")
        srv.signal(signal.SIGTERM)
        r = c.read_response(timeout=8)
        elapsed = time.monotonic() - start
        assert_ok(r)
        assert r.request_id == "in-flight"
        assert elapsed >= 1.4, "answered after %.2f s: the sleep was cut short" % elapsed
        assert r.header("Connection", "").lower() == "close", "a draining server should close: %r" % r
    rc = srv.wait(timeout=10)
    assert rc is not None, "server still running 10 s after SIGTERM"
    assert_clean_exit(srv, rc)


def test_sigterm_while_workers_start_exits_0(make_server):
    """SIGTERM that arrives while the workers are still starting is a clean stop: exit 0, with
    no worker killed by the signal's default action."""
    for _ in range(3):
        srv = make_server(workers=4, start=False)
        srv.spawn()
        assert wait_for(lambda: any(r.get("msg") == "supervisor started" for r in srv.log_records()), 10,
                        interval=0.002), srv.stderr()
        srv.signal(signal.SIGTERM)
        rc = srv.wait(timeout=10)
        assert rc is not None, "still running 10 s after SIGTERM"
        assert_clean_exit(srv, rc)


@needs_test_routes
def test_sigint_drains_like_sigterm(make_server):
    """SIGINT (Ctrl-C) drains the same way: the in-flight request completes and the exit code is 0."""
    srv = make_server(workers=2)
    with srv.conn(timeout=10) as c:
        c.send(request_bytes("GET", "/__test/sleep?ms=800", [("X-Request-Id", "sigint")]))
        in_flight(srv, "sigint")
        srv.signal(signal.SIGINT)
        assert_ok(c.read_response(timeout=8))
    rc = srv.wait(timeout=10)
    assert rc is not None, "server still running 10 s after SIGINT"
    assert_clean_exit(srv, rc)


@needs_test_routes
def test_drain_stops_accepting_and_closes_idle_connections(make_server):
    """During a drain, idle keep-alive connections are closed and new connections are not served,
    while the in-flight request still completes."""
    srv = make_server(workers=1)
    idle = srv.conn(timeout=10)
    busy = srv.conn(timeout=10)
    try:
        idle.send(request_bytes("GET", "/healthz"))
        assert_ok(idle.read_response())
        busy.send(request_bytes("GET", "/__test/sleep?ms=2000", [("X-Request-Id", "busy")]))
        in_flight(srv, "busy")
        srv.signal(signal.SIGTERM)
        # The listener closes in the same turn as the idle connections (worker.c stop_accepting).
        waited, data = idle.wait_closed(timeout=3)
        assert data == b"", "idle connection got %r at drain" % data[:200]
        served = False
        try:
            with srv.conn(timeout=2) as c:
                c.send(request_bytes("GET", "/healthz"))
                r = c.read_response(timeout=2)
                served = r.status == 200
        except (OSError, Closed):
            pass
        assert not served, "a new connection was served during the drain"
        assert_ok(busy.read_response(timeout=8))
    finally:
        idle.close()
        busy.close()
    rc = srv.wait(timeout=10)
    assert rc is not None
    assert_clean_exit(srv, rc)


@needs_test_routes
def test_drain_timeout_bounds_the_drain(make_server):
    """A request longer than --drain-timeout-ms (500) does not keep the process alive past it."""
    srv = make_server(["--drain-timeout-ms", "500"], workers=1)
    with srv.conn(timeout=15) as c:
        c.send(request_bytes("GET", "/__test/sleep?ms=20000", [("X-Request-Id", "long")]))
        in_flight(srv, "long")
        start = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.wait(timeout=10)
        elapsed = time.monotonic() - start
    assert rc is not None, "still running 10 s after SIGTERM with a 500 ms drain timeout"
    assert elapsed < 5.0, "exit took %.2f s" % elapsed
    assert not srv.sanitizer_reports(), srv.stderr()[-4000:]


@needs_test_routes
def test_second_signal_stops_at_once(make_server):
    """A second SIGTERM during a drain stops the workers at once instead of waiting for requests."""
    srv = make_server(workers=1)
    with srv.conn(timeout=15) as c:
        c.send(request_bytes("GET", "/__test/sleep?ms=20000", [("X-Request-Id", "long")]))
        in_flight(srv, "long")
        srv.signal(signal.SIGTERM)
        assert srv.wait_log(lambda r: r.get("msg") == "draining", 10), srv.stderr()[-4000:]
        start = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.wait(timeout=10)
        elapsed = time.monotonic() - start
    assert rc is not None, "still running 10 s after the second SIGTERM"
    assert elapsed < 3.0, "second signal took %.2f s to stop the process" % elapsed
    assert not srv.sanitizer_reports(), srv.stderr()[-4000:]


def test_killed_worker_is_replaced(make_server):
    """SIGKILL to a worker: the supervisor starts a new worker and requests keep succeeding."""
    srv = make_server(workers=2)
    pids = wait_for(lambda: len(srv.worker_pids()) == 2 and srv.worker_pids(), 10)
    assert pids, "expected 2 workers, got %r" % srv.worker_pids()
    victim = pids[0]
    os.kill(victim, signal.SIGKILL)
    new = wait_for(lambda: (lambda p: len(p) == 2 and victim not in p and p)(srv.worker_pids()), 10)
    assert new, "no replacement worker within 10 s: children now %r" % srv.worker_pids()
    assert pids[1] in new, "the surviving worker should be left alone: %r -> %r" % (pids, new)
    assert srv.proc.poll() is None, "supervisor exited after a worker was killed"
    for i in range(40):
        r = srv.request("GET", "/healthz", [("X-Request-Id", "after-kill-%d" % i)])
        assert_ok(r)
    replacement = [p for p in new if p not in pids][0]
    rec = srv.wait_log(lambda rec: rec.get("pid") == replacement, timeout=5)
    assert rec is not None, "replacement worker %d logged nothing" % replacement


def test_killed_only_worker_is_replaced(make_server):
    """With a single worker, killing it causes only a brief outage: a new one serves again."""
    srv = make_server(workers=1)
    pids = wait_for(lambda: len(srv.worker_pids()) == 1 and srv.worker_pids(), 10)
    assert pids
    os.kill(pids[0], signal.SIGKILL)

    def serving():
        try:
            return srv.request("GET", "/healthz", timeout=1).status == 200
        except (OSError, Closed):
            return False

    assert wait_for(serving, 10, interval=0.1), "no worker served again within 10 s"
    now = srv.worker_pids()
    assert len(now) == 1 and now[0] != pids[0], now


def test_workers_exit_with_the_supervisor(make_server):
    """After SIGTERM no worker process outlives the supervisor (checked by Server.stop)."""
    srv = make_server(workers=2)
    pids = wait_for(lambda: len(srv.worker_pids()) == 2 and srv.worker_pids(), 10)
    assert pids
    rc = srv.stop()
    assert_clean_exit(srv, rc)
    assert not any(pid_alive(p) for p in pids)


def test_env_settings_are_used(make_server):
    """OMNIGATE_LISTEN and OMNIGATE_WORKERS from the environment configure the server."""
    port = free_port()
    srv = make_server(env={"OMNIGATE_LISTEN": "127.0.0.1:%d" % port, "OMNIGATE_WORKERS": "2"}, workers=2,
                      start=False)
    srv.args = ["serve"]
    srv.port = port
    srv.start()
    assert wait_for(lambda: len(srv.worker_pids()) == 2, 10), srv.worker_pids()
    assert_ok(srv.request("GET", "/healthz"))


def test_flag_wins_over_environment(make_server):
    """A --flag overrides the same setting's environment variable."""
    srv = make_server(env={"OMNIGATE_WORKERS": "3"}, workers=1)
    started = srv.wait_log(lambda r: r.get("msg") == "supervisor started", 10)
    assert started and started["workers"] == 1, srv.stderr()[-4000:]
    assert wait_for(lambda: len(srv.worker_pids()) == 1, 5), srv.worker_pids()


BAD_CONFIG = [
    ("workers_not_integer", {"OMNIGATE_WORKERS": "x"}, [], "OMNIGATE_WORKERS"),
    ("workers_zero", {"OMNIGATE_WORKERS": "0"}, [], "OMNIGATE_WORKERS"),
    ("workers_flag_too_big", {}, ["--workers", "100000"], "workers"),
    ("listen_garbage", {"OMNIGATE_LISTEN": "not-an-address"}, [], "OMNIGATE_LISTEN"),
    ("listen_bad_port", {"OMNIGATE_LISTEN": "127.0.0.1:99999"}, [], "OMNIGATE_LISTEN"),
    ("header_timeout_negative", {"OMNIGATE_HEADER_TIMEOUT_MS": "-5"}, [], "OMNIGATE_HEADER_TIMEOUT_MS"),
    ("max_body_not_number", {"OMNIGATE_MAX_BODY_BYTES": "lots"}, [], "OMNIGATE_MAX_BODY_BYTES"),
    ("idle_timeout_flag_garbage", {}, ["--idle-timeout-ms", "soon"], "idle-timeout"),
    ("unknown_flag", {}, ["--no-such-flag", "1"], "--no-such-flag"),
    ("no_database", {"OMNIGATE_DATABASE_URL": None}, [], "OMNIGATE_DATABASE_URL"),
]


@pytest.mark.parametrize("env,args,name", [b[1:] for b in BAD_CONFIG], ids=[b[0] for b in BAD_CONFIG])
def test_bad_setting_exits_2_naming_it(env, args, name):
    """A bad setting stops `serve` at start: exit 2, one line on stderr naming the setting."""
    full_env = {"OMNIGATE_LISTEN": "127.0.0.1:%d" % free_port(), "OMNIGATE_WORKERS": "1",
                "OMNIGATE_DATABASE_URL": "postgresql://omnigate@127.0.0.1:1/none?connect_timeout=1",
                "OMNIGATE_SECRET": "e2e-unused-secret-0123456789"}
    full_env.update(env)
    full_env = {k: v for k, v in full_env.items() if v is not None}
    p = run_cli(["serve"] + args, env=full_env)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2, "exit %d, stderr %r" % (p.returncode, p.stderr)
    assert len(lines) == 1, "expected one line on stderr, got %r" % p.stderr
    assert name.lower() in lines[0].lower(), "stderr %r does not name %s" % (lines[0], name)


def test_version_command():
    """`omnigate version` prints the version and exits 0."""
    p = run_cli(["version"])
    assert p.returncode == 0, p
    assert re.match(r"^omnigate \d+\.\d+\.\d+", p.stdout.strip()), p.stdout


def test_help_lists_commands_and_settings():
    """`omnigate --help` exits 0 and shows the commands and every HTTP setting with its variable."""
    p = run_cli(["--help"])
    assert p.returncode == 0, p
    out = p.stdout
    for word in ("serve", "version", "OMNIGATE_LISTEN", "OMNIGATE_WORKERS", "OMNIGATE_HEADER_TIMEOUT_MS",
                 "OMNIGATE_BODY_TIMEOUT_MS", "OMNIGATE_IDLE_TIMEOUT_MS", "OMNIGATE_DRAIN_TIMEOUT_MS",
                 "OMNIGATE_MAX_BODY_BYTES", "OMNIGATE_MAX_HEADER_BYTES", "--listen", "--workers"):
        assert word in out, "%s missing from --help:\n%s" % (word, out)


def test_unknown_command_exits_2():
    """An unknown command is a usage error: exit 2 with a message on stderr."""
    p = run_cli(["frobnicate"])
    assert p.returncode == 2, p
    assert "frobnicate" in p.stderr


def test_readme_configuration_table_matches_the_binary():
    """The README's configuration table is exactly what the settings table in the binary
    prints (`omnigate config-markdown`), so docs cannot drift from the code."""
    p = run_cli(["config-markdown"])
    assert p.returncode == 0, p
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    begin = readme.index("<!-- config-table:begin")
    begin = readme.index("\n", begin) + 1
    end = readme.index("<!-- config-table:end -->")
    assert readme[begin:end].strip() == p.stdout.strip(), \
        "README configuration table is stale: regenerate it with `build/src/omnigate config-markdown`"


def test_operations_metrics_list_matches_the_binary():
    """docs/operations.md lists exactly the metrics the binary's metric table prints
    (`omnigate metrics-markdown`): the table GET /metrics is rendered from, so the list
    cannot drift from the exposition."""
    p = run_cli(["metrics-markdown"])
    assert p.returncode == 0, p
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as f:
        doc = f.read()
    block = doc.split("<!-- metrics-table:begin", 1)[1].split("\n", 1)[1].split("<!-- metrics-table:end -->", 1)[0]
    assert block.strip() == p.stdout.strip(), \
        "docs/operations.md metrics list is stale: regenerate it with `bash deploy/readme-config.sh`"
