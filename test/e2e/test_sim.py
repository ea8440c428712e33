"""The provider simulator (test/sim, omnigate-sim) on its own: each provider's wire format and
credential check, every magic behaviour digit, the /__sim control API (rules, recorded
requests, stats), latency, a clean SIGTERM with answers still waiting, the status callbacks
(signed webhooks) it sends after accepting a message, checked by a small receiver, the inbound
messages it posts to that receiver on request (POST /__sim/inbound), Meta's WhatsApp message
templates (catalogues, the paged listing, template sends, the template status webhook), and the
rate limits per sender (token buckets answering the providers' 429).

The binary comes from OMNIGATE_SIM_BIN (test/e2e/meson.build sets it). Standard library only.
"""

import base64
import hashlib
import hmac
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import SANITIZER_MARKERS, Closed, Conn, base_env, free_port, request_bytes, wait_for

SIM_BIN = os.environ.get("OMNIGATE_SIM_BIN")
if not SIM_BIN:  # run by hand from the source tree: the build tree's binary, when there is one
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    SIM_BIN = next((p for p in (os.path.join(_root, b, "test/sim/omnigate-sim") for b in ("build-test", "build"))
                    if os.path.exists(p)), None)
if not SIM_BIN:
    pytest.skip("OMNIGATE_SIM_BIN is not set: point it at the built omnigate-sim "
                "(test/e2e/meson.build does when test/sim is built)", allow_module_level=True)

QR_KEY = "sim-test-waha-key"
SMS_SID = "AC" + "0123456789abcdef" * 2
SMS_TOKEN = "sim-test-twilio-token"
META_TOKEN = "EAAGsimTestToken0123456789"
META_PATH = "/v21.0/109876543210/messages"
WAHA_PATH = "/api/sendText"
SMS_PATH = "/2010-04-01/Accounts/%s/Messages.json" % SMS_SID
OK_TO = "+6281234567890"

START_TIMEOUT = 20.0


