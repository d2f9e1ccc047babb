#!/usr/bin/env bash
# The measured proof on the CPU (docs/evaluation.md, "The CPU miniature"): the tiny Wan-style
# DiT on the `mini` grid, where the longest bucket's attention is most of its FLOPs, trained
# for whole epochs of a fixed subset of the real manifests (data/), measured beside the
# planner's prediction:
#   1. calibration on the miniature's shapes, with held-out shapes (fit errors on shapes the
#      fit never saw), CALIB_PACKS packs of mixed shapes fitted with them (a pack's cost per
#      sample, which prices step 4's packed plans), and the gloo all-reduce between LINK_RANKS
#      processes (the profile's "link", which prices the real ranks' gradient sync)
#      -> OUT/profile.json; with REAL2_PROFILE=loaded,
#      again beside a co-runner training on the other core (calibrate --co-runners 1)
#      -> OUT/profile_loaded.json
#   2. 2 real ranks (torchrun, gloo, one thread a rank): equal_tokens, dual, balanced, REPEAT
#      interleaved repetitions, idle measured at the ranks' barrier, paired ratios; planned and
#      predicted with OUT/profile.json (REAL2_PROFILE=loaded: OUT/profile_loaded.json)
#   2b. noise: the same 2 real ranks on identical work (one shape, 400 copies of the real
#      manifest's longest clip, equal_tokens: every rank-step the same micro-batch, predicted
#      idle 0): the idle the machine itself adds to two ranks, beside which balanced's is read
#   3. emulated ranks (one process) at each of EMULATED (default 4 8), the same strategies
#   4. the fused adaLN off and on, and --packing both (bucketed and packed), 4 emulated ranks
#   5. online adaptation: balanced planned with the uncalibrated analytic model, with and
#      without --adapt-every, against the calibrated plan
#   6. the real data path (data): DATA_FILES tiny clips and images made with ffmpeg / PIL, a
#      latent cache of them (python -m adaptiveload.cache, the tiny random VAE and UMT5 of the
#      cache tests), the loader measured (calibrate --loader cache and media) and the plan's
#      loader check at DATA_WORKERS workers; then 2 real ranks (torchrun, gloo) train an epoch
#      with DATA_WORKERS DataLoader workers a rank reading the cache (--data cache) and decoding
#      the media (--data media, VAE in the loop): the seconds each rank waited for data, and
#      predicted beside measured samples/s -> OUT/data/summary.md
# Every table is also in OUT/<step>/compare.md and .json. Needs the project's .venv (or PYTHON)
# with torch; runs in about 17 minutes on an idle 2-core machine with the defaults (calibrate, real2,
# noise and emulated 4 took 5-6 minutes on 2026-12-06 with CALIB_REPS=1 CALIB_INTERLEAVE=5 DISCARD=1
# EMULATED=4; every step with those settings, 11 minutes).
#
#   scripts/cpu_eval.sh                 everything
#   STEPS="real2 emulated" scripts/cpu_eval.sh    some of: calibrate real2 noise emulated kernels adapt data
# Environment: OUT (out/cpu_eval), SUBSET (200 rows of each manifest: 400 samples an epoch),
# REPEAT (5), EMULATED ("4 8"), PYTHON (.venv/bin/python), CALIB_REPS (5), CALIB_INTERLEAVE (0: the
# repetitions back to back; R: calibrate --interleave R, each point timed once a round in a shuffled order),
# RUNS (interleaved: compare.py --interleave, the strategies a step each in turn; sequential: one run
# after another), DISCARD (0: compare.py --discard N, repetitions run first and not reported),
# REAL2_PROFILE (alone: the real ranks planned with the profile measured alone; loaded: with one
# measured beside a co-runner. On 2026-12-04 alone predicted 2-rank epochs at 0.95-0.98x the
# measured samples/s and loaded at 0.91-0.93x; on 2026-12-03, another VM, alone gave 1.18-1.21x)
# CALIB_PACKS (12: calibrate --packs 12 --fit-packs, packs of mixed shapes measured through the
# packed forward and fitted with the points, cost.pack_sample_s; 0: no packs, packs priced as the
# sum of their work, 1.07-1.27x under what they measured on 2026-12-04)
# LINK_RANKS (2: calibrate --allreduce-ranks, the real ranks' all-reduce measured on this host;
# 0: priced from the cpu preset's link: 0.2 ms for the miniature's gradients, where their sync
# measured 1.8-4.0 ms on 2026-12-05)
# INPUTS (timed: calibrate --time-inputs and train_dit --time-inputs on, each micro-batch timed
# with its inputs drawn, this miniature's data loading, in the calibration and in every run, the
# analytic and adapt runs of step 5 too; untimed: drawn outside the timings, and unpriced. A
# profile kept from an earlier run must have been calibrated the same way)
# RANK_ORDER (emulated ranks, steps 3-5: interleaved, train_dit --rank-order interleaved, each
# rank's micro-batches spread over the step so the machine's drift within a step falls on every
# rank alike, as on ranks that run at once; sequential: rank by rank)
# DATA_FILES (40: step 6's clips and as many images), DATA_WORKERS (2: DataLoader workers a rank)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/cpu_eval}
SUBSET=${SUBSET:-200}
REPEAT=${REPEAT:-5}
EMULATED=${EMULATED:-4 8}
CALIB_REPS=${CALIB_REPS:-5}
CALIB_PACKS=${CALIB_PACKS:-12}
CALIB_INTERLEAVE=${CALIB_INTERLEAVE:-0}
RUNS=${RUNS:-interleaved}
DISCARD=${DISCARD:-0}
REAL2_PROFILE=${REAL2_PROFILE:-alone}
RANK_ORDER=${RANK_ORDER:-interleaved}
LINK_RANKS=${LINK_RANKS:-2}
INPUTS=${INPUTS:-timed}
PY=${PYTHON:-.venv/bin/python}
STEPS=${STEPS:-calibrate real2 noise emulated kernels adapt data}
DATA_FILES=${DATA_FILES:-40}
DATA_WORKERS=${DATA_WORKERS:-2}
[ -x "$PY" ] || command -v "$PY" >/dev/null || { echo "cpu_eval: no Python at $PY (run scripts/python_env.sh, or set PYTHON)" >&2; exit 2; }
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
# The package as installed into the environment (scripts/python_env.sh), or an in-place build
# (setup.py build_ext --inplace) where there is one: the source tree without its extension
# would shadow the installed package and fail to import.
if compgen -G "python/adaptiveload/_C*.so" >/dev/null; then export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"; fi
case "$INPUTS" in
  timed) TIME_INPUTS=(--time-inputs) TRAIN_INPUTS=(--time-inputs on) ;;
  untimed) TIME_INPUTS=() TRAIN_INPUTS=(--time-inputs off) ;;
  *) echo "cpu_eval: INPUTS is timed or untimed, got '$INPUTS'" >&2; exit 2 ;;
