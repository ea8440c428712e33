"""Issue 18 end to end: tenant webhooks out (API.md §12). The real gateway and PostgreSQL, the
provider simulator calling the gateway back with statuses, and a real HTTP receiver started
here on loopback. Signatures are checked by an implementation of our own (Python's hmac), as a
tenant would. Tests wait on conditions (wait_for), never on sleeps."""

import base64
import hashlib
import hmac
import json
import re
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import assert_error, assert_ok, free_port, wait_for
from gwlib import add_tenant, admin, call, linked_gateway, new_token, query_url

TO = "+6281234500001"
EVENTS = ["message.sent", "message.failed", "message.delivered", "message.read", "message.undelivered",
          "otp.verified", "otp.locked", "message.canceled", "message.expired", "batch.completed",
          "message.received", "recipient.opted_out", "recipient.opted_in"]
# Tests call loopback receivers over http://; the retry schedule is cut 10,000 times (5 s becomes
# 0.5 ms, 10 h becomes 3.6 s) and a receiver has 2 s to answer.
WH_ENV = {"OMNIGATE_WEBHOOK_ALLOW_HTTP": "true", "OMNIGATE_WEBHOOK_ALLOW_PRIVATE": "true",
          "OMNIGATE_WEBHOOK_TIMEOUT_MS": "2000", "OMNIGATE_WEBHOOK_RETRY_DIVISOR": "10000"}


# ---- the receiver ----------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.rx.lock:
            self.server.rx.conns.add(self.connection)

    def finish(self):
        with self.server.rx.lock:
            self.server.rx.conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_POST(self):
        rx = self.server.rx
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        req = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
               "at": time.time()}
        with rx.lock:
            rx.requests.append(req)
            rx.active += 1
            rx.max_active = max(rx.max_active, rx.active)
        try:
            action = rx.behave(req)
            if action == "hang":  # until released, or until the gateway gives up (closes)
                deadline = time.monotonic() + 120
                while not rx.release.is_set() and time.monotonic() < deadline:
                    if select.select([self.connection], [], [], 0.05)[0] and \
                            not self.connection.recv(1, socket.MSG_PEEK):
                        break
                self.close_connection = True
                return
            status, headers, payload = action
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if isinstance(payload, int):  # a body of `payload` bytes, streamed
                if headers.get("Transfer-Encoding") == "chunked":
                    self.end_headers()
                    chunk = b"x" * 65536
                    for _ in range(payload // len(chunk)):
                        self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(payload))
                    self.end_headers()
                    chunk = b"x" * 65536
                    for _ in range(payload // len(chunk)):
                        self.wfile.write(chunk)
            else:
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with rx.lock:
                rx.active -= 1


class Receiver:
    """A webhook receiver on a loopback port: records every request (path, lower-cased headers,
    body, time); `behave(req)` answers (status, headers, body bytes or a size to stream) or
    "hang" (no answer until `release` is set or the client closes). `active` counts requests
    being handled, `max_active` the most at once. It can be stopped and started again."""

    def __init__(self):
        self.port = free_port()
        self.lock = threading.Lock()
        self.requests = []
        self.active = 0
        self.max_active = 0
        self.release = threading.Event()
        self.conns = set()
        self.behave = lambda req: (200, {}, b"ok")
        self.srv = None
        self.start()

    def start(self):
        self.srv = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self.srv.daemon_threads = True
        self.srv.rx = self
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        """Down: no listener, and the keep-alive connections the gateway holds are closed."""
        self.release.set()
        if self.srv is not None:
            self.srv.shutdown()
            self.srv.server_close()
            self.srv = None
        with self.lock:
            for c in list(self.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.release = threading.Event()

    def url(self, path="/hook"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def got(self, pred=lambda r: True):
        with self.lock:
            return [r for r in self.requests if pred(r)]

    def of_type(self, t):
        return self.got(lambda r: json.loads(r["body"])["type"] == t)


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def gw(make_server, fresh_db, tmp_path):
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV))
    yield srv
    srv.sim.stop()


# ---- helpers -----------------------------------------------------------------------------------------

def verify(secret, req):
    """Standard Webhooks: v1,base64(HMAC-SHA256(base64-decoded secret after whsec_, id.ts.body))."""
    key = base64.b64decode(secret[len("whsec_"):])
    h = req["headers"]
    msg = ("%s.%s." % (h["webhook-id"], h["webhook-timestamp"])).encode() + req["body"]
    expected = "v1," + base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(s, expected) for s in h["webhook-signature"].split(" "))


