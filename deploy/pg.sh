#!/usr/bin/env bash
# A private PostgreSQL cluster for the README quickstart and the benchmarks.
#
#   bash deploy/pg.sh start  [DIR] [PORT]  initdb DIR if it holds no cluster, start the server
#                                          unless it already runs, create role and database
#                                          "omnigate", then print ONE line on stdout: the
#                                          OMNIGATE_DATABASE_URL (TCP on 127.0.0.1:PORT).
#   bash deploy/pg.sh stop   [DIR]         fast shutdown; no-op when it is not running.
#   bash deploy/pg.sh status [DIR]         "running: <url>" (exit 0) or "stopped" (exit 3).
#
# DIR defaults to .omnigate/pg under the repository root; a relative DIR is taken relative to
# the caller's working directory. PORT defaults to the port DIR was created with, else 55432.
# Layout: DIR/data (the cluster), DIR/run (its unix socket), DIR/port, DIR/log (server log).
# Durable settings: fsync=on, synchronous_commit=on (the benchmarks measure real commits).
# Everything but the URL goes to stderr.
#
# As root: PostgreSQL refuses to run as root, so the server runs as the `postgres` user
# (created by the postgresql package; a system user `omnigate-pg` is created if it is
# missing) and DIR is owned by it. If that user cannot reach DIR (a clone under /root, whose
# mode is 0700), no permission is loosened: the cluster lives in /var/lib/omnigate/pg-<hash
# of DIR> and DIR becomes a symlink to it (`rm -rf` of the symlink does not remove the data;
# `bash deploy/pg.sh stop DIR && rm -rf "$(readlink -f DIR)" DIR` does).
#
# Authentication is `trust` for local connections (unix socket and 127.0.0.1 only): a
# development cluster, not a production setup.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
DIR=${2:-$ROOT/.omnigate/pg}
PORT_ARG=${3:-}
DEFAULT_PORT=55432
[[ "$DIR" = /* ]] || DIR=$PWD/$DIR

log() { echo "pg.sh: $*" >&2; }
die() { log "$*"; exit 1; }

usage() {
  echo "usage: bash deploy/pg.sh start [DIR] [PORT] | stop [DIR] | status [DIR]" >&2
  exit 2
}

# shellcheck source=deploy/pglib.sh
source "$(dirname "$0")/pglib.sh"

stored_port() { if [[ -f "$DIR/port" ]]; then tr -dc 0-9 <"$DIR/port"; fi; }

url() { echo "postgresql://omnigate@127.0.0.1:$1/omnigate"; }

running() {
  [[ -f "$DIR/data/PG_VERSION" && -f "$DIR/data/postmaster.pid" ]] || return 1
  local bin
  bin=$(bindir_for "$(cat "$DIR/data/PG_VERSION")")
  as_pg "$bin/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

# The port the running server really listens on (line 4 of postmaster.pid).
live_port() { sed -n 4p "$DIR/data/postmaster.pid" 2>/dev/null | tr -dc 0-9; }

# --- commands -------------------------------------------------------------------------------
do_start() {
  prepare_dir
  local bin port
  if [[ ! -f "$DIR/data/PG_VERSION" ]]; then
    bin=$(bindir_for)
    [[ ! -e "$DIR/data" || -z "$(ls -A "$DIR/data" 2>/dev/null)" ]] ||
      die "$DIR/data exists but holds no cluster; remove it first"
    log "creating a PostgreSQL $("$bin/postgres" --version | awk '{print $3}') cluster in $DIR"
    local locale=C.UTF-8
    locale -a 2>/dev/null | grep -qix 'c.utf-\?8' || locale=C
    local quiet=()
    "$bin/initdb" --help | grep -q -- --no-instructions && quiet=(--no-instructions)
    as_pg "$bin/initdb" -D "$DIR/data" --auth=trust -U postgres -E UTF8 --locale="$locale" "${quiet[@]}" >&2
  else
    bin=$(bindir_for "$(cat "$DIR/data/PG_VERSION")")
  fi
  as_pg mkdir -p "$DIR/run"

  if running; then
    port=$(live_port)
    [[ -z "$PORT_ARG" || "$PORT_ARG" == "$port" ]] ||
      log "warning: already running on port $port; PORT $PORT_ARG ignored (stop it first)"
    log "already running (port $port, data $DIR/data)"
  else
    port=${PORT_ARG:-$(stored_port)}
    port=${port:-$DEFAULT_PORT}
    [[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65535 ]] || die "bad PORT '$port'"
    # Our settings live in omnigate.conf, included last, rewritten at every start.
    local conf="$DIR/data/postgresql.conf"
    grep -qx "include_if_exists = 'omnigate.conf'" "$conf" ||
      echo "include_if_exists = 'omnigate.conf'" | as_pg tee -a "$conf" >/dev/null
    as_pg tee "$DIR/data/omnigate.conf" >/dev/null <<CONF
# Written by deploy/pg.sh at every start; edit postgresql.conf above it for other settings.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$DIR/run'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = 128MB
log_min_messages = warning
timezone = 'UTC'
log_timezone = 'UTC'
CONF
    echo "$port" | as_pg tee "$DIR/port" >/dev/null
    log "starting on 127.0.0.1:$port (log: $DIR/log)"
    if ! as_pg "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -t 60 start >&2; then
      log "the server did not start; last lines of $DIR/log:"
      tail -n 20 "$DIR/log" >&2 || true
      exit 1
    fi
  fi

  "$bin/psql" -XAtq -v ON_ERROR_STOP=1 -d "host=$DIR/run port=$port dbname=postgres user=postgres" >&2 <<'SQL'
SELECT 'CREATE ROLE omnigate LOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'omnigate') \gexec
SELECT 'CREATE DATABASE omnigate OWNER omnigate'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'omnigate') \gexec
SQL
  url "$port"
}

do_stop() {
  locate_dir
  if running; then
    local bin
    bin=$(bindir_for "$(cat "$DIR/data/PG_VERSION")")
    as_pg "$bin/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >&2
  else
    log "not running ($DIR)"
  fi
}

do_status() {
  locate_dir
  if running; then
    echo "running: $(url "$(live_port)")"
  else
    echo "stopped"
    exit 3
  fi
}

case "$cmd" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*) usage ;;
esac
