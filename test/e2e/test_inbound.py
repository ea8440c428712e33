"""Issue 33 end to end: inbound messages and consent (API.md §21) through the real gateway, the
real PostgreSQL and the provider simulator. Inbound webhooks are posted here signed with each
provider's algorithm (and by the simulator, test_inbound_from_the_simulator); sends go to the
simulator. A change of consent made on one instance must reach a send on another within 2 s."""

import copy
import json
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import SETTINGS_ALL, WA_FROM, admin, call, cli, linked_gateway, new_tenant, new_token, query_url
from test_webhooks_in import meta_sig, twilio_sig, waha_sig
from test_webhooks_out import WH_ENV, Receiver, verify

META_PNID = SETTINGS_ALL["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["phoneNumberId"]
SMS_IN = "+15550001111"  # the tenant's inbound SMS number
SETTINGS = copy.deepcopy(SETTINGS_ALL)
SETTINGS["channels"]["sms"]["inboundNumbers"] = [SMS_IN]

OPT_OUT = ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"]
OPT_IN = ["START", "YES", "UNSTOP"]


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV)
    srv.tenant = new_tenant(srv, settings=SETTINGS)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    yield srv
    srv.sim.stop()


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.stop()


def db(gw, sql):
    return query_url(gw.db_url, sql)


_seq = [0]


def pid(prefix):
    _seq[0] += 1
    return "%s%d_%d" % (prefix, int(time.time() * 1000), _seq[0])


# ---- the providers' inbound bodies -------------------------------------------------------------

def meta_message(frm, text, msg_id=None, pnid=META_PNID, ts=None, mtype="text"):
    m = {"from": frm.lstrip("+"), "id": msg_id or pid("wamid.in"), "timestamp": str(ts or int(time.time())),
         "type": mtype}
    if mtype == "text":
        m["text"] = {"body": text}
    elif mtype == "button":
        m["button"] = {"text": text, "payload": text}
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp",
                                        "metadata": {"display_phone_number": WA_FROM, "phone_number_id": pnid},
                                        "contacts": [{"profile": {"name": "Ana"}, "wa_id": frm.lstrip("+")}],
                                        "messages": [m]}}]}]}).encode(), m["id"]


def post_meta(gw, body, sig=None):
    return gw.request("POST", "/webhooks/meta", body=body, headers=[
        ("Content-Type", "application/json"), ("X-Hub-Signature-256", sig or meta_sig(body))])


def waha_message(frm, text, session="default", me=WA_FROM, msg_id=None, from_me=False, chat=None):
    msg_id = msg_id or pid("false_%s@c.us_" % frm.lstrip("+"))
    env = {"id": pid("evt_"), "timestamp": int(time.time() * 1000), "event": "message", "session": session,
           "payload": {"id": msg_id, "timestamp": int(time.time()), "from": chat or frm.lstrip("+") + "@c.us",
                       "fromMe": from_me, "body": text, "hasMedia": False}}
    if me is not None:
        env["me"] = {"id": me + "@c.us", "pushName": "Acme"}
    return json.dumps(env).encode(), msg_id


def post_waha(gw, body, sig=None):
    return gw.request("POST", "/webhooks/waha", body=body, headers=[
        ("Content-Type", "application/json"), ("X-Webhook-Hmac", sig or waha_sig(body)),
        ("X-Webhook-Hmac-Algorithm", "sha512")])


def post_twilio_in(gw, frm, text, to=SMS_IN, sid=None, sig=None):
    sid = sid or "SM" + ("%032x" % (int(time.time() * 1e6) + _seq[0]))[-32:]
    _seq[0] += 1
    fields = [("ToCountry", "US"), ("SmsMessageSid", sid), ("NumMedia", "0"), ("SmsSid", sid),
              ("SmsStatus", "received"), ("Body", text), ("To", to), ("NumSegments", "1"), ("MessageSid", sid),
              ("AccountSid", "AC0123456789abcdef0123456789abcdef"), ("From", frm), ("ApiVersion", "2010-04-01")]
    body = urllib.parse.urlencode(fields).encode()
    url = gw.env["OMNIGATE_PUBLIC_URL"] + "/webhooks/twilio/inbound"
    return gw.request("POST", "/webhooks/twilio/inbound", body=body, headers=[
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("X-Twilio-Signature", sig or twilio_sig(url, fields))]), sid


def inbound(gw, query="", token=None):
    return assert_ok(call(gw, "GET", "/api/inbound" + query, token=token or gw.token))["data"]


def recipient(gw, to, token=None):
    return assert_ok(call(gw, "GET", "/api/recipients/" + urllib.parse.quote(to), token=token or gw.token))["data"]


