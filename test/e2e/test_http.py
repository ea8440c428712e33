"""HTTP/1.1 framing on real sockets: keep-alive, pipelining, byte splits, chunked bodies,
Expect: 100-continue, HTTP/1.0, HEAD, and malformed input. One scenario per test."""

import json
import socket
import threading
import time

import pytest

from conftest import (Closed, assert_envelope, assert_error, assert_ok, chunked, needs_test_routes,
                      request_bytes, wait_for)

HEALTHZ_BODY = {"success": True, "message": "ok", "data": {"status": "ok"}}
JSON_CT = ("Content-Type", "application/json")
ECHO = "/__test/echo"


def test_healthz_envelope_and_standard_headers(server):
    """GET /healthz answers 200 with the exact envelope and Content-Length, Date, X-Request-Id."""
    r = server.request("GET", "/healthz")
    assert_ok(r)
    assert r.json() == HEALTHZ_BODY
    assert r.version == "HTTP/1.1"
    assert int(r.header("Content-Length")) == len(r.body)
    assert r.header("Date", "").endswith(" GMT"), r
    assert r.header("Connection", "keep-alive").lower() != "close"


def test_readyz_without_database_is_not_ready(server):
    """GET /readyz answers 503 unavailable when no database is configured (the instance can
    serve nothing but /healthz), while /healthz stays 200."""
    r = server.request("GET", "/readyz")
    assert_error(r, 503, "unavailable")
    assert r.header("Retry-After") == "1"
    assert_ok(server.request("GET", "/healthz"))


def test_keep_alive_reuses_connection(server):
    """Several requests on one HTTP/1.1 connection are all answered and it stays open."""
    with server.conn() as c:
        for i in range(5):
            c.send(request_bytes("GET", "/healthz", [("X-Request-Id", "ka-%d" % i)]))
            r = c.read_response()
            assert_ok(r)
            assert r.request_id == "ka-%d" % i
            assert (r.header("Connection") or "").lower() != "close"
        assert c.is_open_after(0.3), "keep-alive connection was closed after 5 requests"


