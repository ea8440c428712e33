#!/usr/bin/env bash
# Regenerates the configuration table of README.md from the binary's own table
# (`omnigate config-markdown`), so the docs cannot drift from the code.
# Usage: bash deploy/readme-config.sh [path/to/omnigate]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/src/omnigate}
"$BIN" config-markdown > /tmp/omnigate-config-table.$$
python3 - /tmp/omnigate-config-table.$$ <<'PY'
import re, sys
table = open(sys.argv[1]).read()
readme = open("README.md").read()
begin = readme.index("<!-- config-table:begin")
begin = readme.index("\n", begin) + 1
end = readme.index("<!-- config-table:end")
open("README.md", "w").write(readme[:begin] + table + readme[end:])
PY
rm -f /tmp/omnigate-config-table.$$
