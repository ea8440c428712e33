"""API.md §18, "OTP over WhatsApp": POST /api/sms/otp/send with `channels`, end to end. The
real gateway and PostgreSQL; the simulator stands in for Meta (its template catalogue, and the
checks of a template send against it) and for Twilio. The catalogue is filled the way
production fills it: the simulator's listing, read by the admin sync route. The tests read the
code the way a user would: from the message the simulator received."""

import json
import re
import subprocess
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import (META_TOKEN, WA_FROM, admin, call, magic, new_tenant, new_token, provider_env,  # noqa: F401
                   query_url, sim)

WABA = "102290129340398"
PNID = "109876543210"
SEND = "/api/sms/otp/send"
VERIFY = "/api/sms/otp/verify"

META_NUMBER = {"phoneNumberId": PNID, "accessToken": META_TOKEN, "wabaId": WABA}
SETTINGS = {
    "defaultChannels": ["whatsapp_meta", "sms"],
    "defaultWhatsappFrom": WA_FROM,
    "channels": {
        "whatsapp_meta": {"enabled": True, "numbers": {WA_FROM: META_NUMBER}},
        "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"},
    },
    "otp": {"whatsappTemplate": {"name": "otp_code", "language": "en_US"}},
}

# An authentication template as Meta lists it: one body parameter, a copy-code button.
AUTH = {"name": "otp_code", "language": "en_US", "status": "APPROVED", "category": "AUTHENTICATION",
        "components": [{"type": "BODY", "text": "*{{1}}* is your verification code. For your security, do not "
                                                "share this code."},
                       {"type": "FOOTER", "text": "This code expires in 5 minutes."},
                       {"type": "BUTTONS", "buttons": [{"type": "OTP", "otp_type": "COPY_CODE",
                                                        "text": "Copy code"}]}]}


def settings(**over):
    s = json.loads(json.dumps(SETTINGS))
    s.update(over)
    return s


def load(sim, templates):
    """The simulator's catalogue of WABA (its numbers: PNID) becomes `templates`."""
    sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA, {"phoneNumberIds": [PNID], "templates": templates})


def sync(gw, tenant_id=None):
    path = "/admin/tenants/%s/templates/sync" % (tenant_id or gw.tenant["id"])
    return assert_ok(admin(gw, "POST", path))["data"]["synced"]


@pytest.fixture
def gw(make_gateway, sim):
    """A gateway on a fresh database whose tenant sends OTPs over WhatsApp with otp_code, in its
    catalogue (synced from the simulator)."""
    sim.clear()
    load(sim, [AUTH])
    srv = make_gateway(workers=2, env=provider_env(sim, {"OMNIGATE_ATTEMPT_TIMEOUT_MS": "1000"}))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    srv.sim = sim
    srv.tenant = new_tenant(srv, settings=SETTINGS)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    assert sync(srv) == 1
    return srv


def tenant(gw, s, name):
    """Another tenant of `gw` with settings `s`, and a token for it."""
    t = new_tenant(gw, settings=s, name=name)
    return t, new_token(gw, t["id"])["token"]


def post(gw, path, body, token=None, headers=None):
    return call(gw, "POST", path, token=token or gw.token, body=body, headers=headers)


def number(i):
    return "+62813%07d" % (int(time.time() * 1000) % 10000000 + i)


def meta_bodies(gw, to):
    return [json.loads(r["body"]) for r in gw.sim.requests("whatsapp_meta", to=to) if r["method"] == "POST"]


def whatsapp_code(gw, to):
    """The code of the newest template message Meta received for `to`: its body parameter."""
    return meta_bodies(gw, to)[-1]["template"]["components"][0]["parameters"][0]["text"]


def sms_code(gw, to):
    body = urllib.parse.parse_qs(gw.sim.requests("sms", to=to)[-1]["body"])["Body"][0]
    return re.search(r"(\d{4,10})", body).group(1)


def otp_item(gw, reference, token=None):
    items = assert_ok(call(gw, "GET", "/api/sms/otp/logs?reference=" + reference,
                           token=token or gw.token))["data"]["items"]
    assert len(items) == 1
    return items[0]


def history(item):
    return [(h["event"], h["channel"], (h["error"] or {}).get("code")) for h in item["history"]]


def db(gw, sql):
    return query_url(gw.db_url, sql)


