#!/usr/bin/env python3
"""Opens N keep-alive connections to a server, sends one GET on each and reads its answer, so
every connection ends up idle in keep-alive; then reports the server process's RSS growth.

Usage: idle_conns.py --port P --pid PID [--count 10000] [--path /healthz] [--hold 2]

Prints one line of JSON: {"connections": n, "rss_before_kib": a, "rss_after_kib": b,
"bytes_per_conn": x, "failed": f}. Loopback only; bounded in count and time.
"""

import argparse
import json
import resource
import socket
import sys
import time


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def raise_nofile(want):
    """Raises the open-file limit to `want` (root may raise the hard limit too), else to the
    hard limit. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    try:
        new_hard = hard if hard == resource.RLIM_INFINITY or hard >= want else want
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, new_hard))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def read_response(sock, deadline):
    """Reads one response with a Content-Length body; returns the status code."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(rest) < length:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the process whose RSS is measured")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--path", default="/healthz")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--hold", type=float, default=2.0, help="seconds to hold the idle connections")
    ap.add_argument("--timeout", type=float, default=120.0, help="overall time bound")
    args = ap.parse_args()

    limit = raise_nofile(args.count + 1024)
    if limit < args.count + 64:
        print("idle_conns: RLIMIT_NOFILE is %d, too low for %d connections" % (limit, args.count), file=sys.stderr)
        return 2

    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % args.path).encode()
    # Warm the server up with the same request so lazily allocated per-process state
    # (read buffer, log buffer, malloc arenas) is in "before".
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", args.port), timeout=5) as s:
            s.sendall(req)
            read_response(s, time.monotonic() + 5)
    time.sleep(0.5)
    before = vm_rss_kib(args.pid)

    deadline = time.monotonic() + args.timeout
    socks = []
    failed = 0
    try:
        while len(socks) + failed < args.count and time.monotonic() < deadline:
            batch = []
            for _ in range(min(args.batch, args.count - len(socks) - failed)):
                try:
                    s = socket.create_connection(("127.0.0.1", args.port), timeout=10)
                    s.sendall(req)
                    batch.append(s)
                except OSError:
                    failed += 1
            for s in batch:
                try:
                    if read_response(s, time.monotonic() + 10) == 200:
                        socks.append(s)
                        continue
                except OSError:
                    pass
                failed += 1
                s.close()
        time.sleep(args.hold)
        after = vm_rss_kib(args.pid)
        # All still open? A server that dropped idle connections would make the number meaningless.
        alive = 0
        for s in socks:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    continue
            except BlockingIOError:
                alive += 1
                continue
            except OSError:
                continue
            alive += 1
    finally:
        for s in socks:
            s.close()

    n = len(socks)
    out = {
        "connections": n,
        "alive_at_measurement": alive,
        "failed": failed,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "bytes_per_conn": round((after - before) * 1024 / n, 1) if n else None,
    }
    print(json.dumps(out))
    return 0 if n == args.count and alive == n else 1


if __name__ == "__main__":
    sys.exit(main())
