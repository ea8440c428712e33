"""API.md §23 "Own provider accounts" end to end: a tenant's own Twilio account
(channels.sms.account) and WAHA server (channels.whatsapp_qr.server) replace the configured ones
for its sends, their secrets are write-only and sealed at rest, and the status and inbound
webhooks are verified with the account they name (Twilio: AccountSid; WAHA: the session), on the
real binary, a real PostgreSQL and two provider simulators: the configured one, and a second one
standing in for the tenant's own account and server."""

import base64
import copy
import json
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import (META_SECRET, SETTINGS_ALL, SIM_QR_KEY, SIM_SMS_SID, SIM_SMS_TOKEN, WAHA_SECRET, WA_FROM, Sim,
                   admin, call, gateway_env, linked_gateway, migrate, new_tenant, new_token, provider_env,
                   query_url)
from test_webhooks_in import twilio_sig, waha_sig

OWN_SID = "AC" + "feedface" * 4
OWN_TOKEN = "own-twilio-auth-token-0123456789"
OWN_QR_KEY = "own-waha-api-key-0123456789"
OWN_HOOK = "own-waha-webhook-secret-0123456789"
OTHER_SECRET = "another-e2e-secret-9876543210"
SMS_A = "+15550002221"  # tenant A's inbound SMS number
SMS_B = "+15550002222"  # tenant B's
TO_A = "+6281234500001"
TO_B = "+6281234500002"
CALLBACKS = "+19990001000"  # ok on every channel, then sent, delivered, read (test/sim/README.md)


def own_settings(base_url):
    s = copy.deepcopy(SETTINGS_ALL)
    s["channels"]["sms"]["account"] = {"accountSid": OWN_SID, "authToken": OWN_TOKEN, "baseUrl": base_url}
    s["channels"]["sms"]["inboundNumbers"] = [SMS_A]
    s["channels"]["whatsapp_qr"]["server"] = {"baseUrl": base_url, "apiKey": OWN_QR_KEY, "webhookSecret": OWN_HOOK}
    return s


def plain_settings():
    s = copy.deepcopy(SETTINGS_ALL)
    s["channels"]["sms"]["inboundNumbers"] = [SMS_B]
    return s


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    """A gateway whose configured providers are a simulator that calls it back, a second
    simulator with its own account, key and webhook secret (.own), tenant A on that one (.a,
    .a_token) and tenant B on the configured one (.b, .b_token), both with the QR session
    "default" of the same number."""
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    srv.own = Sim(str(tmp_path), env={"OMNIGATE_SIM_CALLBACK_URL": "http://127.0.0.1:%d" % srv.port,
                                      "OMNIGATE_SMS_ACCOUNT_SID": OWN_SID, "OMNIGATE_SMS_AUTH_TOKEN": OWN_TOKEN,
                                      "OMNIGATE_QR_API_KEY": OWN_QR_KEY, "OMNIGATE_QR_WEBHOOK_SECRET": OWN_HOOK,
                                      "OMNIGATE_META_APP_SECRET": META_SECRET})
    srv.a = new_tenant(srv, settings=own_settings(srv.own.url), name="own")
    srv.a_token = new_token(srv, srv.a["id"])["token"]
    srv.b = new_tenant(srv, settings=plain_settings(), name="plain")
    srv.b_token = new_token(srv, srv.b["id"])["token"]
    yield srv
    srv.own.stop()
    srv.sim.stop()


def send(gw, token, to, channels):
    return call(gw, "POST", "/api/omni/send", token=token, body={"to": to, "text": "hello", "channels": channels})


def basic(user, password):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def tenant(gw, tid):
    return assert_ok(admin(gw, "GET", "/admin/tenants/" + tid))["data"]


def stored(gw, tid, *path):
    return query_url(gw.db_url, "SELECT settings #>> '{%s}' FROM tenants WHERE id = '%s'" % (",".join(path), tid))[0][0]


def attempts(gw, token, reference):
    items = assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference, token=token))["data"]["items"]
    return items[0]["attempts"] if items else []


