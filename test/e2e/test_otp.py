"""Issue 5 end to end: SMS sends, OTP send/verify with their limits and history, SMS and OTP
logs, through the real gateway, PostgreSQL and the provider simulator. The tests read the
code the way a user would: from the SMS body the simulator received."""

import re
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import (ADMIN_TOKEN, tenant_gateway, SETTINGS_ALL, call, magic, new_tenant, new_token, provider_env, query_url,  # noqa: F401
                   sim)

CODE_RE = re.compile(r"(\d{4,10})")


@pytest.fixture
def gw(make_gateway, sim):
    return tenant_gateway(make_gateway, sim)


def post(gw, path, body, headers=None):
    return call(gw, "POST", path, token=gw.token, body=body, headers=headers)


def code_sent_to(sim, to):
    """The code in the newest SMS the simulator received for `to`."""
    reqs = [r for r in sim.requests("sms") if urllib.parse.parse_qs(r["body"])["To"] == [to]]
    body = urllib.parse.parse_qs(reqs[-1]["body"])["Body"][0]
    return CODE_RE.search(body).group(1), body


def number(i):
    return "+62812%07d" % (int(time.time() * 1000) % 10000000 + i)


# ---- SMS send ---------------------------------------------------------------------------------

def test_sms_send_encoding_and_segments(gw, sim):
    """SMS send returns segments and encoding (GSM-7 vs UCS-2) and is in the SMS log."""
    d = assert_ok(post(gw, "/api/sms/send", {"to": "+6281234567891", "text": "a" * 161}))["data"]
    assert (d["status"], d["segments"], d["encoding"]) == ("sent", 2, "gsm7")
    assert d["providerMessageId"].startswith("SM")
    d2 = assert_ok(post(gw, "/api/sms/send", {"to": "+6281234567891", "text": "hello 🙂"}))["data"]
    assert (d2["segments"], d2["encoding"]) == (1, "ucs2")
    items = assert_ok(call(gw, "GET", "/api/sms/logs?source=sms", token=gw.token))["data"]["items"]
    assert [i["reference"] for i in items[:2]] == [d2["reference"], d["reference"]]
    assert items[1]["segments"] == 2 and items[1]["status"] == "sent" and items[1]["sender"] == "ACME"


def test_sms_long_code_sender_goes_in_e164(gw, sim):
    """A numeric long-code sender (8-15 digits) reaches the SMS provider in E.164, as Twilio
    requires of a number; a short code and an alphanumeric id go as they are. The SMS log keeps
    the sender as the tenant wrote it."""
    settings = dict(SETTINGS_ALL, channels=dict(SETTINGS_ALL["channels"], sms={
        "enabled": True, "senders": ["ACME", "6281234567890", "12345"], "defaultSender": "ACME"}))
    assert_ok(call(gw, "PATCH", "/admin/tenants/%s" % gw.tenant["id"], token=ADMIN_TOKEN,
                   body={"settings": settings}))
    froms = {}
    for sender in ("6281234567890", "12345", "ACME"):
        to = number(len(froms))
        d = assert_ok(post(gw, "/api/sms/send", {"to": to, "text": "hi", "sender": sender}))["data"]
        assert d["status"] == "sent"
        reqs = [r for r in sim.requests("sms") if urllib.parse.parse_qs(r["body"])["To"] == [to]]
        froms[sender] = urllib.parse.parse_qs(reqs[-1]["body"])["From"]
    assert froms == {"6281234567890": ["+6281234567890"], "12345": ["12345"], "ACME": ["ACME"]}
    items = assert_ok(call(gw, "GET", "/api/sms/logs?source=sms&limit=3", token=gw.token))["data"]["items"]
    assert [i["sender"] for i in items] == ["ACME", "12345", "6281234567890"]


def test_sms_send_rules(gw, sim):
    """SMS send: provider failure is 502 with data; sender rules and text limits are 422."""
    r = post(gw, "/api/sms/send", {"to": magic(0, 0, 1), "text": "x"})
    assert r.status == 502
    j = r.json()
    assert j["error"]["code"] == "delivery_failed" and j["data"]["status"] == "failed"
    assert j["data"]["error"]["code"] == "provider_rejected"
    assert_error(post(gw, "/api/sms/send", {"to": "+6281234567891", "text": "x", "sender": "NOPE"}), 422,
                 "sender_not_approved", "sender")
    assert_error(post(gw, "/api/sms/send", {"to": "+6281234567891", "text": "€" * 766}), 422, "text_too_long", "text")


