"""Issue 34: usage (API.md §22) end to end. After a mixed workload (sync fallback and `all`
sends, queued sends, a batch, a delivery-based fallback, SMS sends, an OTP, failures, delivery
statuses arriving later), GET /api/usage equals a count over the tenant's own logs (the unified
and SMS logs read over HTTP), grouped by day, by channel and by both, before and after the late
statuses; and the logs, counted again, equal the usage (both ways). The admin mirrors answer
the same for the tenant, and /admin/usage sums every tenant."""

import collections
import datetime
import re
import threading

import pytest

import test_costs
from conftest import assert_error, assert_ok, wait_for
from gwlib import admin, call, linked_gateway, new_tenant, new_token, query_url
from test_costs import CARD, META_FAILS, OK_TO, cost, put_card
from test_templates_send import PNID, SETTINGS, order_template

gw = test_costs.gw  # the fixture: a gateway with the simulator and Meta's template catalogue

CHANNELS = ["whatsapp_qr", "whatsapp_meta", "sms"]
LATE = 6000  # ms: the statuses that arrive later, after the first comparison
DELIVERED_LATER = "+6281234500201"  # whatsapp_meta accepts, then sent, delivered, read LATE ms after
SMS_AFTER_META = "+6281234500202"   # whatsapp_meta fails, sms accepts, then its statuses LATE ms after
CHAIN = "+6281234500203"            # delivery-based: not on WhatsApp at once, the SMS's statuses late
ADOPTED = "+6281234500204"          # whatsapp_meta's sent and delivered arrive before its answer


def micros(amount):
    units, frac = amount.split(".")
    return int(units) * 1000000 + int(frac.ljust(6, "0"))