class Sim:
    """One omnigate-sim process on a private loopback port, stderr captured to a file."""

    def __init__(self, tmpdir, env=None, args=()):
        self.port = free_port()
        self.log_path = os.path.join(str(tmpdir), "sim-%d.stderr" % self.port)
        full = {"OMNIGATE_QR_API_KEY": QR_KEY, "OMNIGATE_SMS_ACCOUNT_SID": SMS_SID,
                "OMNIGATE_SMS_AUTH_TOKEN": SMS_TOKEN, "OMNIGATE_ACCESS_LOG": "false"}
        full.update(env or {})
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([SIM_BIN, "--listen", "127.0.0.1:%d" % self.port] + list(args),
                                     env=base_env({k: v for k, v in full.items() if v is not None}),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("omnigate-sim exited with %d:\n%s" % (self.proc.returncode, self.stderr()))
            if "worker started" in self.stderr():
                try:
                    if self.request("GET", "/healthz", timeout=2).status == 200:
                        return
                except (OSError, Closed):
                    pass
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError("omnigate-sim did not start:\n" + self.stderr())

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def request(self, method, path, headers=None, body=None, timeout=5.0):
        with Conn(self.port, timeout=timeout) as c:
            c.send(request_bytes(method, path, headers, body))
            return c.read_response(timeout=timeout)

    def control(self, method, path, body=None):
        headers = [("Content-Type", "application/json")] if body is not None else []
        r = self.request(method, path, headers, json.dumps(body) if body is not None else None)
        return r.status, r.json()

    def rule(self, **rule):
        status, j = self.control("POST", "/__sim/rules", rule)
        assert status == 201, j
        return j["data"]

    def requests(self, query=""):
        status, j = self.control("GET", "/__sim/requests" + query)
        assert status == 200, j
        return j["data"]["items"]

    def stats(self):
        return self.control("GET", "/__sim/stats")[1]["data"]

    def stop(self, timeout=10):
        """SIGTERM; returns the exit code (None when it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._log.close()
                return None
        self._log.close()
        return self.proc.returncode


def assert_clean(sim, rc):
    text = sim.stderr()
    reports = [m for m in SANITIZER_MARKERS if m in text]
    assert not reports, "sanitizer report (%s):\n%s" % (reports, text[-6000:])
    assert rc == 0, "omnigate-sim exit code %r after SIGTERM; stderr tail:\n%s" % (rc, text[-4000:])


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = Sim(tmp_path_factory.mktemp("sim"))
    yield s
    assert_clean(s, s.stop())


@pytest.fixture(autouse=True)
def clean(request):
    """Every test starts without rules, recorded requests, catalogues or limits; with the callback simulator, also
    without callbacks under way, recorded or received, and with its counters at zero."""
    if "sim" in request.fixturenames:
        s = request.getfixturevalue("sim")
        s.control("DELETE", "/__sim/rules")
        s.control("DELETE", "/__sim/requests")
        s.control("DELETE", "/__sim/meta/wabas")
        s.control("DELETE", "/__sim/limits")
    if "cbsim" in request.fixturenames:
        s = request.getfixturevalue("cbsim")
        assert wait_for(lambda: s.stats()["callbacks"]["pending"] == 0, CB_WAIT), s.stats()
        for path in ("/__sim/rules", "/__sim/requests", "/__sim/callbacks", "/__sim/stats", "/__sim/meta/wabas",
                     "/__sim/limits"):
            s.control("DELETE", path)
        request.getfixturevalue("rx").reset()


# ---- the three wire formats --------------------------------------------------------------------

def meta_body(to, text="hello"):
    return {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to.lstrip("+"),
            "type": "text", "text": {"preview_url": False, "body": text}}


def meta_send(sim, to=OK_TO, token=META_TOKEN, body=None, path=META_PATH, timeout=5.0):
    headers = [("Content-Type", "application/json")]
    if token is not None:
        headers.append(("Authorization", "Bearer " + token))
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body if body is not None else meta_body(to))
    return sim.request("POST", path, headers, raw, timeout=timeout)


def waha_send(sim, to=OK_TO, key=QR_KEY, body=None, timeout=5.0):
    headers = [("Content-Type", "application/json")]
    if key is not None:
        headers.append(("X-Api-Key", key))
    if body is None:
        body = {"session": "default", "chatId": to.lstrip("+") + "@c.us", "text": "hello"}
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return sim.request("POST", WAHA_PATH, headers, raw, timeout=timeout)


def basic(user, password):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def sms_send(sim, to=OK_TO, auth=None, fields=None, path=SMS_PATH, timeout=5.0):
    headers = [("Content-Type", "application/x-www-form-urlencoded"),
               ("Authorization", auth if auth is not None else basic(SMS_SID, SMS_TOKEN))]
    if fields is None:
        fields = {"To": to, "From": "ACME", "Body": "hello"}
    raw = fields if isinstance(fields, str) else urllib.parse.urlencode(fields)
    return sim.request("POST", path, headers, raw, timeout=timeout)


SEND = {"whatsapp_qr": waha_send, "whatsapp_meta": meta_send, "sms": sms_send}


def magic(qr=0, meta=0, sms=0, tail="0000"):
    return "+1999%d%d%d%s" % (qr, meta, sms, tail)


def test_meta_success_is_graph_api_shape(sim):
    """Meta: 200 with messaging_product, contacts (input, wa_id) and a wamid message id."""
    r = meta_send(sim, OK_TO)
    assert r.status == 200, r
    j = r.json()
    assert j["messaging_product"] == "whatsapp"
    assert j["contacts"] == [{"input": OK_TO[1:], "wa_id": OK_TO[1:]}]
    assert len(j["messages"]) == 1 and re.match(r"^wamid\.[A-Za-z0-9+/=]{20,}$", j["messages"][0]["id"]), j
    assert meta_send(sim, OK_TO).json()["messages"][0]["id"] != j["messages"][0]["id"]


@pytest.mark.parametrize("token", [None, "not-a-meta-token", "EAA"])
def test_meta_bad_token_is_oauth_190(sim, token):
    """Meta: a missing token or one not starting with EAAG is 401 OAuthException code 190/463."""
    r = meta_send(sim, OK_TO, token=token)
    assert r.status == 401, r
    err = r.json()["error"]
    assert err["code"] == 190 and err["error_subcode"] == 463 and err["type"] == "OAuthException"
    assert err["message"].startswith("Error validating access token:")
    assert err["fbtrace_id"]


@pytest.mark.parametrize("body", [
    "not json",
    {"messaging_product": "sms", "to": "6281234567890", "type": "text", "text": {"body": "x"}},
    {"to": "6281234567890", "type": "text", "text": {"body": "x"}},
    {"messaging_product": "whatsapp", "to": "62-812", "type": "text", "text": {"body": "x"}},
    {"messaging_product": "whatsapp", "type": "text", "text": {"body": "x"}},
    {"messaging_product": "whatsapp", "to": "6281234567890", "type": "image", "text": {"body": "x"}},
    {"messaging_product": "whatsapp", "to": "6281234567890", "type": "text", "text": {"body": ""}},
    {"messaging_product": "whatsapp", "to": "6281234567890", "type": "text"},
])
def test_meta_invalid_body_is_code_100(sim, body):
    """Meta: a body Meta would refuse is 400 code 100 "(#100) Invalid parameter" with details."""
    r = meta_send(sim, body=body)
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["code"] == 100 and err["message"] == "(#100) Invalid parameter", err
    assert err["error_data"]["details"]


def test_meta_wrong_version_or_phone_number_id(sim):
    """Meta: another API version than OMNIGATE_META_API_VERSION, or a non-numeric phone number id,
    is a 400 Graph error."""
    r = meta_send(sim, path="/v20.0/109876543210/messages")
    assert r.status == 400 and r.json()["error"]["code"] == 2500, r
    r = meta_send(sim, path="/v21.0/not-an-id/messages")
    assert r.status == 400 and r.json()["error"]["code"] == 100 and r.json()["error"]["error_subcode"] == 33, r


def test_waha_success_is_message_object(sim):
    """WAHA: 201 with the sent message; its id is true_<chatId>_3EB0<hex>."""
    r = waha_send(sim, OK_TO, body={"session": "default", "chatId": "6281234567890@c.us", "text": "Olá"})
    assert r.status == 201, r
    j = r.json()
    assert re.match(r"^true_6281234567890@c\.us_3EB0[0-9A-F]{16}$", j["id"]), j
    assert j["to"] == "6281234567890@c.us" and j["body"] == "Olá"
    assert j["fromMe"] is True and j["ack"] == 1 and j["from"].endswith("@c.us")
    assert abs(j["timestamp"] - time.time()) < 60


@pytest.mark.parametrize("key", [None, "wrong-key", QR_KEY + "x"])
def test_waha_api_key_checked(sim, key):
    """WAHA: a missing or wrong X-Api-Key is 401 {"message":"Unauthorized","statusCode":401}."""
    r = waha_send(sim, OK_TO, key=key)
    assert r.status == 401, r
    assert r.json() == {"message": "Unauthorized", "statusCode": 401}


@pytest.mark.parametrize("body", [
    "{broken",
    {"session": "default", "text": "x"},
    {"session": "default", "chatId": "+6281234567890@c.us", "text": "x"},
    {"session": "default", "chatId": "6281234567890@g.us", "text": "x"},
    {"session": "default", "chatId": "6281234567890@c.us", "text": ""},
    {"session": 5, "chatId": "6281234567890@c.us", "text": "x"},
])
def test_waha_bad_body_is_400(sim, body):
    """WAHA: an invalid body is a NestJS 400 {"statusCode":400,"message",...}."""
    r = waha_send(sim, body=body)
    assert r.status == 400, r
    j = r.json()
    assert j["statusCode"] == 400 and j["message"], j


def test_twilio_success_is_message_resource(sim):
    """Twilio: 201 with the Message resource: SM sid, queued, segments, uri, nulls where Twilio has them."""
    r = sms_send(sim, fields={"To": OK_TO, "From": "ACME", "Body": "hello & 100% +1"})
    assert r.status == 201, r
    j = r.json()
    assert re.match(r"^SM[0-9a-f]{32}$", j["sid"]), j
    assert j["status"] == "queued" and j["num_segments"] == "1" and j["direction"] == "outbound-api"
    assert (j["to"], j["from"], j["body"], j["account_sid"]) == (OK_TO, "ACME", "hello & 100% +1", SMS_SID)
    assert j["error_code"] is None and j["error_message"] is None and j["price"] is None
    assert j["uri"] == "/2010-04-01/Accounts/%s/Messages/%s.json" % (SMS_SID, j["sid"])
    assert re.match(r"^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d \+0000$", j["date_created"]), j
    assert r.header("Content-Type").startswith("application/json")


def test_twilio_counts_segments(sim):
    """Twilio: num_segments follows the text (161 GSM-7 characters are 2 parts, 71 UCS-2 are 2)."""
    assert sms_send(sim, fields={"To": OK_TO, "From": "ACME", "Body": "x" * 161}).json()["num_segments"] == "2"
    assert sms_send(sim, fields={"To": OK_TO, "From": "ACME", "Body": "é" * 160}).json()["num_segments"] == "1"
    assert sms_send(sim, fields={"To": OK_TO, "From": "ACME", "Body": "ü" * 60 + "я" * 11}).json()[
        "num_segments"] == "2"


@pytest.mark.parametrize("auth,path", [
    (basic(SMS_SID, "wrong"), SMS_PATH),
    (basic("ACother", SMS_TOKEN), SMS_PATH),
    (basic("ACother", SMS_TOKEN), "/2010-04-01/Accounts/ACother/Messages.json"),
    (basic(SMS_SID, SMS_TOKEN), "/2010-04-01/Accounts/ACother/Messages.json"),
    ("", SMS_PATH),
    ("Basic !!!", SMS_PATH),
    ("Bearer " + SMS_TOKEN, SMS_PATH),
])
def test_twilio_basic_auth_checked(sim, auth, path):
    """Twilio: Basic auth must be (account sid, auth token) and the path's sid the same account,
    else 401 code 20003 with WWW-Authenticate."""
    r = sms_send(sim, auth=auth, path=path)
    assert r.status == 401, r
    assert r.json() == {"code": 20003, "message": "Authenticate", "more_info": "https://www.twilio.com/docs/errors/20003",
                        "status": 401}
    assert r.header("WWW-Authenticate", "").startswith("Basic")


@pytest.mark.parametrize("fields,code", [
    ({"From": "ACME", "Body": "x"}, 21211),
    ({"To": "6281234567890", "From": "ACME", "Body": "x"}, 21211),
    ({"To": "+62abc", "From": "ACME", "Body": "x"}, 21211),
    ({"To": OK_TO, "Body": "x"}, 21603),
    ({"To": OK_TO, "From": "ACME"}, 21602),
    ({"To": OK_TO, "From": "ACME", "Body": "x" * 1601}, 21617),
])
def test_twilio_invalid_params(sim, fields, code):
    """Twilio: a missing or invalid To is 400 code 21211; a missing From or Body and an over-long
    Body have Twilio's own codes."""
    r = sms_send(sim, fields=fields)
    assert r.status == 400, r
    j = r.json()
    assert j["code"] == code and j["status"] == 400 and j["more_info"].endswith("/%d" % code), j


def test_unset_credentials_accept_anything(tmp_path):
    """Without OMNIGATE_QR_API_KEY / OMNIGATE_SMS_* the simulator accepts any key and any account
    whose Basic user is the path's sid."""
    s = Sim(tmp_path, env={"OMNIGATE_QR_API_KEY": None, "OMNIGATE_SMS_ACCOUNT_SID": None,
                           "OMNIGATE_SMS_AUTH_TOKEN": None})
    try:
        assert waha_send(s, key=None).status == 201
        path = "/2010-04-01/Accounts/ACany/Messages.json"
        assert sms_send(s, auth=basic("ACany", "whatever"), path=path).status == 201
        assert sms_send(s, auth=basic("ACelse", "whatever"), path=path).status == 401
    finally:
        assert_clean(s, s.stop())


# ---- magic numbers ----------------------------------------------------------------------------

def test_magic_digits_are_per_channel_in_order(sim):
    """+1999 then one digit each for whatsapp_qr, whatsapp_meta, sms: 120 fails QR with 4xx,
    Meta with 5xx, and SMS succeeds."""
    to = magic(1, 2, 0)
    assert waha_send(sim, to).status == 400
    assert meta_send(sim, to).status == 500
    assert sms_send(sim, to).status == 201


@pytest.mark.parametrize("channel", ["whatsapp_qr", "whatsapp_meta", "sms"])
def test_magic_1_is_provider_rejection(sim, channel):
    """Digit 1: the provider's own 4xx refusal of the message."""
    to = magic(**{{"whatsapp_qr": "qr", "whatsapp_meta": "meta", "sms": "sms"}[channel]: 1})
    r = SEND[channel](sim, to)
    j = r.json()
    if channel == "whatsapp_meta":
        assert r.status == 400 and j["error"]["code"] == 131026, r
    elif channel == "whatsapp_qr":
        assert r.status == 400 and j["statusCode"] == 400 and "not registered" in j["message"], r
    else:
        # Not 21610: that one says the recipient opted out (behaviour opted_out), which the gateway
        # records as a suppression.
        assert r.status == 400 and j == {"code": 21211, "message": "Invalid 'To' Phone Number",
                                         "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}, r


META_OPTED_OUT = ("Unable to deliver the message. This recipient has chosen to stop receiving marketing messages "
                  "on WhatsApp from your business.")


def test_rule_opted_out_on_meta_is_131050(sim):
    """Behaviour opted_out on Meta: 400 with Meta's error shape, code 131050 and its details."""
    sim.rule(channel="whatsapp_meta", to=OK_TO, behaviour="opted_out")
    r = meta_send(sim, OK_TO)
    err = r.json()["error"]
    assert r.status == 400 and r.header("Content-Type").startswith("application/json"), r
    assert re.match(r"^[A-Za-z0-9]{23}$", err.pop("fbtrace_id")), err
    assert err == {"message": "(#131050) " + META_OPTED_OUT, "type": "OAuthException", "code": 131050,
                   "error_data": {"messaging_product": "whatsapp", "details": META_OPTED_OUT}}, err


def test_rule_opted_out_on_twilio_is_21610(sim):
    """Behaviour opted_out on Twilio: 400 code 21610, the unsubscribed recipient."""
    sim.rule(channel="sms", behaviour="opted_out")
    r = sms_send(sim, OK_TO)
    assert r.status == 400 and r.json() == {
        "code": 21610, "message": "Attempt to send to unsubscribed recipient",
        "more_info": "https://www.twilio.com/docs/errors/21610", "status": 400}, r


def test_rule_opted_out_on_waha_is_its_rejection(sim):
    """WAHA has no opt-out answer: behaviour opted_out answers as reject does."""
    sim.rule(channel="whatsapp_qr", to=OK_TO, behaviour="opted_out")
    r = waha_send(sim, OK_TO)
    assert r.status == 400 and r.json() == {
        "statusCode": 400, "message": "The number %s is not registered on WhatsApp" % OK_TO[1:],
        "error": "Bad Request"}, r


def test_opted_out_counted_under_its_own_name(sim):
    """GET /__sim/stats counts opted_out apart from reject, on each channel; the rule lists it."""
    rule = sim.rule(behaviour="opted_out")
    assert rule["behaviour"] == "opted_out" and rule["channel"] is None
    sim.control("DELETE", "/__sim/stats")
    for send in (waha_send, meta_send, sms_send):
        assert send(sim, OK_TO).status == 400
    st = sim.stats()["channels"]
    for channel in ("whatsapp_qr", "whatsapp_meta", "sms"):
        assert (st[channel]["requests"], st[channel]["opted_out"], st[channel]["reject"]) == (1, 1, 0), st


@pytest.mark.parametrize("channel", ["whatsapp_qr", "whatsapp_meta", "sms"])
def test_magic_2_is_provider_5xx(sim, channel):
    """Digit 2: the provider's 5xx."""
    to = magic(**{{"whatsapp_qr": "qr", "whatsapp_meta": "meta", "sms": "sms"}[channel]: 2})
    r = SEND[channel](sim, to)
    j = r.json()
    assert r.status == 500, r
    if channel == "whatsapp_meta":
        assert j["error"]["code"] == 131000
    elif channel == "whatsapp_qr":
        assert j["statusCode"] == 500
    else:
        assert j["code"] == 20500


def test_magic_3_hangs_until_the_client_gives_up(sim):
    """Digit 3: the request is accepted and never answered; a client with a 1 s timeout times
    out, and once it hangs up the simulator lets the request go."""
    to = magic(meta=3)
    t0 = time.monotonic()
    with Conn(sim.port, timeout=1.0) as c:
        c.send(request_bytes("POST", META_PATH, [("Authorization", "Bearer " + META_TOKEN),
                                                 ("Content-Type", "application/json")], json.dumps(meta_body(to))))
        with pytest.raises(socket.timeout):
            c.read_response(timeout=1.0)
        assert time.monotonic() - t0 >= 0.95
        assert sim.stats()["pending"] == 1
    assert wait_for(lambda: sim.stats()["pending"] == 0, 2.0), "hung request not released after the client left"


def test_magic_4_resets_the_connection(sim):
    """Digit 4: the connection is reset (TCP RST) without a byte of answer."""
    to = magic(sms=4)
    with Conn(sim.port, timeout=3.0) as c:
        c.send(request_bytes("POST", SMS_PATH, [("Authorization", basic(SMS_SID, SMS_TOKEN)),
                                                ("Content-Type", "application/x-www-form-urlencoded")],
                             urllib.parse.urlencode({"To": to, "From": "ACME", "Body": "x"})))
        c.sock.settimeout(3.0)
        with pytest.raises(ConnectionResetError):
            data = c.sock.recv(65536)
            assert data == b"", "got an answer: %r" % data  # a FIN instead of a reset fails here
            raise AssertionError("connection closed with FIN, not reset")
    assert len(sim.requests("?channel=sms")) == 1


def test_magic_4_with_http_client_sees_no_response(sim):
    """Digit 4 through an ordinary client: no status line, the connection is gone."""
    with Conn(sim.port, timeout=3.0) as c:
        c.send(request_bytes("POST", WAHA_PATH, [("X-Api-Key", QR_KEY), ("Content-Type", "application/json")],
                             json.dumps({"session": "default", "chatId": magic(qr=4)[1:] + "@c.us", "text": "x"})))
        _, data = c.wait_closed(timeout=3.0)
        assert data == b""


def test_magic_5_is_garbage_with_200(sim):
    """Digit 5: 200 whose body is not JSON."""
    r = waha_send(sim, magic(qr=5))
    assert r.status == 200, r
    with pytest.raises(ValueError):
        json.loads(r.body.decode("utf-8", "replace"))


@pytest.mark.parametrize("channel,check", [
    ("whatsapp_qr", lambda j: j["statusCode"] == 429),
    ("whatsapp_meta", lambda j: j["error"]["code"] == 130429),
    ("sms", lambda j: j["code"] == 20429 and j["status"] == 429),
])
def test_magic_6_is_throttling(sim, channel, check):
    """Digit 6: 429 with the provider's throttling error."""
    to = magic(**{{"whatsapp_qr": "qr", "whatsapp_meta": "meta", "sms": "sms"}[channel]: 6})
    r = SEND[channel](sim, to)
    assert r.status == 429 and check(r.json()), r


@pytest.mark.parametrize("digit,ms", [(7, 700), (8, 200)])
def test_magic_7_and_8_answer_ok_late(sim, digit, ms):
    """Digits 7 and 8: a success after 700 ms and 200 ms."""
    t0 = time.monotonic()
    r = sms_send(sim, magic(sms=digit))
    elapsed = time.monotonic() - t0
    assert r.status == 201, r
    assert elapsed >= ms / 1000.0, elapsed
    assert elapsed < ms / 1000.0 + 0.5, elapsed


@pytest.mark.parametrize("channel", ["whatsapp_qr", "whatsapp_meta", "sms"])
def test_magic_9_is_auth_failure(sim, channel):
    """Digit 9: the provider's 401 although the credentials are right."""
    to = magic(**{{"whatsapp_qr": "qr", "whatsapp_meta": "meta", "sms": "sms"}[channel]: 9})
    r = SEND[channel](sim, to)
    assert r.status == 401, r
    j = r.json()
    if channel == "whatsapp_meta":
        assert j["error"]["code"] == 190
    elif channel == "whatsapp_qr":
        assert j == {"message": "Unauthorized", "statusCode": 401}
    else:
        assert j["code"] == 20003


def test_magic_0_and_other_numbers_are_ok(sim):
    """Digit 0 and numbers outside +1999... succeed on every channel."""
    for to in (magic(0, 0, 0), OK_TO, "+19990", "+1998111000"):
        assert waha_send(sim, to).status == 201, to
        assert meta_send(sim, to).status == 200, to
        assert sms_send(sim, to).status == 201, to


def test_magic_failures_ignore_nothing_but_credentials_first(sim):
    """A provider failure digit still checks credentials first (a bad key is 401), while the
    transport failures (hang, reset, garbage) happen whatever the request."""
    assert waha_send(sim, magic(qr=1), key="wrong").status == 401
    assert waha_send(sim, magic(qr=5), key="wrong").status == 200


# ---- rules ------------------------------------------------------------------------------------

def test_rule_overrides_magic_number(sim):
    """A rule for a recipient beats its magic digits, on its channel only; DELETE restores them."""
    to = magic(1, 1, 1)
    sim.rule(channel="whatsapp_meta", to=to, behaviour="ok")
    assert meta_send(sim, to).status == 200
    assert waha_send(sim, to).status == 400
    assert sms_send(sim, to).status == 400
    status, j = sim.control("DELETE", "/__sim/rules")
    assert status == 200 and j["data"]["cleared"] == 1
    assert meta_send(sim, to).status == 400


def test_rule_without_to_applies_to_everyone_newest_first(sim):
    """A rule without "to" covers every recipient; rules are matched newest first."""
    sim.rule(channel="sms", behaviour="throttle")
    assert sms_send(sim, OK_TO).status == 429
    assert sms_send(sim, magic(sms=1)).status == 429
    sim.rule(channel="sms", to=OK_TO, behaviour="error")
    assert sms_send(sim, OK_TO).status == 500
    assert sms_send(sim, "+6289999999999").status == 429
    sim.rule(channel="sms", behaviour="ok")
    assert sms_send(sim, OK_TO).status == 201
    assert meta_send(sim, OK_TO).status == 200  # other channels untouched


@pytest.mark.parametrize("behaviour,status", [("reject", 400), ("error", 500), ("garbage", 200),
                                              ("throttle", 429), ("auth", 401), ("opted_out", 400), ("ok", 200)])
def test_rule_behaviours(sim, behaviour, status):
    """Each answering behaviour name of a rule gives the provider's status."""
    sim.rule(channel="whatsapp_meta", to=OK_TO, behaviour=behaviour)
    assert meta_send(sim, OK_TO).status == status


def test_rule_hang_and_reset(sim):
    """Rule behaviours hang and reset act like digits 3 and 4."""
    sim.rule(channel="whatsapp_qr", to=OK_TO, behaviour="reset")
    with Conn(sim.port, timeout=3.0) as c:
        c.send(request_bytes("POST", WAHA_PATH, [("X-Api-Key", QR_KEY), ("Content-Type", "application/json")],
                             json.dumps({"session": "default", "chatId": OK_TO[1:] + "@c.us", "text": "x"})))
        assert c.wait_closed(timeout=3.0)[1] == b""
    sim.rule(channel="whatsapp_qr", to=OK_TO, behaviour="hang")
    with pytest.raises(socket.timeout):
        waha_send(sim, OK_TO, timeout=0.5)


def test_rule_latency_delays_every_answer(sim):
    """A global latencyMs rule (no channel, no to) delays every provider answer by at least that."""
    sim.rule(behaviour="ok", latencyMs=300)
    for send in (waha_send, meta_send, sms_send):
        t0 = time.monotonic()
        r = send(sim, magic(1, 1, 1))
        elapsed = time.monotonic() - t0
        assert r.status in (200, 201), r
        assert elapsed >= 0.3, (send.__name__, elapsed)
    # A failure is delayed too.
    sim.rule(channel="whatsapp_meta", behaviour="error", latencyMs=250)
    t0 = time.monotonic()
    assert meta_send(sim).status == 500
    assert time.monotonic() - t0 >= 0.25


def test_latency_does_not_block_other_requests(sim):
    """A delayed answer waits on a timer: other requests are answered meanwhile."""
    sim.rule(channel="whatsapp_meta", to=OK_TO, behaviour="ok", latencyMs=800)
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", meta_send(sim, OK_TO)))
    th.start()
    assert wait_for(lambda: len(sim.requests("?channel=whatsapp_meta")) == 1, 5)  # it is waiting
    t0 = time.monotonic()
    assert meta_send(sim, "+6289999999999").status == 200
    assert time.monotonic() - t0 < 0.4
    th.join(5)
    assert out["r"].status == 200


@pytest.mark.parametrize("body,field", [
    ({"channel": "telegram", "behaviour": "ok"}, "channel"),
    ({"channel": "sms", "behaviour": "explode"}, "behaviour"),
    ({"channel": "sms"}, "behaviour"),
    ({"channel": "sms", "behaviour": "ok", "to": "62abc"}, "to"),
    ({"channel": "sms", "behaviour": "ok", "latencyMs": -1}, "latencyMs"),
    ({"channel": "sms", "behaviour": "ok", "latencyms": 5}, "latencyms"),
])
def test_rule_validation(sim, body, field):
    """An invalid rule is 422 naming the field, and nothing is added."""
    status, j = sim.control("POST", "/__sim/rules", body)
    assert status == 422 and j["error"]["field"] == field, j
    assert sim.control("GET", "/__sim/rules")[1]["data"]["items"] == []


def test_rule_is_listed(sim):
    """GET /__sim/rules lists the rules as stored, oldest first."""
    a = sim.rule(channel="sms", to="+15550001", behaviour="hang")
    b = sim.rule(behaviour="ok", latencyMs=10)
    items = sim.control("GET", "/__sim/rules")[1]["data"]["items"]
    assert items == [a, b]
    assert a["channel"] == "sms" and a["to"] == "+15550001" and b["channel"] is None and b["to"] is None


# ---- recorded requests ----------------------------------------------------------------------

def test_requests_record_exactly_what_was_sent(sim):
    """Each provider request is recorded with channel, method, path, lowercased headers, the
    exact body bytes, the recipient and the time, oldest first."""
    t0 = time.time() * 1000
    meta_raw = json.dumps(meta_body(OK_TO, "Olá \"quoted\" \\ ✓"), ensure_ascii=False)
    meta_send(sim, body=meta_raw)
    waha_raw = '{"session": "default",  "chatId":"6281234567890@c.us","text":"tab\\there"}'
    waha_send(sim, body=waha_raw)
    form = "To=%2B6281234567890&From=ACME&Body=Ol%C3%A1+%26+welcome+%3D+100%25+%2B1"
    sms_send(sim, fields=form)
    items = sim.requests()
    assert [i["channel"] for i in items] == ["whatsapp_meta", "whatsapp_qr", "sms"]
    meta, waha, sms = items
    assert meta["method"] == "POST" and meta["path"] == META_PATH
    assert meta["body"] == meta_raw and meta["to"] == OK_TO
    assert meta["headers"]["authorization"] == "Bearer " + META_TOKEN
    assert meta["headers"]["content-type"] == "application/json"
    assert waha["body"] == waha_raw and waha["headers"]["x-api-key"] == QR_KEY and waha["to"] == OK_TO
    assert sms["body"] == form and sms["path"] == SMS_PATH and sms["to"] == OK_TO
    assert urllib.parse.parse_qs(sms["body"])["Body"] == ["Olá & welcome = 100% +1"]
    for it in items:
        assert t0 - 1000 <= it["receivedAt"] <= time.time() * 1000 + 1000, it


def test_requests_filter_by_channel_and_to(sim):
    """?channel= and ?to= select requests; '+' may be sent encoded or not."""
    other = "+6289999999999"
    meta_send(sim, OK_TO)
    sms_send(sim, OK_TO)
    sms_send(sim, other)
    assert len(sim.requests()) == 3
    assert [i["to"] for i in sim.requests("?channel=sms")] == [OK_TO, other]
    assert [i["channel"] for i in sim.requests("?to=%2B6281234567890")] == ["whatsapp_meta", "sms"]
    assert [i["channel"] for i in sim.requests("?to=+6281234567890")] == ["whatsapp_meta", "sms"]
    assert [i["to"] for i in sim.requests("?channel=sms&to=" + urllib.parse.quote(other))] == [other]
    assert sim.requests("?channel=whatsapp_qr") == []
    status, j = sim.control("GET", "/__sim/requests?channel=fax")
    assert status == 422 and j["error"]["field"] == "channel"


def test_requests_include_refused_ones_and_clear(sim):
    """Refused requests (bad credentials, bad body) are recorded too; DELETE clears them."""
    meta_send(sim, OK_TO, token="bad")
    waha_send(sim, body="{oops")
    items = sim.requests()
    assert [i["channel"] for i in items] == ["whatsapp_meta", "whatsapp_qr"]
    assert items[1]["to"] is None and items[1]["body"] == "{oops"
    status, j = sim.control("DELETE", "/__sim/requests")
    assert status == 200 and j["data"]["cleared"] == 2
    assert sim.requests() == []


def test_requests_keep_the_newest_20000(sim):
    """The record is a ring: after 20,010 requests the oldest 10 are gone, the rest in order."""
    total, batch = 20010, 250
    body_fmt = '{"session":"default","chatId":"6281234567890@c.us","text":"n%d"}'
    with Conn(sim.port, timeout=30) as c:
        sent = 0
        while sent < total:
            n = min(batch, total - sent)
            c.send(b"".join(request_bytes("POST", WAHA_PATH, [("X-Api-Key", QR_KEY),
                                                              ("Content-Type", "application/json")],
                                          body_fmt % (sent + i)) for i in range(n)))
            for _ in range(n):
                assert c.read_response(timeout=30).status == 201
            sent += n
    items = sim.requests("?channel=whatsapp_qr")
    assert len(items) == 20000
    assert json.loads(items[0]["body"])["text"] == "n10"
    assert json.loads(items[-1]["body"])["text"] == "n%d" % (total - 1)
    assert sim.stats()["recorded"] == 20000


def test_stats_count_outcomes_per_channel(sim):
    """GET /__sim/stats counts each channel's requests by outcome."""
    sim.control("DELETE", "/__sim/stats")
    meta_send(sim, OK_TO)
    meta_send(sim, magic(meta=1))
    meta_send(sim, OK_TO, token="bad")
    meta_send(sim, body="nope")
    sms_send(sim, magic(sms=6))
    st = sim.stats()["channels"]
    assert st["whatsapp_meta"]["requests"] == 4
    assert (st["whatsapp_meta"]["ok"], st["whatsapp_meta"]["reject"], st["whatsapp_meta"]["unauthorized"],
            st["whatsapp_meta"]["invalid"]) == (1, 1, 1, 1)
    assert st["sms"]["requests"] == 1 and st["sms"]["throttle"] == 1
    assert st["whatsapp_qr"]["requests"] == 0


def test_ops_routes(sim):
    """/healthz and /readyz answer like the gateway's; unknown paths are 404."""
    assert sim.request("GET", "/healthz").status == 200
    assert sim.request("GET", "/readyz").status == 200
    assert sim.request("GET", "/nope").status == 404
    assert sim.request("GET", META_PATH).status == 405


# ---- lifecycle --------------------------------------------------------------------------------

def test_sigterm_with_waiting_answers_exits_clean(tmp_path):
    """SIGTERM while a request hangs and another waits out its latency: the delayed one is
    answered at once, the hung one's connection is closed without an answer, and the process
    exits 0 well before the drain timeout."""
    s = Sim(tmp_path)
    try:
        s.rule(channel="whatsapp_meta", to=OK_TO, behaviour="ok", latencyMs=20000)
        hang = Conn(s.port, timeout=10)
        hang.send(request_bytes("POST", META_PATH, [("Authorization", "Bearer " + META_TOKEN)],
                                json.dumps(meta_body(magic(meta=3)))))
        slow = Conn(s.port, timeout=10)
        slow.send(request_bytes("POST", META_PATH, [("Authorization", "Bearer " + META_TOKEN)],
                                json.dumps(meta_body(OK_TO))))
        assert wait_for(lambda: s.stats()["pending"] == 2, 3)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        r = slow.read_response(timeout=5)
        assert r.status == 200 and r.header("Connection") == "close", r
        assert hang.wait_closed(timeout=5)[1] == b""
        rc = s.proc.wait(timeout=10)
        assert time.monotonic() - t0 < 3
        hang.close()
        slow.close()
    finally:
        rc = s.stop()
    assert_clean(s, rc)


def test_access_log_is_off_by_default(tmp_path):
    """Without OMNIGATE_ACCESS_LOG the simulator writes no line per request (benchmarks);
    with it set to true it does."""
    for setting, expect in ((None, False), ("true", True)):
        s = Sim(tmp_path, env={"OMNIGATE_ACCESS_LOG": setting})
        try:
            assert meta_send(s).status == 200
        finally:
            rc = s.stop()
        assert_clean(s, rc)
        assert ('"msg":"access"' in s.stderr()) is expect, s.stderr()


def test_help_and_bad_arguments():
    """--help describes the simulator; an unknown argument exits 2."""
    p = subprocess.run([SIM_BIN, "--help"], env=base_env(), capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "omnigate-sim" in p.stdout and "/__sim" in p.stdout
    p = subprocess.run([SIM_BIN, "frobnicate"], env=base_env(), capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "frobnicate" in p.stderr


# ---- status callbacks ---------------------------------------------------------------------------

META_SECRET = "sim-test-meta-app-secret"
WAHA_SECRET = "sim-test-waha-webhook-secret"
META_PHONE_ID = "109876543210"
CB_WAIT = 10.0


class Receiver:
    """A stand-in for the gateway's /webhooks/*: a threaded loopback HTTP server that records
    every POST (arrival time, path with query, lowercased headers, raw body) and answers 200, or
    the answers queued in `answers` first: a status (empty body) or (status, content type, body
    bytes). `hold` maps a path prefix to seconds to wait before answering (a slow gateway)."""

    def __init__(self, port=0):
        self.lock = threading.Lock()
        self.items = []
        self.answers = []
        self.hold = {}
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with rx.lock:
                    answer = rx.answers.pop(0) if rx.answers else 200
                    hold = next((t for p, t in rx.hold.items() if self.path.startswith(p)), 0)
                    rx.items.append({"at": time.monotonic(), "path": self.path, "body": body,
                                     "headers": {k.lower(): v for k, v in self.headers.items()}})
                status, ctype, out = (answer, None, b"") if isinstance(answer, int) else answer
                if hold:
                    time.sleep(hold)  # the slow gateway being simulated, not a wait of the test
                try:
                    self.send_response(status)
                    if ctype:
                        self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:
                    pass  # the simulator gave up on this try

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def got(self):
        with self.lock:
            return list(self.items)

    def wait(self, n, timeout=CB_WAIT):
        """Waits until n callbacks have arrived; returns them all, in arrival order."""
        assert wait_for(lambda: len(self.got()) >= n, timeout), "wanted %d callbacks, got %r" % (n, self.got())
        return self.got()

    def reset(self):
        with self.lock:
            self.items.clear()
            self.answers.clear()
            self.hold.clear()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def rx():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def cbsim(tmp_path_factory, rx):
    """A simulator that calls `rx` back, with every provider's signing secret set."""
    s = Sim(tmp_path_factory.mktemp("cbsim"),
            env={"OMNIGATE_SIM_CALLBACK_URL": rx.url, "OMNIGATE_META_APP_SECRET": META_SECRET,
                 "OMNIGATE_QR_WEBHOOK_SECRET": WAHA_SECRET})
    yield s
    assert_clean(s, s.stop())


def cb_to(script, qr=0, meta=0, sms=0):
    """A magic recipient with behaviour digits qr, meta, sms and the callback script digit."""
    return "+1999%d%d%d%d000" % (qr, meta, sms, script)


def meta_signature(body):
    return "sha256=" + hmac.new(META_SECRET.encode(), body, hashlib.sha256).hexdigest()


def waha_signature(body):
    return hmac.new(WAHA_SECRET.encode(), body, hashlib.sha512).hexdigest()


def twilio_signature(url, fields):
    data = url + "".join(k + fields[k] for k in sorted(fields))
    return base64.b64encode(hmac.new(SMS_TOKEN.encode(), data.encode(), hashlib.sha1).digest()).decode()


def form_fields(body):
    """A form body as a dict; every field must appear once."""
    pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=True)
    assert len(pairs) == len(dict(pairs)), pairs
    return dict(pairs)


MESSAGE_ID = {"whatsapp_meta": lambda j: j["messages"][0]["id"], "whatsapp_qr": lambda j: j["id"],
              "sms": lambda j: j["sid"]}
WEBHOOK = {"whatsapp_meta": "/webhooks/meta", "whatsapp_qr": "/webhooks/waha", "sms": "/webhooks/twilio"}
DIGIT_OF = {"whatsapp_qr": "qr", "whatsapp_meta": "meta", "sms": "sms"}


def meta_status(item):
    value = json.loads(item["body"])["entry"][0]["changes"][0]["value"]
    assert len(value["statuses"]) == 1, value
    return value["statuses"][0]


def said(channel, item):
    """(message id, status) of one callback, in the provider's own words."""
    if channel == "whatsapp_meta":
        st = meta_status(item)
        return st["id"], st["status"]
    if channel == "whatsapp_qr":
        p = json.loads(item["body"])["payload"]
        return p["id"], p["ackName"]
    f = form_fields(item["body"])
    return f["MessageSid"], f["MessageStatus"]


def assert_signed(channel, item, url=None):
    """The callback carries the provider's signature over exactly what arrived."""
    h, body = item["headers"], item["body"]
    if channel == "whatsapp_meta":
        assert h["x-hub-signature-256"] == meta_signature(body), item
    elif channel == "whatsapp_qr":
        assert h["x-webhook-hmac"] == waha_signature(body) and h["x-webhook-hmac-algorithm"] == "sha512", item
    else:
        assert h["x-twilio-signature"] == twilio_signature(url, form_fields(body)), item


def send_accepted(sim, channel, to, **kw):
    r = SEND[channel](sim, to, **kw)
    assert r.status in (200, 201), r
    return MESSAGE_ID[channel](r.json())


def cb_stats(sim):
    return sim.stats()["callbacks"]


def test_callbacks_meta_sent_delivered_read(cbsim, rx):
    """Digit 1 on Meta: sent, delivered, read POSTed in that order to /webhooks/meta, each the
    whatsapp_business_account statuses body for the wamid the send returned, with conversation
    and pricing on sent and delivered only, signed with X-Hub-Signature-256 over the raw body."""
    to = cb_to(1)
    t0 = time.time()
    wamid = send_accepted(cbsim, "whatsapp_meta", to)
    items = rx.wait(3)
    assert [said("whatsapp_meta", i) for i in items] == [(wamid, "sent"), (wamid, "delivered"), (wamid, "read")]
    for item in items:
        assert item["path"] == "/webhooks/meta" and item["headers"]["content-type"] == "application/json"
        assert_signed("whatsapp_meta", item)
        body = json.loads(item["body"])
        assert body["object"] == "whatsapp_business_account" and len(body["entry"]) == 1
        entry = body["entry"][0]
        assert re.match(r"^\d+$", entry["id"]) and len(entry["changes"]) == 1
        change = entry["changes"][0]
        assert change["field"] == "messages"
        value = change["value"]
        assert value["messaging_product"] == "whatsapp"
        assert value["metadata"]["phone_number_id"] == META_PHONE_ID
        assert re.match(r"^\d+$", value["metadata"]["display_phone_number"])
        st = meta_status(item)
        assert st["recipient_id"] == to[1:] and "errors" not in st
        assert re.match(r"^\d+$", st["timestamp"]) and abs(int(st["timestamp"]) - t0) < 60, st
        billed = st["status"] != "read"
        assert ("conversation" in st) is billed and ("pricing" in st) is billed, st
        if billed:
            assert st["pricing"] == {"billable": True, "pricing_model": "CBP", "category": "service"}
            assert st["conversation"]["origin"] == {"type": "service"}
    assert "expiration_timestamp" in meta_status(items[0])["conversation"]
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    assert len(rx.got()) == 3


def test_callbacks_waha_acks(cbsim, rx):
    """Digit 1 on WAHA: message.ack events with acks 1 SERVER, 2 DEVICE, 3 READ for the id
    sendText returned, in the session of the send, signed with X-Webhook-Hmac (SHA-512)."""
    to = cb_to(1)
    t0 = time.time() * 1000
    body = {"session": "sales", "chatId": to[1:] + "@c.us", "text": "hi"}
    mid = send_accepted(cbsim, "whatsapp_qr", to, body=body)
    items = rx.wait(3)
    events = [json.loads(i["body"]) for i in items]
    assert [(e["payload"]["ack"], e["payload"]["ackName"]) for e in events] == [(1, "SERVER"), (2, "DEVICE"),
                                                                               (3, "READ")]
    for item, e in zip(items, events):
        assert item["path"] == "/webhooks/waha" and item["headers"]["content-type"] == "application/json"
        assert_signed("whatsapp_qr", item)
        assert e["event"] == "message.ack" and e["session"] == "sales"
        assert re.match(r"^evt_[0-9a-z]+$", e["id"]) and abs(e["timestamp"] - t0) < 60000, e
        p = e["payload"]
        assert p["id"] == mid and p["to"] == to[1:] + "@c.us" and p["fromMe"] is True
        assert p["from"].endswith("@c.us")
    assert len({e["id"] for e in events}) == 3


def test_callbacks_twilio_statuses(cbsim, rx):
    """Digit 1 on Twilio: form-encoded status callbacks sent, delivered, read for the SM sid,
    to /webhooks/twilio under the callback URL (no StatusCallback in the send), signed with
    X-Twilio-Signature over that URL and the sorted fields."""
    to = cb_to(1)
    sid = send_accepted(cbsim, "sms", to)
    items = rx.wait(3)
    url = rx.url + "/webhooks/twilio"
    assert [said("sms", i) for i in items] == [(sid, "sent"), (sid, "delivered"), (sid, "read")]
    for item in items:
        assert item["path"] == "/webhooks/twilio"
        assert item["headers"]["content-type"] == "application/x-www-form-urlencoded"
        assert_signed("sms", item, url)
        f = form_fields(item["body"])
        assert set(f) == {"MessageSid", "SmsSid", "AccountSid", "MessageStatus", "SmsStatus", "To", "From",
                          "ApiVersion"}, f
        assert (f["SmsSid"], f["AccountSid"], f["To"], f["From"], f["ApiVersion"]) == (sid, SMS_SID, to, "ACME",
                                                                                      "2010-04-01")
        assert f["SmsStatus"] == f["MessageStatus"]


@pytest.mark.parametrize("digit,meta_code,twilio", [(2, 131026, ("failed", "30003")),
                                                    (3, 131047, ("failed", "30007")),
                                                    (4, 131000, ("undelivered", "30005"))])
@pytest.mark.parametrize("channel", ["whatsapp_meta", "whatsapp_qr", "sms"])
def test_callbacks_failures(cbsim, rx, channel, digit, meta_code, twilio):
    """Digits 2 (not on WhatsApp), 3 (outside the 24 h window), 4 (undelivered): one failure
    callback: Meta failed with its error code, title, message and details; WAHA ack -1 ERROR;
    Twilio failed/undelivered with ErrorCode 30003/30007/30005."""
    mid = send_accepted(cbsim, channel, cb_to(digit))
    item = rx.wait(1)[0]
    assert item["path"] == WEBHOOK[channel]
    assert_signed(channel, item, rx.url + WEBHOOK[channel])
    if channel == "whatsapp_meta":
        st = meta_status(item)
        assert st["id"] == mid and st["status"] == "failed" and "conversation" not in st
        assert len(st["errors"]) == 1
        err = st["errors"][0]
        assert err["code"] == meta_code and err["title"] and err["message"] and err["error_data"]["details"], err
    elif channel == "whatsapp_qr":
        p = json.loads(item["body"])["payload"]
        assert (p["id"], p["ack"], p["ackName"]) == (mid, -1, "ERROR")
    else:
        f = form_fields(item["body"])
        assert (f["MessageSid"], f["MessageStatus"], f["SmsStatus"], f["ErrorCode"]) == (mid, twilio[0], twilio[0], twilio[1])
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    assert len(rx.got()) == 1 and cb_stats(cbsim)["sent"] == 1


SCRIPTS = {
    6: ["sent", "delivered", "delivered"],
    7: ["sent", "read", "delivered"],
    8: ["sent"],
    9: ["delivered"],
}
WAHA_WORDS = {"sent": "SERVER", "delivered": "DEVICE", "read": "READ"}


@pytest.mark.parametrize("digit", sorted(SCRIPTS))
@pytest.mark.parametrize("channel", ["whatsapp_meta", "whatsapp_qr", "sms"])
def test_callbacks_scripted_orders(cbsim, rx, channel, digit):
    """Digits 6 (same status twice), 7 (read before delivered), 8 (sent only), 9 (delivered
    only): exactly those callbacks, in that order, each signed."""
    want = SCRIPTS[digit]
    if channel == "whatsapp_qr":
        want = [WAHA_WORDS[w] for w in want]
    mid = send_accepted(cbsim, channel, cb_to(digit))
    items = rx.wait(len(want))
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    items = rx.got()
    assert [said(channel, i) for i in items] == [(mid, w) for w in want]
    for item in items:
        assert_signed(channel, item, rx.url + WEBHOOK[channel])


@pytest.mark.parametrize("channel", ["whatsapp_meta", "whatsapp_qr", "sms"])
def test_callbacks_before_answer(cbsim, rx, channel):
    """Digit 5: sent and then delivered are POSTed before the send is answered; the answer waits
    until the delivered POST has been answered (the receiver takes 0.3 s for each)."""
    rx.hold[WEBHOOK[channel]] = 0.3
    t0 = time.monotonic()
    mid = send_accepted(cbsim, channel, cb_to(5))
    answered = time.monotonic()
    items = rx.got()
    assert [said(channel, i)[1] for i in items] == (["SERVER", "DEVICE"] if channel == "whatsapp_qr"
                                                  else ["sent", "delivered"])
    assert all(said(channel, i)[0] == mid for i in items)
    assert items[1]["at"] + 0.3 <= answered + 0.01, (items, answered)
    assert answered - t0 >= 0.6


def test_callbacks_before_answer_released_by_a_failed_try(cbsim, rx):
    """Digit 5: when the first callback's POST fails (500), the send is answered at once; the
    callbacks then go on (the failed one retried after 1 s)."""
    rx.answers.append(500)
    t0 = time.monotonic()
    mid = send_accepted(cbsim, "whatsapp_meta", cb_to(5))
    assert time.monotonic() - t0 < 0.9
    assert [said("whatsapp_meta", i) for i in rx.got()] == [(mid, "sent")]
    items = rx.wait(3)
    assert [said("whatsapp_meta", i) for i in items] == [(mid, "sent"), (mid, "sent"), (mid, "delivered")]


def test_twilio_status_callback_url_is_used_and_signed(cbsim, rx):
    """A Twilio send with StatusCallback (a path, a query string and a non-default port) gets
    its callbacks there, signed over exactly that URL, query included."""
    callback = rx.url + "/hooks/twilio/status?tenant=t-1&note=a%2Fb+c"
    sid = send_accepted(cbsim, "sms", cb_to(1),
                        fields={"To": cb_to(1), "From": "ACME", "Body": "hi", "StatusCallback": callback})
    items = rx.wait(3)
    for item in items:
        assert item["path"] == "/hooks/twilio/status?tenant=t-1&note=a%2Fb+c", item
        assert_signed("sms", item, callback)
        f = form_fields(item["body"])
        assert item["headers"]["x-twilio-signature"] != twilio_signature(rx.url + "/hooks/twilio/status", f)
    assert [said("sms", i) for i in items] == [(sid, "sent"), (sid, "delivered"), (sid, "read")]


def test_callback_retried_after_a_500(cbsim, rx):
    """A callback answered 500 is sent again, the same body with the same signature, about 1 s
    later; /__sim/callbacks records both tries and /__sim/stats counts them; DELETE clears."""
    rx.answers.append(500)
    sid = send_accepted(cbsim, "sms", cb_to(8))
    first, second = rx.wait(2)
    assert second["at"] - first["at"] >= 0.95
    assert first["body"] == second["body"] and said("sms", first) == (sid, "sent")
    assert first["headers"]["x-twilio-signature"] == second["headers"]["x-twilio-signature"]
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    assert cb_stats(cbsim) == {"sent": 2, "ok": 1, "failed": 1, "retried": 1, "abandoned": 0, "pending": 0}
    status, j = cbsim.control("GET", "/__sim/callbacks")
    recs = j["data"]["items"]
    assert status == 200 and [(r["status"], r["tries"], r["result"]) for r in recs] == [(500, 1, "ok"), (200, 2, "ok")]
    for rec in recs:
        assert rec["provider"] == "twilio" and rec["channel"] == "sms" and rec["messageId"] == sid
        assert rec["url"] == rx.url + "/webhooks/twilio" and rec["body"] == first["body"].decode()
        assert rec["headers"]["x-twilio-signature"] == first["headers"]["x-twilio-signature"]
        assert rec["headers"]["content-type"] == "application/x-www-form-urlencoded"
        assert abs(rec["sentAt"] - time.time() * 1000) < 60000
    assert recs[1]["sentAt"] - recs[0]["sentAt"] >= 950
    status, j = cbsim.control("DELETE", "/__sim/callbacks")
    assert status == 200 and j["data"]["cleared"] == 2
    assert cbsim.control("GET", "/__sim/callbacks")[1]["data"]["items"] == []


def test_callback_reaches_a_receiver_that_comes_back(tmp_path):
    """While nothing listens at the callback URL the tries fail (connection refused) and are
    retried; a receiver started a moment later gets the callback."""
    port = free_port()
    s = Sim(tmp_path, env={"OMNIGATE_SIM_CALLBACK_URL": "http://127.0.0.1:%d" % port})
    late = None
    try:
        mid = send_accepted(s, "whatsapp_meta", cb_to(8))
        assert wait_for(lambda: cb_stats(s)["failed"] >= 1, CB_WAIT), cb_stats(s)
        recs = s.control("GET", "/__sim/callbacks")[1]["data"]["items"]
        assert recs[0]["result"] == "unreachable" and recs[0]["status"] is None and recs[0]["tries"] == 1
        late = Receiver(port)
        item = late.wait(1)[0]
        assert said("whatsapp_meta", item) == (mid, "sent")
        assert "x-hub-signature-256" not in item["headers"]  # no OMNIGATE_META_APP_SECRET here
        assert wait_for(lambda: cb_stats(s)["pending"] == 0, CB_WAIT)
        st = cb_stats(s)
        assert st["ok"] == 1 and st["failed"] >= 1 and st["retried"] == st["failed"] and st["abandoned"] == 0
    finally:
        rc = s.stop()
        if late is not None:
            late.close()
    assert_clean(s, rc)


def test_no_callback_for_digit_0_short_numbers_or_refusals(cbsim, rx):
    """No callback is scripted for digit 0, numbers without a fourth digit, other numbers, or a
    send the simulator did not accept (a behaviour digit or bad credentials); a digit 8 sent
    afterwards is the only callback that arrives."""
    for channel in ("whatsapp_meta", "whatsapp_qr", "sms"):
        for to in (cb_to(0), "+1999000", OK_TO):
            send_accepted(cbsim, channel, to)
        assert SEND[channel](cbsim, cb_to(1, **{DIGIT_OF[channel]: 1})).status == 400
    assert meta_send(cbsim, cb_to(1), token="bad").status == 401
    assert cb_stats(cbsim) == {"sent": 0, "ok": 0, "failed": 0, "retried": 0, "abandoned": 0, "pending": 0}
    mid = send_accepted(cbsim, "whatsapp_qr", cb_to(8))
    rx.wait(1)
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    assert [said("whatsapp_qr", i) for i in rx.got()] == [(mid, "SERVER")]


def test_no_callback_without_callback_url(sim):
    """Without --callback-url nothing is called back, not even a Twilio StatusCallback."""
    r = Receiver()
    try:
        assert cb_stats(sim) == {"sent": 0, "ok": 0, "failed": 0, "retried": 0, "abandoned": 0, "pending": 0}
        send_accepted(sim, "sms", cb_to(1), fields={"To": cb_to(1), "From": "ACME", "Body": "hi",
                                                    "StatusCallback": r.url + "/webhooks/twilio"})
        send_accepted(sim, "whatsapp_meta", cb_to(1))
        assert cb_stats(sim)["pending"] == 0 and cb_stats(sim)["sent"] == 0
        assert sim.control("GET", "/__sim/callbacks")[1]["data"]["items"] == []
        assert not wait_for(lambda: r.got(), 0.5)
    finally:
        r.close()


def test_callbacks_unsigned_without_secrets_and_flag_form(tmp_path):
    """--callback-url works as a flag; a provider whose secret is unset sends its callbacks
    without a signature header."""
    r = Receiver()
    s = Sim(tmp_path, env={"OMNIGATE_SMS_AUTH_TOKEN": None}, args=["--callback-url", r.url + "/"])
    try:
        for channel in ("whatsapp_meta", "whatsapp_qr", "sms"):
            send_accepted(s, channel, cb_to(8))
        items = r.wait(3)
        assert sorted(i["path"] for i in items) == ["/webhooks/meta", "/webhooks/twilio", "/webhooks/waha"]
        for item in items:
            assert not {"x-hub-signature-256", "x-webhook-hmac", "x-webhook-hmac-algorithm",
                        "x-twilio-signature"} & set(item["headers"]), item
    finally:
        rc = s.stop()
        r.close()
    assert_clean(s, rc)


def test_rule_scripts_callbacks_for_any_recipient(cbsim, rx):
    """A rule's "callback" scripts any recipient (with its callbackDelayMs); "none" silences a
    magic digit; a rule without "callback" leaves the fourth digit in charge."""
    rule = cbsim.rule(channel="whatsapp_qr", to=OK_TO, behaviour="ok", callback="read_first", callbackDelayMs=0)
    assert rule["callback"] == "read_first" and rule["callbackDelayMs"] == 0
    mid = send_accepted(cbsim, "whatsapp_qr", OK_TO)
    items = rx.wait(3)
    assert [said("whatsapp_qr", i) for i in items] == [(mid, "SERVER"), (mid, "READ"), (mid, "DEVICE")]
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)  # the last answer was taken in
    rx.reset()
    cbsim.rule(channel="sms", to=cb_to(1), behaviour="ok", callback="none")
    send_accepted(cbsim, "sms", cb_to(1))
    assert cb_stats(cbsim)["pending"] == 0
    plain = cbsim.rule(channel="whatsapp_meta", behaviour="ok", latencyMs=100)
    assert plain["callback"] is None and plain["callbackDelayMs"] == 20
    mid = send_accepted(cbsim, "whatsapp_meta", cb_to(8))
    assert [said("whatsapp_meta", i) for i in rx.wait(1)] == [(mid, "sent")]


def test_callback_delay_spaces_the_callbacks(cbsim, rx):
    """callbackDelayMs is the pause before each callback, counted from the previous answer."""
    cbsim.rule(channel="whatsapp_meta", behaviour="ok", callback="delivered_read", callbackDelayMs=300)
    t0 = time.monotonic()
    send_accepted(cbsim, "whatsapp_meta", OK_TO)
    items = rx.wait(3)
    assert items[0]["at"] - t0 >= 0.29
    assert items[1]["at"] - items[0]["at"] >= 0.29 and items[2]["at"] - items[1]["at"] >= 0.29


@pytest.mark.parametrize("body,field", [
    ({"behaviour": "ok", "callback": "maybe"}, "callback"),
    ({"behaviour": "ok", "callback": 5}, "callback"),
    ({"behaviour": "ok", "callbackDelayMs": 600001}, "callbackDelayMs"),
    ({"behaviour": "ok", "callbackDelayMs": -1}, "callbackDelayMs"),
])
def test_rule_callback_validation(sim, body, field):
    """An invalid callback or callbackDelayMs is 422 naming the field."""
    status, j = sim.control("POST", "/__sim/rules", body)
    assert status == 422 and j["error"]["field"] == field, j


def test_sigterm_drops_pending_callbacks_and_answers_held_sends(tmp_path):
    """SIGTERM with a callback waiting for its retry and a before_answer send held while its
    callback is slow: the held send is answered at once, the callbacks are dropped, and the
    process exits 0 well before the retry or the slow receiver would have finished."""
    r = Receiver()
    r.answers.append(500)
    r.hold["/webhooks/meta"] = 5.0
    s = Sim(tmp_path, env={"OMNIGATE_SIM_CALLBACK_URL": r.url})
    try:
        send_accepted(s, "whatsapp_qr", cb_to(1))
        r.wait(1)
        held = Conn(s.port, timeout=10)
        held.send(request_bytes("POST", META_PATH, [("Authorization", "Bearer " + META_TOKEN)],
                                json.dumps(meta_body(cb_to(5)))))
        r.wait(2)
        assert cb_stats(s)["pending"] == 3 + 2  # WAHA's three (the first awaits its retry), Meta's two
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        resp = held.read_response(timeout=3)
        assert resp.status == 200 and resp.header("Connection") == "close", resp
        s.proc.wait(timeout=10)
        assert time.monotonic() - t0 < 2.5
        held.close()
        assert len(r.got()) == 2
    finally:
        rc = s.stop()
        r.close()
    assert_clean(s, rc)


def test_callback_url_flag_errors_and_help():
    """--help documents --callback-url; a URL that is not http(s) or a flag without a value exits 2."""
    p = subprocess.run([SIM_BIN, "--help"], env=base_env(), capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "--callback-url" in p.stdout
    for args in (["--callback-url", "ftp://x"], ["--callback-url=nope"], ["--callback-url"]):
        p = subprocess.run([SIM_BIN] + args, env=base_env(), capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and "callback" in p.stderr.lower(), (args, p.stderr)
    p = subprocess.run([SIM_BIN], env=base_env({"OMNIGATE_SIM_CALLBACK_URL": "127.0.0.1:9"}),
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "OMNIGATE_SIM_CALLBACK_URL" in p.stderr


# ---- WhatsApp message templates -----------------------------------------------------------------

WABA = "102290129340398"
TEMPLATES_PATH = "/__sim/meta/wabas/%s/templates"
LIST_PATH = "/v21.0/%s/message_templates"
E132000 = "(#132000) Number of parameters does not match the expected number of params"


def template(name, body="Hi {{1}}, your code is {{2}}", language="en_US", buttons=None, **fields):
    """A template in Meta's shape: a BODY, and BUTTONS when given."""
    t = {"name": name, "language": language, "components": [{"type": "BODY", "text": body}]}
    if buttons is not None:
        t["components"].append({"type": "BUTTONS", "buttons": buttons})
    t.update(fields)
    return t


def put_templates(sim, templates=(), waba=WABA, phones=(META_PHONE_ID,), **extra):
    body = {"phoneNumberIds": list(phones), "templates": list(templates)}
    body.update(extra)
    return sim.control("PUT", TEMPLATES_PATH % waba, body)


def catalogue(sim, templates=(), **kw):
    status, j = put_templates(sim, templates, **kw)
    assert status == 200, j
    return j["data"]


def list_templates(sim, waba=WABA, query="", token=META_TOKEN, path=None):
    headers = [("Host", "127.0.0.1:%d" % sim.port)]
    if token is not None:
        headers.append(("Authorization", "Bearer " + token))
    return sim.request("GET", (path or LIST_PATH % waba) + query, headers)


def follow(sim, next_url):
    """The page a `next` link points at; the link must name the host the client used."""
    u = urllib.parse.urlsplit(next_url)
    assert (u.scheme, u.netloc) == ("http", "127.0.0.1:%d" % sim.port), next_url
    return list_templates(sim, path=u.path, query="?" + u.query)


def all_pages(sim, query):
    pages, r = [], list_templates(sim, query=query)
    while True:
        assert r.status == 200, r
        pages.append(r.json())
        if "next" not in pages[-1].get("paging", {}):
            return pages
        r = follow(sim, pages[-1]["paging"]["next"])


def template_send(sim, name, language="en_US", components=None, to=OK_TO, path=META_PATH, **kw):
    tpl = {"name": name, "language": {"policy": "deterministic", "code": language}}
    if components is not None:
        tpl["components"] = components
    body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to.lstrip("+"),
            "type": "template", "template": tpl}
    return meta_send(sim, to, body=body, path=path, **kw)


def body_params(*texts):
    return {"type": "body", "parameters": [{"type": "text", "text": t} for t in texts]}


def url_button(index, *texts):
    return {"type": "button", "sub_type": "url", "index": str(index),
            "parameters": [{"type": "text", "text": t} for t in texts]}


def meta_err(r, status, code):
    assert r.status == status, r
    err = r.json()["error"]
    assert err["code"] == code and err["type"] == "OAuthException" and err["fbtrace_id"], err
    return err


def test_templates_listing_follows_next_through_every_page(sim):
    """250 templates listed 100 at a time: three pages found by following `next` (on the Host the
    client used), every template once in catalogue order, Graph cursors, and the last page with
    cursors but no `next`."""
    names = ["t_%03d" % i for i in range(250)]
    assert catalogue(sim, [template(n) for n in names]) == {"wabaId": WABA, "templates": 250}
    pages = all_pages(sim, "?limit=100&fields=name,status")
    assert [len(p["data"]) for p in pages] == [100, 100, 50]
    assert [t["name"] for p in pages for t in p["data"]] == names
    assert pages[0]["paging"]["cursors"] == {"before": "MAZDZD", "after": "OTkZD"}  # Graph's base64 of 0 and 99
    assert pages[0]["paging"]["next"] == ("http://127.0.0.1:%d/v21.0/%s/message_templates?limit=100&after=OTkZD"
                                          % (sim.port, WABA))
    assert set(pages[2]["paging"]) == {"cursors"} and set(pages[2]["paging"]["cursors"]) == {"before", "after"}
    first = pages[0]["data"][0]
    assert first["name"] == "t_000" and first["language"] == "en_US" and first["status"] == "APPROVED"
    assert first["category"] == "UTILITY" and first["parameter_format"] == "POSITIONAL"
    assert re.match(r"^\d{15,18}$", first["id"]) and len({t["id"] for p in pages for t in p["data"]}) == 250


def test_templates_listing_default_limit_is_25(sim):
    """Without ?limit a page has 25 templates and `next` carries limit=25; without a Host header
    `next` names the listen address."""
    catalogue(sim, [template("t_%02d" % i) for i in range(30)])
    j = list_templates(sim).json()
    assert len(j["data"]) == 25 and "limit=25&after=" in j["paging"]["next"]
    assert [t["name"] for t in follow(sim, j["paging"]["next"]).json()["data"]] == ["t_%02d" % i for i in range(25, 30)]
    with Conn(sim.port) as c:
        c.send(request_bytes("GET", LIST_PATH % WABA, [("Authorization", "Bearer " + META_TOKEN)],
                             version="HTTP/1.0", host=False))
        r = c.read_response()
    assert r.json()["paging"]["next"].startswith("http://127.0.0.1:%d/v21.0/" % sim.port), r


def test_templates_listing_empty_catalogue(sim):
    """An empty catalogue lists as {"data":[]} (Graph's empty edge); so does the page after the
    last template's cursor."""
    catalogue(sim, [])
    r = list_templates(sim)
    assert r.status == 200 and r.json() == {"data": []}, r
    catalogue(sim, [template("only")])
    after = list_templates(sim).json()["paging"]["cursors"]["after"]
    assert list_templates(sim, query="?after=" + after).json() == {"data": []}


def test_templates_listing_checks_version_then_token_then_waba(sim):
    """The listing refuses another API version (400 code 2500) before a bad token (401 code 190
    with WWW-Authenticate), and a bad token before an unknown WABA (400 code 100 subcode 33)."""
    catalogue(sim, [template("a")])
    meta_err(list_templates(sim, token="bad", path="/v20.0/%s/message_templates" % WABA), 400, 2500)
    r = list_templates(sim, waba="999", token="bad")
    assert meta_err(r, 401, 190)["error_subcode"] == 463 and r.header("WWW-Authenticate", "").startswith("OAuth")
    for waba in ("999", "not-a-waba"):
        err = meta_err(list_templates(sim, waba=waba), 400, 100)
        assert err["error_subcode"] == 33
        assert err["message"] == ("Unsupported get request. Object with ID '%s' does not exist, cannot be loaded "
                                  "due to missing permissions, or does not support this operation." % waba)


@pytest.mark.parametrize("query", ["?limit=0", "?limit=1001", "?limit=abc", "?limit=", "?limit=-5",
                                   "?after=garbage", "?after=MQ", "?after=NQZDZD", "?after=", "?after=MDAZD"])
def test_templates_listing_bad_limit_or_cursor_is_code_100(sim, query):
    """A limit outside 1..1000, or an after cursor the listing never gave (garbage, unpadded,
    past the end, zero-padded), is 400 code 100."""
    catalogue(sim, [template("t_%d" % i) for i in range(5)])
    assert list_templates(sim, query="?limit=1000").status == 200
    meta_err(list_templates(sim, query=query), 400, 100)


def test_templates_listing_behaviours_recorded_and_counted(sim):
    """listBehaviour error is 500 code 1 "An unknown error occurred", auth is 401 code 190; every
    listing request is recorded (channel whatsapp_meta, to null) and counted as a Meta request."""
    sim.control("DELETE", "/__sim/stats")
    catalogue(sim, [template("a")], listBehaviour="error")
    err = meta_err(list_templates(sim), 500, 1)
    assert err["message"] == "An unknown error occurred"
    catalogue(sim, [template("a")], listBehaviour="auth")
    assert meta_err(list_templates(sim), 401, 190)["error_subcode"] == 463
    catalogue(sim, [template("a")], listBehaviour="ok")
    assert list_templates(sim).status == 200
    meta_err(list_templates(sim, token="bad"), 401, 190)
    items = sim.requests("?channel=whatsapp_meta")
    assert [(i["method"], i["path"], i["to"]) for i in items] == [("GET", LIST_PATH % WABA, None)] * 4
    st = sim.stats()["channels"]["whatsapp_meta"]
    assert (st["requests"], st["error"], st["auth"], st["ok"], st["unauthorized"]) == (4, 1, 1, 1, 1)


def test_templates_generate_1000_lists_in_10_pages(sim):
    """generate: 1000 adds gen_00001 .. gen_01000 (APPROVED UTILITY POSITIONAL en_US, two body
    parameters), listed in ten pages of 100; a generated template can be sent."""
    assert catalogue(sim, generate=1000) == {"wabaId": WABA, "templates": 1000}
    pages = all_pages(sim, "?limit=100")
    assert len(pages) == 10 and all(len(p["data"]) == 100 for p in pages)
    got = [t for p in pages for t in p["data"]]
    assert [t["name"] for t in got] == ["gen_%05d" % i for i in range(1, 1001)]
    assert {(t["language"], t["status"], t["category"], t["parameter_format"]) for t in got} == {
        ("en_US", "APPROVED", "UTILITY", "POSITIONAL")}
    assert got[0]["components"] == [{"type": "BODY", "text": "Hello {{1}}, your order {{2}} is ready"}]
    assert template_send(sim, "gen_00042", components=[body_params("Ann", "A-1")]).status == 200


def test_templates_control_put_get_replace_and_delete(sim):
    """PUT replaces a WABA's catalogue (given ids kept, missing ones assigned), GET returns it
    with its phone number ids, an unknown WABA is 404, DELETE /__sim/meta/wabas forgets all."""
    catalogue(sim, [template("a", id="123456789012345"), template("b")], phones=[META_PHONE_ID, "555000111"])
    status, j = sim.control("GET", TEMPLATES_PATH % WABA)
    assert status == 200 and j["data"]["phoneNumberIds"] == [META_PHONE_ID, "555000111"]
    a, b = j["data"]["templates"]
    assert a["id"] == "123456789012345" and re.match(r"^\d+$", b["id"]) and b["status"] == "APPROVED"
    catalogue(sim, [template("c")])
    assert [t["name"] for t in sim.control("GET", TEMPLATES_PATH % WABA)[1]["data"]["templates"]] == ["c"]
    assert sim.control("GET", TEMPLATES_PATH % "42")[0] == 404
    status, j = sim.control("DELETE", "/__sim/meta/wabas")
    assert status == 200 and j["data"]["cleared"] == 1
    assert sim.control("GET", TEMPLATES_PATH % WABA)[0] == 404
    assert meta_err(list_templates(sim), 400, 100)["error_subcode"] == 33


@pytest.mark.parametrize("body,field", [
    ({"templates": [template("Bad-Name")]}, "templates[0].name"),
    ({"templates": [template("a", language="en US")]}, "templates[0].language"),
    ({"templates": [{"name": "a", "language": "en_US", "components": [{"type": "FOOTER", "text": "x"}]}]},
     "templates[0].components"),
    ({"templates": [template("a", parameter_format="MIXED")]}, "templates[0].parameter_format"),
    ({"templates": [template("a", body="Hi {{name}}")]}, "templates[0].components[0].text"),
    ({"templates": [template("a", body="Hi {{1}}", parameter_format="NAMED")]}, "templates[0].components[0].text"),
    ({"templates": [template("a", buttons=[{"type": "URL", "text": "Go"}])]}, "templates[0].components[1].buttons[0].url"),
    ({"templates": [template("a", id=12345)]}, "templates[0].id"),
    ({"templates": [template("a"), template("b"), template("a")]}, "templates[2]"),
    ({"templates": [template("gen_00001")], "generate": 1}, "generate"),
    ({"generate": 20001}, "generate"),
    ({"templates": [template("a")] * 1, "generate": 20000}, "templates"),
    ({"listBehaviour": "maybe"}, "listBehaviour"),
    ({"phoneNumberIds": ["12ab"]}, "phoneNumberIds[0]"),
    ({"phoneNumberIds": ["1", "1"]}, "phoneNumberIds[1]"),
    ({"templatez": []}, "templatez"),
])
def test_templates_put_validation(sim, body, field):
    """An invalid catalogue is 422 naming the field, and the WABA's catalogue stays as it was."""
    catalogue(sim, [template("kept")])
    status, j = sim.control("PUT", TEMPLATES_PATH % WABA, body)
    assert status == 422 and j["error"]["field"] == field, j
    assert [t["name"] for t in sim.control("GET", TEMPLATES_PATH % WABA)[1]["data"]["templates"]] == ["kept"]


def test_templates_phone_bound_to_one_waba_and_at_most_64_wabas(sim):
    """A phone number id bound to a WABA cannot be bound to another (422 naming it); at most 64
    WABAs have catalogues (the 65th is 422 too_many_wabas)."""
    catalogue(sim, [template("a")])
    status, j = put_templates(sim, [template("a")], waba="7")
    assert status == 422 and j["error"]["field"] == "phoneNumberIds[0]" and WABA in j["message"], j
    for n in range(63):
        catalogue(sim, waba=str(1000 + n), phones=())
    status, j = put_templates(sim, waba="9", phones=())
    assert status == 422 and j["error"]["code"] == "too_many_wabas", j
    catalogue(sim, [template("b")])  # replacing an existing one is still fine


def test_template_send_accepted(sim):
    """A template send that matches its catalogue (body parameters, the URL button's parameter, a
    quick reply payload) is accepted like a text send and recorded byte for byte."""
    catalogue(sim, [template("order_ready", buttons=[{"type": "QUICK_REPLY", "text": "Stop"},
                                                     {"type": "URL", "text": "Track", "url": "https://x/{{1}}"}],
                             category="MARKETING")])
    comps = [body_params("Ann", "4711"), url_button(1, "A-4711"),
             {"type": "button", "sub_type": "quick_reply", "index": "0",
              "parameters": [{"type": "payload", "payload": "STOP"}]}]
    r = template_send(sim, "order_ready", components=comps)
    assert r.status == 200, r
    j = r.json()
    assert j["contacts"] == [{"input": OK_TO[1:], "wa_id": OK_TO[1:]}] and j["messages"][0]["id"].startswith("wamid.")
    rec = sim.requests("?channel=whatsapp_meta")[-1]
    assert json.loads(rec["body"])["template"]["components"] == comps and rec["to"] == OK_TO


@pytest.mark.parametrize("name,language,path", [
    ("order_redy", "en_US", META_PATH),
    ("order_ready", "pt_BR", META_PATH),
    ("order_ready", "en_US", "/v21.0/200000000000001/messages"),
])
def test_template_send_unknown_template_is_132001(sim, name, language, path):
    """A name, a language, or a phone number id bound to no WABA, without that template: 400 code
    132001 with Meta's details."""
    catalogue(sim, [template("order_ready")])
    err = meta_err(template_send(sim, name, language, [body_params("a", "b")], path=path), 400, 132001)
    assert err["message"] == "(#132001) Template name does not exist in the translation"
    assert err["error_data"]["details"] == "template name (%s) does not exist in %s" % (name, language)


@pytest.mark.parametrize("event,code,message", [
    ("PAUSED", 132015, "(#132015) Template is Paused"),
    ("DISABLED", 132016, "(#132016) Template has been disabled"),
    ("REJECTED", 132001, "(#132001) Template name does not exist in the translation"),
    ("PENDING", 132001, "(#132001) Template name does not exist in the translation"),
])
def test_template_send_after_a_status_change(sim, event, code, message):
    """A status change takes effect on the next send: PAUSED is 132015, DISABLED 132016, any other
    status but APPROVED 132001; APPROVED again sends."""
    catalogue(sim, [template("promo")])
    comps = [body_params("a", "b")]
    status, j = sim.control("POST", TEMPLATES_PATH % WABA + "/status",
                            {"name": "promo", "language": "en_US", "event": event})
    assert status == 200 and j["data"]["status"] == event and j["data"]["name"] == "promo", j
    assert meta_err(template_send(sim, "promo", components=comps), 400, code)["message"] == message
    sim.control("POST", TEMPLATES_PATH % WABA + "/status", {"name": "promo", "language": "en_US", "event": "APPROVED"})
    assert template_send(sim, "promo", components=comps).status == 200


def test_template_status_route_errors(sim):
    """The status route is 404 for an unknown WABA or template and 422 for an event that is not
    a status word."""
    catalogue(sim, [template("promo")])
    path = TEMPLATES_PATH % WABA + "/status"
    assert sim.control("POST", TEMPLATES_PATH % "42" + "/status", {"name": "promo", "language": "en_US",
                                                                   "event": "PAUSED"})[0] == 404
    assert sim.control("POST", path, {"name": "promo", "language": "pt_BR", "event": "PAUSED"})[0] == 404
    status, j = sim.control("POST", path, {"name": "promo", "language": "en_US", "event": "paused!"})
    assert status == 422 and j["error"]["field"] == "event", j


@pytest.mark.parametrize("params,got", [([], 0), (["a"], 1), (["a", "b", "c"], 3)])
def test_template_send_wrong_body_count_is_132000(sim, params, got):
    """The body parameters must be as many as the distinct placeholders of the BODY ({{1}} twice
    counts once): else 400 code 132000 saying both numbers."""
    catalogue(sim, [template("code", body="{{1}} is your code. Again: {{1}}. Valid {{2}} min")])
    comps = [body_params(*params)] if params else None
    err = meta_err(template_send(sim, "code", components=comps), 400, 132000)
    assert err["message"] == E132000
    assert err["error_data"]["details"] == ("body: number of localizable_params (%d) does not match the expected "
                                            "number of params (2)" % got)
    assert template_send(sim, "code", components=[body_params("1", "2")]).status == 200


@pytest.mark.parametrize("names,details", [
    (["first_name", "code"], None),
    (["first_name", "cod"], "body: parameter_name (cod) is not a parameter of the template"),
    (["first_name", None], "body: parameter 1 has no parameter_name (the template's parameter_format is NAMED)"),
    (["code", "code"], "body: parameter_name (code) is given twice"),
])
def test_template_send_named_parameters(sim, names, details):
    """A NAMED template takes body parameters each naming a distinct placeholder; any other name
    (or none) is 400 code 132000 naming it."""
    catalogue(sim, [template("named", body="Hi {{first_name}}, use {{code}}", parameter_format="NAMED")])
    params = [{"type": "text", "text": "x"} if n is None else {"type": "text", "text": "x", "parameter_name": n}
              for n in names]
    r = template_send(sim, "named", components=[{"type": "body", "parameters": params}])
    if details is None:
        assert r.status == 200, r
    else:
        assert meta_err(r, 400, 132000)["error_data"]["details"] == details


BUTTONS = [{"type": "QUICK_REPLY", "text": "Stop"}, {"type": "URL", "text": "Track", "url": "https://x/{{1}}"},
           {"type": "URL", "text": "Home", "url": "https://x/"}]


@pytest.mark.parametrize("buttons,code,details", [
    ([], 132000, "button at index 1: the URL button needs a parameter (sub_type url, one text parameter)"),
    ([url_button(1)], 100, None),  # no parameter at all is a malformed component
    ([url_button(1, "a", "b")], 132000, "button at index 1: exactly one text parameter is required"),
    ([dict(url_button(1, "a"), sub_type="quick_reply")], 132000,
     "button at index 1: sub_type must be url for the URL button"),
    ([url_button(1, "a"), url_button(1, "b")], 132000, "button at index 1: given twice"),
    ([url_button(1, "a"), url_button(2, "b")], 132000, "button at index 2: the URL button takes no parameter"),
    ([url_button(1, "a"), url_button(5, "b")], 131009, "button at index 5: the template has no button there"),
    ([url_button(1, "a"), {"type": "button", "sub_type": "url", "index": "0",
                           "parameters": [{"type": "payload", "payload": "P"}]}], 132000,
     "button at index 0: sub_type must be quick_reply for the QUICK_REPLY button"),
])
def test_template_send_button_parameters(sim, buttons, code, details):
    """A URL button whose url has {{1}} needs a url button component at its index with exactly one
    text parameter (else 132000 "button at index i: ..."); a component for an index without a
    button is 131009; a static button takes none."""
    catalogue(sim, [template("track", body="Hi", buttons=BUTTONS)])
    err = meta_err(template_send(sim, "track", components=buttons), 400, code)
    if details is not None:
        assert err["error_data"]["details"] == details
    if code == 131009:
        assert err["message"] == "(#131009) Parameter value is not valid"
    assert template_send(sim, "track", components=[url_button(1, "a")]).status == 200


def test_template_send_otp_button_needs_the_code(sim):
    """An authentication template's OTP COPY_CODE button is sent as a url button carrying the code:
    without it 132000, with it accepted."""
    catalogue(sim, [template("otp", body="{{1}} is your verification code.", category="AUTHENTICATION",
                             buttons=[{"type": "OTP", "otp_type": "COPY_CODE", "text": "Copy code"}])])
    err = meta_err(template_send(sim, "otp", components=[body_params("123456")]), 400, 132000)
    assert err["error_data"]["details"].startswith("button at index 0: the OTP button needs a parameter")
    assert template_send(sim, "otp", components=[body_params("123456"), url_button(0, "123456")]).status == 200


@pytest.mark.parametrize("tpl", [
    None,
    {"language": {"code": "en_US"}},
    {"name": "a"},
    {"name": "a", "language": {"code": ""}},
    {"name": "a", "language": {"code": "en_US", "policy": "fallback"}},
    {"name": "a", "language": {"code": "en_US"}, "components": {"type": "body"}},
    {"name": "a", "language": {"code": "en_US"}, "components": [{"type": "footer"}]},
    {"name": "a", "language": {"code": "en_US"}, "components": [body_params("x"), body_params("y")]},
    {"name": "a", "language": {"code": "en_US"}, "components": [{"type": "body", "parameters": [{"type": "image"}]}]},
    {"name": "a", "language": {"code": "en_US"}, "components": [{"type": "body", "parameters": [{"type": "text"}]}]},
    {"name": "a", "language": {"code": "en_US"}, "components": [dict(url_button(0, "x"), sub_type="catalog")]},
    {"name": "a", "language": {"code": "en_US"}, "components": [dict(url_button(0, "x"), index="x")]},
])
def test_template_send_malformed_is_code_100(sim, tpl):
    """A template object Meta would refuse as malformed is 400 code 100 "(#100) Invalid
    parameter" with details, before the catalogue is looked at."""
    body = {"messaging_product": "whatsapp", "to": OK_TO[1:], "type": "template"}
    if tpl is not None:
        body["template"] = tpl
    err = meta_err(meta_send(sim, body=body), 400, 100)
    assert err["message"] == "(#100) Invalid parameter" and "template" in err["error_data"]["details"], err


def test_template_send_follows_the_planned_behaviour(sim):
    """Only a template send the catalogue allows meets the planned behaviour: magic digits and
    rules then apply exactly as for text (reject 131026, error 131000, a rule's throttle)."""
    catalogue(sim, [template("promo")])
    sim.control("DELETE", "/__sim/stats")
    comps = [body_params("a", "b")]
    meta_err(template_send(sim, "promo", components=comps, to=magic(meta=1)), 400, 131026)
    meta_err(template_send(sim, "promo", components=comps, to=magic(meta=2)), 500, 131000)
    meta_err(template_send(sim, "nope", components=comps, to=magic(meta=2)), 400, 132001)
    sim.rule(channel="whatsapp_meta", to=OK_TO, behaviour="throttle")
    meta_err(template_send(sim, "promo", components=comps), 429, 130429)
    st = sim.stats()["channels"]["whatsapp_meta"]
    assert (st["requests"], st["reject"], st["error"], st["invalid"], st["throttle"], st["ok"]) == (4, 1, 1, 1, 1, 0)


def test_template_status_webhook_is_posted_and_signed(cbsim, rx):
    """A status change POSTs Meta's message_template_status_update to /webhooks/meta, signed with
    X-Hub-Signature-256, recorded in /__sim/callbacks under the template id; notify: false sends
    nothing; the reason defaults to NONE."""
    catalogue(cbsim, [template("promo", id="998877665544332")])
    path = TEMPLATES_PATH % WABA + "/status"
    t0 = time.time()
    assert cbsim.control("POST", path, {"name": "promo", "language": "en_US", "event": "PAUSED",
                                        "notify": False})[0] == 200
    status, j = cbsim.control("POST", path, {"name": "promo", "language": "en_US", "event": "REJECTED",
                                             "reason": "INVALID_FORMAT"})
    assert status == 200 and j["data"]["status"] == "REJECTED", j
    cbsim.control("POST", path, {"name": "promo", "language": "en_US", "event": "APPROVED"})
    items = rx.wait(2)
    assert wait_for(lambda: cb_stats(cbsim)["pending"] == 0, CB_WAIT)
    items = rx.got()
    assert len(items) == 2
    for item in items:
        assert item["path"] == "/webhooks/meta" and item["headers"]["content-type"] == "application/json"
        assert_signed("whatsapp_meta", item)
    body = json.loads(items[0]["body"])
    assert body["object"] == "whatsapp_business_account" and len(body["entry"]) == 1
    entry = body["entry"][0]
    assert entry["id"] == WABA and isinstance(entry["time"], int) and abs(entry["time"] - t0) < 60
    assert entry["changes"] == [{"field": "message_template_status_update", "value": {
        "event": "REJECTED", "message_template_id": 998877665544332, "message_template_name": "promo",
        "message_template_language": "en_US", "reason": "INVALID_FORMAT"}}]
    assert json.loads(items[1]["body"])["entry"][0]["changes"][0]["value"]["reason"] == "NONE"
    recs = cbsim.control("GET", "/__sim/callbacks")[1]["data"]["items"]
    assert [(r["provider"], r["channel"], r["messageId"], r["status"]) for r in recs] == [
        ("meta", "whatsapp_meta", "998877665544332", 200)] * 2


def test_template_send_gets_status_callbacks(cbsim, rx):
    """An accepted template send is followed by the status callbacks its recipient scripts, like a
    text send (digit 8: sent)."""
    catalogue(cbsim, [template("promo")])
    r = template_send(cbsim, "promo", components=[body_params("a", "b")], to=cb_to(8))
    assert r.status == 200, r
    assert [said("whatsapp_meta", i) for i in rx.wait(1)] == [(r.json()["messages"][0]["id"], "sent")]


def test_templates_put_takes_10000_templates(sim):
    """PUT takes a catalogue of 10,000 templates (a body far over OMNIGATE_MAX_BODY_BYTES); the
    last of them is on the tenth page of 1,000."""
    names = ["big_%05d" % i for i in range(10000)]
    status, j = put_templates(sim, [template(n) for n in names])
    assert status == 200 and j["data"]["templates"] == 10000, j
    pages = all_pages(sim, "?limit=1000")
    assert len(pages) == 10 and pages[-1]["data"][-1]["name"] == "big_09999"


# ---- rate limits per sender ---------------------------------------------------------------------

LIMITS_PATH = "/__sim/limits"
OTHER_PHONE_ID = "109876543299"
THREE_SEGMENTS = "x" * 400  # GSM-7: 153 characters a part once there are several, so 3 parts


def put_limit(sim, **body):
    return sim.control("PUT", LIMITS_PATH, body)


def limit(sim, **body):
    status, j = put_limit(sim, **body)
    assert status in (200, 201), j
    return j["data"]


def limits(sim):
    status, j = sim.control("GET", LIMITS_PATH)
    assert status == 200, j
    return j["data"]


def meta_req(phone_id=META_PHONE_ID, to=OK_TO, token=META_TOKEN, body=None):
    headers = [("Content-Type", "application/json"), ("Authorization", "Bearer " + token)]
    raw = body if isinstance(body, str) else json.dumps(body if body is not None else meta_body(to))
    return ("POST", "/v21.0/%s/messages" % phone_id, headers, raw)


def waha_req(session="default", to=OK_TO):
    body = {"chatId": to.lstrip("+") + "@c.us", "text": "hello"}
    if session is not None:
        body["session"] = session
    return ("POST", WAHA_PATH, [("X-Api-Key", QR_KEY), ("Content-Type", "application/json")], json.dumps(body))


def sms_req(sender="ACME", to=OK_TO, text="hello", field="From"):
    fields = {"To": to, field: sender, "Body": text}
    headers = [("Authorization", basic(SMS_SID, SMS_TOKEN)), ("Content-Type", "application/x-www-form-urlencoded")]
    return ("POST", SMS_PATH, headers, urllib.parse.urlencode(fields))


def together(sim, reqs, timeout=10.0):
    """Sends `reqs` pipelined in one write, so that they arrive within the same instant (no
    token can refill between them, however loaded the machine), and returns the answers."""
    with Conn(sim.port, timeout=timeout) as c:
        c.send(b"".join(request_bytes(*r) for r in reqs))
        return [c.read_response(timeout=timeout) for _ in reqs]


def one(sim, req):
    return together(sim, [req])[0]


def bucket(sim, channel, sender):
    """The bucket of `sender` on `channel` in GET /__sim/limits, whichever limit it is under."""
    for item in limits(sim)["items"]:
        for b in item["buckets"]:
            if item["channel"] == channel and b["sender"] == sender:
                return b
    raise AssertionError("no bucket for %s %s in %r" % (channel, sender, limits(sim)))


def test_limit_meta_per_phone_number_id(sim):
    """A limit of 5/s burst 5 on a Meta phone number id: 5 requests at once are accepted, the 6th
    is 429 code 130429 (the throttle behaviour's body, no Retry-After); the bucket refills and
    accepts again; another phone number id is not limited by it."""
    status, j = put_limit(sim, channel="whatsapp_meta", sender=META_PHONE_ID, perSecond=5, burst=5)
    assert status == 201, j
    answers = together(sim, [meta_req() for _ in range(6)] + [meta_req(OTHER_PHONE_ID)])
    assert [r.status for r in answers] == [200] * 5 + [429, 200], answers
    err = meta_err(answers[5], 429, 130429)
    assert err["message"] == "(#130429) Rate limit hit", err
    assert err["error_data"]["details"] == "Cloud API message throughput has been reached.", err
    assert answers[5].header("Retry-After") is None
    assert wait_for(lambda: one(sim, meta_req()).status == 200, 5), "the bucket never refilled"
    b = bucket(sim, "whatsapp_meta", META_PHONE_ID)
    assert b["accepted"] == 6 and b["acceptedTokens"] == 6 and b["throttled"] >= 1, b


def test_limit_twilio_from_counts_segments(sim):
    """Twilio paces a From in segments: under 5/s burst 5, a 3-segment SMS takes 3 tokens, so a
    second one is 429 code 20429 (no Retry-After) while two 1-segment ones still pass; another
    From is not limited, and MessagingServiceSid is the sender when there is no From."""
    limit(sim, channel="sms", sender="ACME", perSecond=5, burst=5)
    limit(sim, channel="sms", sender="MG" + "0" * 32, perSecond=0.01, burst=1)
    answers = together(sim, [sms_req(text=THREE_SEGMENTS), sms_req(text=THREE_SEGMENTS), sms_req(), sms_req(),
                             sms_req(), sms_req("OTHER", text=THREE_SEGMENTS),
                             sms_req("MG" + "0" * 32, field="MessagingServiceSid"),
                             sms_req("MG" + "0" * 32, field="MessagingServiceSid")])
    assert [r.status for r in answers] == [201, 429, 201, 201, 429, 201, 201, 429], answers
    assert answers[0].json()["num_segments"] == "3"
    for r in (answers[1], answers[4], answers[7]):
        assert r.json() == {"code": 20429, "message": "Too Many Requests",
                            "more_info": "https://www.twilio.com/docs/errors/20429", "status": 429}, r
        assert r.header("Retry-After") is None
    b = bucket(sim, "sms", "ACME")
    assert (b["accepted"], b["acceptedTokens"], b["throttled"]) == (3, 5, 2), b
    assert wait_for(lambda: one(sim, sms_req()).status == 201, 5), "the bucket never refilled"


def test_limit_waha_per_session(sim):
    """A limit on a WAHA session: 5 at once pass, the 6th is NestJS's ThrottlerException 429 with
    its Retry-After (whole seconds until a token is back); other sessions are not limited, a send
    without a session is the "default" session's, and the bucket refills."""
    limit(sim, channel="whatsapp_qr", sender="s1", perSecond=5, burst=5)
    limit(sim, channel="whatsapp_qr", sender="default", perSecond=0.1, burst=1)
    answers = together(sim, [waha_req("s1") for _ in range(6)] + [waha_req("s2"), waha_req(None),
                                                                    waha_req("default")])
    assert [r.status for r in answers] == [201] * 5 + [429, 201, 201, 429], answers
    assert answers[5].json() == {"statusCode": 429, "message": "ThrottlerException: Too Many Requests"}
    assert answers[5].header("Retry-After") == "1"  # 1/5 s to the next token, rounded up
    assert answers[8].header("Retry-After") == "10"  # 1/0.1 s
    assert wait_for(lambda: one(sim, waha_req("s1")).status == 201, 5), "the bucket never refilled"


def test_limit_for_every_sender_gives_each_its_own_bucket(sim):
    """A limit without a sender covers every sender of its channel, each with its own bucket; a
    sender's own limit set later takes that sender out of it."""
    status, j = put_limit(sim, channel="whatsapp_meta", perSecond=0.01, burst=2)
    assert status == 201 and j["data"]["sender"] is None and j["data"]["buckets"] == [], j
    answers = together(sim, [meta_req()] * 3 + [meta_req(OTHER_PHONE_ID)] * 3)
    assert [r.status for r in answers] == [200, 200, 429] * 2, answers
    data = limits(sim)
    assert data["buckets"] == 2 and data["bucketsMax"] == 100000, data
    [item] = data["items"]
    assert (item["accepted"], item["throttled"], item["overflow"]) == (4, 2, 0), item
    assert [(b["sender"], b["accepted"], b["throttled"]) for b in item["buckets"]] == [
        (META_PHONE_ID, 2, 1), (OTHER_PHONE_ID, 2, 1)], item
    limit(sim, channel="whatsapp_meta", sender=META_PHONE_ID, perSecond=100, burst=100)
    answers = together(sim, [meta_req()] * 3 + [meta_req(OTHER_PHONE_ID)])
    assert [r.status for r in answers] == [200, 200, 200, 429], answers
    assert limits(sim)["buckets"] == 1  # the number's bucket is its own limit's now


def test_limit_refused_requests_take_no_token_behaviours_do(sim):
    """The limit comes after credentials, validation and the template checks (a refused request
    takes no token) and after the transport behaviours (garbage takes none), but before the
    planned behaviour: a `reject` recipient takes a token, and past the limit it is 429 too."""
    limit(sim, channel="whatsapp_meta", sender=META_PHONE_ID, perSecond=0.01, burst=1)
    tpl = {"messaging_product": "whatsapp", "to": OK_TO[1:], "type": "template",
           "template": {"name": "nope", "language": {"code": "en_US"}}}
    answers = together(sim, [meta_req(token="bad"), meta_req(body="not json"), meta_req(body=tpl),
                             meta_req(to=magic(meta=5)), meta_req(to=magic(meta=1)), meta_req(),
                             meta_req(to=magic(meta=1))])
    assert [r.status for r in answers] == [401, 400, 400, 200, 400, 429, 429], answers
    assert [r.json()["error"]["code"] for i, r in enumerate(answers) if i != 3] == [
        190, 100, 132001, 131026, 130429, 130429]
    b = bucket(sim, "whatsapp_meta", META_PHONE_ID)
    assert (b["accepted"], b["throttled"]) == (1, 2), b


def test_limit_sustained_rate_throttles_the_excess(sim):
    """Requests paced at twice a sender's rate for about 2 s: about rate x duration + burst are
    accepted and the rest throttled; the first and last accepted times give the rate back."""
    rate, burst, interval, n = 10, 2, 0.05, 40
    limit(sim, channel="whatsapp_qr", sender="pace", perSecond=rate, burst=burst)
    statuses = []
    with Conn(sim.port, timeout=10) as c:
        t0 = time.monotonic()
        for i in range(n):
            delay = t0 + i * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if i == 0:
                first = time.monotonic()
            c.send(request_bytes(*waha_req("pace")))
            statuses.append(c.read_response(timeout=10).status)
        last = time.monotonic()
    assert set(statuses) <= {201, 429}, statuses
    accepted = statuses.count(201)
    expected = min(n, rate * (last - first) + burst)
    assert abs(accepted - expected) <= 0.25 * expected, (accepted, expected, statuses)
    assert statuses.count(429) >= n // 4, statuses
    b = bucket(sim, "whatsapp_qr", "pace")
    assert (b["accepted"], b["throttled"]) == (accepted, n - accepted), b
    span = (b["lastAcceptedAt"] - b["firstAcceptedAt"]) / 1000.0
    assert span > 0 and abs((b["accepted"] - burst) / span - rate) <= 0.25 * rate, (b, span)


def test_limit_stats_count_rate_limited_apart_from_throttle(sim):
    """GET /__sim/stats counts a request over its limit as rate_limited, apart from the throttle
    behaviour (which took a token); both are recorded like any request."""
    sim.control("DELETE", "/__sim/stats")
    limit(sim, channel="sms", sender="ACME", perSecond=0.01, burst=2)
    answers = together(sim, [sms_req(to=magic(sms=6)), sms_req(), sms_req()])
    assert [r.status for r in answers] == [429, 201, 429], answers
    assert answers[0].json()["code"] == 20429 and answers[2].json()["code"] == 20429, answers
    st = sim.stats()["channels"]["sms"]
    assert (st["requests"], st["throttle"], st["ok"], st["rate_limited"]) == (3, 1, 1, 1), st
    assert sim.stats()["channels"]["whatsapp_meta"]["rate_limited"] == 0
    assert len(sim.requests("?channel=sms")) == 3


def test_limit_put_replaces_get_lists_delete_clears(sim):
    """PUT sets a limit (201) with burst defaulting to max(1, perSecond), a PUT for the same
    channel and sender replaces it (200, its bucket full again, counts zero), GET lists them in
    the order set, and DELETE removes them all, after which nothing is limited."""
    a = limit(sim, channel="sms", sender="ACME", perSecond=2.5)
    assert (a["channel"], a["sender"], a["perSecond"], a["burst"]) == ("sms", "ACME", 2.5, 2.5), a
    assert a["buckets"] == [{"sender": "ACME", "accepted": 0, "acceptedTokens": 0, "throttled": 0, "tokens": 2.5,
                             "firstAcceptedAt": None, "lastAcceptedAt": None}], a
    b = limit(sim, channel="whatsapp_qr", perSecond=0.5)
    assert b["sender"] is None and b["burst"] == 1, b
    t0 = time.time() * 1000
    assert [r.status for r in together(sim, [sms_req()] * 3)] == [201, 201, 429]
    used = bucket(sim, "sms", "ACME")
    assert t0 - 1000 <= used["firstAcceptedAt"] <= used["lastAcceptedAt"] <= time.time() * 1000 + 1000, used
    status, j = put_limit(sim, channel="sms", sender="ACME", perSecond=1, burst=3)
    assert status == 200 and j["data"]["burst"] == 3, j
    assert j["data"]["buckets"][0]["accepted"] == 0 and j["data"]["buckets"][0]["tokens"] == 3, j
    items = limits(sim)["items"]
    assert [(i["channel"], i["sender"], i["perSecond"]) for i in items] == [("sms", "ACME", 1),
                                                                           ("whatsapp_qr", None, 0.5)]
    status, j = sim.control("DELETE", LIMITS_PATH)
    assert status == 200 and j["data"]["cleared"] == 2, j
    assert limits(sim)["items"] == []
    assert [r.status for r in together(sim, [sms_req()] * 5)] == [201] * 5


@pytest.mark.parametrize("body,field", [
    ({"perSecond": 5}, "channel"),
    ({"channel": "fax", "perSecond": 5}, "channel"),
    ({"channel": "sms"}, "perSecond"),
    ({"channel": "sms", "perSecond": 0}, "perSecond"),
    ({"channel": "sms", "perSecond": 0.001}, "perSecond"),
    ({"channel": "sms", "perSecond": 100001}, "perSecond"),
    ({"channel": "sms", "perSecond": "5"}, "perSecond"),
    ({"channel": "sms", "perSecond": True}, "perSecond"),
    ({"channel": "sms", "perSecond": 5, "burst": 0.5}, "burst"),
    ({"channel": "sms", "perSecond": 5, "burst": 100001}, "burst"),
    ({"channel": "sms", "perSecond": 5, "sender": ""}, "sender"),
    ({"channel": "sms", "perSecond": 5, "sender": 5}, "sender"),
    ({"channel": "sms", "perSecond": 5, "sender": "x" * 65}, "sender"),
    ({"channel": "sms", "perSecond": 5, "rate": 5}, "rate"),
])
def test_limit_validation(sim, body, field):
    """An invalid limit is 422 naming the field, and nothing is set."""
    status, j = put_limit(sim, **body)
    assert status == 422 and j["error"]["field"] == field, j
    assert limits(sim)["items"] == []


def test_limit_at_most_1000(sim):
    """1,000 limits can be set; the 1,001st is 422 too_many_limits, while replacing one of them
    still works."""
    reqs = [("PUT", LIMITS_PATH, [("Content-Type", "application/json")],
             json.dumps({"channel": "sms", "sender": "S%04d" % i, "perSecond": 1})) for i in range(1000)]
    for k in range(0, 1000, 250):
        assert {r.status for r in together(sim, reqs[k:k + 250])} == {201}
    status, j = put_limit(sim, channel="sms", sender="one-more", perSecond=1)
    assert status == 422 and j["error"]["code"] == "too_many_limits", j
    status, j = put_limit(sim, channel="sms", sender="S0999", perSecond=2)
    assert status == 200 and j["data"]["perSecond"] == 2, j
    assert len(limits(sim)["items"]) == 1000


# ---- inbound messages (POST /__sim/inbound) --------------------------------------------------------

INBOUND = "/__sim/inbound"
IN_FROM = "+6281234567890"
SMS_IN = "+15550001111"
WAMID_RE = re.compile(r"^wamid\.[A-Za-z0-9+/]+=*$")


def inbound(sim, **body):
    return sim.control("POST", INBOUND, body)


def posted(sim, **body):
    """POSTs an inbound message that the receiver takes; returns the control answer's data."""
    status, j = inbound(sim, **body)
    assert status == 200 and j["success"] is True, j
    return j["data"]


def wamid_parts(wamid):
    """(number, incoming, hex id) that a wamid carries, as Meta encodes them."""
    raw = base64.b64decode(wamid[len("wamid."):])
    assert raw[:2] == b"\x1c\x18" and raw[-1:] == b"\x00", raw
    n = raw[2]
    number, rest = raw[3:3 + n].decode(), raw[3 + n:]
    assert rest[:3] == b"\x15\x02\x00" and rest[3] in (0x11, 0x12) and rest[4] == 0x18, rest
    hex_id = rest[6:6 + rest[5]].decode()
    assert len(rest) == 6 + rest[5] + 1 and re.match(r"^[0-9A-F]+$", hex_id), rest
    return number, rest[3] == 0x12, hex_id


def meta_value(item):
    """The one change's value of a Meta webhook, checked for the envelope around it."""
    body = json.loads(item["body"])
    assert body["object"] == "whatsapp_business_account" and len(body["entry"]) == 1, body
    assert len(body["entry"][0]["changes"]) == 1 and body["entry"][0]["changes"][0]["field"] == "messages"
    return body["entry"][0]["id"], body["entry"][0]["changes"][0]["value"]


def test_inbound_meta_text_is_metas_messages_webhook(cbsim, rx):
    """provider meta: Meta's webhook for a received text, exactly, POSTed to URL/webhooks/meta with
    Meta's User-Agent and a valid X-Hub-Signature-256; the control request is answered with the
    gateway's status and body once the gateway has answered."""
    rx.answers.append((200, "application/json", b'{"success":true,"stored":1}'))
    rx.hold["/webhooks/meta"] = 0.3
    t0 = time.monotonic()
    data = posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, displayPhoneNumber="15550001234",
                  wabaId="2233445566", **{"from": IN_FROM}, text="Olá \"STOP\" ✓", id="wamid.in-1",
                  name="Ana", timestamp=1700000000)
    assert time.monotonic() - t0 >= 0.3  # the answer waited for the gateway's
    assert data == {"id": "wamid.in-1", "status": 200, "result": "ok", "body": '{"success":true,"stored":1}',
                    "url": rx.url + "/webhooks/meta"}, data
    [item] = rx.got()
    assert item["path"] == "/webhooks/meta"
    assert item["headers"]["content-type"] == "application/json"
    assert item["headers"]["user-agent"] == "facebookexternalua"
    assert_signed("whatsapp_meta", item)
    assert json.loads(item["body"]) == {"object": "whatsapp_business_account", "entry": [{
        "id": "2233445566", "changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550001234", "phone_number_id": META_PHONE_ID},
            "contacts": [{"profile": {"name": "Ana"}, "wa_id": IN_FROM[1:]}],
            "messages": [{"from": IN_FROM[1:], "id": "wamid.in-1", "timestamp": "1700000000", "type": "text",
                          "text": {"body": "Olá \"STOP\" ✓"}}]}}]}]}


