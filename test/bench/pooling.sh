#!/usr/bin/env bash
# What transaction pooling costs: the gateway straight to PostgreSQL with prepared statements,
# with unnamed statements (OMNIGATE_DB_PREPARED=false), through PgBouncer in transaction
# pooling, and through PgBouncer in session pooling, in ONE run on one durable cluster
# (test/bench/pooling.py, driven like bench.py by run.sh: release build first). Writes
# test/bench/results/pooling.md and pooling.json.
# Usage: bash test/bench/pooling.sh [--duration S] [--conns N] [--workers W] [--rounds R] ...
set -euo pipefail
OMNIGATE_BENCH_SCRIPT=pooling.py exec bash "$(dirname "$0")/run.sh" "$@"
