"""Issue 35: QR sessions (API.md §23) end to end, the gateway against the simulator's WAHA session
API (test/sim/sessions.c) over HTTP: a tenant with a `keys` token starts its number's session
(the session created on WAHA with its webhook pointed back at the gateway and signed with the
server's secret), sees it wait for a scan through WAHA's session.status events, gets the QR code
as a PNG, has its whatsapp_qr number skipped (session_not_connected) until the phone links,
then sends on it; stop and logout; the admin mirrors; another tenant sees none of it."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, assert_error, assert_ok, wait_for
from gwlib import SETTINGS_ALL, SIM_QR_KEY, WAHA_SECRET, admin, call, linked_gateway, new_tenant, new_token, query_url

SESSION = "shop-1"
QR_FROM = "6281234567001"
LINKED = "+6281234567001"
TO = "+6281299990001"


def settings(session=SESSION, number=QR_FROM):
    s = json.loads(json.dumps(SETTINGS_ALL))
    s["channels"]["whatsapp_qr"]["numbers"] = {number: {"session": session}}
    s["defaultWhatsappFrom"] = number
    s["channels"]["whatsapp_meta"]["numbers"] = {number: s["channels"]["whatsapp_meta"]["numbers"][
        SETTINGS_ALL["defaultWhatsappFrom"]]}
    return s


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = linked_gateway(make_server, fresh_db, tmp_path)
    srv.tenant = new_tenant(srv, settings=settings())
    srv.token = new_token(srv, srv.tenant["id"], scopes=["send", "logs", "keys"])["token"]
    yield srv
    srv.sim.stop()


def sim_call(gw, method, path, body=None):
    return gw.sim._call(method, path, body)


def session(gw, token=None, name=SESSION):
    return call(gw, "GET", "/api/whatsapp/sessions/" + name, token=token or gw.token)


def status_is(gw, want):
    r = session(gw)
    return r.status == 200 and json.loads(r.body)["data"]["status"] == want


def send(gw, channels):
    return call(gw, "POST", "/api/omni/send", token=gw.token,
                body={"to": TO, "text": "hello", "channels": channels})


def steady(pred, hold=1.5, timeout=10):
    """pred held on every try for `hold` seconds on end (longer than a worker's token cache,
    OMNIGATE_AUTH_TTL_MS = 1 s, so every worker has read the change), within `timeout`."""
    since = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            since = since or time.monotonic()
            if time.monotonic() - since >= hold:
                return True
        else:
            since = None
        time.sleep(0.05)
    return False


def skipped_qr(r):
    d = json.loads(r.body)["data"]
    return r.status == 200 and {"channel": "whatsapp_qr", "reason": "session_not_connected"} in d["skipped"]


def test_link_a_session_by_its_qr_code_then_send_on_it(gw):
    assert_error(session(gw), 404, "not_found")
    r = call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token)
    d = assert_ok(r)["data"]
    assert d["name"] == SESSION and d["status"] in ("STARTING", "SCAN_QR_CODE") and d["number"] is None
    # What WAHA was asked: the session, started, its webhook back at the gateway, signed.
    create = [q for q in gw.sim.requests("whatsapp_qr") if q.get("path") == "/api/sessions" and q.get("method") == "POST"]
    assert create, gw.sim.requests("whatsapp_qr")
    body = json.loads(create[-1]["body"])
    hook = body["config"]["webhooks"][0]
    assert body["name"] == SESSION and body["start"] is True
    assert hook["url"] == "http://127.0.0.1:%d/webhooks/waha" % gw.port
    assert sorted(hook["events"]) == ["message", "message.ack", "session.status"]
    assert hook["hmac"]["key"] == WAHA_SECRET

    # WAHA's session.status event says it waits for a scan: the QR is there, as a PNG.
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    qr = call(gw, "GET", "/api/whatsapp/sessions/%s/qr" % SESSION, token=gw.token)
    assert qr.status == 200 and qr.header("Content-Type") == "image/png"
    assert qr.body[:8] == b"\x89PNG\r\n\x1a\n" and len(qr.body) > 100

    # Known not WORKING: the number is skipped, the next channel sends.
    # (Each worker learns it within its token cache's second: every check waits for it.)
    assert steady(lambda: skipped_qr(send(gw, ["whatsapp_qr", "sms"])))
    assert_error(send(gw, ["whatsapp_qr"]), 422, "no_channel_available")

    # The phone scans: WORKING with its number, the QR is gone, the number sends again.
    sim_call(gw, "POST", "/__sim/waha/sessions/%s/scan" % SESSION, {"number": LINKED})
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)
    assert json.loads(session(gw).body)["data"]["number"] == LINKED
    assert_error(call(gw, "GET", "/api/whatsapp/sessions/%s/qr" % SESSION, token=gw.token), 409,
                 "session_not_scanning")

    def sends_on_qr():
        r = send(gw, ["whatsapp_qr", "sms"])
        return r.status == 200 and json.loads(r.body)["data"]["winningChannel"] == "whatsapp_qr"
    assert steady(sends_on_qr)

    # The phone unlinks (an event only): skipped again.
    sim_call(gw, "POST", "/__sim/waha/sessions/%s/status" % SESSION, {"status": "SCAN_QR_CODE"})
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    assert json.loads(session(gw).body)["data"]["number"] is None
    assert steady(lambda: skipped_qr(send(gw, ["whatsapp_qr", "sms"])))


def test_stop_logout_and_the_admin_mirrors(gw):
    base = "/admin/tenants/%s/whatsapp/sessions/%s" % (gw.tenant["id"], SESSION)
    assert_ok(admin(gw, "POST", base + "/start"))
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    qr = admin(gw, "GET", base + "/qr")
    assert qr.status == 200 and qr.body[:4] == b"\x89PNG"
    sim_call(gw, "POST", "/__sim/waha/sessions/%s/scan" % SESSION, {"number": LINKED})
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)
    assert assert_ok(admin(gw, "GET", base))["data"] == json.loads(session(gw).body)["data"]

    d = assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/stop" % SESSION, token=gw.token))["data"]
    assert d["status"] == "STOPPED" and d["number"] == LINKED  # stopped, still linked
    assert steady(lambda: skipped_qr(send(gw, ["whatsapp_qr", "sms"])))
    # Started again: WAHA has the link, no scan needed.
    assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)

    d = assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/logout" % SESSION, token=gw.token))["data"]
    assert d["number"] is None
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)  # WAHA restarts it, asking for a scan
    rows = query_url(gw.db_url, "SELECT status, number FROM qr_sessions WHERE name = '%s'" % SESSION)
    assert rows == [("SCAN_QR_CODE", "")]  # NULL reads as ''


def test_who_may_manage_which_session(gw):
    # A session none of the tenant's numbers uses; a malformed name.
    assert_error(call(gw, "POST", "/api/whatsapp/sessions/other/start", token=gw.token), 404, "not_found")
    assert_error(call(gw, "POST", "/api/whatsapp/sessions/a%20b/start", token=gw.token), 404, "not_found")
    # Without the keys scope.
    plain = new_token(gw, gw.tenant["id"])["token"]
    assert_error(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=plain), 403,
                 "insufficient_scope")
    assert_error(call(gw, "GET", "/api/whatsapp/sessions/%s" % SESSION, token=plain), 403, "insufficient_scope")
    # Another tenant: its own session is its own; this tenant's is not.
    other = new_tenant(gw, settings=settings(session="other-shop", number="6281234567002"))
    token = new_token(gw, other["id"], scopes=["keys"])["token"]
    assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    assert_error(session(gw, token=token), 404, "not_found")
    assert_error(call(gw, "GET", "/api/whatsapp/sessions/%s/qr" % SESSION, token=token), 404, "not_found")
    assert_error(call(gw, "POST", "/api/whatsapp/sessions/%s/stop" % SESSION, token=token), 404, "not_found")
    assert_error(session(gw, token=token, name="other-shop"), 404, "not_found")  # never started
    # The admin mirror of an unknown tenant.
    assert_error(admin(gw, "GET", "/admin/tenants/00000000-0000-4000-8000-000000000000/whatsapp/sessions/x"),
                 404, "not_found")


def test_an_event_signed_with_another_secret_changes_nothing(gw):
    assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    event = json.dumps({"id": "evt_1", "timestamp": 9999999999999, "event": "session.status",
                        "session": SESSION, "me": None, "payload": {"name": SESSION, "status": "WORKING"},
                        "engine": "WEBJS", "environment": {"tier": "CORE"}}).encode()
    r = gw.request("POST", "/webhooks/waha", body=event,
                   headers=[("Content-Type", "application/json"), ("X-Webhook-Hmac", "00" * 64),
                            ("X-Webhook-Hmac-Algorithm", "sha512")])
    assert r.status == 401
    assert status_is(gw, "SCAN_QR_CODE")


def qr_put_sql():
    """qr_session_put's SQL, as the gateway prepares it (src/tools/embed_queries.py reads it)."""
    sys.dont_write_bytecode = True  # no __pycache__ left in src/tools
    sys.path.insert(0, os.path.join(ROOT, "src", "tools"))
    import embed_queries
    found, _ = embed_queries.load([os.path.join(ROOT, "sql", "queries", "qr_sessions.sql")])
    return found["qr_session_put"].sql.strip().rstrip(";")


