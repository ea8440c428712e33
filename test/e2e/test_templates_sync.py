"""WhatsApp templates end to end (API.md §18): the catalogue of each WABA read from Meta (the
simulator's GET /{version}/{wabaId}/message_templates, with paging), when a number with a wabaId
is saved, on POST /admin/tenants/{id}/templates/sync and every OMNIGATE_TEMPLATE_SYNC_S; the
list routes; and Meta's message_template_status_update webhook. The real gateway and
PostgreSQL; the simulator (test/sim) holds each WABA's catalogue and calls the gateway back."""

import copy
import itertools
import json
import time

import pytest

from conftest import assert_error, assert_ok, have_test_routes, wait_for
from gwlib import (META_SECRET, META_TOKEN, SETTINGS_ALL, WA_FROM, admin, call, linked_gateway,
                   new_tenant, new_token, query_url, set_unified)

NUMBERS = "settings.channels.whatsapp_meta.numbers"
_wabas = itertools.count(1)


def new_waba():
    """A WABA id of its own for each use, so catalogues never mix between tests."""
    return "1022901293%05d" % next(_wabas)


def settings_with(waba, number=WA_FROM, token=META_TOKEN, phone_id="109876543210"):
    """SETTINGS_ALL whose Meta number (`number`) belongs to `waba` (None: no wabaId)."""
    s = copy.deepcopy(SETTINGS_ALL)
    num = {"phoneNumberId": phone_id, "accessToken": token}
    if waba is not None:
        num["wabaId"] = waba
    s["channels"]["whatsapp_meta"]["numbers"] = {number: num}
    return s


def meta_template(name, language="en_US", body="Hello {{1}}, your order {{2}} is ready", status=None,
                  named=False, buttons=None, category="UTILITY"):
    """A template as Meta lists it (and the simulator's PUT takes it)."""
    comps = [{"type": "BODY", "text": body}]
    if buttons:
        comps.append({"type": "BUTTONS", "buttons": buttons})
    t = {"name": name, "language": language, "category": category, "components": comps}
    if named:
        t["parameter_format"] = "NAMED"
    if status:
        t["status"] = status
    return t


def load(sim, waba, templates=None, generate=None, list_behaviour=None):
    """Replaces the simulator's catalogue of `waba`."""
    body = {}
    if templates is not None:
        body["templates"] = templates
    if generate is not None:
        body["generate"] = generate
    if list_behaviour is not None:
        body["listBehaviour"] = list_behaviour
    return sim._call("PUT", "/__sim/meta/wabas/%s/templates" % waba, body)


def set_status(sim, waba, name, language, event, notify=True):
    """Changes a template's status in the simulator; with notify, Meta's webhook tells the gateway."""
    return sim._call("POST", "/__sim/meta/wabas/%s/templates/status" % waba,
                     {"name": name, "language": language, "event": event, "notify": notify})


def db(gw, sql):
    return query_url(gw.db_url, sql)


def rows(gw, waba):
    """(name, language, status) of the WABA's catalogue rows, in order."""
    return db(gw, "SELECT name, language, status FROM wa_templates WHERE waba_id = '%s' "
                  "ORDER BY name, language" % waba)


def count(gw, waba):
    return int(db(gw, "SELECT count(*) FROM wa_templates WHERE waba_id = '%s'" % waba)[0][0])


def status_of(gw, waba, name, language):
    r = db(gw, "SELECT status FROM wa_templates WHERE waba_id = '%s' AND name = '%s' AND language = '%s'"
               % (waba, name, language))
    return r[0][0] if r else None


def sync(gw, tenant_id):
    return admin(gw, "POST", "/admin/tenants/%s/templates/sync" % tenant_id)


def list_page(gw, query="", token=None):
    return call(gw, "GET", "/api/whatsapp/templates" + query, token=token or gw.token)


def all_items(gw, query="", limit=2, token=None):
    """Every item of the tenant's list, page by page (nextCursor), and how many pages it took."""
    items, pages, cursor = [], 0, None
    while True:
        q = "?limit=%d" % limit + ("&" + query if query else "") + ("&cursor=" + cursor if cursor else "")
        data = assert_ok(list_page(gw, q, token))["data"]
        items += data["items"]
        pages += 1
        cursor = data["nextCursor"]
        if cursor is None:
            return items, pages
        assert pages < 1000


def meta_requests(sim, waba):
    """The simulator's recorded GETs of the WABA's listing."""
    return [r for r in sim.requests("whatsapp_meta")
            if r["method"] == "GET" and ("/%s/message_templates" % waba) in r["path"]]