def post_twilio(gw, fields, token, path="/webhooks/twilio"):
    body = urllib.parse.urlencode(fields).encode()
    sig = twilio_sig(gw.env["OMNIGATE_PUBLIC_URL"] + path, fields, token=token)
    return gw.request("POST", path, body=body, headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                                        ("X-Twilio-Signature", sig)])


def twilio_status(sid, account, status="delivered"):
    return [("MessageSid", sid), ("SmsSid", sid), ("AccountSid", account), ("MessageStatus", status),
            ("SmsStatus", status), ("To", TO_A), ("From", "ACME"), ("ApiVersion", "2010-04-01")]


_seq = [0]


def twilio_inbound(account, to, text, frm="+6281299990000"):
    _seq[0] += 1
    sid = "SM%032x" % (int(time.time() * 1e6) * 100 + _seq[0])
    return sid, [("SmsMessageSid", sid), ("NumMedia", "0"), ("SmsSid", sid), ("SmsStatus", "received"),
                 ("Body", text), ("To", to), ("NumSegments", "1"), ("MessageSid", sid), ("AccountSid", account),
                 ("From", frm), ("ApiVersion", "2010-04-01")]


def post_waha(gw, body, secret):
    return gw.request("POST", "/webhooks/waha", body=body, headers=[
        ("Content-Type", "application/json"), ("X-Webhook-Hmac", waha_sig(body, secret=secret)),
        ("X-Webhook-Hmac-Algorithm", "sha512")])


def waha_ack(msg_id, ack=2):
    return json.dumps({"id": "evt_%d" % time.time_ns(), "timestamp": int(time.time() * 1000), "event": "message.ack",
                       "session": "default", "payload": {"id": msg_id, "from": WA_FROM + "@c.us", "fromMe": True,
                                                         "ack": ack, "ackName": "DEVICE"}}).encode()


def waha_message(frm, text):
    msg_id = "false_%s@c.us_%020X" % (frm.lstrip("+"), time.time_ns())
    return json.dumps({"id": "evt_%d" % time.time_ns(), "timestamp": int(time.time() * 1000), "event": "message",
                       "session": "default", "me": {"id": WA_FROM + "@c.us", "pushName": "Acme"},
                       "payload": {"id": msg_id, "timestamp": int(time.time()), "from": frm.lstrip("+") + "@c.us",
                                   "fromMe": False, "body": text, "hasMedia": False}}).encode(), msg_id


def inbound_pids(gw, token):
    items = assert_ok(call(gw, "GET", "/api/inbound", token=token))["data"]["items"]
    return [i["providerMessageId"] for i in items]


def statuses_of(gw, pid):
    return [r[0] for r in query_url(gw.db_url, "SELECT status FROM delivery_statuses WHERE provider_message_id = '%s' "
                                               "ORDER BY status" % pid)]


# ---- settings -----------------------------------------------------------------------------------

