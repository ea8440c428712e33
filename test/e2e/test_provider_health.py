"""Issue 19, API.md §13: the circuit breaker per channel per worker, against the simulator.
Meta hangs (attempt timeout 300 ms): after 20 failures the circuit opens and sends go on to
SMS without touching Meta; after 5 s exactly one probe goes; a successful probe closes it, a
failed one reopens it; 4xx and 429 never open it; each worker has its own circuit."""

import re
import threading

import pytest

from conftest import Conn, assert_ok, request_bytes, wait_for
from gwlib import call, new_tenant, new_token, provider_env, sim  # noqa: F401

SETTINGS = {
    "defaultChannels": ["whatsapp_meta", "sms"],
    "defaultWhatsappFrom": "6281234567890",
    "channels": {
        "whatsapp_meta": {"enabled": True, "numbers": {"6281234567890": {"phoneNumberId": "109876543210",
                                                                         "accessToken": "EAAGe2eAccessToken0123456789"}}},
        "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"},
    },
}
_n = [0]


def number():
    _n[0] += 1
    return "+6281288%06d" % _n[0]


def gateway(make_gateway, sim, workers=1, env=None):
    sim.clear()
    srv = make_gateway(workers=workers, env=provider_env(sim, dict({"OMNIGATE_ATTEMPT_TIMEOUT_MS": "300"},
                                                                   **(env or {}))))
    assert wait_for(lambda: all(srv.request("GET", "/readyz").status == 200 for _ in range(4)), 10)
    srv.tenant = new_tenant(srv, settings=SETTINGS)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    return srv


def send(gw):
    return assert_ok(call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": number(), "text": "hi"}))["data"]


def send_on(conn, gw):
    """A send on a given keep-alive connection (so on the worker that holds it)."""
    body = b'{"to": "%s", "text": "hi"}' % number().encode()
    conn.send(request_bytes("POST", "/api/omni/send", body=body,
                            headers=[("Authorization", "Bearer " + gw.token), ("Content-Type", "application/json")]))
    r = conn.read_response()
    assert r.status == 200, r
    import json
    return json.loads(r.body)["data"]


def sends(gw, n):
    """n sends at once; returns their answers' data."""
    out = [None] * n

    def one(i):
        out[i] = send(gw)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert all(o is not None for o in out)
    return out


def metric(gw, name, channel="whatsapp_meta"):
    text = gw.request("GET", "/metrics").body.decode()
    m = re.search(r'^%s\{channel="%s"\} (\S+)$' % (name, channel), text, re.M)
    return float(m.group(1)) if m else None


def meta_requests(sim):
    return len(sim.requests("whatsapp_meta"))


def trip(gw, sim):
    sim.rule("whatsapp_meta", "hang")
    for d in sends(gw, 20):
        assert d["attempts"][0]["error"]["code"] == "provider_timeout"
        assert d["winningChannel"] == "sms"
    assert metric(gw, "omnigate_circuit_state") == 2


def test_circuit_opens_and_a_good_probe_closes_it(make_gateway, sim):
    gw = gateway(make_gateway, sim)
    trip(gw, sim)
    seen = meta_requests(sim)
    for d in sends(gw, 10):
        first = d["attempts"][0]
        assert first["channel"] == "whatsapp_meta" and first["error"]["code"] == "provider_unavailable", d
        assert first["latencyMs"] == 0
        assert d["winningChannel"] == "sms"
    assert meta_requests(sim) == seen  # not called while open
    assert metric(gw, "omnigate_circuit_refused_total") == 10
    sim.clear()  # Meta is healthy again
    # After the 5 s open period the next send is the probe: it reaches Meta and closes it.
    assert wait_for(lambda: send(gw)["winningChannel"] == "whatsapp_meta", 10, interval=0.25)
    assert metric(gw, "omnigate_circuit_state") == 0
    assert all(d["winningChannel"] == "whatsapp_meta" for d in sends(gw, 5))
    assert metric(gw, "omnigate_circuit_transitions_total") == 3  # open, half-open, closed


def test_one_probe_and_a_failed_probe_reopens(make_gateway, sim):
    gw = gateway(make_gateway, sim)
    trip(gw, sim)
    seen = meta_requests(sim)
    # Sends keep coming while the period runs out: exactly one of them is let through.
    assert wait_for(lambda: send(gw) and meta_requests(sim) > seen, 10, interval=0.2)
    assert meta_requests(sim) == seen + 1
    assert wait_for(lambda: metric(gw, "omnigate_circuit_state") == 2, 5)  # the probe hung: open again
    for d in sends(gw, 10):
        assert d["attempts"][0]["error"]["code"] == "provider_unavailable"
    assert meta_requests(sim) == seen + 1


@pytest.mark.parametrize("behaviour", ["throttle", "auth"])
def test_rejections_and_rate_limits_never_open(make_gateway, sim, behaviour):
    gw = gateway(make_gateway, sim)
    sim.rule("whatsapp_meta", behaviour)
    for d in sends(gw, 25):
        assert d["attempts"][0]["error"]["code"] in ("provider_rate_limited", "provider_rejected",
                                                     "not_configured"), d
    assert meta_requests(sim) == 25
    assert metric(gw, "omnigate_circuit_state") == 0


def test_each_worker_has_its_own_circuit(make_gateway, sim):
    gw = gateway(make_gateway, sim, workers=2)
    sim.rule("whatsapp_meta", "hang")
    c = Conn(gw.port)
    try:
        for _ in range(20):  # one connection: one worker
            send_on(c, gw)
        assert send_on(c, gw)["attempts"][0]["error"]["code"] == "provider_unavailable"
    finally:
        c.close()
    assert metric(gw, "omnigate_circuit_state") == 2
    assert metric(gw, "omnigate_circuit_transitions_total") == 1  # only that worker's opened
    # Fresh connections reach both workers: the other one still calls Meta.
    seen = meta_requests(sim)
    codes = set()
    for _ in range(30):
        c = Conn(gw.port)
        try:
            codes.add(send_on(c, gw)["attempts"][0]["error"]["code"])
        finally:
            c.close()
        if codes == {"provider_unavailable", "provider_timeout"}:
            break
    assert codes == {"provider_unavailable", "provider_timeout"}, codes
    assert meta_requests(sim) > seen


def test_breaker_off_calls_every_time(make_gateway, sim):
    gw = gateway(make_gateway, sim, env={"OMNIGATE_CIRCUIT_BREAKER": "false"})
    sim.rule("whatsapp_meta", "hang")
    for d in sends(gw, 25):
        assert d["attempts"][0]["error"]["code"] == "provider_timeout"
    assert meta_requests(sim) == 25
    assert metric(gw, "omnigate_circuit_state") == 0
