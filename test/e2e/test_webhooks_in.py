"""Issue 13 end to end: delivery statuses from the providers' webhooks (API.md §10) through the
real gateway and the real PostgreSQL. Sends go to the provider simulator to get real provider
message ids; the webhooks are posted here, signed (or not) with the providers' algorithms."""

import base64
import hashlib
import hmac
import json
import signal
import subprocess
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, wait_for
import gwlib
from gwlib import (META_SECRET, SIM_SMS_TOKEN, VERIFY_TOKEN, WAHA_SECRET, SETTINGS_ALL, call,  # noqa: F401
                   new_tenant, new_token, query_url, sim, tenant_gateway)

PUBLIC_URL = "http://gw.example.com:8443"
OK_TO = "+6281234567890"

WEBHOOK_ENV = dict(gwlib.WEBHOOK_ENV, OMNIGATE_PUBLIC_URL=PUBLIC_URL)


@pytest.fixture
def gw(make_gateway, sim):
    return tenant_gateway(make_gateway, sim, env=WEBHOOK_ENV)


def db(gw, sql):
    return query_url(gw.db_url, sql)


def send(gw, channels, to=OK_TO, token=None):
    """A unified send on `channels`; returns its data (reference, attempts with provider ids)."""
    return assert_ok(call(gw, "POST", "/api/omni/send", token=token or gw.token,
                          body={"to": to, "text": "hello", "channels": channels}))["data"]


def log_item(gw, reference, token=None):
    j = assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference, token=token or gw.token))
    items = j["data"]["items"]
    return items[0] if items else None


# ---- signing, as the providers do it ---------------------------------------------------------

def meta_sig(body, secret=META_SECRET):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def waha_sig(body, secret=WAHA_SECRET):
    return hmac.new(secret.encode(), body, hashlib.sha512).hexdigest()


def twilio_sig(url, fields, token=SIM_SMS_TOKEN):
    s = url + "".join(k + v for k, v in sorted(fields))
    return base64.b64encode(hmac.new(token.encode(), s.encode(), hashlib.sha1).digest()).decode()


def meta_status(wamid, status, ts, code=None):
    st = {"id": wamid, "status": status, "timestamp": str(ts), "recipient_id": OK_TO[1:]}
    if code is not None:
        st["errors"] = [{"code": code, "title": "Message undeliverable", "message": "Message undeliverable",
                         "error_data": {"details": "Message Undeliverable."}}]
    return st


def meta_body(statuses):
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp",
                                        "metadata": {"display_phone_number": "15550783881",
                                                     "phone_number_id": "109876543210"},
                                        "statuses": statuses}}]}]}).encode()


def post_meta(gw, body, sig=None, headers=None):
    hdrs = [("Content-Type", "application/json")]
    if sig is not False:
        hdrs.append(("X-Hub-Signature-256", sig or meta_sig(body)))
    return gw.request("POST", "/webhooks/meta", headers=hdrs + list(headers or []), body=body)


def waha_body(msg_id, ack, ts_ms):
    names = {-1: "ERROR", 0: "PENDING", 1: "SERVER", 2: "DEVICE", 3: "READ", 4: "PLAYED"}
    return json.dumps({"id": "evt_01", "timestamp": ts_ms, "event": "message.ack", "session": "default",
                       "payload": {"id": msg_id, "from": "6281234567890@c.us", "fromMe": True, "ack": ack,
                                   "ackName": names[ack]}}).encode()


def post_waha(gw, body, sig=None):
    hdrs = [("Content-Type", "application/json"), ("X-Webhook-Hmac-Algorithm", "sha512")]
    if sig is not False:
        hdrs.append(("X-Webhook-Hmac", sig or waha_sig(body)))
    return gw.request("POST", "/webhooks/waha", headers=hdrs, body=body)


