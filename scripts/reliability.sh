#!/usr/bin/env bash
# Reliability checks of the C++ core (docs/testing.md), run by scripts/test.sh:
#   1. scripts/sanitizers.sh   ASan + UBSan over the whole C++ test suite, TSan over the
#                              threaded adaLN CPU kernel tests;
#   2. scripts/fuzz.sh 60      the regression inputs, then every fuzz target for 60 s.
#   scripts/reliability.sh [fuzz seconds per target]   (default 60)
# The Python fault and edge tests (python/tests/test_faults.py, test_op_edges.py,
# test_load.py) run with the rest of the pytest suite.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
status=0
scripts/sanitizers.sh || status=1
scripts/fuzz.sh "${1:-60}" || status=1
echo "[reliability] $(( $(date +%s) - T0 )) s; $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
