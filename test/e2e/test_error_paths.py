"""Issue 15 item 3: every path answers. Each route's database operations are found by tracing
the statements a successful request runs (GET /__test/trace); then every one of them is made
to fail in turn (POST /__test/fault, test builds only), in each of three ways:

  error        the server refuses the statement          -> 500 internal_error
  unavailable  the connection is gone before it is sent  -> 503 unavailable
  lost         it commits, and the connection breaks before the answer arrives -> 503

and the request must still get an answer, with the envelope, and an honest one: when the
provider was called (the simulator saw the request) the answer is 502 outcome_unknown with the
reference and the attempts, never "nothing was sent". The worker serves the next request
normally, and the server exits clean under ASan (the fixture checks), so no path leaks.

The outbound side is forced too: the HTTP client refusing a request (og_hc_start failing) ends
the attempt as provider_error and fallback moves on."""

import itertools
import re
import time
import urllib.parse

import pytest

from conftest import assert_envelope, assert_error, assert_ok, have_test_routes, wait_for
from gwlib import META_TOKEN, WA_FROM, admin, call, query_url, sim, tenant_gateway  # noqa: F401

pytestmark = pytest.mark.skipif(not have_test_routes(), reason="needs a build with -Dtest_routes=true")

MODES = ("error", "unavailable", "lost")
# Statements whose failure the request survives by design.
TOLERATED = {
    # The "not on WhatsApp" lookup: a database that cannot answer means WhatsApp is tried (the
    # memory saves money; it must not cost sends; docs/providers.md).
    "nowa_get",
}
CODE_RE = re.compile(r"(\d{4,10})")
_numbers = itertools.count(1)


def number():
    return "+6281277%06d" % next(_numbers)


@pytest.fixture
def gw(make_gateway, sim):
    srv = tenant_gateway(make_gateway, sim, workers=1)
    return srv


def trace(gw):
    return assert_ok(call(gw, "GET", "/__test/trace"))["data"]["statements"]


# Statements the worker runs on its own, not for a request: the step runner (claims, the due
# sampler, the sweep step, the webhook deliveries' steps), the status sweep, worker 0's webhook
# scheduler and outbox sampler, and the auth module's batched last-used write.
BACKGROUND = {"step_claim", "step_close", "steps_due", "status_sweep", "sweep_pending", "sweep_next",
              "nowa_prune", "tokens_touch", "wh_schedule", "wh_sample", "wh_due", "wh_record", "wh_release",
              "queue_claim", "queue_depth", "queue_debit", "queue_done", "batch_complete", "usage_compact"}


def arm(gw, **fault):
    assert_ok(call(gw, "POST", "/__test/fault", body=dict({"count": 1}, **fault)))


def armed(gw):
    return assert_ok(call(gw, "GET", "/__test/fault"))["data"]


# ---- the scenarios: one request each, on fresh data so it can be repeated ----------------------

def post(gw, token, path, body, key=False):
    headers = [("Idempotency-Key", "k-%d" % next(_numbers))] if key else None
    return call(gw, "POST", path, token=token, body=body, headers=headers)


def get(gw, token, path):
    return call(gw, "GET", path, token=token)


def code_sent_to(sim, to):
    reqs = [r for r in sim.requests("sms") if urllib.parse.parse_qs(r["body"])["To"] == [to]]
    return CODE_RE.search(urllib.parse.parse_qs(reqs[-1]["body"])["Body"][0]).group(1)


def prepared_otp(gw, sim):
    to = number()
    ref = assert_ok(post(gw, gw.token, "/api/sms/otp/send", {"to": to}))["data"]["reference"]
    return ref, code_sent_to(sim, to)


OTP_WABA = "102290129340398"


