"""Every response the end-to-end tests receive from a gateway, checked against the OpenAPI
document (src/product/static/openapi.json): its status must be documented for the path and method, its
Content-Type must be one the response lists, its body must match that media type's schema
(JSON Schema 2020-12, the OpenAPI 3.1 dialect, with python3-jsonschema) and its required headers
must be there.

conftest.Conn reports each request it sends (note_sent) and each response it reads (note_response)
on connections to a gateway (Server registers its port); the problems found are kept here and
conftest's pytest_runtest_makereport fails the test that got them. Validators are compiled once
per session, on first use.

A request that the HTTP core could not route (a malformed request line, or a response that came
before the request was complete: 408, 413, 431) is held to the core's answers, which the document
lists on every operation; a path the document does not have to components.responses.NoSuchRoute
(404), a documented path with another method to MethodNotAllowed (405). /__test/ routes are not
in the document (compiled only with -Dtest_routes=true) and are not checked.
"""
import json
import os
import re
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_PATH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src", "product", "static", "openapi.json")

# Statuses the HTTP core answers before any route runs (src/net/http_conn.c respond_error).
CORE_STATUSES = ("400", "408", "413", "431")

_lock = threading.Lock()
_noted = []  # (method, target, status, headers, body, head) not checked yet
_gateway_ports = set()
seen = set()  # (method, path template, status) answered in this session: the coverage report
_compiled = None


def register_gateway(port):
    _gateway_ports.add(port)


def write_coverage(path):
    """Writes which documented (method, path, status) the session's tests received, and which
    operations they never reached (OMNIGATE_OPENAPI_COVERAGE names the file)."""
    doc = compiled().doc
    ops = {}
    for template, item in doc["paths"].items():
        for method, operation in item.items():
            ops["%s %s" % (method.upper(), template)] = {
                "documented": sorted(operation["responses"]),
                "received": sorted(str(st) for m, t, st in seen if m == method.upper() and t == template)}
    with open(path, "w") as f:
        json.dump(ops, f, indent=1, sort_keys=True)


def forget_port(port):
    """Something other than a gateway (the simulator) now listens on `port`."""
    _gateway_ports.discard(port)


def is_gateway(port):
    return port in _gateway_ports


def take():
    """Checks the responses noted since the last call and returns their problems (and forgets
    them). Checking waits until here, the end of the test, so it adds nothing to the times a
    test measures."""
    with _lock:
        noted = list(_noted)
        del _noted[:]
    out = []
    for method, target, status, headers, body, head in noted:
        try:
            out.extend(check(method, target, status, headers, body, head, record=True))
        except Exception as e:  # a broken document or checker must fail loudly, not pass
            out.append("checking %s %s -> %d against the OpenAPI document raised %r" % (method, target, status, e))
    return out


def load_document():
    with open(DOC_PATH, encoding="utf-8") as f:
        return json.load(f)


