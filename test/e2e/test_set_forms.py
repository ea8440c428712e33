"""Issue 20: the set forms of the send's writes (sql/013_set_forms.sql, og_db_stmt_t.many). A
write batch runs the pending inserts of all its sends as one statement and their completions
as another; a batch that fails is retried send by send with the single forms. The set forms
must do exactly what the single forms do (checked here statement against statement on the same
inputs), and the gateway must use them under concurrency without losing a send or letting one
bad row fail its neighbours."""

import json
import os
import re
import subprocess
import urllib.parse
import threading

import pytest

from conftest import ROOT, assert_ok
from gwlib import call, magic, migrate, query_url, sim, tenant_gateway  # noqa: F401

TENANT = "00000000-0000-4000-8000-0000000000aa"


def statement(name):
    """The SQL of statement `name` from sql/queries/ (messages.sql, queue.sql, ...), as the gateway
    sends it."""
    queries = os.path.join(ROOT, "sql", "queries")
    m = None
    for path in sorted(os.listdir(queries)):
        with open(os.path.join(queries, path), encoding="utf-8") as f:
            m = m or re.search(r"^-- name: %s\n(.*?)(?=^-- name: |\Z)" % name, f.read(), re.S | re.M)
    assert m, name
    return "\n".join(l for l in m.group(1).splitlines() if not l.lstrip().startswith("--")).strip().rstrip(";")


def lit(v):
    return "NULL" if v is None else "'" + str(v).replace("'", "''") + "'"


def arr(values):
    """A text array literal, as src/data/db/setform.c builds one (every element quoted, \\ before " and \\)."""
    out = []
    for v in values:
        out.append("NULL" if v is None else '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"')
    return lit("{" + ",".join(out) + "}")


