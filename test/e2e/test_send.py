"""Issue 4 end to end: POST /api/omni/send through the real gateway, the real PostgreSQL and
the provider simulator over HTTP (API.md §2, §4, §6, §8)."""

import json
import re
import socket
import threading
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, request_bytes, wait_for
from gwlib import (tenant_gateway, query_url, META_TOKEN, SETTINGS_ALL, SIM_QR_KEY, SIM_SMS_SID, SIM_SMS_TOKEN, admin, call,
                   gateway_env, magic, migrate, new_tenant, new_token, provider_env, set_unified, sim)  # noqa: F401

REF_RE = re.compile(r"^kf_[0-9A-HJKMNP-TV-Z]{26}$")
OK_TO = "+6281234567890"


@pytest.fixture
def gw(make_gateway, sim):
    return tenant_gateway(make_gateway, sim)


def send(gw, body, headers=None, token=None):
    return call(gw, "POST", "/api/omni/send", token=token or gw.token, body=body, headers=headers)


def db(gw, sql):
    return query_url(gw.db_url, sql)


# ---- delivery -----------------------------------------------------------------------------

def test_fallback_first_success_stops(gw, sim):
    """fallback: the first channel succeeds; later channels are neither attempted nor listed,
    and the simulator saw no call for them."""
    j = assert_ok(send(gw, {"to": OK_TO, "text": "hello"}))
    d = j["data"]
    assert REF_RE.match(d["reference"]), d
    assert d["deliveryMode"] == "fallback" and d["winningChannel"] == "whatsapp_qr"
    assert j["message"] == "Message sent via whatsapp_qr"
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_qr"]
    assert d["attempts"][0]["status"] == "sent" and d["attempts"][0]["providerMessageId"]
    assert d["skipped"] == []
    assert len(sim.requests("whatsapp_qr")) == 1
    assert sim.requests("whatsapp_meta") == [] and sim.requests("sms") == []
    rows = db(gw, "SELECT status, winning_channel FROM messages WHERE reference = '%s'" % d["reference"])
    assert rows == [("sent", "whatsapp_qr")]


@pytest.mark.parametrize("digit,code", [(1, "provider_rejected"), (2, "provider_error"), (3, "provider_timeout"),
                                        (4, "provider_unreachable"), (5, "provider_error"),
                                        (6, "provider_rate_limited")])
def test_each_failure_falls_through_to_the_next_channel(gw, sim, digit, code):
    """4xx, 5xx, hang, reset, garbage and 429 from the first channel each fall through to the
    second, which wins; the failed attempt carries the right error code."""
    d = assert_ok(send(gw, {"to": magic(qr=digit), "text": "hi"}))["data"]
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_qr", "whatsapp_meta"]
    assert d["attempts"][0]["status"] == "failed"
    assert d["attempts"][0]["error"]["code"] == code, d
    assert d["winningChannel"] == "whatsapp_meta"
    assert sim.requests("sms") == []


def test_every_channel_fails_502_with_data(gw, sim):
    """Every attempted channel failing is 502 delivery_failed, still with reference and
    attempts; the message is recorded as failed with its three attempts."""
    r = send(gw, {"to": magic(1, 2, 1), "text": "hi"})
    j = assert_error(r, 502, "delivery_failed")
    d = j["data"]
    assert d["winningChannel"] is None and len(d["attempts"]) == 3
    assert [a["error"]["code"] for a in d["attempts"]] == ["provider_rejected", "provider_error",
                                                            "provider_rejected"]
    assert d["attempts"][1]["error"]["httpStatus"] >= 500
    rows = db(gw, "SELECT m.status, count(a.*) FROM messages m JOIN attempts a USING (tenant_id, reference) "
                  "WHERE m.reference = '%s' GROUP BY m.status" % d["reference"])
    assert rows == [("failed", "3")]


def test_all_mode_runs_concurrently(gw, sim):
    """all: three channels answering after 700 ms each complete in well under 3 x 700 ms."""
    t0 = time.monotonic()
    d = assert_ok(send(gw, {"to": magic(7, 7, 7), "text": "hi", "deliveryMode": "all"}))["data"]
    elapsed = time.monotonic() - t0
    assert elapsed < 1.2, elapsed
    assert [a["status"] for a in d["attempts"]] == ["sent", "sent", "sent"]
    assert d["deliveryMode"] == "all" and d["winningChannel"] in ("whatsapp_qr", "whatsapp_meta", "sms")


