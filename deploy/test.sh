#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds build-test with ASan + UBSan and
# -Werror and the /__test routes, runs every suite with `meson test` (cmocka unit tests and the
# pytest end-to-end suite on the real binary), then prints the per-case summary whose last line
# is `N passed, N failed`. Exits non-zero iff anything failed (build included).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${OMNIGATE_TEST_BUILD_DIR:-build-test}
# The machine's PATH may start with a Python that has no pytest; the suite uses Debian's.
PY=/usr/bin/python3

bash deploy/install-deps.sh

SETUP_ARGS=(-Dtest_routes=true -Dtests=true -Db_sanitize=address,undefined -Db_lundef=false
            -Dbuildtype=debugoptimized -Dwerror=true)

rm -rf "$BUILD/junit" "$BUILD/meson-logs/testlog.json" "$BUILD/meson-logs/testlog.junit.xml"

build_ok=1
if [[ -f "$BUILD/build.ninja" ]]; then
  if ! meson configure "$BUILD" "${SETUP_ARGS[@]}" >/dev/null; then
    echo "test.sh: meson configure failed; setting $BUILD up again" >&2
    meson setup --wipe "$BUILD" "${SETUP_ARGS[@]}" || build_ok=0
  fi
elif ! meson setup "$BUILD" "${SETUP_ARGS[@]}"; then
  # A directory left by an earlier failed setup: start from scratch once.
  if [[ -d "$BUILD/meson-private" ]]; then
    rm -rf "$BUILD"
    meson setup "$BUILD" "${SETUP_ARGS[@]}" || build_ok=0
  else
    build_ok=0
  fi
fi

if [[ $build_ok -eq 1 ]]; then
  ninja -C "$BUILD" || build_ok=0
fi

test_rc=0
if [[ $build_ok -eq 1 ]]; then
  mkdir -p "$BUILD/junit"
  # CI machines are small: the unit suites run in parallel, the e2e suite is is_parallel: false.
  meson test -C "$BUILD" --print-errorlogs --num-processes "$(nproc)" || test_rc=$?
else
  echo "test.sh: build FAILED: no test was run" >&2
  test_rc=1
fi

summary_rc=0
"$PY" "$ROOT/test/summarize.py" "$BUILD" || summary_rc=$?

if [[ $build_ok -ne 1 || $test_rc -ne 0 || $summary_rc -ne 0 ]]; then
  exit 1
fi
exit 0
