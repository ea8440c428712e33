"""Issue 3 end to end: migrations, tenants, tokens, auth, plan lock and the admin API, on a
real PostgreSQL cluster started by the harness (no mock database)."""

import os
import re
import subprocess
import time

import pytest

from conftest import ROOT, assert_error, assert_ok, base_env, free_port, omnigate_bin, wait_for
from gwlib import (query_url, ADMIN_TOKEN, SECRET, admin, call, cli, gateway_env, migrate, new_tenant, new_token,
                   set_unified)

TOKEN_RE = re.compile(r"^kft_[0-9A-Za-z]{40}$")
SETTINGS = {
    "defaultChannels": ["whatsapp_meta", "sms"],
    "defaultWhatsappFrom": "6281234567890",
    "rateLimitPerSecond": 200,
    "channels": {
        "whatsapp_qr": {"enabled": False, "numbers": {"6281234567890": {"session": "default"}}},
        "whatsapp_meta": {"enabled": True, "numbers": {"6281234567890": {
            "phoneNumberId": "109876543210", "accessToken": "EAAGsecretsecretsecret1234"}}},
        "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"},
    },
}


# ---- migrations ---------------------------------------------------------------------------

def test_migrate_is_idempotent(fresh_db):
    """A second `omnigate migrate` applies nothing and leaves one row per migration."""
    first = migrate(fresh_db)
    for name in migration_names():
        assert "applied migration " + name in first.stderr
    second = migrate(fresh_db)
    assert "0 migrations applied" in second.stderr
    rows = query_url(fresh_db, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert rows == [(str(i + 1), n[4:]) for i, n in enumerate(migration_names())]


def test_concurrent_migrations_are_safe(fresh_db):
    """Five instances migrating the same empty database at once all succeed; each migration is
    applied exactly once (advisory lock)."""
    procs = [subprocess.Popen([omnigate_bin(), "migrate"], env=base_env(gateway_env(fresh_db)),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    names = migration_names()
    for name in names:
        assert sum(o[1].count("applied migration " + name) for o in outs) == 1, (name, outs)
    rows = query_url(fresh_db, "SELECT version FROM schema_migrations ORDER BY version")
    assert rows == [(str(i + 1),) for i in range(len(names))]


def migration_names():
    """The migrations in sql/, as `omnigate migrate` names them (001_init, ...)."""
    sql = os.path.join(ROOT, "sql")
    return sorted(f[:-4] for f in os.listdir(sql) if re.match(r"^\d{3}_\w+\.sql$", f))


def test_serve_refuses_an_older_schema(fresh_db, make_server):
    """serve on an unmigrated database stops at start with one line naming the setting and the
    fix (exit 2); with OMNIGATE_AUTO_MIGRATE=1 it migrates and serves."""
    p = subprocess.run([omnigate_bin(), "serve", "--listen", "127.0.0.1:%d" % free_port()],
                       env=base_env(gateway_env(fresh_db)), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    assert "OMNIGATE_DATABASE_URL" in p.stderr and "omnigate migrate" in p.stderr, p.stderr
    srv = make_server(env=gateway_env(fresh_db, {"OMNIGATE_AUTO_MIGRATE": "1"}))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)


def test_serve_with_database_needs_secret(fresh_db):
    """A database without OMNIGATE_SECRET is a configuration error naming the setting."""
    env = gateway_env(fresh_db)
    del env["OMNIGATE_SECRET"]
    p = subprocess.run([omnigate_bin(), "serve"], env=base_env(env), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("omnigate: OMNIGATE_SECRET"), p.stderr


# ---- admin API ----------------------------------------------------------------------------

@pytest.fixture
def gw(make_gateway):
    srv = make_gateway(workers=2)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    return srv


def test_readyz_ready_with_database(gw):
    """/readyz is 200 once the database is reachable (each worker connects on its own, so the
    first answers may come from a worker still connecting: wait for the condition)."""
    assert wait_for(lambda: all(gw.request("GET", "/readyz").status == 200 for _ in range(4)), 10)
    assert assert_ok(gw.request("GET", "/readyz"))["data"] == {"status": "ready"}


def test_admin_needs_admin_token(gw):
    """Admin routes: 401 + WWW-Authenticate without, or with a wrong, admin token; a tenant
    token is not an admin token."""
    r = call(gw, "POST", "/admin/tenants", body={"name": "x"})
    assert_error(r, 401, "unauthorized")
    assert r.header("WWW-Authenticate", "").startswith("Bearer")
    assert_error(call(gw, "POST", "/admin/tenants", token="wrong-admin-token-xxxx", body={"name": "x"}), 401,
                 "unauthorized")
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])["token"]
    assert_error(call(gw, "GET", "/admin/tenants/" + t["id"], token=tok), 401, "unauthorized")


def test_tenant_create_get_patch(gw):
    """A new tenant starts locked; settings are validated, stored, and secrets come back masked
    in every answer; PATCH merges settings (RFC 7396) and keeps a masked secret sent back."""
    r = admin(gw, "POST", "/admin/tenants", {"name": "Acme", "settings": SETTINGS})
    t = assert_ok(r, 201)["data"]
    assert t["unifiedApiEnabled"] is False
    assert t["name"] == "Acme"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", t["createdAt"])
    meta = t["settings"]["channels"]["whatsapp_meta"]["numbers"]["6281234567890"]
    assert meta["accessToken"] != "EAAGsecretsecretsecret1234" and meta["accessToken"].endswith("1234")
    assert "EAAGsecret" not in r.body.decode()

    g = assert_ok(admin(gw, "GET", "/admin/tenants/" + t["id"]))["data"]
    assert g["settings"] == t["settings"]

    patch = {"unifiedApiEnabled": True, "settings": {"rateLimitPerSecond": 50, "channels": {
        "whatsapp_meta": {"numbers": {"6281234567890": {"accessToken": meta["accessToken"]}}}}}}
    p = assert_ok(admin(gw, "PATCH", "/admin/tenants/" + t["id"], patch))["data"]
    assert p["unifiedApiEnabled"] is True
    assert p["settings"]["rateLimitPerSecond"] == 50
    assert p["settings"]["channels"]["sms"]["senders"] == ["ACME"]
    rows = gw_query(gw, "SELECT settings->'channels'->'whatsapp_meta'->'numbers'->'6281234567890'->>'accessToken' "
                        "FROM tenants WHERE id = '%s'" % t["id"])
    # Kept, and stored sealed (test_secrets_at_rest.py): never in clear.
    assert len(rows) == 1 and rows[0][0].startswith("sealed:v1:") and "EAAGsecret" not in rows[0][0]
    assert p["settings"]["channels"]["whatsapp_meta"]["numbers"]["6281234567890"]["accessToken"] == meta["accessToken"]


def gw_query(gw, sql):
    return query_url(gw.db_url, sql)


def test_tenant_validation(gw):
    """Bad admin input answers 422 naming the field; unknown ids are 404 (malformed ones too)."""
    assert_error(admin(gw, "POST", "/admin/tenants", {"name": ""}), 422, "validation_failed", "name")
    assert_error(admin(gw, "POST", "/admin/tenants", {"nmae": "x"}), 422, "unknown_field", "nmae")
    bad = {"name": "x", "settings": {"channels": {"sms": {"enabled": True, "senders": ["THIS-IS-TOO-LONG"]}}}}
    r = admin(gw, "POST", "/admin/tenants", bad)
    j = assert_error(r, 422, "validation_failed")
    assert "senders" in j["error"]["field"]
    assert_error(admin(gw, "GET", "/admin/tenants/00000000-0000-0000-0000-000000000000"), 404, "not_found")
    assert_error(admin(gw, "GET", "/admin/tenants/not-a-uuid"), 404, "not_found")
    assert_error(admin(gw, "PATCH", "/admin/tenants/00000000-0000-0000-0000-000000000000", {"name": "y"}), 404,
                 "not_found")


def test_pacing_rates_validated(gw):
    """The pacing rates of API.md §19 are stored and answered as sent; a rate out of 0.01-100000
    is 422 validation_failed naming it, and nothing is stored."""
    rates = {"channels": {
        "whatsapp_qr": {"numbers": {"6281234567890": {"session": "default", "messagesPerMinute": 30}}},
        "whatsapp_meta": {"numbers": {"6281234567890": {
            "phoneNumberId": "109876543210", "accessToken": "EAAGsecretsecretsecret1234", "messagesPerSecond": 12.5}}},
        "sms": {"senders": ["ACME"], "messagesPerSecond": {"ACME": 0.5}}}}
    t = assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "Paced", "settings": rates}), 201)["data"]
    chs = t["settings"]["channels"]
    assert chs["whatsapp_qr"]["numbers"]["6281234567890"]["messagesPerMinute"] == 30
    assert chs["whatsapp_meta"]["numbers"]["6281234567890"]["messagesPerSecond"] == 12.5
    assert chs["sms"]["messagesPerSecond"] == {"ACME": 0.5}

    bad = {"settings": {"channels": {"whatsapp_meta": {"numbers": {"6281234567890": {"messagesPerSecond": 0}}}}}}
    assert_error(admin(gw, "PATCH", "/admin/tenants/" + t["id"], bad), 422, "validation_failed",
                 "settings.channels.whatsapp_meta.numbers.6281234567890.messagesPerSecond")
    bad = {"settings": {"channels": {"sms": {"messagesPerSecond": {"ACME": 100001}}}}}
    assert_error(admin(gw, "PATCH", "/admin/tenants/" + t["id"], bad), 422, "validation_failed",
                 "settings.channels.sms.messagesPerSecond.ACME")
    g = assert_ok(admin(gw, "GET", "/admin/tenants/" + t["id"]))["data"]
    assert g["settings"] == t["settings"]