def set_webhook(gw, url, events=None, tenant=None):
    body = {"url": url}
    if events is not None:
        body["events"] = events
    return assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % (tenant or gw.tenant["id"]), body))["data"]


def db(gw, sql):
    return query_url(gw.db_url, sql)


def send(gw, body, token=None):
    return call(gw, "POST", "/api/omni/send", token=token or gw.token, body=body)


def deliveries(gw, query="", token=None):
    r = call(gw, "GET", "/api/webhooks/deliveries" + query, token=token or gw.token)
    return assert_ok(r)["data"]


def delivery(gw, webhook_id):
    for d in deliveries(gw, "?limit=500")["items"]:
        if d["id"] == webhook_id:
            return d
    return None


def rows(gw, where="true"):
    return db(gw, "SELECT webhook_id, type, status, tries FROM webhook_deliveries WHERE %s ORDER BY id" % where)


def until(pred, timeout, what):
    v = wait_for(pred, timeout)
    assert v, "timed out waiting for " + what
    return v


def worker_rss_kib(srv):
    total = 0
    for pid in srv.worker_pids():
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def sms_code(gw, to):
    reqs = [r for r in gw.sim.requests("sms") if urllib.parse.parse_qs(r["body"])["To"] == [to]]
    body = urllib.parse.parse_qs(reqs[-1]["body"])["Body"][0]
    return re.search(r"(\d{4,10})", body).group(1)


# ---- admin -------------------------------------------------------------------------------------------

def test_admin_put_get_rotate_delete(gw, rx):
    """PUT creates the webhook with a whsec_ secret of 32 random bytes shown once; GET masks it;
    a second PUT changes URL and events but keeps the secret; rotate shows a new one once; DELETE
    removes it; the secret is sealed in the database and never logged."""
    tid = gw.tenant["id"]
    w = set_webhook(gw, rx.url())
    secret = w["secret"]
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret) and len(base64.b64decode(secret[6:])) == 32
    assert w["events"] == EVENTS and w["url"] == rx.url() and w["enabled"] is True
    g = assert_ok(admin(gw, "GET", "/admin/tenants/%s/webhook" % tid))["data"]
    assert g["secret"] == "whsec_****" + secret[-4:]
    u = set_webhook(gw, rx.url("/other"), ["message.failed"])
    assert u["secret"] == "whsec_****" + secret[-4:] and u["events"] == ["message.failed"]
    stored = db(gw, "SELECT secret FROM tenant_webhooks WHERE tenant_id = '%s'" % tid)[0][0]
    assert stored.startswith("sealed:v1:") and secret[6:] not in stored
    r = assert_ok(admin(gw, "POST", "/admin/tenants/%s/webhook/rotate-secret" % tid))["data"]
    assert r["secret"].startswith("whsec_") and r["secret"] != secret
    assert_ok(admin(gw, "DELETE", "/admin/tenants/%s/webhook" % tid))
    assert_error(admin(gw, "GET", "/admin/tenants/%s/webhook" % tid), 404, "not_found")
    assert_error(admin(gw, "DELETE", "/admin/tenants/%s/webhook" % tid), 404, "not_found")
    assert_error(admin(gw, "POST", "/admin/tenants/%s/webhook/rotate-secret" % tid), 404, "not_found")
    assert_error(admin(gw, "PUT", "/admin/tenants/%s/webhook" % "00000000-0000-4000-8000-000000000000",
                       {"url": rx.url()}), 404, "not_found")
    for s in (secret, r["secret"]):
        assert s[6:] not in gw.stderr()


def test_admin_validation(make_gateway):
    """With the allow flags off: http:// and address literals that are not public are 422
    naming url; unknown or repeated events are 422 naming events; unknown fields are refused."""
    srv = make_gateway()
    t = assert_ok(admin(srv, "POST", "/admin/tenants", {"name": "v", "unifiedApiEnabled": True}), 201)["data"]
    path = "/admin/tenants/%s/webhook" % t["id"]
    for url in ("http://example.com/hook", "https://127.0.0.1/hook", "https://[::1]/hook", "https://10.1.2.3/",
                "https://[::ffff:127.0.0.1]/", "https://169.254.169.254/latest", "ftp://example.com/",
                "https://user:pw@example.com/", "not a url", ""):
        assert_error(admin(srv, "PUT", path, {"url": url}), 422, "validation_failed", "url")
    assert_error(admin(srv, "PUT", path, {"url": "https://example.com/", "events": ["message.nope"]}), 422,
                 "validation_failed", "events")
    assert_error(admin(srv, "PUT", path, {"url": "https://example.com/", "events": ["otp.locked", "otp.locked"]}),
                 422, "validation_failed", "events")
    assert_error(admin(srv, "PUT", path, {"url": "https://example.com/", "secret": "x"}), 422, "unknown_field",
                 "secret")
    w = assert_ok(admin(srv, "PUT", path, {"url": "https://example.com/hook", "events": ["otp.locked"]}))["data"]
    assert w["events"] == ["otp.locked"] and w["secret"].startswith("whsec_")


