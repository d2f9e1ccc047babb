#!/usr/bin/env bash
# Configures and builds the C++ library, the CLI, the tests and the benchmarks in build/
# (Release). CUDA kernels are compiled too when nvcc is found (no GPU needed to compile).
#   scripts/build.sh [cmake --build arguments, e.g. --target adaptiveload]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" "$@"
