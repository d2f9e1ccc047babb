#!/usr/bin/env bash
# End-to-end evaluation on one NVIDIA GPU (issue 5): builds the Python package against the
# machine's PyTorch (CUDA), calibrates the Wan-2.1-1.3B-dims model (few layers) on this GPU,
# then runs equal_tokens / dual / balanced with the fused adaLN kernel off and on, W ranks
# emulated on the one GPU, on the Taichi-HD + COCO manifests, and prints the table.
# Budget: under 8 minutes on an H200. Needs no network, no Debian -dev packages and nothing
# beside the repository: run scripts/gpu_prepare.sh here first and carry `.deps` (vendored headers,
# wheels for Python 3.12); the manifests are the repository's own (data/).
#
#   scripts/gpu_eval.sh [--cpu-smoke]     --cpu-smoke: the same steps with the tiny model on CPU
#   scripts/gpu_eval.sh --preflight       here, on the CPU: in a copy of exactly what travels
#                                         (tracked files + .deps, nothing beside it), check headers
#                                         (none from a Debian -dev package), manifests, the
#                                         carried wheels against a Python 3.12, the scripts'
#                                         syntax and entry points; run before using a GPU
# Steps are spread over the epoch (--spread) so a short run sees the data set's mix of buckets.
# Environment: MODEL_KIND (diffusers-wan: diffusers' WanTransformer3DModel with the fused adaLN
# patched in, or wan-dit: the project's own Wan-style DiT), REPEAT (1: compare.py --repeat),
# SUBSET (unset: STEPS steps spread over the epoch; N: whole epochs of N rows of each manifest,
# e.g. SUBSET=100 REPEAT=3, sized for about 8 minutes but not yet timed on a GPU),
# LAYERS (4), WORLD (8), STEPS (4), MEM_BUDGET (80000 tokens), OUT (out/gpu_eval),
# AL_DATASETS (a folder with taichi_hd.csv and coco2017_val_images.csv; default data/), PYTHON (python3)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:-out/gpu_eval}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
DATASETS=${AL_DATASETS:-data}
MANIFESTS=(-m "$DATASETS/taichi_hd.csv" -m "$DATASETS/coco2017_val_images.csv")
for f in taichi_hd.csv coco2017_val_images.csv; do
  [ -f "$DATASETS/$f" ] || { echo "gpu_eval: manifest $DATASETS/$f not found (set AL_DATASETS to a folder that has it)" >&2; exit 2; }
done