def suppressed(gw, to, token=None):
    return recipient(gw, to, token)["suppressed"]


def send(gw, to, channels, token=None, text="hello"):
    return call(gw, "POST", "/api/omni/send", token=token or gw.token,
                body={"to": to, "text": text, "channels": channels})


def sms_count(gw, to):
    return int(db(gw, "SELECT count(*) FROM sms_records WHERE to_number = '%s'" % to)[0][0])


def refused_everywhere(gw, to, channels, token=None):
    """Waits until sends to `to` on `channels` are refused 422 on every worker (each worker's
    copy reads changes every second): a run of 16 refusals in a row, each on a connection of its
    own, which the kernel spreads over the workers (a run of 4 all reached one worker one time in
    eight with two, and the next request found the other's copy not read yet)."""
    return wait_for(lambda: all(send(gw, to, channels, token).status == 422 for _ in range(16)), 5)


def metric(gw, name, **labels):
    want = name + ("{" + ",".join('%s="%s"' % kv for kv in sorted(labels.items())) + "}" if labels else "")
    for line in gw.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    return 0.0


# ---- inbound -----------------------------------------------------------------------------------

def test_meta_inbound_stored_once_opens_window_and_event(gw, rx):
    """A Meta message is stored once (a provider's retry is a duplicate), opens the recipient's
    window with that phone number id until receivedAt + 24 h, shows in GET /api/inbound and the
    recipient's page, and reaches the tenant's webhook as message.received, signed."""
    hook = assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"],
                           {"url": rx.url(), "events": ["message.received"]}))["data"]
    frm = "+4915112345601"
    ts = int(time.time()) - 60
    body, mid = meta_message(frm, "Hello there", ts=ts)
    j = assert_ok(post_meta(gw, body))
    assert j["data"]["inbound"] == {"stored": 1, "duplicate": 0, "unrouted": 0, "ignored": 0}, j
    j = assert_ok(post_meta(gw, body))
    assert j["data"]["inbound"] == {"stored": 0, "duplicate": 1, "unrouted": 0, "ignored": 0}, j
    assert db(gw, "SELECT count(*) FROM inbound_messages WHERE provider_message_id = '%s'" % mid) == [("1",)]
    items = inbound(gw, "?from=" + urllib.parse.quote(frm))["items"]
    assert len(items) == 1, items
    it = items[0]
    assert it["id"].startswith("in_") and it["channel"] == "whatsapp_meta" and it["from"] == frm, it
    assert it["to"] == "+" + WA_FROM and it["type"] == "text" and it["text"] == "Hello there", it
    assert it["providerMessageId"] == mid and it["phoneNumberId"] == META_PNID and it["session"] is None, it
    assert it["receivedAt"] == time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts)), it
    r = recipient(gw, frm)
    assert r["whatsappWindows"] == [{"phoneNumberId": META_PNID, "openUntil": time.strftime(
        "%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts + 86400))}], r
    assert r["lastInboundAt"] == it["receivedAt"] and r["suppressed"] == [], r
    assert wait_for(lambda: len(rx.of_type("message.received")) == 1, 10)
    req = rx.of_type("message.received")[0]
    assert verify(hook["secret"], req)
    assert json.loads(req["body"])["data"] == it
    assert db(gw, "SELECT count(*) FROM webhook_deliveries WHERE type = 'message.received'") == [("1",)]


def test_window_lets_free_text_through(gw):
    """outsideWindow skip: free text on whatsapp_meta alone is refused while the recipient's
    window is not known to be open; once the recipient writes, the next send goes on Meta (the
    window reaches every worker within 2 s), with no template."""
    settings = copy.deepcopy(SETTINGS)
    settings["channels"]["whatsapp_meta"]["outsideWindow"] = "skip"
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], {"settings": settings}))
    frm = "+4915112345602"
    assert refused_everywhere(gw, frm, ["whatsapp_meta"])  # the settings reach every worker
    assert_error(send(gw, frm, ["whatsapp_meta"]), 422, "no_channel_available")
    assert_ok(post_meta(gw, meta_message(frm, "hi")[0]))
    t0 = time.monotonic()
    assert wait_for(lambda: all(send(gw, frm, ["whatsapp_meta"]).status == 200 for _ in range(4)), 5)
    assert time.monotonic() - t0 < 2.5
    j = assert_ok(send(gw, frm, ["whatsapp_meta"]))
    assert j["data"]["winningChannel"] == "whatsapp_meta" and j["data"]["skipped"] == [], j
    body = json.loads(gw.sim.requests(channel="whatsapp_meta", to=frm)[-1]["body"])
    assert body["type"] == "text" and body["text"]["body"] == "hello", body


