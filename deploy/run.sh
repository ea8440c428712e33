#!/usr/bin/env bash
# The README's run command: installs the dependencies, builds a release build in ./build,
# starts `omnigate serve` (on 127.0.0.1:8080 unless OMNIGATE_LISTEN says otherwise), shows a
# sample request and its answer, then keeps the gateway in the foreground until Ctrl-C (which
# drains it gracefully). Any OMNIGATE_* variable in the environment configures it (see
# `build/src/omnigate --help`).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${OMNIGATE_BUILD_DIR:-build}
export OMNIGATE_LISTEN=${OMNIGATE_LISTEN:-127.0.0.1:8080}

bash deploy/install-deps.sh

if [[ -f "$BUILD/build.ninja" ]]; then
  meson configure "$BUILD" -Dbuildtype=release -Dtest_routes=false >/dev/null
else
  meson setup "$BUILD" -Dbuildtype=release -Dtest_routes=false
fi
ninja -C "$BUILD"
BIN="$BUILD/src/omnigate"

# --- Later issues: PostgreSQL -------------------------------------------------------------
# Start (or reuse) a local PostgreSQL cluster, export OMNIGATE_DATABASE_URL, and run
# `"$BIN" migrate` here before the gateway starts.

# --- Later issues: provider simulator -------------------------------------------------------
# Start test/sim on loopback and point OMNIGATE_META_BASE_URL, OMNIGATE_QR_BASE_URL and
# OMNIGATE_SMS_BASE_URL at it so the quickstart sends without real provider accounts.

host=${OMNIGATE_LISTEN%:*}
port=${OMNIGATE_LISTEN##*:}
host=${host#[}
host=${host%]}
[[ -z "$host" || "$host" == "0.0.0.0" ]] && host=127.0.0.1
[[ "$host" == "::" ]] && host=::1
if [[ "$host" == *:* ]]; then url_host="[$host]"; else url_host=$host; fi
BASE="http://$url_host:$port"

echo "run.sh: starting omnigate on $OMNIGATE_LISTEN (Ctrl-C to stop)"
# Own process group: Ctrl-C reaches only this script, which forwards one SIGTERM so the
# supervisor drains once (a second signal would mean "stop at once").
set -m
"$BIN" serve &
pid=$!
set +m

stop() {
  trap - INT TERM
  echo
  echo "run.sh: stopping omnigate (graceful drain)"
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null
  exit $?
}
trap stop INT TERM

for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null "$BASE/healthz" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    echo "run.sh: omnigate exited during start" >&2
    exit 1
  fi
  sleep 0.1
done

echo
echo "\$ curl -si $BASE/healthz"
curl -si "$BASE/healthz" || true
echo
echo

# --- Later issues: tenant, token and a sample send ------------------------------------------
# Create a tenant with the unified API enabled and a token (`"$BIN" admin ...`), then show
#   curl -si -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
#        -d '{"to":"+6281234567890","text":"hello"}' "$BASE/api/omni/send"

echo "run.sh: omnigate is running on $BASE (pid $pid); press Ctrl-C to stop"
set +e
wait "$pid"
rc=$?
# `wait` returns early when a trapped signal arrives; the trap handles that case.
exit $rc