def test_inbound_meta_defaults(cbsim, rx):
    """Without id, timestamp, name, displayPhoneNumber and wabaId: a fresh incoming wamid carrying
    the sender's number, now, "Sim Customer", 15550783881 and "0", or the WABA the phone number id
    is bound to by PUT .../templates."""
    t0 = int(time.time())
    data = posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="hi")
    waba, value = meta_value(rx.wait(1)[0])
    msg = value["messages"][0]
    assert waba == "0" and value["metadata"]["display_phone_number"] == "15550783881"
    assert value["contacts"] == [{"profile": {"name": "Sim Customer"}, "wa_id": IN_FROM[1:]}]
    assert WAMID_RE.match(msg["id"]) and data["id"] == msg["id"], msg
    number, incoming, hex_id = wamid_parts(msg["id"])
    assert number == IN_FROM[1:] and incoming and len(hex_id) == 20
    assert abs(int(msg["timestamp"]) - t0) <= 5 and msg["type"] == "text", msg
    second = posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="hi")
    assert second["id"] != data["id"]
    catalogue(cbsim)  # binds META_PHONE_ID to WABA
    posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="hi")
    assert meta_value(rx.wait(3)[2])[0] == WABA


@pytest.mark.parametrize("mtype", ["button", "interactive"])
def test_inbound_meta_button_and_interactive_replies(cbsim, rx, mtype):
    """type button: Meta's quick-reply button message; interactive: a button_reply. Both carry the
    context of the business's message they answer (its display number and an outgoing wamid)."""
    posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="Stop promotions",
           type=mtype, id="wamid.btn", timestamp=1700000001)
    item = rx.wait(1)[0]
    assert_signed("whatsapp_meta", item)
    msg = meta_value(item)[1]["messages"][0]
    context = msg.pop("context")
    assert context["from"] == "15550783881" and WAMID_RE.match(context["id"]), context
    assert wamid_parts(context["id"])[:2] == (IN_FROM[1:], False)
    want = {"from": IN_FROM[1:], "id": "wamid.btn", "timestamp": "1700000001", "type": mtype}
    if mtype == "button":
        want["button"] = {"payload": "Stop promotions", "text": "Stop promotions"}
    else:
        want["interactive"] = {"type": "button_reply", "button_reply": {"id": "b1", "title": "Stop promotions"}}
    assert msg == want, msg