def test_waha_inbound_routed_by_session_and_number(gw):
    """WAHA's message event goes to the tenant whose QR number has that session (and, when the
    event says, that number); another session or number is unrouted; a group's message and our
    own echo are ignored; each outcome is counted."""
    frm = "+4915112345603"
    body, mid = waha_message(frm, "hola")
    j = assert_ok(post_waha(gw, body))
    assert j["data"]["inbound"] == {"stored": 1, "duplicate": 0, "unrouted": 0, "ignored": 0}, j
    it = inbound(gw, "?channel=whatsapp_qr")["items"][0]
    assert it["providerMessageId"] == mid and it["from"] == frm and it["to"] == "+" + WA_FROM, it
    assert it["session"] == "default" and it["phoneNumberId"] is None and it["text"] == "hola", it
    assert recipient(gw, frm)["whatsappWindows"] == []  # a QR session has no Meta window
    for b in (waha_message(frm, "x", session="other")[0], waha_message(frm, "x", me="6289999999999")[0]):
        j = assert_ok(post_waha(gw, b))
        assert j["data"]["inbound"]["unrouted"] == 1, j
    for b in (waha_message(frm, "x", chat="120363021234567890@g.us")[0], waha_message(frm, "x", from_me=True)[0]):
        j = assert_ok(post_waha(gw, b))
        assert j["data"]["inbound"] == {"stored": 0, "duplicate": 0, "unrouted": 0, "ignored": 1}, j
    assert len(inbound(gw)["items"]) == 1
    assert metric(gw, "omnigate_inbound_messages_total", channel="whatsapp_qr", outcome="stored") == 1
    assert metric(gw, "omnigate_inbound_messages_total", channel="whatsapp_qr", outcome="unrouted") == 2
    assert metric(gw, "omnigate_inbound_messages_total", channel="whatsapp_qr", outcome="ignored") == 2


def test_signature_failures_store_nothing(gw):
    """A wrong or missing signature is 401 on every inbound route, and nothing is stored."""
    frm = "+4915112345604"
    body = meta_message(frm, "STOP")[0]
    assert_error(post_meta(gw, body, sig="sha256=" + "0" * 64), 401, "invalid_signature")
    body = waha_message(frm, "STOP")[0]
    assert_error(post_waha(gw, body, sig="ab" * 64), 401, "invalid_signature")
    r, _ = post_twilio_in(gw, frm, "STOP", sig="bm9wZQ==")
    assert_error(r, 401, "invalid_signature")
    r = gw.request("POST", "/webhooks/twilio/inbound", body=b"From=%2B1&To=%2B1",
                   headers=[("Content-Type", "application/x-www-form-urlencoded")])
    assert_error(r, 401, "invalid_signature")
    assert db(gw, "SELECT count(*) FROM inbound_messages") == [("0",)]
    assert db(gw, "SELECT count(*) FROM suppressions") == [("0",)]
    assert metric(gw, "omnigate_inbound_messages_total", channel="sms", outcome="bad_signature") == 2


def test_unrouted_and_bad_bodies(gw):
    """A message to a number no tenant has is counted and dropped with 200 (a provider would
    retry an error forever); a message without its sender is 400 and nothing is stored."""
    body = meta_message("+4915112345605", "hi", pnid="999000999")[0]
    j = assert_ok(post_meta(gw, body))
    assert j["data"]["inbound"]["unrouted"] == 1, j
    r, _ = post_twilio_in(gw, "+4915112345605", "hi", to="+15559999999")
    assert r.status == 200 and r.header("Content-Type").startswith("text/xml"), r
    assert b"<Response></Response>" in r.body, r
    assert metric(gw, "omnigate_inbound_messages_total", channel="whatsapp_meta", outcome="unrouted") == 1
    assert metric(gw, "omnigate_inbound_messages_total", channel="sms", outcome="unrouted") == 1
    bad = json.dumps({"entry": [{"changes": [{"field": "messages", "value": {
        "metadata": {"phone_number_id": META_PNID}, "messages": [{"id": "w", "timestamp": "1", "type": "text"}]}}]}]})
    assert_error(post_meta(gw, bad.encode()), 400, "invalid_payload")
    assert db(gw, "SELECT count(*) FROM inbound_messages") == [("0",)]


# ---- consent -----------------------------------------------------------------------------------