def steps_of(gw, tenant_id):
    """(reference, seconds until due) of the tenant's template_sync steps."""
    return db(gw, "SELECT reference, round(extract(epoch FROM due_at - now()))::int FROM steps "
                  "WHERE kind = 'template_sync' AND tenant_id = '%s' ORDER BY reference" % tenant_id)


def tenant_with(gw, waba, name="acme", **kw):
    """A tenant whose Meta number belongs to `waba`, with a token of every scope."""
    t = new_tenant(gw, settings=settings_with(waba, **kw), name=name)
    t["token"] = new_token(gw, t["id"])["token"]
    return t


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    """A gateway whose Meta is a simulator that calls it back, signed with META_SECRET."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=2)
    yield srv
    srv.sim.stop()


CATALOGUE = [
    meta_template("order_update"),
    meta_template("order_update", language="id", body="Halo {{1}}, pesanan {{2}} siap"),
    meta_template("welcome", body="Hi {{first_name}}, welcome to {{shop}}", named=True, category="MARKETING"),
    meta_template("login_code", body="{{1}} is your code", category="AUTHENTICATION",
                  buttons=[{"type": "OTP", "otp_type": "COPY_CODE", "text": "Copy code"}]),
    meta_template("promo", status="PAUSED", category="MARKETING", body="Sale: {{1}}",
                  buttons=[{"type": "URL", "text": "Shop", "url": "https://example.com/s/{{1}}"},
                           {"type": "QUICK_REPLY", "text": "Stop"}]),
]


# ---- the sync ------------------------------------------------------------------------------------

def test_saving_a_number_with_waba_syncs_its_catalogue(gw):
    """Creating a tenant whose Meta number has a wabaId reads that WABA's templates at once into
    wa_templates, and schedules the next sync OMNIGATE_TEMPLATE_SYNC_S (3600) later."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15), rows(gw, waba)
    assert rows(gw, waba) == [("login_code", "en_US", "APPROVED"), ("order_update", "en_US", "APPROVED"),
                              ("order_update", "id", "APPROVED"), ("promo", "en_US", "PAUSED"),
                              ("welcome", "en_US", "APPROVED")]
    got = db(gw, "SELECT name, category, parameter_format, array_to_string(parameters, ','), body, "
                 "jsonb_array_length(buttons) FROM wa_templates WHERE waba_id = '%s' AND language = 'en_US' "
                 "ORDER BY name" % waba)
    assert got == [("login_code", "authentication", "positional", "1", "{{1}} is your code", "1"),
                   ("order_update", "utility", "positional", "1,2", "Hello {{1}}, your order {{2}} is ready", "0"),
                   ("promo", "marketing", "positional", "1", "Sale: {{1}}", "2"),
                   ("welcome", "marketing", "named", "first_name,shop", "Hi {{first_name}}, welcome to {{shop}}",
                    "0")]
    # The step of (tenant, WABA) waits for the next periodic run.
    assert wait_for(lambda: [(r, int(s) > 3500) for r, s in steps_of(gw, t["id"])] == [(waba, True)], 10), \
        steps_of(gw, t["id"])
    # Read with the number's token, on the configured base URL, one page.
    reqs = meta_requests(gw.sim, waba)
    assert len(reqs) == 1
    assert reqs[0]["path"] == "/v21.0/%s/message_templates" % waba
    assert reqs[0]["headers"]["authorization"] == "Bearer " + META_TOKEN


