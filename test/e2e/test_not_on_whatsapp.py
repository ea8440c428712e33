"""Issue 19, API.md §13: numbers without WhatsApp are remembered for every tenant and every
instance (PostgreSQL), and sends skip the WhatsApp channels for them with reason
not_on_whatsapp. Real binaries, one database, the simulator (with its signed callbacks)."""

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import add_tenant, call, linked_gateway, query_url

TTL = {"OMNIGATE_NOT_ON_WHATSAPP_TTL_S": "86400"}


@pytest.fixture
def pair(make_server, fresh_db, tmp_path):
    """Two instances on one database, the first with a tenant; they share a simulator."""
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, workers=1, env=TTL))
    b = linked_gateway(make_server, fresh_db, tmp_path, workers=1, env=TTL, sim=a.sim)
    b.tenant, b.token = a.tenant, a.token
    yield a, b
    a.sim.stop()


def send(gw, to, **extra):
    return call(gw, "POST", "/api/omni/send", token=gw.token, body=dict({"to": to, "text": "hi"}, **extra))


def log_item(gw, reference):
    return assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference, token=gw.token))["data"]["items"][0]


def remembered(gw, to):
    return query_url(gw.db_url, "SELECT count(*) FROM not_on_whatsapp WHERE number = '%s' AND until > now()"
                     % to) == [("1",)]


def metric(gw, name):
    for line in gw.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_sync_131026_skips_whatsapp_on_another_instance(pair):
    """Meta answers 131026: the send goes on to SMS and the number is remembered; the next
    send to it, on the other instance, skips both WhatsApp channels without calling them; the
    skipped reason is in the answer and the log."""
    a, b = pair
    to = "+6281299000001"
    a.sim.rule("whatsapp_qr", "ok", to=to)  # (not asked for in the first send)
    a.sim.rule("whatsapp_meta", "reject", to=to)  # 400 code 131026
    d = assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))["data"]
    assert d["attempts"][0]["error"]["providerCode"] == "131026" and d["winningChannel"] == "sms"
    assert remembered(a, to)
    meta, qr = len(a.sim.requests("whatsapp_meta", to=to)), len(a.sim.requests("whatsapp_qr", to=to))
    d = assert_ok(send(b, to))["data"]  # the tenant's defaults: qr, meta, sms
    assert d["skipped"] == [{"channel": "whatsapp_qr", "reason": "not_on_whatsapp"},
                            {"channel": "whatsapp_meta", "reason": "not_on_whatsapp"}]
    assert [x["channel"] for x in d["attempts"]] == ["sms"] and d["winningChannel"] == "sms"
    assert len(a.sim.requests("whatsapp_meta", to=to)) == meta
    assert len(a.sim.requests("whatsapp_qr", to=to)) == qr
    assert log_item(b, d["reference"])["skipped"] == d["skipped"]
    assert metric(b, "omnigate_not_on_whatsapp_skips_total") == 1
    # all mode skips too.
    d = assert_ok(send(a, to, deliveryMode="all"))["data"]
    assert [x["channel"] for x in d["attempts"]] == ["sms"]
    assert {s["reason"] for s in d["skipped"]} == {"not_on_whatsapp"}
    # Only WhatsApp channels asked for: nothing left to try.
    j = assert_error(send(b, to, channels=["whatsapp_qr", "whatsapp_meta"]), 422, "no_channel_available")
    assert j["error"]["details"]["skipped"] == [{"channel": "whatsapp_qr", "reason": "not_on_whatsapp"},
                                                {"channel": "whatsapp_meta", "reason": "not_on_whatsapp"}]


def test_waha_not_registered_is_remembered(pair):
    a, _ = pair
    to = "+6281299000002"
    a.sim.rule("whatsapp_qr", "reject", to=to)  # 400 "... is not registered on WhatsApp"
    d = assert_ok(send(a, to, channels=["whatsapp_qr", "sms"]))["data"]
    assert d["winningChannel"] == "sms"
    assert remembered(a, to)


def test_other_rejections_are_not_remembered(pair):
    a, _ = pair
    to = "+6281299000003"
    a.sim.rule("whatsapp_meta", "throttle", to=to)
    assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))
    assert not remembered(a, to)
    d = assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))["data"]
    assert d["skipped"] == [] and d["attempts"][0]["channel"] == "whatsapp_meta"


def test_failed_status_131026_is_remembered_and_delivered_forgets(pair):
    """A Meta status `failed` 131026 after a 200 remembers the number; a later `delivered` of a
    WhatsApp message to the number forgets it."""
    a, b = pair
    to = "+6281299000004"
    a.sim.rule("whatsapp_meta", "ok", to=to, callback="not_on_whatsapp")
    d = assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))["data"]
    assert d["winningChannel"] == "whatsapp_meta"  # accepted; the failure comes by webhook
    assert wait_for(lambda: remembered(a, to), 10)
    d = assert_ok(send(b, to, channels=["whatsapp_meta", "sms"]))["data"]
    assert d["skipped"] == [{"channel": "whatsapp_meta", "reason": "not_on_whatsapp"}]
    # A WhatsApp message to the number is delivered after all (sent before it was
    # remembered, as through a send that raced the status): the number is forgotten.
    other = "+6281299000005"
    a.sim.rule("whatsapp_meta", "ok", to=other, callback="delivered_read", callback_delay_ms=1500)
    ref = assert_ok(send(a, other, channels=["whatsapp_meta"]))["data"]["reference"]
    query_url(a.db_url, "INSERT INTO not_on_whatsapp (number, until) VALUES ('%s', now() + interval '1 hour')"
              % other)
    assert log_item(a, ref)["attempts"][0]["deliveryStatus"] not in ("delivered", "read")  # inserted first
    assert wait_for(lambda: log_item(a, ref)["attempts"][0]["deliveryStatus"] == "read", 10)
    assert wait_for(lambda: not remembered(a, other), 10)


def test_expiry_tries_whatsapp_again(make_server, fresh_db, tmp_path):
    """With a 2 s memory (a test setting), WhatsApp is tried again once it expired."""
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, workers=1,
                                  env={"OMNIGATE_NOT_ON_WHATSAPP_TTL_S": "2"}))
    try:
        to = "+6281299000006"
        a.sim.rule("whatsapp_meta", "reject", to=to)
        assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))
        assert remembered(a, to)
        assert send(a, to, channels=["whatsapp_meta", "sms"]).json()["data"]["skipped"] != []
        a.sim.clear()  # the number has WhatsApp now
        assert wait_for(lambda: assert_ok(send(a, to, channels=["whatsapp_meta", "sms"]))["data"]
                        ["winningChannel"] == "whatsapp_meta", 10, interval=0.25)
    finally:
        a.sim.stop()