def test_stop_blocks_the_next_sms_and_start_lifts_it(gw, rx):
    """STOP by SMS (Twilio's inbound webhook, TwiML answer) opts the number out of sms only:
    the next SMS is 422 recipient_opted_out with nothing written, a unified send skips sms with
    that reason; START opts it back in. Each change is an event with its source."""
    hook = assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"],
                           {"url": rx.url(), "events": ["recipient.opted_out", "recipient.opted_in"]}))["data"]
    frm = "+4915112345606"
    r, sid = post_twilio_in(gw, frm, "  Stop\n")
    assert r.status == 200 and r.body.endswith(b"<Response></Response>"), r
    assert suppressed(gw, frm) == ["sms"]
    item = assert_ok(call(gw, "GET", "/api/suppressions?to=" + urllib.parse.quote(frm), token=gw.token))
    assert item["data"]["items"] == [{"to": frm, "channel": "sms", "source": "keyword", "reason": "STOP",
                                      "createdAt": item["data"]["items"][0]["createdAt"]}], item
    # Until every worker's copy has read the change (about a second) an SMS may still go: the
    # probe sends until one is refused, and from then on nothing is written.
    assert wait_for(lambda: call(gw, "POST", "/api/sms/send", token=gw.token,
                                 body={"to": frm, "text": "probe"}).status == 422, 3)
    assert wait_for(lambda: all(call(gw, "POST", "/api/sms/send", token=gw.token,
                                     body={"to": frm, "text": "probe"}).status == 422 for _ in range(4)), 3)
    written = sms_count(gw, frm)
    assert_error(call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": frm, "text": "after"}),
                 422, "recipient_opted_out", "to")
    assert_error(send(gw, frm, ["sms"]), 422, "recipient_opted_out", "to")
    assert_error(call(gw, "POST", "/api/sms/otp/send", token=gw.token, body={"to": frm}),
                 422, "recipient_opted_out", "to")
    j = assert_ok(send(gw, frm, ["whatsapp_meta", "sms"]))
    assert j["data"]["skipped"] == [{"channel": "sms", "reason": "recipient_opted_out"}], j
    assert sms_count(gw, frm) == written
    post_twilio_in(gw, frm, "start")
    assert suppressed(gw, frm) == []
    assert wait_for(lambda: call(gw, "POST", "/api/sms/send", token=gw.token,
                                 body={"to": frm, "text": "again"}).status == 200, 3)
    assert wait_for(lambda: len(rx.got()) == 2, 10)
    events = [json.loads(q["body"]) for q in rx.got()]
    assert all(verify(hook["secret"], q) for q in rx.got())
    assert [(e["type"], e["data"]) for e in sorted(events, key=lambda e: e["type"], reverse=True)] == [
        ("recipient.opted_out", {"to": frm, "channel": "sms", "source": "keyword", "reason": "STOP"}),
        ("recipient.opted_in", {"to": frm, "channel": "sms", "source": "keyword", "reason": "START"})], events


@pytest.mark.parametrize("word", OPT_OUT + OPT_IN + ["stop please", "STOP!"])
def test_each_keyword(gw, word):
    """Every opt-out word opts out of the kind it came on (STOPALL: every kind), every opt-in
    word back in; a text that is not exactly one of them (trimmed, any case) changes nothing."""
    frm = "+49151123457%02d" % (OPT_OUT + OPT_IN + ["stop please", "STOP!"]).index(word)
    if word in OPT_IN:
        assert_ok(call(gw, "PUT", "/api/suppressions/" + urllib.parse.quote(frm), token=gw.token,
                       body={"channels": ["sms", "whatsapp"]}))
    assert_ok(post_meta(gw, meta_message(frm, " %s " % word.lower())[0]))
    got = suppressed(gw, frm)
    if word == "STOPALL":
        assert got == ["sms", "whatsapp"]
    elif word in OPT_OUT:
        assert got == ["whatsapp"]
    elif word in OPT_IN:
        assert got == ["sms"]
    else:
        assert got == []


def test_stopall_by_sms_and_buttons(gw):
    """STOPALL by SMS opts out of WhatsApp too; a button whose text is STOP is no keyword (a
    text message is)."""
    frm = "+4915112345690"
    assert_ok(post_meta(gw, meta_message(frm, "STOP", mtype="button")[0]))
    assert suppressed(gw, frm) == []
    post_twilio_in(gw, frm, "STOPALL")
    assert suppressed(gw, frm) == ["sms", "whatsapp"]
    assert refused_everywhere(gw, frm, ["whatsapp_qr", "whatsapp_meta", "sms"])
    written = db(gw, "SELECT count(*) FROM messages WHERE to_number = '%s'" % frm)
    assert_error(send(gw, frm, ["whatsapp_qr", "whatsapp_meta", "sms"]), 422, "recipient_opted_out", "to")
    assert db(gw, "SELECT count(*) FROM messages WHERE to_number = '%s'" % frm) == written


