"""Builds the `adaptiveload` Python package: python/adaptiveload plus the C++ extension
adaptiveload._C, which is the torch binding (python/csrc/*.cpp) linked against the libraries
CMake builds: the C++ core (adaptiveload_core: src/adaptiveload/**, the embedded presets and
manifests) and, when torch has CUDA and nvcc exists, the CUDA kernels (adaptiveload_cuda).
One list of sources, flags and CUDA architectures: the CMake files'.

  /usr/bin/python3 -m venv .venv && .venv/bin/pip install torch
  MAX_JOBS=2 .venv/bin/pip install --no-build-isolation .          # or: -e . / build_ext --inplace

The CMake build: `build/` when it is configured (scripts/build.sh's; its libraries are reused,
nothing is compiled twice), else `build-python/`, configured here with only the libraries
(no tests, benchmarks or CLI). The extension then takes that build's flags (AL_NATIVE=ON
there makes it CPU-specific). Needs cmake (>= 3.25) on PATH; ninja when present.
Environment: AL_CMAKE_BUILD_DIR picks the build folder; AL_NATIVE=1 configures build-python
with -march=native (off by default: the baseline x86-64, the CPU kernel picks its SIMD path at
run time); AL_CUDA=0 forces a CPU-only extension; TORCH_CUDA_ARCH_LIST (e.g. "9.0") sets the
CUDA architectures of a new build-python (default: cuda/CMakeLists.txt's); MAX_JOBS sets
parallel compile jobs.
"""
import os
import re
import shutil
import subprocess

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def want_cuda():
    """A CUDA build when torch has CUDA and nvcc exists (a GPU need not be visible)."""
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    if os.environ.get("AL_CUDA", "1") == "0":
        return False
    nvcc = shutil.which("nvcc") or (CUDA_HOME and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc")))
    return bool(torch.version.cuda) and bool(nvcc)


def cuda_architectures(arch_list):
    """TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX") as CMAKE_CUDA_ARCHITECTURES ("80-real;90-real;90-virtual")."""
    out = []
    for item in re.split(r"[;\s]+", arch_list.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", item)
        if not m:
            raise RuntimeError(f"TORCH_CUDA_ARCH_LIST: cannot read '{item}' (expected e.g. 8.0, 9.0 or 9.0+PTX)")
        arch = m.group(1) + m.group(2) + m.group(3)
        out.append(arch + "-real")
        if m.group(4):
            out.append(arch + "-virtual")
    return ";".join(out)


def cmake_libraries(cuda):
    """Configures (when needed) and builds the core and kernel libraries with CMake; returns the
    static libraries to link, in link order."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("setup.py: cmake not found on PATH; it builds the C++ core (apt-get install cmake, "
                           "or pip install cmake)")
    import torch

    abi = int(torch.compiled_with_cxx11_abi())
    build = os.environ.get("AL_CMAKE_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
    else:
        build = os.path.join(ROOT, "build")
        # The configured release build is reused only when it has what this extension needs
        # (the CUDA library for a CUDA extension) and torch's C++ ABI is the default one.
        if not (os.path.exists(os.path.join(build, "CMakeCache.txt")) and abi == 1
                and (not cuda or os.path.exists(os.path.join(build, "cuda", "CMakeFiles")))):
            build = os.path.join(ROOT, "build-python")
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        cfg = [cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DAL_BUILD_TESTS=OFF",
               "-DAL_BUILD_BENCH=OFF", "-DAL_BUILD_CLI=OFF", "-DAL_CUDA_EMU=OFF", "-DAL_SCAN=OFF",
               "-DAL_CUDA=" + ("ON" if cuda else "OFF"),
               "-DAL_NATIVE=" + ("ON" if os.environ.get("AL_NATIVE", "0") == "1" else "OFF")]
        if shutil.which("ninja"):
            cfg += ["-G", "Ninja"]
        # Header-only dependencies copied by scripts/vendor_headers.sh, for machines without the
        # Debian -dev packages (a GPU machine with only PyTorch): git-ignored, used when present.
        vendored = os.path.join(ROOT, ".deps", "include")
        if os.path.isdir(vendored):
            cfg.append("-DCMAKE_INCLUDE_PATH=" + vendored)
        if abi == 0:
            cfg.append("-DCMAKE_CXX_FLAGS=-D_GLIBCXX_USE_CXX11_ABI=0")
        if cuda and os.environ.get("TORCH_CUDA_ARCH_LIST"):
            cfg.append("-DCMAKE_CUDA_ARCHITECTURES=" + cuda_architectures(os.environ["TORCH_CUDA_ARCH_LIST"]))
        subprocess.run(cfg, check=True)
    targets = ["adaptiveload_core"] + (["adaptiveload_cuda"] if cuda else [])
    subprocess.run([cmake, "--build", build, "--target", *targets, "-j", jobs], check=True)
    libs = ([os.path.join(build, "cuda", "libadaptiveload_cuda.a")] if cuda else []) + [
        os.path.join(build, "libadaptiveload_core.a")]
    for lib in libs:
        if not os.path.exists(lib):
            raise RuntimeError(f"setup.py: CMake built no {lib}")
    return libs


def extensions():
    from torch.utils import cpp_extension

    os.chdir(ROOT)  # sources are given relative to the repository root
    binding = sorted(os.path.join("python", "csrc", f) for f in os.listdir(os.path.join(ROOT, "python", "csrc"))
                     if f.endswith(".cpp"))
    cuda = want_cuda()
    # -g0: no debug info (Python's CFLAGS add -g).
    cxx = ["-O3", "-g0", "-std=c++17", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter",
           "-Wno-deprecated-declarations"]
    include_dirs = [os.path.join(ROOT, "src"), os.path.join(ROOT, "python", "csrc")]
    vendored = os.path.join(ROOT, ".deps", "include")
    if os.path.isdir(vendored):
        include_dirs.append(vendored)  # pcg_random.hpp, which the core's public headers include
    kwargs = dict(
        name="adaptiveload._C",
        sources=binding,
        include_dirs=include_dirs,
        extra_link_args=["-fopenmp"],
    )
    if cuda:
        include_dirs.append(os.path.join(ROOT, "cuda"))
        kwargs["define_macros"] = [("AL_WITH_CUDA", "1")]
        kwargs["extra_compile_args"] = {"cxx": cxx, "nvcc": []}
        return [cpp_extension.CUDAExtension(**kwargs)]
    kwargs["extra_compile_args"] = {"cxx": cxx}
    return [cpp_extension.CppExtension(**kwargs)]


def build_ext_cls():
    from torch.utils import cpp_extension

    class BuildExtension(cpp_extension.BuildExtension.with_options(use_ninja=True)):
        """Builds the CMake libraries first (only when an extension is built, not on every
        setup.py command), then links the binding against them."""

        def build_extensions(self):
            libs = cmake_libraries(want_cuda())
            for ext in self.extensions:
                ext.extra_objects = list(libs)
                ext.depends = list(ext.depends) + list(libs)  # relink when CMake rebuilt one
            super().build_extensions()

    return BuildExtension


setup(
    name="adaptiveload",
    version="0.1.0",
    description="Cost-balanced batch planning and a fused adaLN op for video DiT training",
    package_dir={"": "python"},
    packages=find_packages(where="python", include=["adaptiveload", "adaptiveload.*"]),
    ext_modules=extensions(),
    cmdclass={"build_ext": build_ext_cls()},
    python_requires=">=3.8",
    zip_safe=False,
)
