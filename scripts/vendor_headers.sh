#!/usr/bin/env bash
# Copies the header-only libraries the core includes (nlohmann-json, pcg-cpp, xxHash) into
# .deps/include (git-ignored), so the Python package builds on a machine that has PyTorch but
# not the Debian -dev packages (e.g. a GPU machine: pass `.deps` along with the work tree).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
mkdir -p .deps/include
cp -r /usr/include/nlohmann .deps/include/
cp /usr/include/pcg_random.hpp /usr/include/pcg_extras.hpp /usr/include/pcg_uint128.hpp .deps/include/
cp /usr/include/xxhash.h .deps/include/
echo "vendored headers in .deps/include ($(du -sh .deps/include | cut -f1))"
