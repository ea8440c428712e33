"""Issue 21 (API.md §17): the admin routes the console needs, on a real PostgreSQL with the real
binary. GET /admin/tenants pages like the logs (limit 1-500, the cursor from nextCursor, newest
first) and filters on part of the name in any case; the admin mirrors of the three logs answer
for any tenant exactly what the tenant itself sees; `omnigate admin` does the same."""

import json
import uuid

from conftest import assert_error, assert_ok, wait_for
from gwlib import (SETTINGS_ALL, WA_FROM, admin, call, cli, new_tenant, new_token, provider_env, sim,  # noqa: F401
                   tenant_gateway)

MIRRORS = [("omni", "/api/omni/logs"), ("sms", "/api/sms/logs"), ("otp", "/api/sms/otp/logs")]


def ready_gateway(make_gateway, env=None):
    srv = make_gateway(env=env)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    return srv


def list_all(srv, query="", limit=2, cursor=None):
    """Every tenant the list shows for `query` from `cursor` on, following nextCursor; and the
    pages' sizes."""
    items, sizes = [], []
    while True:
        q = "limit=%d" % limit + ("&" + query if query else "") + ("&cursor=" + cursor if cursor else "")
        data = assert_ok(admin(srv, "GET", "/admin/tenants?" + q))["data"]
        assert set(data) == {"items", "nextCursor"}
        items += data["items"]
        sizes.append(len(data["items"]))
        cursor = data["nextCursor"]
        if cursor is None:
            return items, sizes
        assert len(sizes) < 50, "the cursor does not advance"


def test_tenant_list_pages_newest_first(make_gateway):
    """Seven tenants in pages of 3: 3, 3, 1, newest first, each once, with nextCursor null on the
    last page; every item is the tenant as GET /admin/tenants/{id} shows it (secrets masked)."""
    srv = ready_gateway(make_gateway)
    made = [new_tenant(srv, name="t%d" % i, settings=SETTINGS_ALL if i == 0 else None) for i in range(7)]
    items, sizes = list_all(srv, limit=3)
    assert sizes == [3, 3, 1]
    assert [t["id"] for t in items] == [t["id"] for t in reversed(made)]
    one = assert_ok(admin(srv, "GET", "/admin/tenants/" + made[0]["id"]))["data"]
    assert items[-1] == one
    meta = items[-1]["settings"]["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"]
    assert meta.startswith("****"), meta
    # The default page is 50; a page as big as what is left says there is no next one.
    data = assert_ok(admin(srv, "GET", "/admin/tenants"))["data"]
    assert len(data["items"]) == 7 and data["nextCursor"] is None
    data = assert_ok(admin(srv, "GET", "/admin/tenants?limit=7"))["data"]
    assert len(data["items"]) == 7 and data["nextCursor"] is None
    # A tenant created between two pages is not shown on the later ones (they are older).
    first = assert_ok(admin(srv, "GET", "/admin/tenants?limit=2"))["data"]
    new_tenant(srv, name="late")
    rest, _ = list_all(srv, cursor=first["nextCursor"], limit=2)
    assert [t["id"] for t in first["items"] + rest] == [t["id"] for t in reversed(made)]


def test_tenant_list_name_filter(make_gateway):
    """name matches part of the name in any case; % and _ are plain characters; paging holds
    under the filter; a name nothing has gives an empty page."""
    srv = ready_gateway(make_gateway)
    names = ["Acme Corp", "ACME Labs", "Beta acme", "Other", "100% real", "a_b", "axb"]
    ids = {n: new_tenant(srv, name=n)["id"] for n in names}

    def shown(q, limit=2):
        items, _ = list_all(srv, "name=" + q, limit=limit)
        return [t["name"] for t in items]

    assert shown("acme") == ["Beta acme", "ACME Labs", "Acme Corp"]
    assert shown("ACME", limit=1) == ["Beta acme", "ACME Labs", "Acme Corp"]
    assert shown("corp") == ["Acme Corp"]
    assert shown("%25") == ["100% real"]
    assert shown("a_b") == ["a_b"]  # not "axb": _ is no wildcard
    assert shown("Acme%20L") == ["ACME Labs"]
    assert shown("nobody") == []
    assert ids


