"""The provider simulator's WAHA session API on its own (test/sim/README.md, "WAHA sessions"):
creating, starting, stopping, logging out and deleting a QR-linked session as devlikeapro/waha
answers it, its QR code (a real PNG of a real QR code, and its raw value, renewed while it is
shown), the session.status webhooks signed with each webhook's own HMAC key (checked by a small
receiver), the control API that plays the phone (scan, unlink, fail), and /api/sendText refusing a
session of the API that is not WORKING while every other session sends as before.

The binary comes from OMNIGATE_SIM_BIN (test/e2e/meson.build sets it). Standard library only: the
PNG is taken apart with zlib and struct, and its modules compared with what Debian's libqrencode
makes of the raw value (through ctypes) when that library is there.
"""

import base64
import ctypes
import ctypes.util
import hashlib
import hmac
import json
import re
import struct
import time
import zlib

import pytest

from conftest import Conn, request_bytes, wait_for
from test_sim import QR_KEY, Receiver, Sim, assert_clean

SECOND_KEY = "sim-test-waha-key-two"
GLOBAL_SECRET = "sim-test-waha-global-secret"
HOOK_KEY = "tenant-webhook-key-0123"
WAIT = 10.0

ENVIRONMENT = {"version": "2024.10.8", "engine": "WEBJS", "tier": "CORE", "browser": "/usr/bin/chromium"}
EVENT_KEYS = ["id", "timestamp", "event", "session", "me", "payload", "engine", "environment"]
NOT_EXPECTED = "Session status is not as expected. Try again later or restart the session"


@pytest.fixture(scope="module")
def rx():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory, rx):
    """A simulator accepting two API keys, calling `rx` back (the global webhook of message acks)."""
    s = Sim(tmp_path_factory.mktemp("wahasim"),
            env={"OMNIGATE_QR_API_KEY": QR_KEY + "," + SECOND_KEY, "OMNIGATE_SIM_CALLBACK_URL": rx.url + "/gw",
                 "OMNIGATE_QR_WEBHOOK_SECRET": GLOBAL_SECRET})
    yield s
    assert_clean(s, s.stop())


@pytest.fixture(autouse=True)
def clean(sim, rx):
    """Every test starts without sessions, with the default timings, and with nothing under way,
    recorded or received."""
    sim.control("DELETE", "/__sim/waha/sessions")  # first: a forgotten session makes no more events
    assert wait_for(lambda: sim.stats()["callbacks"]["pending"] == 0, WAIT), sim.stats()
    assert sim.control("PUT", "/__sim/waha/settings",
                       {"startingMs": 50, "qrRefreshMs": 20000, "actionAnswerMs": 0})[0] == 200
    for path in ("/__sim/callbacks", "/__sim/requests", "/__sim/stats", "/__sim/rules"):
        sim.control("DELETE", path)
    rx.reset()


# ---- helpers -----------------------------------------------------------------------------------

def api(sim, method, path, body=None, key=QR_KEY, accept=None, timeout=8.0):
    headers = []
    if key is not None:
        headers.append(("X-Api-Key", key))
    if accept is not None:
        headers.append(("Accept", accept))
    raw = None
    if body is not None:
        headers.append(("Content-Type", "application/json"))
        raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return sim.request(method, path, headers, raw, timeout=timeout)


def hook_url(rx, name):
    return "%s/hooks/%s" % (rx.url, name)


def create(sim, rx, name, start=True, events=("session.status",), key=HOOK_KEY, **extra):
    hook = {"url": hook_url(rx, name), "events": list(events)}
    if key is not None:
        hook["hmac"] = {"key": key}
    body = dict({"name": name, "start": start, "config": {"webhooks": [hook]}}, **extra)
    r = api(sim, "POST", "/api/sessions", body)
    assert r.status == 201, r
    return r.json()


def events(rx, name, key=HOOK_KEY):
    """The session.status events `rx` got for session `name`, checked for their signature."""
    out = []
    for item in rx.got():
        if item["path"] != "/hooks/" + name:
            continue
        body = json.loads(item["body"])
        if body.get("event") != "session.status":
            continue
        assert item["headers"]["content-type"] == "application/json"
        if key is None:
            assert "x-webhook-hmac" not in item["headers"], item["headers"]
        else:
            want = hmac.new(key.encode(), item["body"], hashlib.sha512).hexdigest()
            assert item["headers"]["x-webhook-hmac"] == want
            assert item["headers"]["x-webhook-hmac-algorithm"] == "sha512"
        out.append(body)
    return out


def statuses(rx, name, key=HOOK_KEY):
    return [e["payload"]["status"] for e in events(rx, name, key)]


def wait_statuses(rx, name, want, key=HOOK_KEY):
    """Waits until the session's events are exactly `want` (a list) in the order they arrived, which
    is the order they happened (a session's events to one URL go one at a time); returns them."""
    assert wait_for(lambda: statuses(rx, name, key) == want, WAIT), statuses(rx, name, key)
    got = events(rx, name, key)
    assert [e["timestamp"] for e in got] == sorted(e["timestamp"] for e in got)
    return got