def test_provider_opt_out_answers(gw, rx):
    """Twilio 21610 and Meta 131050 opt the number out of that kind (source provider, reason
    the code): the next send skips the channel without calling it."""
    assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"],
                    {"url": rx.url(), "events": ["recipient.opted_out"]}))
    frm = "+4915112345691"
    gw.sim.rule("sms", "opted_out", to=frm)
    gw.sim.rule("whatsapp_meta", "opted_out", to=frm)
    call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": frm, "text": "x"})
    assert wait_for(lambda: suppressed(gw, frm) == ["sms"], 5)
    send(gw, frm, ["whatsapp_meta", "whatsapp_qr"])
    assert wait_for(lambda: suppressed(gw, frm) == ["sms", "whatsapp"], 5)
    items = assert_ok(call(gw, "GET", "/api/suppressions?to=" + urllib.parse.quote(frm), token=gw.token))
    assert [(i["channel"], i["source"], i["reason"]) for i in items["data"]["items"]] == [
        ("sms", "provider", "21610"), ("whatsapp", "provider", "131050")], items
    assert refused_everywhere(gw, frm, ["whatsapp_meta", "sms"])
    calls = len(gw.sim.requests(to=frm))
    assert_error(send(gw, frm, ["whatsapp_meta", "sms"]), 422, "recipient_opted_out", "to")
    assert len(gw.sim.requests(to=frm)) == calls
    assert wait_for(lambda: len(rx.of_type("recipient.opted_out")) == 2, 10)
    assert sorted(json.loads(q["body"])["data"]["source"] for q in rx.got()) == ["provider", "provider"]


def test_suppressions_api(gw):
    """PUT opts out of the kinds given (api source, reason kept), again changes nothing, GET lists
    them paged and filtered, DELETE opts back in (one kind or all); bad input is 422 and a token
    without the send scope is 403."""
    to = "+4915112345692"
    path = "/api/suppressions/" + urllib.parse.quote(to)
    j = assert_ok(call(gw, "PUT", path, token=gw.token, body={"channels": ["whatsapp", "sms"], "reason": "asked"}))
    assert j["data"] == {"to": to, "suppressed": ["sms", "whatsapp"], "changed": ["sms", "whatsapp"]}, j
    j = assert_ok(call(gw, "PUT", path.replace("%2B", "+"), token=gw.token, body={"channels": ["sms"]}))
    assert j["data"] == {"to": to, "suppressed": ["sms", "whatsapp"], "changed": []}, j
    # The gauge of suppressions in force, sampled every 10 s by worker 0.
    assert wait_for(lambda: metric(gw, "omnigate_suppressions", channel="whatsapp", source="api") == 1, 15)
    assert metric(gw, "omnigate_suppressions", channel="sms", source="api") == 1
    page = assert_ok(call(gw, "GET", "/api/suppressions?limit=1", token=gw.token))["data"]
    assert len(page["items"]) == 1 and page["nextCursor"] == to + "/sms", page
    page2 = assert_ok(call(gw, "GET", "/api/suppressions?limit=1&cursor=" + urllib.parse.quote(page["nextCursor"]),
                           token=gw.token))["data"]
    assert [(i["to"], i["channel"], i["source"], i["reason"]) for i in page2["items"]] == [
        (to, "whatsapp", "api", "asked")] and page2["nextCursor"] is None, page2
    only = assert_ok(call(gw, "GET", "/api/suppressions?channel=whatsapp", token=gw.token))["data"]["items"]
    assert [i["channel"] for i in only] == ["whatsapp"]
    j = assert_ok(call(gw, "DELETE", path + "?channel=whatsapp", token=gw.token))
    assert j["data"] == {"to": to, "suppressed": ["sms"], "changed": ["whatsapp"]}, j
    j = assert_ok(call(gw, "DELETE", path, token=gw.token))
    assert j["data"] == {"to": to, "suppressed": [], "changed": ["sms"]}, j
    assert_error(call(gw, "PUT", "/api/suppressions/12345", token=gw.token, body={"channels": ["sms"]}),
                 422, "validation_failed", "to")
    for body, field in (({"channels": []}, "channels"), ({"channels": ["email"]}, "channels"),
                        ({"channels": ["sms", "sms"]}, "channels"), ({"channels": ["sms"], "reason": ""}, "reason"),
                        ({}, "channels")):
        assert_error(call(gw, "PUT", path, token=gw.token, body=body), 422, "validation_failed", field)
    assert_error(call(gw, "PUT", path, token=gw.token, body={"channels": ["sms"], "why": 1}), 422, "unknown_field")
    assert_error(call(gw, "DELETE", path + "?channel=email", token=gw.token), 422, "validation_failed", "channel")
    assert_error(call(gw, "DELETE", path + "?kind=sms", token=gw.token), 422, "validation_failed", "kind")
    assert_error(call(gw, "GET", "/api/suppressions?cursor=nope", token=gw.token), 422, "validation_failed", "cursor")
    logs_only = new_token(gw, gw.tenant["id"], scopes=["logs"])["token"]
    assert_error(call(gw, "PUT", path, token=logs_only, body={"channels": ["sms"]}), 403, "insufficient_scope")
    assert recipient(gw, to, token=logs_only)["suppressed"] == []
    send_only = new_token(gw, gw.tenant["id"], scopes=["send"])["token"]
    assert_error(call(gw, "GET", "/api/recipients/" + urllib.parse.quote(to), token=send_only),
                 403, "insufficient_scope")