def test_all_mode_winner_is_first_success_in_time(gw, sim):
    """all: the winner is the first channel to succeed, not the first in order."""
    d = assert_ok(send(gw, {"to": magic(7, 1, 0), "text": "hi", "deliveryMode": "all"}))["data"]
    assert d["winningChannel"] == "sms"
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_qr", "whatsapp_meta", "sms"]
    assert [a["status"] for a in d["attempts"]] == ["sent", "failed", "sent"]


def test_channel_order_and_skipped(gw, sim):
    """Requested order is the fallback order; disabled channels are skipped with a reason."""
    s = json.loads(json.dumps(SETTINGS_ALL))
    s["channels"]["whatsapp_meta"]["enabled"] = False
    admin(gw, "PATCH", "/admin/tenants/" + gw.tenant["id"], {"settings": s})
    # Every worker's auth cache picks the new settings up within its TTL: wait for that.
    assert wait_for(lambda: all(send(gw, {"to": OK_TO, "text": "hi", "channels": ["whatsapp_meta"]}).status == 422
                                for _ in range(8)), 5)
    d = assert_ok(send(gw, {"to": magic(qr=1), "text": "hi", "channels": ["whatsapp_meta", "whatsapp_qr", "sms"]}))["data"]
    assert d["skipped"] == [{"channel": "whatsapp_meta", "reason": "channel_disabled"}]
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_qr", "sms"]
    assert_error(send(gw, {"to": OK_TO, "text": "hi", "channels": ["whatsapp_meta"]}), 422, "no_channel_available")


def test_validation(gw, sim):
    """Each rule of API.md §2 answers 422 naming the field, before anything is sent."""
    cases = [({"text": "hi"}, "validation_failed", "to"),
             ({"to": "6281234567890", "text": "hi"}, "validation_failed", "to"),
             ({"to": "+0812345678", "text": "hi"}, "validation_failed", "to"),
             ({"to": OK_TO, "text": "   \n"}, "validation_failed", "text"),
             ({"to": OK_TO, "text": ""}, "validation_failed", "text"),
             ({"to": OK_TO, "text": "x" * 4097}, "validation_failed", "text"),
             ({"to": OK_TO, "text": "hi", "channels": []}, "validation_failed", "channels"),
             ({"to": OK_TO, "text": "hi", "channels": ["sms", "sms"]}, "validation_failed", "channels"),
             ({"to": OK_TO, "text": "hi", "channels": ["telegram"]}, "validation_failed", "channels"),
             ({"to": OK_TO, "text": "hi", "deliveryMode": "some"}, "validation_failed", "deliveryMode"),
             ({"to": OK_TO, "text": "hi", "deliverymode": "all"}, "unknown_field", "deliverymode"),
             ({"to": OK_TO, "text": "hi", "whatsappFrom": "+6281"}, "validation_failed", "whatsappFrom"),
             ({"to": OK_TO, "text": "hi", "whatsappFrom": "6289999999999"}, "whatsapp_from_not_registered",
              "whatsappFrom"),
             ({"to": OK_TO, "text": "hi", "sender": "OTHER"}, "sender_not_approved", "sender"),
             ({"to": OK_TO, "text": "x" * 1531}, "text_too_long", "text")]
    for body, code, field in cases:
        assert_error(send(gw, body), 422, code, field)
    # 1530 GSM-7 characters are exactly 10 segments: allowed; and a long text without sms is fine.
    assert send(gw, {"to": OK_TO, "text": "x" * 1530}).status == 200
    assert send(gw, {"to": OK_TO, "text": "x" * 4096, "channels": ["whatsapp_meta"]}).status == 200
    assert json.loads(sim.requests("whatsapp_meta")[-1]["body"])["text"]["body"] == "x" * 4096
    # Nothing was sent for any of the refused requests: only the two accepted sends reached a provider.
    assert len(sim.requests()) == 2