def test_keep_alive_survives_application_errors(server):
    """A 404 or 405 is an answer, not a framing error: the connection stays usable."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/no-such-route"))
        assert_error(c.read_response(), 404, "not_found")
        c.send(request_bytes("DELETE", "/healthz"))
        assert_error(c.read_response(), 405, "method_not_allowed")
        c.send(request_bytes("GET", "/healthz"))
        assert_ok(c.read_response())


def test_100_pipelined_requests_in_one_write_answered_in_order(server):
    """100 GET /healthz sent in a single write get 100 answers, in request order."""
    ids = ["pipe-%03d" % i for i in range(100)]
    payload = b"".join(request_bytes("GET", "/healthz", [("X-Request-Id", rid)]) for rid in ids)
    with server.conn(timeout=10) as c:
        c.send(payload)
        got = []
        for _ in ids:
            r = c.read_response(timeout=10)
            assert r.status == 200, r
            assert r.json() == HEALTHZ_BODY
            got.append(r.request_id)
        assert got == ids
        assert c.is_open_after(0.2)


@needs_test_routes
def test_pipelined_mixed_requests_answered_in_order(server):
    """A pipelined POST with a body, a 404 and a GET come back in order, each with its own answer."""
    body = json.dumps({"k": "v" * 100}).encode()
    payload = (request_bytes("POST", ECHO, [JSON_CT, ("X-Request-Id", "mix-1")], body)
               + request_bytes("GET", "/missing", [("X-Request-Id", "mix-2")])
               + request_bytes("GET", "/healthz", [("X-Request-Id", "mix-3")]))
    with server.conn() as c:
        c.send(payload)
        r1, r2, r3 = c.read_response(), c.read_response(), c.read_response()
    j = assert_ok(r1)
    assert j["data"] == {"bytes": len(body), "body": {"k": "v" * 100}}
    assert_error(r2, 404, "not_found")
    assert_ok(r3)
    assert [r.request_id for r in (r1, r2, r3)] == ["mix-1", "mix-2", "mix-3"]


def test_pipelined_requests_after_connection_close_are_not_answered(server):
    """Bytes after a request with Connection: close are never parsed as another request."""
    payload = (request_bytes("GET", "/healthz", [("Connection", "close"), ("X-Request-Id", "first")])
               + request_bytes("GET", "/healthz", [("X-Request-Id", "second")]))
    with server.conn() as c:
        c.send(payload)
        r = c.read_response()
        assert_ok(r)
        assert r.request_id == "first"
        assert r.header("Connection", "").lower() == "close"
        _, rest = c.wait_closed()
        assert rest == b"", "second response after Connection: close: %r" % rest[:200]


def test_request_sent_one_byte_at_a_time(server):
    """A request split into 1-byte TCP segments is parsed exactly like one sent whole."""
    req = request_bytes("GET", "/healthz?x=1", [("X-Request-Id", "bytewise"), ("Accept", "*/*")])
    with server.conn() as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in req:
            c.send(bytes([b]))
            time.sleep(0.001)
        r = c.read_response()
    assert_ok(r)
    assert r.request_id == "bytewise"


@needs_test_routes
def test_post_body_sent_one_byte_at_a_time(server):
    """Headers and a Content-Length body trickled byte by byte are decoded in full."""
    body = json.dumps({"split": "every byte", "n": [1, 2, 3]}).encode()
    req = request_bytes("POST", ECHO, [JSON_CT], body)
    with server.conn() as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in req:
            c.send(bytes([b]))
            time.sleep(0.0005)
        r = c.read_response()
    j = assert_ok(r)
    assert j["data"] == {"bytes": len(body), "body": json.loads(body)}


def test_http10_closes_after_response(server):
    """An HTTP/1.0 request without keep-alive is answered, then the server closes."""
    with server.conn() as c:
        c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        r = c.read_response()
        assert_ok(r)
        assert (r.header("Connection") or "close").lower() == "close"
        _, rest = c.wait_closed()
        assert rest == b""


def test_http10_keep_alive_when_requested(server):
    """HTTP/1.0 with Connection: keep-alive keeps the connection for the next request."""
    with server.conn() as c:
        c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = c.read_response()
        assert_ok(r)
        assert r.header("Connection", "").lower() == "keep-alive"
        c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert_ok(c.read_response())


def test_http11_connection_close_honoured(server):
    """HTTP/1.1 with Connection: close: the answer says close and the connection ends."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz", [("Connection", "close")]))
        r = c.read_response()
        assert_ok(r)
        assert r.header("Connection", "").lower() == "close"
        c.wait_closed()


