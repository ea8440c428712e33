"""Issue 15 item 6 end to end: provider credentials in tenant settings are sealed at rest
(AES-256-GCM, key from OMNIGATE_SECRET by HKDF; docs/persistence.md, "Secrets at rest"), on the
real binary, a real PostgreSQL and the provider simulator."""

import copy
import json
import subprocess

from conftest import assert_error, assert_ok, base_env, omnigate_bin, wait_for
from gwlib import (META_TOKEN, SETTINGS_ALL, WA_FROM, admin, call, cli, gateway_env, migrate, new_tenant, new_token,
                   provider_env, query_url, tenant_gateway)

TO = "+6281234567890"
OTHER_SECRET = "another-e2e-secret-9876543210"


def stored_token(url, tenant_id):
    """The accessToken of the tenant's whatsapp_meta number as the database holds it."""
    rows = query_url(url, "SELECT settings->'channels'->'whatsapp_meta'->'numbers'->'%s'->>'accessToken' "
                          "FROM tenants WHERE id = '%s'" % (WA_FROM, tenant_id))
    return rows[0][0]


def shown_token(srv, tenant_id):
    """The accessToken as GET /admin/tenants/{id} shows it."""
    t = assert_ok(admin(srv, "GET", "/admin/tenants/" + tenant_id))["data"]
    return t["settings"]["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"]


def send_meta(srv, token, channels=("whatsapp_meta",)):
    return call(srv, "POST", "/api/omni/send", token=token, body={"to": TO, "text": "hi", "channels": list(channels)})


def meta_bearers(sim):
    return [r["headers"]["authorization"] for r in sim.requests("whatsapp_meta")]


def settings_with_token(token):
    s = copy.deepcopy(SETTINGS_ALL)
    s["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"] = token
    return s


def insert_clear_tenant(url, token):
    """A tenant written as a binary without sealing wrote it: its accessToken in clear."""
    text = json.dumps(settings_with_token(token)).replace("'", "''")
    rows = query_url(url, "INSERT INTO tenants (name, unified_api_enabled, settings) VALUES ('legacy', true, '%s') "
                          "RETURNING id" % text)
    return rows[0][0]


def assert_no_secret_in_log(srv, *secrets):
    log = srv.stderr()
    for s in secrets:
        assert s not in log
    assert "sealed:v1:" not in log


def test_admin_api_seals_and_sends(make_gateway, sim):
    """A token set through the admin API is stored sealed (never in clear), shown masked from
    its clear value, sent in clear to the provider; a masked echo keeps the stored token, a new
    value is sealed in its turn."""
    gw = tenant_gateway(make_gateway, sim)
    tid = gw.tenant["id"]
    stored = stored_token(gw.db_url, tid)
    assert stored.startswith("sealed:v1:") and META_TOKEN not in stored
    assert shown_token(gw, tid) == "****" + META_TOKEN[-4:]
    assert_ok(send_meta(gw, gw.token))
    assert meta_bearers(sim) == ["Bearer " + META_TOKEN]

    masked = shown_token(gw, tid)
    patch = {"settings": {"channels": {"whatsapp_meta": {"numbers": {WA_FROM: {"accessToken": masked}}}}}}
    assert_ok(admin(gw, "PATCH", "/admin/tenants/" + tid, patch))
    # Kept: sealed again (a fresh nonce on every write), the same token inside.
    kept = stored_token(gw.db_url, tid)
    assert kept.startswith("sealed:v1:") and META_TOKEN not in kept
    assert shown_token(gw, tid) == masked

    new = "EAAGrotatedToken0123456789wxyz"
    patch["settings"]["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"] = new
    p = assert_ok(admin(gw, "PATCH", "/admin/tenants/" + tid, patch))["data"]
    assert p["settings"]["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"] == "****wxyz"
    resealed = stored_token(gw.db_url, tid)
    assert resealed.startswith("sealed:v1:") and new not in resealed
    # The auth cache refreshes the tenant within its TTL; from then on the new token is sent.
    assert wait_for(lambda: send_meta(gw, gw.token).status == 200 and meta_bearers(sim)[-1] == "Bearer " + new, 5)
    assert_no_secret_in_log(gw, META_TOKEN, new)


