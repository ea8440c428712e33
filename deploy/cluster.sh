#!/usr/bin/env bash
# Local scale-out on loopback: one PostgreSQL cluster, the provider simulator (unless provider
# base URLs are set), N omnigate instances and haproxy (deploy/haproxy.cfg) in front.
#
#   bash deploy/cluster.sh start [N]   N instances (default 3), prints the front URL and a token
#   bash deploy/cluster.sh status      instances, haproxy and their pids
#   bash deploy/cluster.sh stop        drains the instances (SIGTERM), stops haproxy, simulator, PostgreSQL
#
# Environment: OMNIGATE_CLUSTER_DIR (state, default .omnigate/cluster), OMNIGATE_CLUSTER_PORT
# (haproxy front, default 8090; instances on the next N ports), OMNIGATE_BIN (default
# build/src/omnigate, built in release mode when missing), OMNIGATE_WORKERS (per instance,
# default 1), and any OMNIGATE_* setting, passed to every instance.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${OMNIGATE_CLUSTER_DIR:-$ROOT/.omnigate/cluster}
FRONT=${OMNIGATE_CLUSTER_PORT:-8090}
BIN=${OMNIGATE_BIN:-$ROOT/build/src/omnigate}
SIM=$(dirname "$BIN")/../test/sim/omnigate-sim
cmd=${1:-}
N=${2:-3}

pidfile_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  if [[ ! "$N" =~ ^[1-9][0-9]?$ ]]; then echo "cluster.sh: N must be 1-99" >&2; exit 2; fi
  bash deploy/install-deps.sh >/dev/null
  if [[ -z "${OMNIGATE_BIN:-}" ]]; then # the default binary: build it (a no-op when current)
    [[ -f build/build.ninja ]] || meson setup build -Dbuildtype=release >/dev/null
    ninja -C build >/dev/null
  fi
  mkdir -p "$DIR"
  if pidfile_alive "$DIR/haproxy.pid"; then echo "cluster.sh: already running (stop it first)" >&2; exit 1; fi
  if [[ -z "${OMNIGATE_DATABASE_URL:-}" ]]; then
    OMNIGATE_DATABASE_URL=$(bash deploy/pg.sh start "$DIR/pg" "$((FRONT + 100))")
  fi
  export OMNIGATE_DATABASE_URL
  [[ -f "$DIR/secret" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/secret")
  [[ -f "$DIR/admin-token" ]] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/admin-token")
  export OMNIGATE_SECRET=${OMNIGATE_SECRET:-$(cat "$DIR/secret")}
  export OMNIGATE_ADMIN_TOKEN=${OMNIGATE_ADMIN_TOKEN:-$(cat "$DIR/admin-token")}
  "$BIN" migrate

  if [[ -z "${OMNIGATE_SMS_BASE_URL:-}${OMNIGATE_META_BASE_URL:-}${OMNIGATE_QR_BASE_URL:-}" && -x "$SIM" ]]; then
    local sim_port=$((FRONT + 99))
    export OMNIGATE_QR_API_KEY=${OMNIGATE_QR_API_KEY:-demo-waha-key}
    export OMNIGATE_SMS_ACCOUNT_SID=${OMNIGATE_SMS_ACCOUNT_SID:-AC00000000000000000000000000demo}
    export OMNIGATE_SMS_AUTH_TOKEN=${OMNIGATE_SMS_AUTH_TOKEN:-demo-sms-auth-token}
    OMNIGATE_ACCESS_LOG=false setsid "$SIM" serve --listen "127.0.0.1:$sim_port" >"$DIR/sim.log" 2>&1 &
    echo $! > "$DIR/sim.pid"
    export OMNIGATE_META_BASE_URL=http://127.0.0.1:$sim_port OMNIGATE_QR_BASE_URL=http://127.0.0.1:$sim_port
    export OMNIGATE_SMS_BASE_URL=http://127.0.0.1:$sim_port
  fi

  local servers=""
  for i in $(seq 1 "$N"); do
    local port=$((FRONT + i))
    OMNIGATE_WORKERS=${OMNIGATE_WORKERS:-1} setsid "$BIN" serve --listen "127.0.0.1:$port" \
      >"$DIR/og$i.log" 2>&1 &
    echo $! > "$DIR/og$i.pid"
    servers+="    server og$i 127.0.0.1:$port check"$'\n'
  done
  for i in $(seq 1 "$N"); do
    for _ in $(seq 1 100); do
      curl -fsS -o /dev/null "http://127.0.0.1:$((FRONT + i))/readyz" 2>/dev/null && break
      sleep 0.1
    done
  done

  # deploy/haproxy.cfg with its three server lines replaced by N.
  awk -v servers="$servers" '/^    server og[0-9]+ / { if (!done) { printf "%s", servers; done = 1 } next } { print }' \
    deploy/haproxy.cfg > "$DIR/haproxy.cfg"
  OMNIGATE_LB_BIND=127.0.0.1:$FRONT OMNIGATE_LB_STATS_BIND=127.0.0.1:$((FRONT + 98)) \
    OMNIGATE_LB_STATS_SOCKET=$DIR/haproxy.sock setsid haproxy -db -f "$DIR/haproxy.cfg" >"$DIR/haproxy.log" 2>&1 &
  echo $! > "$DIR/haproxy.pid"
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$FRONT/readyz" 2>/dev/null && break
    sleep 0.1
  done
  echo "cluster.sh: $N instances behind haproxy on http://127.0.0.1:$FRONT (stats http://127.0.0.1:$((FRONT + 98))/)"
  echo "cluster.sh: admin token in $DIR/admin-token; state and logs in $DIR"
}

stop_pid() { # pidfile
  if pidfile_alive "$1"; then
    local pid
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 450); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

stop() {
  [[ -d "$DIR" ]] || { echo "cluster.sh: nothing to stop"; return 0; }
  for f in "$DIR"/og*.pid; do [[ -e "$f" ]] && stop_pid "$f" & done
  wait
  stop_pid "$DIR/haproxy.pid"
  stop_pid "$DIR/sim.pid"
  [[ -d "$DIR/pg" || -L "$DIR/pg" ]] && bash deploy/pg.sh stop "$DIR/pg" >/dev/null 2>&1 || true
  echo "cluster.sh: stopped"
}

status() {
  local rc=3
  for f in "$DIR"/og*.pid "$DIR/haproxy.pid" "$DIR/sim.pid"; do
    [[ -e "$f" ]] || continue
    if pidfile_alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; rc=0
    else echo "$(basename "$f" .pid): stopped"; fi
  done
  return $rc
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