def test_token_creation_refused_while_locked(gw):
    """No token can be generated while the plan locks the unified API (403), until an admin
    enables it; the token is shown once and never listed."""
    t = new_tenant(gw, unified=False)
    assert_error(admin(gw, "POST", "/admin/tenants/%s/tokens" % t["id"], {}), 403, "unified_api_locked")
    set_unified(gw, t["id"], True)
    tok = new_token(gw, t["id"], name="ci")
    assert TOKEN_RE.match(tok["token"]), tok
    assert tok["prefix"] == tok["token"][:len(tok["prefix"])] and len(tok["prefix"]) < 20
    assert sorted(tok["scopes"]) == ["logs", "otp", "send"]
    lst = assert_ok(admin(gw, "GET", "/admin/tenants/%s/tokens" % t["id"]))["data"]["items"]
    assert [x["id"] for x in lst] == [tok["id"]]
    assert "token" not in lst[0] and lst[0]["revokedAt"] is None
    assert tok["token"] not in admin(gw, "GET", "/admin/tenants/%s/tokens" % t["id"]).body.decode()


def test_no_plaintext_token_in_database_dump(gw):
    """Tokens are stored only as keyed hashes: pg_dump contains neither the token nor its
    random part."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])["token"]
    dump = subprocess.run(["pg_dump", gw.db_url], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "api_tokens" in dump
    assert tok not in dump and tok[4:] not in dump and tok[12:] not in dump


# ---- tenant auth ----------------------------------------------------------------------------

def test_401_for_missing_garbage_unknown_and_revoked_tokens(gw):
    """Missing, malformed, unknown and revoked bearer tokens: 401 with WWW-Authenticate."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])
    assert_ok(call(gw, "GET", "/api/sms/logs", token=tok["token"]))
    for token in (None, "garbage", "kft_" + "A" * 40):
        r = call(gw, "GET", "/api/sms/logs", token=token)
        assert_error(r, 401, "unauthorized")
        assert r.header("WWW-Authenticate", "").startswith("Bearer")
    assert_ok(admin(gw, "DELETE", "/admin/tenants/%s/tokens/%s" % (t["id"], tok["id"])))
    assert wait_for(lambda: call(gw, "GET", "/api/sms/logs", token=tok["token"]).status == 401, 3)


