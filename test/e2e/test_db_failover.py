"""Issue 17, item 1 (src/data/db/): the gateway on a multi-host OMNIGATE_DATABASE_URL with
target_session_attrs=read-write follows the primary without a restart. The servers are real:
a primary and a streaming standby made by the harness (pgha.make_standby: pg_basebackup -R),
promoted with pg_promote() as a failover manager would (test_ha_failover.py does it with
pg_auto_failover itself).

- The read-write server is found past a host that refuses and a standby, in every form of the
  conninfo (numeric addresses, names looked up off the loop, socket directories, URI).
- Primary killed, standby promoted: writes come back within moments, every acknowledged send,
  OTP and delivery status is on the new primary, the failed ones settle when retried with their
  keys, none is sent twice, and no log line blames a "bad file descriptor".
- A first host that swallows packets (SIGSTOP: the kernel still completes the TCP handshake,
  nothing answers) costs one OMNIGATE_DB_TIMEOUT_MS, not every attempt: the gateway moves on to
  the promoted standby. (Before, every attempt died on the first host: no write ever again.)
- A primary that turns read-only under open connections (25006) makes them reconnect to the
  new primary: 503 while it happens, never 500.
- target_session_attrs=prefer-standby keeps libpq's meaning now that the hosts are walked here.

Figures are printed (pytest -s).
"""

import os
import signal
import time
import urllib.parse

import pytest

import pgcluster
from conftest import assert_ok, free_port, wait_for
from gwlib import SETTINGS_ALL, WAHA_SECRET, call, gateway_env, migrate, new_tenant, new_token, provider_env, query_url, sim  # noqa: F401
from pgha import make_standby
from writeload import WriteLoad, check_failover

DB = "omnigate"


@pytest.fixture
def pair():
    """(primary, standby): the standby streams synchronously, so a commit the gateway was told
    about is on it when the primary dies."""
    primary = pgcluster.PgCluster()
    standby = None
    try:
        primary.start()
        standby = make_standby(primary)
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'", db="postgres", user="postgres")
        primary.psql("SELECT pg_reload_conf()", db="postgres", user="postgres")
        assert wait_for(lambda: primary.query("SELECT sync_state FROM pg_stat_replication", user="postgres")
                        == [("sync",)], 10)
        yield primary, standby
    finally:
        if standby is not None:
            standby.cleanup()
        primary.cleanup()


def conninfo(form, hosts):
    """A read-write conninfo over `hosts` ((host, port) pairs, in order) in one of the forms."""
    if form == "uri":
        return "postgresql://omnigate@%s/%s?target_session_attrs=read-write" % (
            ",".join("%s:%d" % hp for hp in hosts), DB)
    return "host=%s port=%s dbname=%s user=omnigate target_session_attrs=read-write" % (
        ",".join(h for h, _ in hosts), ",".join(str(p) for _, p in hosts), DB)


def gateway(make_server, sim, url, workers=2, env=None):
    migrate(url)
    sim.clear()
    srv = make_server(env=gateway_env(url, provider_env(sim, dict({"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000",
                                                                   "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET},
                                                                  **(env or {})))), workers=workers)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 15), srv.stderr()[-3000:]
    srv.tenant = new_tenant(srv, settings=SETTINGS_ALL)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    return srv


def send(srv, text, to="+6281234567890"):
    return call(srv, "POST", "/api/omni/send", token=srv.token, body={"to": to, "text": text}, timeout=15)


def connected_ports(srv):
    return {r.get("port") for r in srv.log_records() if r.get("msg") == "database connected"}


def freeze(pg):
    pids = [pg.pid] + pgcluster._children(pg.pid)
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    return pids


def thaw(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


# ---- finding the read-write server -------------------------------------------------------------

@pytest.mark.parametrize("form", ["numeric", "names", "unix", "uri"])
def test_read_write_server_found_past_a_refusing_host_and_a_standby(make_server, sim, pair, tmp_path, form):
    """host=<refusing>,<standby>,<primary> target_session_attrs=read-write: every connection
    (and the listener) ends on the primary, and writes work."""
    primary, standby = pair
    closed = free_port()
    if form == "names":  # localhost: ::1 (nothing listens there) and 127.0.0.1, looked up off the loop
        hosts = [("localhost", closed), ("localhost", standby.port), ("localhost", primary.port)]
    elif form == "unix":
        hosts = [(str(tmp_path), closed), (standby.socket_dir, standby.port), (primary.socket_dir, primary.port)]
    else:
        hosts = [("127.0.0.1", closed), ("127.0.0.1", standby.port), ("127.0.0.1", primary.port)]
    srv = gateway(make_server, sim, conninfo(form, hosts))
    assert_ok(send(srv, "found"))
    assert connected_ports(srv) == {str(primary.port)}, srv.stderr()[-3000:]
    assert srv.wait_log(lambda r: r.get("msg") == "database listener connected") is not None


def test_prefer_standby_keeps_its_two_passes(make_server, pair):
    """target_session_attrs=prefer-standby, now walked here one host at a time: the standby
    listed second is preferred to the primary listed first, and with the standby gone the
    second pass takes the primary."""
    primary, standby = pair
    url = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=%s user=omnigate target_session_attrs=prefer-standby"
           % (primary.port, standby.port, DB))
    migrate(primary.tcp_url)
    # Synchronous replication waits for the standby's flush, not its replay: the gateway reads
    # the schema version on the standby, so wait until the migrations are replayed there.
    standby.wait_replayed(primary)
    srv = make_server(env=gateway_env(url, {"OMNIGATE_DB_LISTEN": "false"}), workers=1)
    assert wait_for(lambda: len([r for r in srv.log_records() if r.get("msg") == "database connected"]) == 2, 15)
    assert connected_ports(srv) == {str(standby.port)}
    srv.stop()
    standby.stop()
    srv2 = make_server(env=gateway_env(url, {"OMNIGATE_DB_LISTEN": "false"}), workers=1)
    assert wait_for(lambda: len([r for r in srv2.log_records() if r.get("msg") == "database connected"]) == 2, 15)
    assert connected_ports(srv2) == {str(primary.port)}