def test_patch_that_adds_a_waba_syncs_it(gw):
    """A tenant saved without a wabaId has no catalogue and no sync step; a PATCH that gives its
    Meta number one syncs that WABA at once. A PATCH that leaves the numbers alone reads nothing."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE[:2])
    t = tenant_with(gw, None)
    assert steps_of(gw, t["id"]) == []
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": {"channels": {"whatsapp_meta": {
        "numbers": {WA_FROM: {"wabaId": waba}}}}}}))
    assert wait_for(lambda: count(gw, waba) == 2, 15)
    assert len(meta_requests(gw.sim, waba)) == 1
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": {"rateLimitPerSecond": 50}}))
    assert [(r, int(s) > 3500) for r, s in steps_of(gw, t["id"])] == [(waba, True)]


def test_admin_sync_follows_paging(gw):
    """POST .../templates/sync reads all 250 templates of a WABA in three pages of 100 (asking for
    each next page with paging.cursors.after) and answers 200 {"synced": 250}; a second sync of an
    unchanged listing changes no row."""
    waba = new_waba()
    load(gw.sim, waba, generate=250)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 250, 15)  # the sync of the save, first
    gw.sim.clear()
    r = sync(gw, t["id"])
    assert assert_ok(r)["data"] == {"synced": 250}
    assert count(gw, waba) == 250
    assert db(gw, "SELECT min(name), max(name), count(DISTINCT name) FROM wa_templates WHERE waba_id = '%s'"
                  % waba) == [("gen_00001", "gen_00250", "250")]
    # 250 distinct templates in three requests: pages of 100, each after the last one's cursor.
    assert len(meta_requests(gw.sim, waba)) == 3
    before = db(gw, "SELECT max(updated_at) FROM wa_templates WHERE waba_id = '%s'" % waba)
    assert assert_ok(sync(gw, t["id"]))["data"] == {"synced": 250}
    assert db(gw, "SELECT max(updated_at) FROM wa_templates WHERE waba_id = '%s'" % waba) == before


def test_admin_sync_replaces_the_catalogue(gw):
    """A sync inserts what Meta added, updates what changed and deletes what Meta no longer
    lists."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    load(gw.sim, waba, [meta_template("order_update", status="DISABLED"), meta_template("brand_new")])
    assert assert_ok(sync(gw, t["id"]))["data"] == {"synced": 2}
    assert rows(gw, waba) == [("brand_new", "en_US", "APPROVED"), ("order_update", "en_US", "DISABLED")]


def test_admin_sync_meta_failure_keeps_the_old_catalogue(gw):
    """Meta failing (a 5xx, then a refused token) is 502 provider_error naming the WABA and
    Meta's error, and the catalogue read before stays as it was; the token is never logged."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    old = rows(gw, waba)
    load(gw.sim, waba, [meta_template("other")], list_behaviour="error")
    r = sync(gw, t["id"])
    j = assert_error(r, 502, "provider_error")
    assert waba in j["message"]
    assert j["error"]["details"]["wabaId"] == waba
    assert j["error"]["details"]["httpStatus"] == 500
    assert rows(gw, waba) == old
    load(gw.sim, waba, [meta_template("other")], list_behaviour="auth")
    j = assert_error(sync(gw, t["id"]), 502, "provider_error")
    assert j["error"]["details"]["httpStatus"] == 401
    assert j["error"]["details"]["providerCode"] == "190"
    assert rows(gw, waba) == old
    assert META_TOKEN not in gw.stderr()


def test_admin_sync_needs_a_waba(gw):
    """A tenant without a Meta number with a wabaId is 422 on the numbers field; an unknown
    tenant 404; no admin token 401; a body other than {} is refused."""
    t = tenant_with(gw, None)
    assert_error(sync(gw, t["id"]), 422, "validation_failed", NUMBERS)
    assert_error(sync(gw, "00000000-0000-4000-8000-000000000000"), 404, "not_found")
    assert_error(sync(gw, "not-a-uuid"), 404, "not_found")
    assert_error(call(gw, "POST", "/admin/tenants/%s/templates/sync" % t["id"]), 401, "unauthorized")
    assert_error(call(gw, "POST", "/admin/tenants/%s/templates/sync" % t["id"], token="wrong"), 401,
                 "unauthorized")
    assert_error(admin(gw, "POST", "/admin/tenants/%s/templates/sync" % t["id"], {"force": True}), 422,
                 "unknown_field", "force")


@pytest.fixture
def gw1(make_server, fresh_db, tmp_path):
    """One worker: a fault armed through /__test/fault is armed where the next request goes."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=1)
    yield srv
    srv.sim.stop()


@pytest.mark.skipif(not have_test_routes(), reason="needs a build with -Dtest_routes=true")
def test_admin_sync_database_failures(gw1):
    """The tenant's read or the write that replaces the catalogues failing for want of a
    connection is 503 unavailable, refused by the server 500 internal_error; neither replaces
    anything, and the next sync works."""
    gw = gw1
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    load(gw.sim, waba, [meta_template("other")])
    for stmt, mode, status, code in (("tpl_replace", "unavailable", 503, "unavailable"),
                                     ("tenant_get", "unavailable", 503, "unavailable"),
                                     ("tpl_replace", "error", 500, "internal_error"),
                                     ("tpl_replace", "lost", 503, "unavailable")):
        assert_ok(call(gw, "POST", "/__test/fault", body={"point": "db", "statement": stmt,
                                                           "status": mode, "count": 1}))
        assert_error(sync(gw, t["id"]), status, code)
        if mode != "lost":  # lost: it committed, the answer did not come back
            assert count(gw, waba) == 5
    assert assert_ok(sync(gw, t["id"]))["data"] == {"synced": 1}
    assert rows(gw, waba) == [("other", "en_US", "APPROVED")]


