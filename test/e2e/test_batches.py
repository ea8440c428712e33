"""Batches end to end (API.md §20): POST /api/omni/batches queues many messages in one request,
GET /api/omni/batches/{batchId} counts them as they move, POST .../cancel cancels what is not
handed over yet, the log filters by batch and the tenant webhook gets `batch.completed` once.
The real gateway and PostgreSQL, the provider simulator calling the gateway back with delivery
statuses, and a webhook receiver started here on loopback. Tests wait on conditions (wait_for),
never on sleeps."""

import datetime
import json
import re
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, request_bytes, wait_for
from gwlib import (SETTINGS_ALL, add_tenant, admin, call, iso, linked_gateway, new_tenant, new_token,
                   query_url)
from test_templates_send import NAMED, ORDER, PNID, WABA
from test_templates_send import SETTINGS as TEMPLATE_SETTINGS
from test_webhooks_out import WH_ENV, rx, verify  # noqa: F401 (rx: the receiver fixture)

BATCHES = "/api/omni/batches"
COUNT_KEYS = {"queued", "scheduled", "sent", "delivered", "read", "failed", "undelivered", "expired", "canceled"}
BATCH_KEYS = {"batchId", "createdAt", "total", "counts", "completedAt"}
BATCH_ID_RE = re.compile(r"^kb_[0-9A-Za-z]{26}$")
REFERENCE_RE = re.compile(r"^kf_[0-9A-HJKMNP-TV-Z]{26}$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV))
    yield srv
    srv.sim.stop()


# ---- helpers (as test_queue.py's) -----------------------------------------------------------------

def post_batch(gw, body, headers=None, token=None, timeout=30):
    return call(gw, "POST", BATCHES, token=token or gw.token, body=body, headers=headers, timeout=timeout)


def get_batch(gw, batch_id, token=None):
    return call(gw, "GET", BATCHES + "/" + batch_id, token=token or gw.token)


def batch(gw, batch_id, token=None):
    b = assert_ok(get_batch(gw, batch_id, token))["data"]
    check_batch_shape(b)
    return b


def cancel_batch(gw, batch_id, token=None):
    return call(gw, "POST", "%s/%s/cancel" % (BATCHES, batch_id), token=token or gw.token)


def send(gw, body, headers=None, token=None):
    return call(gw, "POST", "/api/omni/send", token=token or gw.token, body=body, headers=headers)


def message(gw, reference, token=None):
    return assert_ok(call(gw, "GET", "/api/omni/messages/" + reference, token=token or gw.token))["data"]


def db(gw, sql):
    return query_url(gw.db_url, sql)


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def tenant_with(gw, patch, tenant_id=None):
    """The tenant's settings merged with `patch` (PATCH /admin/tenants/{id})."""
    assert_ok(admin(gw, "PATCH", "/admin/tenants/" + (tenant_id or gw.tenant["id"]), {"settings": patch}))


def check_batch_shape(b):
    """Every key present, each count an integer, each message counted once, and completedAt only
    once nothing of the batch is queued or scheduled."""
    assert set(b) == BATCH_KEYS, b
    assert BATCH_ID_RE.match(b["batchId"]), b
    assert TIME_RE.match(b["createdAt"]), b
    assert set(b["counts"]) == COUNT_KEYS, b
    assert all(isinstance(v, int) and v >= 0 for v in b["counts"].values()), b
    assert sum(b["counts"].values()) == b["total"], b
    if b["completedAt"] is not None:
        assert TIME_RE.match(b["completedAt"]), b
        assert b["counts"]["queued"] == 0 and b["counts"]["scheduled"] == 0, b


def counts(**nonzero):
    c = dict.fromkeys(COUNT_KEYS, 0)
    c.update(nonzero)
    return c


def until_batch(gw, batch_id, pred, timeout=15, token=None, what="the batch"):
    """Polls GET batch until pred(batch) holds; returns the batch, or fails with what it saw."""
    box = []

    def check():
        b = batch(gw, batch_id, token)
        box[:] = [b]
        return pred(b)
    if not wait_for(check, timeout, interval=0.1):
        raise AssertionError("timed out waiting for %s: %s\n%s\nsim: %r" % (
            what, json.dumps(box, indent=1),
            "\n".join([line for line in gw.stderr().splitlines() if '"access"' not in line][-15:]),
            [(x["channel"], x["to"], x["receivedAt"]) for x in gw.sim.requests()][-20:]))
    return box[0]


def completed(b):
    return b["completedAt"] is not None


def sim_text(req):
    """The text a provider request carried, as the simulator recorded it."""
    if req["channel"] == "sms":
        return urllib.parse.parse_qs(req["body"])["Body"][0]
    body = json.loads(req["body"])
    return body["text"]["body"] if req["channel"] == "whatsapp_meta" else body["text"]


def logs(gw, query, token=None):
    return assert_ok(call(gw, "GET", "/api/omni/logs" + query, token=token or gw.token))["data"]


def assert_rejection(rej, index, code, field=None):
    assert rej["index"] == index, rej
    assert rej["error"]["code"] == code, rej
    if field is not None:
        assert rej["error"].get("field") == field, rej
    assert isinstance(rej["error"].get("message"), str) and rej["error"]["message"], rej


# ---- a webhook receiver ------------------------------------------------------------------------------

def events(receiver, type_=None):
    """The events the receiver got, each with its request: [(event, request)]."""
    return [(e, r) for e, r in ((json.loads(r["body"]), r) for r in receiver.got())
            if type_ is None or e["type"] == type_]


# ---- tests ----------------------------------------------------------------------------------------------

def test_batch_with_variables_delivered_end_to_end(gw):
    """Defaults and per-message overrides, {{key}} replaced from each message's variables: 202
    with one reference per message in request order; the counts follow the messages to `read`
    (the simulator reports sent, delivered, read for every send), completedAt is set within about
    2 s of the last hand-over, and each provider received the substituted text."""
    gw.sim.rule("whatsapp_meta", "ok", callback="delivered_read")
    gw.sim.rule("sms", "ok", callback="delivered_read")
    tos = ["+6281234501001", "+6281234501002", "+6281234501003", "+6281234501004"]
    body = {"defaults": {"channels": ["whatsapp_meta"], "text": "Hi {{name}}, your order {{order}} ships today",
                         "priority": "low"},
            "messages": [{"to": tos[0], "variables": {"name": "Ana", "order": "A-17"}},
                         {"to": tos[1], "variables": {"name": "Budi", "order": "A-18"}, "channels": ["sms"]},
                         {"to": tos[2], "variables": {"name": "Citra", "order": "A-19"}, "priority": "high",
                          "queue": True},
                         {"to": tos[3], "text": "Code {{x}}, again {{x}}", "variables": {"x": "ünï-42"},
                          "channels": ["sms"]}]}
    expected = [("whatsapp_meta", "Hi Ana, your order A-17 ships today", "low"),
                ("sms", "Hi Budi, your order A-18 ships today", "low"),
                ("whatsapp_meta", "Hi Citra, your order A-19 ships today", "high"),
                ("sms", "Code ünï-42, again ünï-42", "low")]
    t0 = time.time()
    r = post_batch(gw, body)
    assert r.status == 202, (r, [line for line in gw.stderr().splitlines() if '"access"' not in line][-5:])
    j = assert_ok(r, 202)
    d = j["data"]
    assert set(d) == {"batchId", "accepted", "references", "rejected"}, d
    assert BATCH_ID_RE.match(d["batchId"]), d
    assert d["accepted"] == 4 and d["rejected"] == [], d
    assert len(d["references"]) == 4 and all(REFERENCE_RE.match(x) for x in d["references"]), d
    assert len(set(d["references"])) == 4
    bid, refs = d["batchId"], d["references"]

    first = batch(gw, bid)
    assert first["batchId"] == bid and first["total"] == 4
    assert abs(ts(first["createdAt"]) - t0) < 5, first

    final = until_batch(gw, bid, lambda b: completed(b) and b["counts"]["read"] == 4, 20, what="4 read, completed")
    assert final["counts"] == counts(read=4), final
    assert final["total"] == 4 and final["createdAt"] == first["createdAt"]

    items = [message(gw, ref) for ref in refs]
    for ref, item, (channel, text, priority), to in zip(refs, items, expected, tos):
        assert item["reference"] == ref and item["to"] == to, item
        assert item["status"] == "read", item
        assert item["text"] == text, item
        assert item["winningChannel"] == channel and item["priority"] == priority, item
        got = gw.sim.requests(channel, to=to)
        assert [sim_text(x) for x in got] == [text], got
    # Nothing else reached a provider (one request per message, none on the channels not asked).
    assert len(gw.sim.requests()) == 4, gw.sim.requests()
    # completedAt comes within about 2 s of the last message leaving the queue.
    last_done = max(ts(m["completedAt"]) for m in items)
    lag = ts(final["completedAt"]) - last_done
    assert -0.5 <= lag <= 2.5, (lag, final, [m["completedAt"] for m in items])


def test_batch_with_rejections_lists_them_and_delivers_the_rest(gw):
    """Rejected messages are listed by index with the error a send would get (`to` invalid,
    a placeholder without a value, an unknown field in the message, queue: false, no channel
    enabled); the valid ones are queued and delivered; nothing is written for the rejected."""
    tenant_with(gw, {"channels": {"whatsapp_qr": {"enabled": False}}})
    ok1, ok2 = "+6281234502001", "+6281234502002"
    body = {"defaults": {"channels": ["sms"], "text": "Hi {{name}}, order {{order}}"},
            "messages": [{"to": ok1, "variables": {"name": "Ana", "order": "A-1"}},
                         {"to": "123", "variables": {"name": "Bad", "order": "A-2"}},
                         {"to": "+6281234502003", "variables": {"name": "NoOrder"}},
                         {"to": "+6281234502004", "variables": {"name": "C", "order": "A-4"}, "colour": "red"},
                         {"to": "+6281234502005", "variables": {"name": "D", "order": "A-5"}, "queue": False},
                         {"to": "+6281234502006", "variables": {"name": "E", "order": "A-6"},
                          "channels": ["whatsapp_qr"]},
                         {"to": ok2, "variables": {"name": "Budi", "order": "A-7"}}]}
    r = post_batch(gw, body)
    assert r.status == 202, r
    d = assert_ok(r, 202)["data"]
    assert d["accepted"] == 2, d
    refs = d["references"]
    assert len(refs) == 7 and refs[1:6] == [None] * 5, refs
    assert REFERENCE_RE.match(refs[0]) and REFERENCE_RE.match(refs[6]), refs
    rej = d["rejected"]
    assert [x["index"] for x in rej] == [1, 2, 3, 4, 5], rej
    assert_rejection(rej[0], 1, "validation_failed", "to")
    assert_rejection(rej[1], 2, "missing_variable", "variables.order")
    assert_rejection(rej[2], 3, "unknown_field", "colour")
    assert_rejection(rej[3], 4, "validation_failed", "queue")
    assert_rejection(rej[4], 5, "no_channel_available")
    # The same errors a send of those messages gets.
    s = assert_error(send(gw, {"to": "123", "text": "Hi Bad, order A-2", "channels": ["sms"], "queue": True}),
                     422, "validation_failed")
    assert rej[0]["error"]["field"] == s["error"]["field"]
    s = assert_error(send(gw, {"to": "+6281234502006", "text": "Hi E, order A-6", "channels": ["whatsapp_qr"],
                               "queue": True}), 422, "no_channel_available")
    assert rej[4]["error"].get("field") == s["error"].get("field"), (rej[4], s)

    b = until_batch(gw, d["batchId"], completed, 15, what="completion")
    assert b["total"] == 2 and b["counts"] == counts(sent=2), b
    assert message(gw, refs[0])["text"] == "Hi Ana, order A-1"
    assert message(gw, refs[6])["text"] == "Hi Budi, order A-7"
    assert [sim_text(x) for x in gw.sim.requests("sms", to=ok1)] == ["Hi Ana, order A-1"]
    assert [sim_text(x) for x in gw.sim.requests("sms", to=ok2)] == ["Hi Budi, order A-7"]
    assert len(gw.sim.requests()) == 2, gw.sim.requests()
    assert db(gw, "SELECT count(*) FROM messages") == [("2",)]


def test_all_rejected_is_422_with_the_data(gw):
    """Every message rejected: 422 validation_failed whose data is the batch answer with batchId
    null and accepted 0; nothing is written or sent."""
    body = {"defaults": {"text": "Hi {{name}}", "channels": ["sms"]},
            "messages": [{"to": "not-a-number", "variables": {"name": "A"}},
                         {"to": "+6281234503002"},
                         {"to": "+6281234503003", "variables": {"name": "C"}, "sendAt": "tomorrow"}]}
    r = post_batch(gw, body)
    j = assert_error(r, 422, "validation_failed")
    d = j["data"]
    assert d is not None and set(d) == {"batchId", "accepted", "references", "rejected"}, j
    assert d["batchId"] is None and d["accepted"] == 0 and d["references"] == [None, None, None], d
    assert [x["index"] for x in d["rejected"]] == [0, 1, 2], d
    assert_rejection(d["rejected"][0], 0, "validation_failed", "to")
    assert_rejection(d["rejected"][1], 1, "missing_variable", "variables.name")
    assert_rejection(d["rejected"][2], 2, "validation_failed", "sendAt")
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    assert gw.sim.requests() == []


def test_batch_too_large_before_any_check(make_server, fresh_db, tmp_path):
    """OMNIGATE_BATCH_MAX=5: six messages, even all invalid, are 413 batch_too_large (the size is
    checked before any message); five are checked (invalid ones: 422 with the rejections; valid
    ones: 202, accepted 5)."""
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, env={"OMNIGATE_BATCH_MAX": "5"}))
    try:
        at = iso(time.time() + 600)
        bad = [{"to": "x", "bogus": 1}] * 6
        assert_error(post_batch(srv, {"defaults": {"text": "hi"}, "messages": bad}), 413, "batch_too_large")
        six = [{"to": "+62812345040%02d" % i} for i in range(6)]
        assert_error(post_batch(srv, {"defaults": {"text": "hi", "sendAt": at}, "messages": six}), 413,
                     "batch_too_large")
        assert db(srv, "SELECT count(*) FROM messages") == [("0",)]
        j = assert_error(post_batch(srv, {"defaults": {"text": "hi"}, "messages": bad[:5]}), 422, "validation_failed")
        assert j["data"]["accepted"] == 0 and len(j["data"]["rejected"]) == 5
        d = assert_ok(post_batch(srv, {"defaults": {"text": "hi", "sendAt": at, "channels": ["sms"]},
                                       "messages": six[:5]}), 202)["data"]
        assert d["accepted"] == 5 and d["rejected"] == []
        assert batch(srv, d["batchId"])["counts"] == counts(scheduled=5)
    finally:
        srv.sim.stop()


