"""Issue 21 (API.md §17): the admin mirrors of a tenant's webhook deliveries,
GET /admin/tenants/{id}/webhook/deliveries and
POST /admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry, on the real gateway and
PostgreSQL with a real loopback receiver (test_webhooks_out.py's): the same pages, filters and
items the tenant gets, the same retry, behind the admin token."""

import uuid

from conftest import assert_error, assert_ok
from gwlib import admin, call, new_token
from test_webhooks_out import TO, deliveries, delivery, gw, rows, rx, send, set_webhook, until  # noqa: F401


def mirror(gw, query="", tenant=None):
    return admin(gw, "GET", "/admin/tenants/%s/webhook/deliveries%s" % (tenant or gw.tenant["id"], query))


def test_admin_deliveries_equal_the_tenant_view(gw, rx):
    """Every page and filter of the mirror is byte for byte the tenant's own answer; bad input
    is the same 422; another tenant's deliveries never show."""
    set_webhook(gw, rx.url(), ["message.sent"])
    for i in range(3):
        assert_ok(send(gw, {"to": TO, "text": "m%d" % i, "channels": ["sms"]}))
    until(lambda: len(rows(gw, "status = 'delivered'")) == 3, 10, "three delivered")
    other = assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "other", "unifiedApiEnabled": True}),
                      201)["data"]["id"]
    for q in ["", "?limit=1", "?limit=2", "?status=delivered", "?status=pending", "?status=delivered&limit=2"]:
        cursor = None
        while True:
            full = q + (("&" if q else "?") + "cursor=" + cursor if cursor else "")
            mine = call(gw, "GET", "/api/webhooks/deliveries" + full, token=gw.token)
            theirs = mirror(gw, full)
            assert mine.status == 200 and theirs.body == mine.body, (full, mine, theirs)
            cursor = theirs.json()["data"]["nextCursor"]
            if cursor is None:
                break
    for q, field in (("?status=nope", "status"), ("?limit=0", "limit"), ("?cursor=abc", "cursor"), ("?foo=1", "foo")):
        mine = call(gw, "GET", "/api/webhooks/deliveries" + q, token=gw.token)
        theirs = assert_error(mirror(gw, q), 422, "validation_failed", field)
        assert theirs == mine.json()
    assert assert_ok(mirror(gw, tenant=other))["data"] == {"items": [], "nextCursor": None}


def test_admin_retry_queues_one_more_try(gw, rx):
    """The admin retry of a tenant's delivery queues a try now (the receiver gets the same
    webhook-id again); another tenant's delivery, a malformed id or an unknown tenant is 404."""
    set_webhook(gw, rx.url(), ["message.sent"])
    assert_ok(send(gw, {"to": TO, "text": "again", "channels": ["sms"]}))
    until(lambda: len(rows(gw, "status = 'delivered'")) == 1, 10, "delivered")
    wid = deliveries(gw)["items"][0]["id"]
    other = assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "other", "unifiedApiEnabled": True}),
                      201)["data"]["id"]
    path = "/admin/tenants/%s/webhook/deliveries/%s/retry"
    assert_error(admin(gw, "POST", path % (other, wid)), 404, "not_found")
    assert_error(admin(gw, "POST", path % (uuid.uuid4(), wid)), 404, "not_found")
    assert_error(admin(gw, "POST", path % ("not-a-uuid", wid)), 404, "not_found")
    assert_error(admin(gw, "POST", path % (gw.tenant["id"], "msg_nope")), 404, "not_found")
    n = len(rx.got())
    d = assert_ok(admin(gw, "POST", path % (gw.tenant["id"], wid)))["data"]
    assert d["id"] == wid and d["status"] == "pending"
    until(lambda: len(rx.got()) == n + 1, 10, "the retried try")
    assert rx.got()[-1]["headers"]["webhook-id"] == wid
    until(lambda: len(delivery(gw, wid)["tries"]) == 2, 10, "the second try recorded")


def test_admin_deliveries_need_the_admin_token(gw):
    """No token, a wrong one or the tenant's own token: 401 on both mirrors; an unknown tenant's
    list is 404."""
    tok = new_token(gw, gw.tenant["id"])["token"]
    tid = gw.tenant["id"]
    for token in (None, "wrong", tok):
        assert_error(call(gw, "GET", "/admin/tenants/%s/webhook/deliveries" % tid, token=token), 401, "unauthorized")
        assert_error(call(gw, "POST", "/admin/tenants/%s/webhook/deliveries/msg_%s/retry" % (tid, "0" * 32),
                          token=token), 401, "unauthorized")
    assert_error(mirror(gw, tenant=uuid.uuid4()), 404, "not_found")
    assert_error(mirror(gw, tenant="nope"), 404, "not_found")