# ---- OTP ------------------------------------------------------------------------------------

def test_otp_send_and_verify(gw, sim):
    """The code reaches the phone (simulator), never the response; the right code verifies
    once; history records the send and the verification."""
    to = number(1)
    r = post(gw, "/api/sms/otp/send", {"to": to, "length": 8})
    d = assert_ok(r)["data"]
    assert d["to"] == to and d["length"] == 8 and d["status"] == "sent" and d["expiresAt"].endswith("Z")
    code, body = code_sent_to(sim, to)
    assert len(code) == 8 and body == "Your verification code is " + code
    assert code not in r.body.decode()
    v = assert_ok(post(gw, "/api/sms/otp/verify", {"reference": d["reference"], "code": code}))["data"]
    assert v == {"reference": d["reference"], "verified": True}
    assert_error(post(gw, "/api/sms/otp/verify", {"reference": d["reference"], "code": code}), 409,
                 "otp_already_verified")
    logs = assert_ok(call(gw, "GET", "/api/sms/otp/logs?reference=" + d["reference"], token=gw.token))["data"]["items"]
    assert logs[0]["status"] == "verified" and logs[0]["verifiedAt"]
    assert [h["event"] for h in logs[0]["history"]] == ["sent", "verify_success", "verify_failed"]
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?source=otp", token=gw.token))["data"]["items"]
    assert sms[0]["text"] == "Your verification code is ********" and code not in sms[0]["text"]


def test_verify_by_number_and_wrong_codes_lock(gw, sim):
    """Verify by number; wrong codes count down, the fifth locks, and from then even the right
    code is 429 otp_locked."""
    to = number(2)
    d = assert_ok(post(gw, "/api/sms/otp/send", {"to": to, "template": "Code: {code}. Do not share."}))["data"]
    code, body = code_sent_to(sim, to)
    assert body == "Code: %s. Do not share." % code
    wrong = "000000" if code != "000000" else "111111"
    for left in (4, 3, 2, 1, 0):
        r = post(gw, "/api/sms/otp/verify", {"to": to, "code": wrong})
        j = assert_error(r, 422, "otp_invalid")
        assert j["data"]["attemptsRemaining"] == left
    r = post(gw, "/api/sms/otp/verify", {"to": to, "code": code})
    assert_error(r, 429, "otp_locked")
    assert r.header("Retry-After")
    logs = assert_ok(call(gw, "GET", "/api/sms/otp/logs?reference=" + d["reference"], token=gw.token))["data"]["items"]
    assert logs[0]["status"] == "locked" and logs[0]["failedAttempts"] == 5
    assert [h["event"] for h in logs[0]["history"]] == (["sent"] + ["verify_failed"] * 5 + ["locked", "verify_failed"])


def test_cooldown_and_hourly_limit(gw, sim):
    """A second send within 30 s is 429 otp_cooldown; the sixth in an hour is 429 rate_limited;
    both with Retry-After. (The cooldown is stepped over by moving created_at back in the
    database rather than sleeping.)"""
    to = number(3)
    assert_ok(post(gw, "/api/sms/otp/send", {"to": to}))
    r = post(gw, "/api/sms/otp/send", {"to": to})
    assert_error(r, 429, "otp_cooldown")
    assert 1 <= int(r.header("Retry-After")) <= 30
    for _ in range(4):
        query_url(gw.db_url, "UPDATE otp_requests SET created_at = created_at - interval '31 seconds' "
                             "WHERE to_number = '%s'" % to)
        assert_ok(post(gw, "/api/sms/otp/send", {"to": to}))
    query_url(gw.db_url, "UPDATE otp_requests SET created_at = created_at - interval '31 seconds' "
                         "WHERE to_number = '%s'" % to)
    r = post(gw, "/api/sms/otp/send", {"to": to})
    assert_error(r, 429, "rate_limited")
    assert int(r.header("Retry-After")) > 30


