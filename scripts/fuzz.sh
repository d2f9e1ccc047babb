#!/usr/bin/env bash
# Fuzzes the inputs the library reads from users: manifests (CSV, JSONL), sampler states,
# profiles / calibration measurements, and planner configurations (fuzz/README.md).
#   scripts/fuzz.sh [seconds]   seconds per target (default 60); FUZZ_JOBS targets at a time
#                               (default: the number of cores)
# Builds fuzz/ with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/, replays
# every file under fuzz/regressions/<target>/ (crashes found earlier), then runs each target
# for the given time from its seed corpus (fuzz/corpus/<target>/, copied; new inputs go to
# build-fuzz/corpus/<target>/). Fails on any crash, sanitizer report, undocumented exception,
# contract violation, timeout (-timeout, 10 s per input) or out-of-memory (2 GB).
# A failing input lands in build-fuzz/artifacts/<target>/; reproduce it with
#   build-fuzz/<target> build-fuzz/artifacts/<target>/crash-...
# and, once fixed, copy it to fuzz/regressions/<target>/.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
BUILD=build-fuzz
TARGETS=(fuzz_manifest_csv fuzz_manifest_jsonl fuzz_state fuzz_profile fuzz_planner)
log() { printf '[fuzz] %s\n' "$*"; }

command -v clang++ >/dev/null || { log "clang++ not found (scripts/install_deps.sh installs clang)"; exit 1; }
T0=$(date +%s)
cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1 || { tail -n 40 "$BUILD/build.log"; log "build failed"; exit 1; }
log "built ${#TARGETS[@]} targets in $(( $(date +%s) - T0 )) s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
status=0

# 1. regressions: every input that once failed must now pass.
for t in "${TARGETS[@]}"; do
  dir=fuzz/regressions/$t
  compgen -G "$dir/*" >/dev/null || continue
  n=$(find "$dir" -type f | wc -l)
  if "$BUILD/$t" -timeout=10 -rss_limit_mb=2048 "$dir"/* >"$BUILD/$t.regressions.log" 2>&1; then
    log "$t: $n regression input(s) pass"
  else
    log "$t: REGRESSION FAILED (see $BUILD/$t.regressions.log)"; tail -n 30 "$BUILD/$t.regressions.log"; status=1
  fi
done

# 2. bounded fuzzing, JOBS targets at a time.
run_target() {
  local t=$1
  mkdir -p "$BUILD/corpus/$t" "$BUILD/artifacts/$t"
  "$BUILD/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t/" "$BUILD/corpus/$t" "fuzz/corpus/$t" \
    >"$BUILD/$t.log" 2>&1
}
pids=()
for t in "${TARGETS[@]}"; do
  run_target "$t" & pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for i in "${!TARGETS[@]}"; do
  t=${TARGETS[$i]}
  rc=0; wait "${pids[$i]}" || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/$t.log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$BUILD/$t.log" | tail -n1)
  cov=$(grep -oE 'cov: [0-9]+' "$BUILD/$t.log" | tail -n1)
  corp=$(find "$BUILD/corpus/$t" -type f | wc -l)
  if [ "$rc" = 0 ]; then
    printf '[fuzz] %-20s ok    %3ss  %9s execs  %6s/s  %s  corpus %s\n' "$t" "$SECONDS_PER_TARGET" "${execs:-?}" "${rate:-?}" "${cov:-}" "$corp"
  else
    printf '[fuzz] %-20s FAIL  exit %s (see %s)\n' "$t" "$rc" "$BUILD/$t.log"
    grep -E 'ERROR|AL_FUZZ_CHECK|undocumented|runtime error|Test unit written|timeout' "$BUILD/$t.log" | head -n 12
    status=1
  fi
done
log "total $(( $(date +%s) - T0 )) s; $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