class _Compiled:
    """The document with a validator per schema, compiled once."""

    def __init__(self, doc):
        import jsonschema
        from jsonschema import Draft202012Validator, FormatChecker

        self.doc = doc
        self.resolver = jsonschema.RefResolver("", doc)
        checker = FormatChecker()

        @checker.checks("date-time", raises=ValueError)
        def _date_time(value):
            if not isinstance(value, str):
                return True
            import datetime
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return True

        self.checker = checker
        self.validator_cls = Draft202012Validator
        self._validators = {}
        self.paths = []
        for template, item in doc["paths"].items():
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self.paths.append((re.compile(rx), template, item))

    def validator(self, key, schema):
        v = self._validators.get(key)
        if v is None:
            v = self.validator_cls(schema, resolver=self.resolver, format_checker=self.checker)
            self._validators[key] = v
        return v

    def deref(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            _, obj = self.resolver.resolve(obj["$ref"])
        return obj

    def match(self, path):
        for rx, template, item in self.paths:
            if rx.match(path):
                return template, item
        return None, None


def compiled():
    global _compiled
    if _compiled is None:
        _compiled = _Compiled(load_document())
    return _compiled


def _check_response(c, where, key, response, status, headers, body, head):
    """Checks one response against a Response Object; returns the problems."""
    out = []
    response = c.deref(response)
    names = {k.lower(): v for k, v in headers}
    for hname, h in response.get("headers", {}).items():
        h = c.deref(h)
        v = names.get(hname.lower())
        if v is None:
            if h.get("required"):
                out.append("%s: header %s is missing" % (where, hname))
            continue
        errs = list(c.validator(key + ("header", hname), h["schema"]).iter_errors(v))
        if errs:
            out.append("%s: header %s %r: %s" % (where, hname, v, errs[0].message))
    content = response.get("content")
    if not content:
        if body and not head:
            out.append("%s: the document says no body, got %r" % (where, body[:200]))
        return out
    ctype = (names.get("content-type") or "").split(";")[0].strip().lower()
    if ctype not in content:
        out.append("%s: Content-Type %r is not one of %s" % (where, ctype, sorted(content)))
        return out
    if head:
        return out
    schema = content[ctype].get("schema")
    if schema is None:
        return out
    if ctype == "application/json":
        try:
            value = json.loads(body.decode("utf-8"))
        except ValueError as e:
            return out + ["%s: body is not JSON (%s): %r" % (where, e, body[:200])]
    else:
        try:
            value = body.decode("utf-8")
        except UnicodeDecodeError:
            return out + ["%s: body is not UTF-8 text" % where]
    v = c.validator(key + ("body", ctype), schema)
    errs = sorted(v.iter_errors(value), key=lambda e: len(list(e.absolute_path)))
    if errs:
        e = errs[0]
        detail = e.message if len(e.message) < 400 else e.message[:400] + "..."
        if e.context:
            best = min(e.context, key=lambda x: len(list(x.absolute_path)) - len(list(x.absolute_schema_path)))
            detail += " (e.g. at %s: %s)" % ("/".join(str(p) for p in best.absolute_path),
                                             best.message[:300])
        out.append("%s: body does not match the schema at /%s: %s; body %r" % (
            where, "/".join(str(p) for p in e.absolute_path), detail, body[:600]))
    return out


def check(method, target, status, headers, body, head=False, record=False):
    """The problems of one response to `method target` (target None: the request was not
    complete or not parseable when the response came)."""
    c = compiled()
    doc = c.doc
    if status < 200:
        return []
    where = "%s %s -> %d" % (method or "?", target or "?", status)
    core = doc["components"]["responses"]
    if target is None:
        if str(status) not in CORE_STATUSES:
            return ["%s: a response to an incomplete or malformed request must be one of the HTTP core's "
                    "(%s)" % (where, ", ".join(CORE_STATUSES))]
        any_op = doc["paths"]["/healthz"]["get"]["responses"][str(status)]
        return _check_response(c, where, ("core", status), any_op, status, headers, body, head)
    path = target.split("?", 1)[0]
    if path.startswith("/__test/"):
        return []
    template, item = c.match(path)
    if template is None:
        if str(status) in CORE_STATUSES and status != 400:
            return _check_response(c, where, ("core", status),
                                   doc["paths"]["/healthz"]["get"]["responses"][str(status)], status, headers,
                                   body, head)
        if status != 404 and status != 400:
            return ["%s: the path is not in the document, so the answer must be 404 not_found" % where]
        resp = core["NoSuchRoute"] if status == 404 else doc["paths"]["/healthz"]["get"]["responses"]["400"]
        return _check_response(c, where, ("noroute", status), resp, status, headers, body, head)
    m = method.lower()
    is_head = m == "head"
    if is_head:
        m = "get"
    operation = item.get(m)
    if operation is None:
        if status == 405:
            return _check_response(c, where, ("405",), core["MethodNotAllowed"], status, headers, body, head)
        if str(status) in CORE_STATUSES:
            return _check_response(c, where, ("core", status),
                                   doc["paths"]["/healthz"]["get"]["responses"][str(status)], status, headers,
                                   body, head)
        return ["%s: %s is not a method of %s in the document, so the answer must be 405" % (
            where, method, template)]
    resp = operation["responses"].get(str(status))
    if record:
        seen.add((m.upper(), template, status))
    if resp is None:
        return ["%s: status %d is not documented for %s %s (documented: %s)" % (
            where, status, m.upper(), template, ", ".join(sorted(operation["responses"])))]
    return _check_response(c, where, (template, m, status), resp, status, headers, body, head or is_head)


def note_response(method, target, resp, head=False):
    """Keeps one response a test received from a gateway, to be checked at the end of the test."""
    with _lock:
        _noted.append((method, target, resp.status, list(resp.headers), resp.body or b"", head))


class TrackedSocket:
    """A socket whose outgoing bytes a RequestTracker follows (tests also write to Conn.sock
    directly); everything else is the socket's."""

    def __init__(self, sock, tracker):
        self._sock = sock
        self._tracker = tracker

    def sendall(self, data, *args):
        self._tracker.feed(bytes(data))
        return self._sock.sendall(data, *args)

    def send(self, data, *args):
        n = self._sock.send(data, *args)
        self._tracker.feed(bytes(data[:n]))
        return n

    def __getattr__(self, name):
        return getattr(self._sock, name)


class RequestTracker:
    """Follows the bytes a client sends on one connection and yields, in order, the (method,
    target) of each request once it has been sent whole; None for one that does not parse (after
    which nothing more on the connection is known)."""

    def __init__(self):
        self.buf = b""
        self.done = []
        self.broken = False

    def feed(self, data):
        if self.broken:
            return
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            m = re.match(r"^([A-Z]+) (\S+) HTTP/1\.[01]$", lines[0])
            if not m:
                self.done.append(None)
                self.broken = True
                self.buf = b""
                return
            length = 0
            chunked = False
            for line in lines[1:]:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    try:
                        length = int(v.strip())
                    except ValueError:
                        self.done.append(None)
                        self.broken = True
                        return
                elif k == "transfer-encoding" and "chunked" in v.lower():
                    chunked = True
            rest = self.buf[end + 4:]
            if chunked:
                # Walk the chunks; wait for more when they are not all here.
                pos = 0
                while True:
                    nl = rest.find(b"\r\n", pos)
                    if nl < 0:
                        return
                    try:
                        size = int(rest[pos:nl].split(b";")[0], 16)
                    except ValueError:
                        self.done.append(None)
                        self.broken = True
                        return
                    if size == 0:
                        if len(rest) < nl + 4:
                            return
                        if rest[nl + 2:nl + 4] == b"\r\n":
                            consumed = nl + 4
                        else:
                            tail = rest.find(b"\r\n\r\n", nl + 2)
                            if tail < 0:
                                return
                            consumed = tail + 4
                        break
                    if len(rest) < nl + 2 + size + 2:
                        return
                    pos = nl + 2 + size + 2
            else:
                if len(rest) < length:
                    return
                consumed = length
            self.done.append((m.group(1), m.group(2)))
            self.buf = rest[consumed:]

    def next_request(self):
        """The oldest request sent whole and not answered yet: (method, target), None when it
        did not parse, or False when no complete request is waiting."""
        if self.done:
            return self.done.pop(0)
        return False
