"""Issue 29, API.md §6 and §15: an Idempotency-Key is never sent twice and keeps one answer,
whatever a slow database does to the request that holds it. Each test holds a table lock from
psql so that one write of the first request waits, lets the claim's lease run out under it (as
a database deadline longer than the lease would), sends the repeat, then lets the first request
go on: the simulator counts the provider calls, and the key's stored answer is read back.
Both failed before claims checked their owner (a double send; one key, two answers)."""

import json
import subprocess
import threading

import pytest

from conftest import assert_error, assert_ok, wait_for
from gwlib import admin, call, magic, query_url, sim, tenant_gateway  # noqa: F401

# A database deadline far longer than anything here, so no write gives up while it waits.
ENV = {"OMNIGATE_DB_TIMEOUT_MS": "30000", "OMNIGATE_DB_POOL": "8", "OMNIGATE_WEBHOOK_ALLOW_HTTP": "true",
       "OMNIGATE_WEBHOOK_ALLOW_PRIVATE": "true"}


@pytest.fixture
def gw(make_gateway, sim):
    return tenant_gateway(make_gateway, sim, workers=1, env=ENV)


class TableLock:
    """A psql session holding `LOCK TABLE <table> IN SHARE MODE` (reads go on, writes wait) until
    release()."""

    def __init__(self, url, table):
        self.p = subprocess.Popen(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.p.stdin.write("BEGIN;\nLOCK TABLE %s IN SHARE MODE;\n\\echo locked\n" % table)
        self.p.stdin.flush()
        assert self.p.stdout.readline().strip() == "locked", self.p.stderr.read()

    def release(self):
        if self.p.poll() is None:
            self.p.communicate("COMMIT;\n", timeout=30)


# The pending insert (msg_insert, sql/queries/messages.sql: its row and its usage count in one
# statement) as waiting_on matches it.
PENDING_INSERT = "WITH ins AS (%INSERT INTO messages"


def waiting_on(gw, like):
    """Backends of the gateway's database waiting for a lock in a statement that starts `like`."""
    return int(query_url(gw.db_url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND wait_event_type = 'Lock' AND query LIKE '%s%%'" % like)[0][0])


def keyed_send(gw, body, key, out):
    out.append(call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=[("Idempotency-Key", key)],
                    timeout=60))


def expire_lease(gw, key):
    """The claim's lease runs out now, as it would under a database slower than the lease."""
    query_url(gw.db_url, "UPDATE idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = '%s'"
              % key)


def test_repeat_taking_over_a_claim_whose_pending_row_waits_sends_once(gw, sim):
    """The first request's pending insert waits on a lock past its claim's lease; the repeat
    takes the claim over (nothing is recorded under it) and waits behind the same lock. Once the
    lock goes, the first request's insert finds its claim gone: its transaction fails, it
    answers 409 idempotency_in_progress and calls no provider; the repeat sends. One provider
    call, one message, the key's answer the repeat's."""
    to = magic(0, 0, 0, "9101")
    body = {"to": to, "text": "race a"}
    lock = TableLock(gw.db_url, "messages")
    first, repeat = [], []
    try:
        t1 = threading.Thread(target=keyed_send, args=(gw, body, "race-a", first))
        t1.start()
        assert wait_for(lambda: waiting_on(gw, PENDING_INSERT) == 1, 10)
        expire_lease(gw, "race-a")
        t2 = threading.Thread(target=keyed_send, args=(gw, body, "race-a", repeat))
        t2.start()
        assert wait_for(lambda: waiting_on(gw, PENDING_INSERT) == 2, 10)
    finally:
        lock.release()
    t1.join(60)
    t2.join(60)
    assert len(sim.requests(to=to)) == 1, "the provider was called %d times" % len(sim.requests(to=to))
    assert_error(first[0], 409, "idempotency_in_progress")
    d = assert_ok(repeat[0])["data"]
    assert query_url(gw.db_url, "SELECT reference, status FROM messages WHERE to_number = '%s'" % to) == \
        [(d["reference"], "sent")]
    again = call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=[("Idempotency-Key", "race-a")])
    assert again.header("Idempotency-Replayed") == "true" and assert_ok(again)["data"]["reference"] == d["reference"]


def test_late_completion_keeps_the_repeats_answer_and_records_the_truth(gw, sim):
    """The first request sent, and its completion waits on a lock past its claim's lease; the
    repeat resolves the claim as outcome_unknown (502, the message 'unknown') and stores that
    answer. Once the lock goes, the completion records the attempt and the message becomes
    'sent' (the truth over the guess), message.sent fires once, and the key keeps the one answer
    it gave: 502 outcome_unknown, replayed."""
    assert_ok(admin(gw, "PUT", "/admin/tenants/%s/webhook" % gw.tenant["id"],
                    {"url": "http://127.0.0.1:9/hook", "events": ["message.sent"]}))
    to = magic(0, 0, 0, "9102")
    body = {"to": to, "text": "race b"}
    lock = TableLock(gw.db_url, "attempts")
    first, repeat = [], []
    try:
        t1 = threading.Thread(target=keyed_send, args=(gw, body, "race-b", first))
        t1.start()
        assert wait_for(lambda: len(sim.requests(to=to)) == 1 and waiting_on(gw, "WITH a AS") == 1, 10)
        expire_lease(gw, "race-b")
        keyed_send(gw, body, "race-b", repeat)
    finally:
        lock.release()
    t1.join(60)
    j = assert_error(repeat[0], 502, "outcome_unknown")
    ref = j["data"]["reference"]
    assert assert_ok(first[0])["data"]["reference"] == ref  # the first request answers what it did
    for _ in range(2):
        again = call(gw, "POST", "/api/omni/send", token=gw.token, body=body, headers=[("Idempotency-Key", "race-b")])
        assert_error(again, 502, "outcome_unknown")
        assert again.header("Idempotency-Replayed") == "true"
    assert json.loads(query_url(gw.db_url, "SELECT response_body FROM idempotency_keys WHERE key = 'race-b'")[0][0]) \
        == json.loads(repeat[0].body)
    assert query_url(gw.db_url, "SELECT status FROM messages WHERE reference = '%s'" % ref) == [("sent",)]
    assert query_url(gw.db_url, "SELECT channel, status FROM attempts WHERE reference = '%s'" % ref) == \
        [("whatsapp_qr", "sent")]
    assert query_url(gw.db_url, "SELECT count(*) FROM webhook_deliveries WHERE subject = '%s' AND type = "
                                "'message.sent'" % ref) == [("1",)]
    assert len(sim.requests(to=to)) == 1