def post_twilio(gw, fields, path="/webhooks/twilio", sig=None):
    body = urllib.parse.urlencode(fields).encode()
    hdrs = [("Content-Type", "application/x-www-form-urlencoded")]
    if sig is not False:
        hdrs.append(("X-Twilio-Signature", sig or twilio_sig(PUBLIC_URL + path, fields)))
    return gw.request("POST", path, headers=hdrs, body=body)


def twilio_fields(sid, status, code=None):
    f = [("MessageSid", sid), ("SmsSid", sid), ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
         ("MessageStatus", status), ("SmsStatus", status), ("To", OK_TO), ("From", "ACME"),
         ("ApiVersion", "2010-04-01")]
    if code is not None:
        f.append(("ErrorCode", str(code)))
    return f


def statuses_count(gw):
    return int(db(gw, "SELECT count(*) FROM delivery_statuses")[0][0])


def counts(resp):
    return assert_ok(resp)["data"]


# ---- authentication ----------------------------------------------------------------------------

def test_meta_signature_accepted_and_refused(gw):
    """Meta: the right X-Hub-Signature-256 is applied; missing, wrong, a tampered body (one byte)
    and the signature of another provider's secret are 401 and record nothing."""
    d = send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    body = meta_body([meta_status(wamid, "delivered", int(time.time()))])
    tampered = body.replace(b'"delivered"', b'"delivereD"')
    for resp in (post_meta(gw, body, sig=False),
                 post_meta(gw, body, sig="sha256=" + "0" * 64),
                 post_meta(gw, tampered, sig=meta_sig(body)),
                 post_meta(gw, body, sig="sha256=" + hmac.new(WAHA_SECRET.encode(), body, hashlib.sha256).hexdigest()),
                 post_meta(gw, body, sig=meta_sig(body)[7:])):
        assert_error(resp, 401, "invalid_signature")
    assert statuses_count(gw) == 0
    assert counts(post_meta(gw, body)) == {"applied": 1, "duplicate": 0, "unknown": 0}
    a = log_item(gw, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == "delivered" and a["deliveredAt"]


def test_waha_signature_accepted_and_refused(gw):
    """WAHA: HMAC-SHA512 hex of the raw body; wrong, missing, tampered or Meta's secret are 401."""
    d = send(gw, ["whatsapp_qr"])
    mid = d["attempts"][0]["providerMessageId"]
    body = waha_body(mid, 3, int(time.time() * 1000))
    for resp in (post_waha(gw, body, sig=False), post_waha(gw, body, sig="ab" * 64),
                 post_waha(gw, body.replace(b'"READ"', b'"REAd"'), sig=waha_sig(body)),
                 post_waha(gw, body, sig=waha_sig(body, META_SECRET))):
        assert_error(resp, 401, "invalid_signature")
    assert statuses_count(gw) == 0
    assert counts(post_waha(gw, body))["applied"] == 1
    a = log_item(gw, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == "read" and a["readAt"] and a["deliveredAt"]


def test_twilio_signature_with_query_and_port(gw):
    """Twilio: base64 HMAC-SHA1 over OMNIGATE_PUBLIC_URL + path + query + sorted fields; a query
    string and a non-default port are part of what is signed. Wrong token, wrong URL and a
    changed field are 401."""
    d = send(gw, ["sms"])
    sid = d["attempts"][0]["providerMessageId"]
    fields = twilio_fields(sid, "delivered")
    path = "/webhooks/twilio?tenant=acme&x=1%202"
    assert_error(post_twilio(gw, fields, path=path, sig=twilio_sig(PUBLIC_URL + "/webhooks/twilio", fields)),
                 401, "invalid_signature")
    assert_error(post_twilio(gw, fields, path=path, sig=twilio_sig("http://gw.example.com" + path, fields)),
                 401, "invalid_signature")
    assert_error(post_twilio(gw, fields, path=path, sig=twilio_sig(PUBLIC_URL + path, fields, "other-token")),
                 401, "invalid_signature")
    assert_error(post_twilio(gw, fields, path=path, sig=twilio_sig(PUBLIC_URL + path, twilio_fields(sid, "read"))),
                 401, "invalid_signature")
    assert_error(post_twilio(gw, fields, path=path, sig=False), 401, "invalid_signature")
    assert statuses_count(gw) == 0
    assert counts(post_twilio(gw, fields, path=path))["applied"] == 1
    a = log_item(gw, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == "delivered"
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]["items"]
    assert sms[0]["deliveryStatus"] == "delivered" and sms[0]["deliveredAt"]


def test_sms_sends_ask_for_callbacks(gw, sim):
    """With OMNIGATE_PUBLIC_URL set, the SMS request carries StatusCallback = public URL +
    /webhooks/twilio."""
    send(gw, ["sms"])
    req = sim.requests("sms")[-1]
    form = dict(urllib.parse.parse_qsl(req["body"]))
    assert form["StatusCallback"] == PUBLIC_URL + "/webhooks/twilio"


def test_meta_verification_handshake(gw):
    """GET /webhooks/meta: subscribe with the right verify token echoes hub.challenge as text;
    a wrong token or mode is 403."""
    q = "hub.mode=subscribe&hub.verify_token=%s&hub.challenge=1158201444" % VERIFY_TOKEN
    r = gw.request("GET", "/webhooks/meta?" + q)
    assert r.status == 200 and r.body == b"1158201444"
    assert r.header("Content-Type").startswith("text/plain")
    assert_error(gw.request("GET", "/webhooks/meta?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=1"),
                 403, "forbidden")
    assert_error(gw.request("GET", "/webhooks/meta?hub.mode=unsubscribe&hub.verify_token=%s&hub.challenge=1"
                            % VERIFY_TOKEN), 403, "forbidden")
    assert_error(gw.request("GET", "/webhooks/meta"), 403, "forbidden")


def test_routes_without_secrets_are_404(make_gateway, sim):
    """A provider route whose secret is not configured answers 404, as if it did not exist."""
    srv = tenant_gateway(make_gateway, sim)
    body = meta_body([])
    assert_error(post_meta(srv, body), 404, "not_found")
    assert_error(post_waha(srv, waha_body("x", 1, 1)), 404, "not_found")
    assert_error(post_twilio(srv, twilio_fields("SMx", "sent")), 404, "not_found")
    assert_error(srv.request("GET", "/webhooks/meta?hub.mode=subscribe"), 404, "not_found")


# ---- mapping and rules ---------------------------------------------------------------------------

META_MAP = [("sent", "sent"), ("delivered", "delivered"), ("read", "read"), ("played", "read"),
            ("failed", "failed")]


@pytest.mark.parametrize("status,expected", META_MAP)
def test_meta_mapping(gw, status, expected):
    """Every Meta status of API.md §10 maps to its deliveryStatus; the message follows."""
    d = send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    code = 131000 if status == "failed" else None
    assert counts(post_meta(gw, meta_body([meta_status(wamid, status, 1700000000, code)])))["applied"] == 1
    item = log_item(gw, d["reference"])
    assert item["attempts"][0]["deliveryStatus"] == expected
    assert item["status"] == {"sent": "sent", "delivered": "delivered", "read": "read",
                              "failed": "undelivered"}[expected]


@pytest.mark.parametrize("ack,expected", [(1, "sent"), (2, "delivered"), (3, "read"), (4, "read"),
                                          (-1, "failed"), (0, None)])
def test_waha_mapping(gw, ack, expected):
    """WAHA acks: SERVER sent, DEVICE delivered, READ/PLAYED read, ERROR failed; PENDING changes
    nothing."""
    d = send(gw, ["whatsapp_qr"])
    mid = d["attempts"][0]["providerMessageId"]
    c = counts(post_waha(gw, waha_body(mid, ack, 1700000000000)))
    assert c["applied"] == (0 if expected is None else 1)
    a = log_item(gw, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == (expected or "sent")


@pytest.mark.parametrize("status,expected", [("sent", "sent"), ("delivered", "delivered"), ("read", "read"),
                                             ("failed", "failed"), ("undelivered", "undelivered"),
                                             ("queued", None), ("sending", None), ("accepted", None)])
def test_twilio_mapping(gw, status, expected):
    """Twilio: sent, delivered, read, failed, undelivered map; queued/sending/accepted change
    nothing."""
    d = send(gw, ["sms"])
    sid = d["attempts"][0]["providerMessageId"]
    code = 30005 if status in ("failed", "undelivered") else None
    c = counts(post_twilio(gw, twilio_fields(sid, status, code)))
    assert c["applied"] == (0 if expected is None else 1)
    assert log_item(gw, d["reference"])["attempts"][0]["deliveryStatus"] == (expected or "sent")


@pytest.mark.parametrize("channel,code,error", [("whatsapp_meta", 131026, "not_on_whatsapp"),
                                                ("whatsapp_meta", 131047, "outside_window"),
                                                ("whatsapp_meta", 131050, "recipient_opted_out"),
                                                ("whatsapp_meta", 131000, "provider_error"),
                                                ("sms", 21610, "recipient_opted_out"),
                                                ("sms", 30003, "carrier_rejected"),
                                                ("sms", 30008, "carrier_rejected"),
                                                ("sms", 30010, "provider_error")])
def test_delivery_error_codes(gw, channel, code, error):
    """A failure carries deliveryError {code, providerCode}: the codes of API.md §10."""
    d = send(gw, [channel])
    pid = d["attempts"][0]["providerMessageId"]
    if channel == "sms":
        assert counts(post_twilio(gw, twilio_fields(pid, "undelivered", code)))["applied"] == 1
    else:
        assert counts(post_meta(gw, meta_body([meta_status(pid, "failed", 1700000000, code)])))["applied"] == 1
    a = log_item(gw, d["reference"])["attempts"][0]
    assert a["deliveryError"]["code"] == error and a["deliveryError"]["providerCode"] == str(code)
    assert a["statusHistory"][-1]["providerCode"] == str(code)


def test_out_of_order_and_duplicates(gw):
    """read before delivered ends read, with deliveredAt the delivered time; a late failed after
    read is kept in the history but changes nothing; a repeat is a duplicate and changes nothing."""
    d = send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "read", 1700000300)])))["applied"] == 1
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "delivered", 1700000200)])))["applied"] == 1
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "sent", 1700000100)])))["applied"] == 1
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "failed", 1700000400, 131000)])))["applied"] == 1
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "read", 1700000300)] * 2))) == \
        {"applied": 0, "duplicate": 2, "unknown": 0}
    item = log_item(gw, d["reference"])
    a = item["attempts"][0]
    assert a["deliveryStatus"] == "read" and item["status"] == "read"
    assert a["deliveredAt"] == "2023-11-14T22:16:40.000Z" and a["readAt"] == "2023-11-14T22:18:20.000Z"
    assert a["deliveryError"] is None
    assert [h["status"] for h in a["statusHistory"]] == ["sent", "delivered", "read", "failed"]


