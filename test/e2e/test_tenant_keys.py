"""API.md §23 "Keys": a tenant token with scope keys manages its own tenant's tokens and webhook
(GET/POST /api/tokens, DELETE /api/tokens/{id}, GET/PUT/DELETE /api/webhook,
POST /api/webhook/rotate-secret) with the admin routes' bodies and answers, and any tenant token
reads GET /api/tenant. On the real gateway and PostgreSQL, sends going to the provider
simulator. One worker, so that "refused after revocation" is one cache expiry to wait for."""

import itertools
import uuid

import pytest

import test_error_paths
from conftest import assert_error, assert_ok, needs_test_routes, wait_for
from gwlib import admin, call, new_tenant, new_token, set_unified, sim, tenant_gateway  # noqa: F401

KEYS = ["send", "otp", "logs", "keys"]  # every scope, in the order answers list them
DEFAULT = ["send", "otp", "logs"]
HOOK = "https://example.com/omnigate"
_numbers = itertools.count(1)


@pytest.fixture
def gw(make_gateway, sim):
    """A gateway (one worker) with a tenant of every channel (.tenant), a default token (.token)
    and a token with every scope, keys included (.keys)."""
    srv = tenant_gateway(make_gateway, sim, workers=1)
    srv.keys = new_token(srv, srv.tenant["id"], scopes=KEYS, name="console")
    return srv


def number():
    return "+6281299%06d" % next(_numbers)


def sms(gw, token):
    return call(gw, "POST", "/api/sms/send", token=token, body={"to": number(), "text": "hi"})


def tokens(gw, token):
    return call(gw, "GET", "/api/tokens", token=token)


def admin_tokens(gw, tenant_id):
    return assert_ok(admin(gw, "GET", "/admin/tenants/%s/tokens" % tenant_id))["data"]["items"]


def create(gw, token, body=None):
    return call(gw, "POST", "/api/tokens", token=token, body=body if body is not None else {})


def revoke(gw, token, token_id):
    return call(gw, "DELETE", "/api/tokens/%s" % token_id, token=token)


def without_last_used(items):
    """Token items without lastUsedAt, which the calls themselves move (written in batches)."""
    return [{k: v for k, v in t.items() if k != "lastUsedAt"} for t in items]


# ---- tokens -----------------------------------------------------------------------------------

def test_keys_token_lists_creates_and_revokes_its_tenants_tokens(gw):
    """A keys token lists its tenant's tokens as the admin does, creates one that sends (201,
    shown once, default scopes without keys), and revokes it: it is refused from then on."""
    tid = gw.tenant["id"]
    mine = assert_ok(tokens(gw, gw.keys["token"]))["data"]["items"]
    assert without_last_used(mine) == without_last_used(admin_tokens(gw, tid))
    assert len(mine) == 2 and gw.keys["id"] in {t["id"] for t in mine}  # .token and .keys
    assert all("token" not in t for t in mine)

    made = assert_ok(create(gw, gw.keys["token"], {"name": "backend"}), 201)["data"]
    assert made["name"] == "backend" and made["scopes"] == DEFAULT
    assert made["token"].startswith("kft_") and made["prefix"] == made["token"][:len(made["prefix"])]
    listed = assert_ok(tokens(gw, gw.keys["token"]))["data"]["items"]
    assert [t for t in listed if t["id"] == made["id"]] == [
        {"id": made["id"], "name": "backend", "prefix": made["prefix"], "scopes": DEFAULT,
         "createdAt": made["createdAt"], "lastUsedAt": None, "revokedAt": None}]
    assert made["token"] not in tokens(gw, gw.keys["token"]).body.decode()

    assert_ok(sms(gw, made["token"]))
    gone = assert_ok(revoke(gw, gw.keys["token"], made["id"]))["data"]
    assert gone["id"] == made["id"] and gone["revokedAt"] is not None
    assert wait_for(lambda: sms(gw, made["token"]).status == 401, 5), "the revoked token still sends"
    assert_error(sms(gw, made["token"]), 401, "unauthorized")
    again = assert_ok(revoke(gw, gw.keys["token"], made["id"]))["data"]
    assert again["revokedAt"] == gone["revokedAt"]  # revoked once: repeating changes nothing
    assert [t["revokedAt"] for t in admin_tokens(gw, tid) if t["id"] == made["id"]] == [gone["revokedAt"]]
    assert_ok(sms(gw, gw.token))  # the others are untouched


