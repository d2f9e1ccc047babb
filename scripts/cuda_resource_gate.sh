#!/usr/bin/env bash
# Resource gate of the CUDA kernels: compiles cuda/*.cu kernels for each architecture with
# ptxas' resource report (nvcc --resource-usage), prints one line per kernel instantiation
# (registers, spill stores / loads, stack frame, static shared memory, barriers) and fails
# when any instantiation spills. Needs nvcc only (no GPU). Registered as the ctest
# `cuda_resource_gate` when CMake finds nvcc (cuda/CMakeLists.txt).
#
#   scripts/cuda_resource_gate.sh [--nvcc PATH] [--archs "80 90"] [--csv FILE] [FILE.cu ...]
#
# Default files: the kernel files of cuda/adaln_sources.cmake (compiled in parallel);
# default archs: 80 90.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
ARCHS="80 90"
CSV=""
FILES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nvcc) NVCC="$2"; shift 2 ;;
    --archs) ARCHS="$2"; shift 2 ;;
    --csv) CSV="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) FILES+=("$1"); shift ;;
  esac
done
if [ ${#FILES[@]} -eq 0 ]; then
  for f in $(sed -n 's/^ *\(adaln_[a-z0-9_]*\.cu\))\{0,1\}$/\1/p' cuda/adaln_sources.cmake); do FILES+=("cuda/$f"); done
  [ ${#FILES[@]} -gt 0 ] || { echo "cuda_resource_gate: no kernel files in cuda/adaln_sources.cmake"; exit 2; }
fi
command -v "$NVCC" >/dev/null || { echo "cuda_resource_gate: nvcc not found ($NVCC)"; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

GENCODE=()
for a in $ARCHS; do GENCODE+=(-gencode "arch=compute_$a,code=sm_$a"); done
# One nvcc call a file for all architectures (ptxas names the architecture of every
# entry), the files in parallel.
pids=()
for f in "${FILES[@]}"; do
  b="$(basename "$f")"
  "$NVCC" -std=c++17 -O3 -c "$f" -o "$TMP/$b.o" -Isrc -Icuda --resource-usage "${GENCODE[@]}" >"$TMP/$b.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!FILES[@]}"; do
  if ! wait "${pids[$i]}"; then
    cat "$TMP/$(basename "${FILES[$i]}").log"
    echo "cuda_resource_gate: nvcc failed on ${FILES[$i]}"
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 2

python3 - "$TMP" "$CSV" <<'EOF'
import glob, os, re, subprocess, sys

tmp, csv = sys.argv[1], sys.argv[2]
rows = []
for log in sorted(glob.glob(os.path.join(tmp, "*.log"))):
    cur = None
    for line in open(log, encoding="utf-8", errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            cur = {"arch": m.group(2), "mangled": m.group(1), "regs": 0, "spill_st": 0, "spill_ld": 0,
                   "stack": 0, "smem": 0, "bar": 0}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            s = re.search(r"(\d+) bytes smem", line)
            cur["bar"] = int(b.group(1)) if b else 0
            cur["smem"] = int(s.group(1)) if s else 0

if not rows:
    print("cuda_resource_gate: no kernels found in the ptxas report")
    sys.exit(2)
names = subprocess.run(["c++filt"], input="\n".join(r["mangled"] for r in rows), capture_output=True,
                       text=True).stdout.splitlines()
for r, n in zip(rows, names):
    n = re.sub(r"\(anonymous namespace\)::|adaptiveload::|adaln_cuda::", "", n)
    n = re.sub(r"\(Args\)$|\(.*\)$", "", n).replace("__nv_bfloat16", "bf16").replace("__half", "f16")
    r["kernel"] = n
rows.sort(key=lambda r: (r["kernel"], r["arch"]))
hdr = f"{'arch':6} {'regs':>4} {'spill st':>8} {'spill ld':>8} {'stack':>5} {'smem':>6} {'bar':>3}  kernel"
print(hdr)
print("-" * len(hdr))
bad = 0
for r in rows:
    spill = r["spill_st"] + r["spill_ld"] > 0
    bad += spill
    print(f"{r['arch']:6} {r['regs']:4d} {r['spill_st']:8d} {r['spill_ld']:8d} {r['stack']:5d} {r['smem']:6d} "
          f"{r['bar']:3d}  {r['kernel']}{'   <-- SPILLS' if spill else ''}")
if csv:
    with open(csv, "w") as f:
        f.write("arch,kernel,registers,spill_stores,spill_loads,stack,smem,barriers\n")
        for r in rows:
            f.write(f"{r['arch']},\"{r['kernel']}\",{r['regs']},{r['spill_st']},{r['spill_ld']},{r['stack']},"
                    f"{r['smem']},{r['bar']}\n")
print(f"cuda_resource_gate: {len(rows)} kernel instantiation(s), max {max(r['regs'] for r in rows)} registers, "
      f"{bad} spilling: {'FAIL' if bad else 'PASS'}")
sys.exit(1 if bad else 0)
EOF
