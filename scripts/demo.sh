#!/usr/bin/env bash
# Quick start: set up a fresh machine, build the command-line tool alone (not the tests,
# benchmarks or CUDA suites: scripts/build.sh builds those), and run `adaptiveload demo`
# (the real manifests in data/, Wan 2.1 1.3B, 8 x H200). Extra arguments go to demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
t0=$(date +%s)
scripts/build.sh --target adaptiveload >/dev/null
echo "demo.sh: built build/cli/adaptiveload in $(($(date +%s) - t0)) s" >&2
exec ./build/cli/adaptiveload demo "$@"