def test_inbound_meta_image_with_and_without_caption(cbsim, rx):
    """type image: Meta's image object (media id, image/jpeg, base64 SHA-256); the text, when
    given, is its caption, and may be left out."""
    posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, type="image", text="look")
    posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, type="image")
    first, second = [meta_value(i)[1]["messages"][0] for i in rx.wait(2)]
    for msg, caption in ((first, "look"), (second, None)):
        assert msg["type"] == "image" and "text" not in msg, msg
        image = msg["image"]
        assert image.pop("caption", None) == caption
        assert re.match(r"^\d{16}$", image.pop("id")) and image.pop("mime_type") == "image/jpeg", image
        assert len(base64.b64decode(image.pop("sha256"), validate=True)) == 32 and image == {}, image


def test_inbound_waha_is_wahas_message_event(cbsim, rx):
    """provider waha: WAHA's `message` event (WEBJS engine) POSTed to URL/webhooks/waha, signed with
    X-Webhook-Hmac (SHA-512); with `me`, the envelope's me and the payload's to name the session's
    number; without, neither is there."""
    rx.answers.append((201, "text/plain", b"ok"))
    t0 = time.time() * 1000
    data = posted(cbsim, provider="waha", session="sales", me="15550100000", **{"from": IN_FROM}, text="STOP",
                  id="false_6281234567890@c.us_ABCDEF0123", timestamp=1700000002)
    assert data == {"id": "false_6281234567890@c.us_ABCDEF0123", "status": 201, "result": "ok", "body": "ok",
                    "url": rx.url + "/webhooks/waha"}, data
    item = rx.wait(1)[0]
    assert item["path"] == "/webhooks/waha" and item["headers"]["content-type"] == "application/json"
    assert item["headers"]["user-agent"].startswith("WAHA/")
    assert_signed("whatsapp_qr", item)
    event = json.loads(item["body"])
    assert re.match(r"^evt_[0-9a-z]{26}$", event.pop("id")) and abs(event.pop("timestamp") - t0) < 60000, event
    assert event == {"event": "message", "session": "sales",
                     "me": {"id": "15550100000@c.us", "pushName": "Omnigate Sim"},
                     "payload": {"id": "false_6281234567890@c.us_ABCDEF0123", "timestamp": 1700000002,
                                 "from": "6281234567890@c.us", "fromMe": False, "to": "15550100000@c.us",
                                 "body": "STOP", "hasMedia": False, "ack": 1, "ackName": "SERVER", "vCards": []},
                     "engine": "WEBJS",
                     "environment": {"version": "2024.10.8", "engine": "WEBJS", "tier": "CORE",
                                     "browser": "/usr/bin/chromium"}}, event
    t1 = int(time.time())
    data = posted(cbsim, provider="waha", session="default", **{"from": IN_FROM}, text="hi")
    event = json.loads(rx.wait(2)[1]["body"])
    assert "me" not in event and "to" not in event["payload"], event
    assert re.match(r"^false_6281234567890@c\.us_[0-9A-F]{20}$", data["id"]) and event["payload"]["id"] == data["id"]
    assert abs(event["payload"]["timestamp"] - t1) <= 5


