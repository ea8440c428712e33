"""API conventions of API.md §0 seen from outside: the envelope, error codes, X-Request-Id, the
router's 404/405, JSON body decoding (400/415) and the JSON access log. One scenario per test."""

import json
import re
import uuid

import pytest

from conftest import REQUEST_ID_RE, assert_error, assert_ok, needs_test_routes, request_bytes

JSON_CT = ("Content-Type", "application/json")
ECHO = "/__test/echo"
RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_unknown_path_is_404(server):
    """An unknown path answers 404 not_found with data null."""
    r = server.request("GET", "/definitely/not/here")
    j = assert_error(r, 404, "not_found")
    assert j["data"] is None


def test_known_path_wrong_method_is_405_with_allow(server):
    """POST /healthz (a GET route) answers 405 method_not_allowed with an Allow header listing GET."""
    r = server.request("POST", "/healthz", [JSON_CT], b"{}")
    assert_error(r, 405, "method_not_allowed")
    allow = r.header("Allow")
    assert allow is not None, r
    methods = [m.strip() for m in allow.split(",")]
    assert "GET" in methods, allow
    assert "HEAD" in methods, allow  # HEAD is served by GET routes (docs/http.md)
    assert "POST" not in methods, allow


@needs_test_routes
def test_get_on_post_route_is_405_allow_post(server):
    """GET /__test/echo (a POST route) answers 405 with Allow: POST."""
    r = server.request("GET", ECHO)
    assert_error(r, 405, "method_not_allowed")
    assert "POST" in [m.strip() for m in r.header("Allow", "").split(",")], r


@needs_test_routes
def test_echo_decodes_json_body(server):
    """POST /__test/echo with a JSON object answers 200 with its byte count and the decoded body."""
    obj = {"text": "h\u00e9llo \u2603", "n": 42, "list": [True, None, 1.5]}
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    j = assert_ok(server.request("POST", ECHO, [JSON_CT], body))
    assert j["data"] == {"bytes": len(body), "body": obj}


@needs_test_routes
def test_content_type_with_charset_accepted(server):
    """`application/json; charset=utf-8` is JSON too."""
    r = server.request("POST", ECHO, [("Content-Type", "application/json; charset=utf-8")], b'{"a":1}')
    assert assert_ok(r)["data"]["body"] == {"a": 1}


INVALID_JSON = {
    "truncated": b'{"a": ',
    "not_json": b"hello",
    "trailing_garbage": b'{"a":1} x',
    "array_not_object": b"[1,2,3]",
    "string_not_object": b'"just a string"',
    "empty_body": b"",
    "too_deep": b'{"a":' * 17 + b"1" + b"}" * 17,
    "invalid_utf8": b'{"a":"\xff\xfe"}',
}


@needs_test_routes
@pytest.mark.parametrize("body", list(INVALID_JSON.values()), ids=list(INVALID_JSON.keys()))
def test_invalid_json_is_400_invalid_json(server, body):
    """A body that is not a JSON object (bad syntax, wrong top-level type, nesting > 16, bad
    UTF-8) answers 400 invalid_json, and the connection stays usable."""
    with server.conn() as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT], body))
        assert_error(c.read_response(), 400, "invalid_json")
        c.send(request_bytes("GET", "/healthz"))
        assert_ok(c.read_response())


@needs_test_routes
def test_nesting_of_16_is_accepted(server):
    """Nesting depth 16 is within the limit (17 is rejected, see above)."""
    body = b'{"a":' * 16 + b"1" + b"}" * 16
    assert_ok(server.request("POST", ECHO, [JSON_CT], body))


@needs_test_routes
@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"],
                         ids=["missing", "text_plain", "form", "jsonx"])
def test_wrong_content_type_is_415(server, ctype):
    """A body without Content-Type: application/json answers 415 unsupported_media_type."""
    headers = [("Content-Type", ctype)] if ctype else []
    r = server.request("POST", ECHO, headers, b'{"a":1}')
    assert_error(r, 415, "unsupported_media_type")


@pytest.mark.parametrize("rid", ["abc", "A-Z_a.z-0.9", "x" * 64, "0"], ids=["short", "charset", "max_len", "one"])
def test_valid_request_id_echoed(server, rid):
    """An inbound X-Request-Id of 1-64 chars of [A-Za-z0-9._-] is echoed unchanged."""
    r = server.request("GET", "/healthz", [("X-Request-Id", rid)])
    assert r.status == 200
    assert r.request_id == rid


@pytest.mark.parametrize("rid", ["has space", "semi;colon", "x" * 65, "caf\xe9", "a/b", "{}"],
                         ids=["space", "semicolon", "too_long", "latin1", "slash", "braces"])