def test_consent_is_per_tenant_and_admin_mirrors(gw):
    """A suppression of one tenant does not touch another's sends or pages; the admin mirrors
    show a tenant's inbound messages, suppressions and recipient."""
    other = new_tenant(gw, settings=SETTINGS_ALL, name="other")
    other_token = new_token(gw, other["id"])["token"]
    to = "+4915112345693"
    assert_ok(call(gw, "PUT", "/api/suppressions/" + urllib.parse.quote(to), token=gw.token,
                   body={"channels": ["sms"]}))
    assert_ok(post_meta(gw, meta_message(to, "hi")[0]))
    assert refused_everywhere(gw, to, ["sms"])
    assert_ok(send(gw, to, ["sms"], token=other_token))
    assert recipient(gw, to, token=other_token)["suppressed"] == []
    assert inbound(gw, token=other_token)["items"] == []
    assert assert_ok(call(gw, "GET", "/api/suppressions", token=other_token))["data"]["items"] == []
    tid = gw.tenant["id"]
    assert [i["from"] for i in assert_ok(admin(gw, "GET", "/admin/tenants/%s/inbound" % tid))["data"]["items"]] == [to]
    sup = assert_ok(admin(gw, "GET", "/admin/tenants/%s/suppressions" % tid))["data"]["items"]
    assert [(i["to"], i["channel"]) for i in sup] == [(to, "sms")]
    rec = assert_ok(admin(gw, "GET", "/admin/tenants/%s/recipients/%s" % (tid, urllib.parse.quote(to))))["data"]
    assert rec["suppressed"] == ["sms"] and rec["lastInboundAt"] is not None, rec
    nobody = "00000000-0000-4000-8000-000000000000"
    assert_error(admin(gw, "GET", "/admin/tenants/%s/inbound" % nobody), 404, "not_found")
    assert_error(admin(gw, "GET", "/admin/tenants/%s/recipients/%s" % (nobody, urllib.parse.quote(to))),
                 404, "not_found")


def test_inbound_list_filters_and_pages(gw):
    """GET /api/inbound: newest first, filtered by from, channel, since and until, paged with
    limit and cursor; bad parameters are 422."""
    a, b = "+4915112345694", "+4915112345695"
    old = int(time.time()) - 3600
    assert_ok(post_meta(gw, meta_message(a, "one", ts=old)[0]))
    post_twilio_in(gw, b, "two")
    assert_ok(post_waha(gw, waha_message(a, "three")[0]))
    items = inbound(gw)["items"]
    assert [i["text"] for i in items] == ["three", "two", "one"], items
    assert [i["text"] for i in inbound(gw, "?from=" + urllib.parse.quote(a))["items"]] == ["three", "one"]
    assert [i["text"] for i in inbound(gw, "?channel=sms")["items"]] == ["two"]
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old + 60))
    assert [i["text"] for i in inbound(gw, "?since=" + since)["items"]] == ["three", "two"]
    assert [i["text"] for i in inbound(gw, "?until=" + since)["items"]] == ["one"]
    p1 = inbound(gw, "?limit=2")
    assert len(p1["items"]) == 2 and p1["nextCursor"], p1
    p2 = inbound(gw, "?limit=2&cursor=" + p1["nextCursor"])
    assert [i["text"] for i in p2["items"]] == ["one"] and p2["nextCursor"] is None, p2
    for q, field in (("?from=123", "from"), ("?channel=email", "channel"), ("?since=yesterday", "since"),
                     ("?cursor=abc", "cursor"), ("?limit=0", "limit"), ("?to=x", "to")):
        assert_error(call(gw, "GET", "/api/inbound" + q, token=gw.token), 422, "validation_failed", field)


