#!/usr/bin/env bash
# The project's style checks (CI: scripts/test.sh's lint stage). Every check runs; each is
# reported with its count, and the exit status is 0 only when all pass:
#   clang-format   the C++ under src cli tests bench cuda fuzz python/csrc (tracked files) against
#                  .clang-format, by clang-format 14 (Debian 12's clang-format-14, installed by
#                  scripts/install_deps.sh): pinned, since releases format some code differently
#   ruff check     python/ examples/ bench/ scripts/*.py with pyproject.toml's [tool.ruff] rules
#   (ruff is the linter only: `ruff format` would rewrite 90 of the 92 Python files, +4,500
#   lines, for a layout the code does not need; clang-format is the formatter, for the C++)
#   sizes          scripts/function_length.py: no function over 120 lines without a
#                  `long-function: <reason>` comment above it, no file over 600 lines
#
#   scripts/lint.sh          check
#   scripts/lint.sh --fix    apply clang-format -i and ruff check --fix; then check, so
#                            what is left to fix by hand is listed
#
# CLANG_FORMAT overrides the clang-format binary (it must still be version 14). ruff is the
# version pinned in requirements/python.txt: $RUFF, else .venv/bin/ruff when it is that version,
# else .venv-lint/bin/ruff (made here with only ruff, since the lint stage runs before .venv).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

fix=0
case "${1:-}" in
"") ;;
--fix) fix=1 ;;
*)
  echo "usage: scripts/lint.sh [--fix]" >&2
  exit 2
  ;;
esac

CPP_DIRS=(src cli tests bench cuda fuzz python/csrc)
PY_TARGETS=(python examples bench scripts/*.py)
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
RUFF_VERSION=$(sed -n 's/^ruff==\([0-9.]*\).*/\1/p' requirements/python.txt)

find_clang_format() {
  if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "lint: $CLANG_FORMAT not found: run scripts/install_deps.sh (Debian 12's clang-format-14)" >&2
    return 1
  fi
  if ! "$CLANG_FORMAT" --version | grep -q "version 14\."; then
    echo "lint: $CLANG_FORMAT is $("$CLANG_FORMAT" --version); the project formats with" \
      "clang-format 14 (set CLANG_FORMAT to it)" >&2
    return 1
  fi
}

find_ruff() {  # sets RUFF
  local v
  [ -n "$RUFF_VERSION" ] || { echo "lint: no ruff==VERSION line in requirements/python.txt" >&2; return 1; }
  for RUFF in "${RUFF:-}" .venv/bin/ruff .venv-lint/bin/ruff; do
    if [ -z "$RUFF" ] || [ ! -x "$RUFF" ]; then continue; fi
    v=$("$RUFF" --version 2>/dev/null | awk '{print $2}')
    [ "$v" = "$RUFF_VERSION" ] && return 0
  done
  echo "lint: installing ruff $RUFF_VERSION into .venv-lint (the version requirements/python.txt pins)" >&2
  RUFF=.venv-lint/bin/ruff
  { [ -x .venv-lint/bin/python ] || /usr/bin/python3 -m venv .venv-lint; } &&
    .venv-lint/bin/python -m pip install -q --disable-pip-version-check "ruff==$RUFF_VERSION" >&2
}

cpp_files() {  # the tracked C++ files (all of them outside a git checkout)
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -- "${CPP_DIRS[@]}"
  else
    find "${CPP_DIRS[@]}" -type f
  fi | grep -E '\.(c|cc|cpp|h|hpp|cu|cuh)$'
}

names=()
results=()
check() {  # check NAME COMMAND...: runs it, records PASS / FAIL
  echo "---- lint: $1"
  if "${@:2}"; then results+=(PASS); else results+=(FAIL); fi
  names+=("$1")
}

clang_format_check() {
  local log bad n rc
  n=$(cpp_files | wc -l)
  if [ "$n" = 0 ]; then
    echo "clang-format: no C++ files found under ${CPP_DIRS[*]}" >&2
    return 1
  fi
  log=$(mktemp)
  cpp_files | xargs -r -d '\n' "$CLANG_FORMAT" --dry-run --Werror 2>"$log"
  rc=$?
  bad=$(grep -E '^[^ ].*: (error|warning):' "$log" | cut -d: -f1 | sort -u)
  if [ "$rc" != 0 ]; then
    head -n 40 "$log"
    echo "clang-format: $(grep -cE ': (error|warning):' "$log") places in $(grep -c . <<<"$bad") of $n" \
      "files differ from .clang-format's style (exit $rc); scripts/lint.sh --fix formats them:"
    sed 's/^/  /' <<<"$bad"
  fi
  rm -f "$log"
  return "$rc"
}

sizes_check() {
  python3 scripts/function_length.py
}

have_cf=1
find_clang_format || have_cf=0
have_ruff=1
find_ruff || have_ruff=0

if [ $fix = 1 ]; then
  if [ $have_cf = 0 ] || [ $have_ruff = 0 ]; then
    echo "lint: --fix needs clang-format 14 and ruff $RUFF_VERSION" >&2
    exit 1
  fi
  echo "---- lint --fix: clang-format -i, ruff check --fix"
  cpp_files | xargs -r -d '\n' "$CLANG_FORMAT" -i
  "$RUFF" check --fix --quiet "${PY_TARGETS[@]}"
  echo "---- lint --fix: applied; what is left to fix by hand follows"
fi

if [ $have_cf = 1 ]; then
  check clang-format clang_format_check
else
  names+=(clang-format) results+=("NOT RUN (no clang-format 14)")
fi
if [ $have_ruff = 1 ]; then
  check "ruff check" "$RUFF" check --output-format concise "${PY_TARGETS[@]}"
else
  names+=("ruff check") results+=("NOT RUN (no ruff)")
fi
check sizes sizes_check

echo "---- lint: summary"
status=0
for i in "${!names[@]}"; do
  printf '  %-14s %s\n' "${names[$i]}" "${results[$i]}"
  [ "${results[$i]}" = PASS ] || status=1
done
[ $status = 0 ] || echo "lint: 'scripts/lint.sh --fix' applies clang-format and ruff's fixes; the rest is fixed by hand"
exit $status