def test_wire_formats(gw, sim):
    """Each adapter sends exactly the provider's wire format with its credentials."""
    text = "Olá & welcome = 100% +1"
    assert_ok(send(gw, {"to": magic(1, 1, 0, "4321"), "text": text}))
    to = magic(1, 1, 0, "4321")
    qr = sim.requests("whatsapp_qr")[-1]
    assert qr["method"] == "POST" and qr["path"] == "/api/sendText"
    assert qr["headers"]["x-api-key"] == SIM_QR_KEY
    assert json.loads(qr["body"]) == {"session": "default", "chatId": to[1:] + "@c.us", "text": text}
    meta = sim.requests("whatsapp_meta")[-1]
    assert meta["path"] == "/v21.0/109876543210/messages"
    assert meta["headers"]["authorization"] == "Bearer " + META_TOKEN
    assert json.loads(meta["body"]) == {"messaging_product": "whatsapp", "recipient_type": "individual",
                                        "to": to[1:], "type": "text", "text": {"preview_url": False, "body": text}}
    sms = sim.requests("sms")[-1]
    assert sms["path"] == "/2010-04-01/Accounts/%s/Messages.json" % SIM_SMS_SID
    import base64
    assert sms["headers"]["authorization"] == "Basic " + base64.b64encode(
        ("%s:%s" % (SIM_SMS_SID, SIM_SMS_TOKEN)).encode()).decode()
    assert sms["headers"]["content-type"].startswith("application/x-www-form-urlencoded")
    assert urllib.parse.parse_qs(sms["body"]) == {"To": [to], "From": ["ACME"], "Body": [text]}


def test_database_down_answers_503_and_calls_no_provider(make_server, pg_private, sim):
    """The pending row cannot be committed: 503 unavailable, and no provider was called."""
    sim.clear()
    migrate(pg_private.url)
    srv = make_server(env=gateway_env(pg_private.url, provider_env(sim)), workers=1)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(srv, settings=SETTINGS_ALL)
    tok = new_token(srv, t["id"])["token"]
    assert_ok(call(srv, "POST", "/api/omni/send", token=tok, body={"to": OK_TO, "text": "warm"}))
    sim.clear()
    pg_private.stop()
    r = call(srv, "POST", "/api/omni/send", token=tok, body={"to": OK_TO, "text": "during outage"})
    assert_error(r, 503, "unavailable")
    assert sim.requests() == []
    pg_private.start()


# ---- idempotency ----------------------------------------------------------------------------

def test_idempotent_repeat_replays_without_sending(gw, sim):
    """Same key + same body: the first answer again with Idempotency-Replayed, nothing sent."""
    body = {"to": OK_TO, "text": "once"}
    h = [("Idempotency-Key", "order-42")]
    r1 = send(gw, body, headers=h)
    d1 = assert_ok(r1)["data"]
    r2 = send(gw, body, headers=h)
    d2 = assert_ok(r2)["data"]
    assert r2.header("Idempotency-Replayed") == "true"
    assert d2 == d1
    assert len(sim.requests("whatsapp_qr")) == 1
    assert_error(send(gw, {"to": OK_TO, "text": "other"}, headers=h), 422, "idempotency_key_reused")


def test_idempotency_in_flight_409(gw, sim):
    """A repeat while the first request is in flight answers 409 with Retry-After: 1."""
    body = {"to": magic(7, 0, 0), "text": "slow"}
    h = [("Idempotency-Key", "slow-1")]
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", send(gw, body, headers=h)))
    th.start()
    # In flight: the first request has reached the provider (which answers after 700 ms).
    assert wait_for(lambda: len(sim.requests("whatsapp_qr", to=body["to"])) == 1, 5)
    r = send(gw, body, headers=h)
    assert_error(r, 409, "idempotency_in_progress")
    assert r.header("Retry-After") == "1"
    th.join(10)
    assert_ok(out["r"])


