"""The provider simulator (test/sim, omnigate-sim) on its own: each provider's wire format and
credential check, every magic behaviour digit, the /__sim control API (rules, recorded
requests, stats), latency, and a clean SIGTERM with answers still waiting.

The binary comes from OMNIGATE_SIM_BIN (test/e2e/meson.build sets it). Standard library only.
"""

import base64
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

    def __init__(self, tmpdir, env=None):
        self.port = free_port()
        self.log_path = os.path.join(str(tmpdir), "sim-%d.stderr" % self.port)
        full = {"OMNIGATE_QR_API_KEY": QR_KEY, "OMNIGATE_SMS_ACCOUNT_SID": SMS_SID,
                "OMNIGATE_SMS_AUTH_TOKEN": SMS_TOKEN, "OMNIGATE_ACCESS_LOG": "false"}
        full.update(env or {})
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([SIM_BIN, "--listen", "127.0.0.1:%d" % self.port],
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
    """Every test starts without rules or recorded requests."""
    if "sim" in request.fixturenames:
        s = request.getfixturevalue("sim")
        s.control("DELETE", "/__sim/rules")
        s.control("DELETE", "/__sim/requests")


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
        assert r.status == 400 and j["code"] == 21610 and j["status"] == 400, r


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
                                              ("throttle", 429), ("auth", 401), ("ok", 200)])
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
    time.sleep(0.1)
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
