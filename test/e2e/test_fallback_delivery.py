"""Issue 14 end to end: delivery-based fallback on durable steps (API.md §11). The real gateway
and PostgreSQL, and the provider simulator calling the gateway back with scripted statuses."""

import json
import re
import signal
import time

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import add_tenant, call, linked_gateway, query_url

TO = "+6281234500001"


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    yield srv
    srv.sim.stop()


def send(gw, body, headers=None):
    return call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=headers)


def item(gw, reference):
    items = assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference, token=gw.token))["data"]["items"]
    return items[0]


def db(gw, sql):
    return query_url(gw.db_url, sql)


def script(gw, channel, callback, to=TO, behaviour="ok", latency_ms=None):
    gw.sim.rule(channel, behaviour, to=to, callback=callback, latency_ms=latency_ms)


def until_item(gw, reference, pred, timeout):
    box = []

    def check():
        it = item(gw, reference)
        if pred(it):
            box.append(it)
            return True
        return False
    assert wait_for(check, timeout), json.dumps(item(gw, reference), indent=1) + '\n'.join(
        [l for l in gw.stderr().splitlines() if '"access"' not in l][-15:])
    return box[0]


def sms_requests(gw, to=TO):
    return gw.sim.requests("sms", to=to)


# ---- the chain ----------------------------------------------------------------------------------

def test_failed_status_moves_on_within_a_second(gw):
    """WhatsApp accepted, then 'failed' 131026 by callback: the SMS attempt starts within 1 s of
    the callback, and the message ends delivered when the SMS is delivered."""
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "delivered_read")
    r = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered"}))
    d = r["data"]
    assert d["winningChannel"] == "whatsapp_meta" and len(d["attempts"]) == 1
    it = until_item(gw, d["reference"], lambda i: i["status"] in ("delivered", "read"), 10)
    assert [a["channel"] for a in it["attempts"]] == ["whatsapp_meta", "sms"]
    assert it["attempts"][0]["deliveryStatus"] == "failed"
    assert it["attempts"][0]["deliveryError"]["code"] == "not_on_whatsapp"
    assert it["attempts"][1]["fallbackReason"] == "status_failed"
    assert it["winningChannel"] == "sms"
    failed_cb = [c for c in gw.sim.callbacks() if c["provider"] == "meta" and '"failed"' in c["body"]]
    sms = sms_requests(gw)
    assert len(sms) == 1 and failed_cb
    lag_ms = sms[0]["receivedAt"] - failed_cb[0]["sentAt"]
    assert lag_ms < 1000, lag_ms


def test_no_status_in_time(gw):
    """No status at all: the SMS goes out after fallbackAfterSeconds (10 s), reason
    no_status_in_time."""
    script(gw, "whatsapp_meta", "none")
    script(gw, "sms", "delivered_read")
    t0 = time.monotonic()
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered", "fallbackAfterSeconds": 10}))["data"]
    assert wait_for(lambda: len(sms_requests(gw)) == 1, 15)
    assert 9.5 <= time.monotonic() - t0 <= 12.5
    it = until_item(gw, d["reference"], lambda i: i["status"] in ("delivered", "read"), 5)
    assert it["attempts"][1]["fallbackReason"] == "no_status_in_time"


def test_delivered_in_time_ends_the_chain(gw):
    """'delivered' before the deadline: no SMS ever, checked after the deadline has passed, and
    no step left."""
    script(gw, "whatsapp_meta", "delivered_only")
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered", "fallbackAfterSeconds": 10}))["data"]
    until_item(gw, d["reference"], lambda i: i["status"] == "delivered", 5)
    assert wait_for(lambda: db(gw, "SELECT count(*) FROM steps WHERE kind = 'fallback'") == [("0",)], 5)
    time.sleep(11)  # past the deadline: proving that nothing happens needs the time to pass
    assert sms_requests(gw) == []
    assert len(item(gw, d["reference"])["attempts"]) == 1


def test_read_mode_waits_for_read(gw):
    """fallbackOn read: 'delivered' is not enough; without 'read' in time the SMS goes out."""
    script(gw, "whatsapp_meta", "delivered_only")
    script(gw, "sms", "delivered_read")
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "read", "fallbackAfterSeconds": 10}))["data"]
    it = until_item(gw, d["reference"], lambda i: len(i["attempts"]) == 2 and i["status"] == "read", 16)
    assert it["attempts"][0]["deliveryStatus"] == "delivered"
    assert it["attempts"][1]["fallbackReason"] == "no_status_in_time"