def session(sim, name):
    r = api(sim, "GET", "/api/sessions/" + name)
    assert r.status == 200, r
    return r.json()


def wait_status(sim, name, status):
    assert wait_for(lambda: session(sim, name)["status"] == status, WAIT), session(sim, name)


def scanning(sim, rx, name, **kw):
    """A session created, started and showing its QR code."""
    create(sim, rx, name, **kw)
    wait_status(sim, name, "SCAN_QR_CODE")


def linked(sim, rx, name, number="+15557654321", **kw):
    """A session whose QR code was scanned by `number`: WORKING."""
    scanning(sim, rx, name, **kw)
    status, j = sim.control("POST", "/__sim/waha/sessions/%s/scan" % name, {"number": number})
    assert status == 200 and j["data"]["status"] == "WORKING", j
    return j["data"]


def send(sim, session_name, to="6281234567890", key=QR_KEY, timeout=8.0):
    return api(sim, "POST", "/api/sendText", {"session": session_name, "chatId": to + "@c.us", "text": "hi"},
               key=key, timeout=timeout)


def raw_qr(sim, name):
    r = api(sim, "GET", "/api/%s/auth/qr?format=raw" % name)
    assert r.status == 200, r
    return r.json()["value"]


def not_running(name):
    return {"statusCode": 404, "error": "Not Found",
            "message": "We didn't find a session with name '%s'.\nPlease start it first by using POST "
                       "/api/sessions/%s/start request" % (name, name)}


# ---- the PNG, taken apart ------------------------------------------------------------------------

def png_gray_rows(data):
    """The rows of an 8-bit grayscale PNG, every chunk's CRC checked and every filter undone."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) == crc, kind
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, interlace) == (8, 0, 0), chunks[0]
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(raw) == h * (w + 1)
    rows, prev = [], bytearray(w)
    for y in range(h):
        f, line = raw[y * (w + 1)], bytearray(raw[y * (w + 1) + 1:(y + 1) * (w + 1)])
        for x in range(w):
            a, b, c = (line[x - 1] if x else 0), prev[x], (prev[x - 1] if x else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                assert f == 0, f
        rows.append(bytes(line))
        prev = line
    return w, h, rows


def qr_modules(png):
    """The module matrix of a QR code drawn as qrcode's toDataURL draws it: 4 pixels a module, a
    white quiet zone of 4 modules. Every pixel of a module must be that module's colour."""
    w, h, rows = png_gray_rows(png)
    assert w == h and w % 4 == 0, (w, h)
    side = w // 4
    n = side - 8
    assert n >= 21 and (n - 17) % 4 == 0, "not a QR code symbol size: %d" % n
    for y in range(h):
        assert set(rows[y]) <= {0, 255}
    grid = []
    for r in range(side):
        line = []
        for c in range(side):
            px = {rows[r * 4 + dy][c * 4 + dx] for dy in range(4) for dx in range(4)}
            assert len(px) == 1, (r, c)
            line.append(px.pop() == 0)
        grid.append(line)
    for r in range(side):  # the quiet zone
        for c in range(side):
            if not (4 <= r < 4 + n and 4 <= c < 4 + n):
                assert not grid[r][c], (r, c)
    return [line[4:4 + n] for line in grid[4:4 + n]]


def format_word(m):
    """The two copies of the 15 format bits (ISO/IEC 18004 7.9), as read next to the finders."""
    n = len(m)
    first = [m[i][8] for i in range(6)] + [m[7][8], m[8][8], m[8][7]] + [m[8][14 - i] for i in range(9, 15)]
    second = [m[8][n - 1 - i] for i in range(8)] + [m[n - 15 + i][8] for i in range(8, 15)]
    word = lambda bits: sum(1 << i for i, b in enumerate(bits) if b)  # noqa: E731
    return word(first), word(second)


def check_qr_structure(m):
    """Finders, separators, timing patterns, the dark module and the format bits of a real QR code
    (BCH-checked, error correction level M)."""
    n = len(m)
    version = (n - 17) // 4
    for r0, c0 in ((0, 0), (0, n - 7), (n - 7, 0)):
        for r in range(7):
            for c in range(7):
                assert m[r0 + r][c0 + c] == (max(abs(r - 3), abs(c - 3)) != 2), ("finder", r0, c0, r, c)
    for i in range(8):
        assert not m[7][i] and not m[i][7] and not m[7][n - 1 - i] and not m[n - 8][i], ("separator", i)
    for i in range(8, n - 8):
        assert m[6][i] == (i % 2 == 0) and m[i][6] == (i % 2 == 0), ("timing", i)
    assert m[4 * version + 9][8], "the dark module"
    first, second = format_word(m)
    assert first == second, (bin(first), bin(second))
    data = (first ^ 0x5412) >> 10
    rem = data
    for _ in range(10):
        rem = (rem << 1) ^ ((rem >> 9) * 0x537)
    assert (data << 10 | rem) ^ 0x5412 == first, "format bits fail their BCH check"
    assert data >> 3 == 0, "error correction level is not M"


