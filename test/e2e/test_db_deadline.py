"""Issue 15, items 2 and 4 (src/data/db/): nothing blocks a worker's loop on the database.

- Host names of OMNIGATE_DATABASE_URL are looked up on libuv's threadpool and handed to libpq
  as `hostaddr`: a DNS answer that takes 2 s does not delay /healthz. The slow DNS is
  og-slowdns.so (test/e2e/slowdns.c, path in OMNIGATE_SLOWDNS_LIB), an LD_PRELOAD shim whose
  getaddrinfo answers chosen names late and notes which process and thread asked.
- Every database operation has a deadline (OMNIGATE_DB_TIMEOUT_MS): a server that stops
  answering without closing the connection (SIGSTOP of every process of a private cluster)
  turns requests into 503 within the deadline, and service returns within 2 s of the server
  waking up, with every acknowledged send in the database.

Measured numbers (p99 of /healthz, answer times) are printed: run pytest with -s to see them.
"""

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.parse

import pytest

import pgcluster
from conftest import Closed, Conn, assert_error, assert_ok, free_port, omnigate_bin, request_bytes, wait_for
from gwlib import (admin, call, gateway_env, iso, migrate, new_tenant, new_token, provider_env, query_url,  # noqa: F401
                   sim, SETTINGS_ALL)

# The cluster that pgcluster.py gives (postmaster pid, tcp_url), private to the test: it gets frozen.
pg_private = pgcluster.pg_private

SLOW_MS = 2000
# The target is 10 ms (issue 15) and is reported by -s; the assertion leaves room for a loaded
# CI machine while still failing on a blocked loop, which stalls /healthz for the whole 2 s.
HEALTHZ_P99_MS = 100.0
DEADLINE_MS = 1000
LOG_TIMEOUT_MS = 1000  # OMNIGATE_LOG_QUERY_TIMEOUT_MS of the frozen-database test
# How late past the deadline an answer may come: loop turns, a reconnect, ASan on 2 shared cores.
MARGIN_S = 1.5
OK_TO = "+6281234567890"


def slowdns_lib():
    path = os.environ.get("OMNIGATE_SLOWDNS_LIB")
    if not path:
        pytest.skip("OMNIGATE_SLOWDNS_LIB is not set: point it at the built og-slowdns.so")
    return path


def sanitizer_runtime():
    """The ASan runtime the binary links, if any: it must come first in LD_PRELOAD."""
    try:
        out = subprocess.run(["ldd", omnigate_bin()], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split("=>")[1].split()[0] for line in out.splitlines()
            if "libasan.so" in line and "=>" in line]


def slow_env(tmp_path, names, delay_ms=SLOW_MS):
    """Environment that makes getaddrinfo answer `names` ({name: address or ""}) after delay_ms."""
    log = str(tmp_path / "slowdns.log")
    return log, {"LD_PRELOAD": ":".join(sanitizer_runtime() + [slowdns_lib()]),
                 "OG_SLOWDNS": ",".join("%s=%s" % kv for kv in names.items()),
                 "OG_SLOWDNS_DELAY_MS": str(delay_ms), "OG_SLOWDNS_LOG": log}


def lookups(log_path):
    """(pid, tid, name) of every slowed getaddrinfo call so far."""
    try:
        with open(log_path) as f:
            return [(int(p), int(t), n) for p, t, n in (line.split() for line in f if line.strip())]
    except OSError:
        return []


