#!/usr/bin/env bash
# Ranks that really run at different speeds, on the CPU (docs/evaluation.md, "Unequal ranks on
# the CPU"; issue 53 item 4): two torchrun ranks (gloo), each pinned to its own core, rank 1
# beside a busy co-runner; whole epochs of equal work (equal_tokens), balanced for alike ranks,
# balanced with the stated speeds, and balanced learning them online, REPS interleaved
# repetitions; prints the table of measured idle per rank and samples/s (median [min, max]).
# An evaluation, not a test: keep it out of CI.
#
#   scripts/cpu_eval_ranks.sh
# Environment: OUT (out/cpu_eval_ranks), REPS (3), SUBSET (100 rows of each shipped manifest),
# EPOCH_SECONDS (4: a fast rank's compute in a uniform epoch), ADAPT_EVERY (2),
# PYTHON (.venv/bin/python), EXTRA (more scripts/cpu_eval_ranks.py options, e.g. --no-co-runner).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/cpu_eval_ranks}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || command -v "$PY" >/dev/null || { echo "cpu_eval_ranks: no Python at $PY (run scripts/python_env.sh, or set PYTHON)" >&2; exit 2; }
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
# An in-place build (setup.py build_ext --inplace) where there is one, as scripts/cpu_eval.sh.
if compgen -G "python/adaptiveload/_C*.so" >/dev/null; then export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"; fi
# shellcheck disable=SC2086
"$PY" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node 2 scripts/cpu_eval_ranks.py --reps "${REPS:-3}" \
  --subset "${SUBSET:-100}" --epoch-seconds "${EPOCH_SECONDS:-4}" --adapt-every "${ADAPT_EVERY:-2}" \
  --out "$OUT" ${EXTRA:-} 2>&1 | tee "$OUT/run.log"