def test_recipient_shows_not_on_whatsapp(gw):
    to = "+4915112345696"
    db(gw, "INSERT INTO not_on_whatsapp (number, until) VALUES ('%s', '2099-01-01T00:00:00Z')" % to)
    r = recipient(gw, to)
    assert r == {"to": to, "suppressed": [], "suppressions": [], "notOnWhatsappUntil": "2099-01-01T00:00:00.000Z",
                 "whatsappWindows": [], "lastInboundAt": None}, r
    assert_error(call(gw, "GET", "/api/recipients/4915112345696", token=gw.token), 422, "validation_failed", "to")


def test_batch_and_queued_sends_skip_suppressed(gw):
    """A batch's message to an opted-out number is rejected with recipient_opted_out by index;
    a queued send skips the suppressed kind as a sync one does."""
    to = "+4915112345697"
    assert_ok(call(gw, "PUT", "/api/suppressions/" + urllib.parse.quote(to), token=gw.token,
                   body={"channels": ["sms", "whatsapp"]}))
    ok_to = "+4915112345698"
    assert refused_everywhere(gw, to, ["sms"])
    j = call(gw, "POST", "/api/omni/batches", token=gw.token, body={
        "defaults": {"channels": ["sms"], "text": "hi"}, "messages": [{"to": to}, {"to": ok_to}]}).json()
    assert j["data"]["accepted"] == 1, j
    assert [(r["index"], r["error"]["code"]) for r in j["data"]["rejected"]] == [(0, "recipient_opted_out")], j
    assert_error(call(gw, "POST", "/api/omni/send", token=gw.token,
                      body={"to": to, "text": "x", "channels": ["sms"], "queue": True}), 422, "recipient_opted_out")


def test_other_instance_sees_a_change_within_2s(gw, make_server, tmp_path):
    """Two instances on one database: an opt-out made through one is honoured by the other's
    next sends within 2 s (its copy reads changes every second), and so is the opt-in."""
    other = linked_gateway(make_server, gw.db_url, tmp_path, env=WH_ENV, sim=gw.sim)
    to = "+4915112345699"
    assert_ok(send(other, to, ["sms"], token=gw.token))
    path = "/api/suppressions/" + urllib.parse.quote(to)
    assert_ok(call(gw, "PUT", path, token=gw.token, body={"channels": ["sms"]}))
    t0 = time.monotonic()
    assert wait_for(lambda: send(other, to, ["sms"], token=gw.token).status == 422, 5)
    assert time.monotonic() - t0 < 2.0
    assert_ok(call(gw, "DELETE", path, token=gw.token))
    t0 = time.monotonic()
    assert wait_for(lambda: send(other, to, ["sms"], token=gw.token).status == 200, 5)
    assert time.monotonic() - t0 < 2.0