def libqrencode_matrix(text):
    """libqrencode's symbol of `text` (8-bit, level M, smallest version), or None without the library."""
    path = ctypes.util.find_library("qrencode")
    if path is None:
        return None
    lib = ctypes.CDLL(path)

    class QRcode(ctypes.Structure):
        _fields_ = [("version", ctypes.c_int), ("width", ctypes.c_int), ("data", ctypes.POINTER(ctypes.c_ubyte))]

    lib.QRcode_encodeString8bit.restype = ctypes.POINTER(QRcode)
    lib.QRcode_encodeString8bit.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.QRcode_free.argtypes = [ctypes.POINTER(QRcode)]
    qr = lib.QRcode_encodeString8bit(text.encode(), 0, 1)  # QR_ECLEVEL_M
    w = qr.contents.width
    out = [[bool(qr.contents.data[r * w + c] & 1) for c in range(w)] for r in range(w)]
    lib.QRcode_free(qr)
    return out


# ---- creating and reading sessions -------------------------------------------------------------

def test_create_without_start_is_stopped(sim, rx):
    """POST /api/sessions without start is 201 with a STOPPED session (WAHA: start defaults to false),
    no webhook, and GET gives it back with an empty engine."""
    r = api(sim, "POST", "/api/sessions", {"name": "idle"})
    assert r.status == 201
    assert r.json() == {"name": "idle", "status": "STOPPED", "me": None, "engine": {}}
    assert session(sim, "idle") == {"name": "idle", "status": "STOPPED", "me": None, "engine": {}}
    assert events(rx, "idle") == []


def test_create_and_start_goes_starting_then_scan_qr_code(sim, rx):
    """start: true answers STARTING, then SCAN_QR_CODE follows; each move is one session.status event
    in WAHA's envelope, signed with the webhook's own hmac key."""
    before = int(time.time() * 1000)
    j = create(sim, rx, "fresh")
    assert j["status"] == "STARTING" and j["me"] is None and j["engine"] == {"engine": "WEBJS"}
    got = wait_statuses(rx, "fresh", ["STARTING", "SCAN_QR_CODE"])
    for e, status in zip(got, ["STARTING", "SCAN_QR_CODE"]):
        assert list(e) == EVENT_KEYS, list(e)
        assert re.fullmatch(r"evt_[0-9a-z]{26}", e["id"]), e["id"]
        assert before <= e["timestamp"] <= int(time.time() * 1000)
        assert (e["event"], e["session"], e["me"], e["engine"], e["environment"]) == \
            ("session.status", "fresh", None, "WEBJS", ENVIRONMENT)
        assert e["payload"] == {"name": "fresh", "status": status}
    assert got[0]["id"] != got[1]["id"]
    assert session(sim, "fresh")["status"] == "SCAN_QR_CODE"


def test_config_keeps_known_fields_only(sim, rx):
    """The config is kept and echoed as WAHA's whitelist leaves it: unknown members dropped, known ones
    (metadata, retries, customHeaders, ...) as given; metadata rides in every event."""
    hook = {"url": hook_url(rx, "cfg"), "events": ["session.status", "message"], "hmac": {"key": HOOK_KEY, "x": 1},
            "retries": {"attempts": 3}, "customHeaders": [{"name": "X-A", "value": "b"}], "junk": True}
    r = api(sim, "POST", "/api/sessions", {"name": "cfg", "start": True, "other": 1,
                                           "config": {"webhooks": [hook], "metadata": {"tenant": "t1"},
                                                      "debug": False, "nonsense": 2}})
    assert r.status == 201, r
    want_hook = {k: v for k, v in hook.items() if k != "junk"}
    want_hook["hmac"] = {"key": HOOK_KEY}
    assert r.json()["config"] == {"webhooks": [want_hook], "metadata": {"tenant": "t1"}, "debug": False}
    got = wait_statuses(rx, "cfg", ["STARTING", "SCAN_QR_CODE"])
    assert all(e["metadata"] == {"tenant": "t1"} for e in got)
    assert list(got[0]) == EVENT_KEYS[:4] + ["metadata"] + EVENT_KEYS[4:]


def test_name_is_generated_when_missing(sim, rx):
    """A create without a name gets WAHA's generatePrefixedId('session'): session_ and 32 hex digits."""
    r = api(sim, "POST", "/api/sessions", {})
    assert r.status == 201
    assert re.fullmatch(r"session_[0-9a-f]{32}", r.json()["name"]), r.json()
    assert api(sim, "POST", "/api/sessions").status == 201  # no body at all: {} as Express reads it


def test_existing_name_is_422(sim, rx):
    """A second create of the same name is WAHA's 422, and changes nothing."""
    create(sim, rx, "twice", start=False)
    r = api(sim, "POST", "/api/sessions", {"name": "twice", "start": True})
    assert r.status == 422
    assert r.json() == {"statusCode": 422, "error": "Unprocessable Entity",
                        "message": "Session 'twice' already exists. Use PUT to update it."}
    assert session(sim, "twice")["status"] == "STOPPED"