def test_cli_webhook_verbs(gw, rx):
    """`omnigate admin set-webhook / get-webhook / rotate-webhook-secret / delete-webhook`: the
    secret printed once, masked otherwise, and the API sees the same webhook."""
    from gwlib import cli
    tid = gw.tenant["id"]
    p = cli(["admin", "set-webhook", tid, rx.url(), "message.sent,otp.verified"], gw.db_url, WH_ENV)
    assert p.returncode == 0, p.stderr
    w = json.loads(p.stdout)
    assert w["events"] == ["message.sent", "otp.verified"] and re.fullmatch(r"whsec_\S{44}", w["secret"])
    g = json.loads(cli(["admin", "get-webhook", tid], gw.db_url).stdout)
    assert g["secret"] == "whsec_****" + w["secret"][-4:]
    assert assert_ok(admin(gw, "GET", "/admin/tenants/%s/webhook" % tid))["data"]["secret"] == g["secret"]
    r = json.loads(cli(["admin", "rotate-webhook-secret", tid], gw.db_url).stdout)
    assert r["secret"] != w["secret"] and r["secret"].startswith("whsec_")
    assert cli(["admin", "set-webhook", tid, "http://x.example/"], gw.db_url).returncode == 2  # http refused
    assert cli(["admin", "delete-webhook", tid], gw.db_url).returncode == 0
    assert cli(["admin", "get-webhook", tid], gw.db_url).returncode == 1


# ---- events and signatures -----------------------------------------------------------------------------