def nothing_written_or_sent(gw, to):
    assert db(gw, "SELECT count(*) FROM otp_requests") == [("0",)]
    assert gw.sim.requests("whatsapp_meta", to=to) == [] and gw.sim.requests("sms", to=to) == []


def message(code):
    """Meta's template message of otp_code carrying `code`, as the gateway must send it."""
    return {"name": "otp_code", "language": {"policy": "deterministic", "code": "en_US"},
            "components": [{"type": "body", "parameters": [{"type": "text", "text": code}]},
                           {"type": "button", "sub_type": "url", "index": "0",
                            "parameters": [{"type": "text", "text": code}]}]}


# ---- delivery ---------------------------------------------------------------------------------

def test_code_goes_in_the_authentication_template(gw):
    """whatsapp_meta first: Meta gets otp_code with the code as the body parameter and as url
    button 0's (the copy-code button); no SMS; the code Meta got verifies; the log says
    whatsapp_meta."""
    to = number(1)
    r = post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]})
    d = assert_ok(r)["data"]
    assert (d["status"], d["channel"], d["length"]) == ("sent", "whatsapp_meta", 6)
    reqs = gw.sim.requests("whatsapp_meta", to=to)
    assert len(reqs) == 1 and reqs[0]["path"].endswith("/%s/messages" % PNID)
    code = whatsapp_code(gw, to)
    assert re.fullmatch(r"[0-9]{6}", code)
    assert meta_bodies(gw, to) == [{"messaging_product": "whatsapp", "recipient_type": "individual",
                                    "to": to[1:], "type": "template", "template": message(code)}]
    assert gw.sim.requests("sms", to=to) == []
    assert code not in r.body.decode()
    v = assert_ok(post(gw, VERIFY, {"reference": d["reference"], "code": code}))["data"]
    assert v == {"reference": d["reference"], "verified": True}
    it = otp_item(gw, d["reference"])
    assert (it["status"], it["channel"]) == ("verified", "whatsapp_meta")
    assert history(it) == [("sent", "whatsapp_meta", None), ("verify_success", None, None)]
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]
    assert sms["items"] == []


def test_meta_failing_falls_back_to_sms_with_the_same_code(gw):
    """Meta fails (a 5xx): the SMS carries the same code, so one OTP has one code whichever
    channel delivered it; the log says sms and lists both attempts in order; the code is in no
    answer, log line or row."""
    to = magic(0, 2, 0, "4401")
    r = post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"], "length": 8})
    d = assert_ok(r)["data"]
    assert (d["status"], d["channel"]) == ("sent", "sms")
    code = sms_code(gw, to)
    assert whatsapp_code(gw, to) == code and len(code) == 8
    assert db(gw, "SELECT count(*) FROM otp_requests WHERE to_number = '%s'" % to) == [("1",)]
    assert_ok(post(gw, VERIFY, {"to": to, "code": code}))
    it = otp_item(gw, d["reference"])
    assert (it["status"], it["channel"]) == ("verified", "sms")
    assert history(it) == [("send_failed", "whatsapp_meta", "provider_error"), ("sent", "sms", None),
                           ("verify_success", None, None)]
    assert it["history"][0]["error"]["providerCode"] == "131000"
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]
    assert [(i["source"], i["status"], i["text"]) for i in sms["items"]] == [
        ("otp", "sent", "Your verification code is ********")]
    assert code not in r.body.decode()
    assert wait_for(lambda: '"route":"/api/sms/otp/verify"' in gw.stderr(), 5)  # the access log is on
    assert code not in gw.stderr()
    dump = subprocess.run(["pg_dump", gw.db_url], capture_output=True, text=True, check=True).stdout
    assert code not in dump


def test_sms_first_then_whatsapp(gw):
    """channels is the fallback order: sms first; when the SMS is refused, Meta delivers the
    code. The SMS log keeps the failed SMS, the history both attempts."""
    to = magic(0, 0, 1, "4402")
    d = assert_ok(post(gw, SEND, {"to": to, "channels": ["sms", "whatsapp_meta"]}))["data"]
    assert d["channel"] == "whatsapp_meta"
    assert sms_code(gw, to) == whatsapp_code(gw, to)
    it = otp_item(gw, d["reference"])
    assert history(it) == [("send_failed", "sms", "provider_rejected"), ("sent", "whatsapp_meta", None)]
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]
    assert [(i["status"], i["error"]["providerCode"]) for i in sms["items"]] == [("failed", "21211")]