@pytest.mark.parametrize("body,message", [
    ({"name": 5}, "name must be a string"),
    ({"name": "n" * 55}, "name must be shorter than or equal to 54 characters"),
    ({"name": "x", "start": "yes"}, "start must be a boolean value"),
    ({"name": "x", "config": 3}, "nested property config must be either object or array"),
    ({"name": "x", "config": {"webhooks": {}}}, "config.webhooks must be an array"),
    ({"name": "x", "config": {"webhooks": [{"url": "ftp://h/x", "events": ["message"]}]}},
     "config.webhooks.0.url must be a URL address"),
    ({"name": "x", "config": {"webhooks": [{"url": "http://h/x", "events": "message"}]}},
     "config.webhooks.0.events must be an array"),
    ({"name": "x", "config": {"webhooks": [{"url": "http://h/x", "events": ["*"]}]}},
     "config.webhooks.0.each value in events must be one of the following values: session.status, message, "
     "message.reaction, message.any, message.ack, message.waiting, message.revoked, state.change, group.join, "
     "group.leave, presence.update, poll.vote, poll.vote.failed, chat.archive, call.received, call.accepted, "
     "call.rejected, label.upsert, label.deleted, label.chat.added, label.chat.deleted"),
    ({"name": "x", "config": {"webhooks": [{"url": "http://h/x", "events": [], "hmac": {"key": 1}}]}},
     "config.webhooks.0.hmac.key must be a string"),
])
def test_invalid_create_is_400(sim, rx, body, message):
    """class-validator's 400 names each failed constraint; nothing is created."""
    r = api(sim, "POST", "/api/sessions", body)
    assert r.status == 400
    assert r.json() == {"statusCode": 400, "message": [message], "error": "Bad Request"}
    assert sim.control("GET", "/__sim/waha/sessions")[1]["data"]["items"] == []


def test_not_json_is_400(sim, rx):
    """A body that is not JSON is a 400 as Express's body parser words it."""
    r = api(sim, "POST", "/api/sessions", "{nope")
    assert r.status == 400 and r.json()["error"] == "Bad Request"


def test_api_key_is_one_of_the_configured_keys(sim, rx):
    """X-Api-Key must be one of OMNIGATE_QR_API_KEY's comma-separated keys, on every session route."""
    for key in (None, "wrong", QR_KEY + "," + SECOND_KEY):
        for method, path in (("POST", "/api/sessions"), ("GET", "/api/sessions/x"), ("GET", "/api/x/auth/qr"),
                             ("POST", "/api/sessions/x/start"), ("DELETE", "/api/sessions/x")):
            r = api(sim, method, path, key=key)
            assert r.status == 401 and r.json() == {"message": "Unauthorized", "statusCode": 401}, (key, path)
    assert api(sim, "POST", "/api/sessions", {"name": "second"}, key=SECOND_KEY).status == 201
    assert api(sim, "GET", "/api/sessions/second", key=QR_KEY).status == 200


def test_unknown_session(sim, rx):
    """An unknown session: GET, start, logout, restart and PUT 404 "Session not found"; stop is 201 with
    no body and DELETE 200 with none (both idempotent in WAHA); the QR code and me are 404 "not found,
    start it first"."""
    for method, path in (("GET", "/api/sessions/ghost"), ("POST", "/api/sessions/ghost/start"),
                         ("POST", "/api/sessions/ghost/logout"), ("POST", "/api/sessions/ghost/restart"),
                         ("PUT", "/api/sessions/ghost")):
        r = api(sim, method, path, {} if method == "PUT" else None)
        assert r.status == 404, (method, path, r)
        assert r.json() == {"statusCode": 404, "message": "Session not found", "error": "Not Found"}
    r = api(sim, "POST", "/api/sessions/ghost/stop")
    assert (r.status, r.body) == (201, b"")
    r = api(sim, "DELETE", "/api/sessions/ghost")
    assert (r.status, r.body) == (200, b"")
    for path in ("/api/ghost/auth/qr", "/api/sessions/ghost/me"):
        r = api(sim, "GET", path)
        assert r.status == 404 and r.json() == not_running("ghost"), path


def test_list_running_or_all(sim, rx):
    """GET /api/sessions lists the sessions that are not STOPPED; ?all=true every one."""
    create(sim, rx, "l-run")
    create(sim, rx, "l-idle", start=False)
    names = lambda q: [s["name"] for s in api(sim, "GET", "/api/sessions" + q).json()]  # noqa: E731
    assert names("") == ["l-run"]
    assert names("?all=true") == ["l-run", "l-idle"]
    assert "engine" not in api(sim, "GET", "/api/sessions?all=true").json()[0]
    assert api(sim, "GET", "/api/sessions?all=maybe").status == 400


def test_session_api_requests_are_recorded(sim, rx):
    """Session API requests are recorded with the sends (channel whatsapp_qr), so a test can read the
    config the gateway sent; they are not counted as sends."""
    create(sim, rx, "rec")
    items = sim.requests("?channel=whatsapp_qr")
    assert [(i["method"], i["path"]) for i in items] == [("POST", "/api/sessions")]
    assert json.loads(items[0]["body"])["config"]["webhooks"][0]["hmac"]["key"] == HOOK_KEY
    assert sim.stats()["channels"]["whatsapp_qr"]["requests"] == 0