def test_idempotent_repeat_on_second_instance(make_gateway, sim, fresh_db):
    """The key holds across instances: a repeat sent to another instance sends nothing."""
    sim.clear()
    a = make_gateway(env=provider_env(sim))
    b = make_gateway(env=provider_env(sim), url=fresh_db)
    for s in (a, b):
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(a, settings=SETTINGS_ALL)
    tok = new_token(a, t["id"])["token"]
    body = {"to": OK_TO, "text": "cross"}
    h = [("Idempotency-Key", "x-instance")]
    d1 = assert_ok(call(a, "POST", "/api/omni/send", token=tok, body=body, headers=h))["data"]
    r2 = call(b, "POST", "/api/omni/send", token=tok, body=body, headers=h)
    assert assert_ok(r2)["data"]["reference"] == d1["reference"]
    assert r2.header("Idempotency-Replayed") == "true"
    assert len(sim.requests("whatsapp_qr")) == 1


# ---- logs and durability ----------------------------------------------------------------------

def test_logs_show_every_attempt_right_after_the_answer(gw, sim):
    """The unified log has the message with all its attempts as soon as the send answered;
    an SMS attempt also appears in the SMS log with source omni."""
    d = assert_ok(send(gw, {"to": magic(1, 2, 0), "text": "logged"}))["data"]
    j = assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + d["reference"], token=gw.token))
    items = j["data"]["items"]
    assert len(items) == 1
    it = items[0]
    assert it["status"] == "sent" and it["winningChannel"] == "sms" and it["text"] == "logged"
    assert [(a["channel"], a["status"]) for a in it["attempts"]] == [
        ("whatsapp_qr", "failed"), ("whatsapp_meta", "failed"), ("sms", "sent")]
    assert all(a["attemptedAt"].endswith("Z") for a in it["attempts"])
    assert it["attempts"][0]["error"]["code"] == "provider_rejected"
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + d["reference"], token=gw.token))["data"]["items"]
    assert len(sms) == 1 and sms[0]["source"] == "omni" and sms[0]["segments"] == 1 and sms[0]["encoding"] == "gsm7"