def p99(samples):
    s = sorted(samples)
    return s[max(0, -(-len(s) * 99 // 100) - 1)]


def healthz_latencies(srv, seconds, readyz_every=10):
    """/healthz on one keep-alive connection every 10 ms for `seconds`, plus a /readyz on a new
    connection every `readyz_every` probes (each nudges a reconnect, which used to resolve the
    host name on the loop). Returns (latencies in ms, readyz statuses)."""
    lat, ready = [], []
    end = time.monotonic() + seconds
    with Conn(srv.port, timeout=5) as c:
        while time.monotonic() < end:
            t = time.perf_counter()
            c.send(request_bytes("GET", "/healthz"))
            r = c.read_response(timeout=5)
            lat.append((time.perf_counter() - t) * 1000)
            assert r.status == 200, r
            if len(lat) % readyz_every == 0:
                ready.append(srv.request("GET", "/readyz").status)
            time.sleep(0.01)
    return lat, ready


def db_name(url):
    return urllib.parse.unquote(urllib.parse.urlparse(url).path.lstrip("/"))


# ---- host name lookups off the loop ------------------------------------------------------------

def test_healthz_stays_fast_while_the_database_host_resolves_slowly(make_server, tmp_path):
    """Database down and its host name taking 2 s to resolve: /healthz p99 stays under 10 ms
    while the worker keeps retrying, and every lookup of the worker ran off its loop thread."""
    log, env = slow_env(tmp_path, {"db.slow.test": "127.0.0.1"})
    url = "postgresql://omnigate@db.slow.test:%d/omnigate" % free_port()  # nothing listens there
    srv = make_server(env=gateway_env(url, env), workers=1)
    lat, ready = healthz_latencies(srv, 6.0)
    worker = srv.worker_pids()[0]
    mine = [(p, t) for p, t, n in lookups(log) if p == worker and n == "db.slow.test"]
    print("\n/healthz with a 2 s DNS and the database down: %d probes, p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
          "%d lookups by the worker" % (len(lat), sorted(lat)[len(lat) // 2], p99(lat), max(lat), len(mine)))
    assert p99(lat) < HEALTHZ_P99_MS, sorted(lat)[-10:]
    assert set(ready) == {503}, ready
    # The worker retried (each attempt looks the name up again), never on its loop's thread.
    assert len(mine) >= 2, lookups(log)
    assert all(tid != pid for pid, tid in mine), mine


def test_gateway_becomes_ready_through_a_slowly_resolved_name(make_server, pg_session, fresh_db, tmp_path):
    """The database host is a name that takes 2 s to resolve: the worker connects through the
    address it got (host kept as the name), /readyz turns 200, the database routes work, and
    /healthz stays fast meanwhile."""
    migrate(fresh_db)
    log, env = slow_env(tmp_path, {"db.slow.test": "127.0.0.1"})
    url = "postgresql://omnigate@db.slow.test:%d/%s" % (pg_session.port, urllib.parse.quote(db_name(fresh_db)))
    srv = make_server(env=gateway_env(url, env), workers=1)
    t0 = time.monotonic()
    lat, _ = healthz_latencies(srv, 1.0)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 15)
    print("\nready %.2f s after the workers started (2 s lookup); /healthz meanwhile p99 %.2f ms"
          % (time.monotonic() - t0, p99(lat)))
    assert p99(lat) < HEALTHZ_P99_MS, sorted(lat)[-10:]
    t = new_tenant(srv)
    assert new_token(srv, t["id"])["token"]
    worker = srv.worker_pids()[0]
    assert any(p == worker and tid != p for p, tid, _ in lookups(log)), lookups(log)
    # libpq was told the name: the server sees a TCP client on 127.0.0.1.
    rows = query_url(fresh_db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND client_addr = '127.0.0.1'")
    assert int(rows[0][0]) >= 1, rows


@pytest.mark.parametrize("form", ["keywords", "uri"])
def test_multi_host_conninfo_skips_unresolvable_and_refusing_hosts(make_server, pg_session, fresh_db, tmp_path,
                                                                    form):
    """host=a,b,c with one port per host and target_session_attrs: a name that does not
    resolve is left out (and logged with its name), a refusing host is passed over, the third
    host serves; the same in URI form."""
    migrate(fresh_db)
    log, env = slow_env(tmp_path, {"db.gone.test": "", "db.slow.test": "127.0.0.1"}, delay_ms=300)
    closed, real, name = free_port(), pg_session.port, db_name(fresh_db)
    if form == "keywords":
        url = ("host=db.gone.test,db.slow.test,db.slow.test port=5432,%d,%d dbname=%s user=omnigate "
               "target_session_attrs=read-write" % (closed, real, name))
    else:
        url = ("postgresql://omnigate@db.gone.test:5432,db.slow.test:%d,db.slow.test:%d/%s"
               "?target_session_attrs=read-write" % (closed, real, urllib.parse.quote(name)))
    srv = make_server(env=gateway_env(url, env), workers=1)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 15), srv.stderr()[-3000:]
    new_tenant(srv)
    rec = srv.wait_log(lambda r: r.get("msg") == "database host lookup failed")
    assert rec is not None and rec["host"] == "db.gone.test", rec


# ---- deadlines -------------------------------------------------------------------------------------

def freeze(pg):
    """SIGSTOP the postmaster, then every process it has: the server stops answering while the
    kernel keeps its sockets open (and even completes new TCP handshakes)."""
    os.kill(pg.pid, signal.SIGSTOP)
    pids = [pg.pid] + pgcluster._children(pg.pid)
    for p in pids[1:]:
        os.kill(p, signal.SIGSTOP)
    return pids


def thaw(pids):
    for p in reversed(pids):
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


def timed(fn):
    t = time.monotonic()
    r = fn()
    return r, time.monotonic() - t


def test_frozen_database_answers_503_within_the_deadline_then_recovers(make_gateway, pg_private, sim):
    """A database that stops answering without closing: sends answer 503 `unavailable` within
    OMNIGATE_DB_TIMEOUT_MS (+ margin), log reads within OMNIGATE_LOG_QUERY_TIMEOUT_MS +
    OMNIGATE_DB_TIMEOUT_MS (a read connection waits the statement timeout for the server's own
    cancellation first: db.h), and /healthz keeps answering; once it answers again, a send
    succeeds within 2 s, and every send acknowledged before the freeze is in the database."""
    url = pg_private.tcp_url
    sim.clear()
    srv = make_gateway(workers=2, url=url,
                       env=provider_env(sim, {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000",
                                              "OMNIGATE_DB_TIMEOUT_MS": str(DEADLINE_MS),
                                              "OMNIGATE_LOG_QUERY_TIMEOUT_MS": str(LOG_TIMEOUT_MS)}))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    tenant = new_tenant(srv, settings=SETTINGS_ALL)
    token = new_token(srv, tenant["id"])["token"]

    def send(text):
        return call(srv, "POST", "/api/omni/send", token=token, body={"to": OK_TO, "text": text}, timeout=15)

    def read_logs():
        return call(srv, "GET", "/api/omni/logs", token=token, timeout=15)

    acked = [assert_ok(send("before %d" % i))["data"]["reference"] for i in range(5)]
    assert_ok(read_logs())

    pids = freeze(pg_private)
    try:
        # Round 1 meets connections that are up: their units time out and they are dropped.
        # Round 2 meets a pool reconnecting to a server that accepts TCP but never answers.
        for rnd in (1, 2):
            results = []

            def worker(fn, limit_ms):
                t = time.monotonic()
                try:
                    r = fn()
                except (OSError, Closed) as e:  # no answer at all
                    r = e
                results.append((r, time.monotonic() - t, limit_ms))

            reads_ms = LOG_TIMEOUT_MS + DEADLINE_MS
            threads = [threading.Thread(target=worker, args=fl)
                       for fl in ((lambda: send("frozen"), DEADLINE_MS), (lambda: send("frozen"), DEADLINE_MS),
                                  (read_logs, reads_ms), (read_logs, reads_ms))]
            for th in threads:
                th.start()
            health, hdur = timed(lambda: srv.request("GET", "/healthz", timeout=5))
            for th in threads:
                th.join(30)
            assert health.status == 200 and hdur < 0.5, (health, hdur)
            print("\nfrozen database, round %d: answers in %s s; /healthz in %.1f ms"
                  % (rnd, ", ".join("%.2f" % d for _, d, _ in results), hdur * 1000))
            assert len(results) == 4
            for r, dur, limit_ms in results:
                assert not isinstance(r, (OSError, Closed)), "no answer after %.1f s: %r" % (dur, r)
                assert_error(r, 503, "unavailable")
                assert dur < limit_ms / 1000 + MARGIN_S, (r, dur)
        lost = srv.wait_log(lambda r: r.get("msg") == "database connection lost"
                            and "OMNIGATE_DB_TIMEOUT_MS" in r.get("error", ""))
        assert lost is not None and lost["level"] == "warn", lost
    finally:
        thaw(pids)

    t0 = time.monotonic()
    recovered = wait_for(lambda: send("after").status == 200, 2.0, interval=0.05)
    took = time.monotonic() - t0
    print("\nfirst send answered 200 %.2f s after the database woke up" % took)
    assert recovered and took < 2.0, took
    assert_ok(read_logs())
    refs = ",".join("'%s'" % r for r in acked)
    rows = query_url(url, "SELECT reference, status FROM messages WHERE reference IN (%s)" % refs)
    assert sorted(r for r, _ in rows) == sorted(acked), rows
    assert {s for _, s in rows} == {"sent"}, rows


def connecting_to(port):
    """Established TCP connections to 127.0.0.1:`port` from this machine's clients (what the
    kernel accepted for a postmaster that does not run: attempts waiting for its answer)."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "01":
                n += 1
    return n


@contextlib.contextmanager
def unreachable(pg):
    """The gateway's connections to `pg` gone and new ones hanging: the postmaster stopped
    (SIGSTOP), then the gateway's backends ended from a session opened before (the pool's 4, the
    listener, the read pool's: at least 5); the postmaster resumed on leaving."""
    psql = subprocess.Popen(["psql", pg.url, "-XAtq", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    psql.stdin.write("SELECT 1;\n")
    psql.stdin.flush()
    assert psql.stdout.readline().strip() == "1"
    os.kill(pg.pid, signal.SIGSTOP)
    try:
        psql.stdin.write("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                         "WHERE application_name LIKE 'omnigate%';\n")
        psql.stdin.flush()
        assert int(psql.stdout.readline()) >= 5
        yield
    finally:
        os.kill(pg.pid, signal.SIGCONT)
        psql.stdin.close()
        psql.wait(30)


def gateway_on(make_gateway, pg, sim, db_timeout_ms):
    """A ready gateway (one worker, a pool of 4) on `pg` with the given database deadline, and a
    token of a tenant with every channel."""
    sim.clear()
    srv = make_gateway(workers=1, url=pg.tcp_url,
                       env=provider_env(sim, {"OMNIGATE_DB_TIMEOUT_MS": str(db_timeout_ms), "OMNIGATE_DB_POOL": "4"}))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    tenant = new_tenant(srv, settings=SETTINGS_ALL)
    return srv, new_token(srv, tenant["id"])["token"]


def test_sigterm_with_the_database_unreachable_exits_without_waiting_for_it(make_gateway, pg_private, sim):
    """The gateway's connections are gone and new ones hang (the postmaster stopped, its backends
    terminated, the pool's next attempts accepted by the kernel and never answered): a request
    authenticated from the cache (422, answered without the database) leaves its token's last
    use to write. SIGTERM: the worker exits at once, logging that the last use is not written,
    instead of waiting OMNIGATE_DB_TIMEOUT_MS (30 s here) for a connection (it did: a CI run's
    harness gave up on such a drain after 15 s)."""
    srv, token = gateway_on(make_gateway, pg_private, sim, 30000)
    assert_ok(call(srv, "GET", "/api/omni/queue", token=token))  # the token is cached
    port = urllib.parse.urlparse(pg_private.tcp_url).port
    with unreachable(pg_private):
        # Every connection lost, and the pool's 4 among the attempts that hang.
        assert wait_for(lambda: connecting_to(port) >= 5 and srv.request("GET", "/readyz").status == 503, 10)
        assert_error(call(srv, "POST", "/api/omni/send", token=token, body={"text": "no recipient"}), 422,
                     "validation_failed")
        srv.signal(signal.SIGTERM)
        rc, took = timed(lambda: srv.wait(40))
    print("\nSIGTERM with the database unreachable: exited %r after %.2f s" % (rc, took))
    assert rc == 0 and took < 10, (rc, took, srv.stderr()[-3000:])
    assert any(r.get("msg") == "tokens' last use not written: database unreachable" and r.get("tokens") == 1
               for r in srv.log_records()), srv.stderr()[-3000:]


def test_due_time_passing_with_the_database_unreachable_keeps_the_loop_turning(make_gateway, pg_private, sim):
    """A worker keeps the due times of the scheduled messages it committed, to claim them on
    time. When one passes while the database is unreachable, its claim cannot run: it must
    wait, not start its timer again at 0 ms. libuv (1.44, Debian 12's) runs a timer re-armed at
    0 ms inside its own callback again in the same pass, so the worker spun in that pass forever:
    no request answered, SIGTERM never seen, a core at 100% (found as a benchmark's gateway left
    running for 50 minutes after its database had gone). Here: /healthz keeps answering after
    the due time passes, and SIGTERM ends the worker."""
    srv, token = gateway_on(make_gateway, pg_private, sim, 1000)
    due = time.time() + 3
    r = call(srv, "POST", "/api/omni/send", token=token,
             body={"to": OK_TO, "text": "later", "channels": ["sms"], "sendAt": iso(due)})
    assert r.status == 202, r.body
    with unreachable(pg_private):
        assert wait_for(lambda: srv.request("GET", "/readyz").status == 503, 10)
        # The due time passes with no connection up.
        assert wait_for(lambda: time.time() > due + 1, 10)
        for _ in range(10):
            assert srv.request("GET", "/healthz", timeout=2).status == 200
        srv.signal(signal.SIGTERM)
        rc, took = timed(lambda: srv.wait(20))
    assert rc == 0 and took < 10, (rc, took, srv.stderr()[-3000:])
