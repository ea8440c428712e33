"""Issue 30, API.md §18: WhatsApp template sends end to end. The real gateway and PostgreSQL,
the simulator standing in for Meta (its catalogue, its template checks, its signed template
status webhook) and for SMS. The catalogue is filled the way production fills it: the admin
sync route reads the simulator's message_templates listing."""

import hashlib
import hmac
import json
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, have_test_routes, wait_for
from gwlib import META_SECRET, META_TOKEN, WA_FROM, admin, call, linked_gateway, new_tenant, new_token, query_url

WABA = "102290129340398"
PNID = "109876543210"
TO = "+6281234500077"

SETTINGS = {
    "defaultChannels": ["whatsapp_meta", "sms"],
    "defaultWhatsappFrom": WA_FROM,
    "channels": {
        "whatsapp_meta": {"enabled": True, "numbers": {WA_FROM: {"phoneNumberId": PNID, "accessToken": META_TOKEN,
                                                                 "wabaId": WABA}}},
        "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"},
    },
}

ORDER = {"name": "order_update", "language": "en_US", "status": "APPROVED", "category": "UTILITY",
         "parameter_format": "POSITIONAL",
         "components": [{"type": "BODY", "text": "Hi {{1}}, your order {{2}} ships today"},
                        {"type": "BUTTONS", "buttons": [{"type": "URL", "text": "Track",
                                                         "url": "https://acme.example/t/{{1}}"}]}]}
NAMED = {"name": "welcome", "language": "en", "status": "APPROVED", "category": "MARKETING",
         "parameter_format": "NAMED", "components": [{"type": "BODY", "text": "Welcome {{first_name}}!"}]}
RELAY = {"name": "relay", "language": "en", "status": "APPROVED", "category": "UTILITY",
         "components": [{"type": "BODY", "text": "Message from ACME: {{1}}"}]}
PAUSED = {"name": "old_promo", "language": "en", "status": "PAUSED", "category": "MARKETING",
          "components": [{"type": "BODY", "text": "Sale"}]}


def load(sim, templates):
    sim._call("PUT", "/__sim/meta/wabas/%s/templates" % WABA, {"phoneNumberIds": [PNID], "templates": templates})


def sync(gw):
    return assert_ok(admin(gw, "POST", "/admin/tenants/%s/templates/sync" % gw.tenant["id"]))["data"]["synced"]


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=1)
    load(srv.sim, [ORDER, NAMED, RELAY, PAUSED])
    srv.tenant = new_tenant(srv, settings=SETTINGS)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    assert sync(srv) == 4
    yield srv
    srv.sim.stop()


def send(gw, body, headers=None):
    return call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=headers)


def item(gw, reference):
    return assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference, token=gw.token))["data"]["items"][0]


def db(gw, sql):
    return query_url(gw.db_url, sql)


def order_template(**over):
    t = {"name": "order_update", "language": "en_US", "parameters": ["Ana", "A-17"],
         "buttons": [{"index": 0, "subType": "url", "parameter": "A17"}]}
    t.update(over)
    return t


def sms_texts(gw, to=TO):
    return [urllib.parse.parse_qs(r["body"])["Body"][0] for r in gw.sim.requests("sms", to=to)]


def meta_bodies(gw, to=TO):
    return [json.loads(r["body"]) for r in gw.sim.requests("whatsapp_meta", to=to) if r["method"] == "POST"]


def test_template_send_on_meta(gw):
    """Meta gets its TemplateMessage (name, language with policy, body and URL-button
    parameters); the log shows the template, the rendered text and the attempt's content."""
    d = assert_ok(send(gw, {"to": TO, "template": order_template(), "channels": ["whatsapp_meta", "sms"]}))["data"]
    assert d["winningChannel"] == "whatsapp_meta"
    assert meta_bodies(gw) == [{
        "messaging_product": "whatsapp", "recipient_type": "individual", "to": TO[1:], "type": "template",
        "template": {"name": "order_update", "language": {"policy": "deterministic", "code": "en_US"},
                     "components": [{"type": "body", "parameters": [{"type": "text", "text": "Ana"},
                                                                    {"type": "text", "text": "A-17"}]},
                                    {"type": "button", "sub_type": "url", "index": "0",
                                     "parameters": [{"type": "text", "text": "A17"}]}]}}]
    it = item(gw, d["reference"])
    assert it["template"] == {"name": "order_update", "language": "en_US"}
    assert it["text"] == "Hi Ana, your order A-17 ships today"
    assert [a["content"] for a in it["attempts"]] == ["template"]