def test_default_max_is_1000(gw):
    """With the default maximum, 1001 messages are 413 batch_too_large and nothing is written;
    1000 (a body well over the API's 64 KiB) are accepted."""
    at = iso(time.time() + 3600)
    msgs = [{"to": "+628123450%05d" % i, "variables": {"name": "Customer %04d" % i}, "priority": "low"}
            for i in range(1001)]
    body = {"defaults": {"text": "Hello {{name}}", "channels": ["sms"], "sendAt": at}, "messages": msgs}
    assert_error(post_batch(gw, body, timeout=60), 413, "batch_too_large")
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    body["messages"] = msgs[:1000]
    assert len(json.dumps(body)) > 64 * 1024
    r = post_batch(gw, body, timeout=60)
    assert r.status == 202, r
    d = r.json()["data"]
    assert d["accepted"] == 1000 and d["rejected"] == [] and len(d["references"]) == 1000
    assert batch(gw, d["batchId"])["counts"] == counts(scheduled=1000)
    assert db(gw, "SELECT count(*) FROM messages") == [("1000",)]


def test_request_level_errors(gw):
    """An unknown top-level field refuses the whole request (422 unknown_field naming it);
    messages missing, not an array or empty are 422 validation_failed naming messages; a body
    that is not an object is 400 invalid_json; one over 4 MiB is 413 payload_too_large. Nothing
    is written."""
    ok = {"defaults": {"text": "hi", "channels": ["sms"]}, "messages": [{"to": "+6281234505001"}]}
    assert_error(post_batch(gw, dict(ok, mesages=[])), 422, "unknown_field", "mesages")
    assert_error(post_batch(gw, {"defaults": {"text": "hi"}}), 422, "validation_failed", "messages")
    assert_error(post_batch(gw, {"defaults": {"text": "hi"}, "messages": {"to": "+6281234505001"}}), 422,
                 "validation_failed", "messages")
    assert_error(post_batch(gw, {"defaults": {"text": "hi"}, "messages": []}), 422, "validation_failed", "messages")
    assert_error(post_batch(gw, "[1, 2]"), 400, "invalid_json")
    with gw.conn() as c:
        c.send(request_bytes("POST", BATCHES, [("Authorization", "Bearer " + gw.token),
                                               ("Content-Type", "application/json"),
                                               ("Content-Length", str(4 * 1024 * 1024 + 1))]) + b'{"messages": [')
        assert_error(c.read_response(timeout=5), 413, "payload_too_large")
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    assert gw.sim.requests() == []


