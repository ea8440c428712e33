#!/usr/bin/env bash
# PostgreSQL with automatic failover on one machine: pg_auto_failover (Debian's
# postgresql-15-auto-failover) with a monitor and two data nodes, all on 127.0.0.1, under one
# folder. For trying failover out and for the tests; docs/operations.md explains what each
# piece does and how a production setup differs (three machines, not one).
#
#   bash deploy/ha.sh start  [DIR] [PORT]  creates what is missing (monitor on PORT, node1 on
#                                          PORT+1, node2 on PORT+2), starts what is not
#                                          running, waits until one node is primary and the
#                                          other its synchronous secondary, creates role and
#                                          database "omnigate", then prints ONE line on stdout:
#                                          the gateway's OMNIGATE_DATABASE_URL (both nodes,
#                                          target_session_attrs=read-write).
#   bash deploy/ha.sh stop   [DIR]         stops the nodes, then the monitor (pg_autoctl stop).
#   bash deploy/ha.sh status [DIR]         `pg_autoctl show state` (exit 3 when the monitor is down).
#   bash deploy/ha.sh url    [DIR]         the gateway's OMNIGATE_DATABASE_URL.
#   bash deploy/ha.sh primary [DIR]        the name of the node the monitor holds primary.
#   bash deploy/ha.sh kill NODE [DIR]      SIGKILL of everything of node NODE (node1, node2):
#                                          its pg_autoctl and its postgres, as when its machine
#                                          dies. `start` brings it back (it rejoins as secondary).
#
# DIR defaults to .omnigate/ha under the repository root; PORT to the one DIR was created with,
# else 25440 (below Linux's ephemeral range, so an outgoing connection cannot hold it).
# Layout: DIR/monitor, DIR/node1, DIR/node2 (data directories), DIR/<name>.log (pg_autoctl's
# log), DIR/config, DIR/share, DIR/run (pg_autoctl's own files: its XDG
# directories point there, so nothing is written under the user's home), DIR/port.
#
# Failover is tightened from pg_auto_failover's defaults (about 50 s: a node is declared
# unhealthy after 20 s without a report, then the primary gets 30 s to demote) to a few
# seconds on loopback; the settings are in monitor_conf and keeper_conf below and their
# trade-offs in docs/operations.md. Authentication is `trust` on 127.0.0.1 and TLS is off: a
# setup for one machine, not for a network.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
NODE=
if [[ "$cmd" == kill ]]; then
  NODE=${2:-}
  shift || true
