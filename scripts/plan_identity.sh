#!/usr/bin/env bash
# Byte-identity of two builds of the command-line tool: the table, --json, the plan (--out
# JSONL) and the HTML report of each configuration below, from BASE and NEW, compared byte
# for byte (stdout and stderr). For a reshaping that must not change behaviour: build the
# tool before the change, copy it aside, build after, then
#   scripts/plan_identity.sh /tmp/before/adaptiveload build/cli/adaptiveload [--big]
# --big adds the 10M-row CSV (generated once into WORK, about 600 MB). Generated mixes are
# written by a seeded generator, the same bytes every run. Exit status: 0 when every output
# matches; the differing files are kept in WORK/diff.
# Environment: WORK (default /tmp/al-identity).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,11p' "$0"; exit 2; }
BASE="$1" NEW="$2" BIG=0
[ "${3:-}" = --big ] && BIG=1
for b in "$BASE" "$NEW"; do [ -x "$b" ] || { echo "plan_identity: $b is not an executable" >&2; exit 2; }; done
WORK="${WORK:-/tmp/al-identity}"
mkdir -p "$WORK/gen"
rm -rf "$WORK/out" "$WORK/diff"
mkdir -p "$WORK/out/base" "$WORK/out/new" "$WORK/diff"

# gen NAME ROWS SEED CLIP_SHARE: a mix of clips (17-121 frames, 480p-720p) and images
# (256-2048 px), the shape of the generated mixes in tests/test_global_batch.cpp.
gen() {
  local f="$WORK/gen/$1.csv"
  [ -s "$f" ] || python3 - "$f" "$2" "$3" "$4" <<'EOF'
import random, sys
path, rows, seed, clips = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng = random.Random(seed)
sizes = [(480, 854), (544, 960), (720, 1280), (480, 640), (720, 720), (1280, 720)]
with open(path, "w") as out:
    out.write("path,num_frames,height,width,fps\n")
    for i in range(rows):
        if rng.random() < clips:
            h, w = rng.choice(sizes)
            out.write(f"clips/c{i}.mp4,{rng.randint(17, 121)},{h},{w},{rng.choice([16, 24, 30])}\n")
        else:
            out.write(f"images/i{i}.jpg,1,{rng.randint(256, 2048)},{rng.randint(256, 2048)},\n")
EOF
  echo "$f"
}
# jsonl NAME CSV: the same rows as JSONL (null fps for images), for the other reader.
jsonl() {
  local f="$WORK/gen/$1.jsonl"
  [ -s "$f" ] || python3 - "$2" "$f" <<'EOF'
import csv, json, sys
with open(sys.argv[1], newline="") as src, open(sys.argv[2], "w") as out:
    for r in csv.DictReader(src):
        fps = float(r["fps"]) if r["fps"] else None
        out.write(json.dumps({"path": r["path"], "num_frames": int(r["num_frames"]), "height": int(r["height"]),
                              "width": int(r["width"]), "fps": fps}) + "\n")
EOF
  echo "$f"
}
R=(-m data/taichi_hd.csv -m data/coco2017_val_images.csv)
G1=(-m "$(gen mix50k 50000 1 0.4)")
G2=(-m "$(gen mix3k 3000 2 0.6)")
G3=(-m "$(gen clips8k 8000 3 0.95)")
J=(-m "$(jsonl taichi data/taichi_hd.csv)" -m "$(jsonl coco data/coco2017_val_images.csv)")

configs=()  # "NAME|ARGS" (ARGS word-split; manifests by the names R, G1, G2, G3, BIG)
add() { configs+=("$1|$2"); }
add real                   "R"
add real-w16               "R -w 16"
add real-w3                "R -w 3"
add real-w64               "R -w 64"
add real-micro             "R --sync micro"
add real-micro-w16-drop    "R --sync micro -w 16 --end-policy drop"
add real-fsdp14b-w16       "R --model wan2.1-14b --sharding fsdp -w 16"
add real-steps50           "R --global-batch steps:50"
add real-samples64         "R --global-batch samples:64"
add real-tokens2m          "R --global-batch tokens:2000000"
add real-free              "R --global-batch free"
add real-micro-samples128  "R --sync micro --global-batch samples:128"
add real-micro-free        "R --sync micro --global-batch free"
add real-drop              "R --end-policy drop"
add real-sp-min-14b        "R --model wan2.1-14b --sp min"
add real-sp-per-sample     "R --sp per-sample"
add real-sp-off            "R --sp off"
add real-sp-2              "R --sp 2"
add real-sp-auto-hunyuan   "R --model hunyuanvideo -w 16"
add real-sp-micro-14b      "R --model wan2.1-14b --sp per-sample --sync micro -w 16"
add real-sp-sizes          "R --model wan2.1-14b --sp auto --sp-sizes 1,2,4 -w 16"
add real-sp-2-micro        "R --sp 2 --sync micro"
add long-sp-hunyuan-micro  "R --model hunyuanvideo -w 16 --sync micro --grid wan-long"
add long-sp-14b-micro-s256 "R --model wan2.1-14b --sp per-sample --sync micro -w 16 --grid wan-long --global-batch samples:256"
add long-sp-14b            "R --model wan2.1-14b --sp per-sample -w 16 --grid wan-long"
add real-power             "R --cost-model power"
add real-ckpt-off          "R --checkpointing off"
add real-wan-long          "R --grid wan-long"
add real-cogvideox         "R --model cogvideox-5b"
add real-seed-epoch        "R --seed 7 --epoch 3"
add real-a100-w4           "R --device a100 -w 4"
add real-budgets           "R --mem-budget 60000 --comp-budget auto --step-budget auto"
add real-overlap           "R --sync micro --overlap 0.3 --reshard-after-forward off"
add mix50k                 "G1"
add mix50k-w16             "G1 -w 16"
add mix50k-micro           "G1 --sync micro"
add mix50k-steps200        "G1 --global-batch steps:200 --on-oversize skip"
add mix3k                  "G2 --on-oversize skip"
add mix3k-sp-14b           "G2 --model wan2.1-14b --sp per-sample --on-oversize skip"
add mix3k-micro-drop       "G2 --sync micro --end-policy drop --on-oversize skip"
add clips8k                "G3 --on-oversize skip"
add clips8k-micro-w16      "G3 --sync micro -w 16 --on-oversize skip"
add clips8k-tokens         "G3 --global-batch tokens:4000000 --on-oversize skip"
add clips8k-dup            "G3 G3 --on-duplicate skip --on-oversize skip"
add real-jsonl             "J"
add real-jsonl-micro       "J --sync micro --global-batch samples:96"
plans=(real real-jsonl real-micro real-fsdp14b-w16 real-samples64 real-free real-drop real-sp-min-14b real-sp-micro-14b
  real-sp-2-micro long-sp-hunyuan-micro long-sp-14b-micro-s256 long-sp-14b mix50k mix50k-micro mix3k-micro-drop clips8k-micro-w16)