def test_the_answers_are_the_admin_routes_answers(gw):
    """The same body gets the same answer from the tenant route as from the admin route (a token
    apart): the creation's shape, and each refusal of a bad body."""
    tid = gw.tenant["id"]
    path = "/admin/tenants/%s/tokens" % tid
    theirs = assert_ok(admin(gw, "POST", path, {"name": "a", "scopes": ["logs"]}), 201)
    ours = assert_ok(create(gw, gw.keys["token"], {"name": "a", "scopes": ["logs"]}), 201)
    assert set(ours["data"]) == set(theirs["data"]) and ours["message"] == theirs["message"]
    assert ours["data"]["scopes"] == theirs["data"]["scopes"] == ["logs"]
    for body, code, field in (({"scopes": []}, "validation_failed", "scopes"),
                              ({"scopes": ["send", "send"]}, "validation_failed", "scopes"),
                              ({"scopes": ["admin"]}, "validation_failed", "scopes"),
                              ({"scopes": "send"}, "validation_failed", "scopes"),
                              ({"name": "x" * 101}, "validation_failed", "name"),
                              ({"nmae": "typo"}, "unknown_field", "nmae")):
        want = assert_error(admin(gw, "POST", path, body), 422, code, field)
        assert assert_error(create(gw, gw.keys["token"], body), 422, code, field) == want
    want = assert_error(admin(gw, "POST", path, "[1]"), 400, "invalid_json")
    assert assert_error(create(gw, gw.keys["token"], "[1]"), 400, "invalid_json") == want


def test_keys_is_opt_in_and_listed_in_order(gw):
    """A token created without scopes has send, otp and logs, never keys; keys is granted only
    when named, and scopes come back in one order whatever the request's."""
    tid = gw.tenant["id"]
    assert new_token(gw, tid)["scopes"] == DEFAULT
    assert new_token(gw, tid, scopes=["keys", "send"])["scopes"] == ["send", "keys"]
    assert assert_ok(create(gw, gw.keys["token"], {}), 201)["data"]["scopes"] == DEFAULT
    made = assert_ok(create(gw, gw.keys["token"], {"scopes": ["keys", "logs"]}), 201)["data"]
    assert made["scopes"] == ["logs", "keys"]
    assert_ok(tokens(gw, made["token"]))  # a keys token made by a keys token manages keys too


def test_a_token_grants_at_most_its_own_scopes(gw):
    """A token asking for a scope it lacks gets 403 insufficient_scope (field scopes) and nothing
    is created; a body without scopes (send, otp, logs) too, from a token lacking one of them."""
    tid = gw.tenant["id"]
    narrow = new_token(gw, tid, scopes=["logs", "keys"])["token"]
    before = admin_tokens(gw, tid)
    for body in ({"scopes": ["send"]}, {"scopes": ["logs", "otp"]}, {}, {"name": "all"}):
        j = assert_error(create(gw, narrow, body), 403, "insufficient_scope", "scopes")
        assert j["data"] is None
    assert "send" in assert_error(create(gw, narrow, {"scopes": ["send"]}), 403, "insufficient_scope")["message"]
    assert [t["id"] for t in admin_tokens(gw, tid)] == [t["id"] for t in before]
    assert assert_ok(create(gw, narrow, {"scopes": ["logs"]}), 201)["data"]["scopes"] == ["logs"]
    assert assert_ok(create(gw, narrow, {"scopes": ["logs", "keys"]}), 201)["data"]["scopes"] == ["logs", "keys"]


ROUTES = [("GET", "/api/tokens", None), ("POST", "/api/tokens", {}),
          ("DELETE", "/api/tokens/%s" % uuid.uuid4(), None), ("GET", "/api/webhook", None),
          ("PUT", "/api/webhook", {"url": HOOK}), ("DELETE", "/api/webhook", None),
          ("POST", "/api/webhook/rotate-secret", None)]


def test_routes_need_the_keys_scope(gw):
    """Without keys (every other scope held) each route answers 403 insufficient_scope and
    changes nothing; without a token, 401."""
    for method, path, body in ROUTES:
        assert_error(call(gw, method, path, token=gw.token, body=body), 403, "insufficient_scope")
        r = call(gw, method, path, body=body)
        assert_error(r, 401, "unauthorized")
        assert r.header("WWW-Authenticate", "").startswith("Bearer")
    assert_error(admin(gw, "GET", "/admin/tenants/%s/webhook" % gw.tenant["id"]), 404, "not_found")
    assert len(admin_tokens(gw, gw.tenant["id"])) == 2


def test_locked_plan_refuses_creation_until_the_admin_unlocks(gw):
    """While the plan locks the unified API, POST /api/tokens answers 403 unified_api_locked as the
    admin route does, listing and revoking still work; once the admin unlocks it, creation works
    at once."""
    tid = gw.tenant["id"]
    spare = new_token(gw, tid)
    set_unified(gw, tid, False)
    want = assert_error(admin(gw, "POST", "/admin/tenants/%s/tokens" % tid, {}), 403, "unified_api_locked")
    assert assert_error(create(gw, gw.keys["token"], {}), 403, "unified_api_locked") == want
    assert len(assert_ok(tokens(gw, gw.keys["token"]))["data"]["items"]) == 3
    assert assert_ok(revoke(gw, gw.keys["token"], spare["id"]))["data"]["revokedAt"] is not None
    assert len(admin_tokens(gw, tid)) == 3
    set_unified(gw, tid, True)
    made = assert_ok(create(gw, gw.keys["token"], {"scopes": ["send"]}), 201)["data"]
    assert_ok(sms(gw, made["token"]))


