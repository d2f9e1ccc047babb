#!/usr/bin/env bash
# GPU check of the fused adaLN CUDA kernels, for a machine with an NVIDIA GPU and nvcc but
# without the project's C++ dependencies (no GTest, nlohmann, CLI11, pcg, xxhash): it
# compiles only the kernel sources directly with g++ / nvcc (no CMake), for this GPU's
# architecture only, then runs
#   1. the CUDA tests (standalone main, the same checks as adaptiveload_cuda_tests),
#   2. compute-sanitizer memcheck and racecheck over a small run of them (when it exists),
#   3. the CUDA benchmark (copy-bandwidth baseline, fwd / bwd GB/s per shape),
# and prints a short summary. Budget: well under 6 minutes on an H100 / H200 host.
#
#   scripts/gpu_check.sh                 build, test, sanitize, bench
#   scripts/gpu_check.sh --compile-only  build for sm_90 (no GPU needed) and stop
#   scripts/gpu_check.sh --quick         bench only Wan 1.3B 480p bf16 B=1
#   scripts/gpu_check.sh --preflight     here, on the CPU: in a copy of exactly what travels
#                                        (tracked files + .deps, nothing beside it), check that
#                                        no header comes from a Debian -dev package, then
#                                        --compile-only there; run before using a GPU
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), CXX (g++),
# BUILD_DIR (default: build-gpu-check in the repo root), BENCH_ARGS (extra bench flags).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu-check}"
CXX="${CXX:-g++}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
COMPILE_ONLY=0
QUICK=0
PREFLIGHT=0
for a in "$@"; do
  case "$a" in
    --compile-only) COMPILE_ONLY=1 ;;
    --quick) QUICK=1 ;;
    --preflight) PREFLIGHT=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done

log() { printf '[gpu_check] %s\n' "$*"; }
die() { printf '[gpu_check] ERROR: %s\n' "$*" >&2; exit 1; }