reports=(real real-micro real-sp-min-14b mix3k)
if [ "$BIG" = 1 ]; then
  add big10m "BIG --on-oversize skip"
  plans+=(big10m)
fi

expand() {  # the argument words of a config, manifests expanded
  local w out=()
  for w in $1; do
    case "$w" in
      R) out+=("${R[@]}") ;; J) out+=("${J[@]}") ;; G1) out+=("${G1[@]}") ;; G2) out+=("${G2[@]}") ;; G3) out+=("${G3[@]}") ;;
      BIG) out+=(-m "$(gen big10m 10000000 4 0.4)") ;;
      *) out+=("$w") ;;
    esac
  done
  printf '%s\n' "${out[@]}"
}
in_list() { local x="$1"; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }

runs=0 same=0 differ=0
compare() {  # compare NAME: WORK/out/{base,new}/NAME.* byte for byte
  local f rel
  for f in "$WORK/out/base/$1".*; do
    rel="$(basename "$f")"
    runs=$((runs + 1))
    if cmp -s "$f" "$WORK/out/new/$rel"; then same=$((same + 1)); else
      differ=$((differ + 1)); echo "DIFFERS: $rel"
      diff "$f" "$WORK/out/new/$rel" >"$WORK/diff/$rel.diff" 2>&1
      head -5 "$WORK/diff/$rel.diff" | cut -c1-200
    fi
  done
}
run_both() {  # run_both NAME OUTFILE_SUFFIX CLI-ARGS...: stdout, stderr and any --out file of both
  local name="$1" suf="$2" side bin
  shift 2
  for side in base new; do
    bin="$BASE"; [ "$side" = new ] && bin="$NEW"
    local dir="$WORK/out/$side"
    local args=("$@")
    args=("${args[@]//@OUT@/$dir/$name.$suf.jsonl}")
    args=("${args[@]//@HTML@/$dir/$name.$suf.html}")
    "$bin" "${args[@]}" >"$dir/$name.$suf.stdout" 2>"$dir/$name.$suf.stderr"
    echo "exit $?" >>"$dir/$name.$suf.stderr"
    # The paths of the two sides differ in messages that name the output file.
    sed -i "s#$dir/#OUT/#g" "$dir/$name.$suf.stdout" "$dir/$name.$suf.stderr"
  done
}

# The strategies both builds know (each build's `--strategy` help lists its registry).
strategies_of() { "$1" plan --help | sed -n 's/.*--strategy TEXT=all *Strategy: \(.*\), or all.*/\1/p' | tr -d ' ' | tr ',' '\n'; }
mapfile -t strategies < <(comm -12 <(strategies_of "$BASE" | sort) <(strategies_of "$NEW" | sort))
[ ${#strategies[@]} -gt 0 ] || { echo "plan_identity: no strategy both builds list in --help" >&2; exit 2; }
t0=$(date +%s)
for c in "${configs[@]}"; do
  name="${c%%|*}"
  mapfile -t args < <(expand "${c#*|}")
  run_both "$name" table plan "${args[@]}"
  run_both "$name" json plan "${args[@]}" --json
  if in_list "$name" "${plans[@]}"; then
    for s in "${strategies[@]}"; do
      run_both "$name" "plan-$s" plan "${args[@]}" -s "$s" -q --out @OUT@
    done
  fi
  if in_list "$name" "${reports[@]}"; then
    run_both "$name" report report "${args[@]}" --out @HTML@
  fi
  compare "$name"
done
echo "plan_identity: ${#configs[@]} configurations, $runs outputs: $same identical, $differ differ ($(($(date +%s) - t0)) s)"
[ "$differ" = 0 ]