def otp_over_whatsapp(gw, sim):
    """The test's tenant sends OTPs over WhatsApp (API.md §18) with a template no worker has
    looked up yet (a cached catalogue entry is answered without a statement). Saving the wabaId
    makes the catalogue's sync step due: it has run (its write committed) before this returns,
    so none of its statements or Meta calls mix into the scenario's."""
    name = "otp_code_%d" % next(_numbers)
    sim._call("PUT", "/__sim/meta/wabas/%s/templates" % OTP_WABA, {"phoneNumberIds": ["109876543210"], "templates": [
        {"name": name, "language": "en_US", "category": "AUTHENTICATION",
         "components": [{"type": "BODY", "text": "{{1}} is your verification code."},
                        {"type": "BUTTONS", "buttons": [{"type": "OTP", "otp_type": "COPY_CODE",
                                                         "text": "Copy code"}]}]}]})
    number = {"phoneNumberId": "109876543210", "accessToken": META_TOKEN, "wabaId": OTP_WABA}
    assert_ok(admin(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], {"settings": {
        "channels": {"whatsapp_meta": {"numbers": {WA_FROM: number}}},
        "otp": {"whatsappTemplate": {"name": name, "language": "en_US"}}}}))
    assert wait_for(lambda: query_url(gw.db_url, "SELECT count(*) FROM wa_templates WHERE name = '%s'" % name)
                    == [("1",)], 10)


def meta_failing():
    """A number on which Meta fails (a 5xx) and SMS delivers (test/sim/README.md)."""
    return "+1999020%07d" % next(_numbers)


def new_tenant_id(gw, sim):
    return assert_ok(admin(gw, "POST", "/admin/tenants", {"name": "t%d" % next(_numbers), "unifiedApiEnabled": True}),
                     201)["data"]["id"]


def new_token_id(gw, sim):
    tid = gw.tenant["id"]
    return tid, assert_ok(admin(gw, "POST", "/admin/tenants/%s/tokens" % tid, {}), 201)["data"]["id"]


def tenant_with_webhook(gw, sim):
    tid = new_tenant_id(gw, sim)
    assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % tid, {"url": "https://example.com/hook"}))
    return tid


def disabled_delivery(gw, sim):
    """A delivery of the test's tenant whose webhook is disabled: a retry answers 409 and wakes no
    step (a step running in the background would mix its statements into other scenarios)."""
    tid = gw.tenant["id"]
    query_url(gw.db_url, "INSERT INTO tenant_webhooks (tenant_id, url, events, secret, disabled_at) "
                         "VALUES ('%s', 'https://example.com/', '{message.sent}', 'x', now()) "
                         "ON CONFLICT DO NOTHING" % tid)
    return query_url(gw.db_url, "WITH n AS (SELECT nextval('webhook_deliveries_id') AS id) "
                                "INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, type, subject, body, status) "
                                "SELECT id, '%s', og_webhook_id_of(id), 'message.sent', 'kf_x', '{}', 'exhausted' "
                                "FROM n RETURNING webhook_id" % tid)[0][0]


class Scenario:
    """One request. `prepare` makes the data it needs; tenant routes get a token never used
    before, so the token lookup is never served from the auth cache and can be made to fail.
    Both happen in setup(), before the caller starts tracing or arms a fault."""

    def __init__(self, name, run, ok_status=200, prepare=None, tenant=True):
        self.name, self.run, self.ok_status = name, run, ok_status
        self.prepare, self.tenant = prepare, tenant

    def setup(self, gw, sim):
        token = assert_ok(admin(gw, "POST", "/admin/tenants/%s/tokens" % gw.tenant["id"], {}),
                          201)["data"]["token"] if self.tenant else None
        arg = self.prepare(gw, sim) if self.prepare else None
        return lambda: self.run(gw, token, arg)


def an_hour_ahead():
    t = time.time() + 3600
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def scheduled_message(gw, sim):
    """A message scheduled an hour ahead (API.md §19): nothing releases it during the test."""
    r = post(gw, gw.token, "/api/omni/send", {"to": number(), "text": "hi", "sendAt": an_hour_ahead()})
    return assert_ok(r, 202)["data"]["reference"]


def wrong(code):
    return "0000" if code != "0000" else "1111"