# ---- the QR code -------------------------------------------------------------------------------

def test_qr_png_is_a_real_qr_code_of_the_raw_value(sim, rx):
    """GET /api/{session}/auth/qr is image/png: a valid PNG of a QR code (finders, timing, format bits
    of level M), drawn at 4 pixels a module with a 4-module quiet zone, whose modules are exactly
    libqrencode's symbol of the raw value ?format=raw gives."""
    scanning(sim, rx, "png")
    value = raw_qr(sim, "png")
    assert re.fullmatch(r"2@[A-Za-z0-9+/]{64},[A-Za-z0-9+/]{43}=,[A-Za-z0-9+/]{43}=,[A-Za-z0-9+/]{43}=", value)
    r = api(sim, "GET", "/api/png/auth/qr")
    assert r.status == 200 and r.header("Content-Type") == "image/png"
    assert int(r.header("Content-Length")) == len(r.body)
    m = qr_modules(r.body)
    check_qr_structure(m)
    want = libqrencode_matrix(value)
    if want is not None:
        assert m == want
    assert api(sim, "GET", "/api/png/auth/qr?format=image").body == r.body


def test_qr_as_json_when_accept_is_json(sim, rx):
    """Accept: application/json gives {"mimetype":"image/png","data":<base64 of the same PNG>}."""
    scanning(sim, rx, "b64")
    png = api(sim, "GET", "/api/b64/auth/qr").body
    r = api(sim, "GET", "/api/b64/auth/qr", accept="application/json")
    assert r.status == 200 and r.header("Content-Type").startswith("application/json")
    assert r.json() == {"mimetype": "image/png", "data": base64.b64encode(png).decode()}


def test_qr_changes_while_shown(sim, rx):
    """While SCAN_QR_CODE a new QR code is shown every qrRefreshMs, each with its own SCAN_QR_CODE event
    (WEBJS sets the status again on each QR code)."""
    assert sim.control("PUT", "/__sim/waha/settings", {"qrRefreshMs": 150})[0] == 200
    scanning(sim, rx, "rot")
    first = raw_qr(sim, "rot")
    assert wait_for(lambda: raw_qr(sim, "rot") != first, WAIT)
    assert wait_for(lambda: statuses(rx, "rot").count("SCAN_QR_CODE") >= 3, WAIT), statuses(rx, "rot")
    item = next(i for i in sim.control("GET", "/__sim/waha/sessions")[1]["data"]["items"] if i["name"] == "rot")
    assert item["qrCount"] >= 3 and item["qr"].startswith("2@")


def test_control_shows_a_new_qr_now(sim, rx):
    """POST .../status {"status":"SCAN_QR_CODE"} on a session showing a QR code shows a new one now."""
    scanning(sim, rx, "now")
    first = raw_qr(sim, "now")
    status, j = sim.control("POST", "/__sim/waha/sessions/now/status", {"status": "SCAN_QR_CODE"})
    assert status == 200 and j["data"]["qrCount"] == 2
    assert raw_qr(sim, "now") == j["data"]["qr"] != first


def test_qr_of_a_session_not_scanning(sim, rx):
    """A STOPPED session's QR code is WAHA's 404; a WORKING or FAILED one's the 422 of
    waitUntilStatus, naming the status and the one expected."""
    create(sim, rx, "q-stop", start=False)
    r = api(sim, "GET", "/api/q-stop/auth/qr")
    assert r.status == 404 and r.json() == not_running("q-stop")
    linked(sim, rx, "q-work")
    r = api(sim, "GET", "/api/q-work/auth/qr")
    assert r.status == 422
    assert r.json() == {"error": NOT_EXPECTED, "session": "q-work", "status": "WORKING", "expected": ["SCAN_QR_CODE"]}
    assert sim.control("POST", "/__sim/waha/sessions/q-work/status", {"status": "FAILED"})[0] == 200
    assert api(sim, "GET", "/api/q-work/auth/qr?format=raw").json()["status"] == "FAILED"


def test_qr_waits_while_starting(sim, rx):
    """A QR code asked for while the session is STARTING is answered once it shows one (WAHA waits up
    to 5 s for SCAN_QR_CODE)."""
    assert sim.control("PUT", "/__sim/waha/settings", {"startingMs": 600})[0] == 200
    t0 = time.monotonic()
    create(sim, rx, "slow")
    r = api(sim, "GET", "/api/slow/auth/qr?format=raw")
    assert r.status == 200 and r.json()["value"].startswith("2@")
    assert time.monotonic() - t0 >= 0.55
    assert statuses(rx, "slow")[:1] == ["STARTING"]


# ---- the phone ---------------------------------------------------------------------------------

def test_scan_links_the_number(sim, rx):
    """The control scan makes the session WORKING with me.id "<digits>@c.us", said by a WORKING event
    carrying me; the session shows it, and its engine is connected."""
    scanning(sim, rx, "scan")
    status, j = sim.control("POST", "/__sim/waha/sessions/scan/scan", {"number": "+15557654321",
                                                                       "pushName": "Front desk"})
    assert status == 200 and j["data"]["qr"] is None
    me = {"id": "15557654321@c.us", "pushName": "Front desk"}
    got = wait_statuses(rx, "scan", ["STARTING", "SCAN_QR_CODE", "WORKING"])
    assert got[2]["me"] == me and got[1]["me"] is None
    s = session(sim, "scan")
    assert (s["status"], s["me"], s["engine"]["engine"], s["engine"]["state"]) == ("WORKING", me, "WEBJS", "CONNECTED")
    assert api(sim, "GET", "/api/sessions/scan/me").json() == me