def test_named_template(gw):
    """A named template's parameters go to Meta with parameter_name."""
    d = assert_ok(send(gw, {"to": TO, "channels": ["whatsapp_meta"],
                            "template": {"name": "welcome", "language": "en", "parameters": {"first_name": "Budi"}}}))
    body = meta_bodies(gw)[-1]
    assert body["template"]["components"] == [
        {"type": "body", "parameters": [{"type": "text", "parameter_name": "first_name", "text": "Budi"}]}]
    assert item(gw, d["data"]["reference"])["text"] == "Welcome Budi!"


def test_template_send_falls_back_to_sms_with_the_rendered_text(gw):
    """Meta fails (a 5xx): the SMS carries the template's body with its parameters; its attempt
    is a text; the SMS log has the same text."""
    gw.sim.rule("whatsapp_meta", "error", to=TO)
    d = assert_ok(send(gw, {"to": TO, "template": order_template()}))["data"]
    assert d["winningChannel"] == "sms" and [a["channel"] for a in d["attempts"]] == ["whatsapp_meta", "sms"]
    assert sms_texts(gw) == ["Hi Ana, your order A-17 ships today"]
    it = item(gw, d["reference"])
    assert [a["content"] for a in it["attempts"]] == ["template", "text"]
    logs = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]["items"]
    assert logs[0]["text"] == "Hi Ana, your order A-17 ships today"


def test_text_given_goes_to_the_other_channels(gw):
    """With both, Meta gets the template and SMS gets `text`."""
    gw.sim.rule("whatsapp_meta", "error", to=TO)
    assert_ok(send(gw, {"to": TO, "template": order_template(), "text": "Order A-17 ships"}))
    assert sms_texts(gw) == ["Order A-17 ships"]


@pytest.mark.parametrize("tpl,code,field", [
    ({"name": "nope", "language": "en_US"}, "template_not_found", "template.name"),
    ({"name": "order_update", "language": "pt_BR", "parameters": ["a", "b"]}, "template_not_found", "template.name"),
    ({"name": "old_promo", "language": "en"}, "template_not_approved", "template.name"),
    (order_template(parameters=["only one"]), "template_parameters_mismatch", "template.parameters"),
    (order_template(buttons=[]), "template_parameters_mismatch", "template.buttons"),
    ({"name": "welcome", "language": "en", "parameters": ["Budi"]}, "template_parameters_mismatch",
     "template.parameters"),
    ({"name": "Order", "language": "en_US"}, "validation_failed", "template.name"),
    (dict(order_template(), colour="red"), "unknown_field", "template.colour"),
])
def test_checks_before_anything_is_written(gw, tpl, code, field):
    """Each refusal is answered before a row is written or a provider called."""
    assert_error(send(gw, {"to": TO, "template": tpl}), 422, code, field)
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    assert gw.sim.requests("whatsapp_meta", to=TO) == [] and gw.sim.requests("sms", to=TO) == []


def test_rendered_text_follows_the_sms_rules(gw):
    """The body rendered with long parameters needs more than 10 SMS segments: text_too_long,
    nothing written."""
    long = "x" * 1000
    assert_error(send(gw, {"to": TO, "template": order_template(parameters=[long, long])}), 422, "text_too_long",
                 "text")
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    # Without sms among the channels the same send is fine.
    assert_ok(send(gw, {"to": TO, "channels": ["whatsapp_meta"], "template": order_template(parameters=[long, long])}))


def test_status_webhook_changes_what_a_send_may_use(gw):
    """Meta's message_template_status_update (PAUSED) reaches the gateway signed: within 2 s a
    send of that template is refused template_not_approved; APPROVED again lets it through."""
    assert_ok(send(gw, {"to": TO, "channels": ["whatsapp_meta"], "template": order_template()}))
    gw.sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % WABA,
                 {"name": "order_update", "language": "en_US", "event": "PAUSED"})
    assert wait_for(lambda: db(gw, "SELECT status FROM wa_templates WHERE name = 'order_update'") == [("PAUSED",)], 10)
    t0 = time.monotonic()
    assert wait_for(lambda: send(gw, {"to": TO, "channels": ["whatsapp_meta"],
                                      "template": order_template()}).status == 422, 3)
    assert time.monotonic() - t0 < 2.5
    assert_error(send(gw, {"to": TO, "template": order_template()}), 422, "template_not_approved", "template.name")
    gw.sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % WABA,
                 {"name": "order_update", "language": "en_US", "event": "APPROVED"})
    assert wait_for(lambda: send(gw, {"to": TO, "channels": ["whatsapp_meta"],
                                      "template": order_template()}).status == 200, 3)