def test_idempotent_replay(gw):
    """The same Idempotency-Key and body: the same 202 (same batchId, same references), marked
    replayed, nothing more queued; the same key with another body: 422 idempotency_key_reused."""
    h = [("Idempotency-Key", "batch-1")]
    body = {"defaults": {"text": "Hi {{n}}", "channels": ["sms"], "sendAt": iso(time.time() + 600)},
            "messages": [{"to": "+6281234506001", "variables": {"n": "1"}},
                         {"to": "bad"},
                         {"to": "+6281234506003", "variables": {"n": "3"}}]}
    r1 = post_batch(gw, body, headers=h)
    assert r1.status == 202, r1
    r2 = post_batch(gw, body, headers=h)
    assert r2.status == 202, r2
    assert r2.json()["data"] == r1.json()["data"]
    assert r2.header("Idempotency-Replayed") == "true"
    d = r1.json()["data"]
    assert d["accepted"] == 2 and d["references"][1] is None
    assert db(gw, "SELECT count(*) FROM messages") == [("2",)]
    assert batch(gw, d["batchId"])["total"] == 2
    other = dict(body, messages=body["messages"][:1])
    assert_error(post_batch(gw, other, headers=h), 422, "idempotency_key_reused")
    assert db(gw, "SELECT count(*) FROM messages") == [("2",)]


