"""A developer's in-place build of adaptiveload._C, for running the tests from the source tree:

  MAX_JOBS=2 .venv/bin/python setup.py build_ext --inplace
  PYTHONPATH=python .venv/bin/python -c "import adaptiveload"

It compiles nothing itself: it builds the CMake target `_C` (cmake/python_ext.cmake, the one list
of sources and flags that `pip install .` builds through scikit-build-core, pyproject.toml)
against the torch of the Python running it, and copies the module and its _build_info.py into
python/adaptiveload/. Installing the package (with the `adaptiveload` command) is pip's job:
`pip install .` (docs/python.md).

The CMake build: `build/` when it is configured (scripts/build.sh's; its core library is reused,
the target is switched on there with -DAL_PYTHON=ON), else `build-python/inplace`, configured
with only the libraries. Environment: AL_CMAKE_BUILD_DIR picks the build folder; AL_NATIVE=1
configures a new folder with -march=native; AL_CUDA=0 builds a CPU-only extension (in
`build-python/inplace-cpu`); TORCH_CUDA_ARCH_LIST (e.g. "9.0") sets the CUDA architectures of a
new folder; MAX_JOBS sets parallel compile jobs.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
USAGE = ("setup.py: only `python setup.py build_ext --inplace` (a developer's in-place build) is here; "
         "install the package with pip: pip install .  (pyproject.toml; docs/python.md)")


def cuda_architectures(arch_list):
    """TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX") as CMAKE_CUDA_ARCHITECTURES ("80-real;90-real;90-virtual")."""
    out = []
    for item in re.split(r"[;\s]+", arch_list.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", item)
        if not m:
            raise SystemExit(f"TORCH_CUDA_ARCH_LIST: cannot read '{item}' (expected e.g. 8.0, 9.0 or 9.0+PTX)")
        arch = m.group(1) + m.group(2) + m.group(3)
        out.append(arch + "-real")
        if m.group(4):
            out.append(arch + "-virtual")
    return ";".join(out)


def build_folder():
    """(folder, whether this script configures it from scratch)."""
    if os.environ.get("AL_CMAKE_BUILD_DIR"):
        build = os.path.abspath(os.environ["AL_CMAKE_BUILD_DIR"])
    elif os.environ.get("AL_CUDA", "1") in ("0", "OFF"):
        build = os.path.join(ROOT, "build-python", "inplace-cpu")
    elif os.path.exists(os.path.join(ROOT, "build", "CMakeCache.txt")):
        build = os.path.join(ROOT, "build")
    else:
        build = os.path.join(ROOT, "build-python", "inplace")
    return build, not os.path.exists(os.path.join(build, "CMakeCache.txt"))


def configure(cmake, build, new):
    cfg = [cmake, "-S", ROOT, "-B", build, "-DAL_PYTHON=ON", "-DPython_EXECUTABLE=" + sys.executable]
    if new:
        cfg += ["-DCMAKE_BUILD_TYPE=Release", "-DAL_BUILD_TESTS=OFF", "-DAL_BUILD_BENCH=OFF", "-DAL_BUILD_CLI=OFF",
                "-DAL_CUDA_EMU=OFF", "-DAL_SCAN=OFF",
                "-DAL_NATIVE=" + ("ON" if os.environ.get("AL_NATIVE", "0") == "1" else "OFF")]
        if os.environ.get("AL_CUDA", "1") in ("0", "OFF"):
            cfg.append("-DAL_CUDA=OFF")
        if shutil.which("ninja"):
            cfg += ["-G", "Ninja"]
        # Header-only dependencies copied by scripts/vendor_headers.sh, for machines without the
        # Debian -dev packages (a GPU machine with only PyTorch): git-ignored, used when present.
        vendored = os.path.join(ROOT, ".deps", "include")
        if os.path.isdir(vendored):
            cfg.append("-DCMAKE_INCLUDE_PATH=" + vendored)
        if os.environ.get("TORCH_CUDA_ARCH_LIST"):
            cfg.append("-DCMAKE_CUDA_ARCHITECTURES=" + cuda_architectures(os.environ["TORCH_CUDA_ARCH_LIST"]))
    subprocess.run(cfg, check=True)


def main(argv):
    if not argv or argv[0] != "build_ext" or not ({"--inplace", "-i"} & set(argv[1:])):
        sys.exit(USAGE)
    cmake = shutil.which("cmake")
    if not cmake:
        sys.exit("setup.py: cmake (>= 3.25) not found on PATH; it builds the extension (apt-get install cmake, "
                 "or pip install cmake)")
    build, new = build_folder()
    configure(cmake, build, new)
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    subprocess.run([cmake, "--build", build, "--target", "_C", "-j", jobs], check=True)
    modules = glob.glob(os.path.join(build, "_C.*.so"))
    if len(modules) != 1:
        sys.exit(f"setup.py: expected one _C.*.so in {build} after the build, found {modules}")
    dest = os.path.join(ROOT, "python", "adaptiveload")
    for old in glob.glob(os.path.join(dest, "_C.*.so")):
        os.remove(old)
    shutil.copy2(modules[0], dest)
    shutil.copy2(os.path.join(build, "generated", "_build_info.py"), dest)
    print(f"setup.py: {os.path.basename(modules[0])} (from {build}) in {dest}")


if __name__ == "__main__":
    main(sys.argv[1:])
