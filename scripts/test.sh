#!/usr/bin/env bash
# Quick start: set up a fresh machine, build everything, run the whole test suite:
# the C++ tests (ctest, incl. the CUDA tests, which skip without a GPU) and the Python
# package's tests (pytest, against Debian's CPU PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j2
scripts/python_env.sh
.venv/bin/python -m pytest python/tests -q -p no:cacheprovider
scripts/reliability.sh  # ASan+UBSan suite, TSan adaLN tests, 60 s per fuzz target (docs/testing.md)