def test_bad_shapes_refused_naming_the_field(make_gateway):
    """Each bad shape of an own account is 422 naming the field (validation_failed, or
    unknown_field for a member the schema does not know), and nothing is stored."""
    gw = make_gateway()
    t = new_tenant(gw, settings=plain_settings())
    acct = {"accountSid": OWN_SID, "authToken": OWN_TOKEN}
    srv = {"baseUrl": "https://waha.example.com", "apiKey": OWN_QR_KEY, "webhookSecret": OWN_HOOK}
    base = "settings.channels.sms.account"
    qr = "settings.channels.whatsapp_qr.server"
    cases = [
        ({"sms": {"account": "ACx"}}, "validation_failed", base),
        ({"sms": {"account": {}}}, "validation_failed", base + ".accountSid"),
        ({"sms": {"account": dict(acct, accountSid="AC 12")}}, "validation_failed", base + ".accountSid"),
        ({"sms": {"account": dict(acct, accountSid="A" * 65)}}, "validation_failed", base + ".accountSid"),
        ({"sms": {"account": {"accountSid": OWN_SID}}}, "validation_failed", base + ".authToken"),
        ({"sms": {"account": dict(acct, authToken="has space")}}, "validation_failed", base + ".authToken"),
        ({"sms": {"account": dict(acct, authToken="****6789")}}, "validation_failed", base + ".authToken"),
        ({"sms": {"account": dict(acct, authToken="sealed:v1:bm90IGEgc2VhbA")}}, "validation_failed",
         base + ".authToken"),
        ({"sms": {"account": dict(acct, baseUrl="ftp://twilio.example.com")}}, "validation_failed", base + ".baseUrl"),
        ({"sms": {"account": dict(acct, baseUrl="https://u:p@twilio.example.com")}}, "validation_failed",
         base + ".baseUrl"),
        ({"sms": {"account": dict(acct, baseUrl="https://twilio.example.com/x?y=1")}}, "validation_failed",
         base + ".baseUrl"),
        ({"sms": {"account": dict(acct, baseUrl="not a url")}}, "validation_failed", base + ".baseUrl"),
        ({"sms": {"account": dict(acct, baseUrl=8080)}}, "validation_failed", base + ".baseUrl"),
        ({"sms": {"account": dict(acct, region="us1")}}, "unknown_field", base + ".region"),
        ({"whatsapp_qr": {"server": {}}}, "validation_failed", qr + ".baseUrl"),
        ({"whatsapp_qr": {"server": dict(srv, baseUrl="waha.example.com")}}, "validation_failed", qr + ".baseUrl"),
        ({"whatsapp_qr": {"server": {k: v for k, v in srv.items() if k != "apiKey"}}}, "validation_failed",
         qr + ".apiKey"),
        ({"whatsapp_qr": {"server": {k: v for k, v in srv.items() if k != "webhookSecret"}}}, "validation_failed",
         qr + ".webhookSecret"),
        ({"whatsapp_qr": {"server": dict(srv, webhookSecret="")}}, "validation_failed", qr + ".webhookSecret"),
        ({"whatsapp_meta": {"server": srv}}, "unknown_field", "settings.channels.whatsapp_meta.server"),
    ]
    for channels, code, field in cases:
        r = admin(gw, "PATCH", "/admin/tenants/" + t["id"], {"settings": {"channels": channels}})
        assert_error(r, 422, code, field)
    assert tenant(gw, t["id"])["settings"] == t["settings"]
    # The same shapes are accepted whole: an SMS account without baseUrl, a server on https.
    ok = {"sms": {"account": acct}, "whatsapp_qr": {"server": srv}}
    assert_ok(admin(gw, "PATCH", "/admin/tenants/" + t["id"], {"settings": {"channels": ok}}))


def test_secrets_write_only_and_sealed(gw):
    """GET shows authToken, apiKey and webhookSecret masked (the sid and base URLs in clear);
    the row holds them sealed only; sending back what GET showed keeps them; the settings'
    whole text in the database holds none of them."""
    tid = gw.a["id"]
    for shown in (gw.a, tenant(gw, tid)):
        chs = shown["settings"]["channels"]
        assert chs["sms"]["account"] == {"accountSid": OWN_SID, "authToken": "****" + OWN_TOKEN[-4:],
                                         "baseUrl": gw.own.url}
        assert chs["whatsapp_qr"]["server"] == {"baseUrl": gw.own.url, "apiKey": "****" + OWN_QR_KEY[-4:],
                                                "webhookSecret": "****" + OWN_HOOK[-4:]}
    body = admin(gw, "GET", "/admin/tenants/" + tid).body.decode()
    for secret in (OWN_TOKEN, OWN_QR_KEY, OWN_HOOK):
        assert secret not in body

    def assert_sealed():
        for path in (("channels", "sms", "account", "authToken"), ("channels", "whatsapp_qr", "server", "apiKey"),
                     ("channels", "whatsapp_qr", "server", "webhookSecret")):
            assert stored(gw, tid, *path).startswith("sealed:v1:")
        text = query_url(gw.db_url, "SELECT settings::text FROM tenants WHERE id = '%s'" % tid)[0][0]
        for secret in (OWN_TOKEN, OWN_QR_KEY, OWN_HOOK):
            assert secret not in text
        assert stored(gw, tid, "channels", "sms", "account", "accountSid") == OWN_SID

    assert_sealed()
    before = stored(gw, tid, "channels", "sms", "account", "authToken")
    echo = tenant(gw, tid)["settings"]
    assert_ok(admin(gw, "PATCH", "/admin/tenants/" + tid, {"settings": echo}))
    assert_sealed()
    assert stored(gw, tid, "channels", "sms", "account", "authToken") != before  # sealed again, fresh nonce
    # What was kept is the secret itself: the own account still authenticates the sends.
    assert wait_for(lambda: send(gw, gw.a_token, TO_A, ["sms"]).status == 200, 5)
    assert gw.own.requests("sms", TO_A)[-1]["headers"]["authorization"] == basic(OWN_SID, OWN_TOKEN)
    log = gw.stderr()
    for secret in (OWN_TOKEN, OWN_QR_KEY, OWN_HOOK):
        assert secret not in log