def test_new_otp_supersedes_and_expiry(gw, sim):
    """A new OTP supersedes the pending one; an OTP past expires_at (moved back in the
    database) answers 410 otp_expired and records the expiry."""
    to = number(4)
    first = assert_ok(post(gw, "/api/sms/otp/send", {"to": to}))["data"]
    code1, _ = code_sent_to(sim, to)
    query_url(gw.db_url, "UPDATE otp_requests SET created_at = created_at - interval '31 seconds' "
                         "WHERE to_number = '%s'" % to)
    second = assert_ok(post(gw, "/api/sms/otp/send", {"to": to}))["data"]
    assert_error(post(gw, "/api/sms/otp/verify", {"reference": first["reference"], "code": code1}), 410,
                 "otp_expired")
    query_url(gw.db_url, "UPDATE otp_requests SET expires_at = now() - interval '1 second' "
                         "WHERE reference = '%s'" % second["reference"])
    code2, _ = code_sent_to(sim, to)
    assert_error(post(gw, "/api/sms/otp/verify", {"reference": second["reference"], "code": code2}), 410,
                 "otp_expired")
    items = assert_ok(call(gw, "GET", "/api/sms/otp/logs?to=" + urllib.parse.quote(to), token=gw.token))["data"]["items"]
    assert [i["status"] for i in items] == ["expired", "superseded"]
    assert [h["event"] for h in items[0]["history"]] == ["sent", "expired"]


