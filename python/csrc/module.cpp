// adaptiveload._C: the planner bindings (pybind11) and, by loading this library, the
// torch.ops.adaptiveload ops (registered in adaln_ops*.cpp / adaln_autograd.cpp).
#include <torch/extension.h>

#include <string>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace py {

void bind_planner(pybind11::module_& m);

namespace {

// The core's messages name the CLI's flags; say the Python keyword instead.
std::string pythonize(std::string msg) {
  const std::pair<const char*, const char*> flags[] = {
      {"--on-bad-row=skip", "on_bad_row='skip'"},
      {"--on-oversize=skip", "on_oversize='skip'"},
      {"--fixed-config FILE", "the fixed_config option"}};
  for (auto [from, to] : flags)
    for (size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + 1))
      msg.replace(at, std::string(from).size(), to);
  return msg;
}

}  // namespace
}  // namespace py
}  // namespace adaptiveload

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace al = adaptiveload;
  m.doc() =
      "adaptiveload C++ core: planner bindings and the fused adaLN ops (torch.ops.adaptiveload)";
  // InputError / ConfigError -> ValueError with the core's message.
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const al::InputError& e) {
      PyErr_SetString(PyExc_ValueError, al::py::pythonize(e.what()).c_str());
    } catch (const al::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, al::py::pythonize(e.what()).c_str());
    }
  });
  al::py::bind_planner(m);
#ifdef AL_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
}
