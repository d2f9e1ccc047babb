// F64 storage: the reference computes and stores it (for float64 gradcheck through the
// Python op); the fast CPU paths refuse it by name instead of misreading the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace {

AdalnParams f64_params(std::vector<double>& x, std::vector<double>& mod, std::vector<double>& y,
                       std::vector<float>& mean, std::vector<float>& rstd) {
  AdalnParams p;
  p.rows = 2, p.dim = 3, p.batch = 1, p.rows_per_sample = 2;
  p.x_dtype = p.mod_dtype = p.weight_dtype = DType::F64;
  adaln_set_contiguous_strides(p);
  p.x = x.data(), p.scale = mod.data(), p.shift = mod.data(), p.y = y.data();
  p.mean = mean.data(), p.rstd = rstd.data();
  return p;
}

TEST(AdalnF64, ReferenceStoresFp64) {
  std::vector<double> x = {1.0, 2.0, 4.0, -1.0, 0.5, 1e-9}, mod = {0.25, -0.5, 0.125}, y(6);
  std::vector<float> mean(2), rstd(2);
  const AdalnParams p = f64_params(x, mod, y, mean, rstd);
  adaln_fwd_ref(p);
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 3; ++j) m += x[r * 3 + j] / 3;
    for (int j = 0; j < 3; ++j) v += (x[r * 3 + j] - m) * (x[r * 3 + j] - m) / 3;
    for (int j = 0; j < 3; ++j) {
      const double want = (x[r * 3 + j] - m) / std::sqrt(v + double(p.eps)) * (1 + mod[j]) + mod[j];
      EXPECT_NEAR(y[r * 3 + j], want, 1e-14) << "row " << r << " col " << j;
    }
  }
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_STREQ(dtype_name(DType::F64), "f64");
}

TEST(AdalnF64, FastPathsRefuseItNamingTheReference) {
  std::vector<double> x(6, 1.0), mod(3, 0.0), y(6);
  std::vector<float> mean(2), rstd(2);
  const AdalnParams p = f64_params(x, mod, y, mean, rstd);
  try {
    adaln_fwd_cpu(p);
    FAIL() << "adaln_fwd_cpu accepted F64 storage";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(p, AdalnPass::Fwd), std::invalid_argument);
  EXPECT_NO_THROW(validate_reference(p, AdalnPass::Fwd));
}

}  // namespace
}  // namespace adaptiveload