def test_head_served_by_get_route(server):
    """HEAD /healthz: 200 with the GET's headers (Content-Length included) and no body bytes."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz"))
        get = c.read_response()
        c.send(request_bytes("HEAD", "/healthz", [("X-Request-Id", "head-1")]))
        head = c.read_response(head=True)
        assert head.status == 200, head
        assert head.request_id == "head-1"
        assert head.header("Content-Length") == get.header("Content-Length")
        # If the server had sent a body, it would now be read as the next response's start.
        c.send(request_bytes("GET", "/healthz", [("X-Request-Id", "after-head")]))
        r = c.read_response()
        assert r.status == 200 and r.request_id == "after-head", r


@needs_test_routes
def test_chunked_post_body_decoded(server):
    """A chunked request body (odd chunk sizes, a chunk extension) reaches the handler intact."""
    obj = {"hello": "world", "list": list(range(50)), "nested": {"a": "b" * 300}}
    body = json.dumps(obj).encode()
    enc = chunked(body, [1, 3, 7, 100, 2])
    enc = enc.replace(b"1\r\n", b"1;ext=yes\r\n", 1)
    req = request_bytes("POST", ECHO, [JSON_CT, ("Transfer-Encoding", "chunked")]) + enc
    with server.conn() as c:
        c.send(req)
        r = c.read_response()
        j = assert_ok(r)
        assert j["data"] == {"bytes": len(body), "body": obj}
        c.send(request_bytes("GET", "/healthz"))
        assert_ok(c.read_response())


@needs_test_routes
def test_expect_100_continue(server):
    """Expect: 100-continue gets the interim 100 before the body is sent, then the final 200."""
    body = json.dumps({"after": "continue"}).encode()
    with server.conn() as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Expect", "100-continue"),
                                            ("Content-Length", str(len(body)))]))
        interim = c.read_response(timeout=3)
        assert interim.status == 100, interim
        assert interim.version == "HTTP/1.1"
        c.send(body)
        r = c.read_response()
    j = assert_ok(r)
    assert j["data"]["body"] == {"after": "continue"}


def test_expect_100_continue_over_limit_gets_413_not_100(server):
    """Expect: 100-continue with a Content-Length over the limit: 413 at once, no 100, close."""
    with server.conn() as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Expect", "100-continue"),
                                            ("Content-Length", str(10 * 1024 * 1024))]))
        r = c.read_response(timeout=3)
        assert_error(r, 413, "payload_too_large")
        c.wait_closed()


MALFORMED = {
    "garbage_request_line": b"HELLO\r\n\r\n",
    "bad_method_chars": b"G(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad_version": b"GET /healthz HTTP/7.5\r\nHost: x\r\n\r\n",
    "extra_token_in_request_line": b"GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    "header_without_colon": b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n",
    "space_before_colon": b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
    "content_length_and_chunked": (b"POST /__test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
    "duplicate_content_length": (b"POST /__test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x"),
    "non_numeric_content_length": b"POST /__test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n{",
    "transfer_encoding_not_chunked": (b"POST /__test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      b"Transfer-Encoding: gzip\r\n\r\n{}"),
    "bare_lf_inside_headers": b"GET /healthz HTTP/1.1\r\nHost: x\nX-A: y\r\n\r\n",
    "nul_in_header_value": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "bad_chunk_size": (b"POST /__test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
}


@pytest.mark.parametrize("raw", list(MALFORMED.values()), ids=list(MALFORMED.keys()))
def test_malformed_request_answered_400_and_closed(server, raw):
    """Malformed HTTP (no lenient parsing: smuggling vectors included) gets 400 bad_request, then close."""
    with server.conn() as c:
        c.send(raw)
        r = c.read_response()
        assert_error(r, 400, "bad_request")
        assert r.header("Connection", "").lower() == "close"
        _, rest = c.wait_closed()
        assert rest == b"", "bytes after the 400: %r" % rest[:200]


def test_bad_request_line_after_good_request_keeps_first_answer(server):
    """A pipelined good request is answered before the malformed one that follows it gets 400."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz", [("X-Request-Id", "good")]) + b"BROKEN LINE\r\n\r\n")
        r1 = c.read_response()
        assert_ok(r1)
        assert r1.request_id == "good"
        assert_error(c.read_response(), 400, "bad_request")
        c.wait_closed()


def test_many_concurrent_connections(server):
    """200 connections open at once, each with a request in flight, are all answered."""
    conns = []
    try:
        for i in range(200):
            c = server.conn(timeout=10)
            conns.append(c)
            c.send(request_bytes("GET", "/healthz", [("X-Request-Id", "cc-%d" % i)]))
        for i, c in enumerate(conns):
            r = c.read_response(timeout=10)
            assert r.status == 200 and r.request_id == "cc-%d" % i, r
    finally:
        for c in conns:
            c.close()


def test_client_that_does_not_read_is_served_once_it_reads(server):
    """Pipelined requests from a client that reads nothing: once its unsent answers pass the
    write backlog the server stops reading, so the client's writes block (backpressure, not
    memory), and every answer then arrives in order once the client reads."""
    n = 40000  # about 2.4 MB of requests, 8 MB of answers: far more than the small buffers hold
    payload = b"".join(request_bytes("GET", "/healthz", [("X-Request-Id", "bp-%d" % i)]) for i in range(n))
    with server.conn(timeout=30, bufsize=16384) as c:
        errors, sent = [], [0]

        def writer():
            try:
                view = memoryview(payload)
                while sent[0] < len(payload):
                    sent[0] += c.sock.send(view[sent[0]:sent[0] + 65536])
            except OSError as e:
                errors.append(e)

        t = threading.Thread(target=writer, daemon=True)
        t.start()

        def stalled():
            """The writer made no progress for half a second, with bytes still to send."""
            before = sent[0]
            time.sleep(0.5)
            return sent[0] == before and before < len(payload)

        assert wait_for(stalled, 20), "the server read %d of %d bytes without the client reading" % (
            sent[0], len(payload))
        assert t.is_alive() and not errors, errors
        for i in range(n):
            r = c.read_response(timeout=20)
            assert r.status == 200 and r.request_id == "bp-%d" % i, (i, r)
        t.join(timeout=20)
        assert not t.is_alive()
        assert not errors, errors
        assert sent[0] == len(payload)
