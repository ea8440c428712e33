"""Issue 17, item 3: the gateway behind Debian's PgBouncer (1.18) in transaction pooling.

PgBouncer 1.18 does not keep prepared statements across transactions (each transaction may run
on another server connection), so the gateway runs with OMNIGATE_DB_PREPARED=false (unnamed
statements), and its LISTEN connections go to PostgreSQL directly
(OMNIGATE_DATABASE_LISTEN_URL): LISTEN needs a session of its own.

- Three instances x two workers x three connections (two for writes, one for log pages: 18
  client connections) through one PgBouncer whose pool has 4 server connections: the whole send / SMS / OTP / logs flow works
  across instances, an Idempotency-Key holds across instances, the OTP limits hold across
  instances, a burst of concurrent sends is served without an error while PgBouncer never opens
  more than its pool, and the schema was migrated through PgBouncer too.
- Without LISTEN at all (OMNIGATE_DB_LISTEN=false) a delivery-based fallback step still fires
  on time: the timer finds it.
- The failure the setting exists for: with prepared statements (the default) two gateway
  connections sharing one server connection collide on the statement names.
"""

import json
import re
import subprocess
import threading
import time
import urllib.parse

import pytest

import pgcluster
from conftest import assert_error, assert_ok, wait_for
from gwlib import (SETTINGS_ALL, add_tenant, call, gateway_env, linked_gateway, migrate, new_tenant,  # noqa: F401
                   new_token, provider_env, query_url, sim)
from pgha import PGBOUNCER, PgBouncer

POOL = 4  # server connections PgBouncer may open (the gateways open 18 client connections)


@pytest.fixture
def cluster():
    with pgcluster.PgCluster() as c:
        yield c


@pytest.fixture
def bouncer(cluster):
    with PgBouncer(cluster, pool_mode="transaction", pool_size=POOL) as b:
        yield b


def pooled_env(cluster, extra=None):
    env = {"OMNIGATE_DB_PREPARED": "false", "OMNIGATE_DATABASE_LISTEN_URL": cluster.tcp_url,
           "OMNIGATE_DB_POOL": "2", "OMNIGATE_ATTEMPT_TIMEOUT_MS": "2000"}
    env.update(extra or {})
    return env


def server_connections(cluster):
    """(PgBouncer's server connections, the gateways' direct LISTEN connections) as PostgreSQL
    sees them: PgBouncer comes over the unix socket, the listeners over TCP."""
    rows = query_url(cluster.url_for("postgres", user="postgres"),
                     "SELECT count(*) FILTER (WHERE client_addr IS NULL), "
                     "count(*) FILTER (WHERE client_addr IS NOT NULL AND query = 'LISTEN og_steps') "
                     "FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = 'omnigate' "
                     "AND pid <> pg_backend_pid()")
    return int(rows[0][0]), int(rows[0][1])


def otp_code(sim, to):
    reqs = [r for r in sim.requests("sms", to=to)]
    body = urllib.parse.parse_qs(reqs[-1]["body"])["Body"][0]
    return re.search(r"\d{4,10}", body).group(0)


def post(srv, path, token, body, key=None):
    headers = [("Idempotency-Key", key)] if key else None
    return call(srv, "POST", path, token=token, body=body, headers=headers, timeout=15)


