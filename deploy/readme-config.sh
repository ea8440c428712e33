#!/usr/bin/env bash
# Regenerates the generated tables of the docs from the binary's own tables, so the docs
# cannot drift from the code: the configuration table of README.md (`omnigate config-markdown`)
# and the list of metrics in docs/operations.md (`omnigate metrics-markdown`). Each sits
# between a `<!-- NAME:begin ... -->` and a `<!-- NAME:end -->` line.
# Usage: bash deploy/readme-config.sh [path/to/omnigate]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/src/omnigate}
TMP=/tmp/omnigate-doc-table.$$
trap 'rm -f "$TMP"' EXIT

# splice FILE MARKER COMMAND: replaces what lies between FILE's MARKER lines by COMMAND's output.
splice() {
  "$BIN" "$3" > "$TMP"
  python3 - "$1" "$2" "$TMP" <<'PY'
import sys
path, marker, table = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
doc = open(path).read()
begin = doc.index("<!-- %s:begin" % marker)
begin = doc.index("\n", begin) + 1
end = doc.index("<!-- %s:end" % marker)
open(path, "w").write(doc[:begin] + table + doc[end:])
PY
}

splice README.md config-table config-markdown
splice docs/operations.md metrics-table metrics-markdown
