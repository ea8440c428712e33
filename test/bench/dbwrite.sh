#!/usr/bin/env bash
# Write benchmark of the asynchronous database layer against pgbench, in ONE run on ONE
# private cluster (synchronous_commit=on, fsync=on):
#   (a) og-bench-dbwrite: CONC writers through db.c, each op = message row + attempt row,
#       group-committed per loop turn;
#   (b) pgbench: CONC clients, single-row INSERT transactions into the same table.
# Prints both and the ratio of row rates. Usage: bash test/bench/dbwrite.sh [CONC] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
CONC=${1:-64}
SECS=${2:-10}
BUILD=${OMNIGATE_BUILD_DIR:-build}
bash deploy/install-deps.sh >/dev/null
if [[ -f "$BUILD/build.ninja" ]]; then
  meson configure "$BUILD" -Dbuildtype=release >/dev/null
else
  meson setup "$BUILD" -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" >/dev/null

DIR=$(mktemp -d /tmp/omnigate-dbbench.XXXXXX)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
trap 'bash deploy/pg.sh stop "$DIR/pg" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
URL=$(bash deploy/pg.sh start "$DIR/pg" "$PORT")
export OMNIGATE_DATABASE_URL=$URL OMNIGATE_SECRET=bench-secret-0123456789
"$BUILD/src/omnigate" migrate 2>/dev/null
TENANT=$("$BUILD/src/omnigate" admin create-tenant bench | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
PSQL=(psql "$URL" -XAtq)
echo "synchronous_commit: $("${PSQL[@]}" -c 'show synchronous_commit'), fsync: $("${PSQL[@]}" -c 'show fsync')"

echo "(a) omnigate async layer: $CONC writers, $SECS s, pool 2"
OURS=$("$BUILD/test/bench/og-bench-dbwrite" "$URL" "$TENANT" "$CONC" "$SECS" 2)
echo "$OURS"

cat > "$DIR/pgbench.sql" <<SQL
INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, winning_channel, completed_at) VALUES ('$TENANT', 'kf_P' || gen_random_uuid()::text, '+6281234567890', 'bench', 'fallback', '{sms}', 'sent', 'sms', now());
SQL
echo "(b) pgbench: $CONC clients, single-row transactions, $SECS s"
PGB=$(pgbench -n -c "$CONC" -j 2 -T "$SECS" -f "$DIR/pgbench.sql" "$URL" 2>&1)
echo "$PGB" | grep -E "tps|latency average|number of transactions actually"
TPS=$(echo "$PGB" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
/usr/bin/python3 - "$OURS" "$TPS" <<'PY'
import json, sys
ours = json.loads(sys.argv[1]); tps = float(sys.argv[2])
print("rows/s: omnigate %.0f (%.0f commits/s, mean batch %.1f ops) vs pgbench %.0f -> ratio %.2f (target >= 3)"
      % (ours["rowsPerSec"], ours["commitsPerSec"], ours["meanBatch"], tps, ours["rowsPerSec"] / tps))
PY