def test_a_tenant_never_sees_or_revokes_another_tenants_tokens(gw):
    """Tenant B's keys token lists only B's tokens; revoking A's token through it is 404
    not_found, as an unknown or malformed id is, and A's token keeps working."""
    b = new_tenant(gw, name="other")
    b_keys = new_token(gw, b["id"], scopes=KEYS)
    listed = assert_ok(tokens(gw, b_keys["token"]))["data"]["items"]
    assert [t["id"] for t in listed] == [b_keys["id"]]
    a_token = admin_tokens(gw, gw.tenant["id"])[0]
    for token_id in (a_token["id"], gw.keys["id"], str(uuid.uuid4()), "not-a-uuid"):
        assert_error(revoke(gw, b_keys["token"], token_id), 404, "not_found")
    assert all(t["revokedAt"] is None for t in admin_tokens(gw, gw.tenant["id"]))
    assert_ok(sms(gw, gw.token))
    assert_ok(tokens(gw, gw.keys["token"]))


def test_a_token_may_revoke_itself(gw):
    """Revoking the calling token answers 200; from then on that token is refused (401) and the
    tenant's other tokens are not."""
    me = assert_ok(revoke(gw, gw.keys["token"], gw.keys["id"]))["data"]
    assert me["id"] == gw.keys["id"] and me["revokedAt"] is not None
    assert wait_for(lambda: tokens(gw, gw.keys["token"]).status == 401, 5), "the token still works"
    assert_error(tokens(gw, gw.keys["token"]), 401, "unauthorized")
    assert_ok(sms(gw, gw.token))


# ---- the webhook ------------------------------------------------------------------------------

def hook(gw, method, body=None, token=None, path="/api/webhook"):
    return call(gw, method, path, token=token or gw.keys["token"], body=body)


def admin_hook(gw, method="GET", tenant_id=None):
    return admin(gw, method, "/admin/tenants/%s/webhook" % (tenant_id or gw.tenant["id"]))


def test_webhook_set_read_rotate_delete_through_the_tenant_routes(gw):
    """PUT, GET, rotate-secret and DELETE on /api/webhook act on the tenant's webhook and answer
    what the admin routes show: the secret in clear when created or rotated, masked after."""
    made = assert_ok(hook(gw, "PUT", {"url": HOOK, "events": ["message.delivered"]}))
    assert made["message"] == "the webhook's secret is shown only this once"
    secret = made["data"]["secret"]
    assert secret.startswith("whsec_") and len(secret) > 40
    assert made["data"]["url"] == HOOK and made["data"]["events"] == ["message.delivered"]
    seen = assert_ok(hook(gw, "GET"))["data"]
    assert seen == assert_ok(admin_hook(gw))["data"]
    assert seen["secret"] == "whsec_****" + secret[-4:]

    changed = assert_ok(hook(gw, "PUT", {"url": HOOK + "/v2"}))
    assert changed["message"] == "webhook updated" and changed["data"]["secret"] == seen["secret"]
    assert changed["data"] == assert_ok(admin_hook(gw))["data"]

    rotated = assert_ok(hook(gw, "POST", path="/api/webhook/rotate-secret"))["data"]
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != secret
    assert assert_ok(admin_hook(gw))["data"]["secret"] == "whsec_****" + rotated["secret"][-4:]
    assert_error(hook(gw, "POST", {"x": 1}, path="/api/webhook/rotate-secret"), 422, "validation_failed")

    gone = assert_ok(hook(gw, "DELETE"))
    assert gone["message"] == "webhook deleted" and gone["data"]["url"] == HOOK + "/v2"
    assert_error(hook(gw, "GET"), 404, "not_found")
    assert_error(admin_hook(gw), 404, "not_found")
    assert_error(hook(gw, "DELETE"), 404, "not_found")
    assert_error(hook(gw, "POST", path="/api/webhook/rotate-secret"), 404, "not_found")