def test_every_event_type_is_signed(gw, rx):
    """Each event type reaches the receiver with webhook-id, webhook-timestamp and a v1
    signature that Python's hmac verifies with the secret; the body is {type, timestamp, data}
    with the message's unified log item (the OTP log item for otp.*)."""
    secret = set_webhook(gw, rx.url())["secret"]
    ok_to, undeliv_to, failed_to = "+6281234500011", "+6281234500012", "+6281234500013"
    gw.sim.rule("whatsapp_meta", "ok", to=ok_to, callback="delivered_read")
    gw.sim.rule("whatsapp_meta", "ok", to=undeliv_to, callback="not_on_whatsapp")
    for ch in ("whatsapp_meta", "sms"):
        gw.sim.rule(ch, "reject", to=failed_to)
    sent = assert_ok(send(gw, {"to": ok_to, "text": "hi", "channels": ["whatsapp_meta"]}))["data"]["reference"]
    undeliv = assert_ok(send(gw, {"to": undeliv_to, "text": "hi", "channels": ["whatsapp_meta"]}))["data"]["reference"]
    r = send(gw, {"to": failed_to, "text": "hi", "channels": ["whatsapp_meta", "sms"]})
    assert r.status == 502
    failed = r.json()["data"]["reference"]
    otp_ok = assert_ok(call(gw, "POST", "/api/sms/otp/send", token=gw.token, body={"to": "+6281234500021"}))
    assert_ok(call(gw, "POST", "/api/sms/otp/verify", token=gw.token,
                   body={"reference": otp_ok["data"]["reference"], "code": sms_code(gw, "+6281234500021")}))
    otp_lock = assert_ok(call(gw, "POST", "/api/sms/otp/send", token=gw.token, body={"to": "+6281234500022"}))
    bad = "0" * 6 if sms_code(gw, "+6281234500022") != "0" * 6 else "1" * 6
    for _ in range(5):
        call(gw, "POST", "/api/sms/otp/verify", token=gw.token,
             body={"reference": otp_lock["data"]["reference"], "code": bad})
    def at(offset):
        t = time.time() + offset
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int((t % 1) * 1000)
    canceled = send(gw, {"to": "+6281234500014", "text": "hi", "channels": ["sms"], "sendAt": at(600)})
    canceled = canceled.json()["data"]["reference"]
    assert_ok(call(gw, "POST", "/api/omni/messages/%s/cancel" % canceled, token=gw.token))
    # Due 50 s ago and valid for 10 s: its validity has passed when it is first claimed.
    expired = send(gw, {"to": "+6281234500015", "text": "hi", "channels": ["sms"], "sendAt": at(-50),
                        "validitySeconds": 10}).json()["data"]["reference"]
    # A batch of one canceled message completes (batch.completed, API.md §20).
    batch = assert_ok(call(gw, "POST", "/api/omni/batches", token=gw.token, body={
        "messages": [{"to": "+6281234500016", "text": "hi", "channels": ["sms"], "sendAt": at(600)}]}), 202)
    batch, in_batch = batch["data"]["batchId"], batch["data"]["references"][0]
    assert_ok(call(gw, "POST", "/api/omni/batches/%s/cancel" % batch, token=gw.token))
    # A recipient writes STOP, then START, on WhatsApp (API.md §21): two message.received, one
    # recipient.opted_out, one recipient.opted_in.
    replier = "+6281234500017"
    for word in ("STOP", "START"):
        assert gw.sim._call("POST", "/__sim/inbound", {"provider": "meta", "phoneNumberId": "109876543210",
                                                      "from": replier, "text": word})["data"]["status"] == 200
    until(lambda: {json.loads(q["body"])["type"] for q in rx.got()} >= set(EVENTS), 20,
          "every event type; got %r" % [json.loads(q["body"])["type"] for q in rx.got()])
    expect = {"message.sent": {sent, undeliv}, "message.delivered": {sent}, "message.read": {sent},
              "message.failed": {failed}, "message.undelivered": {undeliv},
              "otp.verified": {otp_ok["data"]["reference"]}, "otp.locked": {otp_lock["data"]["reference"]},
              "message.canceled": {canceled, in_batch}, "message.expired": {expired}}
    for q in rx.got():
        h = q["headers"]
        assert verify(secret, q), q
        assert re.fullmatch(r"msg_[0-9a-f]{32}", h["webhook-id"])
        assert abs(int(h["webhook-timestamp"]) - time.time()) < 60
        assert h["content-type"] == "application/json"
        assert len(q["body"]) < 20000
        body = json.loads(q["body"])
        assert set(body) == {"type", "timestamp", "data"}
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["timestamp"])
        if body["type"] == "batch.completed":
            assert body["data"]["batchId"] == batch and body["data"]["counts"]["canceled"] == 1, body
            continue
        if body["type"] == "message.received":
            assert body["data"]["from"] == replier and body["data"]["text"] in ("STOP", "START"), body
            continue
        if body["type"].startswith("recipient."):
            assert body["data"] == {"to": replier, "channel": "whatsapp", "source": "keyword",
                                    "reason": "STOP" if body["type"].endswith("out") else "START"}, body
            continue
        assert body["data"]["reference"] in expect[body["type"]], body
    # The batch's message's own message.canceled too, and the second reply's message.received.
    until(lambda: len(rx.got()) == 16, 10, "sixteen events (two message.sent, message.canceled, message.received); "
          "got %r" % sorted(json.loads(q["body"])["type"] for q in rx.got()))
    assert sorted(json.loads(q["body"])["type"] for q in rx.got()) == sorted(
        EVENTS + ["message.sent", "message.canceled", "message.received"])
    by_type = {json.loads(q["body"])["type"]: json.loads(q["body"])["data"] for q in rx.got()}
    assert by_type["message.read"]["status"] == "read"
    assert by_type["message.read"]["attempts"][0]["deliveryStatus"] == "read"
    assert by_type["message.failed"]["status"] == "failed" and len(by_type["message.failed"]["attempts"]) == 2
    assert by_type["message.undelivered"]["status"] == "undelivered"
    assert by_type["otp.verified"]["status"] == "verified" and "code" not in json.dumps(by_type["otp.verified"])
    assert by_type["otp.locked"]["status"] == "locked"
    assert by_type["otp.locked"]["history"][-1]["event"] == "locked"
    # The same item as the logs show (og_message_item serves both).
    log_item = assert_ok(call(gw, "GET", "/api/omni/logs?reference=" + failed, token=gw.token))["data"]["items"][0]
    assert log_item == by_type["message.failed"]


