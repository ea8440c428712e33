"""Issue 6: retention. `omnigate prune --before DATE` drops old log data in short batches
while sends keep running (sql/003_retention.sql, docs/operations.md). Records go by their
reference's time, the time the gateway made them (sql/009_log_indexes.sql)."""

import json
import threading

from conftest import assert_ok, wait_for
from gwlib import SETTINGS_ALL, call, cli, magic, new_tenant, new_token, provider_env, query_url, sim  # noqa: F401
from loglib import age_sql, ref_at, ref_ms


def test_prune_drops_old_data_in_batches_while_sends_run(make_gateway, sim, fresh_db):
    """Old messages (with attempts), SMS records and OTPs (with events) of two tenants go in
    batches of 3; recent ones stay and the logs still serve them; expired idempotency keys go;
    sends running during the prune all succeed."""
    sim.clear()
    srv = make_gateway(workers=2, env=provider_env(sim))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    toks = []
    for name in ("a", "b"):
        t = new_tenant(srv, settings=SETTINGS_ALL, name=name)
        toks.append(new_token(srv, t["id"])["token"])
    old = []
    for i, tok in enumerate(toks):
        for k in range(5):
            d = assert_ok(call(srv, "POST", "/api/omni/send", token=tok, body={"to": magic(1, 1, 0, "%d%03d" % (i, k)),
                                                                              "text": "old"},
                               headers=[("Idempotency-Key", "old-%d-%d" % (i, k))]))["data"]
            old.append(d["reference"])
        assert_ok(call(srv, "POST", "/api/sms/otp/send", token=tok, body={"to": "+62811000%04d" % i}))
    # Age everything written so far by 40 days: its reference (the time retention goes by) and
    # its created_at.
    query_url(fresh_db, age_sql(40))
    query_url(fresh_db, "UPDATE idempotency_keys SET created_at = created_at - interval '40 days'")
    old = [ref_at(ref_ms(r) - 40 * 86400000, r[13:]) for r in old]
    recent = assert_ok(call(srv, "POST", "/api/omni/send", token=toks[0], body={"to": magic(1, 1, 0, "9999"),
                                                                                "text": "new"}))["data"]["reference"]

    stop = threading.Event()
    during = []

    def load():
        n = 0
        while not stop.is_set():
            n += 1
            r = call(srv, "POST", "/api/omni/send", token=toks[1], body={"to": magic(0, 0, 0, "%04d" % n),
                                                                         "text": "during"})
            during.append(r.status)
    th = threading.Thread(target=load)
    th.start()
    p = cli(["prune", "--before", "2099-01-01"], fresh_db)
    assert p.returncode == 2 and "24 hours" in p.stderr
    p = cli(["prune", "--before", "yesterday-ish"], fresh_db)
    assert p.returncode == 2
    cutoff = query_url(fresh_db, "SELECT to_char(now() - interval '30 days', 'YYYY-MM-DD')")[0][0]
    p = cli(["prune", "--before", cutoff, "--batch", "3"], fresh_db)
    stop.set()
    th.join(10)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    # Rows counted per parent table: 10 messages, 12 SMS records (the sms attempt of each of the
    # 10 sends and the 2 OTP messages) and 2 OTPs; attempts and OTP events go with their parents.
    assert out["ok"] is True and out["rowsDeleted"] == 10 + 12 + 2 and out["batches"] > 2
    assert out["idempotencyKeysDeleted"] == 10
    assert during and set(during) == {200}, during
    refs = ",".join("'%s'" % r for r in old)
    for table, col in (("messages", "reference"), ("attempts", "reference"), ("sms_records", "reference")):
        assert query_url(fresh_db, "SELECT count(*) FROM %s WHERE %s IN (%s)" % (table, col, refs)) == [("0",)]
    assert query_url(fresh_db, "SELECT count(*) FROM otp_requests") == [("0",)]
    assert query_url(fresh_db, "SELECT count(*) FROM otp_events") == [("0",)]
    items = assert_ok(call(srv, "GET", "/api/omni/logs?limit=500", token=toks[0]))["data"]["items"]
    assert [i["reference"] for i in items] == [recent]
    assert len(items[0]["attempts"]) == 3


def test_prune_keeps_queued_and_scheduled_messages(make_gateway, sim, fresh_db):
    """A message still waiting in the queue (API.md §19: scheduled up to 35 days ahead, valid up
    to 48 h after) is not log data yet: prune skips it whatever its reference's age, so its
    entry is never left without its message; it goes once it has ended. A sync send of the
    same age goes."""
    sim.clear()
    srv = make_gateway(workers=1, env=provider_env(sim))
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    t = new_tenant(srv, settings=SETTINGS_ALL, name="q")
    tok = new_token(srv, t["id"])["token"]
    sync = assert_ok(call(srv, "POST", "/api/omni/send", token=tok, body={"to": magic(0, 0, 0, "0001"),
                                                                         "text": "old"}))["data"]["reference"]
    r = call(srv, "POST", "/api/omni/send", token=tok, body={"to": magic(0, 0, 0, "0002"), "text": "later",
                                                             "queue": True, "sendAt": "2099-01-01T00:00:00Z"})
    assert r.status == 422  # beyond 35 days
    r = call(srv, "POST", "/api/omni/send", token=tok,
             body={"to": magic(0, 0, 0, "0002"), "text": "later", "queue": True,
                   "sendAt": query_url(fresh_db, "SELECT to_char((now() + interval '1 day') AT TIME ZONE 'UTC', "
                                                 "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")[0][0]})
    assert r.status == 202, r.body
    query_url(fresh_db, age_sql(40))
    ((queued,),) = query_url(fresh_db, "SELECT reference FROM messages WHERE status = 'scheduled'")
    cutoff = query_url(fresh_db, "SELECT to_char(now() - interval '30 days', 'YYYY-MM-DD')")[0][0]
    p = cli(["prune", "--before", cutoff], fresh_db)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rowsDeleted"] == 1  # the sync send (read on its first channel)
    assert query_url(fresh_db, "SELECT count(*) FROM messages WHERE reference = '%s'" % ref_at(
        ref_ms(sync) - 40 * 86400000, sync[13:])) == [("0",)]
    assert query_url(fresh_db, "SELECT status FROM messages") == [("scheduled",)]
    assert query_url(fresh_db, "SELECT count(*) FROM queue_entries WHERE reference = '%s'" % queued) == [("1",)]
    m = assert_ok(call(srv, "GET", "/api/omni/messages/" + queued, token=tok))["data"]
    assert m["status"] == "scheduled"
    assert assert_ok(call(srv, "POST", "/api/omni/messages/%s/cancel" % queued, token=tok))["data"]["status"] \
        == "canceled"
    p = cli(["prune", "--before", cutoff], fresh_db)
    assert p.returncode == 0 and json.loads(p.stdout)["rowsDeleted"] == 1, p.stdout
    assert query_url(fresh_db, "SELECT count(*) FROM messages") == [("0",)]
