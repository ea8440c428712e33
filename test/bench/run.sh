#!/usr/bin/env bash
# The benchmark command (README): installs the dependencies, builds release binaries in
# build/, then runs test/bench/bench.py, which starts a private PostgreSQL cluster, the
# provider simulator, the gateway and nginx on loopback, drives every scenario with wrk and
# writes test/bench/results/bench.md and bench.json (not committed).
# Usage: bash test/bench/run.sh [--scenarios a,b] [--duration S] [--conns N] [--workers W]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${OMNIGATE_BUILD_DIR:-build}
bash deploy/install-deps.sh >/dev/null
if [[ -f "$BUILD/build.ninja" ]]; then
  meson configure "$BUILD" -Dbuildtype=release -Dtest_routes=false >/dev/null
else
  meson setup "$BUILD" -Dbuildtype=release -Dtest_routes=false >/dev/null
fi
ninja -C "$BUILD" >/dev/null
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# OMNIGATE_BENCH_SCRIPT: another driver beside bench.py taking the same two options
# (test/bench/pooling.sh runs pooling.py this way).
exec /usr/bin/python3 "test/bench/${OMNIGATE_BENCH_SCRIPT:-bench.py}" --omnigate "$BUILD/src/omnigate" \
  --sim "$BUILD/test/sim/omnigate-sim" "$@"
