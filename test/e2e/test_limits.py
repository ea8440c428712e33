"""Limits and timeouts of API.md §0 and docs/http.md: 413 and 431 answered without buffering the
excess, then close; header, body and idle timeouts; a slowloris client costs only its own
connection. One scenario per test."""

import json
import socket
import threading
import time

from conftest import assert_error, assert_ok, chunked, needs_test_routes, request_bytes

JSON_CT = ("Content-Type", "application/json")
ECHO = "/__test/echo"
MIB = 1024 * 1024


def test_content_length_1mib_answered_413_at_the_headers(server):
    """Content-Length: 1 MiB is refused with 413 payload_too_large from the headers alone, in well
    under a second, without waiting for the body; the connection is then closed."""
    with server.conn() as c:
        start = time.monotonic()
        # Only the headers and a first slice of the body: a server that read the whole body
        # before answering would never answer.
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Content-Length", str(MIB))]) + b"{" + b" " * 4095)
        r = c.read_response(timeout=3)
        elapsed = time.monotonic() - start
        assert_error(r, 413, "payload_too_large")
        assert elapsed < 1.0, "413 took %.3f s" % elapsed
        assert r.header("Connection", "").lower() == "close"
        c.wait_closed()


def test_413_reaches_a_client_that_sends_the_whole_body(server):
    """A client writing its whole 1 MiB body still reads the 413 (lingering close, not a reset
    that destroys the answer), in well under a second."""
    body = b"{" + b" " * (MIB - 2) + b"}"
    req = request_bytes("POST", ECHO, [JSON_CT], body)
    with server.conn() as c:
        def writer():
            try:
                c.sock.sendall(req)
            except OSError:
                pass  # the server may close its side after answering: expected

        start = time.monotonic()
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = c.read_response(timeout=3)
        elapsed = time.monotonic() - start
        assert_error(r, 413, "payload_too_large")
        assert elapsed < 1.0, "413 took %.3f s" % elapsed
        c.wait_closed(timeout=10)
        t.join(timeout=10)


@needs_test_routes
def test_body_at_exactly_the_limit_is_accepted(server):
    """A body of exactly max-body-bytes (65536) is accepted; the limit is inclusive."""
    body = b'{"a":"' + b"x" * (65536 - 8) + b'"}'
    assert len(body) == 65536
    r = server.request("POST", ECHO, [JSON_CT], body, timeout=10)
    j = assert_ok(r)
    assert j["data"]["bytes"] == 65536


def test_body_one_byte_over_the_limit_is_413(server):
    """Content-Length 65537 (one over the default limit) is answered 413."""
    with server.conn() as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Content-Length", "65537")]))
        assert_error(c.read_response(timeout=3), 413, "payload_too_large")
        c.wait_closed()


def test_chunked_body_over_the_limit_is_413(server):
    """A chunked body that grows past 64 KiB is cut off with 413 payload_too_large, then close."""
    body = b"[" + b"1," * 40000 + b"1]"
    enc = chunked(body, [8192])
    with server.conn() as c:
        def writer():
            try:
                c.sock.sendall(request_bytes("POST", ECHO, [JSON_CT, ("Transfer-Encoding", "chunked")]) + enc)
            except OSError:
                pass

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = c.read_response(timeout=3)
        assert_error(r, 413, "payload_too_large")
        c.wait_closed()
        t.join(timeout=10)


def test_max_body_bytes_setting(make_server):
    """--max-body-bytes lowers the limit: with 2048, a 2049-byte body is 413 and 2048 bytes pass
    the limit check."""
    srv = make_server(["--max-body-bytes", "2048"])
    with srv.conn() as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT], b"[" + b" " * 2047 + b"]"))
        assert_error(c.read_response(), 413, "payload_too_large")
        c.wait_closed()
    r = srv.request("POST", ECHO, [JSON_CT], b'{"a":"' + b"x" * 2040 + b'"}')
    assert r.status != 413, r