def test_scan_default_number_and_refusals(sim, rx):
    """Without a number the scan links +15550100000; only a session showing a QR code can be scanned
    (409 wrong_session_status); an unknown session is 404, a bad number 422."""
    create(sim, rx, "sd", start=False)
    status, j = sim.control("POST", "/__sim/waha/sessions/sd/scan", {})
    assert status == 409 and j["error"]["code"] == "wrong_session_status"
    assert sim.control("POST", "/__sim/waha/sessions/nobody/scan", {})[0] == 404
    api(sim, "POST", "/api/sessions/sd/start")
    wait_status(sim, "sd", "SCAN_QR_CODE")
    status, j = sim.control("POST", "/__sim/waha/sessions/sd/scan", {"number": "15551234567"})
    assert status == 422 and j["error"]["field"] == "number"
    status, j = sim.control("POST", "/__sim/waha/sessions/sd/scan")
    assert status == 200 and j["data"]["me"]["id"] == "15550100000@c.us"


def test_phone_unlinks_fails_and_recovers(sim, rx):
    """The control moves a WORKING session as the phone would: unlinked (SCAN_QR_CODE, the number
    forgotten), then FAILED; WAHA's restart goes STOPPED, STARTING, SCAN_QR_CODE."""
    linked(sim, rx, "ph")
    status, j = sim.control("POST", "/__sim/waha/sessions/ph/status", {"status": "SCAN_QR_CODE"})
    assert status == 200 and j["data"]["me"] is None and j["data"]["qr"].startswith("2@")
    assert sim.control("POST", "/__sim/waha/sessions/ph/status", {"status": "FAILED"})[0] == 200
    r = api(sim, "POST", "/api/sessions/ph/restart")
    assert r.status == 201 and r.json()["status"] == "STARTING"
    got = wait_statuses(rx, "ph", ["STARTING", "SCAN_QR_CODE", "WORKING", "SCAN_QR_CODE", "FAILED", "STOPPED",
                                   "STARTING", "SCAN_QR_CODE"])
    assert got[4]["me"] is None


def test_failed_linked_session_recovers_to_working(sim, rx):
    """A linked session that FAILED and starts again (STARTING) comes back WORKING without a QR code."""
    linked(sim, rx, "rec-ok")
    assert sim.control("POST", "/__sim/waha/sessions/rec-ok/status", {"status": "FAILED"})[0] == 200
    assert sim.control("POST", "/__sim/waha/sessions/rec-ok/status", {"status": "STARTING"})[0] == 200
    got = wait_statuses(rx, "rec-ok", ["STARTING", "SCAN_QR_CODE", "WORKING", "FAILED", "STARTING", "WORKING"])
    assert got[-1]["me"]["id"] == "15557654321@c.us"


def test_control_refuses_impossible_moves(sim, rx):
    """A STOPPED session cannot fail, WORKING is reached only by a scan (422 naming the field), and an
    unknown status is 422."""
    create(sim, rx, "mv", start=False)
    status, j = sim.control("POST", "/__sim/waha/sessions/mv/status", {"status": "FAILED"})
    assert status == 409 and j["error"]["code"] == "wrong_session_status"
    for bad in ("WORKING", "BROKEN"):
        status, j = sim.control("POST", "/__sim/waha/sessions/mv/status", {"status": bad})
        assert status == 422 and j["error"]["field"] == "status", bad
    assert session(sim, "mv")["status"] == "STOPPED"
    assert events(rx, "mv") == []


# ---- stop, start, logout, update, delete ---------------------------------------------------------

def test_stop_then_start_keeps_the_link(sim, rx):
    """stop: STOPPED (the event still carries me); start again: STARTING then WORKING, no QR code."""
    linked(sim, rx, "keep")
    r = api(sim, "POST", "/api/sessions/keep/stop")
    assert r.status == 201 and r.json()["status"] == "STOPPED" and r.json()["engine"] == {}
    r = api(sim, "POST", "/api/sessions/keep/start")
    assert r.status == 201 and r.json()["status"] == "STARTING"
    got = wait_statuses(rx, "keep", ["STARTING", "SCAN_QR_CODE", "WORKING", "STOPPED", "STARTING", "WORKING"])
    assert got[3]["me"]["id"] == "15557654321@c.us"
    r = api(sim, "POST", "/api/sessions/keep/start")  # idempotent
    assert r.status == 201 and r.json()["status"] == "WORKING"
    assert len(events(rx, "keep")) == 6