SCENARIOS = [
    Scenario("send_fallback", lambda gw, t, _: post(gw, t, "/api/omni/send", {"to": number(), "text": "hi"})),
    Scenario("send_keyed",
             lambda gw, t, _: post(gw, t, "/api/omni/send", {"to": number(), "text": "hi"}, key=True)),
    Scenario("send_all", lambda gw, t, _: post(gw, t, "/api/omni/send",
                                               {"to": number(), "text": "hi", "deliveryMode": "all"})),
    Scenario("send_fallback_on_delivered",
             lambda gw, t, _: post(gw, t, "/api/omni/send", {"to": number(), "text": "hi", "fallbackOn": "delivered",
                                                             "fallbackAfterSeconds": 600}, key=True)),
    Scenario("sms_send", lambda gw, t, _: post(gw, t, "/api/sms/send", {"to": number(), "text": "hi"}, key=True)),
    Scenario("otp_send", lambda gw, t, _: post(gw, t, "/api/sms/otp/send", {"to": number()}, key=True)),
    # Meta delivers; Meta fails and the SMS delivers: the template lookup, the not-on-WhatsApp
    # check, and the outcome of two attempts.
    Scenario("otp_send_whatsapp",
             lambda gw, t, _: post(gw, t, "/api/sms/otp/send", {"to": number(), "channels": ["whatsapp_meta", "sms"]},
                                   key=True), prepare=otp_over_whatsapp),
    Scenario("otp_send_whatsapp_fallback",
             lambda gw, t, _: post(gw, t, "/api/sms/otp/send", {"to": meta_failing(),
                                                                "channels": ["whatsapp_meta", "sms"]}, key=True),
             prepare=otp_over_whatsapp),
    Scenario("otp_verify_right",
             lambda gw, t, otp: post(gw, t, "/api/sms/otp/verify", {"reference": otp[0], "code": otp[1]}),
             prepare=prepared_otp),
    Scenario("otp_verify_wrong",
             lambda gw, t, otp: post(gw, t, "/api/sms/otp/verify", {"reference": otp[0], "code": wrong(otp[1])}),
             ok_status=422, prepare=prepared_otp),
    Scenario("logs_omni", lambda gw, t, _: get(gw, t, "/api/omni/logs?limit=5")),
    Scenario("logs_sms", lambda gw, t, _: get(gw, t, "/api/sms/logs?limit=5")),
    Scenario("logs_otp", lambda gw, t, _: get(gw, t, "/api/sms/otp/logs?limit=5")),
    Scenario("admin_tenant_create",
             lambda gw, t, _: admin(gw, "POST", "/admin/tenants", {"name": "t%d" % next(_numbers)}),
             ok_status=201, tenant=False),
    Scenario("admin_tenant_get", lambda gw, t, tid: admin(gw, "GET", "/admin/tenants/%s" % tid),
             prepare=new_tenant_id, tenant=False),
    Scenario("admin_tenant_patch",
             lambda gw, t, tid: admin(gw, "PATCH", "/admin/tenants/%s" % tid, {"unifiedApiEnabled": True}),
             prepare=new_tenant_id, tenant=False),
    Scenario("admin_token_create", lambda gw, t, tid: admin(gw, "POST", "/admin/tenants/%s/tokens" % tid, {}),
             ok_status=201, prepare=new_tenant_id, tenant=False),
    Scenario("admin_token_list",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/tokens" % gw.tenant["id"]), tenant=False),
    Scenario("admin_token_revoke",
             lambda gw, t, ids: admin(gw, "DELETE", "/admin/tenants/%s/tokens/%s" % ids),
             prepare=new_token_id, tenant=False),
    Scenario("admin_webhook_put",
             lambda gw, t, tid: admin(gw, "PUT", "/admin/tenants/%s/webhook" % tid, {"url": "https://example.com/"}),
             prepare=new_tenant_id, tenant=False),
    Scenario("admin_webhook_get", lambda gw, t, tid: admin(gw, "GET", "/admin/tenants/%s/webhook" % tid),
             prepare=tenant_with_webhook, tenant=False),
    Scenario("admin_webhook_rotate",
             lambda gw, t, tid: admin(gw, "POST", "/admin/tenants/%s/webhook/rotate-secret" % tid),
             prepare=tenant_with_webhook, tenant=False),
    Scenario("admin_webhook_delete", lambda gw, t, tid: admin(gw, "DELETE", "/admin/tenants/%s/webhook" % tid),
             prepare=tenant_with_webhook, tenant=False),
    Scenario("webhook_deliveries", lambda gw, t, _: get(gw, t, "/api/webhooks/deliveries?limit=5")),
    Scenario("webhook_retry",
             lambda gw, t, wid: post(gw, t, "/api/webhooks/deliveries/%s/retry" % wid, None),
             ok_status=409, prepare=disabled_delivery),
    # The admin routes of the console (API.md §17).
    Scenario("admin_tenant_list", lambda gw, t, _: admin(gw, "GET", "/admin/tenants?limit=5&name=a"), tenant=False),
    Scenario("admin_logs_omni",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/omni/logs?limit=5" % gw.tenant["id"]), tenant=False),
    Scenario("admin_logs_sms",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/sms/logs?limit=5" % gw.tenant["id"]), tenant=False),
    Scenario("admin_logs_otp",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/otp/logs?limit=5" % gw.tenant["id"]), tenant=False),
    Scenario("admin_webhook_deliveries",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/webhook/deliveries?limit=5" % gw.tenant["id"]),
             tenant=False),
    Scenario("admin_webhook_retry",
             lambda gw, t, wid: admin(gw, "POST", "/admin/tenants/%s/webhook/deliveries/%s/retry" %
                                      (gw.tenant["id"], wid)),
             ok_status=409, prepare=disabled_delivery, tenant=False),
    # WhatsApp templates (API.md §18); the sync's failures are test_templates_sync.py's (its
    # provider call is a read: nothing of it is outcome_unknown).
    Scenario("templates", lambda gw, t, _: get(gw, t, "/api/whatsapp/templates?limit=5&status=APPROVED")),
    Scenario("admin_templates",
             lambda gw, t, _: admin(gw, "GET", "/admin/tenants/%s/templates?limit=5" % gw.tenant["id"]),
             tenant=False),
    # Queued sends (API.md §19): scheduled an hour ahead, so that no release runs meanwhile.
    Scenario("send_scheduled", lambda gw, t, _: post(gw, t, "/api/omni/send",
                                                     {"to": number(), "text": "hi", "sendAt": an_hour_ahead()},
                                                     key=True), ok_status=202),
    Scenario("message_get", lambda gw, t, ref: get(gw, t, "/api/omni/messages/" + ref), prepare=scheduled_message),
    Scenario("message_cancel", lambda gw, t, ref: post(gw, t, "/api/omni/messages/%s/cancel" % ref, None),
             prepare=scheduled_message),
    Scenario("queue_list", lambda gw, t, _: get(gw, t, "/api/omni/queue"), prepare=scheduled_message),
]


def provider_requests(sim):
    return len(sim.requests())


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_database_failure_answers(gw, sim, sc):
    """Each statement the route runs fails in each mode: the request still gets an honest
    answer and the worker goes on serving."""
    r = sc.setup(gw, sim)()  # the first request of a route may run statements once only
    assert r.status == sc.ok_status, r
    run = sc.setup(gw, sim)
    trace(gw)
    r = run()
    assert r.status == sc.ok_status, r
    statements = sorted(set(trace(gw)) - BACKGROUND)
    assert statements, "the route ran no statement of its own"
    print("%s: %s" % (sc.name, ", ".join(statements)))
    for stmt, mode in itertools.product(statements, MODES):
        run = sc.setup(gw, sim)
        before = provider_requests(sim)
        arm(gw, point="db", statement=stmt, status=mode)
        r = run()
        what = "%s failing (%s)" % (stmt, mode)
        assert armed(gw)["db"] == 0, "%s: the fault never hit" % what
        if stmt in TOLERATED:
            # Designed to be survived: the request goes on as if the statement had said no.
            assert r.status == sc.ok_status, "%s: %r" % (what, r)
            continue
        called = provider_requests(sim) > before
        # The provider was called: the outcome is unknown, never "nothing was sent".
        want = (502, "outcome_unknown") if called else (500, "internal_error") if mode == "error" \
            else (503, "unavailable")
        j = assert_envelope(r)
        assert (r.status, (j.get("error") or {}).get("code")) == want, "%s: %r" % (what, r)
        assert j["success"] is False and j["message"], what
        if called:
            assert j["data"]["status"] == "unknown" and j["data"]["reference"], (what, j)
            assert j["data"]["attempts"], (what, j)
        else:
            assert j["data"] is None, (what, j)
        if r.status == 503:
            assert r.header("Retry-After") == "1", what
        # The worker is fine: the same kind of request works again at once.
        again = sc.setup(gw, sim)()
        assert again.status == sc.ok_status, (what, again)


def test_send_outcome_unknown_is_kept_for_the_key(gw, sim):
    """A keyed send whose completion write is lost after the provider accepted: 502
    outcome_unknown now; the message is never sent again under that key."""
    to = number()
    key = [("Idempotency-Key", "lost-completion")]
    arm(gw, point="db", statement="msg_complete", status="lost")
    r = call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": to, "text": "hi"}, headers=key)
    j = assert_error(r, 502, "outcome_unknown")
    assert j["data"]["attempts"][0]["channel"] == "whatsapp_qr"
    assert j["data"]["attempts"][0]["status"] == "sent"
    assert r.header("X-Omnigate-Reference") == j["data"]["reference"]
    # "lost" committed the completion: the repeat replays the recorded answer, sends nothing.
    again = call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": to, "text": "hi"}, headers=key)
    assert again.status == 200 and again.header("Idempotency-Replayed") == "true", again
    assert len(sim.requests(to=to)) == 1


def test_send_completion_refused_keeps_key_unfinished(gw, sim):
    """A keyed send whose completion write is refused: 502 outcome_unknown; a repeat answers
    409 (in progress) while the lease holds, and the provider saw the message once."""
    to = number()
    key = [("Idempotency-Key", "refused-completion")]
    arm(gw, point="db", statement="msg_complete", status="error")
    r = call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": to, "text": "hi"}, headers=key)
    assert_error(r, 502, "outcome_unknown")
    again = call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": to, "text": "hi"}, headers=key)
    assert_error(again, 409, "idempotency_in_progress")
    assert len(sim.requests(to=to)) == 1


def test_http_client_refusing_a_request_fails_the_attempt(gw, sim):
    """og_hc_start refusing the request (as once the client has closed): the attempt fails at
    once as provider_error, nothing is sent on it, and fallback moves to the next channel."""
    to = number()
    arm(gw, point="hc_start")
    d = assert_ok(post(gw, gw.token, "/api/omni/send", {"to": to, "text": "hi"}))["data"]
    assert armed(gw)["hcStart"] == 0
    first, second = d["attempts"][0], d["attempts"][1]
    assert first["channel"] == "whatsapp_qr" and first["status"] == "failed"
    assert first["error"]["code"] == "provider_error" and "not started" in first["error"]["message"]
    assert second["channel"] == "whatsapp_meta" and second["status"] == "sent"
    assert sim.requests("whatsapp_qr", to=to) == []
    # The SMS route has no next channel: the failure is the answer.
    arm(gw, point="hc_start")
    j = assert_error(post(gw, gw.token, "/api/sms/send", {"to": to, "text": "hi"}), 502, "delivery_failed")
    assert j["data"]["error"]["code"] == "provider_error"
    assert sim.requests("sms", to=to) == []


def test_fault_route_validates(gw, sim):
    assert_error(call(gw, "POST", "/__test/fault", body={"point": "nope"}), 422, "validation_failed", "point")
    assert_error(call(gw, "POST", "/__test/fault", body={"point": "db", "statement": "nope", "status": "error"}),
                 422, "validation_failed", "statement")
    assert_error(call(gw, "POST", "/__test/fault", body={"point": "db", "status": "maybe"}), 422,
                 "validation_failed", "status")
    assert_envelope(call(gw, "GET", "/__test/fault"))