def test_three_instances_through_transaction_pooling(make_server, sim, cluster, bouncer):
    url = bouncer.url_for("omnigate")
    migrate(url)  # through PgBouncer as well: transaction-level lock only
    sim.clear()
    env = provider_env(sim, pooled_env(cluster))
    inst = [make_server(env=gateway_env(url, env), workers=2) for _ in range(3)]
    for s in inst:
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 15), s.stderr()[-2000:]
    tenant = new_tenant(inst[0], settings=SETTINGS_ALL)
    tok = new_token(inst[1], tenant["id"])["token"]

    # The flow, each step on another instance than the one before.
    d = assert_ok(post(inst[2], "/api/omni/send", tok, {"to": "+6281200000001", "text": "hello"}))["data"]
    items = assert_ok(call(inst[0], "GET", "/api/omni/logs?reference=" + d["reference"], token=tok))["data"]["items"]
    assert [i["status"] for i in items] == ["sent"] and len(items[0]["attempts"]) == 1
    s = assert_ok(post(inst[1], "/api/sms/send", tok, {"to": "+6281200000002", "text": "an sms"}))["data"]
    items = assert_ok(call(inst[2], "GET", "/api/sms/logs?reference=" + s["reference"], token=tok))["data"]["items"]
    assert [i["source"] for i in items] == ["sms"]
    o = assert_ok(post(inst[0], "/api/sms/otp/send", tok, {"to": "+6281200000003"}))["data"]
    code = otp_code(sim, "+6281200000003")
    wrong = "0" * len(code) if code != "0" * len(code) else "1" * len(code)
    assert_error(post(inst[1], "/api/sms/otp/verify", tok, {"reference": o["reference"], "code": wrong}), 422,
                 "otp_invalid")
    v = assert_ok(post(inst[2], "/api/sms/otp/verify", tok, {"reference": o["reference"], "code": code}))["data"]
    assert v == {"reference": o["reference"], "verified": True}
    items = assert_ok(call(inst[0], "GET", "/api/sms/otp/logs?reference=" + o["reference"], token=tok))["data"]
    assert items["items"][0]["status"] == "verified"
    assert [h["event"] for h in items["items"][0]["history"]] == ["sent", "verify_failed", "verify_success"]

    # An Idempotency-Key across instances: one send, the same answer replayed elsewhere.
    body = {"to": "+6281200000004", "text": "once"}
    r1 = post(inst[0], "/api/omni/send", tok, body, key="pgb-key-1")
    r2 = post(inst[1], "/api/omni/send", tok, body, key="pgb-key-1")
    assert r1.status == 200 and r2.status == 200 and r2.header("Idempotency-Replayed") == "true"
    assert r1.json()["data"]["reference"] == r2.json()["data"]["reference"]
    assert_error(post(inst[2], "/api/omni/send", tok, {"to": "+6281200000004", "text": "other"}, key="pgb-key-1"),
                 422, "idempotency_key_reused")
    assert len(sim.requests(to="+6281200000004")) == 1

    # The OTP limits across instances: four at once for one number, one passes.
    statuses, barrier = [], threading.Barrier(4)

    def otp(i):
        barrier.wait()
        statuses.append(post(inst[i % 3], "/api/sms/otp/send", tok, {"to": "+6281200000005"}).status)
    ts = [threading.Thread(target=otp, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert sorted(statuses) == [200, 429, 429, 429], statuses

    # A burst: 24 concurrent senders over the three instances, more than the pool's 4 server
    # connections; every send is answered 200 and PgBouncer keeps to its pool. (The log pages
    # above went through it too: the read pool sets nothing on the session for the writes to
    # inherit.)
    results, peak = [], [0]
    stop = threading.Event()

    def sender(i):
        n = 0
        while not stop.is_set():
            n += 1
            r = post(inst[i % 3], "/api/omni/send", tok, {"to": "+628130%02d%04d" % (i, n), "text": "burst"})
            results.append(r.status)

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], server_connections(cluster)[0])
            time.sleep(0.1)
    threads = [threading.Thread(target=sender, args=(i,)) for i in range(24)] + [threading.Thread(target=watch)]
    for t in threads:
        t.start()
    # The burst lasts until 600 sends are answered (about 3 s here), whatever the machine's speed.
    assert wait_for(lambda: len(results) >= 600, 60), len(results)
    stop.set()
    for t in threads:
        t.join(30)
    pools = [p for p in bouncer.show("POOLS") if p["database"] == "omnigate"]
    clients = [c for c in bouncer.show("CLIENTS") if c["database"] == "omnigate"]
    servers, listeners = server_connections(cluster)
    print("\nburst through PgBouncer (pool %d): %d sends, statuses %s; PgBouncer clients %d, server "
          "connections at most %d; direct LISTEN connections %d" % (
              POOL, len(results), sorted(set(results)), len(clients), peak[0], listeners))
    assert results and set(results) == {200}, sorted(set(results))
    assert len(clients) >= 18, clients  # 3 instances x 2 workers x (OMNIGATE_DB_POOL 2 + a read connection)
    assert peak[0] <= POOL and servers <= POOL, (peak, servers, pools)
    assert listeners == 6  # one per worker, straight to PostgreSQL
    assert sum(int(p["cl_waiting"]) for p in pools) == 0  # the burst is over, nobody is stuck
    for s in inst:
        assert not [r for r in s.log_records() if r.get("level") == "error"], s.stderr()[-3000:]