def test_thousand_statuses_in_one_post(gw):
    """1,000 statuses in one POST (Meta's maximum) are recorded in one write: all applied, one
    transaction, the answer after COMMIT."""
    tid = gw.tenant["id"]
    db(gw, "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status) "
           "SELECT '%s', 'kf_BULK' || lpad(i::text, 4, '0'), '+6281234567890', 'x', 'fallback', "
           "'{whatsapp_meta}', 'sent' FROM generate_series(1, 1000) i" % tid)
    db(gw, "INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, latency_ms, "
           "attempted_at, delivery_status) SELECT '%s', 'kf_BULK' || lpad(i::text, 4, '0'), 0, 'whatsapp_meta', "
           "'sent', 'wamid.BULK' || i, 5, now(), 'sent' FROM generate_series(1, 1000) i" % tid)
    body = meta_body([meta_status("wamid.BULK%d" % i, "delivered", 1700000000 + i) for i in range(1, 1001)])
    t0 = time.monotonic()
    c = counts(post_meta(gw, body))
    elapsed = time.monotonic() - t0
    assert c == {"applied": 1000, "duplicate": 0, "unknown": 0}
    assert db(gw, "SELECT count(*) FROM attempts WHERE delivery_status = 'delivered'") == [("1000",)]
    assert db(gw, "SELECT count(*) FROM messages WHERE status = 'delivered'") == [("1000",)]
    assert elapsed < 10, elapsed