def test_pg_dump_shows_no_credential(make_gateway, sim):
    """pg_dump of a database with tenants (made by the admin API and by the command line)
    contains sealed values and no credential, nor any long part of one."""
    gw = tenant_gateway(make_gateway, sim)
    other = new_tenant(gw, name="cli-made")
    cli_token = "EAAGcliMadeToken5555566666"
    p = cli(["admin", "set-settings", other["id"].upper(), json.dumps(settings_with_token(cli_token))], gw.db_url)
    assert p.returncode == 0, p.stderr
    assert cli_token not in p.stdout and "****6666" in p.stdout
    assert stored_token(gw.db_url, other["id"]).startswith("sealed:v1:")
    dump = subprocess.run(["pg_dump", gw.db_url], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "tenants" in dump and dump.count("sealed:v1:") >= 2
    for tok in (META_TOKEN, cli_token):
        for cut in range(0, len(tok) - 12 + 1):
            assert tok[cut:cut + 12] not in dump, tok[cut:cut + 12]
    # The command line's tenant opens for the gateway: it was sealed with the canonical id.
    tok = new_token(gw, other["id"])["token"]
    assert_ok(send_meta(gw, tok))
    assert meta_bearers(sim)[-1] == "Bearer " + cli_token


def test_migrate_seals_clear_credentials(make_gateway, sim):
    """A credential stored in clear (by a binary that did not seal) still sends; `omnigate
    migrate` without OMNIGATE_SECRET says it cannot seal it, with it seals it in place (the
    settings otherwise unchanged, updated_at kept), and the sealed value sends the same token."""
    sim.clear()
    gw = make_gateway(env=provider_env(sim))
    legacy = "EAAGlegacyClearToken0123456789"
    tid = insert_clear_tenant(gw.db_url, legacy)
    tok = new_token(gw, tid)["token"]
    assert_ok(send_meta(gw, tok))
    assert meta_bearers(sim) == ["Bearer " + legacy]
    before = query_url(gw.db_url, "SELECT settings #- '{channels,whatsapp_meta,numbers,%s,accessToken}', updated_at "
                                  "FROM tenants WHERE id = '%s'" % (WA_FROM, tid))

    env = base_env({"OMNIGATE_DATABASE_URL": gw.db_url})
    p = subprocess.run([omnigate_bin(), "migrate"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "OMNIGATE_SECRET is not set" in p.stderr and "1 tenant " in p.stderr
    assert stored_token(gw.db_url, tid) == legacy

    p = migrate(gw.db_url)
    assert "sealed the provider credentials stored in clear of 1 tenant" in p.stderr
    sealed = stored_token(gw.db_url, tid)
    assert sealed.startswith("sealed:v1:") and legacy not in sealed
    after = query_url(gw.db_url, "SELECT settings #- '{channels,whatsapp_meta,numbers,%s,accessToken}', updated_at "
                                 "FROM tenants WHERE id = '%s'" % (WA_FROM, tid))
    assert after == before
    assert "sealed the provider" not in migrate(gw.db_url).stderr  # nothing left to seal
    assert stored_token(gw.db_url, tid) == sealed

    # A gateway with nothing cached reads the sealed value: the same token goes out.
    fresh = make_gateway(env=provider_env(sim), url=gw.db_url)
    assert wait_for(lambda: fresh.request("GET", "/readyz").status == 200, 10)
    assert_ok(send_meta(fresh, tok))
    assert meta_bearers(sim) == ["Bearer " + legacy] * 2
    dump = subprocess.run(["pg_dump", gw.db_url], capture_output=True, text=True, timeout=60, check=True).stdout
    assert legacy not in dump
    assert_no_secret_in_log(gw, legacy)
    assert_no_secret_in_log(fresh, legacy)


def test_serve_seals_at_start(make_server, fresh_db, sim):
    """`omnigate serve` seals the credentials left in clear before its workers start (the
    schema was migrated by an earlier binary, or by `migrate` without OMNIGATE_SECRET)."""
    sim.clear()
    env = base_env({"OMNIGATE_DATABASE_URL": fresh_db})
    assert subprocess.run([omnigate_bin(), "migrate"], env=env, capture_output=True, timeout=60).returncode == 0
    legacy = "EAAGlegacyAtStart0123456789"
    tid = insert_clear_tenant(fresh_db, legacy)
    srv = make_server(env=gateway_env(fresh_db, provider_env(sim)))
    srv.db_url = fresh_db
    assert stored_token(fresh_db, tid).startswith("sealed:v1:")
    assert "sealed the provider credentials stored in clear of 1 tenant" in srv.stderr()
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    assert_ok(send_meta(srv, new_token(srv, tid)["token"]))
    assert meta_bearers(sim) == ["Bearer " + legacy]
    assert_no_secret_in_log(srv, legacy)


def test_changed_secret_fails_not_configured(make_gateway, make_server, sim):
    """With another OMNIGATE_SECRET a sealed token does not open: that channel's attempts fail
    not_configured saying why, the other channels still send, a warning names the tenant (not
    the value), GET shows "****"; setting the token again repairs the channel."""
    gw = tenant_gateway(make_gateway, sim)
    tid = gw.tenant["id"]
    gw.stop()
    sim.clear()
    srv = make_server(env=gateway_env(gw.db_url, provider_env(sim, {"OMNIGATE_SECRET": OTHER_SECRET})))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    tok = new_token(srv, tid)["token"]  # API tokens are keyed by OMNIGATE_SECRET too: a new one

    j = assert_error(send_meta(srv, tok), 502, "delivery_failed")
    err = j["data"]["attempts"][0]["error"]
    assert err["code"] == "not_configured"
    assert "does not open with this OMNIGATE_SECRET" in err["message"]
    d = assert_ok(send_meta(srv, tok, channels=("whatsapp_meta", "sms")))["data"]
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_meta", "sms"] and d["winningChannel"] == "sms"
    assert meta_bearers(sim) == []

    warnings = [r for r in srv.log_records() if "does not open" in r.get("msg", "")]
    assert warnings and all(r.get("tenantId") == tid and r.get("level") == "warn" for r in warnings), warnings
    assert shown_token(srv, tid) == "****"
    # A masked echo keeps what is stored; it still does not open.
    patch = {"settings": {"channels": {"whatsapp_meta": {"numbers": {WA_FROM: {"accessToken": "****"}}}}}}
    assert_ok(admin(srv, "PATCH", "/admin/tenants/" + tid, patch))
    assert shown_token(srv, tid) == "****"

    new = "EAAGafterRotation0123456789"
    patch["settings"]["channels"]["whatsapp_meta"]["numbers"][WA_FROM]["accessToken"] = new
    assert_ok(admin(srv, "PATCH", "/admin/tenants/" + tid, patch))
    assert shown_token(srv, tid) == "****" + new[-4:]
    assert wait_for(lambda: send_meta(srv, tok).status == 200, 5)
    assert meta_bearers(sim) == ["Bearer " + new]
    assert_no_secret_in_log(srv, META_TOKEN, new)


def test_sealed_value_moved_to_another_tenant_does_not_open(make_gateway, sim):
    """The tenant id is the associated data: a sealed token copied into another tenant's
    settings (with database access, without the key) does not open there."""
    gw = tenant_gateway(make_gateway, sim)
    victim = gw.tenant["id"]
    thief = new_tenant(gw, settings=settings_with_token("EAAGthiefOwnToken0123456789"), name="thief")
    query_url(gw.db_url, "UPDATE tenants SET settings = jsonb_set(settings, '{channels,whatsapp_meta,numbers,%s,"
                         "accessToken}', (SELECT settings->'channels'->'whatsapp_meta'->'numbers'->'%s'->"
                         "'accessToken' FROM tenants WHERE id = '%s')) WHERE id = '%s'"
              % (WA_FROM, WA_FROM, victim, thief["id"]))
    assert stored_token(gw.db_url, thief["id"]) == stored_token(gw.db_url, victim)
    tok = new_token(gw, thief["id"])["token"]
    j = assert_error(send_meta(gw, tok), 502, "delivery_failed")
    assert j["data"]["attempts"][0]["error"]["code"] == "not_configured"
    assert meta_bearers(sim) == []
    assert_ok(send_meta(gw, gw.token))
    assert meta_bearers(sim) == ["Bearer " + META_TOKEN]