def test_an_answer_never_hides_a_newer_event(gw):
    """WAHA's answer to a call is written as of when the call was sent: a session.status event that
    happened since and was applied first stays (CI once saw a logout's STARTING answer overwrite the
    SCAN_QR_CODE event WAHA sent 50 ms later, until the next QR code 20 s on); an event of later
    still replaces the answer. In SQL with set times, then through the gateway with WAHA's STARTING
    ending at once, start and stop over and over."""
    tid, t0 = gw.tenant["id"], 1764300000000
    assert query_url(gw.db_url, "SELECT og_qr_session_event('%s', 'SCAN_QR_CODE', NULL, to_timestamp(%d / 1000.0), NULL) "
                                "IS NOT NULL" % (SESSION, t0 + 50)) == [("t",)]
    put = "PREPARE p AS %s;\nEXECUTE p('%s', '%s', 'STARTING', NULL, 'false', '%d', '%d');\n"
    out = query_url(gw.db_url, put % (qr_put_sql(), tid, SESSION, t0, t0 + 5))
    assert json.loads(out[-1][0])["status"] == "SCAN_QR_CODE"  # the answer is older: the session as it stands
    out = query_url(gw.db_url, put % (qr_put_sql(), tid, SESSION, t0 + 100, t0 + 105))
    assert json.loads(out[-1][0])["status"] == "STARTING"  # a call sent after the event: its answer
    assert query_url(gw.db_url, "SELECT og_qr_session_event('%s', 'WORKING', NULL, to_timestamp(%d / 1000.0), NULL) "
                                "IS NOT NULL" % (SESSION, t0 + 150)) == [("t",)]
    assert query_url(gw.db_url, "SELECT status FROM qr_sessions WHERE name = '%s'" % SESSION) == [("WORKING",)]

    query_url(gw.db_url, "DELETE FROM qr_sessions")
    sim_call(gw, "PUT", "/__sim/waha/settings", {"startingMs": 0})
    for _ in range(6):
        assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))
        assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 3)  # not STARTING until the next code
        assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/stop" % SESSION, token=gw.token))
        assert wait_for(lambda: status_is(gw, "STOPPED"), 3)


