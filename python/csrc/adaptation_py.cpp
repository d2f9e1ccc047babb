// Python bindings of online adaptation's estimators (adaptiveload._C.learn_rank_speeds): the
// sampler's observe_step (python/adaptiveload/sampler/_adaptation.py) gathers the ratios.
#include <torch/extension.h>

#include <vector>

#include "adaptiveload/cost/speed_learning.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

void bind_adaptation(pb::module_& m) {
  m.def(
      "learn_rank_speeds",
      [](const std::vector<std::vector<double>>& window, const std::vector<double>& current,
         double tolerance, size_t min_steps) {
        SpeedLearning p;
        p.tolerance = tolerance, p.min_steps = min_steps;
        return learn_rank_speeds(window, current, p);
      },
      pb::arg("window"), pb::arg("current"), pb::arg("tolerance") = SpeedLearning{}.tolerance,
      pb::arg("min_steps") = SpeedLearning{}.min_steps,
      "New speed factors per rank from a window of [step][rank] ratios, measured over predicted "
      "seconds (NaN "
      "where a rank had no work), and the factors in effect (cost/speed_learning.h).");
}

}  // namespace py
}  // namespace adaptiveload