def amount(m):
    s = "%d.%06d" % (m // 1000000, m % 1000000)
    return s[:-2] if s.endswith("00") else s[:-1] if s.endswith("0") else s


def pages(gw, path, token):
    items, cursor = [], None
    while True:
        q = path + ("&" if "?" in path else "?") + "limit=500" + ("&cursor=" + cursor if cursor else "")
        d = assert_ok(call(gw, "GET", q, token=token))["data"]
        items += d["items"]
        cursor = d["nextCursor"]
        if not cursor:
            return items


def sms_price(to, text):
    """The SMS rate of CARD for `to`, times the segments of `text` (GSM-7 here: 160, then 153)."""
    best = max((r for r in CARD["rates"] if r["channel"] == "sms" and to.startswith(r["prefix"])),
               key=lambda r: len(r["prefix"]))
    n = len(text)
    segments = 1 if n <= 160 else -(-n // 153)
    return micros(best["price"]) * segments


def expected(gw, token):
    """The usage the logs say, by (day, channel) ('' for a day's messages), and the fallback figures."""
    rows = collections.defaultdict(collections.Counter)
    won = collections.Counter()
    savings = 0
    for m in pages(gw, "/api/omni/logs", token):
        day = m["createdAt"][:10]
        rows[(day, "")]["messages"] += 1
        for a in m["attempts"]:
            if a["status"] == "pending":
                continue
            r = rows[(day, a["channel"])]
            r["messages"] += 1
            r["attempts"] += 1
            r["accepted"] += a["status"] == "sent"
            r["failed"] += a["status"] in ("failed", "unknown")
            r["delivered"] += a["status"] == "sent" and a["deliveryStatus"] in ("delivered", "read")
            r["read"] += a["status"] == "sent" and a["deliveryStatus"] == "read"
            r["cost"] += micros(a["cost"]["amount"]) if a["cost"] else 0
        if m["deliveryMode"] == "fallback" and m["winningChannel"] and len(m["channels"]) > 1:
            won[m["winningChannel"]] += 1
            if m["winningChannel"] != "sms":
                winner = [a for a in m["attempts"] if a["channel"] == m["winningChannel"] and a["status"] == "sent"][-1]
                savings += sms_price(m["to"], m["text"]) - micros(winner["cost"]["amount"])
    for s in pages(gw, "/api/sms/logs", token):
        if s["source"] == "omni":
            day = None
            for m in pages(gw, "/api/omni/logs?reference=" + s["reference"], token):
                day = m["createdAt"][:10]
            rows[(day, "sms")]["segments"] += s["segments"] if s["status"] == "sent" else 0
            continue
        day = s["createdAt"][:10]
        rows[(day, "")]["messages"] += 1
        if s["status"] == "pending":
            continue
        r = rows[(day, "sms")]
        r["messages"] += 1
        r["attempts"] += 1
        r["accepted"] += s["status"] == "sent"
        r["failed"] += s["status"] in ("failed", "unknown")
        r["delivered"] += s["status"] == "sent" and s["deliveryStatus"] in ("delivered", "read")
        r["read"] += s["status"] == "sent" and s["deliveryStatus"] == "read"
        r["segments"] += s["segments"] if s["status"] == "sent" else 0
        r["cost"] += micros(s["cost"]["amount"]) if s["cost"] else 0
    return rows, won, savings


FIELDS = ["messages", "attempts", "accepted", "delivered", "read", "failed", "segments"]


def grouped(rows, by):
    """The rows of groupBy `by` from expected()'s (day, channel) counters, as the API lists them."""
    out = collections.defaultdict(collections.Counter)
    for (day, ch), c in rows.items():
        if by == "day":
            key = (day, None)
            add = dict(c)
            if ch != "":
                add.pop("messages", None)
        else:
            if ch == "":
                continue
            key = (None if by == "channel" else day, ch)
            add = dict(c)
        out[key].update(add)
    result = []
    for (day, ch), c in sorted(out.items(), key=lambda kv: (kv[0][0] or "", CHANNELS.index(kv[0][1])
                                                           if kv[0][1] else -1)):
        row = {}
        if day is not None:
            row["day"] = day
        if ch is not None:
            row["channel"] = ch
        row.update({f: c[f] for f in FIELDS})
        row["cost"] = cost(amount(c["cost"]))
        result.append(row)
    return result


def usage(gw, path, token=None, **params):
    q = "&".join("%s=%s" % kv for kv in params.items())
    r = call(gw, "GET", path + ("?" + q if q else ""), token=token) if token else admin(gw, "GET", path + (
        "?" + q if q else ""))
    return assert_ok(r)["data"]


def compare(gw, token, tenant_id):
    """The differences between the usage and the logs (none: []), and the logs' rows. The logs
    are read before and after the usage: a status landing meanwhile shows as a change, and the
    comparison is made again (the caller waits for a quiet moment)."""
    rows, won, savings = expected(gw, token)
    diffs = []
    for by in ("day", "channel", "day,channel"):
        want = grouped(rows, by)
        got = usage(gw, "/api/usage", token, groupBy=by)
        mirror = usage(gw, "/admin/tenants/%s/usage" % tenant_id, groupBy=by)
        if got["currency"] != "USD" or got["rows"] != want or mirror != got:
            diffs.append((by, got, want, mirror))
    fb = usage(gw, "/api/usage", token)["fallback"]
    want_fb = {"messages": sum(won.values()), "wonBy": {c: won[c] for c in CHANNELS},
               "savings": cost(amount(savings))}
    if fb != want_fb:
        diffs.append(("fallback", fb, want_fb))
    if expected(gw, token)[0] != rows:
        diffs.append("the logs changed meanwhile")
    return diffs, rows


def check(gw, token, tenant_id):
    box = []

    def equal():
        box[:] = compare(gw, token, tenant_id)
        return box[0] == []
    assert wait_for(equal, 5), box[0]
    return box[1]


def written(gw, token):
    """Every message of the workload has its attempts written: no queued message waits, no
    attempt is pending, the delivery-based fallback has made its SMS attempt."""
    items = pages(gw, "/api/omni/logs", token)
    if any(m["status"] in ("queued", "pending") or any(a["status"] == "pending" for a in m["attempts"])
           for m in items):
        return False
    if not any(m["to"] == CHAIN and len(m["attempts"]) == 2 for m in items):
        return False
    return all(s["status"] != "pending" for s in pages(gw, "/api/sms/logs", token))


def settled(gw, token):
    """And every late status has arrived: the accepted attempts to the late numbers are read."""
    return written(gw, token) and all(
        a["deliveryStatus"] == "read" for m in pages(gw, "/api/omni/logs", token)
        if m["to"] in (DELIVERED_LATER, SMS_AFTER_META, CHAIN) for a in m["attempts"]
        if a["status"] == "sent" and (m["to"] != CHAIN or a["channel"] == "sms"))


def test_usage_equals_the_logs_both_ways(gw):
    put_card(gw, CARD)
    t = new_tenant(gw, settings=SETTINGS)
    token = new_token(gw, t["id"])["token"]

    def send(body):
        return call(gw, "POST", "/api/omni/send", token=token, body=body)

    gw.sim.rule("whatsapp_meta", "ok", to=DELIVERED_LATER, callback="delivered_read", callback_delay_ms=LATE)
    gw.sim.rule("whatsapp_meta", "error", to=SMS_AFTER_META)
    gw.sim.rule("sms", "ok", to=SMS_AFTER_META, callback="delivered_read", callback_delay_ms=LATE)
    gw.sim.rule("whatsapp_meta", "ok", to=CHAIN, callback="not_on_whatsapp")
    gw.sim.rule("sms", "ok", to=CHAIN, callback="delivered_read", callback_delay_ms=LATE)
    gw.sim.rule("whatsapp_meta", "ok", to=ADOPTED, callback="before_answer")
    # The completion adopts the statuses that beat it (API.md §10): counted by PostgreSQL while
    # the gateway counts the attempt (sql/028).
    adopted = assert_ok(send({"to": ADOPTED, "text": "adopted", "channels": ["whatsapp_meta", "sms"]}))
    item = assert_ok(call(gw, "GET", "/api/omni/messages/" + adopted["data"]["reference"], token=token))["data"]
    assert [a.get("deliveryStatus") for a in item["attempts"]] == ["delivered"], item
    assert_ok(send({"to": OK_TO, "text": "hello", "channels": ["whatsapp_meta", "sms"]}))
    assert_ok(send({"to": OK_TO, "text": "sms only", "channels": ["sms"]}))  # msg_insert, not the nowa form
    assert_ok(send({"to": OK_TO, "text": "z" * 170, "channels": ["whatsapp_meta", "sms"]}))
    assert_ok(send({"to": DELIVERED_LATER, "text": "later", "channels": ["whatsapp_meta", "sms"]}))
    assert_ok(send({"to": SMS_AFTER_META, "text": "to sms", "channels": ["whatsapp_meta", "sms"]}))
    assert_ok(send({"to": META_FAILS, "text": "all", "channels": ["whatsapp_meta", "sms"], "deliveryMode": "all"}))
    assert_ok(send({"to": OK_TO, "channels": ["whatsapp_meta"], "template": order_template()}))
    r = send({"to": "+19990220000", "text": "none", "channels": ["whatsapp_meta", "sms"]})
    assert r.status == 502
    for body in ({"to": OK_TO, "text": "queued", "channels": ["sms"]},
                 {"to": META_FAILS, "text": "queued fallback", "channels": ["whatsapp_meta", "sms"]}):
        assert call(gw, "POST", "/api/omni/send", token=token, body=dict(body, queue=True)).status == 202
    assert call(gw, "POST", "/api/omni/batches", token=token, body={"messages": [
        {"to": OK_TO, "text": "batch", "channels": ["sms"]},
        {"to": OK_TO, "text": "batch 2", "channels": ["whatsapp_meta", "sms"]}]}).status == 202
    assert_ok(send({"to": CHAIN, "text": "chain", "channels": ["whatsapp_meta", "sms"], "fallbackOn": "delivered"}))
    assert_ok(call(gw, "POST", "/api/sms/send", token=token, body={"to": OK_TO, "text": "s" * 200}))
    assert call(gw, "POST", "/api/sms/send", token=token, body={"to": "+19990010000", "text": "x"}).status == 502
    assert_ok(call(gw, "POST", "/api/sms/otp/send", token=token, body={"to": "+6221234567"}))
    assert wait_for(lambda: written(gw, token), 10)
    early = check(gw, token, t["id"])  # before the late statuses
    assert not settled(gw, token)
    assert wait_for(lambda: settled(gw, token), 20)
    rows = check(gw, token, t["id"])
    read = [sum(c["read"] for (d, ch), c in r.items() if ch != "") for r in (early, rows)]
    assert read[1] >= read[0] + 3, read  # the late statuses counted, on their messages' day

    # The other way: the usage's counts, read back from the logs' own figures.
    u = usage(gw, "/api/usage", token, groupBy="channel")
    omni = pages(gw, "/api/omni/logs", token)
    sms = pages(gw, "/api/sms/logs", token)
    by_ch = {r["channel"]: r for r in u["rows"]}
    assert sum(r["attempts"] for r in u["rows"]) == sum(
        1 for m in omni for a in m["attempts"] if a["status"] != "pending") + sum(
        1 for s in sms if s["source"] != "omni" and s["status"] != "pending")
    assert by_ch["sms"]["segments"] == sum(s["segments"] for s in sms if s["status"] == "sent")
    day = usage(gw, "/api/usage", token)
    assert sum(r["messages"] for r in day["rows"]) == len(omni) + sum(1 for s in sms if s["source"] != "omni")

    # Every tenant: the admin's sum includes this tenant's and the fixture tenant's.
    other = usage(gw, "/api/usage", gw.token, groupBy="channel")
    every = usage(gw, "/admin/usage", groupBy="channel")
    for ch in CHANNELS:
        mine = {r["channel"]: r for r in u["rows"]}.get(ch, {}).get("attempts", 0)
        theirs = {r["channel"]: r for r in other["rows"]}.get(ch, {}).get("attempts", 0)
        assert {r["channel"]: r for r in every["rows"]}.get(ch, {}).get("attempts", 0) == mine + theirs


def test_usage_parameters(gw):
    """The range is whole UTC days (since's through until's); defaults the last 30 days; 422 for
    a bad time, a reversed or too long range, an unknown groupBy or parameter; the admin mirror
    is 404 for an unknown tenant; the token needs the logs scope."""
    assert_ok(call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": OK_TO, "text": "one"}))
    today = datetime.datetime.now(datetime.timezone.utc).date()
    d = usage(gw, "/api/usage", gw.token)
    assert [r["day"] for r in d["rows"]] == [today.isoformat()] and d["rows"][0]["messages"] == 1
    noon = today.isoformat() + "T12:00:00Z"
    assert usage(gw, "/api/usage", gw.token, since=noon, until=noon)["rows"] == d["rows"]
    past = (today - datetime.timedelta(days=3)).isoformat()
    assert usage(gw, "/api/usage", gw.token, since=past + "T00:00:00Z", until=past + "T23:59:59Z")["rows"] == []
    for params, field in (({"since": "yesterday"}, "since"), ({"until": "2026-13-01T00:00:00Z"}, "until"),
                          ({"since": noon, "until": past + "T00:00:00Z"}, "since"),
                          ({"since": "2024-01-01T00:00:00Z", "until": noon}, "since"),
                          ({"groupBy": "week"}, "groupBy"), ({"tenant": "x"}, "tenant")):
        q = "&".join("%s=%s" % kv for kv in params.items())
        assert_error(call(gw, "GET", "/api/usage?" + q, token=gw.token), 422, "validation_failed", field)
    assert_error(admin(gw, "GET", "/admin/tenants/00000000-0000-4000-8000-000000000000/usage"), 404, "not_found")
    sender = new_token(gw, gw.tenant["id"], scopes=["send"])["token"]
    assert call(gw, "GET", "/api/usage", token=sender).status == 403
    assert call(gw, "GET", "/admin/usage").status == 401
    # No rate card was put: no currency, so no amounts.
    assert d["currency"] is None and d["rows"][0]["cost"] is None
    assert d["fallback"] == {"messages": 0, "wonBy": {c: 0 for c in CHANNELS}, "savings": None}


def test_totals_are_sharded_and_compacted(gw):
    """Writes of several backends land in their own rows (shard = pid); the sweep's compaction
    merges past days' shards into one row per (tenant, day, channel) without changing a sum."""
    assert_ok(call(gw, "POST", "/api/sms/send", token=gw.token, body={"to": OK_TO, "text": "one"}))
    db = lambda sql: query_url(gw.db_url, sql)  # noqa: E731
    db("UPDATE usage_totals SET day = day - 3")
    db("INSERT INTO usage_totals (tenant_id, day, channel, shard, messages) "
       "SELECT tenant_id, day, channel, shard + 1, 2 FROM usage_totals")
    before = db("SELECT channel, sum(messages), count(*) FROM usage_totals GROUP BY 1 ORDER BY 1")
    assert all(int(c) >= 2 for _, _, c in before)
    assert int(db("SELECT og_usage_compact(100000)")[0][0]) >= 2
    after = db("SELECT channel, sum(messages), count(*) FROM usage_totals GROUP BY 1 ORDER BY 1")
    assert [(c, s) for c, s, _ in after] == [(c, s) for c, s, _ in before]
    assert all(c == "1" for _, _, c in after) and db("SELECT DISTINCT shard FROM usage_totals") == [("0",)]


def merged_ops(gw):
    """Operations the gateway's write batches ran merged in a set form so far (its metrics)."""
    m = re.search(r"^omnigate_db_merged_operations_total (\S+)$", gw.request("GET", "/metrics").body.decode(), re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def merged(make_server, fresh_db, tmp_path):
    """One worker with one write connection: concurrent sends wait for the batch in flight, so
    their inserts and completions ride together in the set forms (sql/025 counts there)."""
    srv = linked_gateway(make_server, fresh_db, tmp_path, workers=1, env={"OMNIGATE_DB_POOL": "1"})
    yield srv
    srv.sim.stop()


def test_merged_sends_count_in_their_set_forms(merged):
    """120 sync sends at once over 16 connections (a third fail on whatsapp_meta and fall back
    to SMS, some in `all` mode): the insert's set form counts its messages, the gateway's tally
    (usage_add, sql/028) the completions merged in a set form, sql/024's triggers those alone,
    and none of them another's, so the usage equals the logs, nothing counted twice or missed."""
    gw = merged
    t = new_tenant(gw, settings=SETTINGS)
    token = gw.token = new_token(gw, t["id"])["token"]
    put_card(gw, CARD)
    # Every seventh SMS only: no WhatsApp channel, so msg_insert's set form (msg_insert_many), not
    # the not-on-WhatsApp one, inserts it.
    bodies = [{"to": META_FAILS if i % 3 == 0 else OK_TO, "text": "merged %d" % i,
               "channels": ["sms"] if i % 7 == 0 else ["whatsapp_meta", "sms"],
               "deliveryMode": "all" if i % 10 == 0 else "fallback"}
              for i in range(120)]
    out, lock = [], threading.Lock()

    def worker():
        while True:
            with lock:
                if not bodies:
                    return
                body = bodies.pop()
            r = call(gw, "POST", "/api/omni/send", token=token, body=body, timeout=20)
            with lock:
                out.append(r)

    ts = [threading.Thread(target=worker) for _ in range(16)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert len(out) == 120 and all(r.status == 200 for r in out), [r.status for r in out if r.status != 200]
    assert merged_ops(gw) >= 10
    rows = check(gw, token, t["id"])
    probes = sum(1 for s in pages(gw, "/api/sms/logs", token) if s["source"] != "omni")  # put_card's
    assert sum(c["messages"] for (d, ch), c in rows.items() if ch == "") == 120 + probes
    fb = usage(gw, "/api/usage", token)["fallback"]
    assert fb["wonBy"]["whatsapp_meta"] > 0 and fb["wonBy"]["sms"] > 0


def test_merged_queued_releases_count_in_the_tally(merged):
    """90 queued sends released by one worker with one write connection, so that their outcomes
    ride together in queue_done_many's set form, counted by the gateway's tally (sql/030): a
    third fail on whatsapp_meta and fall back to SMS, some are `all` sends, some SMS only, and
    the simulator throttles the Meta sender, so that attempts are retried on their channel (the
    row written again, counted by the trigger on updated attempts, its win by the tally). The
    usage equals the logs: nothing counted twice or missed."""
    gw = merged
    t = new_tenant(gw, settings=SETTINGS)
    token = gw.token = new_token(gw, t["id"])["token"]
    put_card(gw, CARD)
    gw.sim.limit("whatsapp_meta", 20, sender=PNID, burst=20)
    before = merged_ops(gw)
    for i in range(90):
        body = {"to": META_FAILS if i % 3 == 0 else OK_TO, "text": "queued %d" % i, "queue": True,
                "channels": ["sms"] if i % 7 == 0 else ["whatsapp_meta", "sms"],
                "deliveryMode": "all" if i % 10 == 0 else "fallback"}
        assert call(gw, "POST", "/api/omni/send", token=token, body=body).status == 202

    def released():
        items = pages(gw, "/api/omni/logs", token)
        return len(items) == 90 and not any(
            m["status"] in ("queued", "scheduled", "pending") or any(a["status"] == "pending" for a in m["attempts"])
            for m in items)
    assert wait_for(released, 60)
    items = pages(gw, "/api/omni/logs", token)
    assert sum(a["throttles"] for m in items for a in m["attempts"]) >= 1  # retried rows
    assert merged_ops(gw) - before >= 10
    rows = check(gw, token, t["id"])
    assert sum(c["messages"] for (d, ch), c in rows.items() if ch == "") == 90 + sum(
        1 for s in pages(gw, "/api/sms/logs", token) if s["source"] != "omni")
    fb = usage(gw, "/api/usage", token)["fallback"]
    assert fb["wonBy"]["whatsapp_meta"] > 0 and fb["wonBy"]["sms"] > 0