def test_tenant_list_bad_input(make_gateway):
    """Bad paging or filter input is 422 validation_failed naming the parameter."""
    srv = ready_gateway(make_gateway)
    new_tenant(srv)
    for q, field in [("limit=0", "limit"), ("limit=501", "limit"), ("limit=abc", "limit"), ("limit=-1", "limit"),
                     ("limit=", "limit"), ("cursor=kf_nope", "cursor"), ("cursor=", "cursor"),
                     ("name=", "name"), ("name=%ff", "name"), ("nmae=acme", "nmae"), ("to=%2B628123", "to")]:
        assert_error(admin(srv, "GET", "/admin/tenants?" + q), 422, "validation_failed", q.split("=")[0] and field)
    assert len(assert_ok(admin(srv, "GET", "/admin/tenants?limit=500"))["data"]["items"]) == 1


def test_admin_token_required(make_gateway):
    """The list and the mirrors need the admin token: none, a wrong one or a tenant token is 401."""
    srv = ready_gateway(make_gateway)
    t = new_tenant(srv)
    tok = new_token(srv, t["id"])["token"]
    paths = ["/admin/tenants", "/admin/tenants?name=acme"] + \
        ["/admin/tenants/%s/%s/logs" % (t["id"], k) for k, _ in MIRRORS]
    for p in paths:
        for token in (None, "wrong-admin-token", tok):
            r = call(srv, "GET", p, token=token)
            assert_error(r, 401, "unauthorized")
            assert r.header("WWW-Authenticate", "").startswith("Bearer"), r


def test_mirrors_unknown_tenant(make_gateway):
    """A mirror of a tenant that does not exist (or an id that is no UUID) is 404 not_found; bad
    filters on a mirror are 422 like the tenant route's."""
    srv = ready_gateway(make_gateway)
    t = new_tenant(srv)
    for kind, _ in MIRRORS:
        assert_error(admin(srv, "GET", "/admin/tenants/%s/%s/logs" % (uuid.uuid4(), kind)), 404, "not_found")
        assert_error(admin(srv, "GET", "/admin/tenants/not-a-uuid/%s/logs" % kind), 404, "not_found")
        assert_error(admin(srv, "GET", "/admin/tenants/%s/%s/logs?limit=0" % (t["id"], kind)), 422,
                     "validation_failed", "limit")
        assert_error(admin(srv, "GET", "/admin/tenants/%s/%s/logs?status=bogus" % (t["id"], kind)), 422,
                     "validation_failed", "status")
        empty = assert_ok(admin(srv, "GET", "/admin/tenants/%s/%s/logs" % (t["id"], kind)))["data"]
        assert empty == {"items": [], "nextCursor": None}
    assert_error(admin(srv, "GET", "/admin/tenants/%s/sms/logs?channel=sms" % t["id"]), 422, "validation_failed",
                 "channel")
    assert_error(admin(srv, "GET", "/admin/tenants/%s/omni/logs?source=sms" % t["id"]), 422, "validation_failed",
                 "source")