def test_cancel_scheduled_batch(gw):
    """A batch scheduled minutes ahead: cancel answers canceled N; every message is canceled, the
    counts say so and the batch completes within about 2 s; a second cancel cancels 0."""
    n = 4
    body = {"defaults": {"text": "later", "channels": ["whatsapp_meta", "sms"], "sendAt": iso(time.time() + 300)},
            "messages": [{"to": "+62812345070%02d" % i} for i in range(n)]}
    d = assert_ok(post_batch(gw, body), 202)["data"]
    bid, refs = d["batchId"], d["references"]
    b = batch(gw, bid)
    assert b["counts"] == counts(scheduled=n) and b["completedAt"] is None, b
    assert all(message(gw, ref)["status"] == "scheduled" for ref in refs)
    t_cancel = time.time()
    r = cancel_batch(gw, bid)
    assert assert_ok(r)["data"] == {"canceled": n}
    b = until_batch(gw, bid, completed, 5, what="completion after the cancel")
    assert b["counts"] == counts(canceled=n) and b["total"] == n, b
    assert ts(b["completedAt"]) - t_cancel <= 2.5, (b, t_cancel)
    for ref in refs:
        m = message(gw, ref)
        assert m["status"] == "canceled" and m["attempts"] == [], m
    assert assert_ok(cancel_batch(gw, bid))["data"] == {"canceled": 0}
    assert batch(gw, bid)["counts"] == counts(canceled=n)
    assert gw.sim.requests() == []


def test_counts_follow_every_final_status(gw):
    """A batch whose messages end every way a queued message can: accepted with no later status
    (sent), refused by the provider (failed), reported undelivered, delivered, read, and past its
    validity before it was claimed (expired). Each is counted once under its status and the
    batch completes."""
    tos = {"sent": "+6281234513001", "failed": "+19990010000", "undelivered": "+19990004000",
           "delivered": "+19990009000", "read": "+19990001000", "expired": "+6281234513006"}
    order = ["sent", "failed", "undelivered", "delivered", "read", "expired"]
    msgs = [{"to": tos[k]} for k in order]
    # Due 50 s ago and valid for 10 s: its validity has passed when it is first claimed.
    msgs[5].update({"sendAt": iso(time.time() - 50), "validitySeconds": 10})
    d = assert_ok(post_batch(gw, {"defaults": {"text": "every way", "channels": ["sms"]}, "messages": msgs}),
                  202)["data"]
    assert d["accepted"] == 6, d
    want = counts(sent=1, failed=1, undelivered=1, delivered=1, read=1, expired=1)
    b = until_batch(gw, d["batchId"], lambda b: completed(b) and b["counts"] == want, 20, what=repr(want))
    assert b["total"] == 6
    for k, ref in zip(order, d["references"]):
        assert message(gw, ref)["status"] == k, (k, message(gw, ref))
    assert gw.sim.requests("sms", to=tos["expired"]) == []