def test_send_waits_for_the_first_read_of_the_copy(gw, make_server, tmp_path):
    """A worker whose consent copy is not read yet is not ready, and holds a send that reaches it
    until the read ends instead of refusing it: with several workers, /readyz may be answered by
    one already ready (this refusal was a 503 to sends just after a start). The held sends are
    checked against the copy once it is read. Here the copy's first read of a new instance is
    held back by a row security policy on suppressions that waits for an advisory lock this test
    holds (the database is the test's own)."""
    to = "+4915112345698"
    assert_ok(call(gw, "PUT", "/api/suppressions/" + urllib.parse.quote(to), token=gw.token,
                   body={"channels": ["sms"]}))
    db(gw, "CREATE FUNCTION test_gate() RETURNS boolean LANGUAGE sql VOLATILE "
           "AS 'SELECT true FROM pg_advisory_xact_lock_shared(4242)';"
           "CREATE POLICY test_gate ON suppressions USING (test_gate()) WITH CHECK (true);"
           "ALTER TABLE suppressions ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY")
    holder = subprocess.Popen(["psql", gw.db_url, "-XAtq", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    answers, threads = {}, []
    try:
        holder.stdin.write("SELECT 'locked' FROM pg_advisory_lock(4242);\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "locked"
        other = linked_gateway(make_server, gw.db_url, tmp_path, workers=1, env=WH_ENV, sim=gw.sim, ready=False)
        assert wait_for(lambda: b"consent not loaded yet" in other.request("GET", "/readyz").body, 10)
        threads = [threading.Thread(target=lambda k=k, t=t: answers.__setitem__(k, send(other, t, ["sms"],
                                                                                         gw.token)))
                   for k, t in (("free", "+4915112345697"), ("out", to))]
        for t in threads:
            t.start()
        assert wait_for(lambda: metric(other, "omnigate_http_connections_open") >= 3, 5)
        assert all(t.is_alive() for t in threads)
        assert b"consent not loaded yet" in other.request("GET", "/readyz").body
    finally:
        holder.stdin.close()  # the session ends: its lock goes
        holder.wait(10)
    for t in threads:
        t.join(15)
    assert_ok(answers["free"])
    assert_error(answers["out"], 422, "recipient_opted_out")
    assert other.request("GET", "/readyz").status == 200


def test_queued_message_checked_again_when_released(gw):
    """A message accepted before its recipient opted out of sms (here: scheduled 2 s ahead on
    sms then whatsapp_meta) is checked again when released: sms fails recipient_opted_out
    without a call to the provider and the fallback goes on to whatsapp_meta."""
    to = "+4915112345680"
    send_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    j = assert_ok(call(gw, "POST", "/api/omni/send", token=gw.token,
                       body={"to": to, "text": "later", "channels": ["sms", "whatsapp_meta"], "sendAt": send_at}),
                  202)
    ref = j["data"]["reference"]
    assert_ok(call(gw, "PUT", "/api/suppressions/" + urllib.parse.quote(to), token=gw.token,
                   body={"channels": ["sms"]}))

    def final():
        m = assert_ok(call(gw, "GET", "/api/omni/messages/" + ref, token=gw.token))["data"]
        return m if m["status"] not in ("queued", "scheduled") else None
    m = wait_for(final, 15)
    assert m and m["winningChannel"] == "whatsapp_meta", m
    sms = [a for a in m["attempts"] if a["channel"] == "sms"]
    assert len(sms) == 1 and sms[0]["status"] == "failed", m
    assert sms[0]["error"]["code"] == "recipient_opted_out", m
    assert gw.sim.requests(channel="sms", to=to) == []


def test_prune_deletes_old_inbound_messages(gw):
    """omnigate prune --before deletes the inbound messages stored before its date, not the
    recent ones."""
    assert_ok(post_meta(gw, meta_message("+4915112345681", "old")[0]))
    assert_ok(post_meta(gw, meta_message("+4915112345682", "new")[0]))
    db(gw, "UPDATE inbound_messages SET created_at = now() - interval '40 days' WHERE body = 'old'")
    cutoff = db(gw, "SELECT to_char(now() - interval '30 days', 'YYYY-MM-DD')")[0][0]
    p = cli(["prune", "--before", cutoff, "--batch", "3"], gw.db_url)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rowsDeleted"] == 1
    assert [i["text"] for i in inbound(gw)["items"]] == ["new"]


def sim_inbound(gw, body):
    """POST /__sim/inbound: the simulator posts the provider's signed inbound webhook to the
    gateway and answers with what the gateway answered (test/sim/README.md)."""
    return gw.sim._call("POST", "/__sim/inbound", body)["data"]


def test_inbound_from_the_simulator(gw):
    """Each provider's inbound webhook as the simulator sends it (Meta's messages field with a
    text, a button and an image, WAHA's message event, Twilio's incoming SMS) is stored with its
    text and type; the simulator's duplicate is counted once."""
    frm = "+4915112345683"
    got = [sim_inbound(gw, {"provider": "meta", "phoneNumberId": META_PNID, "from": frm, "text": "hi meta"}),
           sim_inbound(gw, {"provider": "meta", "phoneNumberId": META_PNID, "from": frm, "text": "Yes",
                            "type": "button"}),
           sim_inbound(gw, {"provider": "meta", "phoneNumberId": META_PNID, "from": frm, "type": "image"}),
           sim_inbound(gw, {"provider": "waha", "session": "default", "me": WA_FROM, "from": frm, "text": "hi qr"}),
           sim_inbound(gw, {"provider": "twilio", "to": SMS_IN, "from": frm, "text": "hi sms"})]
    assert [g["status"] for g in got] == [200] * 5, got
    assert got[4]["body"].endswith("<Response></Response>"), got
    again = sim_inbound(gw, {"provider": "twilio", "to": SMS_IN, "from": frm, "text": "hi sms", "id": got[4]["id"]})
    assert again["status"] == 200
    items = inbound(gw, "?from=" + urllib.parse.quote(frm))["items"]
    assert [(i["channel"], i["type"], i["text"], i["providerMessageId"]) for i in items] == [
        ("sms", "text", "hi sms", got[4]["id"]), ("whatsapp_qr", "text", "hi qr", got[3]["id"]),
        ("whatsapp_meta", "image", None, got[2]["id"]), ("whatsapp_meta", "button", "Yes", got[1]["id"]),
        ("whatsapp_meta", "text", "hi meta", got[0]["id"])], items
    bad = sim_inbound(gw, {"provider": "meta", "phoneNumberId": META_PNID, "from": frm, "text": "x",
                           "signature": "bad"})
    assert bad["status"] == 401
