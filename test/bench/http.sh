#!/usr/bin/env bash
# HTTP benchmark of the gateway's HTTP layer, measured in ONE run on loopback:
#   (a) GET /healthz requests/s of `omnigate serve --workers 1` next to nginx with
#       worker_processes 1 answering a static 200 (the HTTP ceiling on this machine), same wrk
#       settings, each run twice alternating, best of two;
#   (b) RSS growth of the single worker process with 10,000 idle keep-alive connections open
#       (and the same for the nginx worker, for reference).
# Writes test/bench/results/http.md (gitignored) and prints it. Not part of the test suite.
#
# Usage: bash test/bench/http.sh            (builds ./build in release mode unless OMNIGATE_BIN is set)
# Tunables: WRK_THREADS (1), WRK_CONNS (64), WRK_DURATION (10s), IDLE_CONNS (10000).
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=/usr/bin/python3
WRK_THREADS=${WRK_THREADS:-1}
WRK_CONNS=${WRK_CONNS:-64}
WRK_DURATION=${WRK_DURATION:-10s}
IDLE_CONNS=${IDLE_CONNS:-10000}
RESULTS_DIR="$ROOT/test/bench/results"
OUT="$RESULTS_DIR/http.md"

# 10,000 client sockets here and as many in the server: raise the open-file limit.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

bash deploy/install-deps.sh >/dev/null

if [[ -z "${OMNIGATE_BIN:-}" ]]; then
  if [[ -f build/build.ninja ]]; then
    meson configure build -Dbuildtype=release -Dtest_routes=false >/dev/null
  else
    meson setup build -Dbuildtype=release -Dtest_routes=false >/dev/null
  fi
  ninja -C build >/dev/null
  OMNIGATE_BIN="$ROOT/build/src/omnigate"
fi

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_http() { # url
  for _ in $(seq 1 200); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "bench: $1 did not answer" >&2
  return 1
}

TMP=$(mktemp -d /tmp/omnigate-bench.XXXXXX)
OG_PID=""
NGINX_PID=""
cleanup() {
  [[ -n "$OG_PID" ]] && kill -TERM "$OG_PID" 2>/dev/null && wait "$OG_PID" 2>/dev/null || true
  [[ -n "$NGINX_PID" ]] && kill -TERM "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

OG_PORT=$(free_port)
NGINX_PORT=$(free_port)
BODY='{"success":true,"message":"ok","data":{"status":"ok"}}'

# --- nginx: one worker, static 200, no access log ----------------------------------------
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile 65536;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 20000; multi_accept on; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fastcgi;
  uwsgi_temp_path $TMP/nginx/uwsgi;
  scgi_temp_path $TMP/nginx/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      default_type application/json;
      return 200 '$BODY';
    }
  }
}
EOF
nginx -c "$TMP/nginx/nginx.conf" -p "$TMP/nginx" &
NGINX_PID=$!
wait_http "http://127.0.0.1:$NGINX_PORT/healthz"

# --- omnigate: one worker ------------------------------------------------------------------
start_omnigate() { # extra env assignments...
  env "$@" OMNIGATE_IDLE_TIMEOUT_MS=600000 "$OMNIGATE_BIN" serve --listen "127.0.0.1:$OG_PORT" --workers 1 \
    2>>"$TMP/omnigate.stderr" &
  OG_PID=$!
  wait_http "http://127.0.0.1:$OG_PORT/healthz"
}
stop_omnigate() {
  kill -TERM "$OG_PID" 2>/dev/null || true
  wait "$OG_PID" 2>/dev/null || true
  OG_PID=""
}
worker_pid() { # supervisor pid -> its single worker
  local pid=$1 kids=""
  for _ in $(seq 1 100); do
    kids=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
    if [[ -n "$kids" ]]; then echo "$kids" | awk '{print $1}'; return 0; fi
    sleep 0.05
  done
  echo "bench: no worker under pid $pid" >&2
  return 1
}
nginx_worker_pid() {
  worker_pid "$NGINX_PID"
}

run_wrk() { # url label -> prints req/s, keeps the full output in $TMP/wrk-<label>.txt
  local url=$1 label=$2
  wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"$WRK_DURATION" --latency "$url" >"$TMP/wrk-$label.txt" 2>&1
  if grep -q "Non-2xx" "$TMP/wrk-$label.txt"; then
    echo "bench: $label had non-2xx answers:" >&2
    cat "$TMP/wrk-$label.txt" >&2
  fi
  awk '/^Requests\/sec:/ {print $2}' "$TMP/wrk-$label.txt"
}
best() { printf '%s\n' "$@" | sort -g | tail -n1; }
latency_line() { awk '/^    Latency/ {print $2" avg, "$4" max"}' "$TMP/wrk-$1.txt"; }
p99() { awk '/^     99%/ {print $2}' "$TMP/wrk-$1.txt"; }