def test_steps_without_listen_behind_transaction_pooling(make_server, cluster, bouncer, tmp_path):
    """OMNIGATE_DB_LISTEN=false behind PgBouncer: no LISTEN connection anywhere, and a
    delivery-based fallback whose status never comes still moves on after
    fallbackAfterSeconds (10 s), found by the steps timer."""
    url = bouncer.url_for("omnigate")
    gw = add_tenant(linked_gateway(make_server, url, tmp_path, env=pooled_env(cluster, {"OMNIGATE_DB_LISTEN": "false"})))
    try:
        assert server_connections(cluster)[1] == 0
        gw.sim.rule("whatsapp_meta", "ok", to="+6281200000009", callback="none")
        t0 = time.monotonic()
        d = assert_ok(call(gw, "POST", "/api/omni/send", token=gw.token,
                           body={"to": "+6281200000009", "text": "hi", "channels": ["whatsapp_meta", "sms"],
                                 "fallbackOn": "delivered", "fallbackAfterSeconds": 10}))["data"]
        assert wait_for(lambda: len(gw.sim.requests("sms", to="+6281200000009")) == 1, 15)
        took = time.monotonic() - t0
        print("\nfallback step without LISTEN: SMS %.2f s after the send (fallbackAfterSeconds 10)" % took)
        assert 9.5 <= took <= 12.0, took
        it = wait_for(lambda: [i for i in assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + d["reference"],
                                                         token=gw.token))["data"]["items"]
                               if len(i["attempts"]) == 2], 5)
        assert it and it[0]["attempts"][1]["fallbackReason"] == "no_status_in_time"
        assert gw.wait_log(lambda r: r.get("msg", "").startswith("steps: no LISTEN connection")) is not None
    finally:
        gw.sim.stop()


def pgbouncer_version():
    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"PgBouncer (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def test_prepared_statements_collide_behind_transaction_pooling(make_server, cluster):
    """Why OMNIGATE_DB_PREPARED exists: with one server connection behind two gateway
    connections, the second one's PREPAREs meet the first one's statements on the same server
    session ("already exists") and it never becomes ready; with unnamed statements both do."""
    if pgbouncer_version() >= (1, 21):
        pytest.skip("PgBouncer >= 1.21 tracks prepared statements itself (max_prepared_statements)")
    with PgBouncer(cluster, pool_mode="transaction", pool_size=1) as b:
        url = b.url_for("omnigate")
        migrate(url)
        srv = make_server(env=gateway_env(url, {"OMNIGATE_DB_POOL": "2", "OMNIGATE_DB_LISTEN": "false"}))
        rec = srv.wait_log(lambda r: r.get("msg") == "prepare failed" and "already exists" in r.get("error", ""), 15)
        assert rec is not None, srv.stderr()[-3000:]
        srv.stop()
        srv2 = make_server(env=gateway_env(url, {"OMNIGATE_DB_POOL": "2", "OMNIGATE_DB_LISTEN": "false",
                                                 "OMNIGATE_DB_PREPARED": "false"}))
        assert wait_for(lambda: srv2.wait_log(lambda r: r.get("msg") == "database connected"
                                              and r.get("conn") == 1, 0.1) is not None, 15)
        assert not [r for r in srv2.log_records() if r.get("msg") == "prepare failed"]
