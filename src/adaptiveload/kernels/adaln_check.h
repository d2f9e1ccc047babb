// Test support for the adaLN kernels, shared by the CPU tests, the CUDA test and the
// benchmarks: host tensors of any dtype, a deterministic problem generator, the
// "unfused PyTorch eager" emulation, and the tolerance rule of DESIGN.md:
//
//   max |kernel - truth| <= 2 * max |unfused - truth| + atol,   atol = a(dtype) * max |truth|
//
// where truth is the fp64 reference run on fp32 copies of the inputs (so it carries no
// 16-bit output rounding; for segments, on fp64 copies with the per-token modulation the
// segments expand to, dscale / dshift summed over each segment's rows) and unfused is the same math
// done the way eager PyTorch does it: layer_norm rounded to the dtype, then the multiply rounded,
// then the add rounded (backward: the same graph differentiated, each intermediate rounded).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace adaln_check {

// A host [rows, cols] tensor with a row stride (elements), any DType.
struct Buffer {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<unsigned char> bytes;

  Buffer() = default;
  Buffer(DType t, int64_t r, int64_t c, int64_t s = -1);
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
  const void* data() const { return bytes.empty() ? nullptr : bytes.data(); }
  size_t size_bytes() const { return bytes.size(); }
  double get(int64_t r, int64_t c) const;
  void set(int64_t r, int64_t c, double v);  // rounds to dtype (via fp32, RNE)
  Buffer as(DType t) const;                  // dense copy converted to t
};

// Deterministic uniform fill in [lo, hi), hashed from (seed, row, col): thread-count free.
void fill_uniform(Buffer& b, uint64_t seed, double lo, double hi);

struct AdalnCase {
  int64_t batch = 1, L = 1, D = 64;  // rows = batch * L
  bool per_token = false;
  // Non-empty: a packed batch of segments of these lengths (0 allowed), instead of batch x L
  // rows: rows = their sum, [segments, D] modulation, cu_seqlens in int64 or int32.
  std::vector<int64_t> segments;
  bool seg_i64 = true;
  DType x_dtype = DType::BF16, mod_dtype = DType::F32, weight_dtype = DType::F32;
  bool weight = false, bias = false;
  float eps = 1e-6f;
  int64_t pad = 0;        // extra elements per row in every [*, D] tensor's stride
  double x_offset = 0.5;  // rows get a random mean in [-x_offset, x_offset]
  uint64_t seed = 1;
  std::string name() const;
  AdalnParams shape_params() const;         // shape, dtypes and eps; no tensors (cu_seqlens null)
  int64_t rows() const;                     // batch * L, or the segments' total
  int64_t mod_rows() const;                 // rows of scale / shift
  std::vector<int64_t> mod_row_of() const;  // [rows]: the modulation row of each row
};

// The dtype and flag combinations the kernels take, in one order (x F32, BF16, F16; the
// modulation F32 or x's dtype; per-token modulation off, then on; no affine, then weight and
// bias, in x's dtype when the modulation is): shapes left at their defaults. with_per_token
// false: per-token off only (segments take [n, D] modulation). distinct: without the
// F32-x-with-x-dtype-modulation repeats of the F32 cases.
std::vector<AdalnCase> dtype_combos(bool with_per_token, bool distinct = false);

// All host tensors of one case and the params wired to them.
struct AdalnProblem {
  AdalnCase c;
  Buffer x, scale, shift, weight, bias, y, mean, rstd, dy, dx, dscale, dshift, dweight, dbias;
  std::vector<int64_t> cu64;  // cu_seqlens [segments + 1] (c.seg_i64), else cu32
  std::vector<int32_t> cu32;
  explicit AdalnProblem(const AdalnCase& c);
  AdalnParams params();  // pointers into this problem's buffers (host memory)
};

// The outcome of one fused-vs-truth comparison.
struct AdalnCheck {
  bool ok = true;
  std::string report;  // one line per output: name, kernel err, unfused err, atol
};

using AdalnKernel = std::function<void(const AdalnParams&)>;

// Runs `kernel` (forward or backward) on a fresh problem of case c and applies the rule.
// The backward gets mean / rstd from the reference forward.
AdalnCheck check_adaln_fwd(const AdalnCase& c, const AdalnKernel& kernel);
AdalnCheck check_adaln_bwd(const AdalnCase& c, const AdalnKernel& kernel);

// The per-dtype atol fraction a(dtype) of the rule above.
double atol_fraction(DType t);

}  // namespace adaln_check
}  // namespace adaptiveload