def test_late_delivered_changes_nothing(gw):
    """WhatsApp fails by status, the SMS goes out; a late 'delivered' for the WhatsApp message
    afterwards changes no decision: no further attempt, the message delivered."""
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "sent_only")
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered"}))["data"]
    it = until_item(gw, d["reference"], lambda i: len(i["attempts"]) == 2 and i["attempts"][1]["status"] == "sent", 10)
    import test_webhooks_in as w
    wamid = it["attempts"][0]["providerMessageId"]
    assert_ok(w.post_meta(gw, w.meta_body([w.meta_status(wamid, "delivered", int(time.time()))])))
    it = until_item(gw, d["reference"], lambda i: i["status"] == "delivered", 5)
    assert len(it["attempts"]) == 2 and len(sms_requests(gw)) == 1
    assert db(gw, "SELECT count(*) FROM steps WHERE kind = 'fallback'") == [("0",)]


def test_chain_of_three(gw):
    """whatsapp_qr fails by status, then whatsapp_meta fails by status, then SMS is delivered:
    three attempts, each later one with its reason."""
    script(gw, "whatsapp_qr", "not_on_whatsapp")
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "delivered_read")
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_qr", "whatsapp_meta", "sms"],
                            "fallbackOn": "delivered"}))["data"]
    it = until_item(gw, d["reference"], lambda i: i["status"] in ("delivered", "read"), 15)
    assert [a["channel"] for a in it["attempts"]] == ["whatsapp_qr", "whatsapp_meta", "sms"]
    assert [a.get("fallbackReason") for a in it["attempts"]] == [None, "status_failed", "status_failed"]


def test_chain_ends_undelivered(gw):
    """Every channel accepted and then failed by status: the message ends undelivered."""
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "undelivered")
    d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered"}))["data"]
    it = until_item(gw, d["reference"], lambda i: i["status"] == "undelivered", 10)
    assert len(it["attempts"]) == 2
    assert db(gw, "SELECT count(*) FROM steps WHERE kind = 'fallback'") == [("0",)]


@pytest.mark.parametrize("body,field", [
    ({"deliveryMode": "all", "fallbackOn": "delivered"}, "fallbackOn"),
    ({"fallbackOn": "seen"}, "fallbackOn"),
    ({"fallbackOn": "delivered", "fallbackAfterSeconds": 9}, "fallbackAfterSeconds"),
    ({"fallbackOn": "delivered", "fallbackAfterSeconds": 86401}, "fallbackAfterSeconds"),
    ({"fallbackOn": "delivered", "fallbackAfterSeconds": "60"}, "fallbackAfterSeconds"),
    ({"fallbackAfterSeconds": 60}, "fallbackAfterSeconds"),
])
def test_validation(gw, body, field):
    """fallbackOn only with deliveryMode fallback; seconds 10-86400, only with fallbackOn."""
    b = dict({"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"]}, **body)
    assert_error(send(gw, b), 422, "validation_failed", field)
    assert gw.sim.requests() == []