def test_an_answer_racing_the_first_event_returns_the_session(gw):
    """The route's write of WAHA's answer meets the row a session.status event is inserting: it
    waits for the event's transaction, and the session it returns must be the row as the event
    committed it (a read of the row after the upsert used the statement's snapshot, taken before
    the event committed: no row, and the route's worker crashed on it; seen by deploy/run.sh).
    One session holds the event's insert open while the answer's statement waits for it."""
    tid, t0 = gw.tenant["id"], 1764400000000
    query_url(gw.db_url, "DELETE FROM qr_sessions")
    event = subprocess.Popen(["psql", gw.db_url, "-XAtq", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        event.stdin.write("BEGIN;\nSELECT og_qr_session_event('%s', 'SCAN_QR_CODE', NULL, to_timestamp(%d / 1000.0), "
                          "NULL) IS NOT NULL;\n" % (SESSION, t0 + 50))
        event.stdin.flush()
        assert event.stdout.readline().strip() == "t"
        box = []
        put = "PREPARE p AS %s;\nEXECUTE p('%s', '%s', 'STARTING', NULL, 'false', '%d', '%d');\n"
        th = threading.Thread(target=lambda: box.append(query_url(gw.db_url, put % (qr_put_sql(), tid, SESSION, t0,
                                                                                     t0 + 5))))
        th.start()
        assert wait_for(lambda: query_url(gw.db_url, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                                                     "'Lock' AND (query LIKE 'EXECUTE p(%' OR query LIKE 'PREPARE p AS%')")
                        == [("1",)], 10)
        event.stdin.write("COMMIT;\n")
        event.stdin.flush()
        th.join(10)
        assert not th.is_alive()
    finally:
        event.stdin.close()
        event.wait(10)
    assert len(box) == 1 and len(box[0]) == 1, box  # one row: the session
    assert json.loads(box[0][0][0])["status"] == "SCAN_QR_CODE"  # the event is newer than the call: it stays
    assert query_url(gw.db_url, "SELECT status FROM qr_sessions WHERE name = '%s'" % SESSION) == [("SCAN_QR_CODE",)]


def test_a_logout_answer_names_no_number_whatever_its_events_said(gw):
    """WAHA's events of a logout reach the gateway before its answer: STOPPED still naming the
    account it unlinks, then STARTING naming none (which keeps the number known). Applied first,
    they are newer than the call, and the answer's number was dropped with its status: CI saw a
    logout answered with the old number. The number is as of the answer, so the logout answers
    none; the stop keeps it (still linked); the scan that follows the QR code is newer than both.
    The simulator's WAHA answers 300 ms after its events; STARTING lasts 2 s."""
    assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    sim_call(gw, "POST", "/__sim/waha/sessions/%s/scan" % SESSION, {"number": LINKED})
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)
    assert sim_call(gw, "PUT", "/__sim/waha/settings", {"actionAnswerMs": 300, "startingMs": 2000})["data"][
        "actionAnswerMs"] == 300

    d = assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/stop" % SESSION, token=gw.token))["data"]
    assert d["status"] == "STOPPED" and d["number"] == LINKED, d
    d = assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=gw.token))["data"]
    assert d["status"] == "STARTING" and d["number"] == LINKED, d
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)

    d = assert_ok(call(gw, "POST", "/api/whatsapp/sessions/%s/logout" % SESSION, token=gw.token))["data"]
    assert d["status"] == "STARTING" and d["number"] is None, d
    assert wait_for(lambda: status_is(gw, "SCAN_QR_CODE"), 10)
    assert json.loads(session(gw).body)["data"]["number"] is None
    sim_call(gw, "POST", "/__sim/waha/sessions/%s/scan" % SESSION, {"number": "+6281234567002"})
    assert wait_for(lambda: status_is(gw, "WORKING"), 10)
    assert json.loads(session(gw).body)["data"]["number"] == "+6281234567002"