def test_webhook_refusals_are_the_admin_routes_refusals(gw):
    """A bad body gets the admin route's exact refusal, and nothing is stored."""
    for body, code, field in (({"url": "http://example.com/"}, "validation_failed", "url"),
                              ({"url": "https://127.0.0.1/"}, "validation_failed", "url"),
                              ({"url": HOOK, "events": ["nope"]}, "validation_failed", "events"),
                              ({}, "validation_failed", "url"),
                              ({"url": HOOK, "secret": "mine"}, "unknown_field", "secret")):
        want = assert_error(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"], body), 422, code, field)
        assert assert_error(hook(gw, "PUT", body), 422, code, field) == want
    assert_error(admin_hook(gw), 404, "not_found")


def test_a_tenant_never_sees_another_tenants_webhook(gw):
    """Tenant B's keys token reads, rotates and deletes only B's webhook: with A's set and B's
    not, B gets 404 and A's is unchanged."""
    assert_ok(hook(gw, "PUT", {"url": HOOK}))
    a_before = assert_ok(admin_hook(gw))["data"]
    b = new_tenant(gw, name="other")
    b_keys = new_token(gw, b["id"], scopes=KEYS)["token"]
    assert_error(hook(gw, "GET", token=b_keys), 404, "not_found")
    assert_error(hook(gw, "POST", token=b_keys, path="/api/webhook/rotate-secret"), 404, "not_found")
    assert_error(hook(gw, "DELETE", token=b_keys), 404, "not_found")
    assert_ok(hook(gw, "PUT", {"url": HOOK + "/b"}, token=b_keys))
    assert assert_ok(admin_hook(gw, tenant_id=b["id"]))["data"]["url"] == HOOK + "/b"
    assert assert_ok(admin_hook(gw))["data"] == a_before


# ---- who is calling -----------------------------------------------------------------------------

def test_get_tenant_says_who_is_calling(gw):
    """GET /api/tenant answers the token's tenant (id, name, unifiedApiEnabled, from the database)
    and the token's own scopes, for a token of any scope, locked plan or not; 401 without a
    valid token."""
    t = gw.tenant
    send_only = new_token(gw, t["id"], scopes=["send"])["token"]
    want = {"id": t["id"], "name": t["name"], "unifiedApiEnabled": True}
    assert assert_ok(call(gw, "GET", "/api/tenant", token=send_only))["data"] == dict(want, scopes=["send"])
    assert assert_ok(call(gw, "GET", "/api/tenant", token=gw.keys["token"]))["data"] == dict(want, scopes=KEYS)
    set_unified(gw, t["id"], False)
    j = assert_ok(call(gw, "GET", "/api/tenant", token=gw.token))["data"]
    assert j == dict(want, unifiedApiEnabled=False, scopes=DEFAULT)
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % t["id"], {"name": "Renamed"}))
    assert assert_ok(call(gw, "GET", "/api/tenant", token=gw.token))["data"]["name"] == "Renamed"
    for token in (None, "garbage", "kft_" + "A" * 40):
        assert_error(call(gw, "GET", "/api/tenant", token=token), 401, "unauthorized")


# ---- every path answers (test_error_paths.py's check on these routes) --------------------------

class KeysScenario(test_error_paths.Scenario):
    """A scenario whose request carries a new token with every scope, keys included."""

    def setup(self, gw, sim):
        token = new_token(gw, gw.tenant["id"], scopes=KEYS)["token"]
        arg = self.prepare(gw, sim) if self.prepare else None
        return lambda: self.run(gw, token, arg)


def spare_token_id(gw, sim):
    return new_token(gw, gw.tenant["id"])["id"]


def with_webhook(gw, sim):
    assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"], {"url": HOOK}))


SCENARIOS = [
    KeysScenario("tenant_self", lambda gw, t, _: call(gw, "GET", "/api/tenant", token=t)),
    KeysScenario("token_list", lambda gw, t, _: tokens(gw, t)),
    KeysScenario("token_create", lambda gw, t, _: create(gw, t, {"scopes": ["logs"]}), ok_status=201),
    KeysScenario("token_revoke", lambda gw, t, tid: revoke(gw, t, tid), prepare=spare_token_id),
    KeysScenario("webhook_put", lambda gw, t, _: call(gw, "PUT", "/api/webhook", token=t, body={"url": HOOK})),
    KeysScenario("webhook_get", lambda gw, t, _: call(gw, "GET", "/api/webhook", token=t), prepare=with_webhook),
    KeysScenario("webhook_rotate", lambda gw, t, _: call(gw, "POST", "/api/webhook/rotate-secret", token=t),
                 prepare=with_webhook),
    KeysScenario("webhook_delete", lambda gw, t, _: call(gw, "DELETE", "/api/webhook", token=t),
                 prepare=with_webhook),
]


@needs_test_routes
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_database_failure_answers(gw, sim, sc):
    """Each statement of the route (the token's lookup included) fails in each of three ways: the
    request still gets an honest 500 or 503 and the worker serves the next one."""
    test_error_paths.test_every_database_failure_answers(gw, sim, sc)