# ---- the lists -----------------------------------------------------------------------------------

def test_list_filters_and_pages(gw):
    """GET /api/whatsapp/templates pages by name, language and WABA (nextCursor until the last
    page) with the filters name, status and language; its items are as API.md §18 shows them."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    gw.token = t["token"]
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    items, pages = all_items(gw, limit=2)
    assert pages == 3
    assert [(i["name"], i["language"]) for i in items] == [
        ("login_code", "en_US"), ("order_update", "en_US"), ("order_update", "id"), ("promo", "en_US"),
        ("welcome", "en_US")]
    promo = items[3]
    assert promo["wabaId"] == waba and promo["status"] == "PAUSED" and promo["category"] == "marketing"
    assert promo["parameterFormat"] == "positional" and promo["parameters"] == ["1"]
    assert promo["body"] == "Sale: {{1}}"
    assert [(b["index"], b["type"], b["text"], b["parameter"]) for b in promo["buttons"]] == [
        (0, "URL", "Shop", True), (1, "QUICK_REPLY", "Stop", False)]
    assert items[4]["parameterFormat"] == "named" and items[4]["parameters"] == ["first_name", "shop"]
    one = assert_ok(list_page(gw, "?limit=2"))["data"]
    assert one["nextCursor"] == "order_update/en_US/" + waba
    assert [i["name"] for i in all_items(gw, "name=order_update")[0]] == ["order_update", "order_update"]
    assert [i["name"] for i in all_items(gw, "status=PAUSED")[0]] == ["promo"]
    assert [(i["name"], i["language"]) for i in all_items(gw, "language=id")[0]] == [("order_update", "id")]
    assert all_items(gw, "name=order_update&language=en_US&status=APPROVED")[0][0]["language"] == "en_US"
    assert assert_ok(list_page(gw, "?name=nothing_like_it"))["data"] == {"items": [], "nextCursor": None}
    # The admin mirror: the same items.
    mirror = assert_ok(admin(gw, "GET", "/admin/tenants/%s/templates?limit=500" % t["id"]))["data"]
    assert mirror["items"] == items and mirror["nextCursor"] is None


def test_list_refuses_bad_parameters(gw):
    """limit, cursor and the filters are checked: 422 validation_failed naming the parameter."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE[:1])
    t = tenant_with(gw, waba)
    for query, field in (("?limit=0", "limit"), ("?limit=501", "limit"), ("?limit=x", "limit"),
                         ("?cursor=", "cursor"), ("?cursor=abc", "cursor"), ("?cursor=a/b", "cursor"),
                         ("?cursor=a/en/1/2", "cursor"), ("?cursor=a/en/x1", "cursor"),
                         ("?cursor=a%27/en/1", "cursor"), ("?cursor=A/en/1", "cursor"),
                         ("?cursor=" + "a" * 513 + "/en/1", "cursor"),
                         ("?name=", "name"), ("?name=Order", "name"), ("?status=approved", "status"),
                         ("?language=e", "language"), ("?language=en-US", "language"), ("?lang=en", "lang")):
        assert_error(list_page(gw, query, token=t["token"]), 422, "validation_failed", field)
        assert_error(admin(gw, "GET", "/admin/tenants/%s/templates%s" % (t["id"], query)), 422,
                     "validation_failed", field)