def test_unknown_message_id_is_kept_and_counted(gw):
    """A status whose message id no attempt has is answered 200, kept unmatched and counted."""
    c = counts(post_meta(gw, meta_body([meta_status("wamid.NOT_OURS", "delivered", 1700000000)])))
    assert c == {"applied": 0, "duplicate": 0, "unknown": 1}
    assert db(gw, "SELECT matched FROM delivery_statuses WHERE provider_message_id = 'wamid.NOT_OURS'") == [("f",)]
    text = gw.request("GET", "/metrics").body.decode()
    assert 'omnigate_status_callbacks_total{provider="meta",outcome="unknown_message"} 1' in text
    assert wait_for(lambda: 'omnigate_statuses_waiting 1' in gw.request("GET", "/metrics").body.decode(), 5)


def test_status_racing_its_attempt_is_adopted_by_the_sweep(gw):
    """A status committed while its attempt's insert was in flight (neither saw the other) is
    adopted within about a second by the sweep."""
    c = counts(post_meta(gw, meta_body([meta_status("wamid.RACE", "read", 1700000000)])))
    assert c["unknown"] == 1
    tid = gw.tenant["id"]
    # The attempt as the completion write would have inserted it without seeing the status.
    db(gw, "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status) "
           "VALUES ('%s', 'kf_RACE', '+6281234567890', 'x', 'fallback', '{whatsapp_meta}', 'sent')" % tid)
    db(gw, "INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, latency_ms, "
           "attempted_at, delivery_status) VALUES ('%s', 'kf_RACE', 0, 'whatsapp_meta', 'sent', 'wamid.RACE', 5, "
           "now(), 'sent')" % tid)
    assert wait_for(lambda: db(gw, "SELECT delivery_status FROM attempts WHERE reference = 'kf_RACE'")
                    == [("read",)], 5)
    assert db(gw, "SELECT status FROM messages WHERE reference = 'kf_RACE'") == [("read",)]