@pytest.mark.parametrize("missing", ["OMNIGATE_PUBLIC_URL", "OMNIGATE_QR_WEBHOOK_SECRET"])
def test_a_start_that_cannot_make_its_webhook_answers_409(make_server, fresh_db, tmp_path, missing):
    """Without the gateway's public URL or the WAHA server's webhook secret, a start cannot create
    the session (its webhook would not reach the gateway, or would be unsigned): 409 conflict,
    nothing called on WAHA, and the worker goes on. The answer frees the request's state; the
    call's body was then stored into that freed state (a use after free gcc's -Wuse-after-free
    saw in the release build; ASan's report here)."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, env={missing: ""})
    try:
        tenant = new_tenant(srv, settings=settings())
        token = new_token(srv, tenant["id"], scopes=["send", "logs", "keys"])["token"]
        r = call(srv, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=token)
        assert_error(r, 409, "conflict")
        assert ("OMNIGATE_PUBLIC_URL" if missing == "OMNIGATE_PUBLIC_URL" else "webhook secret") in \
            json.loads(r.body)["message"], r
        try:  # no session was made on WAHA
            urllib.request.urlopen(urllib.request.Request(srv.sim.url + "/api/sessions/" + SESSION,
                                                          headers={"X-Api-Key": SIM_QR_KEY}), timeout=10)
            raise AssertionError("a session was created on WAHA")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e
        # Ready (either worker may answer, and each is ready once connected and its consent
        # lists loaded: a 503 "consent not loaded yet" seen once in CI).
        assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
        r = call(srv, "POST", "/api/whatsapp/sessions/%s/start" % SESSION, token=token)
        assert_error(r, 409, "conflict")
    finally:
        srv.sim.stop()
