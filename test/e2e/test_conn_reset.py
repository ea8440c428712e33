"""A peer that resets its connection right after sending: the answer's write fails inside the
HTTP core's answer, and the transport must not close the core from there (it freed the request
being answered: a use-after-free found while writing test/fuzz's fake transport)."""

import socket
import struct

from conftest import assert_ok


def test_reset_after_malformed_request_keeps_worker(make_server):
    """Hundreds of clients send a malformed request and reset at once (SO_LINGER 0): each gets
    its 400 write failed, and the one worker still answers afterwards, with no sanitizer report
    (checked at teardown)."""
    srv = make_server(workers=1)
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(b"GARBAGE\r\n\r\n")
        s.close()
    assert_ok(srv.request("GET", "/healthz"))
    assert not srv.sanitizer_reports(), srv.stderr()[-4000:]