def test_counts_match_the_messages_whichever_statement_moved_them(gw):
    """A scheduled batch whose messages move every way the queue moves them: the claim writes
    them 'queued' as they come due and the outcome writes what the provider said, both counting
    their plain fallback messages themselves (sql/033), while `all` sends, a delivery-based
    fallback and delivery statuses are counted by the trigger, row by row. Once complete, the
    counts are what the messages' statuses say, each message once."""
    msgs = [{"to": "+6281234515001"},                                   # sent on whatsapp_meta
            {"to": "+19990100000"},                                     # Meta refuses: sent on sms
            {"to": "+19990600000", "validitySeconds": 10},              # Meta throttles: retried, then sms
            {"to": "+6281234515004", "deliveryMode": "all"},            # sent on both
            {"to": "+19990009000", "fallbackOn": "delivered"},          # delivered on whatsapp_meta
            {"to": "+19990001000", "channels": ["sms"]},                # read
            {"to": "+19990110000"}]                                     # refused by both: failed
    d = assert_ok(post_batch(gw, {"defaults": {"text": "every path", "channels": ["whatsapp_meta", "sms"],
                                               "sendAt": iso(time.time() + 2)}, "messages": msgs}), 202)["data"]
    assert d["accepted"] == len(msgs), d
    until_batch(gw, d["batchId"], completed, 40, what="completion")
    want = counts(sent=4, delivered=1, read=1, failed=1)
    b = until_batch(gw, d["batchId"], lambda b: b["counts"] == want, 10, what=repr(want))
    assert [message(gw, ref)["status"] for ref in d["references"]] == \
        ["sent", "sent", "sent", "sent", "delivered", "read", "failed"]
    rows = db(gw, "SELECT og_batch_status(status), count(*) FROM messages WHERE batch_id = '%s' GROUP BY 1"
              % d["batchId"])
    assert {k: int(n) for k, n in rows} == {k: v for k, v in b["counts"].items() if v}, (rows, b)
    # The throttled one was retried on whatsapp_meta before it moved on.
    assert len(gw.sim.requests("whatsapp_meta", to="+19990600000")) >= 2
    assert len(gw.sim.requests("sms", to="+19990600000")) == 1


def test_counts_say_queued_once_every_message_is_due(gw):
    """A scheduled batch whose sender is held back: counted `scheduled` until its sendAt, then
    `queued` (due, not yet handed over: API.md §19), as each of its messages is shown, though no
    claim has taken them and their rows still say `scheduled` (og_batch_item, sql/034)."""
    at = time.time() + 1.5
    d = assert_ok(post_batch(gw, {"defaults": {"text": "held", "channels": ["sms"], "sendAt": iso(at)},
                                  "messages": [{"to": "+6281234515301"}, {"to": "+6281234515302"}]}), 202)["data"]
    db(gw, "UPDATE queue_senders SET held_until = now() + interval '1 hour' WHERE channel = 'sms'")
    assert batch(gw, d["batchId"])["counts"] == counts(scheduled=2)
    assert wait_for(lambda: time.time() > at + 0.1, 3)
    b = batch(gw, d["batchId"])
    assert b["counts"] == counts(queued=2) and b["completedAt"] is None, b
    assert [message(gw, ref)["status"] for ref in d["references"]] == ["queued", "queued"]
    assert db(gw, "SELECT DISTINCT status FROM messages WHERE batch_id = '%s'" % d["batchId"]) == [("scheduled",)]
    assert gw.sim.requests("sms") == []
    assert assert_ok(cancel_batch(gw, d["batchId"]))["data"] == {"canceled": 2}
    b = until_batch(gw, d["batchId"], completed, 5, what="completion after the cancel")
    assert b["counts"] == counts(canceled=2), b


def test_a_claimed_message_counts_queued_and_its_abandon_failed(make_server, fresh_db, tmp_path):
    """A scheduled batch message at its provider is counted `queued` (its claim counted it so) and
    shown `queued`, though its row still says `scheduled` (the claim writes no status: sql/034);
    kill -9 of its holder: the other instance's takeover writes its attempt `unknown` and the batch
    counts it `failed` from `queued`, next to one sent: counts equal to its messages' statuses."""
    env = {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000", "OMNIGATE_DB_TIMEOUT_MS": "500"}
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, workers=1, env=env))
    b = linked_gateway(make_server, fresh_db, tmp_path, sim=a.sim, workers=1, env=env)
    b.token = a.token
    try:
        b.stop()
        stuck = "+6281234515201"
        a.sim.rule("sms", "hang", to=stuck)
        d = assert_ok(post_batch(a, {"defaults": {"text": "held", "channels": ["sms"], "sendAt": iso(time.time() + 1)},
                                     "messages": [{"to": stuck}, {"to": "+6281234515202"}]}), 202)["data"]
        bid, refs = d["batchId"], d["references"]
        assert wait_for(lambda: len(a.sim.requests("sms", to=stuck)) == 1, 10)
        until_batch(a, bid, lambda x: x["counts"] == counts(queued=1, sent=1), 10, what="one at its provider")
        m = message(a, refs[0])
        assert m["status"] == "queued" and [x["status"] for x in m["attempts"]] == ["pending"], m
        assert db(a, "SELECT status FROM messages WHERE reference = '%s'" % refs[0]) == [("scheduled",)]
        a.kill()
        b.start()
        x = until_batch(b, bid, completed, 30, what="the takeover")
        assert x["counts"] == counts(failed=1, sent=1), x
        assert [message(b, ref)["status"] for ref in refs] == ["unknown", "sent"]
        rows = db(b, "SELECT og_batch_status(status), count(*) FROM messages WHERE batch_id = '%s' GROUP BY 1" % bid)
        assert {k: int(n) for k, n in rows} == {"failed": 1, "sent": 1}, rows
        assert len(a.sim.requests("sms", to=stuck)) == 1
    finally:
        a.sim.stop()