def test_scopes(gw):
    """A token without the logs scope gets 403 insufficient_scope on log routes."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"], scopes=["send"])["token"]
    assert_error(call(gw, "GET", "/api/sms/logs", token=tok), 403, "insufficient_scope")
    assert_error(admin(gw, "POST", "/admin/tenants/%s/tokens" % t["id"], {"scopes": ["send", "send"]}), 422,
                 "validation_failed", "scopes")


def test_plan_lock_blocks_unified_routes_only(gw):
    """Locking the plan: unified routes answer 403 unified_api_locked, SMS routes keep working
    with the existing token, and a new token cannot be generated."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])["token"]
    assert_ok(call(gw, "GET", "/api/omni/logs", token=tok))
    set_unified(gw, t["id"], False)
    # Within the auth cache's TTL every worker sees the lock; then all must agree. 32 answers in a
    # row, so that the wait cannot end while one worker (whose cache is still warm) got none of them.
    assert wait_for(lambda: all(call(gw, "GET", "/api/omni/logs", token=tok).status == 403 for _ in range(32)), 5)
    for _ in range(4):
        assert_error(call(gw, "GET", "/api/omni/logs", token=tok), 403, "unified_api_locked")
    assert_ok(call(gw, "GET", "/api/sms/logs", token=tok))
    assert_error(admin(gw, "POST", "/admin/tenants/%s/tokens" % t["id"], {}), 403, "unified_api_locked")