def test_only_subscribed_events_and_no_webhook_no_rows(gw, rx):
    """Events the tenant did not ask for are not written; a tenant without a webhook gets no rows;
    a delivery for each event it asked for."""
    set_webhook(gw, rx.url(), ["message.failed"])
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    gw.sim.rule("sms", "reject", to="+6281234500031")
    assert send(gw, {"to": "+6281234500031", "text": "hi", "channels": ["sms"]}).status == 502
    until(lambda: len(rx.got()) == 1, 10, "the message.failed delivery")
    assert [r[1] for r in rows(gw)] == ["message.failed"]
    tid2 = assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "nohook", "unifiedApiEnabled": True,
                                                          "settings": {"channels": {"sms": {"enabled": True,
                                                                                            "senders": ["ACME"],
                                                                                            "defaultSender": "ACME"}}}}),
                     201)["data"]["id"]
    tok2 = new_token(gw, tid2)["token"]
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}, token=tok2))
    assert rows(gw, "tenant_id = '%s'" % tid2) == []


def test_500_then_200_is_delivered_with_the_same_id(gw, rx):
    """A 500 is retried (after 5 s, cut by the test setting) with the same webhook-id and body,
    and a new timestamp and signature; the delivery ends delivered with both tries listed."""
    secret = set_webhook(gw, rx.url(), ["message.sent"])["secret"]
    answers = iter([(500, {}, b"no")])
    rx.behave = lambda req: next(answers, (200, {}, b"ok"))
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    until(lambda: len(rx.got()) == 2, 10, "two tries")
    a, b = rx.got()
    assert a["headers"]["webhook-id"] == b["headers"]["webhook-id"] and a["body"] == b["body"]
    assert verify(secret, a) and verify(secret, b)
    wid = a["headers"]["webhook-id"]
    d = until(lambda: (delivery(gw, wid) or {}).get("status") == "delivered" and delivery(gw, wid), 10, "delivered")
    assert [t["httpStatus"] for t in d["tries"]] == [500, 200]
    assert d["tries"][0]["error"]["code"] == "http_error" and d["tries"][1]["error"] is None
    assert d["type"] == "message.sent" and d["deliveredAt"] is not None and d["nextTryAt"] is None


def test_retry_after_is_honoured(gw, rx):
    """429 with Retry-After: 2 waits at least 2 s, longer than the (test-shortened) schedule."""
    set_webhook(gw, rx.url(), ["message.sent"])
    answers = iter([(429, {"Retry-After": "2"}, b"slow down")])
    rx.behave = lambda req: next(answers, (200, {}, b"ok"))
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    until(lambda: len(rx.got()) == 2, 15, "the retry")
    a, b = rx.got()
    assert b["at"] - a["at"] >= 1.9, b["at"] - a["at"]


def test_receiver_down_then_up_loses_nothing(gw, rx):
    """The receiver is down for the first tries of 30 events, then up: every event is delivered,
    none lost: as many distinct webhook-ids arrive as deliveries were written."""
    set_webhook(gw, rx.url(), ["message.sent"])
    rx.stop()
    refs = [assert_ok(send(gw, {"to": TO, "text": "n%d" % i, "channels": ["sms"]}))["data"]["reference"]
            for i in range(30)]
    until(lambda: len(rows(gw, "tries >= 2")) == 30, 30, "two failed tries each")
    d = deliveries(gw, "?status=failed&limit=1")["items"][0]
    assert d["tries"][0]["error"]["code"] == "unreachable" and d["tries"][0]["httpStatus"] is None
    rx.start()
    until(lambda: len(rows(gw, "status = 'delivered'")) == 30, 30, "all delivered")
    ids = {q["headers"]["webhook-id"] for q in rx.got()}
    written = {r[0] for r in rows(gw)}
    assert ids == written and len(written) == 30
    assert {json.loads(q["body"])["data"]["reference"] for q in rx.got()} == set(refs)


def test_410_disables_the_webhook(gw, rx):
    """410 disables the webhook at once: its delivery is exhausted after one try, nothing more is
    tried or written until the webhook is set again."""
    set_webhook(gw, rx.url(), ["message.sent"])
    rx.behave = lambda req: (410, {}, b"gone")
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    until(lambda: rows(gw, "status = 'exhausted'"), 10, "the delivery exhausted")
    w = assert_ok(admin(gw, "GET", "/admin/tenants/%s/webhook" % gw.tenant["id"]))["data"]
    assert w["enabled"] is False and w["disabledReason"] == "gone" and w["disabledAt"]
    assert_ok(send(gw, {"to": TO, "text": "after", "channels": ["sms"]}))
    assert len(rows(gw)) == 1 and rows(gw)[0][3] == "1"
    wid = rows(gw)[0][0]
    assert_error(call(gw, "POST", "/api/webhooks/deliveries/%s/retry" % wid, token=gw.token), 409,
                 "webhook_disabled")
    # Setting it again enables it; new events flow.
    rx.behave = lambda req: (200, {}, b"ok")
    set_webhook(gw, rx.url(), ["message.sent"])
    assert_ok(send(gw, {"to": TO, "text": "again", "channels": ["sms"]}))
    until(lambda: len(rx.got()) == 2, 10, "the next event")
    until(lambda: "omnigate_webhooks_disabled 0" in gw.request("GET", "/metrics").body.decode(), 10,
          "the disabled gauge back to 0")
    assert len(rx.got()) == 2  # the 410'd delivery was never tried again


