#!/usr/bin/env bash
# The README's run command. On a fresh Debian machine it installs the packages it needs,
# builds a release binary, starts a private PostgreSQL cluster under .omnigate/pg (unless
# OMNIGATE_DATABASE_URL points at one), migrates it, starts the provider simulator, creates a
# demo tenant with the unified API enabled and a token, starts `omnigate serve`, and shows a
# sample send whose WhatsApp attempts fail and fall back to SMS, with its unified log entry.
# Then it keeps the gateway in the foreground until Ctrl-C (a graceful drain).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${OMNIGATE_BUILD_DIR:-build}
STATE=$ROOT/.omnigate
export OMNIGATE_LISTEN=${OMNIGATE_LISTEN:-127.0.0.1:8080}
PY=/usr/bin/python3

bash deploy/install-deps.sh

if [[ -f "$BUILD/build.ninja" ]]; then
  meson configure "$BUILD" -Dbuildtype=release -Dtest_routes=false >/dev/null
else
  meson setup "$BUILD" -Dbuildtype=release -Dtest_routes=false
fi
ninja -C "$BUILD"
BIN="$BUILD/src/omnigate"
SIM="$BUILD/test/sim/omnigate-sim"
mkdir -p "$STATE"

# --- PostgreSQL: the embedded default is a private cluster under .omnigate/pg ----------------
if [[ -z "${OMNIGATE_DATABASE_URL:-}" ]]; then
  OMNIGATE_DATABASE_URL=$(bash deploy/pg.sh start "$STATE/pg")
