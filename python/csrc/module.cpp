// adaptiveload._C: the planner bindings (pybind11) and, by loading this library, the
// torch.ops.adaptiveload ops (registered in adaln_ops*.cpp / adaln_autograd.cpp).
#include <torch/extension.h>

#include <string>

#include "adaln_args.h"
#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace py {

void bind_manifest(pybind11::module_& m);
void bind_planner(pybind11::module_& m);
void bind_registry(pybind11::module_& m);
void bind_media(pybind11::module_& m);
void bind_adaptation(pybind11::module_& m);

}  // namespace py
}  // namespace adaptiveload

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace al = adaptiveload;
  m.doc() =
      "adaptiveload C++ core: planner bindings and the fused adaLN ops (torch.ops.adaptiveload)";
  // The core's messages name options as Python arguments (mem_budget, packing='off') in this
  // process, not as the CLI's flags (util/option_word.h, from the core's one option table).
  al::set_front_end(al::FrontEnd::kPython);
  // InputError / ConfigError -> ValueError with the core's message.
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const al::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const al::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  // In the order the one bind_planner had: a class before the functions whose signatures
  // (in their docstrings) name it.
  al::py::bind_manifest(m);
  al::py::bind_planner(m);
  al::py::bind_registry(m);
  al::py::bind_media(m);
  al::py::bind_adaptation(m);
  // The op's input checks, for the fake kernel (adaptiveload/_fake.py) on concrete shapes:
  // the same errors on fake and meta tensors as on real ones. No data is touched.
  m.def(
      "_adaln_check_fwd",
      [](const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
         const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
         const c10::optional<at::Tensor>& cu_seqlens) {
        al::py::adaln_check_inputs(x, shift, scale, weight, bias, eps, cu_seqlens);
      },
      pybind11::arg("x"), pybind11::arg("shift"), pybind11::arg("scale"), pybind11::arg("weight"),
      pybind11::arg("bias"), pybind11::arg("eps"), pybind11::arg("cu_seqlens") = pybind11::none());
  m.def(
      "_adaln_check_bwd",
      [](const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
         const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
         const at::Tensor& mean, const at::Tensor& rstd,
         const c10::optional<at::Tensor>& cu_seqlens) {
        const auto lay = al::py::adaln_check_inputs(x, scale, scale, weight, bias, 0.0, cu_seqlens);
        al::py::adaln_check_bwd_inputs(lay, dy, x, mean, rstd);
      },
      pybind11::arg("dy"), pybind11::arg("x"), pybind11::arg("scale"), pybind11::arg("weight"),
      pybind11::arg("bias"), pybind11::arg("mean"), pybind11::arg("rstd"),
      pybind11::arg("cu_seqlens") = pybind11::none());
#ifdef AL_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
}