def run_sql(url, script):
    p = subprocess.run(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-F", "|"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [l.split("|") for l in p.stdout.splitlines() if l]


def insert_params(ref, to, skipped='[]', fallback_on=None, after=None, text='Hi "there" \\ {x}, y',
                  template=None):
    return [TENANT, ref, to, text, "fallback", "{whatsapp_qr,sms}", skipped, fallback_on, after,
            "6281234567890", "ACME", template]


def execute(name, params):
    """PREPARE and EXECUTE of statement `name` (prepared the way the gateway prepares it)."""
    return "PREPARE %s AS %s;\nEXECUTE %s(%s);\nDEALLOCATE %s;\n" % (
        name, statement(name), name, ", ".join(lit(p) for p in params), name)


def execute_many(name, rows):
    cols = list(zip(*rows))
    return "PREPARE %s AS %s;\nEXECUTE %s(%s);\nDEALLOCATE %s;\n" % (
        name, statement(name), name, ", ".join(arr(c) for c in cols), name)


@pytest.fixture
def db(fresh_db):
    migrate(fresh_db)
    query_url(fresh_db, "INSERT INTO tenants (id, name) VALUES ('%s', 'sets')" % TENANT)
    return fresh_db


def message_rows(url, refs):
    return query_url(url, "SELECT to_number, body, delivery_mode, channels::text, skipped::text, status, "
                          "fallback_on, fallback_after_s, whatsapp_from, sms_sender, winning_channel, "
                          "completed_at IS NOT NULL FROM messages WHERE reference IN (%s) ORDER BY to_number"
                     % ", ".join(lit(r) for r in refs))


def test_insert_set_forms_write_what_the_single_forms_write(db):
    """msg_insert_many and msg_insert_unless_nowa_many against msg_insert and
    msg_insert_unless_nowa on the same values: the same rows; a remembered number is skipped
    and reported with its time left, in the set form as in the single form."""
    query_url(db, "INSERT INTO not_on_whatsapp (number, until) VALUES ('+1555000003', now() + interval '1 hour')")
    single = [insert_params("kf_s%d" % i, "+1555000000%d" % i, fallback_on=("read" if i == 1 else None),
                            after=("30" if i == 1 else None)) for i in range(1, 5)]
    many = [insert_params("kf_m%d" % i, "+1555000001%d" % i, fallback_on=("read" if i == 1 else None),
                          after=("30" if i == 1 else None)) for i in range(1, 5)]
    script = "".join(execute("msg_insert", p) for p in single[:2])
    script += execute_many("msg_insert_many", many[:2])
    out = run_sql(db, script)
    # Each returns its reference and the message's day (usage's, sql/028), the set form by ordinal.
    days = query_url(db, "SELECT reference, og_usage_day(created_at)::text FROM messages "
                         "WHERE reference IN ('kf_s1', 'kf_s2', 'kf_m1', 'kf_m2') ORDER BY reference")
    day = dict(days)
    assert len(day) == 4
    assert out == [["kf_s1", day["kf_s1"]], ["kf_s2", day["kf_s2"]],
                   ["1", "kf_m1", day["kf_m1"]], ["2", "kf_m2", day["kf_m2"]]]
    a, b = message_rows(db, ["kf_s1", "kf_s2"]), message_rows(db, ["kf_m1", "kf_m2"])
    assert len(a) == 2 and [r[1:] for r in a] == [r[1:] for r in b]
    assert a[0][1] == 'Hi "there" \\ {x}, y'  # quotes, backslash and braces survive the array literal

    # The number +1555000003 is remembered (no WhatsApp): nothing written for it.
    nowa_single = [insert_params("kf_n%d" % i, "+155500000%d" % i) for i in (3, 4)]
    nowa_many = [insert_params("kf_o%d" % i, "+155500000%d" % i) for i in (3, 4)] + \
        [insert_params("kf_o5", "+15550000005")]
    out = run_sql(db, "".join(execute("msg_insert_unless_nowa", p) for p in nowa_single) +
                  execute_many("msg_insert_unless_nowa_many", nowa_many))
    day = dict(query_url(db, "SELECT reference, og_usage_day(created_at)::text FROM messages "
                             "WHERE reference IN ('kf_n4', 'kf_o4', 'kf_o5')"))
    assert out[0][0] == "" and int(out[0][1]) > 3500000 and out[0][2] == ""  # remembered: not inserted
    assert out[1] == ["kf_n4", "", day["kf_n4"]]
    rows = sorted(out[2:], key=lambda r: int(r[0]))
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert rows[0][1] == "" and int(rows[0][2]) > 3500000 and rows[0][3] == ""
    assert rows[1][1:] == ["kf_o4", "", day["kf_o4"]] and rows[2][1:] == ["kf_o5", "", day["kf_o5"]]
    assert query_url(db, "SELECT count(*) FROM messages WHERE reference IN ('kf_n3', 'kf_o3')") == [("0",)]
    assert message_rows(db, ["kf_n4"])[0][1:] == message_rows(db, ["kf_o4"])[0][1:]


ATTEMPT_FIELDS = ("seq, channel, status, error_code, error_message, provider_code, http_status, latency_ms, "
                  "attempted_at, delivery_status, delivered_at, read_at, delivery_error, delivery_provider_code, "
                  "delivery_message")

# (status, winning channel, attempts, goes on, delivery statuses already received for the
# accepted attempt's provider id)
CASES = [
    ("sent", "whatsapp_qr", [("whatsapp_qr", True)], False, []),
    ("sent", "whatsapp_qr", [("whatsapp_qr", True)], False, ["delivered"]),
    ("sent", "whatsapp_qr", [("whatsapp_qr", True)], False, ["delivered", "read"]),
    ("sent", "whatsapp_qr", [("whatsapp_qr", True)], False, ["failed"]),
    ("sent", "whatsapp_qr", [("whatsapp_qr", True)], True, ["failed"]),
    ("sent", "sms", [("whatsapp_qr", False), ("sms", True)], False, ["undelivered"]),
    ("failed", None, [("whatsapp_qr", False), ("sms", False)], False, []),
]


def attempts_json(attempts, pid):
    out = []
    for seq, (ch, ok) in enumerate(attempts):
        a = {"channel": ch, "status": "sent" if ok else "failed", "latency_ms": 12 + seq, "seq": seq,
             "attempted_at_ms": 1764150000000 + seq}
        if ok:
            a["provider_message_id"] = pid
        else:
            a.update(error_code="provider_rejected", error_message='refused "x"', provider_code="131026",
                     http_status=400)
        out.append(a)
    return json.dumps(out)


def test_completion_set_form_writes_what_the_single_form_writes(db):
    """msg_complete_many against msg_complete, case by case (a status that beat the completion,
    read over delivered, undelivered unless the chain goes on, failures): the same message
    status, winning channel and attempt rows."""
    script, refs = "", []
    for form in ("s", "m"):
        rows = []
        for i, (status, winner, attempts, goes_on, before) in enumerate(CASES):
            ref, pid = "kf_c%s%d" % (form, i), "pid-%s-%d" % (form, i)
            refs.append(ref)
            script += execute("msg_insert", insert_params(ref, "+1666000%d%03d" % (1 if form == "s" else 2, i)))
            win_ch = [ch for ch, ok in attempts if ok]
            for k, st in enumerate(before):
                script += ("INSERT INTO delivery_statuses (channel, provider_message_id, status, at, matched) "
                           "VALUES (%s, %s, %s, to_timestamp(1764150001 + %d), false);\n" % (
                               lit(win_ch[0]), lit(pid), lit(st), k))
            rows.append([TENANT, ref, status, winner, attempts_json(attempts, pid), "true" if goes_on else "false"])
        if form == "s":
            script += "".join(execute("msg_complete", r) for r in rows)
        else:
            script += execute_many("msg_complete_many", rows)
    run_sql(db, script)
    for i in range(len(CASES)):
        a = query_url(db, "SELECT status, winning_channel, completed_at IS NOT NULL FROM messages "
                          "WHERE reference = 'kf_cs%d'" % i)
        b = query_url(db, "SELECT status, winning_channel, completed_at IS NOT NULL FROM messages "
                          "WHERE reference = 'kf_cm%d'" % i)
        assert a == b and a[0][2] == "t", (i, a, b)
        aa = query_url(db, "SELECT %s FROM attempts WHERE reference = 'kf_cs%d' ORDER BY seq" % (ATTEMPT_FIELDS, i))
        ab = query_url(db, "SELECT %s FROM attempts WHERE reference = 'kf_cm%d' ORDER BY seq" % (ATTEMPT_FIELDS, i))
        assert aa == ab and len(aa) == len(CASES[i][2]), (i, aa, ab)
    want = ["sent", "delivered", "read", "undelivered", "sent", "undelivered", "failed"]
    got = [query_url(db, "SELECT status FROM messages WHERE reference = 'kf_cm%d'" % i)[0][0]
           for i in range(len(CASES))]
    assert got == want


def metric(srv, name):
    r = srv.request("GET", "/metrics")
    assert r.status == 200
    m = re.search(r"^%s (\S+)$" % re.escape(name), r.body.decode(), re.M)
    return float(m.group(1)) if m else 0.0


def send_many(gw, numbers, threads=24):
    """Sends to every number from `threads` connections at once; returns {number: response}."""
    out, lock, todo = {}, threading.Lock(), list(numbers)

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                to = todo.pop()
            r = call(gw, "POST", "/api/omni/send", token=gw.token, body={"to": to, "text": "batch"}, timeout=20)
            with lock:
                out[to] = r

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@pytest.fixture
def gw(make_gateway, sim):
    # One write connection: every batch waits for the one in flight, so concurrent sends batch.
    return tenant_gateway(make_gateway, sim, workers=1, env={"OMNIGATE_DB_POOL": "1"})


def test_concurrent_sends_share_set_forms_and_are_recorded(gw):
    """240 sends over 24 connections at once (first channel fails for a third of them): the
    batches merge their inserts and completions (the metric counts it), every answer is 200
    and every send is in the database with the answer's status, winner and attempts."""
    numbers = [magic(1 if i % 3 == 0 else 0, 0, 0, "%04d" % i) for i in range(240)]
    res = send_many(gw, numbers)
    for to, r in res.items():
        assert_ok(r)
    assert metric(gw, "omnigate_db_merged_operations_total") >= 20
    rows = {r[0]: r[1:] for r in query_url(
        gw.db_url, "SELECT m.reference, m.status, m.winning_channel, m.to_number, "
                   "(SELECT string_agg(a.channel || ':' || a.status, ',' ORDER BY a.seq) FROM attempts a "
                   "WHERE a.tenant_id = m.tenant_id AND a.reference = m.reference) FROM messages m")}
    assert len(rows) == len(numbers)
    for to, r in res.items():
        d = r.json()["data"]
        status, winner, number, attempts = rows[d["reference"]]
        assert number == to and status == "sent" and winner == d["winningChannel"]
        assert attempts == ",".join("%s:%s" % (a["channel"], a["status"]) for a in d["attempts"])


def test_one_bad_row_does_not_fail_its_batch(gw):
    """A row the database refuses (a trigger raising for one number, on its pending insert and
    on another's completion) fails its batch's set form; the batch is retried send by send, so
    only those two sends fail, each with its own answer, and every other send is recorded."""
    bad_insert, bad_complete = magic(0, 0, 0, "7001"), magic(0, 0, 0, "7002")
    query_url(gw.db_url, """
        CREATE FUNCTION t_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' AND NEW.to_number = '%s' THEN RAISE EXCEPTION 'refused insert'; END IF;
            IF TG_OP = 'UPDATE' AND NEW.to_number = '%s' AND NEW.status <> 'pending' THEN
                RAISE EXCEPTION 'refused completion';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER t_refuse BEFORE INSERT OR UPDATE ON messages FOR EACH ROW EXECUTE FUNCTION t_refuse();
    """ % (bad_insert, bad_complete))
    retries0 = metric(gw, "omnigate_db_batch_retries_total")
    numbers = [magic(0, 0, 0, "%04d" % i) for i in range(120)]
    for rnd in range(10):  # until both bad rows rode in a merged batch (nearly always the first round)
        res = send_many(gw, numbers + [bad_insert, bad_complete])
        assert res[bad_insert].status == 500 and res[bad_insert].json()["error"]["code"] == "internal_error"
        assert res[bad_complete].status == 502
        assert res[bad_complete].json()["error"]["code"] == "outcome_unknown"
        for to in numbers:
            assert_ok(res[to])
        if metric(gw, "omnigate_db_batch_retries_total") >= retries0 + 2:
            break
    assert metric(gw, "omnigate_db_batch_retries_total") >= retries0 + 2
    assert metric(gw, "omnigate_db_merged_operations_total") > 0
    n = len(numbers)
    assert query_url(gw.db_url, "SELECT count(*) FROM messages WHERE status = 'sent' AND to_number <> '%s'"
                     % bad_complete) == [(str(n * (rnd + 1)),)]
    assert query_url(gw.db_url, "SELECT count(*) FROM messages WHERE to_number = '%s'" % bad_insert) == [("0",)]
    assert query_url(gw.db_url, "SELECT status FROM messages WHERE to_number = '%s'" % bad_complete) == \
        [("pending",)] * (rnd + 1)


def as_superuser(pg_session, url):
    """The same database as the superuser: LOAD 'auto_explain' is a superuser's (the gateway's
    role is an ordinary owner, pgcluster.py)."""
    return pg_session.url_for(urllib.parse.urlparse(url).path.lstrip("/"), user="postgres")


def test_completion_set_form_reads_by_primary_keys_on_a_new_database(db, pg_session):
    """The completion's join (messages with the batch's rows) is planned on a database never
    analyzed, while messages is tiny, and the plan is then kept (sql/014 makes the generic plan
    at the first call; PostgreSQL's default would make it at the sixth): it must read messages
    and the earlier delivery statuses by their primary keys, never whole, whatever size the
    tables grow to (auto_explain of the ninth call, past either point)."""
    script = ""
    for i in range(9):
        if i == 8:
            script += ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                       "SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = 'notice';\n")
        ref = "kf_p%d" % i
        script += execute("msg_insert", insert_params(ref, "+1777000%04d" % i))
        script += execute_many("msg_complete_many", [[TENANT, ref, "sent", "sms",
                                                       attempts_json([("sms", True)], "pid-p%d" % i), "false"]])
    p = subprocess.run(["psql", as_superuser(pg_session, db), "-XAtq", "-v", "ON_ERROR_STOP=1"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    plan = p.stderr[p.stderr.index("UPDATE messages m"):]
    assert_reads_messages_by_key(plan)
    assert "Index Scan using delivery_statuses_pkey on delivery_statuses" in plan, plan
    assert "Seq Scan" not in plan and "Hash Join" not in plan, plan


def assert_reads_messages_by_key(plan):
    """Every read of messages in an auto_explain plan is bounded by its key (an Index Cond on
    tenant_id and reference) or by the addresses of rows this transaction locked (a TID Cond,
    sql/031): a scan of messages_pkey without an Index Cond (a Filter on the status only) reads
    the whole table, as a plan of sql/032's first completion made on a new database did."""
    scans = re.findall(r"(Scan[^\n]* on messages \w+[^\n]*\n(?:[^\n]*\n){0,2})", plan)
    assert scans, plan
    for scan in scans:
        assert re.search(r"Index Cond: \(\(tenant_id = ", scan) or "TID Cond: " in scan, (scan, plan)


def test_set_forms_are_planned_once(db, pg_session):
    """The set forms' functions use the plan made for any arrays from their first call: a plan
    made again for every batch of fewer than ten sends cost a one-send completion 541 us of
    the backend instead of 191 (sql/014). auto_explain (verbose) of a first call shows the
    arrays as parameters ($1), not as the values of that call."""
    script = ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
              "SET auto_explain.log_nested_statements = on; SET auto_explain.log_verbose = on; "
              "SET auto_explain.log_level = 'notice';\n")
    script += execute_many("msg_insert_unless_nowa_many", [insert_params("kf_g1", "+1888000001")])
    script += execute_many("msg_complete_many", [[TENANT, "kf_g1", "sent", "sms",
                                                   attempts_json([("sms", True)], "pid-g1"), "false"]])
    p = subprocess.run(["psql", as_superuser(pg_session, db), "-XAtq", "-v", "ON_ERROR_STOP=1"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    calls = re.findall(r"Function Call: (unnest\([^\n]*)", p.stderr)
    # One per function, each its first call, and the usage triggers' (sql/024), which take
    # arrays as well: every one planned with its arrays as parameters.
    assert len(calls) >= 2, p.stderr
    for c in calls:
        assert c.startswith("unnest($1), unnest($2)") and "kf_g1" not in c, c
    assert query_url(db, "SELECT status FROM messages WHERE reference = 'kf_g1'") == [("sent",)]


def test_queue_set_forms_are_planned_once(db, pg_session):
    """The queue's set forms (a write batch's queued sends, a claim, a write batch's releases) use
    the plan made for any arrays from their first call, as the sync send's do (above): without
    plan_cache_mode = force_generic_plan, PostgreSQL planned og_queue_done_many's main statement
    again at each call while the batches held few messages (554 us of planning per call at
    batches of 2, more than it ran; sql/031). auto_explain (verbose) of the first calls shows
    the arrays as parameters ($n), not as the values of that call."""
    now_ms = int(query_url(db, "SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0])
    queue = json.dumps({"status": "queued", "senders": [{"c": "sms", "s": "ACME", "r": 10, "n": 1}]})
    script = ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
              "SET auto_explain.log_nested_statements = on; SET auto_explain.log_verbose = on; "
              "SET auto_explain.log_level = 'notice';\n")
    script += ("SELECT og_queue_insert_many(ARRAY['%s']::uuid[], ARRAY['kf_gq1'], ARRAY['+1888000002'], "
               "ARRAY['Hi'], ARRAY['fallback'], ARRAY['{sms}'], ARRAY['[]'::jsonb], ARRAY[NULL]::text[], "
               "ARRAY[NULL]::integer[], ARRAY[NULL]::text[], ARRAY['ACME'], ARRAY[NULL]::jsonb[], "
               "ARRAY[%d]::bigint[], ARRAY[%d]::bigint[], ARRAY['normal'], ARRAY[%s::json]);\n"
               % (TENANT, now_ms - 1000, now_ms + 3600000, lit(queue)))
    script += "SELECT reference, ch FROM og_queue_claim('gq-owner', 60000, 10, 32, false);\n"
    script += ("SELECT og_queue_done_many(ARRAY['%s']::uuid[], ARRAY['kf_gq1'], ARRAY[0]::smallint[], "
               "ARRAY['gq-owner'], ARRAY['sent'], ARRAY['pid-gq1'], ARRAY[NULL]::text[], ARRAY[NULL]::text[], "
               "ARRAY[NULL]::text[], ARRAY[200], ARRAY[3], ARRAY[NULL]::integer[], ARRAY[5000]::bigint[], "
               "ARRAY['USD'], ARRAY[7000]::bigint[], true);\n" % TENANT)
    p = subprocess.run(["psql", as_superuser(pg_session, db), "-XAtq", "-v", "ON_ERROR_STOP=1"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "kf_gq1|0" in p.stdout, p.stdout  # claimed
    calls = re.findall(r"Function Call: (unnest\([^\n]*)", p.stderr)
    # The accept's (its entries, its senders), the claim's (its returned rows) and the outcome's
    # (its entries, attempts, messages): every one planned with its arrays as parameters.
    assert len(calls) >= 6, p.stderr
    for c in calls:
        assert c.startswith("unnest($") and "kf_gq1" not in c and TENANT not in c, c
    assert query_url(db, "SELECT status FROM messages WHERE reference = 'kf_gq1'") == [("sent",)]
    assert query_url(db, "SELECT count(*) FROM queue_entries") == [("0",)]


def test_every_function_over_array_parameters_says_which_plans_it_keeps(db):
    """A PL/pgSQL function whose statements read an array parameter through unnest() sets
    plan_cache_mode: PostgreSQL's default makes a custom plan at every call while one looks
    cheaper than the generic plan (which assumes ten elements), i.e. whenever the arrays are
    short, as a write batch not under load is. og_queue_insert_many and og_queue_done_many had
    none until sql/031 (above); og_fallback_on_status and og_status_recompute want custom plans
    and say so."""
    rows = query_url(db, "SELECT p.proname, coalesce(array_to_string(p.proconfig, ','), '') FROM pg_proc p "
                         "JOIN pg_language l ON l.oid = p.prolang "
                         "WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'plpgsql' "
                         "AND p.prosrc ~ 'unnest\\(p_' ORDER BY 1")
    names = {r[0] for r in rows}
    assert {"og_queue_insert_many", "og_queue_done_many", "og_msg_complete_many"} <= names, rows
    for name, config in rows:
        assert "plan_cache_mode=" in config, (name, config)


def test_completions_on_a_new_database_read_messages_by_key(db, pg_session):
    """The same for a write batch of releases (og_queue_done_many) beside the completion's:
    planned at their first call on a new database (messages nearly empty, never analyzed), kept,
    and shown at the ninth, every read of messages goes by key (sql/032's completion, first
    written to update the messages from the batch's per-message statuses, was planned there as a
    read of the whole of messages per call; in one backend a run's first session cost 150 us per
    completion instead of 55)."""
    now_ms = int(query_url(db, "SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0])
    script = ""
    for i in range(9):
        if i == 8:
            script += ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                       "SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = 'notice';\n")
        script += queue_round_sql("kf_nd%d_" % i, 3, now_ms, "nd-owner")
        script += execute_many("msg_insert_unless_nowa_many",
                               [insert_params("kf_nc%d_%d" % (i, k), "+1777100%02d%02d" % (i, k)) for k in range(3)])
        script += execute_many("msg_complete_many", [[TENANT, "kf_nc%d_%d" % (i, k), "sent", "sms",
                                                       attempts_json([("sms", True)], "pid-nc%d-%d" % (i, k)), "false"]
                                                      for k in range(3)])
    p = subprocess.run(["psql", as_superuser(pg_session, db), "-XAtq", "-v", "ON_ERROR_STOP=1"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    # Each statement's plan (nested ones first) with its text; those of the ninth round that
    # write messages: the claim's, the release's and the completion's.
    plans = [b for b in re.split(r"\n(?=Query Text: )", p.stderr) if "UPDATE messages m" in b]
    assert any("ON CONFLICT (tenant_id, reference, seq)" in b for b in plans), p.stderr  # the release's
    assert any("json_to_recordset(x.attempts)" in b for b in plans), p.stderr  # the completion's
    for plan in plans:
        assert_reads_messages_by_key(plan)
        assert "Seq Scan" not in plan and "Hash Join" not in plan, plan
    assert query_url(db, "SELECT status, count(*) FROM messages GROUP BY 1") == [("sent", "54")]


def queue_round_sql(prefix, n, now_ms, owner):
    """psql script: n queued sends (sms, due now, one sender) accepted, claimed and sent in one
    write batch each, as the release writes them (og_queue_insert_many, og_queue_claim,
    og_queue_done_many)."""
    queue = {"status": "queued", "senders": [{"c": "sms", "s": "ACME", "r": 100000, "n": 1}]}
    return (queue_insert_sql(n, "array_fill('%s'::uuid, ARRAY[%d])" % (TENANT, n), prefix,
                             "(SELECT array_agg('+1999' || lpad(i::text, 7, '0')) FROM generate_series(1, %d) i)" % n,
                             "{sms}", None, now_ms - 1000, now_ms + 3600000, queue) +
            "CREATE TEMP TABLE claimed AS SELECT * FROM og_queue_claim('%(o)s', 60000, %(n)d, 32, false);\n"
            "SELECT og_queue_done_many(array_agg(c.tenant_id), array_agg(c.reference), array_agg(c.ch), "
            "array_agg('%(o)s'::text), array_agg('sent'::text), array_agg('pid-' || c.reference), "
            "array_agg(NULL::text), array_agg(NULL::text), array_agg(NULL::text), array_agg(200), array_agg(3), "
            "array_agg(NULL::integer), array_agg(5000::bigint), array_agg('USD'::text), array_agg(7000::bigint), "
            "true) FROM claimed c;\n"
            "DROP TABLE claimed;\n" % {"n": n, "o": owner})


def queue_insert_sql(n, tenants, prefix, tos, channels, wa_from, due_ms, valid_ms, queue):
    """psql: one og_queue_insert_many of n fallback sends 'Hi' (SMS sender ACME), as a write batch
    writes them: `tenants` and `tos` SQL array expressions, references prefix1..prefixn, the
    channels' text[] literal, the Meta number (or None), due and validity in ms, `queue` each
    message's queue JSON (a dict: the same for all) or an SQL json[] expression (one each)."""
    q = queue if isinstance(queue, str) else "array_fill(%s::json, ARRAY[%d])" % (lit(json.dumps(queue)), n)
    return ("SELECT og_queue_insert_many(%(t)s, (SELECT array_agg('%(p)s' || i) FROM generate_series(1, %(n)d) i), "
            "%(to)s, array_fill('Hi'::text, ARRAY[%(n)d]), array_fill('fallback'::text, ARRAY[%(n)d]), "
            "array_fill(%(ch)s::text, ARRAY[%(n)d]), array_fill('[]'::jsonb, ARRAY[%(n)d]), "
            "array_fill(NULL::text, ARRAY[%(n)d]), array_fill(NULL::integer, ARRAY[%(n)d]), "
            "array_fill(%(wa)s::text, ARRAY[%(n)d]), array_fill('ACME'::text, ARRAY[%(n)d]), "
            "array_fill(NULL::jsonb, ARRAY[%(n)d]), array_fill(%(due)d::bigint, ARRAY[%(n)d]), "
            "array_fill(%(valid)d::bigint, ARRAY[%(n)d]), array_fill('normal'::text, ARRAY[%(n)d]), "
            "%(q)s);\n"
            % {"t": tenants, "n": n, "p": prefix, "to": tos, "ch": lit(channels), "wa": lit(wa_from), "due": due_ms,
               "valid": valid_ms, "q": q})


def test_queue_accept_gives_each_message_its_own_document(db):
    """og_queue_insert_many gives every message of its write batch the senders, segments and status
    of its own queue document: a write batch of two tenants whose messages take turns among three
    documents (Meta then SMS at 80 and 10/s, SMS alone in 3 segments, Meta alone and scheduled)
    and an `all` send."""
    other = "00000000-0000-4000-8000-0000000000ab"
    query_url(db, "INSERT INTO tenants (id, name) VALUES ('%s', 'sets-b')" % other)
    now_ms = int(query_url(db, "SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0])
    a = {"status": "queued", "senders": [{"c": "whatsapp_meta", "s": "100200300", "r": 80, "n": 1},
                                         {"c": "sms", "s": "ACME", "r": 10, "n": 1}]}
    b = {"status": "queued", "senders": [{"c": "sms", "s": "ACME", "r": 10, "n": 3}]}
    c = {"status": "scheduled", "senders": [{"c": "whatsapp_meta", "s": "100200300", "r": 80, "n": 1}]}
    # (document, its channels, tenant, delivery mode) of each message, in order.
    sends = [(a, "{whatsapp_meta,sms}", TENANT, "fallback"), (b, "{sms}", TENANT, "fallback"),
             (a, "{whatsapp_meta,sms}", other, "all"), (c, "{whatsapp_meta}", TENANT, "fallback"),
             (b, "{sms}", other, "fallback"), (a, "{whatsapp_meta,sms}", TENANT, "fallback"),
             (c, "{whatsapp_meta}", other, "fallback")]
    # The gateway's own statement (queue_insert_many), prepared as it prepares it.
    run_sql(db, execute_many("queue_insert_many", [
        [t, "kf_md%d" % i, "+1888100000%d" % i, "Hi", mode, ch, "[]", None, None, "6281234567890", "ACME", None,
         now_ms + 3600000, now_ms + 7200000, "normal", json.dumps(doc)]
        for i, (doc, ch, t, mode) in enumerate(sends)]))
    rows = query_url(db, "SELECT e.reference, e.ch, m.status, e.tenant_id = m.tenant_id AND s.tenant_id = m.tenant_id, "
                         "s.channel, s.sender, s.rate, e.segments, cardinality(e.senders), e.all_mode "
                         "FROM queue_entries e JOIN messages m ON m.tenant_id = e.tenant_id AND m.reference = e.reference "
                         "JOIN queue_senders s ON s.id = e.sender_id ORDER BY 1, 2")
    assert rows == [
        ("kf_md0", "0", "queued", "t", "whatsapp_meta", "100200300", "80", "1", "2", "f"),
        ("kf_md1", "0", "queued", "t", "sms", "ACME", "10", "3", "1", "f"),
        ("kf_md2", "0", "queued", "t", "whatsapp_meta", "100200300", "80", "1", "2", "t"),
        ("kf_md2", "1", "queued", "t", "sms", "ACME", "10", "1", "2", "t"),
        ("kf_md3", "0", "scheduled", "t", "whatsapp_meta", "100200300", "80", "1", "1", "f"),
        ("kf_md4", "0", "queued", "t", "sms", "ACME", "10", "3", "1", "f"),
        ("kf_md5", "0", "queued", "t", "whatsapp_meta", "100200300", "80", "1", "2", "f"),
        ("kf_md6", "0", "scheduled", "t", "whatsapp_meta", "100200300", "80", "1", "1", "f")], rows
    # Each message's senders are its own tenant's, in its channels' order.
    assert query_url(db, "SELECT e.reference, string_agg(s.channel, ',' ORDER BY k.o) FROM queue_entries e "
                         "CROSS JOIN LATERAL unnest(e.senders) WITH ORDINALITY AS k(id, o) "
                         "JOIN queue_senders s ON s.id = k.id AND s.tenant_id = e.tenant_id "
                         "WHERE e.ch = 0 GROUP BY 1 ORDER BY 1") == [
        ("kf_md0", "whatsapp_meta,sms"), ("kf_md1", "sms"), ("kf_md2", "whatsapp_meta,sms"),
        ("kf_md3", "whatsapp_meta"), ("kf_md4", "sms"), ("kf_md5", "whatsapp_meta,sms"), ("kf_md6", "whatsapp_meta")]
    assert query_url(db, "SELECT count(*) FROM queue_senders") == [("4",)]


def plan_work(plan_text):
    """Per plan node of auto_explain's output (with row counts), the rows it produced and
    removed by its filters, times its loops: what a node did for its statement."""
    out = []
    lines = plan_text.splitlines()
    for k, line in enumerate(lines):
        m = re.search(r"\(actual rows=(\d+) loops=(\d+)\)", line)
        if not m:
            continue
        removed = 0
        for nxt in lines[k + 1:k + 8]:
            if "(actual rows=" in nxt:
                break
            f = re.search(r"Rows Removed by (?:Join )?Filter: (\d+)", nxt)
            if f:
                removed += int(f.group(1))
        out.append(((int(m.group(1)) + removed) * int(m.group(2)), line.strip()))
    return out


def test_set_forms_are_linear_in_their_write_batch(db, pg_session):
    """A write batch's sends cost each the same whatever the batch's size: no plan node of the
    set forms does more than a few rows' work per send of the batch. Hash and merge joins are off
    in these functions, so a join of two of a statement's own row sets is a nested loop (n x n
    rows compared), and a lookup per row in an array of the batch is the same. Before sql/032,
    with batches of 200: the completion's and the release's messages statements removed 19,900
    and 39,800 rows by their join filters (in one backend 80 -> 117 us per completion and 87 ->
    201 per release from batches of 20 to 200; a gateway under load writes up to 256), and the
    accept of queued sends of 200 tenants looked each (message, channel)'s sender up among the
    batch's 400 (160,000 rows; 50 -> 210 us per message from one tenant to 256). auto_explain
    with row counts (no timing) of one batch of 200 of each: accepts, claim, releases, sync sends
    and their completions, and queued sends of 200 tenants."""
    n = 200
    now_ms = int(query_url(db, "SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0])
    query_url(db, "INSERT INTO tenants (id, name) SELECT ('00000000-0000-4000-8001-' || lpad(k::text, 12, '0'))::uuid, "
                  "'lin' || k FROM generate_series(1, %d) k" % n)
    script = ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
              "SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on; "
              "SET auto_explain.log_timing = off; SET auto_explain.log_level = 'notice';\n")
    script += queue_round_sql("kf_lq", n, now_ms, "lin-owner")
    # Queued sends of n tenants in one write batch, each with its own Meta number (n queue
    # documents, as n tenants' would be) and the SMS sender.
    queue = ("(SELECT array_agg(json_build_object('status', 'scheduled', 'senders', json_build_array("
             "json_build_object('c', 'whatsapp_meta', 's', '1002' || lpad(k::text, 5, '0'), 'r', 80, 'n', 1), "
             "json_build_object('c', 'sms', 's', 'ACME', 'r', 10, 'n', 1))) ORDER BY k) "
             "FROM generate_series(1, %d) k)" % n)
    script += queue_insert_sql(n, "(SELECT array_agg(('00000000-0000-4000-8001-' || lpad(k::text, 12, '0'))::uuid) "
                                  "FROM generate_series(1, %d) k)" % n, "kf_lt",
                               "array_fill('+19990000001'::text, ARRAY[%d])" % n, "{whatsapp_meta,sms}", "100200300",
                               now_ms + 3600000, now_ms + 7200000, queue)
    script += execute_many("msg_insert_unless_nowa_many",
                           [insert_params("kf_ls%d" % k, "+1777200%04d" % k) for k in range(n)])
    # Half the messages with a failed attempt before the accepted one, a tenth with a delivery
    # status that came first (adopted: delivered).
    rows = [[TENANT, "kf_ls%d" % k, "sent", "sms",
             attempts_json([("whatsapp_qr", False), ("sms", True)] if k % 2 else [("sms", True)], "pid-ls%d" % k),
             "false"] for k in range(n)]
    query_url(db, "INSERT INTO delivery_statuses (channel, provider_message_id, status, at, matched) "
                  "SELECT 'sms', 'pid-ls' || k, 'delivered', now(), false FROM generate_series(0, %d, 10) k" % (n - 1))
    script += execute_many("msg_complete_many", rows)
    p = subprocess.run(["psql", as_superuser(pg_session, db), "-XAtq", "-v", "ON_ERROR_STOP=1"], input=script,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    work = sorted(plan_work(p.stderr))
    assert len(work) > 50, p.stderr
    assert work[-1][0] <= 4 * n, work[-5:]
    # What they wrote.
    assert query_url(db, "SELECT status, count(*) FROM messages WHERE reference LIKE 'kf_lq%%' GROUP BY 1") == \
        [("sent", str(n))]
    assert query_url(db, "SELECT status, count(*) FROM messages WHERE reference LIKE 'kf_ls%%' GROUP BY 1 "
                         "ORDER BY 1") == [("delivered", str(n // 10)), ("sent", str(n - n // 10))]
    assert query_url(db, "SELECT a.status, count(*) FROM attempts a WHERE a.reference LIKE 'kf_l%%' "
                         "GROUP BY 1 ORDER BY 1") == [("failed", str(n // 2)), ("sent", str(2 * n))]
    # Each queued send of the n tenants waits behind its own tenant's Meta number.
    assert query_url(db, "SELECT count(*), count(*) FILTER (WHERE s.tenant_id = q.tenant_id AND s.channel = "
                         "'whatsapp_meta' AND s.sender = '1002' || lpad(substr(q.reference, 6), 5, '0') "
                         "AND q.senders[2] <> q.sender_id) "
                         "FROM queue_entries q JOIN queue_senders s ON s.id = q.sender_id") == [(str(n), str(n))]
