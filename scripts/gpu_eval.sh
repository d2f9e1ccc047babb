#!/usr/bin/env bash
# End-to-end evaluation on one NVIDIA GPU (issue 5): builds the Python package against the
# machine's PyTorch (CUDA), calibrates the Wan-2.1-1.3B-dims model (few layers) on this GPU,
# then runs equal_tokens / dual / balanced with the fused adaLN kernel off and on, W ranks
# emulated on the one GPU, on the Taichi-HD + COCO manifests, and prints the table.
# Budget: under 8 minutes on an H200. Needs no network and no Debian -dev packages when
# .deps/include holds the vendored headers (scripts/vendor_headers.sh; carry `.deps`).
#
#   scripts/gpu_eval.sh [--cpu-smoke]     --cpu-smoke: the same steps with the tiny model on CPU
# Steps are spread over the epoch (--spread) so a short run sees the data set's mix of buckets.
# Environment: LAYERS (4), WORLD (8), STEPS (4), MEM_BUDGET (80000 tokens), OUT (out/gpu_eval)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:-out/gpu_eval}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
DATASETS=${AL_DATASETS:-../shared/datasets}
MANIFESTS=(-m "$DATASETS/taichi_hd.csv" -m "$DATASETS/coco2017_val_images.csv")
if [ "${1:-}" = "--cpu-smoke" ]; then
  PY=${PYTHON:-/usr/bin/python3}
  MODEL=(--config tiny --device cpu --threads 2)
  CAL=(--config tiny --device cpu --max-batch 4)
  RUN=(--world-size 4 --steps 4 --warmup 1 --spread)
else
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_eval: no nvidia-smi: this script needs an NVIDIA GPU (or use --cpu-smoke)" >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
  export TORCH_CUDA_ARCH_LIST="$cap"
  MODEL=(--config wan2.1-1.3b --layers "${LAYERS:-4}" --device cuda --mem-budget "${MEM_BUDGET:-80000}")
  CAL=(--config wan2.1-1.3b --layers "${LAYERS:-4}" --device cuda --max-batch 4 --fused)
  RUN=(--world-size "${WORLD:-8}" --steps "${STEPS:-4}" --warmup 1 --spread)
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

echo "== build the package ($(($(date +%s) - t0)) s)"
MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || {
  tail -40 "$OUT/build.log"; echo "gpu_eval: build failed (log: $OUT/build.log)" >&2; exit 1; }
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import adaptiveload, torch; print('adaptiveload', adaptiveload.__version__)"

echo "== calibrate ($(($(date +%s) - t0)) s)"
"$PY" -m adaptiveload.calibrate "${CAL[@]}" --out "$OUT/profile.json" --measurements-out "$OUT/measurements.jsonl"

echo "== compare, calibrated profile ($(($(date +%s) - t0)) s)"
"$PY" examples/compare.py --out-dir "$OUT/compare" "${MODEL[@]}" "${RUN[@]}" "${MANIFESTS[@]}" \
  --profile "$OUT/profile.json"
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
