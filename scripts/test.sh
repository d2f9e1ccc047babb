#!/usr/bin/env bash
# Quick start: set up a fresh machine, build everything, run the whole test suite. Every
# stage runs even when an earlier one failed (a later stage that needs a failed one reports
# that), and the summary at the end gives each stage's result and time:
#   deps        Debian packages (scripts/install_deps.sh)
#   lint        clang-format, ruff check, the function-length check and the
#               600-line file cap (scripts/lint.sh; `scripts/lint.sh --fix` applies the formatters)
#   build       C++ core, CLI, tests, benchmarks, CUDA kernels when nvcc exists (scripts/build.sh)
#   ctest       the C++ tests ctest lists, incl. the CUDA kernels on the CPU emulation (tests/cuda_emu),
#               run by scripts/gtest_batches.py (a few processes per gtest binary, not one per test)
#   python-env  .venv with PyTorch 2.x from PyPI and the package, CUDA binding compiled
#               when torch is a CUDA build and nvcc exists (scripts/python_env.sh)
#   pytest      the Python tests (python/tests)
#   python-env-newest, pytest-newest
#               the same in .venv-torch-newest with the newest torch on PyPI
#               (AL_TORCH_SET=newest scripts/python_env.sh): the package built against it and the
#               whole Python suite run on it. AL_NEWEST_TORCH=0 leaves them out (the summary then
#               says they were not run)
#   reliability ASan+UBSan suite, TSan adaLN tests, fuzzing (scripts/reliability.sh)
#   gpu-preflight  what a GPU run carries, checked here (scripts/gpu_prepare.sh, then
#               gpu_check.sh --preflight and gpu_eval.sh --preflight)
# Exit status: 0 when every stage passed.
set -uo pipefail
cd "$(dirname "$0")/.."
T_ALL=$(date +%s)

# One compiler cache for the builds (build/, build-python/, the sanitizer and fuzz builds),
# kept between runs in the user's cache folder (${XDG_CACHE_HOME:-~/.cache}/adaptiveload/ccache,
# at most 5 GB; AL_CCACHE_DIR for another), as CI systems keep ccache's folder: the package
# build recompiles the core and the CUDA kernels with the commands build/ used, pip's isolated
# build in python/tests/test_package_install.py does again, and the next run (of any clone)
# recompiles only what changed. ccache keys each object by the preprocessed source, the
# compiler and every flag, so a hit is the object the compiler would make. A new machine starts
# with an empty cache (docs/testing.md: the run's time cold and warm).
# CC/CXX as CMake picks them by default (cc, c++): scikit-build-core would otherwise take
# Python's sysconfig compiler (x86_64-linux-gnu-g++), the same g++ under another name, which
# ccache keys apart.
export CC="${CC:-cc}" CXX="${CXX:-c++}"
al_ccache_dir="${AL_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/adaptiveload/ccache}"
# Without ccache, or where its folder cannot be written (ccache would then fail every compile),
# the builds run uncached.
if command -v ccache >/dev/null 2>&1 && mkdir -p "$al_ccache_dir" 2>/dev/null && [ -w "$al_ccache_dir" ]; then
  export CCACHE_DIR="$al_ccache_dir"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  # Paths under the clone hashed relative to it, and the working folder left out of the key
  # of objects with debug information: another clone of the same sources hits the same objects
  # (their debug information then names that clone's folder as the compile folder).
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
  # pcg_extras.hpp (every source that includes util/rng.h) names __DATE__ __TIME__ in a seed
  # the project never uses (static_arbitrary_seed); ccache then left its direct mode for the
  # preprocessor's output, which names the clone's absolute folder: another clone missed every
  # such object.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:+$CCACHE_SLOPPINESS,}time_macros"
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
names=()
results=()
times=()

stage() {  # stage NAME COMMAND...
  local name="$1" t0 rc
  shift
  echo
  echo "==================== [test.sh] $name: $* ===================="
  t0=$(date +%s)
  "$@"
  rc=$?
  names+=("$name")
  times+=($(($(date +%s) - t0)))
  if [ $rc = 0 ]; then results+=(PASS); else results+=("FAIL (exit $rc)"); fi
  echo "[test.sh] $name: ${results[-1]} in ${times[-1]} s"
  return $rc
}

passed() {  # passed NAME: did that stage pass?
  local i
  for i in "${!names[@]}"; do [ "${names[$i]}" = "$1" ] && [ "${results[$i]}" = PASS ] && return 0; done
  return 1
}

skip() {  # skip NAME REASON
  names+=("$1")
  results+=("NOT RUN ($2)")
  times+=(0)
  echo "[test.sh] $1: not run: $2"
}

python_cuda_report() {  # python_cuda_report [VENV]
  # The CUDA binding must be compiled where torch is a CUDA build and nvcc exists (CI).
  "${1:-.venv}/bin/python" - <<'EOF'
import shutil, os, torch
import adaptiveload._C as c
nvcc = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); nvcc {'found' if nvcc else 'not found'}; "
      f"adaptiveload._C built with CUDA kernels: {c.with_cuda} (linked from the CMake build's adaptiveload_cuda); "
      f"GPU visible: {torch.cuda.is_available()}")
raise SystemExit(0 if c.with_cuda or not (torch.version.cuda and nvcc) else 1)
EOF
}

stage deps scripts/install_deps.sh
stage lint scripts/lint.sh
stage build scripts/build.sh
if passed build; then
  # Every test ctest has, each gtest binary in 2 processes rather than one per test (scripts/gtest_batches.py).
  stage ctest python3 scripts/gtest_batches.py --test-dir build -j2
else
  skip ctest "the build failed"
fi
if stage python-env scripts/python_env.sh; then
  stage python-cuda-build python_cuda_report
  torch_cuda=$(.venv/bin/python -c "import torch; print(int(bool(torch.version.cuda)))" 2>/dev/null || echo 0)
  if [ "$torch_cuda" = 1 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    export AL_REQUIRE_CUDA_BUILD=1  # python/tests/test_torch2.py: the CUDA binding must be there
  fi
  stage pytest .venv/bin/python -m pytest python/tests -q -p no:cacheprovider --durations=15
else
  skip pytest "the Python environment failed"
fi
newest_note=""
if [ "${AL_NEWEST_TORCH:-1}" = 0 ]; then
  newest_note="python-env-newest, pytest-newest: not run (AL_NEWEST_TORCH=0)"
  echo "[test.sh] $newest_note"
elif stage python-env-newest env AL_TORCH_SET=newest scripts/python_env.sh; then
  stage python-cuda-build-newest python_cuda_report .venv-torch-newest
  stage pytest-newest .venv-torch-newest/bin/python -m pytest python/tests -q -p no:cacheprovider --durations=15
else
  skip pytest-newest "the newest-torch Python environment failed"
fi
if passed build; then
  stage reliability scripts/reliability.sh # ASan+UBSan suite, TSan adaLN tests, 60 s per fuzz target
else
  skip reliability "the build failed"
fi
gpu_preflight() {
  scripts/gpu_prepare.sh && scripts/gpu_check.sh --preflight && scripts/gpu_eval.sh --preflight
}
stage gpu-preflight gpu_preflight

echo
echo "==================== [test.sh] summary ($(($(date +%s) - T_ALL)) s) ===================="
status=0
for i in "${!names[@]}"; do
  printf '  %-18s %-28s %6s s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
  [ "${results[$i]}" = PASS ] || status=1
done
[ -z "$newest_note" ] || echo "  $newest_note"
echo "[test.sh] $([ $status = 0 ] && echo "every stage PASS" || echo "some stage FAILED")"
exit $status