def test_list_auth(gw):
    """The tenant list needs a token with scope send (401 without one, 403 without the scope) and
    is not locked by the plan; the admin list needs the admin token and a tenant that exists."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE[:1])
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 1, 15)
    assert_error(call(gw, "GET", "/api/whatsapp/templates"), 401, "unauthorized")
    assert_error(list_page(gw, token="kft_" + "x" * 40), 401, "unauthorized")
    logs_only = new_token(gw, t["id"], scopes=["logs", "otp"])["token"]
    assert_error(list_page(gw, token=logs_only), 403, "insufficient_scope")
    set_unified(gw, t["id"], False)
    # The plan lock reaches the token cache within OMNIGATE_AUTH_TTL_MS (1 s).
    assert wait_for(lambda: call(gw, "GET", "/api/omni/logs", token=t["token"]).status == 403, 5)
    assert len(assert_ok(list_page(gw, token=t["token"]))["data"]["items"]) == 1
    assert_error(call(gw, "GET", "/admin/tenants/%s/templates" % t["id"]), 401, "unauthorized")
    assert_error(call(gw, "GET", "/admin/tenants/%s/templates" % t["id"], token=t["token"]), 401,
                 "unauthorized")
    assert_error(admin(gw, "GET", "/admin/tenants/00000000-0000-4000-8000-000000000000/templates"), 404,
                 "not_found")
    assert_error(admin(gw, "GET", "/admin/tenants/nope/templates"), 404, "not_found")


def test_tenant_sees_only_its_wabas(gw):
    """Each tenant lists the catalogues of its own numbers' WABAs, never another tenant's; a WABA
    two tenants share is listed to both."""
    wa, wb = new_waba(), new_waba()
    load(gw.sim, wa, [meta_template("alpha")])
    load(gw.sim, wb, [meta_template("beta")])
    a = tenant_with(gw, wa, name="a")
    b = tenant_with(gw, wb, name="b")
    assert wait_for(lambda: count(gw, wa) == 1 and count(gw, wb) == 1, 15)
    names = lambda tok: [(i["name"], i["wabaId"]) for i in assert_ok(list_page(gw, token=tok))["data"]["items"]]
    assert names(a["token"]) == [("alpha", wa)]
    assert names(b["token"]) == [("beta", wb)]
    assert assert_ok(list_page(gw, "?name=beta", token=a["token"]))["data"]["items"] == []
    assert [i["name"] for i in assert_ok(admin(gw, "GET", "/admin/tenants/%s/templates" % b["id"]))["data"]
            ["items"]] == ["beta"]
    c = tenant_with(gw, wa, name="c", number="6281234567891")
    assert names(c["token"]) == [("alpha", wa)]


# ---- Meta's status webhook -------------------------------------------------------------------------

def template_update(waba, name, language, event):
    return {"object": "whatsapp_business_account", "entry": [{"id": waba, "time": int(time.time()), "changes": [
        {"field": "message_template_status_update",
         "value": {"event": event, "message_template_id": 594425479261596, "message_template_name": name,
                   "message_template_language": language, "reason": "NONE"}}]}]}


def post_meta(gw, body, secret=META_SECRET):
    import hashlib
    import hmac
    raw = json.dumps(body).encode()
    sig = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return gw.request("POST", "/webhooks/meta", headers=[("Content-Type", "application/json"),
                                                          ("X-Hub-Signature-256", sig)], body=raw)


def test_status_webhook_changes_a_template(gw):
    """Meta's message_template_status_update (sent by the simulator when a template changes)
    sets the template's status in wa_templates at once, and the list shows it; REINSTATED makes
    it APPROVED again."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    set_status(gw.sim, waba, "order_update", "en_US", "PAUSED")
    assert wait_for(lambda: status_of(gw, waba, "order_update", "en_US") == "PAUSED", 10)
    assert status_of(gw, waba, "order_update", "id") == "APPROVED"
    paused = assert_ok(list_page(gw, "?status=PAUSED", token=t["token"]))["data"]["items"]
    assert [(i["name"], i["language"]) for i in paused] == [("order_update", "en_US"), ("promo", "en_US")]
    set_status(gw.sim, waba, "order_update", "en_US", "REINSTATED")
    assert wait_for(lambda: status_of(gw, waba, "order_update", "en_US") == "APPROVED", 10)
    set_status(gw.sim, waba, "welcome", "en_US", "FLAGGED")
    assert wait_for(lambda: status_of(gw, waba, "welcome", "en_US") == "FLAGGED", 10)