fi
export OMNIGATE_DATABASE_URL
# Secrets of this local setup: made once, kept in .omnigate so tokens stay valid across runs.
if [[ -z "${OMNIGATE_SECRET:-}" ]]; then
  [[ -f "$STATE/secret" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/secret")
  OMNIGATE_SECRET=$(cat "$STATE/secret")
fi
if [[ -z "${OMNIGATE_ADMIN_TOKEN:-}" ]]; then
  [[ -f "$STATE/admin-token" ]] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/admin-token")
  OMNIGATE_ADMIN_TOKEN=$(cat "$STATE/admin-token")
fi
export OMNIGATE_SECRET OMNIGATE_ADMIN_TOKEN
"$BIN" migrate

host=${OMNIGATE_LISTEN%:*}
port=${OMNIGATE_LISTEN##*:}
host=${host#[}
host=${host%]}
[[ -z "$host" || "$host" == "0.0.0.0" ]] && host=127.0.0.1
[[ "$host" == "::" ]] && host=::1
if [[ "$host" == *:* ]]; then url_host="[$host]"; else url_host=$host; fi
BASE="http://$url_host:$port"

# --- The provider simulator stands in for Meta, WAHA and Twilio -------------------------------
SIM_PORT=${OMNIGATE_SIM_PORT:-18080}
export OMNIGATE_QR_API_KEY=${OMNIGATE_QR_API_KEY:-demo-waha-key}
export OMNIGATE_SMS_ACCOUNT_SID=${OMNIGATE_SMS_ACCOUNT_SID:-AC00000000000000000000000000demo}
export OMNIGATE_SMS_AUTH_TOKEN=${OMNIGATE_SMS_AUTH_TOKEN:-demo-sms-auth-token}
SIM_URL="http://127.0.0.1:$SIM_PORT"
export OMNIGATE_META_BASE_URL=${OMNIGATE_META_BASE_URL:-$SIM_URL}
export OMNIGATE_QR_BASE_URL=${OMNIGATE_QR_BASE_URL:-$SIM_URL}
export OMNIGATE_SMS_BASE_URL=${OMNIGATE_SMS_BASE_URL:-$SIM_URL}
# Delivery statuses (API.md §10): the simulator calls the gateway back, signed like the real
# providers, so the sample send below ends "read", not only "sent".
export OMNIGATE_PUBLIC_URL=${OMNIGATE_PUBLIC_URL:-$BASE}
export OMNIGATE_META_APP_SECRET=${OMNIGATE_META_APP_SECRET:-demo-meta-app-secret}
export OMNIGATE_QR_WEBHOOK_SECRET=${OMNIGATE_QR_WEBHOOK_SECRET:-demo-waha-webhook-secret}
set -m
sim_pid=""
if [[ -x "$SIM" ]]; then
  OMNIGATE_ACCESS_LOG=false "$SIM" serve --listen "127.0.0.1:$SIM_PORT" --workers 1 \
    --callback-url "$OMNIGATE_PUBLIC_URL" 2>"$STATE/sim.log" &
  sim_pid=$!
fi
"$BIN" serve 2>>"$STATE/omnigate.log" &
pid=$!
set +m

stop() {
  trap - INT TERM EXIT
  echo
  echo "run.sh: stopping omnigate (graceful drain) and the simulator"
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null
  rc=$?
  if [[ -n "$sim_pid" ]]; then
    kill -TERM "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  exit $rc
}
trap stop INT TERM EXIT


for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null "$BASE/readyz" 2>/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: omnigate exited during start; its log:" >&2
    tail -n 20 "$STATE/omnigate.log" >&2
    exit 1
  fi
  sleep 0.1
done

# --- The demo WhatsApp Business Account's templates, as Meta would list them (API.md §18): an
# order update and an authentication template with a copy-code button -----------------------
WABA=102290129340398
if [[ -n "$sim_pid" ]]; then
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' "$SIM_URL/__sim/meta/wabas/$WABA/templates" -d '{
   "phoneNumberIds":["109876543210"],
   "templates":[{"name":"order_update","language":"en_US","status":"APPROVED","category":"UTILITY",
     "components":[{"type":"BODY","text":"Hi {{1}}, your order {{2}} ships today"}]},
    {"name":"otp_code","language":"en_US","status":"APPROVED","category":"AUTHENTICATION",
     "components":[{"type":"BODY","text":"*{{1}}* is your verification code."},
      {"type":"BUTTONS","buttons":[{"type":"OTP","otp_type":"COPY_CODE","text":"Copy code"}]}]}]}'
fi

# --- A global rate card (API.md §22): what each accepted attempt costs, shown on the answers,
# in the logs and in the usage at the end. Every worker reads a new card with its consent copy,
# once a second: the demo gives them that second before its first send -------------------------
curl -fsS -o /dev/null -X PUT -H "Authorization: Bearer $OMNIGATE_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  "$BASE/admin/rates" -d '{"currency":"USD","rates":[{"channel":"whatsapp_qr","prefix":"","price":"0"},
   {"channel":"whatsapp_meta","prefix":"","price":"0.0140"},
   {"channel":"whatsapp_meta","prefix":"","price":"0.0080","category":"utility"},
   {"channel":"sms","prefix":"","price":"0.0500"},{"channel":"sms","prefix":"+62","price":"0.0450"}]}'
sleep 1.5

# --- A demo tenant (unified API enabled) and its token -----------------------------------------
# Its inbound SMS number is fresh each run: inbound messages go to the oldest tenant that has the
# number (docs/inbound.md), and earlier runs' demo tenants stay in .omnigate's database.
INBOUND="+1555$(printf '%07d' $((RANDOM * 32768 + RANDOM)) | tail -c 7)"
SETTINGS='{"defaultChannels":["whatsapp_qr","whatsapp_meta","sms"],"defaultWhatsappFrom":"6281234567890",
 "channels":{"whatsapp_qr":{"enabled":true,"numbers":{"6281234567890":{"session":"default"}}},
 "whatsapp_meta":{"enabled":true,"numbers":{"6281234567890":{"phoneNumberId":"109876543210","accessToken":"EAAGdemo0000000000000000","wabaId":"'$WABA'"}}},
 "sms":{"enabled":true,"senders":["ACME"],"defaultSender":"ACME","inboundNumbers":["'$INBOUND'"]}},
 "otp":{"whatsappTemplate":{"name":"otp_code","language":"en_US"}}}'
