#!/usr/bin/env bash
# Creates .venv (Debian's /usr/bin/python3, no system site packages), installs PyTorch 2.x
# from PyPI (requirements/torch.txt) and the test/example dependencies
# (requirements/python.txt), then builds and installs the `adaptiveload` package into it
# (pip install --no-build-isolation: scikit-build-core driving CMake, against this torch).
#
# AL_TORCH_SET: pinned (default; requirements/torch.txt, the GPU machine's release, into .venv)
# or newest (requirements/torch-newest.txt, the newest torch on PyPI, into .venv-torch-newest:
# scripts/test.sh's second Python stage). AL_VENV overrides the folder.
#
# PyTorch install (AL_TORCH_INSTALL):
#   auto (default)  lean when the CUDA 13 toolkit's libraries are on the loader path (this
#                   project's machines), else full; a lean install that does not import
#                   falls back to full
#   lean            torch --no-deps + requirements/torch-lean.txt (~1.7 GB, docs/python.md)
#   full            pip's normal install of torch with its nvidia-* runtime wheels (~5 GB)
# requirements/python.txt holds what does not need torch; requirements/torch-addons.txt what
# does (installed --no-deps, so that pip does not complete a lean torch with the wheels it
# left out). Re-running is cheap: the requirements are installed again only when a requirements file
# changed (a stamp in .venv), and the package build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
case "${AL_TORCH_SET:-pinned}" in
pinned) VENV="${AL_VENV:-.venv}" torch_reqs=requirements/torch.txt lean_reqs=requirements/torch-lean.txt ;;
newest) VENV="${AL_VENV:-.venv-torch-newest}" torch_reqs=requirements/torch-newest.txt
  lean_reqs=requirements/torch-newest-lean.txt ;;
*)
  echo "python_env: AL_TORCH_SET must be pinned or newest (got '$AL_TORCH_SET')" >&2
  exit 2
  ;;
esac
mode="${AL_TORCH_INSTALL:-auto}"
case "$mode" in auto | lean | full) ;; *)
  echo "python_env: AL_TORCH_INSTALL must be auto, lean or full (got '$mode')" >&2
  exit 2
  ;;
esac

# A venv made by an earlier version of this script sees Debian's torch 1.13: start afresh.
if [ -f "$VENV/pyvenv.cfg" ] && grep -q "include-system-site-packages = true" "$VENV/pyvenv.cfg"; then
  echo "python_env: $VENV sees the system site packages (old layout); recreating it" >&2
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# The CUDA 13 runtime libraries torch's CUDA wheel links, which the toolkit provides.
toolkit_libs=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcufft.so.12
  libcurand.so.10 libcusolver.so.12 libcusparse.so.12 libnvrtc.so.13 libcupti.so.13 libnvJitLink.so.13)
have_toolkit_libs() {
  local cache lib
  cache="$(/sbin/ldconfig -p 2>/dev/null || true)"
  for lib in "${toolkit_libs[@]}"; do
    grep -qE "[[:space:]]$lib[[:space:]]" <<<"$cache" || return 1
  done
}
torch_imports() { "$VENV/bin/python" -c "import torch; torch.ones(2).sum()" >/dev/null 2>&1; }

install_torch() {
  local want="$1"
  if [ "$want" = lean ]; then
    echo "python_env: installing torch (lean: --no-deps, CUDA libraries from the toolkit)" >&2
    "${pip[@]}" install --no-deps -r "$torch_reqs"
    "${pip[@]}" install -r "$lean_reqs"
  else
    echo "python_env: installing torch (full, with its nvidia-* wheels)" >&2
    "${pip[@]}" install -r "$torch_reqs"
  fi
}

stamp="$VENV/.al-requirements"
reqs=("$torch_reqs" "$lean_reqs" requirements/python.txt requirements/torch-addons.txt)
want_stamp="$mode $(cat "${reqs[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want_stamp" ] || ! torch_imports; then
  start=$SECONDS
  chosen="$mode"
  if [ "$mode" = auto ]; then
    if have_toolkit_libs; then chosen=lean; else chosen=full; fi
  fi
  install_torch "$chosen"
  if ! torch_imports; then
    if [ "$mode" = auto ] && [ "$chosen" = lean ]; then
      echo "python_env: the lean torch does not import here; installing the full one" >&2
      install_torch full
    fi
    if ! torch_imports; then
      echo "python_env: 'import torch' fails in $VENV:" >&2
      "$VENV/bin/python" -c "import torch" >&2 || true
      exit 1
    fi
  fi
  "${pip[@]}" install -r requirements/python.txt
  "${pip[@]}" install --no-deps -r requirements/torch-addons.txt
  echo "$want_stamp" >"$stamp"
  echo "python_env: requirements installed in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1) in $VENV)" >&2
fi

# The package: scikit-build-core driving the project's CMake against this venv's torch (the CUDA
# kernels too when torch has CUDA and nvcc exists; a GPU need not be visible). Its build folder,
# build-python/<wheel tag>, is shared by the two venvs: switching torch recompiles the binding
# only, not the core or the kernels (docs/python.md).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
CMAKE_BUILD_PARALLEL_LEVEL="${MAX_JOBS:-$(nproc)}" "${pip[@]}" install --no-build-isolation --no-deps .