def test_five_days_of_failures_disable(gw, rx):
    """A webhook failing every try since 5 days ago is disabled by its next failure."""
    set_webhook(gw, rx.url(), ["message.sent"])
    rx.behave = lambda req: (500, {}, b"down")
    db(gw, "UPDATE tenant_webhooks SET failing_since = now() - interval '5 days 1 minute'")
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    # psql prints a lone NULL column as nothing, which query_url reads as no row: hence the coalesce.
    until(lambda: db(gw, "SELECT coalesce(disabled_reason, '-') FROM tenant_webhooks") == [("failing",)], 10,
          "disabled")
    assert rows(gw)[0][2] == "exhausted"


def test_exhausted_after_eight_tries(gw, rx):
    """A receiver that always fails gets the first try and 7 retries, then the delivery is
    exhausted."""
    set_webhook(gw, rx.url(), ["message.sent"])
    rx.behave = lambda req: (503, {}, b"down")
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    until(lambda: rows(gw, "status = 'exhausted'"), 30, "exhausted")
    assert len(rx.got()) == 8
    d = deliveries(gw, "?status=exhausted")["items"][0]
    assert len(d["tries"]) == 8 and all(t["httpStatus"] == 503 for t in d["tries"])
    assert d["lastError"] == "http_error" and d["nextTryAt"] is None


# ---- a slow, hostile or odd receiver -------------------------------------------------------------------

def test_hanging_receiver_times_out_and_sends_go_on(gw, rx):
    """A receiver that never answers: at most 8 tries in flight for the tenant, each ending
    `timeout` after OMNIGATE_WEBHOOK_TIMEOUT_MS (2 s here), while sends keep their latency."""
    set_webhook(gw, rx.url(), ["message.sent"])

    def timed_sends(n):
        out = []
        for i in range(n):
            t0 = time.monotonic()
            assert_ok(send(gw, {"to": TO, "text": "t%d" % i, "channels": ["sms"]}))
            out.append(time.monotonic() - t0)
        return sorted(out)

    before = timed_sends(20)
    rx.behave = lambda req: "hang"
    for i in range(12):
        assert_ok(send(gw, {"to": TO, "text": "h%d" % i, "channels": ["sms"]}))
    until(lambda: rx.active == 8, 10, "8 tries hanging")
    during = timed_sends(20)
    assert rx.max_active == 8
    assert during[-1] < max(0.5, 3 * before[-1]), (before, during)
    until(lambda: rows(gw, "last_error = 'timeout'"), 10, "a timeout recorded")
    d = [x for x in deliveries(gw, "?status=failed&limit=50")["items"] if x["tries"]][0]
    t = d["tries"][0]
    assert t["error"]["code"] == "timeout" and 1900 <= t["latencyMs"] < 4000, t
    assert rx.max_active == 8


def test_redirect_is_not_followed(gw, rx):
    """A 302 is a failed try (http_error, httpStatus 302); the Location is never requested."""
    set_webhook(gw, rx.url(), ["message.sent"])
    rx.behave = lambda req: (302, {"Location": rx.url("/elsewhere")}, b"") if req["path"] == "/hook" \
        else (200, {}, b"ok")
    assert_ok(send(gw, {"to": TO, "text": "hi", "channels": ["sms"]}))
    until(lambda: len(rx.got()) >= 2, 10, "the retry")
    assert all(q["path"] == "/hook" for q in rx.got())
    d = deliveries(gw)["items"][0]
    assert d["tries"][0]["httpStatus"] == 302 and d["tries"][0]["error"]["code"] == "http_error"