TENANT=$(curl -fsS -H "Authorization: Bearer $OMNIGATE_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  -d "{\"name\":\"demo\",\"unifiedApiEnabled\":true,\"settings\":$SETTINGS}" "$BASE/admin/tenants" |
  "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["id"])')
TOKEN=$(curl -fsS -H "Authorization: Bearer $OMNIGATE_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  -d '{"name":"quickstart"}' "$BASE/admin/tenants/$TENANT/tokens" |
  "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])')
echo
echo "run.sh: demo tenant $TENANT"
echo "run.sh: its API token (shown once): $TOKEN"
echo "run.sh: admin token: $OMNIGATE_ADMIN_TOKEN (in .omnigate/admin-token)"

# --- A sample send: +19991101000 makes both WhatsApp channels fail in the simulator, and its
# fourth digit (1) makes the SMS provider report sent, delivered, then read by callback --------
show() { "$PY" -m json.tool; }
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
echo "    -d '{\"to\":\"+19991101000\",\"text\":\"Your order has shipped\"}' $BASE/api/omni/send"
SEND=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"to":"+19991101000","text":"Your order has shipped"}' "$BASE/api/omni/send")
echo "$SEND" | show
REF=$(echo "$SEND" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["reference"])')
# The statuses arrive within moments; wait for the last one (at most 5 s) before showing the log.
for _ in $(seq 1 50); do
  curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/logs?reference=$REF" | grep -q '"status": *"read"' && break
  sleep 0.1
done
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' '$BASE/api/omni/logs?reference=$REF'"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/logs?reference=$REF" | show

# --- A template send (API.md §18): the tenant's catalogue was synced from "Meta" when its
# number with a wabaId was saved; sync it again now (as an operator would) and send the order
# update on WhatsApp, where a free text outside the 24 h window would be refused -------------
echo
echo "\$ curl -s -X POST -H 'Authorization: Bearer \$ADMIN' $BASE/admin/tenants/$TENANT/templates/sync"
curl -s -X POST -H "Authorization: Bearer $OMNIGATE_ADMIN_TOKEN" "$BASE/admin/tenants/$TENANT/templates/sync" | show
TPL='{"to":"+19990001000","channels":["whatsapp_meta","sms"],"template":{"name":"order_update","language":"en_US","parameters":["Ana","A-17"]}}'
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
echo "    -d '$TPL' $BASE/api/omni/send"
curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$TPL" "$BASE/api/omni/send" | show

# --- Queued and scheduled sends (API.md §19): a small campaign answered 202 at once and
# released in the background at each sender's rate; one message scheduled an hour ahead, the
# queue's view, then that one canceled --------------------------------------------------------
echo
echo "run.sh: three queued sends (202 at once; delivered in the background, paced per sender)"
QREFS=""
for n in 1 2 3; do
  Q="{\"to\":\"+1999000110$n\",\"text\":\"Flash sale starts now\",\"channels\":[\"whatsapp_meta\",\"sms\"],\"queue\":true,\"priority\":\"low\"}"
  [[ $n == 1 ]] && { echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"; echo "    -d '$Q' $BASE/api/omni/send"; }
  QS=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$Q" "$BASE/api/omni/send")
  [[ $n == 1 ]] && echo "$QS" | show
  QREFS="$QREFS $(echo "$QS" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["reference"])')"
done
LATER=$("$PY" -c 'import datetime as d; print((d.datetime.now(d.timezone.utc) + d.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))')
SCHED="{\"to\":\"+19990001109\",\"text\":\"Your appointment is tomorrow at 10:00\",\"channels\":[\"sms\"],\"sendAt\":\"$LATER\"}"
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
echo "    -d '$SCHED' $BASE/api/omni/send"
SCHEDULED=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$SCHED" "$BASE/api/omni/send")
echo "$SCHEDULED" | show
SREF=$(echo "$SCHEDULED" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["reference"])')
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' $BASE/api/omni/queue"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/queue" | show
echo
echo "\$ curl -s -X POST -H 'Authorization: Bearer \$TOKEN' $BASE/api/omni/messages/$SREF/cancel"
curl -s -X POST -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/messages/$SREF/cancel" |
  "$PY" -c 'import json,sys; j=json.load(sys.stdin); d=j["data"] or {}; print(json.dumps(dict({k: d.get(k) for k in ("reference","status","dueAt","validUntil")}, **({"error": j["error"]} if "error" in j else {})), indent=2))'
QLAST=${QREFS##* }
for _ in $(seq 1 50); do
  curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/messages/$QLAST" | grep -q '"status": *"\(sent\|delivered\|read\)"' && break
  sleep 0.1
done
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' $BASE/api/omni/messages/$QLAST   # released"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/messages/$QLAST" |
  "$PY" -c 'import json,sys; j=json.load(sys.stdin)["data"]; print(json.dumps({"reference": j["reference"], "status": j["status"], "priority": j["priority"], "winningChannel": j["winningChannel"], "attempts": [{k: a[k] for k in ("channel","status","attemptedAt","throttles")} for a in j["attempts"]]}, indent=2))'

# --- A batch (API.md §20): three messages with variables in one request, one of them rejected
# (not a number), answered 202 with its id; then its counts once its messages have been sent ---
BATCH='{"defaults":{"channels":["whatsapp_meta","sms"],"text":"Hi {{name}}, your order {{order}} ships today"},"messages":[{"to":"+19990001201","variables":{"name":"Ana","order":"A-17"}},{"to":"+19990001202","variables":{"name":"Budi","order":"A-18"}},{"to":"12345","variables":{"name":"Citra","order":"A-19"}}]}'
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
echo "    -d '$BATCH' $BASE/api/omni/batches"
BATCHED=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$BATCH" "$BASE/api/omni/batches")
echo "$BATCHED" | show
BID=$(echo "$BATCHED" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["batchId"])')
for _ in $(seq 1 50); do
  curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/batches/$BID" | grep -q '"completedAt": *"' && break
  sleep 0.1
done
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' $BASE/api/omni/batches/$BID"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/omni/batches/$BID" | show

# --- A one-time password over WhatsApp (the authentication template, code in its copy-code
# button) to a number on which the simulator's Meta fails, so it falls back to SMS: its code is
# read back from the simulator (as the phone would show it), verified, then its OTP log entry
# with the history. A fresh number per run keeps the 30 s resend cooldown out of the way. -----
OTP_TO="+19990200$(printf '%04d' $((RANDOM % 10000)))"
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
echo "    -d '{\"to\":\"$OTP_TO\",\"channels\":[\"whatsapp_meta\",\"sms\"]}' $BASE/api/sms/otp/send"
OTP=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"to\":\"$OTP_TO\",\"channels\":[\"whatsapp_meta\",\"sms\"]}" "$BASE/api/sms/otp/send")
echo "$OTP" | show
OTP_REF=$(echo "$OTP" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["reference"])')
CODE=""
if [[ -n "$sim_pid" ]]; then
  CODE=$(curl -s "$SIM_URL/__sim/requests?channel=sms&to=$(printf '%s' "$OTP_TO" | sed 's/+/%2B/')" |
    "$PY" -c 'import json,re,sys,urllib.parse as u
reqs = json.load(sys.stdin)["data"]["items"]
body = u.parse_qs(reqs[-1]["body"])["Body"][0]
print(re.search(r"\d{4,10}", body).group(0))')
fi
if [[ -n "$CODE" ]]; then
  echo
  echo "run.sh: the simulator received the SMS; its code goes to /api/sms/otp/verify"
  echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
  echo "    -d '{\"reference\":\"$OTP_REF\",\"code\":\"<code from the SMS>\"}' $BASE/api/sms/otp/verify"
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d "{\"reference\":\"$OTP_REF\",\"code\":\"$CODE\"}" "$BASE/api/sms/otp/verify" | show
fi
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' '$BASE/api/sms/otp/logs?reference=$OTP_REF'"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/sms/otp/logs?reference=$OTP_REF" | show
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' '$BASE/api/sms/logs?reference=$OTP_REF'   # code masked"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/sms/logs?reference=$OTP_REF" | show
# --- Inbound and consent (API.md §21): the recipient of an SMS answers STOP (the simulator
# posts Twilio's signed inbound webhook to the gateway, as Twilio would), the number is opted
# out of SMS, and the next SMS to it is refused before any provider is called --------------------
if [[ -n "$sim_pid" ]]; then
  STOP_TO="+19990300$(printf '%04d' $((RANDOM % 10000)))"
  echo
  echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
  echo "    -d '{\"to\":\"$STOP_TO\",\"text\":\"Your code expires soon\"}' $BASE/api/sms/send"
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d "{\"to\":\"$STOP_TO\",\"text\":\"Your code expires soon\"}" "$BASE/api/sms/send" | show
  echo
  echo "run.sh: the recipient answers STOP (the simulator posts Twilio's inbound webhook to $BASE/webhooks/twilio/inbound)"
  IN="{\"provider\":\"twilio\",\"from\":\"$STOP_TO\",\"to\":\"$INBOUND\",\"text\":\"STOP\"}"
  echo "\$ curl -s -H 'Content-Type: application/json' -d '$IN' $SIM_URL/__sim/inbound"
  curl -s -H 'Content-Type: application/json' -d "$IN" "$SIM_URL/__sim/inbound" | show
  echo
  echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' $BASE/api/recipients/$(printf '%s' "$STOP_TO" | sed 's/+/%2B/')"
  curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/recipients/$(printf '%s' "$STOP_TO" | sed 's/+/%2B/')" | show
  # Every worker's copy of the opt-outs reads the change within about a second: until then an
  # SMS may still go; the demo sends until one is refused.
  for _ in $(seq 1 50); do
    R=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
      -d "{\"to\":\"$STOP_TO\",\"text\":\"Last chance: 20% off\"}" "$BASE/api/sms/send")
    echo "$R" | grep -q recipient_opted_out && break
    sleep 0.1
  done
  echo
  echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' \\"
  echo "    -d '{\"to\":\"$STOP_TO\",\"text\":\"Last chance: 20% off\"}' $BASE/api/sms/send"
  echo "$R" | show
fi
# --- Usage (API.md §22): what the demo tenant sent today, by channel, what it cost and what
# fallback saved (queued messages still in flight count once they end) ------------------------
echo
echo "\$ curl -s -H 'Authorization: Bearer \$TOKEN' '$BASE/api/usage?groupBy=channel'"
curl -s -H "Authorization: Bearer $TOKEN" "$BASE/api/usage?groupBy=channel" | show
# --- A QR-linked WhatsApp session (API.md §23): a token with scope keys starts the demo number's
# session on WAHA (its webhook pointed back here), WAHA's events say it waits for a scan, the QR
# code is saved as a PNG; the simulator's control route then plays the phone that scans it, and
# the session is WORKING ----------------------------------------------------------------------
KEYS_TOKEN=$(curl -fsS -H "Authorization: Bearer $OMNIGATE_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  -d '{"name":"console","scopes":["send","logs","keys"]}' "$BASE/admin/tenants/$TENANT/tokens" |
  "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])')
session_status() {
  curl -s -H "Authorization: Bearer $KEYS_TOKEN" "$BASE/api/whatsapp/sessions/default" |
    "$PY" -c 'import json,sys; print((json.load(sys.stdin).get("data") or {}).get("status"))'
}
echo
echo "run.sh: a token with scope keys (the tenant console signs in with it): $KEYS_TOKEN"
echo "\$ curl -s -X POST -H 'Authorization: Bearer \$KEYS_TOKEN' $BASE/api/whatsapp/sessions/default/start"
curl -s -X POST -H "Authorization: Bearer $KEYS_TOKEN" "$BASE/api/whatsapp/sessions/default/start" | show
for _ in $(seq 1 50); do
  [[ "$(session_status)" == SCAN_QR_CODE ]] && break
  sleep 0.1
done
curl -s -H "Authorization: Bearer $KEYS_TOKEN" -o "$STATE/qr.png" "$BASE/api/whatsapp/sessions/default/qr"
echo "run.sh: the session waits for a scan; its QR code: .omnigate/qr.png ($(wc -c <"$STATE/qr.png") bytes)"
curl -s -X POST -H 'Content-Type: application/json' -d '{"number":"+6281234567890"}' \
  "$SIM_URL/__sim/waha/sessions/default/scan" >/dev/null
for _ in $(seq 1 50); do
  [[ "$(session_status)" == WORKING ]] && break
  sleep 0.1
done
echo "run.sh: the phone scanned it (the simulator played the phone):"
echo "\$ curl -s -H 'Authorization: Bearer \$KEYS_TOKEN' $BASE/api/whatsapp/sessions/default"
curl -s -H "Authorization: Bearer $KEYS_TOKEN" "$BASE/api/whatsapp/sessions/default" | show

echo
echo "run.sh: omnigate is running on $BASE (pid $pid); its log (JSON lines): .omnigate/omnigate.log"
echo "run.sh: press Ctrl-C to stop"
set +e
wait "$pid"