def test_invalid_request_id_replaced(server, rid):
    """An X-Request-Id with other characters or over 64 chars is replaced by a generated valid id."""
    r = server.request("GET", "/healthz", [("X-Request-Id", rid)])
    assert r.status == 200
    assert r.request_id != rid
    assert REQUEST_ID_RE.match(r.request_id), r.request_id


def test_empty_request_id_replaced(server):
    """An empty X-Request-Id counts as absent: a generated id is sent."""
    with server.conn() as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id:\r\n\r\n")
        r = c.read_response()
    assert r.status == 200
    assert REQUEST_ID_RE.match(r.request_id or ""), r


def test_generated_request_ids_are_unique(server):
    """Requests without X-Request-Id get distinct generated ids."""
    ids = set()
    with server.conn() as c:
        for _ in range(50):
            c.send(request_bytes("GET", "/healthz"))
            r = c.read_response()
            assert REQUEST_ID_RE.match(r.request_id), r.request_id
            ids.add(r.request_id)
    assert len(ids) == 50


def test_error_responses_carry_request_id(server):
    """Errors carry X-Request-Id too, echoed when valid."""
    r = server.request("GET", "/nope", [("X-Request-Id", "err-rid-1")])
    assert r.status == 404
    assert r.request_id == "err-rid-1"


def test_access_log_line_matches_response(server):
    """Each request writes one JSON access-log line on stderr with time, level, request id,
    method, route, status, duration and exact bytes in/out; the id is the response's."""
    rid = "log-" + uuid.uuid4().hex
    req = request_bytes("GET", "/healthz", [("X-Request-Id", rid)])
    with server.conn() as c:
        c.send(req)
        r = c.read_response()
    assert r.status == 200 and r.request_id == rid
    rec = server.wait_log(lambda x: x.get("requestId") == rid, timeout=5)
    assert rec is not None, "no access log line for %s in:\n%s" % (rid, server.stderr()[-3000:])
    assert rec["msg"] == "access", rec
    assert rec["level"] == "info", rec
    assert RFC3339_MS.match(rec["time"]), rec
    assert rec["method"] == "GET", rec
    assert rec["route"] == "/healthz", rec
    assert rec["status"] == 200, rec
    assert isinstance(rec["durationUs"], int) and 0 <= rec["durationUs"] < 5_000_000, rec
    assert rec["bytesIn"] == len(req), rec
    assert rec["bytesOut"] == r.raw_len, rec
    assert isinstance(rec["conn"], int), rec
    assert rec["pid"] in server.worker_pids(), rec
    matches = [x for x in server.log_records() if x.get("requestId") == rid]
    assert len(matches) == 1, matches


def test_access_log_generated_id_matches_response(server):
    """When the id is generated, the access log carries the same generated id."""
    marker = "/nope-" + uuid.uuid4().hex
    r = server.request("GET", marker)
    assert r.status == 404
    rec = server.wait_log(lambda x: x.get("requestId") == r.request_id, timeout=5)
    assert rec is not None, "no log line with the generated id %s" % r.request_id
    assert rec["status"] == 404 and rec["method"] == "GET", rec


@needs_test_routes
def test_access_log_counts_post_body_bytes(server):
    """bytesIn of a POST counts the request line, headers and body."""
    rid = "post-" + uuid.uuid4().hex
    body = json.dumps({"x": "y" * 1000}).encode()
    req = request_bytes("POST", ECHO, [JSON_CT, ("X-Request-Id", rid)], body)
    with server.conn() as c:
        c.send(req)
        r = c.read_response()
    assert r.status == 200
    rec = server.wait_log(lambda x: x.get("requestId") == rid, timeout=5)
    assert rec is not None
    assert rec["bytesIn"] == len(req), rec
    assert rec["route"] == ECHO and rec["method"] == "POST" and rec["status"] == 200, rec


def test_keep_alive_requests_share_conn_id_in_log(server):
    """Requests on one connection log the same conn id; another connection logs a different one."""
    tag = uuid.uuid4().hex[:8]
    with server.conn() as c:
        for i in range(3):
            c.send(request_bytes("GET", "/healthz", [("X-Request-Id", "%s-a%d" % (tag, i))]))
            assert c.read_response().status == 200
    recs = [server.wait_log(lambda x, i=i: x.get("requestId") == "%s-a%d" % (tag, i)) for i in range(3)]
    assert all(recs), recs
    assert len({(x["pid"], x["conn"]) for x in recs}) == 1, recs


def test_worker_started_logged_as_json(server):
    """Worker start is logged as a JSON line with msg and pid."""
    rec = server.wait_log(lambda x: x.get("msg") == "worker started", timeout=5)
    assert rec is not None, server.stderr()[-2000:]
    assert isinstance(rec.get("pid"), int)
    assert RFC3339_MS.match(rec.get("time", "")), rec