def test_huge_answer_is_cut_off_without_memory(gw, rx):
    """2xx answers with 10 MiB bodies (announced, and chunked) count as delivered; the gateway
    reads 64 KiB of each and drops it: the workers' memory does not grow with them."""
    set_webhook(gw, rx.url(), ["message.sent"])
    flip = [0]

    def big(req):
        flip[0] += 1
        return (200, {"Transfer-Encoding": "chunked"} if flip[0] % 2 else {}, 10 * 1024 * 1024)
    rx.behave = big
    assert_ok(send(gw, {"to": TO, "text": "warm", "channels": ["sms"]}))
    until(lambda: len(rows(gw, "status = 'delivered'")) == 1, 20, "the first delivered")
    rss0 = worker_rss_kib(gw)
    for i in range(20):
        assert_ok(send(gw, {"to": TO, "text": "b%d" % i, "channels": ["sms"]}))
    until(lambda: len(rows(gw, "status = 'delivered'")) == 21, 60, "all delivered")
    grew = worker_rss_kib(gw) - rss0
    assert grew < 16 * 1024, "workers grew by %d KiB for 20 answers of 10 MiB" % grew


def test_ssrf_guard(make_server, fresh_db, tmp_path, rx):
    """With OMNIGATE_WEBHOOK_ALLOW_PRIVATE off, deliveries to 127.0.0.1, [::1], a private address,
    [::ffff:127.0.0.1] and `localhost` (a name that resolves to loopback) all fail
    blocked_address, checked on the address curl connects to; the receiver is never reached.
    (Address literals are refused at PUT already; they are stored directly here, as if the flag
    had been on then.)"""
    env = dict(WH_ENV, OMNIGATE_WEBHOOK_ALLOW_PRIVATE="false")
    srv = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, env=env))
    try:
        tid = srv.tenant["id"]
        set_webhook(srv, "http://localhost:%d/hook" % rx.port, ["message.sent"])
        urls = ["http://localhost:%d/hook" % rx.port, "http://127.0.0.1:%d/hook" % rx.port,
                "http://[::1]:%d/hook" % rx.port, "http://10.255.255.1:%d/hook" % rx.port,
                "http://[::ffff:127.0.0.1]:%d/hook" % rx.port]
        for i, url in enumerate(urls):
            query_url(srv.db_url, "UPDATE tenant_webhooks SET url = '%s' WHERE tenant_id = '%s'" % (url, tid))
            assert_ok(send(srv, {"to": TO, "text": "s%d" % i, "channels": ["sms"]}))
            until(lambda: query_url(srv.db_url, "SELECT count(DISTINCT delivery_id) FROM webhook_tries "
                                                "WHERE error = 'blocked_address'")[0][0] == str(i + 1), 10,
                  "blocked_address for " + url)
        d = assert_ok(call(srv, "GET", "/api/webhooks/deliveries", token=srv.token))["data"]["items"]
        assert len(d) == 5 and all(x["tries"][0]["error"]["code"] == "blocked_address" for x in d)
        assert all(x["tries"][0]["latencyMs"] < 1000 for x in d)
        assert rx.got() == []
    finally:
        srv.sim.stop()


# ---- durability, secrets, tenants ------------------------------------------------------------------

def test_kill9_mid_delivery_another_instance_delivers(make_server, fresh_db, tmp_path, rx):
    """The instance trying a delivery dies (kill -9) while the receiver holds the request; once
    its lease runs out, another instance delivers it, with the same webhook-id."""
    a = add_tenant(linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV))
    try:
        set_webhook(a, rx.url(), ["message.sent"])
        hold = threading.Event()
        rx.behave = lambda req: "hang" if not hold.is_set() else (200, {}, b"ok")
        assert_ok(send(a, {"to": TO, "text": "hi", "channels": ["sms"]}))
        until(lambda: len(rx.got()) == 1, 10, "the first try")
        a.kill()
        hold.set()
        b = linked_gateway(make_server, fresh_db, tmp_path, env=WH_ENV, sim=a.sim)
        until(lambda: rows(a, "status = 'delivered'"), 30, "delivered by the other instance")
        ids = [q["headers"]["webhook-id"] for q in rx.got()]
        assert len(ids) >= 2 and len(set(ids)) == 1
        assert b.proc.poll() is None
    finally:
        a.sim.stop()


def test_rotate_secret_new_signatures_verify_with_new_secret_only(gw, rx):
    """After a rotation, deliveries are signed with the new secret, and not with the old one."""
    old = set_webhook(gw, rx.url(), ["message.sent"])["secret"]
    assert_ok(send(gw, {"to": TO, "text": "before", "channels": ["sms"]}))
    until(lambda: len(rx.got()) == 1, 10, "the first delivery")
    assert verify(old, rx.got()[0])
    new = assert_ok(admin(gw, "POST", "/admin/tenants/%s/webhook/rotate-secret" % gw.tenant["id"]))["data"]["secret"]
    assert_ok(send(gw, {"to": TO, "text": "after", "channels": ["sms"]}))
    until(lambda: len(rx.got()) == 2, 10, "the second delivery")
    q = rx.got()[1]
    assert verify(new, q) and not verify(old, q)


