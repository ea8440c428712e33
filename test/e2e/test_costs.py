"""Issue 34: what accepted attempts cost (API.md §22), end to end through the real gateway, the
real PostgreSQL and the provider simulator. The global card (PUT /admin/rates) and a tenant's
card (settings.rates) price each attempt its provider accepts, when it accepts it: shown in the
send's answer, in the unified and SMS logs, and never rewritten when a card changes. Sends the
gateway completes in the request (unified sync sends, POST /api/sms/send, the OTP's SMS)."""

import copy

import pytest

from conftest import assert_ok, wait_for
from gwlib import admin, call, linked_gateway, new_tenant, new_token, query_url
from test_templates_send import NAMED, ORDER, SETTINGS, load, order_template

META_FAILS = "+19990200000"  # the simulator: whatsapp_meta 500, the others ok
OK_TO = "+6281234500077"
CARD = {"currency": "USD", "rates": [
    {"channel": "whatsapp_meta", "prefix": "", "price": "0.0140"},
    {"channel": "whatsapp_meta", "prefix": "+62", "price": "0.0250", "category": "marketing"},
    {"channel": "whatsapp_meta", "prefix": "", "price": "0.0080", "category": "utility"},
    {"channel": "sms", "prefix": "", "price": "0.0500"},
    {"channel": "sms", "prefix": "+62", "price": "0.0450"},
    {"channel": "sms", "prefix": "+6281", "price": "0.04125"}]}
USD = "USD"


def cost(amount):
    return {"amount": amount, "currency": USD}


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    load(srv.sim, [ORDER, NAMED])
    srv.tenant = new_tenant(srv, settings=SETTINGS)
    srv.token = new_token(srv, srv.tenant["id"])["token"]
    assert assert_ok(admin(srv, "POST", "/admin/tenants/%s/templates/sync" % srv.tenant["id"]))["data"]["synced"]
    yield srv
    srv.sim.stop()


def send(gw, body, token=None):
    return call(gw, "POST", "/api/omni/send", token=token or gw.token, body=body)


def queued(gw, body):
    r = send(gw, dict(body, queue=True))
    assert r.status == 202, r
    return r.json()["data"]["reference"]


def omni_item(gw, reference, token=None):
    return assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + reference,
                          token=token or gw.token))["data"]["items"][0]


def sms_item(gw, reference, token=None):
    return assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + reference,
                          token=token or gw.token))["data"]["items"][0]


def put_card(gw, card):
    """Puts the global card and waits until every worker prices with it: each reads it with its
    consent copy, every second, and logs "rates: global card loaded" once per new version (a run
    of probe sends priced by it was not enough: they could all reach the worker that had it)."""
    before = gw.stderr().count('"rates: global card loaded"')
    assert_ok(admin(gw, "PUT", "/admin/rates", card))
    assert wait_for(lambda: gw.stderr().count('"rates: global card loaded"') >= before + gw.workers, 5), \
        gw.stderr()[-2000:]


def test_fallback_send_costs_each_accepted_attempt(gw):
    """A fallback send whose first channel fails: the failed attempt costs null, the accepted one
    its channel's rate; the answer and the log say the same."""
    put_card(gw, CARD)
    r = send(gw, {"to": META_FAILS, "text": "hello", "channels": ["whatsapp_meta", "sms"]})
    d = assert_ok(r)["data"]
    assert [(a["channel"], a["status"], a["cost"]) for a in d["attempts"]] == [
        ("whatsapp_meta", "failed", None), ("sms", "sent", cost("0.0500"))]
    it = omni_item(gw, d["reference"])
    assert [(a["channel"], a["cost"]) for a in it["attempts"]] == [("whatsapp_meta", None), ("sms", cost("0.0500"))]


def test_all_mode_and_sms_segments_longest_prefix(gw):
    """`all` mode: every accepted attempt is priced; SMS per segment at the longest prefix that
    matches (+6281 beats +62 and ""); the SMS log shows the SMS's cost."""
    put_card(gw, CARD)
    text = "x" * 200  # two GSM-7 segments
    d = assert_ok(send(gw, {"to": OK_TO, "text": text, "channels": ["whatsapp_meta", "sms"],
                            "deliveryMode": "all"}))["data"]
    assert {a["channel"]: a["cost"] for a in d["attempts"]} == {"whatsapp_meta": cost("0.0140"),
                                                                "sms": cost("0.0825")}
    item = sms_item(gw, d["reference"])
    assert item["cost"] == cost("0.0825"), (item, d)
    assert {a["channel"]: a["cost"] for a in omni_item(gw, d["reference"])["attempts"]} == {
        "whatsapp_meta": cost("0.0140"), "sms": cost("0.0825")}


def test_template_category_beats_prefix(gw):
    """A Meta template is priced by its category (the catalogue's) before any prefix; a free
    text on Meta has no category and takes the entry without one."""
    put_card(gw, CARD)
    d = assert_ok(send(gw, {"to": OK_TO, "channels": ["whatsapp_meta"], "template": order_template()}))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0080")  # utility, prefix ""
    d = assert_ok(send(gw, {"to": OK_TO, "channels": ["whatsapp_meta"],
                            "template": {"name": "welcome", "language": "en",
                                         "parameters": {"first_name": "Ana"}}}))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0250")  # marketing, +62
    d = assert_ok(send(gw, {"to": OK_TO, "channels": ["whatsapp_meta"], "text": "free"}))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0140")