echo "bench: (a) throughput, wrk -t$WRK_THREADS -c$WRK_CONNS -d$WRK_DURATION, alternating runs" >&2
# Access log off, as nginx's: this compares the HTTP paths.
start_omnigate OMNIGATE_ACCESS_LOG=false
og1=$(run_wrk "http://127.0.0.1:$OG_PORT/healthz" og1)
ng1=$(run_wrk "http://127.0.0.1:$NGINX_PORT/healthz" ng1)
og2=$(run_wrk "http://127.0.0.1:$OG_PORT/healthz" og2)
ng2=$(run_wrk "http://127.0.0.1:$NGINX_PORT/healthz" ng2)
stop_omnigate
# The default configuration writes one access-log line per request (to a file here).
start_omnigate OMNIGATE_ACCESS_LOG=true
oglog=$(run_wrk "http://127.0.0.1:$OG_PORT/healthz" oglog)
og_best=$(best "$og1" "$og2")
ng_best=$(best "$ng1" "$ng2")
ratio=$("$PY" -c "print(f'{$og_best / $ng_best:.2f}')")
ratio_log=$("$PY" -c "print(f'{$oglog / $ng_best:.2f}')")
echo "bench: omnigate $og1 / $og2, nginx $ng1 / $ng2, with access log $oglog req/s" >&2

echo "bench: (b) $IDLE_CONNS idle keep-alive connections" >&2
OG_WORKER=$(worker_pid "$OG_PID")
og_idle=$("$PY" test/bench/idle_conns.py --port "$OG_PORT" --pid "$OG_WORKER" --count "$IDLE_CONNS") || true
NG_WORKER=$(nginx_worker_pid)
ng_idle=$("$PY" test/bench/idle_conns.py --port "$NGINX_PORT" --pid "$NG_WORKER" --count "$IDLE_CONNS") || true
stop_omnigate
echo "bench: omnigate $og_idle" >&2
echo "bench: nginx    $ng_idle" >&2

field() { # json key
  "$PY" -c 'import json,sys; d=json.loads(sys.argv[1] or "{}"); print(d.get(sys.argv[2], "n/a"))' "$1" "$2"
}
og_bpc=$(field "$og_idle" bytes_per_conn)
ng_bpc=$(field "$ng_idle" bytes_per_conn)

mkdir -p "$RESULTS_DIR"
cat >"$OUT" <<EOF
# HTTP benchmark

Measured $(date -u +%Y-%m-%dT%H:%M:%SZ) by \`test/bench/http.sh\` in one run on loopback.
Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),
kernel $(uname -r). omnigate $("$OMNIGATE_BIN" version | awk '{print $2}') (release build),
$(nginx -v 2>&1 | sed 's/^nginx version: //'), $(wrk --version 2>&1 | head -n1 | awk '{print $1" "$2}').

## (a) GET /healthz throughput, one worker each

\`wrk -t$WRK_THREADS -c$WRK_CONNS -d$WRK_DURATION\`, runs alternating omnigate / nginx, best of two.
nginx: \`worker_processes 1\`, \`access_log off\`, \`return 200\` with the same JSON body.

| server | run 1 req/s | run 2 req/s | best req/s | run 1 latency (avg, max) | run 1 p99 |
|---|---:|---:|---:|---|---:|
| omnigate \`--workers 1\`, access log off | $og1 | $og2 | $og_best | $(latency_line og1) | $(p99 og1) |
| nginx \`worker_processes 1\` | $ng1 | $ng2 | $ng_best | $(latency_line ng1) | $(p99 ng1) |
| omnigate \`--workers 1\`, access log on (default) | $oglog | | $oglog | $(latency_line oglog) | $(p99 oglog) |

**omnigate / nginx = $ratio** (target ≥ 0.8); with the access log on: $ratio_log.

## (b) Memory per idle keep-alive connection

$IDLE_CONNS connections, each sent one \`GET /healthz\` and read its answer, then held idle
(\`--idle-timeout-ms 600000\`). VmRSS of the worker process before and after.

| server | connections | RSS before (KiB) | RSS after (KiB) | bytes per connection |
|---|---:|---:|---:|---:|
| omnigate worker | $(field "$og_idle" connections) | $(field "$og_idle" rss_before_kib) | $(field "$og_idle" rss_after_kib) | **$og_bpc** |
| nginx worker | $(field "$ng_idle" connections) | $(field "$ng_idle" rss_before_kib) | $(field "$ng_idle" rss_after_kib) | $ng_bpc |

Target for omnigate: ≤ 2048 bytes per idle connection. Kernel socket buffers are not part of
the process RSS and are not counted.
EOF
cat "$OUT"