def test_unmatched_statuses_are_pruned_after_seven_days(gw):
    """An unmatched status older than 7 days is deleted by the sweep; a younger one and a
    matched old one are kept."""
    post_meta(gw, meta_body([meta_status("wamid.OLD", "read", 1), meta_status("wamid.YOUNG", "read", 1)]))
    db(gw, "UPDATE delivery_statuses SET received_at = now() - interval '8 days' "
           "WHERE provider_message_id = 'wamid.OLD'")
    d = send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    post_meta(gw, meta_body([meta_status(wamid, "read", 1)]))
    db(gw, "UPDATE delivery_statuses SET received_at = now() - interval '8 days' "
           "WHERE provider_message_id = '%s'" % wamid)
    assert wait_for(lambda: db(gw, "SELECT count(*) FROM delivery_statuses WHERE provider_message_id = 'wamid.OLD'")
                    == [("0",)], 5)
    assert db(gw, "SELECT provider_message_id FROM delivery_statuses ORDER BY 1") == sorted(
        [(wamid,), ("wamid.YOUNG",)])


def test_status_of_one_tenant_never_shows_on_another(gw):
    """Statuses are matched by provider message id: tenant A's status shows on A's message only;
    tenant B's logs hold nothing of it."""
    b = new_tenant(gw, settings=SETTINGS_ALL, name="other")
    btoken = new_token(gw, b["id"])["token"]
    da = send(gw, ["whatsapp_meta"])
    db_ = send(gw, ["whatsapp_meta"], token=btoken)
    wamid = da["attempts"][0]["providerMessageId"]
    assert counts(post_meta(gw, meta_body([meta_status(wamid, "read", 1700000000)])))["applied"] == 1
    assert log_item(gw, da["reference"])["attempts"][0]["deliveryStatus"] == "read"
    assert log_item(gw, da["reference"], token=btoken) is None
    assert log_item(gw, db_["reference"], token=btoken)["attempts"][0]["deliveryStatus"] == "sent"


