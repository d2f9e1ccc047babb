# The Python extension adaptiveload._C (python/csrc/*.cpp, the only code that touches torch and
# pybind11), a CMake target beside the core: the one build of the package. pip builds it through
# scikit-build-core (pyproject.toml), `setup.py build_ext --inplace` through the same target.
#
# torch is the one in the environment the package installs into: the interpreter CMake is given
# (scikit-build-core passes the one pip runs; setup.py its own). In pip's isolated build
# environment that interpreter's own site-packages are hidden, so torch is looked up a second
# time with `python -I` (isolated mode: no PYTHONPATH, the environment's own site-packages),
# which sees the environment pip installs into. No torch is downloaded for the build, and the
# binding is compiled against the headers of the torch it will run with (docs/python.md).
#
# The core stays C++17; the binding takes the standard its torch's headers require (C++20 from
# torch 2.13 on: ATen.h stops at `#error C++20 or later compatible compiler is required`).
find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)

set(_al_torch_query [=[
import os, sys, torch
root = os.path.dirname(os.path.realpath(torch.__file__))
inc = os.path.join(root, "include")
with open(os.path.join(inc, "ATen", "ATen.h"), errors="replace") as f:
    std = 20 if "C++20 or later compatible compiler is required" in f.read() else 17
print(";".join([torch.__version__, root, str(torch.version.cuda or ""), str(int(torch._C._GLIBCXX_USE_CXX11_ABI)), str(std)]))
]=])
execute_process(COMMAND ${Python_EXECUTABLE} -c "${_al_torch_query}"
  OUTPUT_VARIABLE _al_torch RESULT_VARIABLE _al_rc ERROR_VARIABLE _al_err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _al_rc EQUAL 0)
  execute_process(COMMAND ${Python_EXECUTABLE} -I -c "${_al_torch_query}"
    OUTPUT_VARIABLE _al_torch RESULT_VARIABLE _al_rc ERROR_VARIABLE _al_err OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(NOT _al_rc EQUAL 0)
  message(FATAL_ERROR "adaptiveload: 'import torch' fails in ${Python_EXECUTABLE} (also with -I, outside "
    "pip's build isolation): install PyTorch >= 2.11 into that environment first (pip install torch), "
    "then install adaptiveload into it. Python said:\n${_al_err}")
endif()
list(GET _al_torch 0 AL_TORCH_VERSION)
list(GET _al_torch 1 AL_TORCH_ROOT)
list(GET _al_torch 2 AL_TORCH_CUDA)
list(GET _al_torch 3 AL_TORCH_CXX11_ABI)
list(GET _al_torch 4 AL_TORCH_CXX_STANDARD)
message(STATUS "adaptiveload: torch ${AL_TORCH_VERSION} in ${AL_TORCH_ROOT} (CUDA '${AL_TORCH_CUDA}', "
               "C++${AL_TORCH_CXX_STANDARD} for the binding)")
if(AL_TORCH_CXX11_ABI EQUAL 0)
  # Everything linked into the binding must use torch's std::string ABI.
  target_compile_definitions(adaptiveload_core PUBLIC _GLIBCXX_USE_CXX11_ABI=0)
endif()

file(GLOB AL_BINDING_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/csrc/*.cpp)
# Built by default under scikit-build-core (it installs it); in a developer's build/ only when asked
# for (`setup.py build_ext --inplace`, or `cmake --build build --target _C`).
python_add_library(_C MODULE WITH_SOABI ${AL_BINDING_SOURCES})
if(NOT SKBUILD)
  set_target_properties(_C PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
target_include_directories(_C PRIVATE ${PROJECT_SOURCE_DIR}/python/csrc
  ${AL_TORCH_ROOT}/include ${AL_TORCH_ROOT}/include/torch/csrc/api/include)
# What torch.utils.cpp_extension defines for an extension named adaptiveload._C.
target_compile_definitions(_C PRIVATE TORCH_API_INCLUDE_EXTENSION_H TORCH_EXTENSION_NAME=_C)
target_compile_options(_C PRIVATE -Wno-unused-parameter -Wno-deprecated-declarations)
set_target_properties(_C PROPERTIES CXX_STANDARD ${AL_TORCH_CXX_STANDARD} CXX_STANDARD_REQUIRED ON
                                    CXX_VISIBILITY_PRESET hidden
                                    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
set(_al_torch_libs c10 torch torch_cpu torch_python)
if(AL_HAVE_CUDA AND AL_TORCH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_compile_definitions(_C PRIVATE AL_WITH_CUDA=1)
  target_link_libraries(_C PRIVATE adaptiveload_cuda CUDA::cudart)
  list(APPEND _al_torch_libs c10_cuda torch_cuda)
  set(AL_BINDING_CUDA ON)
else()
  set(AL_BINDING_CUDA OFF)
endif()
message(STATUS "adaptiveload: the binding links the CUDA kernels: ${AL_BINDING_CUDA}")
foreach(lib ${_al_torch_libs})
  target_link_libraries(_C PRIVATE ${AL_TORCH_ROOT}/lib/lib${lib}${CMAKE_SHARED_LIBRARY_SUFFIX})
endforeach()
target_link_libraries(_C PRIVATE adaptiveload_core)

# The torch release the binding was compiled against: adaptiveload/__init__.py refuses another
# minor release with a message instead of an undefined-symbol error from the loader.
file(WRITE ${CMAKE_BINARY_DIR}/generated/_build_info.py
  "# Written by the build (cmake/python_ext.cmake).\ntorch_version = \"${AL_TORCH_VERSION}\"\n")

if(SKBUILD)
  # The wheel: adaptiveload/_C*.so, adaptiveload/_build_info.py and the CLI as
  # adaptiveload/_bin/adaptiveload, which the `adaptiveload` entry point runs (adaptiveload/_cli.py).
  install(TARGETS _C LIBRARY DESTINATION adaptiveload)
  install(FILES ${CMAKE_BINARY_DIR}/generated/_build_info.py DESTINATION adaptiveload)
endif()