def test_logout_of_a_running_session_asks_for_a_qr_again(sim, rx):
    """logout of a running session stops it, forgets the number and starts it again (WAHA: "restart a
    session if it was not STOPPED"): STOPPED, STARTING, SCAN_QR_CODE."""
    linked(sim, rx, "out")
    r = api(sim, "POST", "/api/sessions/out/logout")
    assert r.status == 201 and r.json()["status"] == "STARTING" and r.json()["me"] is None
    wait_statuses(rx, "out", ["STARTING", "SCAN_QR_CODE", "WORKING", "STOPPED", "STARTING", "SCAN_QR_CODE"])
    assert raw_qr(sim, "out").startswith("2@")


def test_logout_of_a_stopped_session_stays_stopped(sim, rx):
    """logout of a STOPPED session only forgets the number: the next start shows a QR code."""
    linked(sim, rx, "out2")
    api(sim, "POST", "/api/sessions/out2/stop")
    r = api(sim, "POST", "/api/sessions/out2/logout")
    assert r.status == 201 and r.json()["status"] == "STOPPED" and r.json()["me"] is None
    api(sim, "POST", "/api/sessions/out2/start")
    wait_statuses(rx, "out2", ["STARTING", "SCAN_QR_CODE", "WORKING", "STOPPED", "STARTING", "SCAN_QR_CODE"])


def test_update_moves_the_webhooks(sim, rx):
    """PUT replaces the config; a running session is stopped (its STOPPED event to the old webhook)
    and started again (its events to the new webhook, signed with the new key)."""
    scanning(sim, rx, "upd")
    new_key = "rotated-key-456"
    body = {"config": {"webhooks": [{"url": hook_url(rx, "upd2"), "events": ["session.status"],
                                     "hmac": {"key": new_key}}]}}
    r = api(sim, "PUT", "/api/sessions/upd", body)
    assert r.status == 200 and r.json()["config"] == body["config"] and r.json()["status"] == "STARTING"
    wait_statuses(rx, "upd", ["STARTING", "SCAN_QR_CODE", "STOPPED"])
    got = wait_statuses(rx, "upd2", ["STARTING", "SCAN_QR_CODE"], key=new_key)
    assert got[0]["session"] == "upd"
    assert api(sim, "PUT", "/api/sessions/upd", {"config": {"webhooks": 1}}).status == 400


def test_delete_stops_and_forgets(sim, rx):
    """DELETE stops a running session (its STOPPED event) and forgets it: GET is 404, and its name
    sends again as a session the API never made."""
    linked(sim, rx, "gone")
    r = api(sim, "DELETE", "/api/sessions/gone")
    assert (r.status, r.body) == (200, b"")
    wait_statuses(rx, "gone", ["STARTING", "SCAN_QR_CODE", "WORKING", "STOPPED"])
    assert api(sim, "GET", "/api/sessions/gone").status == 404
    r = send(sim, "gone")
    assert r.status == 201 and r.json()["from"] == "15550100000@c.us"


def test_webhook_without_key_is_unsigned_and_others_get_nothing(sim, rx):
    """A webhook without hmac.key gets its events unsigned; one that did not ask for session.status
    gets none of them."""
    hooks = [{"url": hook_url(rx, "nokey"), "events": ["session.status"]},
             {"url": hook_url(rx, "msgonly"), "events": ["message"], "hmac": {"key": HOOK_KEY}}]
    assert api(sim, "POST", "/api/sessions", {"name": "nk", "start": True,
                                              "config": {"webhooks": hooks}}).status == 201
    wait_statuses(rx, "nokey", ["STARTING", "SCAN_QR_CODE"], key=None)
    assert [i for i in rx.got() if i["path"] == "/hooks/msgonly"] == []


def test_event_retried_after_a_500(sim, rx):
    """A session event the receiver refuses is sent again, the same bytes and signature (the
    callbacks' retries), and recorded in /__sim/callbacks under the session's name."""
    rx.answers.append(500)
    create(sim, rx, "retry", start=False)
    api(sim, "POST", "/api/sessions/retry/start")
    assert wait_for(lambda: len([i for i in rx.got() if i["path"] == "/hooks/retry"]) >= 2, WAIT)
    first, second = [i for i in rx.got() if i["path"] == "/hooks/retry"][:2]
    assert first["body"] == second["body"] and first["headers"]["x-webhook-hmac"] == second["headers"]["x-webhook-hmac"]
    recs = [c for c in sim.control("GET", "/__sim/callbacks")[1]["data"]["items"] if c["messageId"] == "retry"]
    assert (recs[0]["status"], recs[0]["tries"], recs[0]["provider"]) == (500, 1, "waha")


# ---- sends -------------------------------------------------------------------------------------

def test_send_needs_a_working_session(sim, rx):
    """/api/sendText for a session of the API: SCAN_QR_CODE or FAILED is WAHA's 422, STOPPED its 404,
    WORKING sends from the linked number; a session the API never made sends as always."""
    scanning(sim, rx, "snd")
    r = send(sim, "snd")
    assert r.status == 422
    assert r.json() == {"error": NOT_EXPECTED, "session": "snd", "status": "SCAN_QR_CODE", "expected": ["WORKING"]}
    sim.control("POST", "/__sim/waha/sessions/snd/scan", {"number": "+15559876543"})
    r = send(sim, "snd")
    assert r.status == 201 and r.json()["from"] == "15559876543@c.us"
    api(sim, "POST", "/api/sessions/snd/stop")
    r = send(sim, "snd")
    assert r.status == 404 and r.json() == not_running("snd")
    assert send(sim, "default").status == 201
    st = sim.stats()["channels"]["whatsapp_qr"]
    assert (st["requests"], st["ok"], st["not_working"]) == (4, 2, 2), st