def test_cancel_counts_a_queued_message_waiting_for_its_retry(gw):
    """A batch's cancel counts what it cancels once, at its end, from each message's status as
    its cancel replaced it (sql/033): here a message due now that the provider throttled, waiting
    `queued` for its retry, is counted queued -> canceled, next to one sent."""
    slow = "+19990060000"  # SMS throttles it every time
    d = assert_ok(post_batch(gw, {"defaults": {"text": "retry", "channels": ["sms"], "validitySeconds": 600},
                                  "messages": [{"to": slow}, {"to": "+6281234515101"}]}), 202)["data"]
    bid, refs = d["batchId"], d["references"]
    assert wait_for(lambda: len(gw.sim.requests("sms", to=slow)) >= 2, 15)
    until_batch(gw, bid, lambda b: b["counts"] == counts(queued=1, sent=1), 15, what="one queued, one sent")
    # Canceled between two tries (a try in flight is not cancelable: then again).
    assert wait_for(lambda: assert_ok(cancel_batch(gw, bid))["data"]["canceled"] == 1, 15)
    b = until_batch(gw, bid, completed, 5, what="completion after the cancel")
    assert b["counts"] == counts(sent=1, canceled=1), b
    assert [message(gw, ref)["status"] for ref in refs] == ["canceled", "sent"]
    rows = db(gw, "SELECT og_batch_status(status), count(*) FROM messages WHERE batch_id = '%s' GROUP BY 1" % bid)
    assert {k: int(n) for k, n in rows} == {"canceled": 1, "sent": 1}, rows


def test_cancel_partially_sent_batch(gw):
    """A batch with some messages due now and some scheduled minutes ahead (a per-message
    sendAt): once the due ones are sent, cancel cancels only the scheduled ones, and the batch
    completes with both counted."""
    later = iso(time.time() + 300)
    msgs = [{"to": "+62812345140%02d" % i} for i in range(3)] + \
        [{"to": "+62812345141%02d" % i, "sendAt": later} for i in range(3)]
    d = assert_ok(post_batch(gw, {"defaults": {"text": "part", "channels": ["sms"]}, "messages": msgs}), 202)["data"]
    bid, refs = d["batchId"], d["references"]
    b = until_batch(gw, bid, lambda b: b["counts"]["sent"] == 3, 15, what="the due ones sent")
    assert b["counts"] == counts(sent=3, scheduled=3) and b["completedAt"] is None, b
    assert [message(gw, ref)["status"] for ref in refs[3:]] == ["scheduled"] * 3
    t_cancel = time.time()
    assert assert_ok(cancel_batch(gw, bid))["data"] == {"canceled": 3}
    b = until_batch(gw, bid, completed, 5, what="completion after the cancel")
    assert b["counts"] == counts(sent=3, canceled=3), b
    assert ts(b["completedAt"]) - t_cancel <= 2.5, (b, t_cancel)
    assert [message(gw, ref)["status"] for ref in refs] == ["sent"] * 3 + ["canceled"] * 3
    assert assert_ok(cancel_batch(gw, bid))["data"] == {"canceled": 0}
    assert len(gw.sim.requests("sms")) == 3


def test_template_parameters_take_variables(make_server, fresh_db, tmp_path):
    """{{key}} in template parameter values (positional and named) is replaced from the
    message's variables: Meta gets the parameters substituted, the log the rendered text; a
    placeholder without a value in a parameter rejects that message (missing_variable)."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    try:
        srv.sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA, {"phoneNumberIds": [PNID],
                                                                       "templates": [ORDER, NAMED]})
        srv.tenant = new_tenant(srv, settings=TEMPLATE_SETTINGS)
        srv.token = new_token(srv, srv.tenant["id"])["token"]
        synced = assert_ok(admin(srv, "POST", "/admin/tenants/%s/templates/sync" % srv.tenant["id"]))
        assert synced["data"]["synced"] == 2
        tos = ["+6281234515001", "+6281234515002", "+6281234515003"]
        body = {"defaults": {"channels": ["whatsapp_meta"],
                             "template": {"name": "order_update", "language": "en_US",
                                          "parameters": ["{{name}}", "{{order}}"],
                                          "buttons": [{"index": 0, "subType": "url", "parameter": "T17"}]}},
                "messages": [{"to": tos[0], "variables": {"name": "Ana", "order": "A-17"}},
                             {"to": tos[1], "variables": {"name": "Budi"}},
                             {"to": tos[2], "variables": {"name": "Citra"},
                              "template": {"name": "welcome", "language": "en",
                                           "parameters": {"first_name": "{{name}}"}}}]}
        d = assert_ok(post_batch(srv, body), 202)["data"]
        assert d["accepted"] == 2 and d["references"][1] is None, d
        assert len(d["rejected"]) == 1
        assert_rejection(d["rejected"][0], 1, "missing_variable", "variables.order")
        b = until_batch(srv, d["batchId"], completed, 15, what="completion")
        assert b["counts"] == counts(sent=2), b
        sent = {r["to"]: json.loads(r["body"]) for r in srv.sim.requests("whatsapp_meta") if r["method"] == "POST"}
        assert set(sent) == {tos[0], tos[2]}, sent
        assert sent[tos[0]]["template"]["components"][0] == {
            "type": "body", "parameters": [{"type": "text", "text": "Ana"}, {"type": "text", "text": "A-17"}]}
        assert sent[tos[2]]["template"]["components"] == [
            {"type": "body", "parameters": [{"type": "text", "parameter_name": "first_name", "text": "Citra"}]}]
        assert message(srv, d["references"][0])["text"] == "Hi Ana, your order A-17 ships today"
        assert message(srv, d["references"][2])["text"] == "Welcome Citra!"
    finally:
        srv.sim.stop()


def test_logs_filter_by_batch(gw):
    """GET /api/omni/logs?batchId= lists only that batch's messages (paged, combined with the
    status filter); a message canceled on its own moves its batch's counts."""
    at = iso(time.time() + 600)
    x = assert_ok(post_batch(gw, {"defaults": {"text": "x", "channels": ["sms"], "sendAt": at},
                                  "messages": [{"to": "+62812345080%02d" % i} for i in range(3)]}), 202)["data"]
    y = assert_ok(post_batch(gw, {"defaults": {"text": "y", "channels": ["sms"], "sendAt": at},
                                  "messages": [{"to": "+62812345081%02d" % i} for i in range(2)]}), 202)["data"]
    single = send(gw, {"to": "+6281234508200", "text": "alone", "channels": ["sms"], "sendAt": at})
    assert single.status == 202, single
    items = logs(gw, "?batchId=" + x["batchId"])["items"]
    assert sorted(i["reference"] for i in items) == sorted(x["references"]), items
    assert all(i["text"] == "x" for i in items)
    items = logs(gw, "?batchId=" + y["batchId"])["items"]
    assert sorted(i["reference"] for i in items) == sorted(y["references"]), items
    page1 = logs(gw, "?limit=2&batchId=" + x["batchId"])
    assert len(page1["items"]) == 2 and page1["nextCursor"], page1
    page2 = logs(gw, "?limit=2&batchId=%s&cursor=%s" % (x["batchId"], urllib.parse.quote(page1["nextCursor"])))
    assert len(page2["items"]) == 1 and page2["nextCursor"] is None, page2
    assert sorted(i["reference"] for i in page1["items"] + page2["items"]) == sorted(x["references"])
    one = x["references"][1]
    assert assert_ok(call(gw, "POST", "/api/omni/messages/%s/cancel" % one, token=gw.token))["data"]["status"] == \
        "canceled"
    assert [i["reference"] for i in logs(gw, "?status=canceled&batchId=" + x["batchId"])["items"]] == [one]
    assert len(logs(gw, "?status=scheduled&batchId=" + x["batchId"])["items"]) == 2
    b = batch(gw, x["batchId"])
    assert b["counts"] == counts(scheduled=2, canceled=1) and b["completedAt"] is None, b
    assert batch(gw, y["batchId"])["counts"] == counts(scheduled=2)


