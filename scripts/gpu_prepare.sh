#!/usr/bin/env bash
# Prepares everything a GPU run carries that the GPU machine lacks, in .deps/ (git-ignored;
# pass carry [".deps"] to the device tool):
#   .deps/include   header-only libraries the core includes (nlohmann-json, pcg-cpp, xxHash);
#                   the GPU machine has no Debian -dev packages
#   .deps/wheels    wheels for Python 3.12 from requirements/gpu-wheels.txt (diffusers and what
#                   it needs, Liger-Kernel); the GPU machine has no internet
# Then checks the total against the 64 MiB a run may carry (tracked files + .deps).
# Run it here, then `scripts/gpu_check.sh --preflight` and `scripts/gpu_eval.sh --preflight`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/vendor_headers.sh
# The manifests are tracked (data/) and travel with the work tree; an older copy here goes.
rm -rf .deps/datasets
mkdir -p .deps/wheels
PIP=(python3 -m pip)
[ -x .venv/bin/python ] && PIP=(.venv/bin/python -m pip)
# --no-deps: the list is the whole set (torch, triton and numpy are the machine's own).
"${PIP[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .deps/wheels \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -r requirements/gpu-wheels.txt
# Keep only the wheels the list names (an older pin's wheel would otherwise travel too).
keep=$(grep -vE '^\s*(#|$)' requirements/gpu-wheels.txt | sed -E 's/==.*//' | tr 'A-Z-.' 'a-z__')
for w in .deps/wheels/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | tr 'A-Z-.' 'a-z__')
  grep -qx "$name" <<<"$keep" || { echo "gpu_prepare: removing $(basename "$w") (not in the list)"; rm -f "$w"; }
done
tracked=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
carried=$(du -sb .deps | cut -f1)
total=$((tracked + carried))
limit=$((64 * 1024 * 1024))
printf 'gpu_prepare: .deps %s (include %s, wheels %s: %d files); with the work tree %.1f MiB of %d MiB\n' \
  "$(du -sh .deps | cut -f1)" "$(du -sh .deps/include | cut -f1)" \
  "$(du -sh .deps/wheels | cut -f1)" "$(ls .deps/wheels | wc -l)" "$(echo "$total / 1048576" | bc -l)" 64
[ "$total" -le "$limit" ] || { echo "gpu_prepare: over the 64 MiB a run may carry" >&2; exit 1; }