def test_status_filters_accept_delivery_values(gw):
    """The logs' status filter accepts delivered, read and undelivered."""
    d = send(gw, ["whatsapp_meta"])
    send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    post_meta(gw, meta_body([meta_status(wamid, "delivered", 1700000000)]))
    items = assert_ok(call(gw, "GET", "/api/omni/logs?status=delivered", token=gw.token))["data"]["items"]
    assert [i["reference"] for i in items] == [d["reference"]]
    for s in ("read", "undelivered"):
        assert assert_ok(call(gw, "GET", "/api/omni/logs?status=" + s, token=gw.token))["data"]["items"] == []


# ---- bad bodies -----------------------------------------------------------------------------------

BAD_META = {
    "not_json": b"{not json",
    "not_object": b"[1,2]",
    "no_entry": b'{"object":"whatsapp_business_account"}',
    "entry_not_array": b'{"entry":{}}',
    "change_without_field": b'{"entry":[{"changes":[{"value":{}}]}]}',
    "status_without_id": meta_body([{"status": "read", "timestamp": "1700000000"}]),
    "status_id_number": meta_body([{"id": 5, "status": "read", "timestamp": "1700000000"}]),
    "timestamp_not_digits": meta_body([{"id": "wamid.X", "status": "read", "timestamp": "yesterday"}]),
    "errors_not_array": meta_body([{"id": "wamid.X", "status": "failed", "timestamp": "1", "errors": {}}]),
    "id_too_long": meta_body([{"id": "w" * 200, "status": "read", "timestamp": "1"}]),
}


@pytest.mark.parametrize("body", list(BAD_META.values()), ids=list(BAD_META.keys()))
def test_bad_meta_bodies_are_400_and_record_nothing(gw, body):
    """A body that does not parse or has a missing or mistyped field is 400, and nothing is
    recorded, not even the good statuses beside the bad one."""
    if body.startswith(b"{\"object\"") and b"statuses" in body:
        doc = json.loads(body)
        doc["entry"][0]["changes"][0]["value"]["statuses"].insert(0, meta_status("wamid.GOOD", "read", 1))
        body = json.dumps(doc).encode()
    r = post_meta(gw, body)
    assert r.status == 400 and r.json()["error"]["code"] in ("invalid_json", "invalid_payload")
    assert statuses_count(gw) == 0
    assert gw.request("GET", "/healthz").status == 200


def test_bad_waha_and_twilio_bodies(gw):
    """WAHA and Twilio bodies of the wrong shape are 400; other WAHA events are acknowledged."""
    for body in (b"nope", b'{"event":5}', b'{"event":"message.ack","payload":{"id":"x"}}',
                 b'{"event":"message.ack","payload":{"id":7,"ack":1}}'):
        r = post_waha(gw, body)
        assert r.status == 400, body
    # session.status (API.md §23): without its session, 400; a status no version of this gateway
    # knows, acknowledged and kept nowhere; other events, acknowledged.
    assert_error(post_waha(gw, b'{"event":"session.status","payload":{"status":"WORKING"}}'), 400,
                 "invalid_payload")
    assert counts(post_waha(gw, b'{"event":"session.status","session":"default","payload":{"status":"NEW"}}'))[
        "unknown"] == 1
    assert counts(post_waha(gw, b'{"event":"state.change","session":"default","payload":{}}'))["applied"] == 0
    r = post_twilio(gw, [("MessageStatus", "delivered")])
    assert_error(r, 400, "invalid_payload")
    body = b"MessageSid=%ZZ&MessageStatus=sent"
    r = gw.request("POST", "/webhooks/twilio", headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                                         ("X-Twilio-Signature", "x")], body=body)
    assert r.status == 401  # a form that does not decode cannot be verified
    assert statuses_count(gw) == 0