def test_inbound_twilio_is_twilios_incoming_message_webhook(cbsim, rx):
    """provider twilio: Twilio's incoming-message webhook, form-encoded in Twilio's field order, to
    URL/webhooks/twilio/inbound, signed with X-Twilio-Signature over that URL; NumSegments is
    counted as the send endpoint counts; the TwiML answer comes back in the control answer."""
    twiml = b'<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
    rx.answers.append((200, "text/xml", twiml))
    sid = "SM" + "0123456789abcdef" * 2
    text = "x" * 161  # two GSM-7 segments
    data = posted(cbsim, provider="twilio", to=SMS_IN, **{"from": IN_FROM}, text=text, id=sid)
    url = rx.url + "/webhooks/twilio/inbound"
    assert data == {"id": sid, "status": 200, "result": "ok", "body": twiml.decode(), "url": url}, data
    item = rx.wait(1)[0]
    assert item["path"] == "/webhooks/twilio/inbound"
    assert item["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert item["headers"]["user-agent"] == "TwilioProxy/1.1"
    assert_signed("sms", item, url)
    pairs = urllib.parse.parse_qsl(item["body"].decode(), keep_blank_values=True, strict_parsing=True)
    assert pairs == [("ToCountry", ""), ("ToState", ""), ("SmsMessageSid", sid), ("NumMedia", "0"), ("ToCity", ""),
                     ("FromZip", ""), ("SmsSid", sid), ("FromState", ""), ("SmsStatus", "received"),
                     ("FromCity", ""), ("Body", text), ("FromCountry", ""), ("To", SMS_IN), ("ToZip", ""),
                     ("NumSegments", "2"), ("MessageSid", sid), ("AccountSid", SMS_SID), ("From", IN_FROM),
                     ("ApiVersion", "2010-04-01")], pairs
    data = posted(cbsim, provider="twilio", to=SMS_IN, **{"from": IN_FROM}, text="Olá ✓ STOP & más")
    fields = form_fields(rx.wait(2)[1]["body"])
    assert re.match(r"^SM[0-9a-f]{32}$", data["id"]) and fields["MessageSid"] == data["id"]
    assert fields["Body"] == "Olá ✓ STOP & más" and fields["NumSegments"] == "1"


def test_inbound_recorded_and_counted_as_a_callback_try(cbsim, rx):
    """Each inbound POST is recorded in GET /__sim/callbacks (provider, channel, messageId = the
    inbound id, the request, the gateway's status) and counted as a callback try; a refusal is
    passed back, counted as failed and never retried."""
    rx.answers.append((401, "application/json", b'{"error":{"code":"invalid_signature"}}'))
    data = posted(cbsim, provider="twilio", to=SMS_IN, **{"from": IN_FROM}, text="hi")
    assert (data["status"], data["result"], data["body"]) == (401, "ok", '{"error":{"code":"invalid_signature"}}')
    posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="hi", id="wamid.rec")
    posted(cbsim, provider="waha", session="default", **{"from": IN_FROM}, text="hi", id="waha-rec")
    assert not wait_for(lambda: len(rx.got()) > 3, 1.5)  # no retry of the 401 (it would come after 1 s)
    assert cb_stats(cbsim) == {"sent": 3, "ok": 2, "failed": 1, "retried": 0, "abandoned": 0, "pending": 0}
    recs = cbsim.control("GET", "/__sim/callbacks")[1]["data"]["items"]
    assert [(r["provider"], r["channel"], r["messageId"], r["status"], r["result"], r["tries"]) for r in recs] == [
        ("twilio", "sms", data["id"], 401, "ok", 1), ("meta", "whatsapp_meta", "wamid.rec", 200, "ok", 1),
        ("waha", "whatsapp_qr", "waha-rec", 200, "ok", 1)], recs
    for rec, item in zip(recs, rx.got()):
        assert rec["url"] == rx.url + item["path"] and rec["body"] == item["body"].decode()
        assert rec["headers"]["content-type"] == item["headers"]["content-type"]
        assert abs(rec["sentAt"] - time.time() * 1000) < 60000