esac
PROFILE="$OUT/profile.json"
LOADED="$OUT/profile_loaded.json"
COMMON=(--config tiny --grid mini --epoch --subset "$SUBSET" --threads 1 --clock thread "${TRAIN_INPUTS[@]}"
        -m data/taichi_hd.csv -m data/coco2017_val_images.csv)
case "$REAL2_PROFILE" in
  alone) REAL2_USES="$PROFILE" ;;
  loaded) REAL2_USES="$LOADED" ;;
  *) echo "cpu_eval: REAL2_PROFILE is alone or loaded, got '$REAL2_PROFILE'" >&2; exit 2 ;;
esac
case "$RUNS" in
  interleaved) ORDER=(--interleave --discard "$DISCARD") ;;
  sequential) ORDER=(--discard "$DISCARD") ;;
  *) echo "cpu_eval: RUNS is interleaved or sequential, got '$RUNS'" >&2; exit 2 ;;
esac
case "$RANK_ORDER" in
  interleaved | sequential) EMU=(--rank-order "$RANK_ORDER") ;;
  *) echo "cpu_eval: RANK_ORDER is interleaved or sequential, got '$RANK_ORDER'" >&2; exit 2 ;;
esac
STRATS=equal_tokens,dual,balanced
t0=$(date +%s)
stamp() { echo "== cpu_eval: $1 ($(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
# The measured tables of a compare.py run (its full output is in DIR.log).
table() { sed -n '/^# Whole epochs/,/^Reported by the paper/p' "$1/compare.md" | sed '$d'; }

[[ "$CALIB_PACKS" =~ ^[0-9]+$ ]] || { echo "cpu_eval: CALIB_PACKS is a count of packs (0: none), got '$CALIB_PACKS'" >&2; exit 2; }
PACKS=()
if [ "$CALIB_PACKS" -gt 0 ]; then PACKS=(--packs "$CALIB_PACKS" --fit-packs); fi
calibrate() {  # calibrate OUT_PROFILE MEASUREMENTS [calibrate options]
  "$PY" -m adaptiveload.calibrate --config tiny --sweep mini --held-out --threads 1 --clock thread \
    --max-batch 64 --max-tokens 4096 --reps "$CALIB_REPS" --interleave "$CALIB_INTERLEAVE" --out "$1" \
    --allreduce-ranks "$LINK_RANKS" --measurements-out "$2" "${TIME_INPUTS[@]}" "${PACKS[@]}" "${@:3}" |
    grep -E '^(fit|held-out|jitter|pack error|a pack.s cost|measured beside|optimizer step|all-reduce|wrote)'
}
if want calibrate || [ ! -f "$PROFILE" ]; then
  stamp "calibrating the miniature (shapes of the mini grid, held-out shapes)"
  calibrate "$PROFILE" "$OUT/measurements.jsonl"
fi
if want real2 && [ "$REAL2_PROFILE" = loaded ] && { want calibrate || [ ! -f "$LOADED" ]; }; then
  stamp "calibrating the miniature beside a co-runner (the other core trains, as the second rank does)"
  calibrate "$LOADED" "$OUT/measurements_loaded.jsonl" --co-runners 1
fi
# A profile kept from an earlier run (calibrate not in STEPS) must time the inputs as the runs do.
for prof in "$PROFILE" "$LOADED"; do
  [ -f "$prof" ] || continue
  timed=$("$PY" -c 'import json, sys; print("timed" if json.load(open(sys.argv[1])).get("fit", {}).get("inputs_timed") else "untimed")' "$prof")
  if [ "$timed" != "$INPUTS" ]; then
    echo "cpu_eval: $prof was calibrated with the inputs $timed, but INPUTS=$INPUTS: add calibrate to STEPS, or set INPUTS=$timed" >&2
    exit 2
  fi
done
if want real2; then
  stamp "2 real ranks (torchrun, gloo)"
  "$PY" -m torch.distributed.run --nproc_per_node 2 examples/compare.py "${COMMON[@]}" --strategies "$STRATS" \
    --fused off --repeat "$REPEAT" "${ORDER[@]}" --profile "$REAL2_USES" --out-dir "$OUT/real2" > "$OUT/real2.log" 2>&1 ||
    { tail -40 "$OUT/real2.log" >&2; exit 1; }
  table "$OUT/real2"
fi
if want noise; then
  stamp "2 real ranks on identical work (the machine's own idle)"
  # 400 copies (paths made distinct) of the Taichi-HD clip of longest duration: one bucket.
  "$PY" - "$OUT/one_shape.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open("data/taichi_hd.csv")))
longest = max(rows, key=lambda r: float(r["num_frames"]) / float(r["fps"]))
with open(sys.argv[1], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(longest)); w.writeheader()
    for i in range(400):
        w.writerow(dict(longest, path=f"one_shape/{i:04d}.mp4"))
PY
  "$PY" -m torch.distributed.run --nproc_per_node 2 examples/compare.py --config tiny --grid mini --epoch --subset 400 \
    --threads 1 --clock thread "${TRAIN_INPUTS[@]}" -m "$OUT/one_shape.csv" --strategies equal_tokens --fused off --repeat "$REPEAT" \
    "${ORDER[@]}" --profile "$REAL2_USES" --out-dir "$OUT/noise" > "$OUT/noise.log" 2>&1 ||
    { tail -40 "$OUT/noise.log" >&2; exit 1; }
  table "$OUT/noise"
fi
if want emulated; then
  for w in $EMULATED; do
    stamp "$w emulated ranks"
    "$PY" examples/compare.py "${COMMON[@]}" "${EMU[@]}" -w "$w" --strategies "$STRATS" --fused off --repeat "$REPEAT" \
      "${ORDER[@]}" --profile "$PROFILE" --out-dir "$OUT/emulated$w" > "$OUT/emulated$w.log" 2>&1 ||
      { tail -40 "$OUT/emulated$w.log" >&2; exit 1; }
    table "$OUT/emulated$w"
  done
fi
if want kernels; then
  stamp "fused adaLN off and on, bucketed and packed balanced (4 emulated ranks)"
  "$PY" examples/compare.py "${COMMON[@]}" "${EMU[@]}" -w 4 --strategies balanced --fused both --packing both \
    --repeat "$REPEAT" "${ORDER[@]}" --profile "$PROFILE" --out-dir "$OUT/kernels" > "$OUT/kernels.log" 2>&1 ||
    { tail -40 "$OUT/kernels.log" >&2; exit 1; }
  table "$OUT/kernels"
fi
if want adapt; then
  # The residual online adaptation works on: balanced planned with the uncalibrated analytic
  # model (the cpu device preset), without and with refits every 2 steps, beside the
  # calibrated plan; interleaved.
  for i in $(seq "$REPEAT"); do
    for mode in analytic adapt profile; do
      extra=()
      [ "$mode" = adapt ] && extra=(--adapt-every 2)
      [ "$mode" = profile ] && extra=(--profile "$PROFILE")
      "$PY" examples/train_dit.py "${COMMON[@]}" "${EMU[@]}" -w 4 --strategy balanced "${extra[@]}" \
        --out "$OUT/adapt_${mode}_$i.json" 2>>"$OUT/adapt.log" | sed "s/^/$mode $i: /"
    done
  done
fi
if want data; then
  stamp "the real data path: a latent cache and media, $DATA_WORKERS DataLoader workers a rank (2 real ranks)"
  scripts/lib/cpu_eval_data.sh "$PY" "$OUT/data" "$PROFILE" "$DATA_FILES" "$DATA_WORKERS" "${TRAIN_INPUTS[@]}"
fi
stamp "done"