def test_sms_route_and_otp_and_no_rate(gw):
    """POST /api/sms/send and the OTP's SMS get their cost in their SMS records; an SMS that
    failed, or one no rate applies to, costs null."""
    put_card(gw, CARD)
    d = assert_ok(call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": OK_TO, "text": "hi"}))["data"]
    assert d["cost"] == cost("0.04125")
    assert sms_item(gw, d["reference"])["cost"] == cost("0.04125")
    o = assert_ok(call(gw, "POST", "/api/sms/otp/send", token=gw.token, body={"to": "+6221234567"}))["data"]
    assert sms_item(gw, o["reference"])["cost"] == cost("0.0450")
    failing = "+19990010000"  # the simulator: sms rejected
    r = call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": failing, "text": "hi"})
    assert r.status == 502 and r.json()["data"]["cost"] is None
    put_card(gw, {"currency": "USD", "rates": [{"channel": "sms", "prefix": "", "price": "0.0600"},
                                               {"channel": "whatsapp_meta", "prefix": "+44", "price": "0.01"}]})
    d = assert_ok(send(gw, {"to": OK_TO, "text": "no rate", "channels": ["whatsapp_meta"]}))["data"]
    assert d["attempts"][0]["cost"] is None and omni_item(gw, d["reference"])["attempts"][0]["cost"] is None


def test_card_change_never_rewrites_and_tenant_card_wins(gw):
    """A cost stays what it was when the attempt was accepted, whatever the cards become; a
    tenant's card counts alone for the channels it lists (a number none of its prefixes match
    costs null there), the global card for the others."""
    put_card(gw, CARD)
    d = assert_ok(send(gw, {"to": OK_TO, "text": "before", "channels": ["sms"]}))["data"]
    assert d["attempts"][0]["cost"] == cost("0.04125")
    changed = copy.deepcopy(CARD)
    for r in changed["rates"]:
        if r["channel"] == "sms" and r["prefix"] == "":
            r["price"] = "0.0700"
    changed["rates"] = [r for r in changed["rates"] if r["prefix"] != "+6281"]
    put_card(gw, changed)
    assert omni_item(gw, d["reference"])["attempts"][0]["cost"] == cost("0.04125")
    item = sms_item(gw, d["reference"])
    assert item["cost"] == cost("0.04125"), (item, d)
    assert query_url(gw.db_url, "SELECT cost_micros, cost_currency FROM attempts WHERE reference = '%s'"
                     % d["reference"]) == [("41250", "USD")]

    settings = copy.deepcopy(SETTINGS)
    settings["rates"] = {"currency": "USD", "rates": [{"channel": "sms", "prefix": "+62", "price": "0.0312"}]}
    t = new_tenant(gw, settings=settings)
    token = new_token(gw, t["id"])["token"]
    d = assert_ok(send(gw, {"to": OK_TO, "text": "own card", "channels": ["sms"]}, token=token))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0312")
    d = assert_ok(send(gw, {"to": "+4915112345001", "text": "not listed", "channels": ["sms"]},
                       token=token))["data"]
    assert d["attempts"][0]["cost"] is None
    d = assert_ok(send(gw, {"to": OK_TO, "text": "global", "channels": ["whatsapp_meta"]}, token=token))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0140")


def until_final(gw, reference, statuses=("sent", "delivered", "read"), timeout=15):
    box = []

    def done():
        box[:] = [omni_item(gw, reference)]
        return box[0]["status"] in statuses
    assert wait_for(done, timeout), box
    return box[0]


def test_queued_and_batch_attempts_are_priced(gw):
    """A queued message's attempts are priced as a sync send's: a template by its catalogue
    category (kept with the message at the accept), an SMS by segment; so are a batch's."""
    put_card(gw, CARD)
    ref = queued(gw, {"to": OK_TO, "channels": ["whatsapp_meta"],
                      "template": {"name": "welcome", "language": "en", "parameters": {"first_name": "Ana"}}})
    assert [a["cost"] for a in until_final(gw, ref)["attempts"]] == [cost("0.0250")]
    ref = queued(gw, {"to": META_FAILS, "text": "y" * 200, "channels": ["whatsapp_meta", "sms"]})
    it = until_final(gw, ref)
    assert [(a["channel"], a["status"], a["cost"]) for a in it["attempts"]] == [
        ("whatsapp_meta", "failed", None), ("sms", "sent", cost("0.1000"))]
    assert sms_item(gw, ref)["cost"] == cost("0.1000")
    r = call(gw, "POST", "/api/omni/batches", token=gw.token, body={"messages": [
        {"to": OK_TO, "text": "batch one", "channels": ["sms"]},
        {"to": OK_TO, "channels": ["whatsapp_meta"], "template": order_template()}]})
    assert r.status == 202, r
    refs = r.json()["data"]["references"]
    assert [until_final(gw, r)["attempts"][0]["cost"] for r in refs] == [cost("0.04125"), cost("0.0080")]


def test_delivery_based_fallback_prices_the_later_attempt(gw):
    """A sync send with fallbackOn: its first attempt priced at once; the step's later attempt
    (after the first one's status failed) priced when its provider accepts it."""
    put_card(gw, CARD)
    to = "+6281234500088"
    gw.sim.rule("whatsapp_meta", "ok", to=to, callback="not_on_whatsapp")
    gw.sim.rule("sms", "ok", to=to, callback="delivered_read")
    d = assert_ok(send(gw, {"to": to, "text": "chain", "channels": ["whatsapp_meta", "sms"],
                            "fallbackOn": "delivered"}))["data"]
    assert d["attempts"][0]["cost"] == cost("0.0140")
    it = until_final(gw, d["reference"], ("delivered", "read"))
    assert [(a["channel"], a["cost"]) for a in it["attempts"]] == [("whatsapp_meta", cost("0.0140")),
                                                                    ("sms", cost("0.04125"))]