def test_inbound_answer_body_is_cut_at_4_kib(cbsim, rx):
    """The control answer carries the first 4 KiB of the gateway's body, cut at a character."""
    rx.answers.append((200, "text/plain; charset=utf-8", ("a" + "é" * 3000).encode()))
    data = posted(cbsim, provider="meta", phoneNumberId=META_PHONE_ID, **{"from": IN_FROM}, text="hi")
    assert data["body"] == "a" + "é" * 2047, len(data["body"])


def test_inbound_unreachable_gateway(tmp_path):
    """A gateway that does not listen: answered 200 with status null, result unreachable, body null,
    the try recorded and counted as failed."""
    s = Sim(tmp_path, env={"OMNIGATE_SIM_CALLBACK_URL": "http://127.0.0.1:%d" % free_port()})
    try:
        data = posted(s, provider="twilio", to=SMS_IN, **{"from": IN_FROM}, text="hi")
        assert (data["status"], data["result"], data["body"]) == (None, "unreachable", None), data
        assert cb_stats(s) == {"sent": 1, "ok": 0, "failed": 1, "retried": 0, "abandoned": 0, "pending": 0}
        [rec] = s.control("GET", "/__sim/callbacks")[1]["data"]["items"]
        assert (rec["status"], rec["result"], rec["messageId"]) == (None, "unreachable", data["id"])
    finally:
        rc = s.stop()
    assert_clean(s, rc)