fi
DIR=${2:-$ROOT/.omnigate/ha}
PORT_ARG=${3:-}
DEFAULT_PORT=25440
[[ "$DIR" = /* ]] || DIR=$PWD/$DIR
NODES=(node1 node2)
ROLE=omnigate
DATABASE=omnigate

log() { echo "ha.sh: $*" >&2; }
die() { log "$*"; exit 1; }

usage() {
  echo "usage: bash deploy/ha.sh start [DIR] [PORT] | stop [DIR] | status [DIR] | url [DIR] | primary [DIR]" \
    "| kill NODE [DIR]" >&2
  exit 2
}

# shellcheck source=deploy/pglib.sh
source "$(dirname "$0")/pglib.sh"

command -v pg_autoctl >/dev/null ||
  die "pg_autoctl not found: install postgresql-15-auto-failover (bash deploy/install-deps.sh)"

# pg_autoctl keeps its configuration, state and pid files under the XDG directories: ours.
autoctl() {
  as_pg env HOME="$DIR" XDG_CONFIG_HOME="$DIR/config" XDG_DATA_HOME="$DIR/share" XDG_RUNTIME_DIR="$DIR/run" \
    PATH="$BIN:/usr/bin:/bin" pg_autoctl "$@"
}

stored_port() { if [[ -f "$DIR/port" ]]; then tr -dc 0-9 <"$DIR/port"; fi; }
port_of() { # name
  local base
  base=$(stored_port)
  case "$1" in
  monitor) echo "$base" ;;
  node1) echo $((base + 1)) ;;
  node2) echo $((base + 2)) ;;
  esac
}
monitor_url() { echo "postgres://autoctl_node@127.0.0.1:$(port_of monitor)/pg_auto_failover?sslmode=disable"; }
gateway_url() {
  echo "postgresql://$ROLE@127.0.0.1:$(port_of node1),127.0.0.1:$(port_of node2)/$DATABASE?target_session_attrs=read-write"
}
monitor_sql() { "$BIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$(monitor_url)" -c "$1"; }

# A process that runs (a zombie has exited and only waits to be reaped).
live() { local st; st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) && [[ -n "$st" && "$st" != Z ]]; }
# The pid of a node's `pg_autoctl run`, from pg_autoctl's own pid file (it refuses to run twice
# on one data directory), when it runs.
pid_of() {
  local f=$DIR/run/pg_autoctl$DIR/$1/pg_autoctl.pid p
  [[ -f "$f" ]] || return 1
  p=$(head -n1 "$f" | tr -dc 0-9)
  [[ -n "$p" ]] && live "$p" && echo "$p"
}
running() { pid_of "$1" >/dev/null; }
# Its process group: the setsid of run_node made one per node.
group_of() { ps -o pgid= -p "$1" 2>/dev/null | tr -dc 0-9; }
group_alive() { local p; for p in $(pgrep -g "$1" 2>/dev/null); do live "$p" && return 0; done; return 1; }

# Settings of the monitor (pg_auto_failover's extension reads them from its postgresql.conf).
monitor_conf() {
  cat <<'CONF'
# Written by deploy/ha.sh at every start. Failover detection, tightened for loopback (defaults
# in parentheses; see docs/operations.md before copying these to a network).
pgautofailover.health_check_period = 1000            # (5000 ms) between two health checks
pgautofailover.health_check_timeout = 1000           # (5000 ms) connect timeout of a check
pgautofailover.health_check_max_retries = 1          # (2) failed checks before "unhealthy"
pgautofailover.health_check_retry_delay = 500        # (2000 ms)
pgautofailover.node_considered_unhealthy_timeout = 2000  # (20000 ms) without a keeper report
pgautofailover.primary_demote_timeout = 4000         # (30000 ms) > network_partition_timeout
pgautofailover.startup_grace_period = 1000           # (10000 ms) after the monitor starts
listen_addresses = '127.0.0.1'
CONF
}

# Settings of each node's keeper (pg_autoctl config set), seconds.
keeper_conf() {
  cat <<'CONF'
timeout.network_partition_timeout 2
timeout.postgresql_restart_failure_timeout 5
timeout.postgresql_restart_failure_max_retries 2
CONF
}

# Starts `pg_autoctl run` for one data directory, detached: its own session and process group
# (stop and kill act on the group), log in DIR/<name>.log.
run_node() {
  local name=$1
  running "$name" && return 0
  # exec: the background process itself becomes the session (and process group) leader, and
  # holds none of our file descriptors.
  (cd / && exec setsid "${AS[@]}" env HOME="$DIR" XDG_CONFIG_HOME="$DIR/config" XDG_DATA_HOME="$DIR/share" \
    XDG_RUNTIME_DIR="$DIR/run" PATH="$BIN:/usr/bin:/bin" \
    pg_autoctl run --pgdata "$DIR/$name" >>"$DIR/$name.log" 2>&1 </dev/null) &
  local i
  for i in $(seq 1 100); do
    running "$name" && return 0
    sleep 0.1
  done
  die "pg_autoctl run for $name did not start; see $DIR/$name.log"
}

# Waits until `sql` on the monitor returns "t" (up to `secs`).
wait_monitor() { # secs sql what
  local i
  for i in $(seq 1 $(($1 * 10))); do
    [[ "$(monitor_sql "$2" 2>/dev/null || true)" == t ]] && return 0
    sleep 0.1
  done
  die "$3 not reached within $1 s; see $DIR/*.log and: bash deploy/ha.sh status $DIR"
}

# Reported state = assigned state for every node: the monitor has nothing left to do.
SETTLED="SELECT count(*) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary') = 1
            AND count(*) FILTER (WHERE reportedstate = 'secondary' AND goalstate = 'secondary') = 1
          FROM pgautofailover.node"

create_monitor() {
  local port
  port=$(port_of monitor)
  log "creating the monitor on 127.0.0.1:$port"
  autoctl create monitor --pgdata "$DIR/monitor" --pgport "$port" --hostname 127.0.0.1 --auth trust \
    --no-ssl >>"$DIR/monitor.log" 2>&1 || die "pg_autoctl create monitor failed; see $DIR/monitor.log"
  autoctl config set --pgdata "$DIR/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
  echo "include_if_exists = 'omnigate-ha.conf'" | as_pg tee -a "$DIR/monitor/postgresql.conf" >/dev/null
}

# pg_autoctl create postgres initialises the first node as a single primary and the second as
# its standby (pg_basebackup from the primary, which must be running by then).
create_node() {
  local name=$1 port
  port=$(port_of "$name")
  log "creating $name on 127.0.0.1:$port"
  autoctl create postgres --pgdata "$DIR/$name" --pgport "$port" --hostname 127.0.0.1 --listen 127.0.0.1 \
    --name "$name" --dbname "$DATABASE" --auth trust --no-ssl --monitor "$(monitor_url)" \
    >>"$DIR/$name.log" 2>&1 || die "pg_autoctl create postgres ($name) failed; see $DIR/$name.log"
  local key val
  while read -r key val; do
    autoctl config set --pgdata "$DIR/$name" "$key" "$val" >/dev/null
  done < <(keeper_conf)
}

do_start() {
  prepare_dir
  BIN=$(bindir_for)
  local port=${PORT_ARG:-$(stored_port)}
  port=${port:-$DEFAULT_PORT}
  [[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65533 ]] || die "bad PORT '$port'"
  if [[ -n "$PORT_ARG" && -f "$DIR/port" && "$PORT_ARG" != "$(stored_port)" ]]; then
    log "warning: $DIR was created with port $(stored_port); PORT $PORT_ARG ignored"
  else
    echo "$port" | as_pg tee "$DIR/port" >/dev/null
  fi
  as_pg mkdir -p "$DIR/config" "$DIR/share" "$DIR/run"
  as_pg chmod 0700 "$DIR/run"

  [[ -f "$DIR/monitor/PG_VERSION" ]] || create_monitor
  monitor_conf | as_pg tee "$DIR/monitor/omnigate-ha.conf" >/dev/null
  run_node monitor
  wait_monitor 60 "SELECT true" "the monitor answering"
  # Nodes that exist are started together: whichever was primary comes back first.
  local name fresh=()
  for name in "${NODES[@]}"; do
    if [[ -f "$DIR/$name/PG_VERSION" ]]; then run_node "$name"; else fresh+=("$name"); fi
  done
  for name in "${fresh[@]}"; do
    create_node "$name"
    run_node "$name"
    # The next node is built from this one: it must be up as primary (or secondary) first.
    wait_monitor 120 "SELECT count(*) > 0 FROM pgautofailover.node WHERE nodename = '$name'
                        AND reportedstate IN ('single', 'primary', 'wait_primary', 'secondary')
                        AND reportedstate = goalstate" "$name running"
  done
  wait_monitor 180 "$SETTLED" "a primary with its secondary"
  # After a restart the monitor may still show the states reported before the stop: wait for
  # the primary itself.
  local i
  for i in $(seq 1 600); do
    "$BIN/psql" -XAtq -d "$(gateway_url | sed "s|$ROLE@|postgres@|; s|/$DATABASE?|/postgres?|")" -c "SELECT 1" \
      >/dev/null 2>&1 && break
    ((i < 600)) || die "no read-write node answers; see $DIR/*.log"
    sleep 0.1
  done
  wait_monitor 60 "$SETTLED" "a primary with its secondary"
  local primary
  primary=$(monitor_sql "SELECT nodename FROM pgautofailover.node WHERE reportedstate = 'primary'")
  "$BIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "postgresql://postgres@127.0.0.1:$(port_of "$primary")/postgres" >&2 <<SQL
SELECT 'CREATE ROLE $ROLE LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') \gexec
ALTER DATABASE $DATABASE OWNER TO $ROLE;
SQL
  log "$primary is primary; logs in $DIR; state: bash deploy/ha.sh status $DIR"
  gateway_url
}

do_stop() {
  locate_dir
  BIN=$(bindir_for)
  local name pid group
  for name in "${NODES[@]}" monitor; do
    pid=$(pid_of "$name") || continue
    group=$(group_of "$pid")
    log "stopping $name"
    autoctl stop --pgdata "$DIR/$name" >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      group_alive "$group" || break
      sleep 0.1
    done
    if group_alive "$group"; then
      log "$name did not stop within 30 s: SIGKILL"
      kill -KILL -- "-$group" 2>/dev/null || true
    fi
  done
}

do_kill() {
  locate_dir
  [[ " ${NODES[*]} " == *" $NODE "* ]] || die "kill: NODE must be one of: ${NODES[*]}"
  local pid group
  pid=$(pid_of "$NODE") || die "$NODE is not running"
  group=$(group_of "$pid")
  [[ -n "$group" && "$group" != 0 ]] || die "$NODE: no process group"
  # The whole process group: pg_autoctl, its services, the postmaster and its backends.
  kill -KILL -- "-$group" 2>/dev/null || true
  for _ in $(seq 1 100); do
    group_alive "$group" || break
    sleep 0.05
  done
  log "killed $NODE (process group $group)"
}

do_status() {
  locate_dir
  BIN=$(bindir_for)
  running monitor || { echo "stopped"; exit 3; }
  autoctl show state --pgdata "$DIR/monitor"
}

case "$cmd" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
url) locate_dir; gateway_url ;;
primary)
  locate_dir
  BIN=$(bindir_for)
  monitor_sql "SELECT nodename FROM pgautofailover.node WHERE goalstate IN ('primary', 'wait_primary', 'single')"
  ;;
kill) do_kill ;;
*) usage ;;
esac