def test_20kib_header_answered_431_and_closed(server):
    """A request whose headers total 20 KiB is answered 431 headers_too_large, then closed."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz", [("X-Big", "a" * 20 * 1024)]))
        r = c.read_response(timeout=3)
        assert_error(r, 431, "headers_too_large")
        assert r.header("Connection", "").lower() == "close"
        c.wait_closed()


def test_many_small_headers_over_limit_431(server):
    """The header limit counts the whole head: 400 headers of 50 bytes (20 KB) are 431."""
    headers = [("X-H-%03d" % i, "v" * 40) for i in range(400)]
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz", headers))
        assert_error(c.read_response(timeout=3), 431, "headers_too_large")
        c.wait_closed()


def test_long_request_target_431(server):
    """A 20 KiB request-target counts against the header limit too: 431 (not a crash, not 400)."""
    with server.conn() as c:
        c.send(request_bytes("GET", "/healthz?q=" + "z" * 20 * 1024))
        assert_error(c.read_response(timeout=3), 431, "headers_too_large")
        c.wait_closed()


def test_headers_just_under_limit_accepted(server):
    """Headers well inside 16 KiB (15 KiB) are accepted."""
    r = server.request("GET", "/healthz", [("X-Big", "b" * 15 * 1024)])
    assert_ok(r)


def test_slowloris_closed_at_header_timeout_while_others_served(make_server):
    """A client trickling header bytes is answered 408 and closed at the header timeout (1 s),
    not kept alive by each new byte, while another client on the same single worker is served."""
    srv = make_server(["--header-timeout-ms", "1000"], workers=1)
    slow = srv.conn(timeout=10)
    slow.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stop = threading.Event()

    def trickle():
        try:
            slow.sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            i = 0
            while not stop.is_set():
                slow.sock.sendall(b"X-Slow-%d: y\r\n" % i)
                i += 1
                time.sleep(0.1)
        except OSError:
            pass

    start = time.monotonic()
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        r = srv.request("GET", "/healthz", timeout=3)
        assert_ok(r)
        assert time.monotonic() - t0 < 0.5, "other client waited behind the slowloris"
        _, data = slow.wait_closed(timeout=8)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join(timeout=5)
        slow.close()
    assert 0.8 <= elapsed <= 3.0, "slowloris connection closed after %.2f s, expected ~1 s" % elapsed
    assert data.startswith(b"HTTP/1.1 408 "), "expected a 408 before the close, got %r" % data[:200]
    assert b"X-Request-Id:" in data or b"x-request-id:" in data.lower()
    # The server still works afterwards.
    assert_ok(srv.request("GET", "/healthz"))


def test_silent_connection_closed_without_response(make_server):
    """A connection that never sends a byte is closed at the timeout with no response bytes."""
    srv = make_server(["--header-timeout-ms", "1000", "--idle-timeout-ms", "1000"])
    with srv.conn(timeout=10) as c:
        elapsed, data = c.wait_closed(timeout=6)
    assert data == b"", "silent connection got %r" % data[:200]
    assert 0.7 <= elapsed <= 3.0, "closed after %.2f s" % elapsed


def test_idle_keep_alive_closed_after_idle_timeout(make_server):
    """A keep-alive connection idle after a response is closed at --idle-timeout-ms, silently."""
    srv = make_server(["--idle-timeout-ms", "1000"])
    with srv.conn(timeout=10) as c:
        c.send(request_bytes("GET", "/healthz"))
        assert_ok(c.read_response())
        assert c.is_open_after(0.4), "closed long before the idle timeout"
        elapsed, data = c.wait_closed(timeout=6)
    assert data == b"", "idle close sent %r" % data[:200]
    assert elapsed <= 2.5, "idle connection closed after %.2f s more, expected ~0.6 s" % elapsed


def test_idle_timer_restarts_per_request(make_server):
    """Each request restarts the idle timer: requests every 0.5 s keep a 1 s idle timeout away."""
    srv = make_server(["--idle-timeout-ms", "1000"])
    with srv.conn(timeout=10) as c:
        for _ in range(5):
            c.send(request_bytes("GET", "/healthz"))
            assert_ok(c.read_response())
            time.sleep(0.5)
        c.send(request_bytes("GET", "/healthz"))
        assert_ok(c.read_response())


@needs_test_routes
def test_stalled_body_closed_at_body_timeout(make_server):
    """A body that stops arriving is abandoned at --body-timeout-ms (1 s): 408 request_timeout,
    then the connection is closed (docs/http.md)."""
    srv = make_server(["--body-timeout-ms", "1000", "--header-timeout-ms", "10000"])
    with srv.conn(timeout=10) as c:
        start = time.monotonic()
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Content-Length", "100")]) + b'{"partial":')
        _, data = c.wait_closed(timeout=8)
        elapsed = time.monotonic() - start
    assert 0.8 <= elapsed <= 3.0, "stalled body closed after %.2f s, expected ~1 s" % elapsed
    assert data.startswith(b"HTTP/1.1 408 ") and b'"code":"request_timeout"' in data, "unexpected answer %r" % data[:300]


@needs_test_routes
def test_slow_but_steady_body_within_body_timeout_is_served(make_server):
    """A body that arrives in pieces but completes inside the body timeout is served normally."""
    srv = make_server(["--body-timeout-ms", "2000"])
    body = json.dumps({"slow": True, "pad": "p" * 50}).encode()
    with srv.conn(timeout=10) as c:
        c.send(request_bytes("POST", ECHO, [JSON_CT, ("Content-Length", str(len(body)))]))
        for i in range(0, len(body), 20):
            time.sleep(0.2)
            c.send(body[i:i + 20])
        j = assert_ok(c.read_response())
        assert j["data"]["body"]["slow"] is True