# ---- sends --------------------------------------------------------------------------------------

def test_sends_go_to_each_tenants_account(gw):
    """Tenant A's SMS and QR sends reach its own simulator with its account's Basic auth and its
    server's X-Api-Key (not the configured key); tenant B's reach the configured simulator with
    the configured credentials; neither reaches the other's."""
    for ch in ("sms", "whatsapp_qr"):
        a = assert_ok(send(gw, gw.a_token, TO_A, [ch]))["data"]
        assert a["attempts"][0]["status"] == "sent", a
        b = assert_ok(send(gw, gw.b_token, TO_B, [ch]))["data"]
        assert b["attempts"][0]["status"] == "sent", b
    sms = gw.own.requests("sms", TO_A)
    assert len(sms) == 1 and sms[0]["path"] == "/2010-04-01/Accounts/%s/Messages.json" % OWN_SID
    assert sms[0]["headers"]["authorization"] == basic(OWN_SID, OWN_TOKEN)
    assert "StatusCallback=" in sms[0]["body"]  # its statuses come to the gateway too
    qr = gw.own.requests("whatsapp_qr", TO_A)
    assert len(qr) == 1 and qr[0]["headers"]["x-api-key"] == OWN_QR_KEY
    assert json.loads(qr[0]["body"])["session"] == "default"
    sms = gw.sim.requests("sms", TO_B)
    assert len(sms) == 1 and sms[0]["path"] == "/2010-04-01/Accounts/%s/Messages.json" % SIM_SMS_SID
    assert sms[0]["headers"]["authorization"] == basic(SIM_SMS_SID, SIM_SMS_TOKEN)
    assert gw.sim.requests("whatsapp_qr", TO_B)[0]["headers"]["x-api-key"] == SIM_QR_KEY
    assert gw.sim.requests(to=TO_A) == [] and gw.own.requests(to=TO_B) == []
    # An OTP goes out on the tenant's account too.
    assert_ok(call(gw, "POST", "/api/sms/otp/send", token=gw.a_token, body={"to": TO_A}))
    assert len(gw.own.requests("sms", TO_A)) == 2 and gw.sim.requests(to=TO_A) == []


def test_sms_account_without_base_url_uses_the_configured_one(gw):
    """An SMS account without baseUrl is sent to OMNIGATE_SMS_BASE_URL with the account's own
    sid and token: here the configured simulator, which serves another account and refuses it
    (401 code 20003: provider_rejected), so nothing falls back to the configured credentials."""
    assert_ok(admin(gw, "PATCH", "/admin/tenants/" + gw.a["id"],
                    {"settings": {"channels": {"sms": {"account": {"baseUrl": None}}}}}))

    def refused():
        r = send(gw, gw.a_token, TO_A, ["sms"])
        return r if r.status == 502 else None

    r = wait_for(refused, 5)  # the tenant cache takes the change within its TTL
    err = assert_error(r, 502, "delivery_failed")["data"]["attempts"][0]["error"]
    assert err["code"] == "provider_rejected" and err["providerCode"] == "20003" and err["httpStatus"] == 401
    reqs = gw.sim.requests("sms", TO_A)
    assert reqs and all(q["path"] == "/2010-04-01/Accounts/%s/Messages.json" % OWN_SID for q in reqs)
    assert all(q["headers"]["authorization"] == basic(OWN_SID, OWN_TOKEN) for q in reqs)


