#!/usr/bin/env bash
# Quick start: set up a fresh machine, build, and run `adaptiveload demo`
# (built-in mixed image + video set, Wan 2.1 1.3B, 8 x H200). Extra arguments go to demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh >/dev/null
exec ./build/cli/adaptiveload demo "$@"