def test_revocation_reaches_a_second_instance_within_2s(make_gateway, fresh_db):
    """Two instances on one database: a token revoked through instance A is refused by
    instance B (which had it cached) within 2 seconds."""
    a = make_gateway(workers=1)
    b = make_gateway(workers=1, url=fresh_db)
    for s in (a, b):
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(a)
    tok = new_token(a, t["id"])
    assert_ok(call(b, "GET", "/api/sms/logs", token=tok["token"]))  # cached on B now
    assert_ok(admin(a, "DELETE", "/admin/tenants/%s/tokens/%s" % (t["id"], tok["id"])))
    t0 = time.monotonic()
    assert wait_for(lambda: call(b, "GET", "/api/sms/logs", token=tok["token"]).status == 401, 2.0, interval=0.05)
    assert time.monotonic() - t0 < 2.0


def test_tenant_isolation(gw):
    """One tenant's token never reaches another tenant's records or tokens (404, not 403)."""
    t1, t2 = new_tenant(gw, name="one"), new_tenant(gw, name="two")
    new_token(gw, t1["id"])
    tok2 = new_token(gw, t2["id"])
    assert_error(admin(gw, "DELETE", "/admin/tenants/%s/tokens/%s" % (t1["id"], tok2["id"])), 404, "not_found")
    assert_ok(call(gw, "GET", "/api/sms/logs", token=tok2["token"]))


def test_last_used_at_written_in_batches(gw):
    """last_used_at is set within about a second of use, not per request."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])
    for _ in range(5):
        assert_ok(call(gw, "GET", "/api/sms/logs", token=tok["token"]))

    def used():
        items = assert_ok(admin(gw, "GET", "/admin/tenants/%s/tokens" % t["id"]))["data"]["items"]
        return items[0]["lastUsedAt"] is not None
    assert wait_for(used, 4)


def test_logs_limit_and_filters_are_validated(gw):
    """limit outside 1-500, malformed cursor/time and unknown parameters are 422 naming them."""
    t = new_tenant(gw)
    tok = new_token(gw, t["id"])["token"]
    for q, field in (("limit=0", "limit"), ("limit=501", "limit"), ("limit=abc", "limit"),
                     ("cursor=zzz", "cursor"), ("since=yesterday", "since"), ("to=12345", "to"),
                     ("status=bogus", "status"), ("chanel=sms", "chanel")):
        assert_error(call(gw, "GET", "/api/omni/logs?" + q, token=tok), 422, "validation_failed", field)
    j = assert_ok(call(gw, "GET", "/api/omni/logs?limit=500&since=2026-01-01T00:00:00Z", token=tok))
    assert j["data"] == {"items": [], "nextCursor": None}


# ---- database outage ----------------------------------------------------------------------

def test_database_outage_503_then_recovery(make_server, pg_private):
    """Database stopped: requests answer 503 quickly and /readyz 503; database back: the same
    gateway serves again within 2 s, without a restart."""
    migrate(pg_private.url)
    srv = make_server(env=gateway_env(pg_private.url), workers=1)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(srv)
    tok = new_token(srv, t["id"])["token"]
    assert_ok(call(srv, "GET", "/api/sms/logs", token=tok))

    pg_private.stop()
    t0 = time.monotonic()
    r = admin(srv, "POST", "/admin/tenants", {"name": "during outage"})
    assert_error(r, 503, "unavailable")
    assert r.header("Retry-After")
    assert time.monotonic() - t0 < 1.0
    assert_error(srv.request("GET", "/readyz"), 503, "unavailable")
    # Once the cached token expires (its TTL), auth needs the database too: 503, fast.
    def fast_503():
        t1 = time.monotonic()
        r = call(srv, "GET", "/api/sms/logs", token=tok)
        assert time.monotonic() - t1 < 1.0
        return r.status == 503 and r.json()["error"]["code"] == "unavailable"
    assert wait_for(fast_503, 5)

    pg_private.start()
    t2 = time.monotonic()
    assert wait_for(lambda: call(srv, "GET", "/api/sms/logs", token=tok).status == 200, 2.0, interval=0.05)
    assert time.monotonic() - t2 < 2.0
    # Log pages use the read pool (docs/persistence.md): the write pool, which /readyz reports,
    # reconnects on its own nudge (each /readyz), within the same 2 s.
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 2.0, interval=0.05)
    assert time.monotonic() - t2 < 2.0
    assert_ok(admin(srv, "POST", "/admin/tenants", {"name": "after outage"}), 201)