def test_own_account_failures_leave_the_circuit_closed(gw):
    """Failures of a tenant's own server never count in the channel's circuit breaker (API.md
    §13): after more failed attempts than open it on any worker (20 in a row), each still reaches
    the server and fails provider_error (never provider_unavailable), and tenant B's SMS go out."""
    gw.own.rule("sms", "error")
    for _ in range(45):
        j = assert_error(send(gw, gw.a_token, TO_A, ["sms"]), 502, "delivery_failed")
        assert j["data"]["attempts"][0]["error"]["code"] == "provider_error", j
    assert len(gw.own.requests("sms", TO_A)) == 45
    for line in gw.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith('omnigate_circuit_state{channel="sms"}'):
            assert line.split()[1] == "0", line
    for _ in range(4):
        assert assert_ok(send(gw, gw.b_token, TO_B, ["sms"]))["data"]["attempts"][0]["status"] == "sent"


def test_secret_that_does_not_open_fails_not_configured(gw, make_server):
    """With another OMNIGATE_SECRET the own account's sealed secrets do not open: its SMS and QR
    attempts fail not_configured saying which secret, nothing is sent anywhere (neither to its
    server nor with the configured credentials), and its webhooks are refused."""
    tid = gw.a["id"]
    other = make_server(env=gateway_env(gw.db_url, provider_env(gw.sim, {
        "OMNIGATE_SECRET": OTHER_SECRET, "OMNIGATE_PUBLIC_URL": gw.env["OMNIGATE_PUBLIC_URL"],
        "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET})))
    assert wait_for(lambda: other.request("GET", "/readyz").status == 200, 10)
    tok = new_token(other, tid)["token"]  # API tokens are keyed by OMNIGATE_SECRET too
    for ch, what in (("sms", "authToken does not open"), ("whatsapp_qr", "apiKey does not open")):
        j = assert_error(send(other, tok, TO_A, [ch]), 502, "delivery_failed")
        err = j["data"]["attempts"][0]["error"]
        assert err["code"] == "not_configured" and what in err["message"], err
    assert gw.own.requests(to=TO_A) == [] and gw.sim.requests(to=TO_A) == []
    # The gateway's URL is the public one the signature covers: post as the account would.
    r = post_twilio(other, twilio_status("SM" + "1" * 32, OWN_SID), OWN_TOKEN)
    assert_error(r, 401, "invalid_signature", "X-Twilio-Signature")
    assert_error(post_waha(other, waha_ack("true_x@c.us_1"), OWN_HOOK), 401, "invalid_signature")
    assert any("own provider account secret does not open" in rec.get("msg", "") and rec.get("tenantId") == tid
               for rec in other.log_records())


# ---- webhooks -------------------------------------------------------------------------------------

def test_status_callbacks_from_own_accounts_are_applied(gw):
    """The own simulator's Twilio and WAHA status callbacks (signed with the account's token and
    the server's webhook secret) are accepted and applied: A's attempts reach read, as B's do
    from the configured simulator."""
    refs = []
    for token in (gw.a_token, gw.b_token):
        for ch in ("sms", "whatsapp_qr"):
            refs.append((token, assert_ok(send(gw, token, CALLBACKS, [ch]))["data"]["reference"]))

    def all_read():
        return all(attempts(gw, t, ref) and attempts(gw, t, ref)[0].get("deliveryStatus") == "read" for t, ref in refs)

    assert wait_for(all_read, 15), [attempts(gw, t, ref) for t, ref in refs]
    own_cbs = gw.own.callbacks()
    assert {c["provider"] for c in own_cbs} == {"twilio", "waha"}
    assert all(c["status"] == 200 for c in own_cbs), own_cbs
    assert all(c["status"] == 200 for c in gw.sim.callbacks())


def test_twilio_callback_verified_by_the_account_it_names(gw):
    """A Twilio callback naming tenant A's AccountSid is verified with A's token only: signed
    with the configured token it is refused (401, nothing recorded); an AccountSid that is no
    account here is refused too; the configured AccountSid takes only the configured token."""
    ref = assert_ok(send(gw, gw.a_token, TO_A, ["sms"]))["data"]
    sid = ref["attempts"][0]["providerMessageId"]
    unknown = "AC" + "0" * 32
    for fields, token in ((twilio_status(sid, OWN_SID), SIM_SMS_TOKEN),
                          (twilio_status(sid, unknown), SIM_SMS_TOKEN),
                          (twilio_status(sid, SIM_SMS_SID), OWN_TOKEN),
                          (twilio_status(sid, OWN_SID, "read"), "not-the-token")):
        assert_error(post_twilio(gw, fields, token), 401, "invalid_signature", "X-Twilio-Signature")
    assert statuses_of(gw, sid) == []
    assert assert_ok(post_twilio(gw, twilio_status(sid, OWN_SID), OWN_TOKEN))["data"]["applied"] == 1
    assert assert_ok(post_twilio(gw, twilio_status(sid, SIM_SMS_SID, "read"), SIM_SMS_TOKEN))["data"]["applied"] == 1
    assert statuses_of(gw, sid) == ["delivered", "read"]


def test_waha_event_verified_by_the_sessions_server(gw):
    """A WAHA event for the session "default" is accepted signed with the webhook secret of the
    own server of a tenant with a number on that session, or with the configured secret (the
    configured server has a "default" session too); any other key is refused."""
    a = assert_ok(send(gw, gw.a_token, TO_A, ["whatsapp_qr"]))["data"]["attempts"][0]["providerMessageId"]
    assert_error(post_waha(gw, waha_ack(a), "some-other-secret"), 401, "invalid_signature", "X-Webhook-Hmac")
    assert statuses_of(gw, a) == []
    assert assert_ok(post_waha(gw, waha_ack(a), OWN_HOOK))["data"]["applied"] == 1
    b = assert_ok(send(gw, gw.b_token, TO_B, ["whatsapp_qr"]))["data"]["attempts"][0]["providerMessageId"]
    assert assert_ok(post_waha(gw, waha_ack(b), WAHA_SECRET))["data"]["applied"] == 1
    # A session no tenant's own server has is only the configured server's.
    body = waha_ack(b, 3).replace(b'"default"', b'"elsewhere"')
    assert_error(post_waha(gw, body, OWN_HOOK), 401, "invalid_signature")


def test_inbound_goes_only_to_the_signing_accounts_tenants(gw):
    """An inbound message signed by a tenant's own account goes to that tenant only, and one
    signed by the configured account only to tenants without an own account of that channel:
    A's account cannot post an SMS (a STOP) for B's number, and the session "default" of each
    server reaches its own tenant."""
    # WAHA: the same session and number on both servers.
    body, a_msg = waha_message("+6281277770001", "hi A")
    assert assert_ok(post_waha(gw, body, OWN_HOOK))["data"]["inbound"]["stored"] == 1
    body, b_msg = waha_message("+6281277770002", "hi B")
    assert assert_ok(post_waha(gw, body, WAHA_SECRET))["data"]["inbound"]["stored"] == 1
    assert a_msg in inbound_pids(gw, gw.a_token) and b_msg not in inbound_pids(gw, gw.a_token)
    assert b_msg in inbound_pids(gw, gw.b_token) and a_msg not in inbound_pids(gw, gw.b_token)

    # Twilio: A's account posting to B's number is unrouted, and so is the configured account
    # posting to A's (A's numbers are on its own account); each to its own tenant is stored.
    victim = "+6281288880000"
    forged, fields = twilio_inbound(OWN_SID, SMS_B, "STOP", frm=victim)
    r = post_twilio(gw, fields, OWN_TOKEN, path="/webhooks/twilio/inbound")
    assert r.status == 200 and b"<Response>" in r.body
    stray, fields = twilio_inbound(SIM_SMS_SID, SMS_A, "hello")
    assert post_twilio(gw, fields, SIM_SMS_TOKEN, path="/webhooks/twilio/inbound").status == 200
    assert query_url(gw.db_url, "SELECT count(*) FROM inbound_messages WHERE provider_message_id IN ('%s', '%s')"
                     % (forged, stray))[0][0] == "0"
    rec = assert_ok(call(gw, "GET", "/api/recipients/" + urllib.parse.quote(victim), token=gw.b_token))["data"]
    assert rec["suppressed"] == []
    # The own simulator posts A's inbound SMS signed with A's token: stored for A.
    got = gw.own._call("POST", "/__sim/inbound", {"provider": "twilio", "to": SMS_A, "from": "+6281277770003",
                                                  "text": "hello A"})["data"]
    assert got["status"] == 200, got
    assert got["id"] in inbound_pids(gw, gw.a_token) and got["id"] not in inbound_pids(gw, gw.b_token)
    ok, fields = twilio_inbound(SIM_SMS_SID, SMS_B, "hello B")
    assert post_twilio(gw, fields, SIM_SMS_TOKEN, path="/webhooks/twilio/inbound").status == 200
    assert ok in inbound_pids(gw, gw.b_token)


def test_migrate_seals_clear_own_account_secrets(gw):
    """Own account secrets found in clear in the database (written by hand or by an older
    binary) still verify and send, and `omnigate migrate` seals them in place."""
    tid = gw.a["id"]
    clear = own_settings(gw.own.url)
    query_url(gw.db_url, "UPDATE tenants SET settings = '%s' WHERE id = '%s'" % (json.dumps(clear), tid))
    assert stored(gw, tid, "channels", "sms", "account", "authToken") == OWN_TOKEN
    p = migrate(gw.db_url)
    assert "sealed the provider credentials stored in clear of 1 tenant" in p.stderr
    for path in (("channels", "sms", "account", "authToken"), ("channels", "whatsapp_qr", "server", "apiKey"),
                 ("channels", "whatsapp_qr", "server", "webhookSecret")):
        assert stored(gw, tid, *path).startswith("sealed:v1:")
    assert wait_for(lambda: send(gw, gw.a_token, TO_A, ["whatsapp_qr"]).status == 200, 5)
    assert gw.own.requests("whatsapp_qr", TO_A)[-1]["headers"]["x-api-key"] == OWN_QR_KEY


def test_account_lookup_failure_answers(make_server, fresh_db, tmp_path):
    """A Twilio callback or WAHA event whose account lookup fails is answered as every database
    failure is (500 internal_error, or 503 unavailable so the provider retries), nothing is kept
    of the failed read, and the next request looks the account up again."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=1)
    try:
        for i, (mode, status, code) in enumerate((("error", 500, "internal_error"), ("unavailable", 503, "unavailable"),
                                                  ("lost", 503, "unavailable"))):
            for stmt, post in (("account_twilio", lambda: post_twilio(srv, twilio_status("SM" + "2" * 32, OWN_SID),
                                                                       OWN_TOKEN)),
                               ("account_waha", lambda: post_waha(srv, waha_ack("true_x@c.us_%d" % i), OWN_HOOK))):
                assert_ok(call(srv, "POST", "/__test/fault", body={"point": "db", "statement": stmt, "status": mode,
                                                                  "count": 1}))
                r = post()
                assert assert_ok(call(srv, "GET", "/__test/fault"))["data"]["db"] == 0, (stmt, mode)
                assert_error(r, status, code)
                if status == 503:
                    assert r.header("Retry-After") == "1"
        # Once the database answers, the unknown account is refused as a bad signature, and a
        # tenant created now is found (nothing of the failed reads was cached).
        assert_error(post_twilio(srv, twilio_status("SM" + "2" * 32, OWN_SID), OWN_TOKEN), 401, "invalid_signature")
        new_tenant(srv, settings=own_settings(srv.sim.url), name="late")

        def accepted():  # once the worker's entry of that AccountSid (no tenant) is older than its TTL
            r = post_twilio(srv, twilio_status("SM" + "2" * 32, OWN_SID), OWN_TOKEN)
            return r if r.status == 200 else None

        r = wait_for(accepted, 5)
        assert assert_ok(r)["data"]["unknown"] == 1, r
    finally:
        srv.sim.stop()