def test_logs_paging_covers_every_record_once(gw, sim):
    """Cursor paging returns every record exactly once, newest first."""
    refs = [assert_ok(send(gw, {"to": OK_TO, "text": "m%d" % i}))["data"]["reference"] for i in range(7)]
    seen, cursor = [], None
    while True:
        q = "/api/omni/logs?limit=3" + ("&cursor=" + cursor if cursor else "")
        d = assert_ok(call(gw, "GET", q, token=gw.token))["data"]
        seen += [it["reference"] for it in d["items"]]
        cursor = d["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(refs))


def test_disconnecting_client_cancels_nothing(gw, sim):
    """A client that hangs up mid-send does not cancel it: the message completes and is logged."""
    to = magic(7, 0, 0, "7777")
    body = json.dumps({"to": to, "text": "bye"})
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(request_bytes("POST", "/api/omni/send", [("Authorization", "Bearer " + gw.token),
                                                        ("Content-Type", "application/json")], body))
    assert wait_for(lambda: sim.requests(to=to), 5)  # the send reached a provider: now hang up
    s.close()

    def logged():
        items = assert_ok(call(gw, "GET", "/api/omni/logs?to=" + urllib.parse.quote(to), token=gw.token))["data"]["items"]
        return items and items[0]["status"] == "sent"
    assert wait_for(logged, 5)


def test_pending_left_by_a_crash_marked_unknown_at_start(make_gateway, fresh_db, sim):
    """Messages a crash left pending (older than any send could run) are marked unknown when an
    instance starts."""
    a = make_gateway(env=provider_env(sim))
    assert wait_for(lambda: a.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(a, settings=SETTINGS_ALL)
    query_url(fresh_db, "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, "
                        "created_at) VALUES ('%s', 'kf_01AAAAAAAAAAAAAAAAAAAAAAAA', '+6281234567890', 'x', "
                        "'fallback', '{sms}', now() - interval '1 hour')" % t["id"])
    b = make_gateway(env=provider_env(sim), url=fresh_db)
    assert wait_for(lambda: b.request("GET", "/readyz").status == 200, 10)
    assert query_url(fresh_db, "SELECT status FROM messages WHERE reference = 'kf_01AAAAAAAAAAAAAAAAAAAAAAAA'") == [
        ("unknown",)]


# ---- access control and configuration ---------------------------------------------------------

def test_plan_lock_and_scope_refuse_before_sending(gw, sim):
    """A token without the send scope gets 403 insufficient_scope; a locked plan gets 403
    unified_api_locked; neither reaches a provider."""
    logs_only = new_token(gw, gw.tenant["id"], scopes=["logs"])["token"]
    assert_error(send(gw, {"to": OK_TO, "text": "hi"}, token=logs_only), 403, "insufficient_scope")
    set_unified(gw, gw.tenant["id"], False)
    # Every worker's auth cache picks the lock up within its TTL (a logs call sends nothing).
    assert wait_for(lambda: all(call(gw, "GET", "/api/omni/logs", token=gw.token).status == 403
                                for _ in range(8)), 5)
    assert_error(send(gw, {"to": OK_TO, "text": "hi"}), 403, "unified_api_locked")
    assert sim.requests() == []


def test_unconfigured_channel_is_a_not_configured_attempt(make_gateway, sim):
    """A channel whose provider has no configuration fails its attempt with not_configured
    (nothing sent for it) and the fallback goes on to the next channel."""
    sim.clear()
    env = provider_env(sim)
    del env["OMNIGATE_QR_BASE_URL"]
    srv = make_gateway(env=env)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(srv, settings=SETTINGS_ALL)
    tok = new_token(srv, t["id"])["token"]
    d = assert_ok(call(srv, "POST", "/api/omni/send", token=tok, body={"to": OK_TO, "text": "hi"}))["data"]
    assert [a["channel"] for a in d["attempts"]] == ["whatsapp_qr", "whatsapp_meta"]
    assert d["attempts"][0]["error"]["code"] == "not_configured"
    assert sim.requests("whatsapp_qr") == []


def test_logs_filters(gw, sim):
    """status, channel, to and reference filters select exactly the matching messages; a bad
    filter value is 422 naming it."""
    ok = assert_ok(send(gw, {"to": OK_TO, "text": "a"}))["data"]["reference"]
    r = send(gw, {"to": magic(1, 1, 1), "text": "b"})
    assert r.status == 502
    failed = r.json()["data"]["reference"]
    via_sms = assert_ok(send(gw, {"to": magic(1, 1, 0), "text": "c"}))["data"]["reference"]

    def refs(q):
        return [it["reference"] for it in assert_ok(call(gw, "GET", "/api/omni/logs?" + q, token=gw.token))["data"]["items"]]
    assert refs("status=failed") == [failed]
    assert refs("status=sent") == [via_sms, ok]
    # channel selects messages with an attempt on that channel (docs/api-decisions.md)
    assert refs("channel=sms") == [via_sms, failed]
    assert refs("channel=whatsapp_qr") == [via_sms, failed, ok]
    assert refs("to=" + urllib.parse.quote(OK_TO)) == [ok]
    assert refs("reference=" + ok) == [ok]
    assert refs("since=2000-01-01T00:00:00.000Z&until=2999-01-01T00:00:00.000Z") == [via_sms, failed, ok]
    for q, field in (("status=bogus", "status"), ("channel=fax", "channel"), ("since=yesterday", "since"),
                     ("limit=0", "limit"), ("limit=501", "limit")):
        assert_error(call(gw, "GET", "/api/omni/logs?" + q, token=gw.token), 422, "validation_failed", field)


def test_gateway_runs_as_an_ordinary_role_that_owns_its_schema(gw, pg_session):
    """The gateway's connections are of role omnigate, which is no superuser and cannot create
    databases or roles, and every table and function its migrations made is omnigate's: a send
    works on those grants alone (as deploy/pg.sh sets them up), so a grant the code needs and
    the schema lacks fails here, not in production."""
    assert_ok(send(gw, {"to": magic(1, 0, 0), "text": "grants"}))
    db = gw.db_url.split("?")[0].rsplit("/", 1)[1]
    roles = pg_session.query(
        "SELECT DISTINCT r.rolname, r.rolsuper::text, r.rolcreatedb::text, r.rolcreaterole::text "
        "FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid "
        "WHERE a.datname = '%s' AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()" % db,
        db=db, user="postgres")
    assert roles == [("omnigate", "false", "false", "false")], roles
    owners = pg_session.query(
        "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace "
        "UNION SELECT DISTINCT pg_get_userbyid(p.proowner) FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace",
        db=db, user="postgres")
    assert owners == [("omnigate",)], owners