def test_status_webhook_records_with_the_statuses_of_its_post(gw):
    """One POST with delivery statuses and template changes answers 200 with the statuses'
    counts once both are committed; the last change of a template in the POST wins, a template
    the catalogue does not have and an unknown event change nothing."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    body = template_update(waba, "order_update", "en_US", "PAUSED")
    changes = body["entry"][0]["changes"]
    changes.append(template_update(waba, "order_update", "en_US", "DISABLED")["entry"][0]["changes"][0])
    changes.append(template_update(waba, "unknown_one", "en_US", "REJECTED")["entry"][0]["changes"][0])
    changes.append(template_update(waba, "welcome", "en_US", "SOMETHING_NEW")["entry"][0]["changes"][0])
    changes.append({"field": "messages", "value": {"messaging_product": "whatsapp", "statuses": [
        {"id": "wamid.none", "status": "delivered", "timestamp": str(int(time.time())), "recipient_id": "1"}]}})
    j = assert_ok(post_meta(gw, body))
    assert j["data"] == {"applied": 0, "duplicate": 0, "unknown": 1}
    assert status_of(gw, waba, "order_update", "en_US") == "DISABLED"
    assert status_of(gw, waba, "welcome", "en_US") == "APPROVED"
    assert status_of(gw, waba, "unknown_one", "en_US") is None
    # Template changes alone are recorded too.
    assert_ok(post_meta(gw, template_update(waba, "order_update", "en_US", "APPROVED")))
    assert status_of(gw, waba, "order_update", "en_US") == "APPROVED"


def test_status_webhook_bad_signature_changes_nothing(gw):
    """A template change signed with another secret (or not at all) is 401 invalid_signature
    and the status stays."""
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE)
    tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 5, 15)
    body = template_update(waba, "order_update", "en_US", "DISABLED")
    assert_error(post_meta(gw, body, secret="not-the-secret"), 401, "invalid_signature", "X-Hub-Signature-256")
    raw = json.dumps(body).encode()
    assert_error(gw.request("POST", "/webhooks/meta", headers=[("Content-Type", "application/json")], body=raw),
                 401, "invalid_signature")
    assert status_of(gw, waba, "order_update", "en_US") == "APPROVED"


# ---- the periodic sync -----------------------------------------------------------------------------

@pytest.fixture
def gw10(make_server, fresh_db, tmp_path):
    """A gateway that syncs each WABA every 10 s (OMNIGATE_TEMPLATE_SYNC_S's minimum)."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=2, env={"OMNIGATE_TEMPLATE_SYNC_S": "10"})
    yield srv
    srv.sim.stop()


def test_periodic_sync_picks_up_changes(gw10):
    """Every OMNIGATE_TEMPLATE_SYNC_S a WABA is read again: a template Meta changed without a
    webhook, one it added and one it deleted show within the period; each run schedules the
    next."""
    gw = gw10
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE[:3])
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 3, 15)
    # Changed behind the gateway's back: no webhook, only the next sync can tell.
    load(gw.sim, waba, [meta_template("order_update", status="PAUSED"), CATALOGUE[1], meta_template("added")])
    assert wait_for(lambda: rows(gw, waba) == [("added", "en_US", "APPROVED"), ("order_update", "en_US", "PAUSED"),
                                               ("order_update", "id", "APPROVED")], 25), rows(gw, waba)
    assert len(meta_requests(gw.sim, waba)) >= 2
    due = steps_of(gw, t["id"])
    assert len(due) == 1 and due[0][0] == waba and -1 <= int(due[0][1]) <= 10


def test_periodic_sync_failure_retries_later(gw10):
    """A periodic sync Meta fails keeps the catalogue, logs a warning naming the WABA and Meta's
    error (not the token), and is tried again OG_TPL_SYNC_RETRY_S (60 s) later."""
    gw = gw10
    waba = new_waba()
    load(gw.sim, waba, CATALOGUE[:2])
    t = tenant_with(gw, waba)
    assert wait_for(lambda: count(gw, waba) == 2, 15)
    load(gw.sim, waba, [meta_template("other")], list_behaviour="error")
    warned = lambda: [r for r in gw.log_records() if r.get("msg") == "template sync failed; tried again later"]
    assert wait_for(warned, 25)
    w = warned()[0]
    assert w["wabaId"] == waba and w["tenant"] == t["id"] and w["httpStatus"] == 500 and w["retryInS"] == 60
    assert META_TOKEN not in gw.stderr()
    assert count(gw, waba) == 2
    due = steps_of(gw, t["id"])
    assert len(due) == 1 and 50 <= int(due[0][1]) <= 60


def test_step_of_a_removed_waba_ends(gw10):
    """When the tenant's numbers no longer name a WABA, that WABA's step closes at its next run
    and is not scheduled again."""
    gw = gw10
    wa, wb = new_waba(), new_waba()
    load(gw.sim, wa, CATALOGUE[:1])
    load(gw.sim, wb, CATALOGUE[:2])
    t = tenant_with(gw, wa)
    assert wait_for(lambda: count(gw, wa) == 1, 15)
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"settings": {"channels": {"whatsapp_meta": {
        "numbers": {WA_FROM: {"wabaId": wb}}}}}}))
    assert wait_for(lambda: count(gw, wb) == 2, 15)
    assert wait_for(lambda: [r for r, _ in steps_of(gw, t["id"])] == [wb], 25), steps_of(gw, t["id"])
