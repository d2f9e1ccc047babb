#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the Python package need, only those
# missing. Safe to run again; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcg-cpp-dev libxxhash-dev
  # ffmpeg brings every FFmpeg shared library torchcodec (adaptiveload.media) loads: libavcodec,
  # libavformat, libavutil, libavfilter, libavdevice, libswscale, libswresample.
  libavformat-dev libavcodec-dev libavutil-dev ffmpeg
  python3 python3-dev python3-venv
  clang libclang-rt-14-dev libomp-dev
  # scripts/lint.sh formats with this release only (each formats some code differently).
  clang-format-14
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