@pytest.mark.parametrize("provider", ["meta", "waha", "twilio"])
def test_inbound_bad_or_no_signature(cbsim, rx, provider):
    """signature "bad": the provider's signature header(s), well formed, that do not verify;
    "none": no signature header at all."""
    body = {"meta": {"phoneNumberId": META_PHONE_ID}, "waha": {"session": "default"},
            "twilio": {"to": SMS_IN}}[provider]
    channel = {"meta": "whatsapp_meta", "waha": "whatsapp_qr", "twilio": "sms"}[provider]
    posted(cbsim, provider=provider, **{"from": IN_FROM}, text="STOP", signature="bad", **body)
    posted(cbsim, provider=provider, **{"from": IN_FROM}, text="STOP", signature="none", **body)
    bad, none = rx.wait(2)
    h = bad["headers"]
    if provider == "meta":
        assert re.match(r"^sha256=[0-9a-f]{64}$", h["x-hub-signature-256"])
        assert h["x-hub-signature-256"] != meta_signature(bad["body"])
    elif provider == "waha":
        assert re.match(r"^[0-9a-f]{128}$", h["x-webhook-hmac"]) and h["x-webhook-hmac-algorithm"] == "sha512"
        assert h["x-webhook-hmac"] != waha_signature(bad["body"])
    else:
        url = rx.url + "/webhooks/twilio/inbound"
        assert len(base64.b64decode(h["x-twilio-signature"], validate=True)) == 20
        assert h["x-twilio-signature"] != twilio_signature(url, form_fields(bad["body"]))
    with pytest.raises(AssertionError):
        assert_signed(channel, bad, rx.url + "/webhooks/twilio/inbound")
    assert not {"x-hub-signature-256", "x-webhook-hmac", "x-webhook-hmac-algorithm",
                "x-twilio-signature"} & set(none["headers"]), none


