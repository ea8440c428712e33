#!/usr/bin/env bash
# Local scale-out on loopback: one PostgreSQL cluster (deploy/pg.sh), `omnigate migrate`, the
# provider simulator (unless provider base URLs are set), N `omnigate serve` instances and
# haproxy (deploy/haproxy.cfg) in front of them.
#
#   bash deploy/cluster.sh start [N]   N instances (default 3, at most 64); prints the front URL
#   bash deploy/cluster.sh status      each process with pid, port and /readyz; exit 0 when all run
#   bash deploy/cluster.sh stop        drains the instances (SIGTERM, in parallel), then stops
#                                      haproxy, the simulator and PostgreSQL
#
# Environment:
#   OMNIGATE_CLUSTER_DIR        state, logs, pids, secrets (default .omnigate/cluster)
#   OMNIGATE_CLUSTER_PORT       haproxy front port (default 8090)
#   OMNIGATE_CLUSTER_BASE_PORT  first instance port (default front + 1); instance i listens on
#                               base + i - 1. Also used: stats page front + 98, simulator
#                               front + 99, PostgreSQL front + 100 (all on 127.0.0.1).
#   OMNIGATE_BIN                binary (default build/src/omnigate, built when missing or stale)
#   OMNIGATE_SIM_BIN            simulator (default: test/sim/omnigate-sim of the same build)
#   OMNIGATE_WORKERS            workers per instance (default 1), passed as --workers
#   OMNIGATE_DATABASE_URL       use this database instead of starting one
#   OMNIGATE_SECRET, OMNIGATE_ADMIN_TOKEN
#                               as deploy/run.sh: when unset, made once and kept (mode 0600)
#                               in the state dir, so tokens stay valid across restarts
#   any other OMNIGATE_* setting (provider URLs and credentials, limits, timeouts) is passed
#   through to every instance. Setting any of OMNIGATE_META_BASE_URL, OMNIGATE_QR_BASE_URL,
#   OMNIGATE_SMS_BASE_URL disables the simulator.
# State: DIR/cluster.env (ports, shell syntax), DIR/<name>.pid, DIR/<name>.log, DIR/haproxy.cfg
# (deploy/haproxy.cfg with its server lines replaced by the N instances), DIR/haproxy.sock.
set -euo pipefail