def test_meta_refusing_the_template_marks_it(gw):
    """The catalogue says APPROVED but Meta answers 132015 (paused there first): the attempt
    fails, SMS delivers, the catalogue marks the template PAUSED, and the next send is refused
    before any provider call."""
    gw.sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % WABA,
                 {"name": "order_update", "language": "en_US", "event": "PAUSED", "notify": False})
    d = assert_ok(send(gw, {"to": TO, "template": order_template()}))["data"]
    assert d["attempts"][0]["error"]["providerCode"] == "132015" and d["winningChannel"] == "sms"
    assert db(gw, "SELECT status FROM wa_templates WHERE name = 'order_update'") == [("PAUSED",)]
    before = len(gw.sim.requests("whatsapp_meta", to=TO))
    assert_error(send(gw, {"to": TO, "template": order_template()}), 422, "template_not_approved", "template.name")
    assert len(gw.sim.requests("whatsapp_meta", to=TO)) == before


def set_meta(gw, patch):
    s = json.loads(json.dumps(SETTINGS))
    s["channels"]["whatsapp_meta"].update(patch)
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], {"settings": s}))


def test_outside_window_skip(gw):
    """outsideWindow skip: a free text is not even tried on Meta (no window is known to be
    open); skipped outside_window; SMS delivers. Meta alone: 422 no_channel_available."""
    set_meta(gw, {"outsideWindow": "skip"})
    assert wait_for(lambda: send(gw, {"to": TO, "text": "hi"}).json()["data"]["skipped"] ==
                    [{"channel": "whatsapp_meta", "reason": "outside_window"}], 3)
    assert gw.sim.requests("whatsapp_meta", to=TO) == []
    assert_error(send(gw, {"to": TO, "text": "hi", "channels": ["whatsapp_meta"]}), 422, "no_channel_available")
    # A template is business-initiated: it is sent whatever the window.
    assert_ok(send(gw, {"to": TO, "template": order_template()}))
    assert len(meta_bodies(gw)) == 1


def test_outside_window_template(gw):
    """outsideWindow template: the free text is wrapped in windowTemplate's one parameter; the
    attempt's content is template, the message has no template of its own."""
    set_meta(gw, {"outsideWindow": "template", "windowTemplate": {"name": "relay", "language": "en"}})

    def wrapped():
        d = assert_ok(send(gw, {"to": TO, "text": "Your parcel is here", "channels": ["whatsapp_meta"]}))["data"]
        return meta_bodies(gw)[-1]["type"] == "template" and d
    assert wait_for(wrapped, 3)
    body = meta_bodies(gw)[-1]
    assert body["template"] == {"name": "relay", "language": {"policy": "deterministic", "code": "en"},
                                "components": [{"type": "body", "parameters": [
                                    {"type": "text", "text": "Your parcel is here"}]}]}
    ref = [r for r in db(gw, "SELECT reference FROM messages ORDER BY reference DESC LIMIT 1")][0][0]
    it = item(gw, ref)
    assert it["template"] is None and it["text"] == "Your parcel is here"
    assert it["attempts"][0]["content"] == "template"


def test_outside_window_setting_is_validated(gw):
    """template without windowTemplate, and an unknown mode, are refused at save."""
    s = json.loads(json.dumps(SETTINGS))
    s["channels"]["whatsapp_meta"]["outsideWindow"] = "template"
    assert_error(admin(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], {"settings": s}), 422,
                 "validation_failed", "settings.channels.whatsapp_meta.windowTemplate")
    s["channels"]["whatsapp_meta"]["outsideWindow"] = "later"
    assert_error(admin(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], {"settings": s}), 422,
                 "validation_failed", "settings.channels.whatsapp_meta.outsideWindow")


