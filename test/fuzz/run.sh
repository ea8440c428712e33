#!/usr/bin/env bash
# Fuzzes each harness of test/fuzz for SECONDS, one after the other, at the lowest CPU priority,
# and merges what it found into the harness's corpus (test/fuzz/corpus/<name>/).
#
#   test/fuzz/run.sh SECONDS [HARNESS...]      (default: every harness)
#
# Builds build-fuzz (OMNIGATE_FUZZ_BUILD_DIR) with clang, -Dfuzz=true and ASan + UBSan first.
# The corpus stays small: files with a name of our own (seeds, crash-*: regression inputs added
# by hand) are always kept; out of the rest of the old corpus and the new inputs, a greedy set
# cover over the coverage edges libFuzzer's merge records keeps the inputs that add the most
# edges, while they add any, up to MAX_FILES files in all (a safety net: the repository aims at
# 200 files and 1 MiB per harness, and the script says when a corpus is over that, as http_conn's
# is, two thirds of whose edges are llhttp's); inputs are at most MAX_LEN bytes. A crash, leak or
# timeout leaves its input in build-fuzz/artifacts/<name>/ and makes the script exit 1 after
# the other harnesses ran; fix it, then copy the input into the corpus as crash-<what>.
# Prints, per harness, libFuzzer's last status line (executions, cov, ft) and the corpus size.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${OMNIGATE_FUZZ_BUILD_DIR:-build-fuzz}
MAX_LEN=${OMNIGATE_FUZZ_MAX_LEN:-4096}
MAX_FILES=${OMNIGATE_FUZZ_MAX_FILES:-600}
ALL=(http_conn json_body settings smsenc webhook_meta webhook_waha webhook_twilio jw)

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 SECONDS [${ALL[*]}]" >&2
  exit 2
fi
SECONDS_EACH=$1
shift
HARNESSES=("$@")
[[ ${#HARNESSES[@]} -gt 0 ]] || HARNESSES=("${ALL[@]}")

if ! command -v clang >/dev/null; then
  echo "run.sh: clang is missing: bash deploy/install-deps.sh installs it" >&2
  exit 1
fi
if [[ ! -f $BUILD/build.ninja ]]; then
  CC=clang meson setup "$BUILD" -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debugoptimized -Dwerror=true
fi
targets=()
for h in "${HARNESSES[@]}"; do
  targets+=("test/fuzz/fuzz-$h")
done
nice -n 19 ninja -C "$BUILD" "${targets[@]}"

# Minimizes into $3/merged: our own files of corpus $2 (libFuzzer names what it writes by the
# SHA-1 of its content; every other name is ours), then, out of $2 and $3/new, the inputs a
# greedy set cover over their coverage edges picks, as recorded by libFuzzer $1's merge. (Its
# own merge keeps the smallest inputs first, each for as little as one new edge.)
merge() {
  local exe=$1 corpus=$2 work=$3
  rm -rf "$work/merged" "$work/scratch" "$work/control"
  mkdir "$work/merged" "$work/scratch"
  nice -n 19 "$exe" -merge=1 -merge_control_file="$work/control" -max_len="$MAX_LEN" -timeout=10 \
    "$work/scratch" "$corpus" "$work/new" >"$work/merge.log" 2>&1 || return 1
  /usr/bin/python3 - "$work/control" "$MAX_FILES" "$work/merged" <<'PY'
import os, re, shutil, sys
lines = open(sys.argv[1]).read().split("\n")
n = int(lines[0])
paths = lines[2:2 + n]
edges = {}
for line in lines[2 + n:]:
    f = line.split()
    if f and f[0] == "COV":
        edges[int(f[1])] = set(map(int, f[2:]))
ours = [i for i, p in enumerate(paths) if not re.fullmatch(r"[0-9a-f]{40}", os.path.basename(p))]
ours_set = set(ours)
covered = set().union(*(edges.get(i, set()) for i in ours))
keep = list(ours)
gain = {i: e - covered for i, e in edges.items() if i not in ours_set}
while gain and len(keep) < int(sys.argv[2]):
    best = max(gain, key=lambda i: (len(gain[i]), -os.path.getsize(paths[i])))
    if not gain[best]:
        break
    keep.append(best)
    covered |= gain.pop(best)
    gain = {i: e - covered for i, e in gain.items()}
for i in keep:
    shutil.copy(paths[i], sys.argv[3])
total = len(set().union(*edges.values())) if edges else 0
print("kept %d of %d inputs: %d of %d edges" % (len(keep), n, len(covered), total))
PY
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
summary=()
for h in "${HARNESSES[@]}"; do
  corpus=$ROOT/test/fuzz/corpus/$h
  artifacts=$ROOT/$BUILD/artifacts/$h
  work=$(mktemp -d "/tmp/og-fuzz-$h.XXXXXX")
  mkdir -p "$corpus" "$artifacts" "$work/new"
  exe=$ROOT/$BUILD/test/fuzz/fuzz-$h
  dict=$ROOT/test/fuzz/$h.dict
  echo "run.sh: fuzzing $h for ${SECONDS_EACH}s"
  rc=0
  # New inputs go to the first directory; the corpus is read as seeds and left alone.
  nice -n 19 "$exe" -max_total_time="$SECONDS_EACH" -max_len="$MAX_LEN" -timeout=10 -dict="$dict" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$work/new" "$corpus" >"$work/log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+' "$work/log" | tail -n1 || true)
  execs=$(grep -E '^stat::number_of_executed_units:' "$work/log" | awk '{print $2}' || true)
  if [[ $rc -ne 0 ]]; then
    failed+=("$h")
    echo "run.sh: $h FAILED (exit $rc); the end of its log:" >&2
    tail -n 60 "$work/log" >&2
  fi

  if ! merge "$exe" "$corpus" "$work" >"$work/cover.log"; then
    echo "run.sh: merging $h failed; corpus left as it was, new inputs in $work/new" >&2
    tail -n 20 "$work/merge.log" >&2
    failed+=("$h-merge")
    continue
  fi
  for f in "$corpus"/* "$work/merged"/*; do
    [[ -f $f && $(basename "$f") =~ ^[0-9a-f]{40}$ ]] || continue
    if [[ $f == "$corpus"/* ]]; then rm "$f"; else cp "$f" "$corpus/"; fi
  done
  files=$(find "$corpus" -maxdepth 1 -type f | wc -l)
  kib=$(du -sk --apparent-size "$corpus" | cut -f1)
  if [[ $files -gt 200 || $kib -gt 1024 ]]; then
    echo "run.sh: $h corpus is $files files, $kib KiB: over the 200 files / 1 MiB the repository aims at" >&2
  fi
  summary+=("$h: ${execs:-?} runs; last: ${last:-none}; corpus: $files files, $kib KiB, $(cat "$work/cover.log")")
  rm -rf "$work"
done

echo
echo "run.sh summary (${SECONDS_EACH}s each):"
for line in "${summary[@]}"; do
  echo "  $line"
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run.sh: failures: ${failed[*]} (inputs in $BUILD/artifacts/)" >&2
  exit 1
fi