[ -x "$NVCC" ] || die "nvcc not found (set NVCC=/path/to/nvcc or put it on PATH)"
command -v "$CXX" >/dev/null || die "$CXX not found (set CXX)"
KERNEL_CPP=("$ROOT"/src/adaptiveload/kernels/*.cpp)  # the CPU reference and paths the tests link
# The CUDA library: the host API, the kernel files of cuda/adaln_sources.cmake (the one list
# CMake builds too) and the host-side plan (plain C++, host compiler); then the test and bench.
CUDA_LIB_CU=(adaln_cuda $(sed -n 's/^ *\(adaln_[a-z0-9_]*\)\.cu)\{0,1\}$/\1/p' "$ROOT/cuda/adaln_sources.cmake"))
[ ${#CUDA_LIB_CU[@]} -gt 1 ] || die "no kernel sources found in cuda/adaln_sources.cmake"
CUDA_CU=("${CUDA_LIB_CU[@]}" test_adaln_cuda bench_adaln_cuda)
CUDA_CPP=(adaln_launch_plan)

if [ "$PREFLIGHT" = 1 ]; then
  # shellcheck source=lib/preflight.sh
  . "$ROOT/scripts/lib/preflight.sh"
  T0=$(date +%s)
  COPY="$(preflight_copy "$ROOT")"
  log "preflight: copy of what travels in $COPY ($(du -sh "$COPY" | cut -f1); nothing beside it: $([ "$(ls -A "$(dirname "$COPY")")" = "$(basename "$COPY")" ] && echo yes || echo NO))"
  ok=1
  preflight_headers "$CXX" "-std=c++17 -fopenmp -I$COPY/src" "$COPY"/src/adaptiveload/kernels/*.cpp || ok=0
  cu_files=()
  for f in "${CUDA_CU[@]}"; do cu_files+=("$COPY/cuda/$f.cu"); done
  preflight_headers "$NVCC" "-std=c++17 -I$COPY/src -I$COPY/cuda" "${cu_files[@]}" || ok=0
  cpp_files=()
  for f in "${CUDA_CPP[@]}"; do cpp_files+=("$COPY/cuda/$f.cpp"); done
  preflight_headers "$CXX" "-std=c++17 -I$COPY/src -I$COPY/cuda" "${cpp_files[@]}" || ok=0
  [ "$ok" = 1 ] && log "preflight: headers: none from a Debian -dev package" || log "preflight: headers: FAIL"
  if BUILD_DIR="$COPY/build-gpu-check" bash "$COPY/scripts/gpu_check.sh" --compile-only; then
    log "preflight: --compile-only in the copy: PASS"
  else
    log "preflight: --compile-only in the copy: FAIL"; ok=0
  fi
  log "preflight: $([ $ok = 1 ] && echo PASS || echo FAIL) in $(( $(date +%s) - T0 )) s"
  [ "$ok" = 1 ] && rm -rf "$(dirname "$COPY")"
  [ "$ok" = 1 ]
  exit $?
fi

# --- target architecture --------------------------------------------------------------
if [ "$COMPILE_ONLY" = 1 ]; then
  ARCH=90
else
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this machine has no NVIDIA driver/GPU (use --compile-only to just build)"
  CAP="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
  [ -n "$CAP" ] || die "nvidia-smi found no GPU (use --compile-only to just build)"
  ARCH="${CAP/./}"
  GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
  log "GPU: $GPU_NAME (compute capability $CAP)"
fi
log "nvcc: $("$NVCC" --version | tail -n1)"
log "building for sm_$ARCH in $BUILD_DIR"

# --- build (no CMake): kernel .cpp with the host compiler, .cu with nvcc, in parallel --
mkdir -p "$BUILD_DIR"
T0=$(date +%s)
CXXFLAGS="-std=c++17 -O3 -march=native -fopenmp -Wall -Wextra -I$ROOT/src"
NVFLAGS="-std=c++17 -O3 -gencode arch=compute_${ARCH},code=sm_${ARCH} -Xcompiler -Wall,-Wextra -I$ROOT/src -I$ROOT/cuda"
pids=()
objs=()
for src in "${KERNEL_CPP[@]}"; do
  f="$(basename "$src" .cpp)"
  "$CXX" $CXXFLAGS -c "$src" -o "$BUILD_DIR/$f.o" > "$BUILD_DIR/$f.log" 2>&1 &
  pids+=($!); objs+=("$BUILD_DIR/$f.o")
done
lib_objs=()
for f in "${CUDA_CPP[@]}"; do
  "$CXX" $CXXFLAGS -I"$ROOT/cuda" -c "$ROOT/cuda/$f.cpp" -o "$BUILD_DIR/$f.o" > "$BUILD_DIR/$f.log" 2>&1 &
  pids+=($!); lib_objs+=("$BUILD_DIR/$f.o")
done
for f in "${CUDA_CU[@]}"; do
  "$NVCC" $NVFLAGS -c "$ROOT/cuda/$f.cu" -o "$BUILD_DIR/$f.o" > "$BUILD_DIR/$f.log" 2>&1 &
  pids+=($!)
done
for f in "${CUDA_LIB_CU[@]}"; do lib_objs+=("$BUILD_DIR/$f.o"); done
build_ok=1
for p in "${pids[@]}"; do wait "$p" || build_ok=0; done
for l in "$BUILD_DIR"/*.log; do
  if [ -s "$l" ]; then log "compiler output of $(basename "$l" .log):"; cat "$l"; fi
done
[ "$build_ok" = 1 ] || die "compilation failed"
LINK=("$NVCC" -arch=sm_"$ARCH" -Xcompiler -fopenmp)
"${LINK[@]}" "$BUILD_DIR/test_adaln_cuda.o" "${lib_objs[@]}" "${objs[@]}" -o "$BUILD_DIR/test_adaln_cuda" || die "link of the test failed"
"${LINK[@]}" "$BUILD_DIR/bench_adaln_cuda.o" "${lib_objs[@]}" "${objs[@]}" -o "$BUILD_DIR/bench_adaln_cuda" || die "link of the bench failed"
log "build done in $(( $(date +%s) - T0 )) s: $BUILD_DIR/test_adaln_cuda, $BUILD_DIR/bench_adaln_cuda"
if [ "$COMPILE_ONLY" = 1 ]; then
  log "--compile-only: stopping here"
  exit 0
fi

# --- run --------------------------------------------------------------------------------
status=0
log "CUDA tests"
timeout 150 "$BUILD_DIR/test_adaln_cuda" | tee "$BUILD_DIR/test.out"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

SAN="$(command -v compute-sanitizer || ls "$(dirname "$NVCC")/compute-sanitizer" 2>/dev/null || true)"
san_result="not run (compute-sanitizer not found)"
if [ -n "$SAN" ] && [ -x "$SAN" ]; then
  san_result=""
  # memcheck: out-of-bounds / misaligned accesses; racecheck: shared-memory hazards (the
  # team reductions and the backward's shared-memory combine).
  # --error-exitcode 3: exit 3 means the tool found errors in our kernels. Any other failure
  # (the driver or a container refusing the tool, a time-out) is the tool not running, which
  # is reported as such and does not fail the check.
  for tool in memcheck racecheck; do
    log "compute-sanitizer $tool (small run)"
    timeout 150 "$SAN" --tool "$tool" --error-exitcode 3 "$BUILD_DIR/test_adaln_cuda" --small > "$BUILD_DIR/sanitizer_$tool.out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      san_result+="$tool clean; "
    elif [ $rc = 3 ] || grep -qE 'ERROR SUMMARY: [1-9]' "$BUILD_DIR/sanitizer_$tool.out"; then
      san_result+="$tool ERRORS (see $BUILD_DIR/sanitizer_$tool.out); "
      status=1
    elif grep -qE '^(FAIL) ' "$BUILD_DIR/sanitizer_$tool.out"; then
      san_result+="$tool: the tests failed under it (see $BUILD_DIR/sanitizer_$tool.out); "
      status=1
    else
      san_result+="$tool REFUSED by this machine (rc $rc: $(grep -m1 -iE 'error|unable|not supported|permission' "$BUILD_DIR/sanitizer_$tool.out" | cut -c1-120)); "
    fi
    tail -n 15 "$BUILD_DIR/sanitizer_$tool.out"
  done
fi

log "CUDA benchmark"
BARGS=(${BENCH_ARGS:-})
[ "$QUICK" = 1 ] && BARGS+=(--quick)
timeout 180 "$BUILD_DIR/bench_adaln_cuda" "${BARGS[@]}" | tee "$BUILD_DIR/bench.out"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

# --- summary ----------------------------------------------------------------------------
echo
echo "================ adaLN GPU check summary (sm_$ARCH, ${GPU_NAME:-}) ================"
grep -E '^(PASS|FAIL|SKIP) ' "$BUILD_DIR/test.out" | sed 's/^/  test  /'
echo "  compute-sanitizer: $san_result"
grep -E '^check .*FAIL' "$BUILD_DIR/bench.out" | sed 's/^/  bench /'
echo "  bench (shape B rows D dtype mode ms GB/s copyGB/s frac):"
grep -E '^  [a-z]' "$BUILD_DIR/bench.out" | sed 's/^/  /'
echo "  elapsed: $(( $(date +%s) - T0 )) s; overall: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
