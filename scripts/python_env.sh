#!/usr/bin/env bash
# Builds and installs the Python package into .venv (a venv over Debian's python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
MAX_JOBS="${MAX_JOBS:-$(nproc)}" .venv/bin/pip install --no-build-isolation --no-deps -q .