if [ "${1:-}" = "--preflight" ]; then
  # shellcheck source=lib/preflight.sh
  . scripts/lib/preflight.sh
  VPY=${PYTHON:-.venv/bin/python}
  COPY="$(preflight_copy "$PWD")"
  echo "preflight: copy of what travels in $COPY ($(du -sh "$COPY" | cut -f1); nothing beside it: $([ "$(ls -A "$(dirname "$COPY")")" = "$(basename "$COPY")" ] && echo yes || echo NO))"
  ok=1
  [ -d "$COPY/.deps/include/nlohmann" ] || { echo "preflight: .deps/include missing: run scripts/gpu_prepare.sh" >&2; ok=0; }
  for f in taichi_hd.csv coco2017_val_images.csv; do
    [ -f "$COPY/data/$f" ] || { echo "preflight: data/$f does not travel (is it tracked?)" >&2; ok=0; }
  done
  # The extension's sources with setup.py's include path (vendored headers, torch's, Python's).
  inc="-I$COPY/src -I$COPY/python/csrc -I$COPY/.deps/include"
  inc+=" $("$VPY" -c "from torch.utils.cpp_extension import include_paths; import sysconfig; print(' '.join('-I'+p for p in include_paths() + [sysconfig.get_paths()['include']]))")"
  srcs=("$COPY"/src/adaptiveload/*/*.cpp "$COPY"/python/csrc/*.cpp)
  if preflight_headers g++ "-std=c++17 -fopenmp -DAL_WITH_CUDA=1 $inc -I/usr/local/cuda/include -I$COPY/cuda" "${srcs[@]}"; then
    echo "preflight: headers of ${#srcs[@]} extension sources: none from a Debian -dev package"
  else
    echo "preflight: headers: FAIL"; ok=0
  fi
  # setup.py's CMake configuration as the GPU machine runs it: a new build-python/ with only the
  # libraries and the binding target (torch found through this Python), nlohmann_json from the
  # vendored headers (no Debian package config there).
  if cmake -S "$COPY" -B "$COPY/build-python" -DCMAKE_BUILD_TYPE=Release -DAL_BUILD_TESTS=OFF -DAL_BUILD_BENCH=OFF \
      -DAL_BUILD_CLI=OFF -DAL_CUDA_EMU=OFF -DAL_SCAN=OFF -DAL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
      -DAL_PYTHON=ON -DPython_EXECUTABLE="$(cd "$(dirname "$VPY")" && pwd)/$(basename "$VPY")" \
      -DCMAKE_INCLUDE_PATH="$COPY/.deps/include" -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=TRUE \
      >"$COPY/cmake.log" 2>&1 &&
     grep -q "NLOHMANN_JSON_INCLUDE_DIR:PATH=$COPY/.deps/include" "$COPY/build-python/CMakeCache.txt" &&
     grep -q "PCG_INCLUDE_DIR:PATH=$COPY/.deps/include" "$COPY/build-python/CMakeCache.txt"; then
    echo "preflight: setup.py's CMake configuration (libraries only, vendored headers) succeeds in the copy"
  else
    echo "preflight: setup.py's CMake configuration fails in the copy:"; tail -15 "$COPY/cmake.log"; ok=0
  fi
  # The carried wheels against a Python 3.12 like the GPU machine's (numpy is the machine's own).
  PY312=${PY312:-}
  for c in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    [ -z "$PY312" ] && "$c" --version >/dev/null 2>&1 && PY312="$c"
  done
  if [ -n "$PY312" ]; then
    venv="$(dirname "$COPY")/py312"
    "$PY312" -m venv "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check numpy >/dev/null 2>&1
    if "$venv/bin/python" -m pip install -q --disable-pip-version-check --dry-run --no-index \
        --find-links "$COPY/.deps/wheels" diffusers==0.42.1 &&
       "$venv/bin/python" -m pip install -q --disable-pip-version-check --dry-run --no-index --no-deps \
        --find-links "$COPY/.deps/wheels" -r "$COPY/requirements/gpu-wheels.txt"; then
      echo "preflight: carried wheels: every pin present for Python 3.12, diffusers resolves from them"
    else
      echo "preflight: carried wheels: FAIL (run scripts/gpu_prepare.sh)"; ok=0
    fi
    if "$venv/bin/python" -m py_compile $(find "$COPY/python/adaptiveload" "$COPY/examples" -name '*.py'); then
      echo "preflight: Python sources compile under $("$PY312" --version)"
    else
      ok=0
    fi
  else
    echo "preflight: no python3.12 here (set PY312=/path/to/python3.12): the carried wheels cannot be checked"; ok=0
  fi
  for cmd in "examples/compare.py --help" "examples/train_dit.py --help" "-m adaptiveload.calibrate --help"; do
    # shellcheck disable=SC2086
    if (cd "$COPY" && "$OLDPWD/$VPY" $cmd >/dev/null 2>"$COPY/entry.err"); then :; else
      echo "preflight: '$cmd' fails:"; head -5 "$COPY/entry.err"; ok=0
    fi
  done
  echo "preflight: entry points run (--help) from the copy; the manifests travel in data/"
  echo "preflight: $([ $ok = 1 ] && echo PASS || echo FAIL) in $(($(date +%s) - t0)) s"
  [ "$ok" = 1 ] && rm -rf "$(dirname "$COPY")"
  [ "$ok" = 1 ]
  exit $?
fi

# Carried wheels (diffusers, Liger-Kernel), installed beside the work tree, not into the system.
if [ -d .deps/wheels ] && [ "${1:-}" != "--cpu-smoke" ]; then
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --find-links .deps/wheels \
    --target .deps/site -r requirements/gpu-wheels.txt > "$OUT/wheels.log" 2>&1 ||
    echo "gpu_eval: installing the carried wheels failed (log: $OUT/wheels.log); going on without them" >&2
  export PYTHONPATH="$PWD/.deps/site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ "${1:-}" = "--cpu-smoke" ]; then
  PY=${PYTHON:-.venv/bin/python}
  MODEL=(--model "${MODEL_KIND:-wan-dit}" --config tiny --device cpu --threads 2)
  RUN=(--world-size 4 --steps 4 --warmup 1 --spread)
else
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_eval: no nvidia-smi: this script needs an NVIDIA GPU (or use --cpu-smoke)" >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
  export TORCH_CUDA_ARCH_LIST="$cap"
  MODEL=(--model "${MODEL_KIND:-diffusers-wan}" --config wan2.1-1.3b --layers "${LAYERS:-4}" --device cuda
    --mem-budget "${MEM_BUDGET:-80000}")
  if [ -n "${SUBSET:-}" ]; then
    # Whole epochs of a fixed subset (SUBSET rows of each manifest), as on the CPU (docs/evaluation.md).
    RUN=(--world-size "${WORLD:-8}" --epoch --subset "$SUBSET" --warmup 1)
  else
    RUN=(--world-size "${WORLD:-8}" --steps "${STEPS:-4}" --warmup 1 --spread)
  fi
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

echo "== build the package ($(($(date +%s) - t0)) s)"
MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || {
  tail -40 "$OUT/build.log"; echo "gpu_eval: build failed (log: $OUT/build.log)" >&2; exit 1; }
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import adaptiveload, torch; print('adaptiveload', adaptiveload.__version__)"

echo "== compare: calibrate the chosen model on this device, then equal_tokens, dual, balanced ($(($(date +%s) - t0)) s)"
# The three that fit the device time (compare.py's default is every registered strategy).
"$PY" examples/compare.py --out-dir "$OUT/compare" --repeat "${REPEAT:-1}" --calibrate "${MODEL[@]}" "${RUN[@]}" \
  --strategies equal_tokens,dual,balanced "${MANIFESTS[@]}"
echo "== balanced planned with the uncalibrated analytic model, for comparison ($(($(date +%s) - t0)) s)"
"$PY" examples/train_dit.py "${MODEL[@]}" "${RUN[@]}" "${MANIFESTS[@]}" --strategy balanced --fused on \
  --out "$OUT/balanced_analytic.json"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
cal = [r for r in json.load(open(f"{out}/compare/compare.json"))["runs"] if r["strategy"] == "balanced" and r["fused_adaln"]][0]
ana = json.load(open(f"{out}/balanced_analytic.json"))[0]
print(f"balanced, fused on: measured imbalance {100 * cal['measured']['imbalance']:.1f}% with the calibrated profile, "
      f"{100 * ana['measured']['imbalance']:.1f}% with the analytic model")
PYEOF
echo "== done in $(($(date +%s) - t0)) s; table: $OUT/compare/compare.md"