def test_another_tenants_batch_is_404(gw):
    """Another tenant's batch is 404 not_found on GET and cancel (and cancels nothing), its log
    filter shows none of the batch's messages; an unknown batch id is 404 too."""
    d = assert_ok(post_batch(gw, {"defaults": {"text": "mine", "channels": ["sms"],
                                               "sendAt": iso(time.time() + 600)},
                                  "messages": [{"to": "+6281234509001"}, {"to": "+6281234509002"}]}), 202)["data"]
    other = new_tenant(gw, settings=SETTINGS_ALL, name="other")
    tok = new_token(gw, other["id"])["token"]
    assert_error(get_batch(gw, d["batchId"], token=tok), 404, "not_found")
    assert_error(cancel_batch(gw, d["batchId"], token=tok), 404, "not_found")
    r = call(gw, "GET", "/api/omni/logs?batchId=" + d["batchId"], token=tok)
    assert r.status in (200, 404), r
    if r.status == 200:
        assert r.json()["data"]["items"] == []
    assert batch(gw, d["batchId"])["counts"] == counts(scheduled=2)
    unknown = "kb_" + "0" * 26
    assert_error(get_batch(gw, unknown), 404, "not_found")
    assert_error(cancel_batch(gw, unknown), 404, "not_found")
    assert_error(get_batch(gw, "kb_nope"), 404, "not_found")
    # The other tenant's own batch is its own.
    o = assert_ok(post_batch(gw, {"defaults": {"text": "theirs", "channels": ["sms"],
                                               "sendAt": iso(time.time() + 600)},
                                  "messages": [{"to": "+6281234509003"}]}, token=tok), 202)["data"]
    assert batch(gw, o["batchId"], token=tok)["total"] == 1
    assert_error(get_batch(gw, o["batchId"]), 404, "not_found")


def test_batch_routes_need_their_scopes(gw):
    """POST batches and cancel need scope send; GET a batch needs scope logs."""
    logs_only = new_token(gw, gw.tenant["id"], scopes=["logs"])["token"]
    send_only = new_token(gw, gw.tenant["id"], scopes=["send"])["token"]
    body = {"defaults": {"text": "s", "channels": ["sms"], "sendAt": iso(time.time() + 600)},
            "messages": [{"to": "+6281234510001"}]}
    assert_error(post_batch(gw, body, token=logs_only), 403, "insufficient_scope")
    d = assert_ok(post_batch(gw, body, token=send_only), 202)["data"]
    assert_error(get_batch(gw, d["batchId"], token=send_only), 403, "insufficient_scope")
    assert_error(cancel_batch(gw, d["batchId"], token=logs_only), 403, "insufficient_scope")
    assert batch(gw, d["batchId"], token=logs_only)["counts"] == counts(scheduled=1)
    assert assert_ok(cancel_batch(gw, d["batchId"], token=send_only))["data"] == {"canceled": 1}