# ---- failover -----------------------------------------------------------------------------------

def test_killed_primary_promoted_standby_takes_writes_without_restart(make_server, sim, pair):
    """8 clients write through 2 workers; the primary dies (SIGKILL of every process) and the
    standby is promoted: writes resume without restarting the gateway."""
    primary, standby = pair
    url = conninfo("numeric", [("127.0.0.1", primary.port), ("127.0.0.1", standby.port)])
    srv = gateway(make_server, sim, url, env={"OMNIGATE_DB_TIMEOUT_MS": "2000"})
    load = WriteLoad([srv], srv.token, clients=8).start()
    try:
        assert wait_for(lambda: len(load.acked()) >= 30, 20)
        t_kill = time.monotonic()
        primary.kill()
        t_dead = time.monotonic()
        standby.promote()
        t_promoted = time.monotonic()
        assert wait_for(lambda: len(load.ok_since(t_promoted)) >= 30, 30), srv.stderr()[-3000:]
    finally:
        load.stop()
    gap, first = load.outage(t_kill, t_dead)
    figures = check_failover(load, standby.tcp_url, sim)
    figures.update(withoutWritesSeconds=round(gap, 3), promoteSeconds=round(t_promoted - t_dead, 3),
                   firstWriteAfterDeathSeconds=round(first, 3))
    print("\nkilled primary, promoted standby: %s" % figures)
    assert gap < 10, figures
    lost = [r for r in srv.log_records() if r.get("msg") == "database connection lost"]
    assert lost, "no connection noticed the primary's death"
    assert not [r for r in lost if "bad file descriptor" in r.get("error", "")], lost


def test_silent_first_host_is_passed_over_after_one_deadline(make_server, sim, pair):
    """The primary stops answering without closing anything (SIGSTOP: its kernel still accepts
    connections) and the standby is promoted: within about two OMNIGATE_DB_TIMEOUT_MS (the
    writes in flight, then one attempt on the silent host) the gateway writes on the new
    primary."""
    primary, standby = pair
    deadline_ms = 1000
    url = conninfo("numeric", [("127.0.0.1", primary.port), ("127.0.0.1", standby.port)])
    srv = gateway(make_server, sim, url, env={"OMNIGATE_DB_TIMEOUT_MS": str(deadline_ms)})
    assert_ok(send(srv, "before"))
    assert connected_ports(srv) == {str(primary.port)}
    pids = freeze(primary)
    try:
        standby.promote()
        t0 = time.monotonic()
        statuses = []

        def one():
            r = send(srv, "after freeze")
            statuses.append(r.status)
            return r.status == 200
        ok = wait_for(one, 20, interval=0.1)
        took = time.monotonic() - t0
        print("\nsilent first host: first write on the promoted standby %.2f s after promotion (deadline %d ms); "
              "answers meanwhile %s" % (took, deadline_ms, sorted(set(statuses))))
        assert ok, srv.stderr()[-3000:]
        assert took < 3 * deadline_ms / 1000 + 2.0, took
        assert set(statuses) <= {200, 503}, statuses
        assert str(standby.port) in connected_ports(srv)
    finally:
        thaw(pids)


def test_primary_turned_read_only_sends_writes_to_the_new_primary(make_server, sim, pair):
    """The standby is promoted while the old primary keeps running and turns read-only
    (default_transaction_read_only): writes refused with 25006 answer 503, never 500, and the
    connections move to the new primary."""
    primary, standby = pair
    url = conninfo("numeric", [("127.0.0.1", primary.port), ("127.0.0.1", standby.port)])
    srv = gateway(make_server, sim, url)
    assert_ok(send(srv, "before"))
    standby.promote()
    primary.psql("ALTER SYSTEM SET default_transaction_read_only = on", db="postgres", user="postgres")
    primary.psql("SELECT pg_reload_conf()", db="postgres", user="postgres")
    statuses = []

    def one():
        r = send(srv, "after demotion")
        statuses.append(r.status)
        return r if r.status == 200 else None
    r = wait_for(one, 15, interval=0.1)
    print("\nread-only primary: answers until the first write on the new primary: %s" % statuses)
    assert r, (statuses, srv.stderr()[-3000:])
    assert set(statuses) <= {200, 503}, statuses
    ref = r.json()["data"]["reference"]
    assert query_url(standby.tcp_url, "SELECT status FROM messages WHERE reference = '%s'" % ref) == [("sent",)]
    assert query_url(primary.tcp_url, "SELECT count(*) FROM messages WHERE reference = '%s'" % ref) == [("0",)]
    assert any("read-only" in rec.get("error", "") for rec in srv.log_records()
               if rec.get("msg") == "database connection lost")
