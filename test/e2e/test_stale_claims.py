"""Issue 15, API.md §15: an Idempotency-Key whose instance died mid-send is resolved after its
lease, never sent again; pending messages are swept to 'unknown' while any instance lives."""

import time

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import call, magic, query_url, sim, tenant_gateway  # noqa: F401

TO = "+6281234577777"


# The send budget of these gateways (messaging/budget.h): 3 writes x 2 x 0.5 s (the database
# deadline) + 3 channels x 1 s (the attempt timeout) + 5 s = 11 s, the claims' lease.
DB_TIMEOUT_MS = 500
BUDGET_S = 3 * 2 * DB_TIMEOUT_MS / 1000 + 3 * 1 + 5


@pytest.fixture
def gw(make_gateway, sim):
    return tenant_gateway(make_gateway, sim, workers=1, env={"OMNIGATE_DB_TIMEOUT_MS": str(DB_TIMEOUT_MS)})


def db(gw, sql):
    return query_url(gw.db_url, sql)


def send(gw, body, key):
    return call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=[("Idempotency-Key", key)])


def test_dead_instance_claim_answers_outcome_unknown(gw, sim):
    """The instance serving a keyed send is killed while the provider holds the request: a
    repeat answers 409 while the lease holds (the send budget, BUDGET_S), then 502
    outcome_unknown with the reference, status unknown and Idempotency-Replayed, every time
    after that; the message is unknown; the provider saw the message once."""
    sim.rule("whatsapp_qr", "hang", to=TO)
    body = {"to": TO, "text": "hi"}
    conn = gw.conn()
    import json
    payload = json.dumps(body).encode()
    conn.send(b"POST /api/omni/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + gw.token.encode() + b"\r\nIdempotency-Key: dead-1\r\n"
              b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    assert wait_for(lambda: len(sim.requests("whatsapp_qr", to=TO)) == 1, 5)
    gw.kill()
    conn.close()
    gw.start()
    t_restart = time.monotonic()
    r = send(gw, body, "dead-1")
    assert_error(r, 409, "idempotency_in_progress")
    ref = db(gw, "SELECT reference FROM idempotency_keys WHERE key = 'dead-1'")[0][0]
    assert db(gw, "SELECT status FROM messages WHERE reference = '%s'" % ref) == [("pending",)]

    def resolved():
        r = send(gw, body, "dead-1")
        return r if r.status == 502 else None
    assert wait_for(lambda: resolved() is not None, BUDGET_S + 5)
    assert time.monotonic() - t_restart < BUDGET_S + 1
    for _ in range(2):
        r = send(gw, body, "dead-1")
        j = assert_error(r, 502, "outcome_unknown")
        assert r.header("Idempotency-Replayed") == "true"
        assert j["data"]["reference"] == ref and j["data"]["status"] == "unknown"
        assert j["data"]["attempts"] == []
    assert db(gw, "SELECT status FROM messages WHERE reference = '%s'" % ref) == [("unknown",)]
    assert len(sim.requests("whatsapp_qr", to=TO)) == 1
    assert sim.requests("whatsapp_meta", to=TO) == [] and sim.requests("sms", to=TO) == []


def test_claim_with_nothing_recorded_is_taken_over(gw, sim):
    """A claim past its lease with no record under it (the instance died before its pending
    row committed, so nothing was sent) is taken over by the repeat, which sends."""
    tid = gw.tenant["id"]
    db(gw, "INSERT INTO idempotency_keys (tenant_id, key, route, request_hash, lease_until, created_at) "
           "SELECT '%s', 'orphan-1', 'omni', encode(sha256('{\"to\": \"%s\", \"text\": \"hi\"}'::bytea), 'hex'), "
           "now() - interval '1 second', now() - interval '1 minute'" % (tid, TO))
    r = send(gw, {"to": TO, "text": "hi"}, "orphan-1")
    d = assert_ok(r)["data"]
    assert r.header("Idempotency-Replayed") is None
    assert d["winningChannel"] == "whatsapp_qr"
    assert len(sim.requests("whatsapp_qr", to=TO)) == 1
    again = send(gw, {"to": TO, "text": "hi"}, "orphan-1")
    assert again.header("Idempotency-Replayed") == "true"
    assert assert_ok(again)["data"]["reference"] == d["reference"]


def test_sweep_marks_old_pending_messages_unknown(gw):
    """A message left pending (its instance never came back) becomes unknown within the
    sweep's 15 s, with no instance restarting; a recent pending one is left alone."""
    tid = gw.tenant["id"]
    db(gw, "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, created_at) "
           "VALUES ('%s', 'kf_OLDPENDING', '%s', 'x', 'fallback', '{sms}', now() - interval '1 hour'), "
           "('%s', 'kf_NEWPENDING', '%s', 'x', 'fallback', '{sms}', now() + interval '1 hour')" % (tid, TO, tid, TO))
    assert wait_for(lambda: db(gw, "SELECT status FROM messages WHERE reference = 'kf_OLDPENDING'")
                    == [("unknown",)], 20)
    assert db(gw, "SELECT status FROM messages WHERE reference = 'kf_NEWPENDING'") == [("pending",)]
    assert db(gw, "SELECT count(*) FROM steps WHERE kind = 'sweep'") == [("1",)]