def test_whatsapp_alone_failing_is_502_and_counts(gw):
    """channels [whatsapp_meta] and Meta unreachable: 502 delivery_failed, the OTP failed with
    no channel and one send_failed event, no SMS, and the cooldown holds."""
    to = magic(0, 4, 0, "4403")
    j = assert_error(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta"]}), 502, "delivery_failed")
    assert (j["data"]["status"], j["data"]["channel"]) == ("failed", None)
    it = otp_item(gw, j["data"]["reference"])
    assert (it["status"], it["channel"]) == ("failed", None)
    assert history(it) == [("send_failed", "whatsapp_meta", "provider_unreachable")]
    assert gw.sim.requests("sms", to=to) == []
    assert_error(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}), 429, "otp_cooldown")


def test_meta_refusing_the_template_marks_it(gw):
    """The catalogue says APPROVED but Meta has paused the template (132015): SMS delivers, the
    catalogue marks it PAUSED, and the next OTP over WhatsApp is refused before any call."""
    gw.sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % WABA,
                 {"name": "otp_code", "language": "en_US", "event": "PAUSED", "notify": False})
    to = number(2)
    d = assert_ok(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}))["data"]
    assert d["channel"] == "sms"
    assert history(otp_item(gw, d["reference"]))[0] == ("send_failed", "whatsapp_meta", "provider_rejected")
    assert db(gw, "SELECT status FROM wa_templates WHERE name = 'otp_code'") == [("PAUSED",)]
    other = number(3)
    assert_error(post(gw, SEND, {"to": other, "channels": ["whatsapp_meta", "sms"]}), 422,
                 "template_not_approved", "channels")
    assert gw.sim.requests("whatsapp_meta", to=other) == []


def test_number_without_whatsapp_skips_meta(gw):
    """A number remembered as not on WhatsApp (API.md §13): whatsapp_meta is skipped, the SMS
    delivers, only it is in the history; Meta alone is 422 no_channel_available."""
    to, other = number(4), number(5)
    db(gw, "INSERT INTO not_on_whatsapp (number, until) VALUES ('%s', now() + interval '1 hour'), "
           "('%s', now() + interval '1 hour')" % (to, other))
    d = assert_ok(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}))["data"]
    assert d["channel"] == "sms" and gw.sim.requests("whatsapp_meta", to=to) == []
    assert history(otp_item(gw, d["reference"])) == [("sent", "sms", None)]
    assert_error(post(gw, SEND, {"to": other, "channels": ["whatsapp_meta"]}), 422, "no_channel_available",
                 "channels")
    assert db(gw, "SELECT count(*) FROM otp_requests WHERE to_number = '%s'" % other) == [("0",)]


def test_idempotent_repeat_sends_one_whatsapp_message(gw):
    """The same Idempotency-Key and body replay the first answer: one template message, one OTP."""
    to = number(6)
    h = [("Idempotency-Key", "otp-wa-" + to)]
    body = {"to": to, "channels": ["whatsapp_meta", "sms"]}
    a = assert_ok(post(gw, SEND, body, headers=h))
    b = post(gw, SEND, body, headers=h)
    assert assert_ok(b)["data"] == a["data"] and b.header("Idempotency-Replayed") == "true"
    assert len(meta_bodies(gw, to)) == 1


# ---- default and validation -------------------------------------------------------------------

def test_default_channels_are_sms_alone(gw):
    """Without channels an OTP goes by SMS as before, even for a tenant set up for WhatsApp
    (whose defaultChannels do not apply to OTPs); the log says sms."""
    to = number(7)
    d = assert_ok(post(gw, SEND, {"to": to}))["data"]
    assert (d["status"], d["channel"]) == ("sent", "sms")
    assert gw.sim.requests("whatsapp_meta", to=to) == [] and len(gw.sim.requests("sms", to=to)) == 1
    it = otp_item(gw, d["reference"])
    assert it["channel"] == "sms" and history(it) == [("sent", "sms", None)]


@pytest.mark.parametrize("channels", [[], ["whatsapp_qr"], ["sms", "sms"], "sms", [1], None,
                                      ["sms", "whatsapp_meta", "sms"], ["SMS"]])
def test_channels_validation(gw, channels):
    """channels must be a non-empty array of distinct whatsapp_meta and sms: 422
    validation_failed, field channels, nothing written."""
    to = number(8)
    assert_error(post(gw, SEND, {"to": to, "channels": channels}), 422, "validation_failed", "channels")
    nothing_written_or_sent(gw, to)


