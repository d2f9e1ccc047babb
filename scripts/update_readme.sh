#!/usr/bin/env bash
# Writes the demo's strategy table into README.md, between the demo-table markers, from the
# output of build/cli/adaptiveload demo (build it first: scripts/build.sh). The test
# Repo.ReadmeDemoTableIsTheDemosOutput fails when the README's table and the demo's differ.
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${CLI:-build/cli/adaptiveload}
[ -x "$CLI" ] || { echo "update_readme: $CLI not found: run scripts/build.sh first" >&2; exit 1; }
table=$("$CLI" demo | awk '/^strategy /{on=1} on && /^$/{exit} on')
[ -n "$table" ] || { echo "update_readme: no table in the demo's output" >&2; exit 1; }
TABLE="$table" python3 - <<'PY'
import os, re
p = "README.md"
s = open(p).read()
begin, end = "<!-- demo-table: begin (scripts/update_readme.sh) -->\n", "<!-- demo-table: end -->"
i, j = s.index(begin) + len(begin), s.index(end)
s = s[:i] + "```\n" + os.environ["TABLE"] + "\n```\n" + s[j:]
open(p, "w").write(s)
PY
echo "update_readme: README.md's demo table written ($(wc -l <<<"$table") lines)"