def test_mirrors_equal_the_tenant_view(make_gateway, sim):
    """For every log, filter and page, the admin mirror answers byte for byte what the tenant's
    own route answers; another tenant's records never show; the unified log's mirror answers
    while the tenant's plan is locked (the lock is the tenant's, not the admin's)."""
    srv = tenant_gateway(make_gateway, sim, workers=1)
    tid, tok = srv.tenant["id"], srv.token
    other = new_tenant(srv, name="other", settings=SETTINGS_ALL)
    other_tok = new_token(srv, other["id"])["token"]
    tos = ["+6281234500001", "+6281234500002"]
    for i in range(5):
        assert_ok(call(srv, "POST", "/api/omni/send", tok, {"to": tos[i % 2], "text": "hello %d" % i}))
        assert_ok(call(srv, "POST", "/api/sms/send", tok, {"to": tos[i % 2], "text": "sms %d" % i}))
    assert_ok(call(srv, "POST", "/api/sms/otp/send", tok, {"to": tos[0]}))
    assert_ok(call(srv, "POST", "/api/sms/otp/send", tok, {"to": tos[1]}))
    assert_ok(call(srv, "POST", "/api/omni/send", other_tok, {"to": tos[0], "text": "not yours"}))

    queries = ["", "limit=2", "limit=1", "to=%2B6281234500001", "limit=3&to=%2B6281234500002",
               "since=2020-01-01T00:00:00Z", "until=2020-01-01T00:00:00Z"]
    extra = {"omni": ["status=sent", "channel=whatsapp_qr", "status=sent&channel=whatsapp_qr"],
             "sms": ["status=sent", "source=otp", "source=sms"], "otp": ["status=pending", "status=verified"]}
    for kind, path in MIRRORS:
        for q in queries + extra[kind]:
            cursor, pages = None, 0
            while True:
                full = q + ("&" if q else "") + ("cursor=" + cursor if cursor else "")
                mine = call(srv, "GET", path + "?" + full, tok)
                theirs = admin(srv, "GET", "/admin/tenants/%s/%s/logs?%s" % (tid, kind, full))
                assert mine.status == 200 and theirs.status == 200, (kind, full, mine, theirs)
                assert theirs.body == mine.body, (kind, full)
                data = theirs.json()["data"]
                assert "not yours" not in theirs.body.decode()
                pages += 1
                cursor = data["nextCursor"]
                if cursor is None:
                    break
            assert pages >= 1
    all_omni = admin(srv, "GET", "/admin/tenants/%s/omni/logs" % tid).json()["data"]["items"]
    assert len(all_omni) == 5
    # Locked: the tenant's unified route is refused, the admin's mirror still reads.
    assert_ok(admin(srv, "PATCH", "/admin/tenants/" + tid, {"unifiedApiEnabled": False}))
    assert wait_for(lambda: call(srv, "GET", "/api/omni/logs", tok).status == 403, 5)
    locked = assert_ok(admin(srv, "GET", "/admin/tenants/%s/omni/logs" % tid))["data"]["items"]
    assert locked == all_omni


def test_cli_lists_and_reads_logs(make_gateway, sim):
    """`omnigate admin list-tenants` and `omnigate admin logs` print what the HTTP routes answer."""
    srv = tenant_gateway(make_gateway, sim, workers=1)
    tid, tok = srv.tenant["id"], srv.token
    new_tenant(srv, name="Zeta Shop")
    for i in range(3):
        assert_ok(call(srv, "POST", "/api/omni/send", tok, {"to": "+6281234500001", "text": "cli %d" % i}))

    def run(*args):
        p = cli(["admin"] + list(args), srv.db_url)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    http = assert_ok(admin(srv, "GET", "/admin/tenants?name=zeta"))["data"]
    out = run("list-tenants", "name=zeta")
    assert [t["id"] for t in out["items"]] == [t["id"] for t in http["items"]] and out["nextCursor"] is None
    page = run("list-tenants", "limit=1")
    assert len(page["items"]) == 1 and page["nextCursor"] == page["items"][0]["id"]
    rest = run("list-tenants", "limit=5", "cursor=" + page["nextCursor"])
    assert len(rest["items"]) == 1 and rest["nextCursor"] is None

    for q in [[], ["limit=2"], ["to=+6281234500001", "status=sent"]]:
        out = run("logs", tid, "omni", *q)
        query = "&".join(x.replace("+", "%2B") for x in q)
        assert out == assert_ok(admin(srv, "GET", "/admin/tenants/%s/omni/logs?%s" % (tid, query)))["data"]
    assert len(run("logs", tid, "sms")["items"]) == 0
    bad = cli(["admin", "logs", tid, "omni", "limit=0"], srv.db_url)
    assert bad.returncode == 2 and "limit" in bad.stderr, bad
    bad = cli(["admin", "list-tenants", "nmae=x"], srv.db_url)
    assert bad.returncode == 2 and "nmae" in bad.stderr, bad
    missing = cli(["admin", "logs", str(uuid.uuid4()), "otp"], srv.db_url)
    assert missing.returncode == 1 and "no such tenant" in missing.stderr, missing