def test_disabled_channels_are_skipped(gw):
    """A channel the tenant has not enabled is skipped; none left: 422 no_channel_available."""
    s = settings()
    s["channels"]["whatsapp_meta"]["enabled"] = False
    _, tok = tenant(gw, s, "nometa")
    to = number(9)
    d = assert_ok(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}, token=tok))["data"]
    assert d["channel"] == "sms" and gw.sim.requests("whatsapp_meta", to=to) == []
    assert_error(post(gw, SEND, {"to": number(10), "channels": ["whatsapp_meta"]}, token=tok), 422,
                 "no_channel_available", "channels")


def test_missing_whatsapp_template_setting_is_422(gw):
    """A tenant without settings.otp.whatsappTemplate: whatsapp_meta is 422 template_not_found
    (field channels) before anything is written or sent; its SMS OTPs are unchanged."""
    s = settings()
    del s["otp"]
    _, tok = tenant(gw, s, "notemplate")
    to = number(11)
    j = assert_error(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}, token=tok), 422,
                     "template_not_found", "channels")
    assert "settings.otp.whatsappTemplate" in j["message"]
    nothing_written_or_sent(gw, to)
    assert_ok(post(gw, SEND, {"to": to}, token=tok))


@pytest.mark.parametrize("catalogue,code", [
    ([dict(AUTH, status="PAUSED")], "template_not_approved"),
    ([dict(AUTH, status="PENDING")], "template_not_approved"),
    ([dict(AUTH, name="other_code")], "template_not_found"),
    ([dict(AUTH, language="pt_BR")], "template_not_found"),
    ([dict(AUTH, components=[{"type": "BODY", "text": "Hi {{1}}, your code is {{2}}"}])],
     "template_parameters_mismatch"),
    ([dict(AUTH, components=[{"type": "BODY", "text": "Your code is ready"}])], "template_parameters_mismatch"),
])
def test_template_checks_before_anything_is_written(gw, catalogue, code):
    """otp.whatsappTemplate must be in the catalogue of the Meta number's WABA, APPROVED, with
    exactly one body parameter: else 422 (field channels) with nothing written or sent. A worker
    may hold the entry it read before the sync for up to OG_TPL_CACHE_MS (catalogue.h: a change
    reaches every worker within 2 s), so the refusal is awaited on other numbers first."""
    load(gw.sim, catalogue)
    assert sync(gw) == 1
    probes = iter(range(100, 200))
    assert wait_for(lambda: post(gw, SEND, {"to": number(next(probes)), "channels": ["whatsapp_meta", "sms"]}).status
                    == 422, 3)
    to = number(12)
    j = assert_error(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}), 422, code, "channels")
    assert "settings.otp.whatsappTemplate" in j["message"]
    nothing_written_or_sent(gw, to)


def test_template_without_a_copy_code_button(gw):
    """A one-parameter template without buttons: Meta gets the body parameter alone."""
    load(gw.sim, [dict(AUTH, components=[{"type": "BODY", "text": "{{1}} is your code"}])])
    assert sync(gw) == 1
    to = number(13)
    assert_ok(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta"]}))
    code = whatsapp_code(gw, to)
    assert meta_bodies(gw, to)[0]["template"]["components"] == [
        {"type": "body", "parameters": [{"type": "text", "text": code}]}]


@pytest.mark.parametrize("meta,code", [
    ({"numbers": {WA_FROM: {"phoneNumberId": PNID, "accessToken": META_TOKEN}}}, "template_not_found"),
    ({"numbers": {"6281234567899": META_NUMBER}}, "whatsapp_from_not_registered"),
])
def test_the_meta_number_must_be_known(gw, meta, code):
    """whatsapp_meta sends from defaultWhatsappFrom as registered for whatsapp_meta, whose wabaId
    names the catalogue: without a wabaId the template is unknown (template_not_found), an
    unregistered number is whatsapp_from_not_registered; both field channels."""
    s = settings()
    s["channels"]["whatsapp_meta"].update(meta)
    _, tok = tenant(gw, s, "numbers")
    to = number(14)
    assert_error(post(gw, SEND, {"to": to, "channels": ["whatsapp_meta", "sms"]}, token=tok), 422, code,
                 "channels")
    nothing_written_or_sent(gw, to)
