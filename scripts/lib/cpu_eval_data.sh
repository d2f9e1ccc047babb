#!/usr/bin/env bash
# scripts/cpu_eval.sh's step 6, the real data path (docs/evaluation.md):
#   scripts/lib/cpu_eval_data.sh PYTHON OUT_DIR PROFILE FILES WORKERS [train_dit --time-inputs ...]
# Makes FILES tiny clips and FILES images (python/tests/media_gen.py), their manifest (scan), a
# latent cache of them (python -m adaptiveload.cache, the tiny random AutoencoderKLWan and UMT5
# of the cache tests), measures the loader (calibrate --loader cache and media), says what the
# plan's loader check predicts at WORKERS workers a rank, then trains one epoch on 2 real ranks
# (torchrun, gloo, one thread a rank) from the cache (--data cache) and from the media (--data
# media, the VAE in the loop) with WORKERS DataLoader workers a rank, planned with PROFILE
# (the miniature's calibration) when it exists. Writes OUT_DIR/summary.md: per run the measured
# and predicted samples/s and idle, and the seconds each rank waited for data.
set -euo pipefail
PY=$1 OUT=$2 PROFILE=$3 FILES=$4 WORKERS=$5
shift 5
TRAIN_INPUTS=("$@")
CLI=build/cli/adaptiveload
mkdir -p "$OUT"
PROF=()
[ -f "$PROFILE" ] && PROF=(--profile "$PROFILE")
if [ ! -f "$OUT/media/manifest.csv" ]; then
  PYTHONPATH="python/tests${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$OUT" "$FILES" <<'PY'
import os, sys
import cache_fixtures, media_gen
out, n = sys.argv[1], int(sys.argv[2])
folder = os.path.join(out, "media")
paths = media_gen.make_set(folder, n, n)
media_gen.manifest(folder, paths)
cache_fixtures.make_models(os.path.join(out, "models"))
print(f"made {len(paths)} files in {folder}, tiny encoders in {out}/models")
PY
fi
M="$OUT/models"
"$PY" -m adaptiveload.cache --manifest "$OUT/media/manifest.csv" --model tiny-dit --grid tiny --device-preset cpu \
  --vae "$M/vae" --text-encoder "$M/text_encoder" --tokenizer "$M/tokenizer" --text-len 16 --device cpu \
  --root "$OUT/media" --out "$OUT/cache" 2>"$OUT/cache.log" | tail -1
for src in cache media; do
  where=("$OUT/cache")
  [ "$src" = media ] && where=("$OUT/media/manifest.csv" --loader-root "$OUT/media")
  "$PY" -m adaptiveload.calibrate --model tiny-dit --loader "$src" --loader-manifest "${where[@]}" --loader-grid tiny \
    --loader-device-preset cpu --loader-workers "1,$WORKERS" --loader-out "$OUT/loader_$src.json" --threads 1 |
    sed "s/^/loader $src: /" | grep -E "worker|fit|wrote"
  manifest="$OUT/cache"
  [ "$src" = media ] && manifest="$OUT/media/manifest.csv"
  if [ -x "$CLI" ]; then
    "$CLI" plan --manifest "$manifest" --model tiny-dit --grid tiny --device cpu -w 2 -s balanced "${PROF[@]}" \
      --loader-profile "$OUT/loader_$src.json" --loader-workers "$WORKERS" --json > "$OUT/plan_$src.json" \
      2> "$OUT/plan_$src.log" || { cat "$OUT/plan_$src.log" >&2; exit 1; }
  fi
done
RUN=(--config tiny --grid tiny --epoch --warmup 1 --threads 1 --clock thread "${TRAIN_INPUTS[@]}" "${PROF[@]}"
     --strategy balanced --num-workers "$WORKERS")
"$PY" -m torch.distributed.run --nproc_per_node 2 examples/train_dit.py "${RUN[@]}" --data cache --cache "$OUT/cache" \
  --out "$OUT/real_cache.json" > "$OUT/real_cache.log" 2>&1 || { tail -40 "$OUT/real_cache.log" >&2; exit 1; }
"$PY" -m torch.distributed.run --nproc_per_node 2 examples/train_dit.py "${RUN[@]}" --data media \
  --manifest "$OUT/media/manifest.csv" --media-root "$OUT/media" --out "$OUT/real_media.json" \
  > "$OUT/real_media.log" 2>&1 || { tail -40 "$OUT/real_media.log" >&2; exit 1; }
"$PY" - "$OUT" "$WORKERS" <<'PY' | tee "$OUT/summary.md"
import json, os, sys
out, workers = sys.argv[1], int(sys.argv[2])
print(f"| data | samples/s measured | predicted | idle measured | predicted | waited for data, s (share) by rank | "
      f"plan's loader check at {workers} workers |")
print("|---|---|---|---|---|---|---|")
for src in ("cache", "media"):
    r = json.load(open(os.path.join(out, f"real_{src}.json")))[0]
    m, p = r["measured"], r["predicted"]
    waits = ", ".join(f"r{i} {w:.3f} ({100 * s:.1f}%)" for i, (w, s) in enumerate(zip(m["data_wait_s"],
                                                                                       m["data_wait_share"])))
    check = "-"
    plan = os.path.join(out, f"plan_{src}.json")
    if os.path.exists(plan):
        lc = json.load(open(plan))["strategies"][0]["loader"]
        check = (f"{'keeps up' if lc['keeps_up'] else 'too slow'}: load/train up to {lc['max_load_train_ratio']:.2f}x, "
                 f"{lc['slow_rank_steps']} of {lc['rank_steps']} rank-steps slower")
    print(f"| {src} ({m['samples']} samples, {m['steps']} steps) | {m['throughput_samples_per_s']:.2f} | "
          f"{p['throughput_samples_per_s']:.2f} | {100 * m.get('idle_measured', 0):.1f}% | {100 * p['imbalance']:.1f}% | "
          f"{waits} | {check} |")
PY