def test_webhook_body_limit(gw):
    """The webhook routes take bodies up to 4 MiB (a 3 MB Meta batch passes); 5 MiB is 413. The
    API routes keep their 64 KiB limit."""
    big = meta_body([meta_status("wamid.PAD%06d" % i, "sent", 1700000000) for i in range(30000)])
    assert 3_000_000 < len(big) < 4 * 1024 * 1024
    c = counts(post_meta(gw, big))
    assert c["unknown"] == 30000
    huge = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    assert post_meta(gw, huge).status == 413
    r = call(gw, "POST", "/api/omni/send", token=gw.token, body=b'{"text":"' + b"x" * 70000 + b'"}')
    assert r.status == 413


def test_kill_between_receipt_and_commit(gw):
    """kill -9 of the gateway while a status batch waits for its COMMIT: the provider never got
    its 200, so it retries; the retry to the restarted gateway is applied exactly once, whether
    or not the orphaned transaction committed (PostgreSQL runs a pipeline it has received in
    full even after its client died)."""
    d = send(gw, ["whatsapp_meta"])
    wamid = d["attempts"][0]["providerMessageId"]
    # Hold the attempt's row lock so the batch stops before COMMIT.
    holder = subprocess.Popen(["psql", gw.db_url, "-Xq", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    holder.stdin.write("BEGIN;\nSELECT 1 FROM attempts WHERE provider_message_id = '%s' FOR UPDATE;\n"
                       "\\echo locked\n" % wamid)
    holder.stdin.flush()
    assert wait_for(lambda: holder.stdout.readline().strip() == "locked", 10)
    body = meta_body([meta_status(wamid, "delivered", 1700000000)])
    conn = gw.conn()
    conn.send(b"POST /webhooks/meta HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"X-Hub-Signature-256: " + meta_sig(body).encode() + b"\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    lock_waits = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    assert wait_for(lambda: db(gw, lock_waits) == [("1",)], 5)
    gw.kill()
    conn.close()
    holder.stdin.write("ROLLBACK;\n\\q\n")
    holder.stdin.flush()
    holder.wait(timeout=10)
    assert wait_for(lambda: db(gw, lock_waits) == [("0",)], 5)
    gw.start()
    assert wait_for(lambda: gw.request("GET", "/readyz").status == 200, 10)
    first = counts(post_meta(gw, body))
    assert first["applied"] + first["duplicate"] == 1 and first["unknown"] == 0
    assert counts(post_meta(gw, body)) == {"applied": 0, "duplicate": 1, "unknown": 0}
    assert db(gw, "SELECT count(*) FROM delivery_statuses WHERE provider_message_id = '%s'" % wamid) == [("1",)]
    assert log_item(gw, d["reference"])["attempts"][0]["deliveryStatus"] == "delivered"


# ---- end to end with the simulator's own callbacks ------------------------------------------------

from gwlib import add_tenant, linked_gateway  # noqa: E402


@pytest.fixture
def linked(make_server, fresh_db, tmp_path):
    """A gateway and a simulator that calls it back, both with the same secrets: the providers'
    statuses arrive as they would in production. .sim is the simulator."""
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path))
    yield srv
    srv.sim.stop()


def cb_to(script, qr=0, meta=0, sms=0):
    """A simulator recipient: behaviour digits per channel, then the callback script digit."""
    return "+1999%d%d%d%d000" % (qr, meta, sms, script)


def attempt_when(gw, reference, pred, timeout=10):
    """The first attempt of `reference` once pred(attempt) holds (None if it never does)."""
    box = []

    def check():
        item = log_item(gw, reference)
        if item and pred(item["attempts"][0]):
            box.append(item)
            return True
        return False
    return box[0] if wait_for(check, timeout) else None


@pytest.mark.parametrize("channel", ["whatsapp_qr", "whatsapp_meta", "sms"])
def test_sim_delivered_then_read(linked, channel):
    """The simulator reports sent, delivered, read by signed callbacks: the attempt and the
    message end read, with the history in order."""
    d = send(linked, [channel], to=cb_to(1))
    item = attempt_when(linked, d["reference"], lambda a: a["deliveryStatus"] == "read")
    assert item is not None, log_item(linked, d["reference"])
    a = item["attempts"][0]
    assert [h["status"] for h in a["statusHistory"]] == ["sent", "delivered", "read"]
    assert a["deliveredAt"] and a["readAt"] and item["status"] == "read"


@pytest.mark.parametrize("channel,digit,status,error", [
    ("whatsapp_meta", 2, "failed", "not_on_whatsapp"),
    ("whatsapp_meta", 3, "failed", "outside_window"),
    ("whatsapp_qr", 2, "failed", "provider_error"),
    ("sms", 4, "undelivered", "carrier_rejected"),
    ("sms", 2, "failed", "carrier_rejected"),
])
def test_sim_failures(linked, channel, digit, status, error):
    """Scripted failures after acceptance end the attempt failed/undelivered with the mapped
    deliveryError, and the message undelivered."""
    d = send(linked, [channel], to=cb_to(digit))
    item = attempt_when(linked, d["reference"], lambda a: a["deliveryStatus"] == status)
    assert item is not None, log_item(linked, d["reference"])
    assert item["attempts"][0]["deliveryError"]["code"] == error
    assert item["status"] == "undelivered"


@pytest.mark.parametrize("channel", ["whatsapp_qr", "whatsapp_meta", "sms"])
def test_sim_callback_before_the_answer(linked, channel):
    """The provider calls back before the send is answered (so before the attempt is recorded):
    the status is kept and applied by the completion write; the answer's own log shows it."""
    d = send(linked, [channel], to=cb_to(5))
    a = log_item(linked, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == "delivered", a
    assert [h["status"] for h in a["statusHistory"]] == ["sent", "delivered"]


def test_sim_duplicate_and_read_first(linked):
    """The same status twice changes nothing the second time; read before delivered ends read."""
    d1 = send(linked, ["whatsapp_meta"], to=cb_to(6))
    d2 = send(linked, ["whatsapp_meta"], to=cb_to(7))
    assert attempt_when(linked, d1["reference"], lambda a: len(a["statusHistory"]) == 2) is not None
    assert wait_for(lambda: 'omnigate_status_callbacks_total{provider="meta",outcome="duplicate"} 1'
                    in linked.request("GET", "/metrics").body.decode(), 10)
    assert log_item(linked, d1["reference"])["attempts"][0]["deliveryStatus"] == "delivered"
    item = attempt_when(linked, d2["reference"], lambda a: len(a["statusHistory"]) == 3)
    assert item is not None
    assert item["attempts"][0]["deliveryStatus"] == "read" and item["attempts"][0]["deliveredAt"]


def test_sim_no_callback_stays_sent(linked):
    """Without callbacks (script 0) an accepted attempt stays 'sent' and the simulator sent none."""
    d = send(linked, ["whatsapp_meta"], to=cb_to(0))
    d8 = send(linked, ["whatsapp_meta"], to=cb_to(8))
    assert attempt_when(linked, d8["reference"], lambda a: len(a["statusHistory"]) == 1) is not None
    a = log_item(linked, d["reference"])["attempts"][0]
    assert a["deliveryStatus"] == "sent" and a["statusHistory"] == []