IN_META = {"provider": "meta", "phoneNumberId": META_PHONE_ID, "from": IN_FROM, "text": "hi"}
IN_WAHA = {"provider": "waha", "session": "default", "from": IN_FROM, "text": "hi"}
IN_TWILIO = {"provider": "twilio", "to": SMS_IN, "from": IN_FROM, "text": "hi"}


def but(base, **changes):
    """base with changes; a value None removes the field."""
    out = dict(base, **changes)
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("body,field,code", [
    ({"from": IN_FROM, "text": "hi"}, "provider", "validation_failed"),
    (but(IN_META, provider="telegram"), "provider", "validation_failed"),
    (but(IN_META, provider=5), "provider", "validation_failed"),
    (but(IN_META, phoneNumberId=None), "phoneNumberId", "validation_failed"),
    (but(IN_META, phoneNumberId="12a"), "phoneNumberId", "validation_failed"),
    (but(IN_META, phoneNumberId="1" * 21), "phoneNumberId", "validation_failed"),
    (but(IN_META, displayPhoneNumber="+1555"), "displayPhoneNumber", "validation_failed"),
    (but(IN_META, wabaId="waba"), "wabaId", "validation_failed"),
    (but(IN_META, **{"from": None}), "from", "validation_failed"),
    (but(IN_META, **{"from": "6281234567890"}), "from", "validation_failed"),
    (but(IN_META, **{"from": "+1234567"}), "from", "validation_failed"),
    (but(IN_META, **{"from": "+1234567890123456"}), "from", "validation_failed"),
    (but(IN_META, text=None), "text", "validation_failed"),
    (but(IN_META, text=""), "text", "validation_failed"),
    (but(IN_META, text="x" * 4097), "text", "validation_failed"),
    (but(IN_META, type="video"), "type", "validation_failed"),
    (but(IN_META, type="button", text=None), "text", "validation_failed"),
    (but(IN_META, name=""), "name", "validation_failed"),
    (but(IN_META, id="has space"), "id", "validation_failed"),
    (but(IN_META, timestamp="now"), "timestamp", "validation_failed"),
    (but(IN_META, timestamp=-1), "timestamp", "validation_failed"),
    (but(IN_META, signature="maybe"), "signature", "validation_failed"),
    (but(IN_META, session="default"), "session", "unknown_field"),
    (but(IN_META, colour="red"), "colour", "unknown_field"),
    (but(IN_WAHA, session=None), "session", "validation_failed"),
    (but(IN_WAHA, session=""), "session", "validation_failed"),
    (but(IN_WAHA, me="me"), "me", "validation_failed"),
    (but(IN_WAHA, type="text"), "type", "unknown_field"),
    (but(IN_WAHA, to=SMS_IN), "to", "unknown_field"),
    (but(IN_TWILIO, to=None), "to", "validation_failed"),
    (but(IN_TWILIO, to="15550001111"), "to", "validation_failed"),
    (but(IN_TWILIO, id="SM123"), "id", "validation_failed"),
    (but(IN_TWILIO, id="MM" + "0" * 32), "id", "validation_failed"),
    (but(IN_TWILIO, text="x" * 1601), "text", "validation_failed"),
    (but(IN_TWILIO, timestamp=1700000000), "timestamp", "unknown_field"),
    (but(IN_TWILIO, phoneNumberId=META_PHONE_ID), "phoneNumberId", "unknown_field"),
])
def test_inbound_validation(cbsim, rx, body, field, code):
    """Anything wrong in the request is 422 naming the field (unknown fields too, including another
    provider's), and nothing is POSTed."""
    status, j = inbound(cbsim, **body)
    assert status == 422 and j["success"] is False and j["error"]["code"] == code, j
    assert j["error"]["field"] == field, j
    assert cb_stats(cbsim)["sent"] == 0 and rx.got() == []


def test_inbound_texts_at_their_limits_are_taken(cbsim, rx):
    """4096 characters on WhatsApp and 1600 on SMS are taken, as is a blank text."""
    posted(cbsim, **but(IN_META, text="é" * 4096))
    posted(cbsim, **but(IN_TWILIO, text="x" * 1600))
    posted(cbsim, **but(IN_WAHA, text="   "))
    items = rx.wait(3)
    assert meta_value(items[0])[1]["messages"][0]["text"]["body"] == "é" * 4096
    assert form_fields(items[1]["body"])["NumSegments"] == "11"
    assert json.loads(items[2]["body"])["payload"]["body"] == "   "


def test_inbound_without_callback_url_is_409(sim):
    """Without --callback-url there is nowhere to post: 409 no_callback_url, nothing counted."""
    for body in (IN_META, IN_WAHA, IN_TWILIO):
        status, j = inbound(sim, **body)
        assert status == 409 and j["success"] is False and j["error"]["code"] == "no_callback_url", j
    assert cb_stats(sim)["sent"] == 0


def test_sigterm_answers_a_waiting_inbound_request(tmp_path):
    """SIGTERM while the gateway has not answered an inbound POST: the waiting control request is
    answered 503 at once, and the process exits 0 long before the gateway would have answered."""
    r = Receiver()
    r.hold["/webhooks/meta"] = 5.0
    s = Sim(tmp_path, env={"OMNIGATE_SIM_CALLBACK_URL": r.url})
    try:
        waiting = Conn(s.port, timeout=10)
        waiting.send(request_bytes("POST", INBOUND, [("Content-Type", "application/json")], json.dumps(IN_META)))
        r.wait(1)
        assert cb_stats(s)["pending"] == 1
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        resp = waiting.read_response(timeout=3)
        assert resp.status == 503 and resp.json()["error"]["code"] == "unavailable", resp
        assert resp.header("Connection") == "close", resp
        s.proc.wait(timeout=10)
        assert time.monotonic() - t0 < 2.5
        waiting.close()
    finally:
        rc = s.stop()
        r.close()
    assert_clean(s, rc)
