#!/usr/bin/env bash
# A private PostgreSQL cluster for the quickstart and the benchmarks.
#   bash deploy/pg.sh start [DIR] [PORT]   initdb DIR if needed, start it, create role and
#                                           database "omnigate", print its connection URI
#   bash deploy/pg.sh stop [DIR]
#   bash deploy/pg.sh status [DIR]
# DIR defaults to .omnigate/pg under the repository, PORT to 55432. As root, the server runs as
# the `postgres` user (PostgreSQL refuses root); DIR is then made that user's, and when DIR's
# parents are not traversable by it (a clone under /root), the data lives under
# /var/tmp/omnigate-pg-<hash> with DIR a symlink to it.
set -euo pipefail

cd "$(dirname "$0")/.."
cmd=${1:-start}
DIR=${2:-$PWD/.omnigate/pg}
PORT=${3:-55432}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[[ -n "$BIN" ]] || { echo "pg.sh: no PostgreSQL server found (apt-get install postgresql-15)" >&2; exit 1; }

AS=()
if [[ $(id -u) -eq 0 ]]; then
  AS=(runuser -u postgres --)
fi

as_pg() { (cd /tmp && "${AS[@]}" "$@"); }

resolve_dir() {
  mkdir -p "$(dirname "$DIR")"
  if [[ ${#AS[@]} -gt 0 && ! -e "$DIR" ]]; then
    # Can the postgres user reach DIR's parent? If not, keep the data where it can.
    if ! runuser -u postgres -- test -x "$(dirname "$DIR")" 2>/dev/null; then
      local real
      real=/var/tmp/omnigate-pg-$(echo -n "$DIR" | sha256sum | cut -c1-12)
      mkdir -p "$real"
      ln -sfn "$real" "$DIR"
    fi
  fi
  mkdir -p "$DIR"
  DIR=$(readlink -f "$DIR")
  [[ ${#AS[@]} -gt 0 ]] && chown postgres "$DIR"
  chmod 0700 "$DIR"
}

url() { echo "postgresql://omnigate@127.0.0.1:$(cat "$DIR/port")/omnigate"; }

running() { [[ -f "$DIR/data/postmaster.pid" ]] && as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; }

case "$cmd" in
start)
  resolve_dir
  if [[ ! -f "$DIR/data/PG_VERSION" ]]; then
    echo "pg.sh: creating a cluster in $DIR" >&2
    as_pg "$BIN/initdb" -D "$DIR/data" --auth=trust -U postgres -E UTF8 --locale=C >/dev/null
    as_pg mkdir -p "$DIR/run"
    cat >> "$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR/run'
max_connections = 300
shared_buffers = 256MB
synchronous_commit = on
fsync = on
CONF
    echo "$PORT" | as_pg tee "$DIR/port" >/dev/null
  fi
  if ! running; then
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -t 60 start >/dev/null
  else
    echo "pg.sh: already running" >&2
  fi
  P=$(cat "$DIR/port")
  if ! psql -XAtq -h 127.0.0.1 -p "$P" -U postgres -d postgres -c "SELECT 1 FROM pg_roles WHERE rolname = 'omnigate'" | grep -q 1; then
    psql -XAtq -h 127.0.0.1 -p "$P" -U postgres -d postgres -c "CREATE ROLE omnigate LOGIN" >/dev/null
    psql -XAtq -h 127.0.0.1 -p "$P" -U postgres -d postgres -c "CREATE DATABASE omnigate OWNER omnigate" >/dev/null
  fi
  url
  ;;
stop)
  DIR=$(readlink -f "$DIR" 2>/dev/null || echo "$DIR")
  if running; then as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null; fi
  ;;
status)
  DIR=$(readlink -f "$DIR" 2>/dev/null || echo "$DIR")
  if running; then echo "running: $(url)"; else echo "stopped"; exit 3; fi
  ;;
*)
  echo "usage: bash deploy/pg.sh start|stop|status [DIR] [PORT]" >&2
  exit 2
  ;;
esac