def test_idempotent_repeat(gw):
    """A repeat of a delivery-fallback send with its Idempotency-Key answers the same reference
    and sends nothing again, neither now nor in the chain."""
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "delivered_read")
    body = {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"], "fallbackOn": "delivered"}
    first = assert_ok(send(gw, body, headers=[("Idempotency-Key", "fb-1")]))["data"]
    until_item(gw, first["reference"], lambda i: i["status"] in ("delivered", "read"), 10)
    again = send(gw, body, headers=[("Idempotency-Key", "fb-1")])
    assert again.header("Idempotency-Replayed") == "true"
    assert assert_ok(again)["data"]["reference"] == first["reference"]
    time.sleep(0.5)
    assert len(gw.sim.requests("whatsapp_meta", to=TO)) == 1 and len(sms_requests(gw)) == 1


# ---- steps across instances ---------------------------------------------------------------------

def test_two_instances_do_each_step_once(make_server, fresh_db, tmp_path):
    """Two instances share the database: 20 chains whose WhatsApp fails by status each get
    exactly one SMS, whichever instance runs the step."""
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    b = linked_gateway(make_server, fresh_db, tmp_path, sim=a.sim)
    try:
        a.sim.rule("whatsapp_meta", "ok", callback="not_on_whatsapp")
        a.sim.rule("sms", "ok", callback="none")
        refs = []
        for i in range(20):
            srv = a if i % 2 == 0 else b
            r = call(srv, "POST", "/api/omni/send", token=a.token,
                     body={"to": "+62812345%05d" % i, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                           "fallbackOn": "delivered"})
            refs.append(assert_ok(r)["data"]["reference"])
        assert wait_for(lambda: len(a.sim.requests("sms")) >= 20, 20)
        time.sleep(1)
        sms = a.sim.requests("sms")
        assert len(sms) == 20 and len({s["to"] for s in sms}) == 20
        rows = db(a, "SELECT count(*) FROM attempts WHERE channel = 'sms' AND status = 'sent'")
        assert rows == [("20",)]
        assert db(a, "SELECT count(*) FROM steps WHERE kind = 'fallback'") == [("0",)]
    finally:
        a.sim.stop()


def test_kill_while_holding_a_step(make_server, fresh_db, tmp_path):
    """kill -9 of the instance holding a step's lease in the middle of its provider call: the
    other instance takes the step over when the lease expires and does it once: the SMS that
    may have been sent is not sent again (its outcome is recorded unknown)."""
    env = {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000", "OMNIGATE_DB_TIMEOUT_MS": "500"}
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, workers=1, env=env))
    b = linked_gateway(make_server, fresh_db, tmp_path, sim=a.sim, workers=1, env=env)
    b.token = a.token
    try:
        b.stop()  # only a runs the step at first
        a.sim.rule("whatsapp_meta", "ok", callback="not_on_whatsapp")
        a.sim.rule("sms", "hang")
        d = assert_ok(call(a, "POST", "/api/omni/send", token=a.token,
                           body={"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                                 "fallbackOn": "delivered"}))["data"]
        assert wait_for(lambda: len(a.sim.requests("sms")) == 1, 10)
        a.kill()
        b.start()
        # The lease (the send budget: 3 x 2 x 0.5 s + 3 x 1 s + 5 s = 11 s) runs out, then b
        # takes the step over.
        assert wait_for(lambda: db(b, "SELECT count(*) FROM steps WHERE kind = 'fallback'") == [("0",)], 25)
        it = item(b, d["reference"])
        assert it["status"] == "unknown"
        assert [a_["status"] for a_ in it["attempts"]] == ["sent", "unknown"]
        assert len(a.sim.requests("sms")) == 1
    finally:
        a.sim.stop()


def test_steps_survive_every_instance_stopping(make_server, fresh_db, tmp_path):
    """Every instance stopped while a step is pending; when one starts again after the step
    fell due, the step runs."""
    gw = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    try:
        gw.sim.rule("whatsapp_meta", "ok", callback="none")
        gw.sim.rule("sms", "ok", callback="none")
        d = assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"],
                                "fallbackOn": "delivered", "fallbackAfterSeconds": 10}))["data"]
        assert gw.stop() == 0
        assert wait_for(lambda: db(gw, "SELECT count(*) FROM steps WHERE kind = 'fallback' AND due_at <= now()") == [("1",)], 15)
        assert sms_requests(gw) == []
        gw.start()
        assert wait_for(lambda: len(sms_requests(gw)) == 1, 5)
        it = until_item(gw, d["reference"], lambda i: len(i["attempts"]) == 2, 5)
        assert it["attempts"][1]["fallbackReason"] == "no_status_in_time"
    finally:
        gw.sim.stop()


def test_steps_are_counted(gw):
    """/metrics counts the steps done and how late they were claimed."""
    script(gw, "whatsapp_meta", "not_on_whatsapp")
    script(gw, "sms", "none")
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta", "sms"], "fallbackOn": "delivered"}))
    assert wait_for(lambda: 'omnigate_steps_done_total{kind="fallback"} 1'
                    in gw.request("GET", "/metrics").body.decode(), 10)
    text = gw.request("GET", "/metrics").body.decode()
    lag = re.search(r"^omnigate_step_lag_seconds_count (\d+)$", text, re.M)
    assert lag and int(lag.group(1)) >= 1
    assert re.search(r"^omnigate_steps_running \d+$", text, re.M)