def test_send_waits_while_starting(sim, rx):
    """A send while its session is STARTING waits for it (WAHA's getWorkingSession) and goes out once
    the linked session is WORKING again."""
    linked(sim, rx, "sw")
    api(sim, "POST", "/api/sessions/sw/stop")
    assert sim.control("PUT", "/__sim/waha/settings", {"startingMs": 600})[0] == 200
    t0 = time.monotonic()
    api(sim, "POST", "/api/sessions/sw/start")
    r = send(sim, "sw")
    assert r.status == 201 and r.json()["from"] == "15557654321@c.us"
    assert time.monotonic() - t0 >= 0.55


def test_acks_go_to_the_sessions_webhook(sim, rx):
    """A send of a session whose config asked for message.ack gets its acks there, signed with that
    webhook's key, not at the callback URL with the global secret."""
    linked(sim, rx, "ack", events=("session.status", "message.ack"))
    assert send(sim, "ack", to="19990001000").status == 201  # digit 1: SERVER, DEVICE, READ
    acks = lambda: [json.loads(i["body"]) for i in rx.got()  # noqa: E731
                    if i["path"] == "/hooks/ack" and json.loads(i["body"])["event"] == "message.ack"]
    assert wait_for(lambda: len(acks()) == 3, WAIT), acks()
    assert [a["payload"]["ackName"] for a in acks()] == ["SERVER", "DEVICE", "READ"]
    assert acks()[0]["me"]["id"] == "15557654321@c.us"
    events(rx, "ack")  # every POST there, acks included, verified with HOOK_KEY
    for item in rx.got():
        if item["path"] == "/hooks/ack":
            assert item["headers"]["x-webhook-hmac"] == hmac.new(HOOK_KEY.encode(), item["body"],
                                                                 hashlib.sha512).hexdigest()
    assert [i for i in rx.got() if i["path"].startswith("/gw")] == []


def test_inbound_goes_to_the_sessions_webhook(sim, rx):
    """POST /__sim/inbound for a session whose config asked for message posts it there, signed with
    that webhook's key, to the linked number."""
    linked(sim, rx, "inb", events=("message",))
    status, j = sim.control("POST", "/__sim/inbound", {"provider": "waha", "session": "inb", "from": "+6281234567890",
                                                       "text": "hello"})
    assert status == 200 and j["data"]["status"] == 200 and j["data"]["url"] == hook_url(rx, "inb")
    item = next(i for i in rx.got() if i["path"] == "/hooks/inb")
    assert item["headers"]["x-webhook-hmac"] == hmac.new(HOOK_KEY.encode(), item["body"], hashlib.sha512).hexdigest()
    body = json.loads(item["body"])
    assert (body["event"], body["me"]["id"], body["payload"]["to"]) == \
        ("message", "15557654321@c.us", "15557654321@c.us")


# ---- settings and shutdown ---------------------------------------------------------------------

def test_settings_are_checked(sim, rx):
    """The timings have their defaults, and a value out of range or an unknown field is 422."""
    assert sim.control("GET", "/__sim/waha/settings")[1]["data"] == {"startingMs": 50, "qrRefreshMs": 20000,
                                                                     "actionAnswerMs": 0}
    for body in ({"qrRefreshMs": 10}, {"startingMs": -1}, {"actionAnswerMs": 600001}, {"other": 1}):
        assert sim.control("PUT", "/__sim/waha/settings", body)[0] == 422, body


def test_sigterm_answers_a_request_waiting_for_its_session(tmp_path):
    """SIGTERM while a QR request waits for a STARTING session: it is answered at once (WAHA's 422,
    still STARTING), and the simulator exits 0 with no sanitizer report."""
    s = Sim(tmp_path)
    rc = None
    try:
        assert s.control("PUT", "/__sim/waha/settings", {"startingMs": 600000})[0] == 200
        assert api(s, "POST", "/api/sessions", {"name": "held", "start": True}).status == 201
        with Conn(s.port, timeout=8) as c:
            c.send(request_bytes("GET", "/api/held/auth/qr", [("X-Api-Key", QR_KEY)]))
            # Recorded before it is held: from then on it waits for the session.
            assert wait_for(lambda: any(i["path"] == "/api/held/auth/qr" for i in s.requests()), WAIT)
            t0 = time.monotonic()
            rc = s.stop()
            r = c.read_response(timeout=8)
            assert r.status == 422 and r.json() == {"error": NOT_EXPECTED, "session": "held", "status": "STARTING",
                                                    "expected": ["SCAN_QR_CODE"]}
            assert time.monotonic() - t0 < 4.5  # not WAHA's 5 s wait: the drain answered it
    finally:
        assert_clean(s, rc if rc is not None else s.stop())