def test_concurrent_right_codes_verify_once(gw, sim):
    """Two verifies of the right code at the same moment: exactly one succeeds."""
    to = number(5)
    d = assert_ok(post(gw, "/api/sms/otp/send", {"to": to}))["data"]
    code, _ = code_sent_to(sim, to)
    results = []
    barrier = threading.Barrier(4)

    def verify():
        barrier.wait()
        results.append(post(gw, "/api/sms/otp/verify", {"reference": d["reference"], "code": code}).status)
    threads = [threading.Thread(target=verify) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == [200, 409, 409, 409], results


def test_code_never_stored_or_logged(gw, sim):
    """The code appears in no response, no access-log line and no database row (pg_dump)."""
    to = number(6)
    r = post(gw, "/api/sms/otp/send", {"to": to, "length": 10})
    code, _ = code_sent_to(sim, to)
    post(gw, "/api/sms/otp/verify", {"to": to, "code": code})
    assert code not in r.body.decode()
    assert wait_for(lambda: '"route":"/api/sms/otp/verify"' in gw.stderr(), 5)  # the access log is on
    assert code not in gw.stderr()
    dump = subprocess.run(["pg_dump", gw.db_url], capture_output=True, text=True, check=True).stdout
    assert code not in dump


def test_otp_validation(gw, sim):
    """OTP send and verify validation answers 422 naming the field."""
    assert_error(post(gw, "/api/sms/otp/send", {"to": "+6281", "length": 6}), 422, "validation_failed", "to")
    assert_error(post(gw, "/api/sms/otp/send", {"to": number(7), "length": 3}), 422, "validation_failed", "length")
    assert_error(post(gw, "/api/sms/otp/send", {"to": number(7), "ttlSeconds": 59}), 422, "validation_failed",
                 "ttlSeconds")
    assert_error(post(gw, "/api/sms/otp/send", {"to": number(7), "template": "no code"}), 422, "validation_failed",
                 "template")
    assert_error(post(gw, "/api/sms/otp/verify", {"code": "123456"}), 422, "validation_failed")
    assert_error(post(gw, "/api/sms/otp/verify", {"to": number(7), "code": "12a456"}), 422, "validation_failed",
                 "code")
    assert_error(post(gw, "/api/sms/otp/verify", {"to": "+6289999999999", "code": "123456"}), 404, "not_found")


def test_otp_limits_hold_across_two_instances(make_gateway, sim, fresh_db):
    """Two instances on one database, four simultaneous sends for one number (two per
    instance): exactly one is sent, the others are 429 otp_cooldown; the simulator got one SMS."""
    sim.clear()
    a = make_gateway(env=provider_env(sim))
    b = make_gateway(env=provider_env(sim), url=fresh_db)
    for s in (a, b):
        assert wait_for(lambda s=s: s.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(a, settings=SETTINGS_ALL)
    tok = new_token(a, t["id"])["token"]
    to = number(8)
    results = []
    barrier = threading.Barrier(4)

    def send(srv):
        barrier.wait()
        r = call(srv, "POST", "/api/sms/otp/send", token=tok, body={"to": to})
        results.append((r.status, r.json().get("error", {}).get("code")))
    threads = [threading.Thread(target=send, args=(s,)) for s in (a, b, a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert sorted(results, key=lambda x: x[0]) == [(200, None)] + [(429, "otp_cooldown")] * 3, results
    assert len(sim.requests("sms", to=to)) == 1
    assert query_url(fresh_db, "SELECT count(*) FROM otp_requests WHERE to_number = '%s'" % to) == [("1",)]


def test_otp_send_failure_is_recorded_and_counts(gw, sim):
    """A provider refusal is 502 with status failed, an OTP in state failed with a send_failed
    event, and it still counts for the cooldown."""
    to = magic(0, 0, 1, "5150")
    r = post(gw, "/api/sms/otp/send", {"to": to})
    j = assert_error(r, 502, "delivery_failed")
    assert j["data"]["status"] == "failed" and j["data"]["reference"]
    items = assert_ok(call(gw, "GET", "/api/sms/otp/logs?reference=" + j["data"]["reference"],
                           token=gw.token))["data"]["items"]
    assert items[0]["status"] == "failed"
    assert [h["event"] for h in items[0]["history"]] == ["send_failed"]
    assert_error(post(gw, "/api/sms/otp/send", {"to": to}), 429, "otp_cooldown")
    sms = assert_ok(call(gw, "GET", "/api/sms/logs?reference=" + j["data"]["reference"], token=gw.token))["data"]
    assert sms["items"][0]["status"] == "failed" and sms["items"][0]["error"]["code"] == "provider_rejected"


def test_otp_send_idempotent_repeat_sends_one_sms(gw, sim):
    """The same Idempotency-Key and body replay the first answer: one SMS, one OTP, no cooldown hit."""
    to = number(9)
    h = [("Idempotency-Key", "otp-" + to)]
    r1 = post(gw, "/api/sms/otp/send", {"to": to}, headers=h)
    r2 = post(gw, "/api/sms/otp/send", {"to": to}, headers=h)
    assert assert_ok(r2)["data"] == assert_ok(r1)["data"]
    assert r2.header("Idempotency-Replayed") == "true"
    assert len(sim.requests("sms", to=to)) == 1


def test_sms_and_otp_logs_page_every_record_once_per_tenant(gw, sim):
    """SMS and OTP logs: cursor paging covers every record exactly once, newest first, and a
    second tenant sees none of them."""
    sms_refs = [assert_ok(post(gw, "/api/sms/send", {"to": number(20 + i), "text": "s%d" % i}))["data"]["reference"]
                for i in range(5)]
    otp_refs = [assert_ok(post(gw, "/api/sms/otp/send", {"to": number(30 + i)}))["data"]["reference"]
                for i in range(3)]

    def pages(path):
        seen, cursor = [], None
        while True:
            d = assert_ok(call(gw, "GET", path + "?limit=2" + ("&cursor=" + cursor if cursor else ""),
                               token=gw.token))["data"]
            assert len(d["items"]) <= 2
            seen += [it["reference"] for it in d["items"]]
            cursor = d["nextCursor"]
            if cursor is None:
                return seen
    assert pages("/api/sms/logs") == list(reversed(sms_refs + otp_refs))
    assert pages("/api/sms/otp/logs") == list(reversed(otp_refs))
    other = new_tenant(gw, settings=SETTINGS_ALL, name="other")
    tok = new_token(gw, other["id"])["token"]
    for path in ("/api/sms/logs", "/api/sms/otp/logs"):
        assert assert_ok(call(gw, "GET", path, token=tok))["data"] == {"items": [], "nextCursor": None}
    assert assert_ok(call(gw, "GET", "/api/sms/otp/logs?reference=" + otp_refs[0], token=tok))["data"]["items"] == []