def test_delivery_based_fallback_step_sends_the_template(gw):
    """fallbackOn delivered, chain SMS then Meta: when the SMS fails by status, the step's Meta
    attempt sends the same template (from the message's record), content template."""
    gw.sim.rule("sms", "ok", to=TO, callback="undelivered")
    d = assert_ok(send(gw, {"to": TO, "template": order_template(), "channels": ["sms", "whatsapp_meta"],
                            "fallbackOn": "delivered"}))["data"]
    assert d["winningChannel"] == "sms"
    assert wait_for(lambda: len(meta_bodies(gw)) == 1, 10)
    assert meta_bodies(gw)[0]["template"]["name"] == "order_update"
    assert wait_for(lambda: len(item(gw, d["reference"])["attempts"]) == 2, 5)
    it = item(gw, d["reference"])
    assert [a["content"] for a in it["attempts"]] == ["text", "template"]


def test_idempotent_template_send(gw):
    """The same key and body replays the first answer; nothing is sent again."""
    h = [("Idempotency-Key", "tpl-1")]
    a = assert_ok(send(gw, {"to": TO, "template": order_template()}, headers=h))
    b = send(gw, {"to": TO, "template": order_template()}, headers=h)
    assert b.status == 200 and b.header("Idempotency-Replayed") == "true"
    assert b.json()["data"]["reference"] == a["data"]["reference"]
    assert len(meta_bodies(gw)) == 1


@pytest.mark.skipif(not have_test_routes(), reason="needs a build with -Dtest_routes=true")
@pytest.mark.parametrize("mode,status,code", [("error", 500, "internal_error"), ("unavailable", 503, "unavailable"),
                                               ("lost", 503, "unavailable")])
def test_catalogue_read_failing_answers(gw, mode, status, code):
    """The catalogue's read of a template this worker has not cached fails (each way the error
    paths test fails a statement): the send is answered, nothing is written, no provider is
    called, and the next send of it works."""
    assert_ok(call(gw, "POST", "/__test/fault", body={"count": 1, "point": "db", "statement": "tpl_get",
                                                      "status": mode}))
    tpl = {"name": "welcome", "language": "en", "parameters": {"first_name": "Budi"}}
    r = send(gw, {"to": TO, "template": tpl})
    assert_error(r, status, code)
    assert assert_ok(call(gw, "GET", "/__test/fault"))["data"]["db"] == 0
    assert db(gw, "SELECT count(*) FROM messages") == [("0",)]
    assert meta_bodies(gw) == [] and gw.sim.requests("sms", to=TO) == []
    assert_ok(send(gw, {"to": TO, "template": tpl}))


def test_a_status_change_reaches_another_instance_within_2s(gw, make_server, tmp_path):
    """Two instances on one database: the second has the template in its worker's cache (it just
    sent it); Meta's PAUSED webhook reaches the first (Meta itself still sends the template: the
    simulator's catalogue is unchanged, so nothing but the gateway's own catalogue can refuse);
    within 2 s the second refuses it before any provider call (API.md §18: the catalogue is
    cached per worker and invalidated across instances within 2 s)."""
    other = linked_gateway(make_server, gw.db_url, tmp_path, workers=1, sim=gw.sim)
    other.tenant, other.token = gw.tenant, gw.token
    assert_ok(send(other, {"to": TO, "channels": ["whatsapp_meta"], "template": order_template()}))
    body = json.dumps({"object": "whatsapp_business_account", "entry": [{"id": WABA, "time": int(time.time()),
                       "changes": [{"field": "message_template_status_update", "value": {
                           "event": "PAUSED", "message_template_id": 1, "message_template_name": "order_update",
                           "message_template_language": "en_US", "reason": "NONE"}}]}]}).encode()
    sig = "sha256=" + hmac.new(META_SECRET.encode(), body, hashlib.sha256).hexdigest()
    r = gw.request("POST", "/webhooks/meta", headers=[("Content-Type", "application/json"),
                                                      ("X-Hub-Signature-256", sig)], body=body)
    assert r.status == 200, r
    t0 = time.monotonic()
    assert wait_for(lambda: send(other, {"to": TO, "channels": ["whatsapp_meta"],
                                         "template": order_template()}).status == 422, 3)
    assert time.monotonic() - t0 <= 2.0
    before = len(meta_bodies(gw))
    assert_error(send(other, {"to": TO, "template": order_template()}), 422, "template_not_approved",
                 "template.name")
    assert len(meta_bodies(gw)) == before