CALLER_PWD=$PWD
cd "$(dirname "$0")/.."
ROOT=$(pwd)
abs() { [[ "$1" = /* ]] && echo "$1" || echo "$CALLER_PWD/$1"; }
DIR=$(abs "${OMNIGATE_CLUSTER_DIR:-$ROOT/.omnigate/cluster}")
FRONT=${OMNIGATE_CLUSTER_PORT:-8090}
BASE=${OMNIGATE_CLUSTER_BASE_PORT:-$((FRONT + 1))}
STATS_PORT=$((FRONT + 98))
SIM_PORT=$((FRONT + 99))
PG_PORT=$((FRONT + 100))
BIN=$(abs "${OMNIGATE_BIN:-$ROOT/build/src/omnigate}")
SIM=$(abs "${OMNIGATE_SIM_BIN:-$(dirname "$BIN")/../test/sim/omnigate-sim}")
WORKERS=${OMNIGATE_WORKERS:-1}
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
cmd=${1:-}
N=${2:-3}

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }
pid_of() { [[ -f "$DIR/$1.pid" ]] && cat "$DIR/$1.pid"; }
# A process that runs (a zombie does not: it has exited and waits for init to reap it).
live() { local st; st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) && [[ -n "$st" && "$st" != Z ]]; }
alive() { local p; p=$(pid_of "$1") && [[ -n "$p" ]] && live "$p"; }
# Anything left in the process group (a supervisor and its workers share one: setsid).
group_alive() { local p; for p in $(pgrep -g "$1" 2>/dev/null); do live "$p" && return 0; done; return 1; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
readyz() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$1/readyz" 2>/dev/null || true; }
wait_ready() { # port name: up to 10 s for /readyz 200
  for _ in $(seq 1 100); do
    [[ "$(readyz "$1")" == 200 ]] && return 0
    alive "$2" || return 1
    sleep 0.1
  done
  return 1
}
instances() { local f; for f in "$DIR"/og*.pid; do [[ -e "$f" ]] && basename "$f" .pid; done | sort -V; }

start() {
  [[ "$N" =~ ^[1-9][0-9]?$ && "$N" -le 64 ]] || die "N must be 1-64"
  local last=$((BASE + N - 1)) p
  for p in "$FRONT" "$STATS_PORT" "$SIM_PORT" "$PG_PORT"; do
    ((p < BASE || p > last)) || die "instance ports $BASE-$last overlap port $p (see the header)"
  done
  mkdir -p "$DIR"
  if alive haproxy || [[ -n "$(instances)" ]]; then die "already running in $DIR (stop it first)"; fi
  for p in "$FRONT" "$STATS_PORT" $(seq "$BASE" "$last"); do
    if port_busy "$p"; then die "127.0.0.1:$p is in use (set OMNIGATE_CLUSTER_PORT / _BASE_PORT)"; fi
  done
  if ! command -v curl >/dev/null || [[ ! -x "$HAPROXY" ]]; then bash deploy/install-deps.sh >&2; fi
  if [[ -z "${OMNIGATE_BIN:-}" ]]; then # the default binary: build it (a no-op when current)
    [[ -f build/build.ninja ]] || meson setup build -Dbuildtype=release >&2
    ninja -C build >&2
  fi
  [[ -x "$BIN" ]] || die "$BIN: not found (OMNIGATE_BIN)"

  local pg_started=0
  if [[ -z "${OMNIGATE_DATABASE_URL:-}" ]]; then
    port_busy "$PG_PORT" && [[ ! -e "$DIR/pg" ]] && die "127.0.0.1:$PG_PORT is in use (PostgreSQL)"
    OMNIGATE_DATABASE_URL=$(bash deploy/pg.sh start "$DIR/pg" "$PG_PORT")
    pg_started=1
  fi
  export OMNIGATE_DATABASE_URL
  # Secrets, as deploy/run.sh makes them: once, kept in the state dir.
  if [[ -z "${OMNIGATE_SECRET:-}" ]]; then
    [[ -f "$DIR/secret" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/secret")
    OMNIGATE_SECRET=$(cat "$DIR/secret")
  fi
  local token_note="from the environment"
  if [[ -z "${OMNIGATE_ADMIN_TOKEN:-}" ]]; then
    [[ -f "$DIR/admin-token" ]] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/admin-token")
    OMNIGATE_ADMIN_TOKEN=$(cat "$DIR/admin-token")
    token_note="in $DIR/admin-token"
  fi
  export OMNIGATE_SECRET OMNIGATE_ADMIN_TOKEN
  "$BIN" migrate >&2 || { log "omnigate migrate failed"; stop; exit 1; }

  local sim=0
  if [[ -z "${OMNIGATE_SMS_BASE_URL:-}${OMNIGATE_META_BASE_URL:-}${OMNIGATE_QR_BASE_URL:-}" && -x "$SIM" ]]; then
    port_busy "$SIM_PORT" && die "127.0.0.1:$SIM_PORT is in use (simulator)"
    export OMNIGATE_QR_API_KEY=${OMNIGATE_QR_API_KEY:-demo-waha-key}
    export OMNIGATE_SMS_ACCOUNT_SID=${OMNIGATE_SMS_ACCOUNT_SID:-AC00000000000000000000000000demo}
    export OMNIGATE_SMS_AUTH_TOKEN=${OMNIGATE_SMS_AUTH_TOKEN:-demo-sms-auth-token}
    OMNIGATE_ACCESS_LOG=false setsid "$SIM" serve --listen "127.0.0.1:$SIM_PORT" --workers 1 \
      >"$DIR/sim.log" 2>&1 < /dev/null &
    echo $! > "$DIR/sim.pid"
    export OMNIGATE_META_BASE_URL=http://127.0.0.1:$SIM_PORT OMNIGATE_QR_BASE_URL=http://127.0.0.1:$SIM_PORT
    export OMNIGATE_SMS_BASE_URL=http://127.0.0.1:$SIM_PORT
    sim=1
  fi

  # setsid: each instance (supervisor + workers) is its own process group, and an instance
  # killed by a test does not take the shell's group with it.
  local servers="" ports="" i port
  for i in $(seq 1 "$N"); do
    port=$((BASE + i - 1))
    setsid "$BIN" serve --listen "127.0.0.1:$port" --workers "$WORKERS" >"$DIR/og$i.log" 2>&1 < /dev/null &
    echo $! > "$DIR/og$i.pid"
    servers+="    server og$i 127.0.0.1:$port check"$'\n'
    ports+="$port "
  done
  for i in $(seq 1 "$N"); do
    port=$((BASE + i - 1))
    if ! wait_ready "$port" "og$i"; then
      log "instance og$i (127.0.0.1:$port) is not ready; the end of $DIR/og$i.log:"
      tail -n 5 "$DIR/og$i.log" >&2 || true
      stop
      exit 1
    fi
  done

  # deploy/haproxy.cfg with its server lines replaced by the N instances.
  awk -v servers="$servers" '/^    server og[0-9]+ / { if (!done) { printf "%s", servers; done = 1 } next } { print }' \
    deploy/haproxy.cfg > "$DIR/haproxy.cfg"
  OMNIGATE_LB_BIND=127.0.0.1:$FRONT OMNIGATE_LB_STATS_BIND=127.0.0.1:$STATS_PORT \
    OMNIGATE_LB_STATS_SOCKET=$DIR/haproxy.sock setsid "$HAPROXY" -db -f "$DIR/haproxy.cfg" \
    >"$DIR/haproxy.log" 2>&1 < /dev/null &
  echo $! > "$DIR/haproxy.pid"
  if ! wait_ready "$FRONT" haproxy; then
    log "haproxy on 127.0.0.1:$FRONT is not ready; the end of $DIR/haproxy.log:"
    tail -n 5 "$DIR/haproxy.log" >&2 || true
    stop
    exit 1
  fi

  cat > "$DIR/cluster.env" <<EOF
# written by deploy/cluster.sh start; read by status and stop
FRONT_PORT=$FRONT
STATS_PORT=$STATS_PORT
INSTANCE_PORTS="${ports% }"
WORKERS=$WORKERS
SIM_PORT=$([[ $sim == 1 ]] && echo "$SIM_PORT")
PG_STARTED=$pg_started
PG_PORT=$([[ $pg_started == 1 ]] && echo "$PG_PORT")
EOF
  echo "http://127.0.0.1:$FRONT"
  log "$N instances (127.0.0.1:$BASE-$last, $WORKERS worker(s) each) behind haproxy on http://127.0.0.1:$FRONT"
  log "haproxy stats: http://127.0.0.1:$STATS_PORT/ (socket $DIR/haproxy.sock); admin token $token_note"
  log "logs and state in $DIR; stop with: bash deploy/cluster.sh stop"
}

stop_one() { # name [seconds]: SIGTERM to the main process, wait for its whole group, then SIGKILL
  local name=$1 limit=${2:-45} pid
  pid=$(pid_of "$name") || return 0
  [[ -n "$pid" ]] || { rm -f "$DIR/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((limit * 10))); do
    group_alive "$pid" || live "$pid" || break
    sleep 0.1
  done
  if group_alive "$pid" || live "$pid"; then
    log "$name: still running after ${limit}s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/$name.pid"
}

stop() {
  [[ -d "$DIR" ]] || { log "nothing to stop in $DIR"; return 0; }
  local name
  # Instances first, in parallel: each drains (OMNIGATE_DRAIN_DELAY_MS + in-flight work) while
  # haproxy, still up, routes the rest to the others.
  # `wait` on these jobs only: when start calls stop, the shell's other children are the
  # very processes being stopped.
  local jobs=()
  for name in $(instances); do stop_one "$name" 45 & jobs+=($!); done
  ((${#jobs[@]} == 0)) || wait "${jobs[@]}"
  jobs=()
  stop_one haproxy 10 & jobs+=($!)
  stop_one sim 10 & jobs+=($!)
  if [[ -e "$DIR/pg" ]]; then bash deploy/pg.sh stop "$DIR/pg" >/dev/null 2>&1 || true; fi
  wait "${jobs[@]}"
  rm -f "$DIR/cluster.env" "$DIR/haproxy.sock"
  log "stopped"
}

status() {
  [[ -f "$DIR/cluster.env" ]] || { echo "not running ($DIR/cluster.env absent)"; return 3; }
  # shellcheck disable=SC1091,SC2153
  . "$DIR/cluster.env"
  local rc=0 i=0 name port
  for name in $(instances); do
    port=$(echo "$INSTANCE_PORTS" | cut -d' ' -f"${name#og}")
    if alive "$name"; then echo "$name: pid $(pid_of "$name"), 127.0.0.1:$port, /readyz $(readyz "$port")"
    else echo "$name: stopped (127.0.0.1:$port)"; rc=3; fi
    i=$((i + 1))
  done
  if alive haproxy; then echo "haproxy: pid $(pid_of haproxy), 127.0.0.1:$FRONT_PORT, /readyz $(readyz "$FRONT_PORT"), stats 127.0.0.1:$STATS_PORT"
  else echo "haproxy: stopped"; rc=3; fi
  if [[ -n "$SIM_PORT" ]]; then
    if alive sim; then echo "simulator: pid $(pid_of sim), 127.0.0.1:$SIM_PORT"; else echo "simulator: stopped"; rc=3; fi
  fi
  # shellcheck disable=SC2153
  if [[ "$PG_STARTED" == 1 ]]; then echo "postgresql: $(bash deploy/pg.sh status "$DIR/pg" 2>/dev/null || true)"; fi
  ((i > 0)) || rc=3
  return $rc
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