def test_two_tenants_batches_drain_side_by_side(gw):
    """Tenant A's batch of many low-priority messages behind an SMS sender at 2/s does not delay
    tenant B's batch on its own sender: B's completes within seconds while A's is still queued,
    and A's completes too, at its sender's pace."""
    tenant_with(gw, {"channels": {"sms": {"messagesPerSecond": {"ACME": 2}}}})
    other = new_tenant(gw, settings=SETTINGS_ALL, name="tenant-b")
    tok_b = new_token(gw, other["id"])["token"]
    n_a, n_b = 24, 8
    a = assert_ok(post_batch(gw, {"defaults": {"text": "a {{i}}", "channels": ["sms"], "priority": "low"},
                                  "messages": [{"to": "+62812345110%02d" % i, "variables": {"i": str(i)}}
                                               for i in range(n_a)]}), 202)["data"]
    assert a["accepted"] == n_a
    t_b = time.time()
    b = assert_ok(post_batch(gw, {"defaults": {"text": "b {{i}}", "channels": ["sms"], "priority": "low"},
                                  "messages": [{"to": "+62812345120%02d" % i, "variables": {"i": str(i)}}
                                               for i in range(n_b)]}, token=tok_b), 202)["data"]
    assert b["accepted"] == n_b
    done_b = until_batch(gw, b["batchId"], completed, 6, token=tok_b, what="tenant B's batch")
    took_b = time.time() - t_b
    assert done_b["counts"] == counts(sent=n_b), done_b
    # A is still draining at 2/s when B is done.
    mid_a = batch(gw, a["batchId"])
    assert mid_a["completedAt"] is None and mid_a["counts"]["queued"] > 0, (mid_a, took_b)
    # Neither sees the other's batch.
    assert_error(get_batch(gw, a["batchId"], token=tok_b), 404, "not_found")
    assert_error(get_batch(gw, b["batchId"]), 404, "not_found")
    done_a = until_batch(gw, a["batchId"], completed, 40, what="tenant A's batch")
    assert done_a["counts"] == counts(sent=n_a), done_a
    got_a = sorted(x["receivedAt"] / 1000.0 for x in gw.sim.requests("sms") if x["to"].startswith("+62812345110"))
    got_b = sorted(x["receivedAt"] / 1000.0 for x in gw.sim.requests("sms") if x["to"].startswith("+62812345120"))
    assert len(got_a) == n_a and len(got_b) == n_b
    # A at its 2/s (the spread a 2/s sender needs, with a burst of a few); B within its 10/s.
    assert got_a[-1] - got_a[0] >= (n_a - 4) / 2.0 * 0.9, got_a[-1] - got_a[0]
    assert got_b[-1] - got_b[0] < 3.0, got_b
    # B's last message went out while A's were still going out.
    assert got_b[-1] < got_a[-1] - 3.0, (got_b[-1], got_a[-1])


def test_batch_completed_webhook_once(gw, rx):
    """The tenant webhook subscribed to batch.completed gets it once per batch, signed, with the
    batch as GET shows it at completion (nothing queued or scheduled, completedAt set); delivery
    statuses arriving later move the counts but send no second event."""
    secret = assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"],
                             {"url": rx.url(), "events": ["batch.completed"]}))["data"]
    assert secret["events"] == ["batch.completed"], secret
    secret = secret["secret"]
    # Two recipients whose SMS the simulator reports sent, delivered and read after the send's
    # answer; one with no status callbacks.
    tos = ["+19990001001", "+19990001002", "+6281234512003"]
    d = assert_ok(post_batch(gw, {"defaults": {"text": "event", "channels": ["sms"]},
                                  "messages": [{"to": t} for t in tos]}), 202)["data"]
    bid = d["batchId"]
    assert wait_for(lambda: events(rx, "batch.completed"), 15), events(rx)
    final = until_batch(gw, bid, lambda b: b["counts"]["read"] == 2, 15, what="the read statuses")
    assert final["counts"] == counts(sent=1, read=2) and completed(final), final
    # A second batch; once its event has come, the first one's is still alone.
    d2 = assert_ok(post_batch(gw, {"defaults": {"text": "event 2", "channels": ["sms"]},
                                   "messages": [{"to": "+6281234512004"}]}), 202)["data"]
    assert wait_for(lambda: any(e["data"]["batchId"] == d2["batchId"] for e, _ in events(rx, "batch.completed")), 15)
    evs = events(rx, "batch.completed")
    mine = [(e, req) for e, req in evs if e["data"]["batchId"] == bid]
    assert len(mine) == 1, [e for e, _ in evs]
    assert len(evs) == 2, [e for e, _ in evs]
    assert events(rx) == evs  # nothing else: the webhook asked for batch.completed only
    event, req = mine[0]
    assert verify(secret, req), req["headers"]
    assert set(event) == {"type", "timestamp", "data"} and TIME_RE.match(event["timestamp"]), event
    data = event["data"]
    check_batch_shape(data)
    assert data["batchId"] == bid and data["total"] == 3 and data["createdAt"] == final["createdAt"], data
    assert data["completedAt"] == final["completedAt"], (data, final)
    # Sent within about 2 s of the completion (a little more for the delivery from the outbox).
    assert req["at"] - ts(data["completedAt"]) <= 3.0, (req["at"], data["completedAt"])
    assert data["counts"]["queued"] == 0 and data["counts"]["scheduled"] == 0, data
    assert data["counts"]["canceled"] == data["counts"]["failed"] == data["counts"]["expired"] == 0, data
    assert data["counts"]["sent"] + data["counts"]["delivered"] + data["counts"]["read"] == 3, data
    second = [e for e, _ in evs if e["data"]["batchId"] == d2["batchId"]][0]["data"]
    assert second["counts"] == counts(sent=1) and second["total"] == 1, second