def test_deliveries_routes_paging_filters_and_isolation(gw, rx):
    """GET /api/webhooks/deliveries pages newest first with a cursor and filters by status; a
    tenant never sees or retries another's delivery (404); scope logs is needed; retry queues one
    more try now."""
    set_webhook(gw, rx.url(), ["message.sent"])
    for i in range(3):
        assert_ok(send(gw, {"to": TO, "text": "p%d" % i, "channels": ["sms"]}))
    until(lambda: len(rows(gw, "status = 'delivered'")) == 3, 10, "three delivered")
    page1 = deliveries(gw, "?limit=2")
    assert len(page1["items"]) == 2 and page1["nextCursor"]
    page2 = deliveries(gw, "?limit=2&cursor=" + page1["nextCursor"])
    assert len(page2["items"]) == 1 and page2["nextCursor"] is None
    all_ids = [d["id"] for d in page1["items"] + page2["items"]]
    assert all_ids == [r[0] for r in reversed(rows(gw))]
    assert deliveries(gw, "?status=pending")["items"] == []
    assert len(deliveries(gw, "?status=delivered")["items"]) == 3
    for q in ("?status=nope", "?limit=0", "?cursor=abc", "?foo=1"):
        assert call(gw, "GET", "/api/webhooks/deliveries" + q, token=gw.token).status == 422
    # Another tenant, with a webhook of its own.
    other = assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "other", "unifiedApiEnabled": True}),
                      201)["data"]["id"]
    tok = new_token(gw, other)["token"]
    set_webhook(gw, rx.url("/other"), tenant=other)
    assert deliveries(gw, token=tok)["items"] == []
    wid = all_ids[0]
    assert_error(call(gw, "POST", "/api/webhooks/deliveries/%s/retry" % wid, token=tok), 404, "not_found")
    assert_error(call(gw, "POST", "/api/webhooks/deliveries/msg_nope/retry", token=gw.token), 404, "not_found")
    no_logs = new_token(gw, gw.tenant["id"], scopes=["send"])["token"]
    assert_error(call(gw, "GET", "/api/webhooks/deliveries", token=no_logs), 403, "insufficient_scope")
    n = len(rx.got())
    d = assert_ok(call(gw, "POST", "/api/webhooks/deliveries/%s/retry" % wid, token=gw.token))["data"]
    assert d["id"] == wid and d["status"] == "pending"
    until(lambda: len(rx.got()) == n + 1, 10, "the retried try")
    assert rx.got()[-1]["headers"]["webhook-id"] == wid
    until(lambda: len(delivery(gw, wid)["tries"]) == 2, 10, "the second try recorded")


def test_metrics(gw, rx):
    """/metrics shows deliveries by outcome, tries by status class, the outbox depth and age, and
    the disabled webhooks."""
    set_webhook(gw, rx.url(), ["message.sent"])
    answers = iter([(500, {}, b"no")])
    rx.behave = lambda req: next(answers, (200, {}, b"ok"))
    assert_ok(send(gw, {"to": TO, "text": "m", "channels": ["sms"]}))
    until(lambda: rows(gw, "status = 'delivered'"), 10, "delivered")

    def metrics():
        return gw.request("GET", "/metrics").body.decode()
    until(lambda: 'omnigate_webhook_deliveries_total{outcome="delivered"} 1' in metrics(), 10, "the counter")
    m = metrics()
    for line in ('omnigate_webhook_deliveries_total{outcome="retrying"} 1',
                 'omnigate_webhook_tries_total{class="2xx"} 1', 'omnigate_webhook_tries_total{class="5xx"} 1',
                 'omnigate_steps_done_total{kind="webhook"}', "omnigate_webhook_outbox_depth ",
                 "omnigate_webhook_outbox_oldest_seconds ", "omnigate_webhooks_disabled 0"):
        assert line in m, line
    rx.stop()
    assert_ok(send(gw, {"to": TO, "text": "stuck", "channels": ["sms"]}))
    until(lambda: "omnigate_webhook_outbox_depth 1" in metrics(), 10, "the depth gauge")
    rx.start()
