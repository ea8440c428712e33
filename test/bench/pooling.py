#!/usr/bin/env python3
"""What transaction pooling costs (issue 17, not a test). Started by test/bench/pooling.sh,
which builds the release binaries first.

In ONE run on loopback: one durable PostgreSQL cluster (deploy/pg.sh: fsync=on,
synchronous_commit=on), Debian's PgBouncer in front of it (transaction pooling for the
database `omnigate`, session pooling for the alias `omnigate_session`), the provider
simulator, and the gateway restarted in each configuration:

  direct/prepared       OMNIGATE_DATABASE_URL straight to PostgreSQL, prepared statements
                        (the default)
  direct/unnamed        the same with OMNIGATE_DB_PREPARED=false: the cost of sending each
                        statement's text, parsed and planned at every execution
  pgbouncer-tx/unnamed  through PgBouncer in transaction pooling (what PgBouncer 1.18 needs),
                        LISTEN straight to PostgreSQL
  pgbouncer-session/prepared
                        through PgBouncer in session pooling: prepared statements kept

Each configuration is measured --rounds times, interleaved (a, b, c, d, a, b, ...), with wrk
on POST /api/omni/send (the first channel succeeds: two write transactions per send); the
report gives the median sends/s, latency, and CPU per send of the gateway, PostgreSQL and
PgBouncer. Usage: pooling.py --omnigate BIN --sim BIN [--duration 10] [--conns 64]
[--workers 1] [--db-pool 2] [--pgb-pool 8] [--rounds 2] [--out DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench  # noqa: E402
from bench import CLK_TCK, cpu_ticks, log  # noqa: E402
from pgha import PgBouncer  # noqa: E402


def configs(b, pgb):
    direct = b.direct_url
    tx = pgb.url_for("omnigate")
    session = pgb.url_for("omnigate_session")
    return [
        ("direct/prepared", direct, {}),
        ("direct/unnamed", direct, {"OMNIGATE_DB_PREPARED": "false"}),
        ("pgbouncer-tx/unnamed", tx, {"OMNIGATE_DB_PREPARED": "false", "OMNIGATE_DATABASE_LISTEN_URL": direct}),
        ("pgbouncer-session/prepared", session, {"OMNIGATE_DATABASE_LISTEN_URL": direct}),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnigate", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--db-pool", type=int, default=2)
    ap.add_argument("--pgb-pool", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(bench.ROOT, "test/bench/results"))
    args = ap.parse_args()
    b = bench.Bench(args)
    pgb = None
    try:
        b.start_pg()
        b.direct_url = b.db_url
        real = os.path.realpath(b.pg_dir)
        port = int(b.db_url.rsplit(":", 1)[1].split("/")[0])
        target = types.SimpleNamespace(socket_dir=os.path.join(real, "run"), port=port)
        pgb = PgBouncer(target, pool_mode="transaction", pool_size=args.pgb_pool, max_client_conn=1000,
                        databases={"omnigate_session": "dbname=omnigate pool_mode=session"}).start()
        b.start_sim()
        runs = {name: [] for name, _, _ in configs(b, pgb)}
        first = True
        for rnd in range(args.rounds):
            for name, url, extra in configs(b, pgb):
                b.db_url = url
                b.start_gateway(dict(extra, OMNIGATE_DB_POOL=str(args.db_pool)))
                if first:
                    b.make_tenants()
                    bench.warm_up(b)
                    first = False
                pgb_t0 = cpu_ticks(pgb.proc.pid)
                r = b.measure("%s#%d" % (name, rnd + 1), b.og_url("/api/omni/send"),
                              script=bench.send_script(b, "pool", "+6281{n}"), note=name)
                r["pgbouncer_cpu_us_per_req"] = (cpu_ticks(pgb.proc.pid) - pgb_t0) * 1e6 / CLK_TCK / max(
                    r["requests"], 1)
                runs[name].append(r)
                b.stop_gateway()
                log("%s: gateway log lines with level error or warn so far: %d" % (name, sum(
                    1 for line in open(os.path.join(b.tmp, "omnigate.log"), errors="replace")
                    if '"level":"error"' in line or '"level":"warn"' in line)))
        rows = []
        base = statistics.median(r["rps"] for r in runs["direct/prepared"])
        for name, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in
                   ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "pg_cpu_us_per_req", "pgbouncer_cpu_us_per_req")}
            med["errors"] = sum(r["errors"] for r in rs)
            med["rounds"] = [round(r["rps"]) for r in rs]
            med["vs_direct_prepared"] = med["rps"] / base if base else float("nan")
            rows.append((name, med))
        lines = ["# Transaction pooling: what unnamed statements and PgBouncer cost", "",
                 "wrk -c%d -d%ds on POST /api/omni/send (first channel succeeds), gateway %d worker(s) x "
                 "OMNIGATE_DB_POOL %d, PgBouncer pool %d, PostgreSQL fsync=on synchronous_commit=on; median of "
                 "%d interleaved rounds." % (args.conns, args.duration, args.workers, args.db_pool, args.pgb_pool,
                                            args.rounds), "",
                 "| configuration | sends/s | vs direct/prepared | p50 ms | p99 ms | errors | gateway CPU us/send | "
                 "PostgreSQL CPU us/send | PgBouncer CPU us/send | rounds (sends/s) |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for name, m in rows:
            lines.append("| %s | %.0f | %.2f | %.2f | %.2f | %d | %.0f | %.0f | %.0f | %s |" % (
                name, m["rps"], m["vs_direct_prepared"], m["p50_ms"], m["p99_ms"], m["errors"], m["cpu_us_per_req"],
                m["pg_cpu_us_per_req"], m["pgbouncer_cpu_us_per_req"], ", ".join(str(x) for x in m["rounds"])))
        report = "\n".join(lines) + "\n"
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "pooling.md"), "w") as f:
            f.write(report)
        with open(os.path.join(args.out, "pooling.json"), "w") as f:
            json.dump({name: m for name, m in rows}, f, indent=2)
        print(report)
        if any(m["errors"] for _, m in rows):
            log("some requests failed: see the errors column")
            sys.exit(1)
    finally:
        # The logs, for the errors column: the gateway's (all runs, appended) and PgBouncer's.
        os.makedirs(args.out, exist_ok=True)
        for src, dst in ((os.path.join(b.tmp, "omnigate.log"), "pooling-omnigate.log"),
                         (pgb.log_path if pgb is not None else "", "pooling-pgbouncer.log")):
            if os.path.exists(src):
                shutil.copy(src, os.path.join(args.out, dst))
        if pgb is not None:
            pgb.close()
        b.close()


if __name__ == "__main__":
    main()
