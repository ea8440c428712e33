"""Consent and the WhatsApp window (issue 33, API.md §21): a benchmark scenario of bench.py, its
figures as ratios to a reference measured in the same run.

consent: sync fallback sends/s (as fallback_first: a fresh number each, the first channel
succeeds) with each worker's consent copy empty, then with --consent-rows (1,000,000)
suppressions of the bench tenants and as many open WhatsApp windows in the database and in
every copy: the ratio of sends/s (target: within 5%: the check is a hash probe in the worker's
memory, no statement). Also measured: how long the copies take to read that many changed rows
(a probe number suppressed in the same transaction, sent to until every worker refuses it), the
gateway's resident memory before and after, and the cold case: a gateway started on a database
holding them, the time until /readyz (a worker is ready once its copy is loaded). The rows are
deleted at the end and the gateway restarted (its copies read everything again).
"""

import json
import time
import urllib.error
import urllib.request

PROBE = "+79990000001"


def send_once(b, token, to):
    req = urllib.request.Request(b.og_url("/api/omni/send"), method="POST",
                                 data=json.dumps({"to": to, "text": "probe", "channels": ["sms"]}).encode(),
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def refused_everywhere(b, token, timeout=60):
    """Seconds until 8 sends in a row to PROBE are refused (every worker's copy has it)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(send_once(b, token, PROBE) == 422 for _ in range(8)):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError("consent: the probe number was still sent to after %d s" % timeout)


def sc_consent(b, bench):
    n = b.args.consent_rows
    tenants = b.tenant_ids
    r0 = b.measure("consent_empty", b.og_url("/api/omni/send"),
                   script=bench.send_script(b, "ce", "+6284{n}"), note="fallback, consent copies empty")
    rss0 = bench.rss_kib(b.og.pid)
    t0 = time.monotonic()
    # Spread over the bench tenants; numbers +7 and 10 digits, none of which the sends use. The
    # probe goes last, in the same transaction.
    b.psql("""BEGIN;
INSERT INTO suppressions (tenant_id, number, kind, suppressed, source, reason)
SELECT (ARRAY['%s']::uuid[])[1 + g %% %d], '+7' || (1000000000 + g)::text,
    CASE WHEN g %% 2 = 0 THEN 'sms' ELSE 'whatsapp' END, true, 'api', 'bench'
FROM generate_series(1, %d) g;
INSERT INTO whatsapp_windows (phone_number_id, recipient, open_until, last_inbound_at)
SELECT '1098765432' || (g %% 10)::text, '+7' || (2000000000 + g)::text, now() + interval '20 hours', now()
FROM generate_series(1, %d) g;
INSERT INTO suppressions (tenant_id, number, kind, suppressed, source, reason)
VALUES ('%s', '%s', 'sms', true, 'api', 'bench probe');
COMMIT;""" % ("','".join(tenants), len(tenants), n, n, tenants[0], PROBE))
    loaded_s = time.monotonic() - t0
    spread_s = refused_everywhere(b, b.tokens[0])
    rss1 = bench.rss_kib(b.og.pid)
    bench.log("consent: %d suppressions and %d windows written in %.1f s; every copy had them %.2f s later; "
              "gateway RSS %d -> %d KiB" % (n, n, loaded_s, spread_s, rss0, rss1))
    r1 = b.measure("consent_loaded", b.og_url("/api/omni/send"),
                   script=bench.send_script(b, "cl", "+6285{n}"),
                   note="fallback, consent copies holding %d suppressions and %d windows" % (n, n))
    # The cold case: a gateway started on that database is ready once every copy is loaded.
    b.stop_gateway()
    t0 = time.monotonic()
    b.start_gateway(timeout=120)
    cold_s = time.monotonic() - t0
    rss2 = bench.rss_kib(b.og.pid)
    r2 = b.measure("consent_loaded_cold", b.og_url("/api/omni/send"),
                   script=bench.send_script(b, "cc", "+6286{n}"),
                   note="fallback, after a restart on %d suppressions and %d windows" % (n, n))
    b.psql("DELETE FROM suppressions WHERE reason IN ('bench', 'bench probe'); "
           "DELETE FROM whatsapp_windows WHERE last_inbound_at IS NOT NULL AND recipient LIKE '+72%%';")
    b.stop_gateway()
    b.start_gateway()
    r3 = b.measure("consent_empty2", b.og_url("/api/omni/send"),
                   script=bench.send_script(b, "ce2", "+6287{n}"), note="fallback, consent copies empty again")
    empty = (r0["rps"] + r3["rps"]) / 2
    # On consent_loaded's wrk figures (the report's table reads them), with the comparison.
    res = dict(r1, scenario="consent", rows=n)
    res.update({"rps_empty": empty, "rps_loaded": r1["rps"], "rps_loaded_cold": r2["rps"],
                "ratio": r1["rps"] / max(empty, 1e-9), "ratio_cold": r2["rps"] / max(empty, 1e-9),
                "spread_s": spread_s, "cold_ready_s": cold_s,
                "rss_kib_empty": rss0, "rss_kib_loaded": rss1, "rss_kib_cold": rss2,
                "note": "sync sends/s with %d suppressions and %d windows in every copy / with none "
                        "(target >= 0.95)" % (n, n)})
    b.results.append(res)
    bench.log("consent: sends/s %.0f empty (mean of two), %.0f loaded (%.3f), %.0f after a cold start (%.3f); "
              "cold start to ready %.2f s; RSS %d KiB empty, %d loaded, %d cold" % (
                  empty, r1["rps"], res["ratio"], r2["rps"], res["ratio_cold"], cold_s, rss0, rss1, rss2))
