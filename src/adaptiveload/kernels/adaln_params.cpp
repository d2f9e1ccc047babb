// AdalnParams helpers: dtype sizes and names, contiguous strides, validate().
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {

size_t dtype_size(DType t) { return t == DType::F64 ? 8 : t == DType::F32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F64:
      return "f64";
  }
  return "invalid";
}

DType adaln_stats_dtype(DType x_dtype) { return x_dtype == DType::F64 ? DType::F64 : DType::F32; }

void adaln_set_contiguous_strides(AdalnParams& p) {
  p.x_stride = p.y_stride = p.dy_stride = p.dx_stride = p.dim;
  p.scale_stride = p.shift_stride = p.dscale_stride = p.dshift_stride = p.dim;
}

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw std::invalid_argument("AdalnParams." + field + " " + what);
}

std::string num(int64_t v) { return std::to_string(v); }

void check_dtype(DType t, const char* field, bool allow_f64) {
  const int v = static_cast<int>(t);
  if (t == DType::F64 && !allow_f64)
    fail(field,
         "is F64, which only the fp64 reference (adaln_fwd_ref / adaln_bwd_ref) stores; "
         "the fast paths store F32, BF16 or F16");
  if (v < 0 || v > 3)
    fail(field, "(" + std::to_string(v) + ") is not a DType (F32, BF16, F16, F64)");
}

// A [rows, dim] operand: needs a pointer and a row stride >= dim when it is not empty.
void check_matrix(const void* ptr, int64_t stride, int64_t rows, int64_t dim, const char* name,
                  const char* stride_name) {
  if (rows == 0 || dim == 0) return;
  if (ptr == nullptr)
    fail(name, "is null but the tensor has " + num(rows) + " x " + num(dim) + " elements");
  if (stride < dim) fail(stride_name, "(" + num(stride) + ") must be >= dim (" + num(dim) + ")");
}

void check_common(const AdalnParams& p, bool allow_f64 = false) {
  if (p.rows < 0) fail("rows", "(" + num(p.rows) + ") must be >= 0");
  if (p.dim < 0) fail("dim", "(" + num(p.dim) + ") must be >= 0");
  if (p.rows > 0 && p.dim == 0)
    fail("dim", "is 0 but rows is " + num(p.rows) + "; a row needs D >= 1");
  check_dtype(p.x_dtype, "x_dtype", allow_f64);
  check_dtype(p.mod_dtype, "mod_dtype", allow_f64);
  check_dtype(p.weight_dtype, "weight_dtype", allow_f64);
  if (!std::isfinite(p.eps) || p.eps < 0.f) {
    std::ostringstream s;
    s << "(" << p.eps << ") must be finite and >= 0";
    fail("eps", s.str());
  }
  if (p.cu_seqlens != nullptr) {
    if (p.per_token)
      fail("cu_seqlens",
           "is set but per_token is true; segments index [n, D] modulation (one row a "
           "segment), per-token modulation has a row for every row of x: set one of them");
    if (p.rows_per_sample != 0)
      fail("rows_per_sample", "(" + num(p.rows_per_sample) +
                                  ") must be 0 with cu_seqlens (segment i is rows cu_seqlens[i] "
                                  ".. cu_seqlens[i + 1] - 1, of any length)");
    if (p.batch < 0) fail("batch", "(" + num(p.batch) + ") must be >= 0 (the number of segments)");
    if (p.rows > 0 && p.batch == 0)
      fail("batch", "is 0 but rows is " + num(p.rows) +
                        "; with cu_seqlens, batch is the number of segments, which cover the rows");
  } else if (!p.per_token) {
    if (p.batch < 0) fail("batch", "(" + num(p.batch) + ") must be >= 0");
    if (p.rows_per_sample < 0)
      fail("rows_per_sample", "(" + num(p.rows_per_sample) + ") must be >= 0");
    if (p.rows > 0 && p.rows_per_sample == 0)
      fail("rows_per_sample",
           "is 0 but rows is " + num(p.rows) + " (per-sample modulation needs L >= 1)");
    const bool overflow =
        p.rows_per_sample > 0 && p.batch > std::numeric_limits<int64_t>::max() / p.rows_per_sample;
    if (overflow || p.batch * p.rows_per_sample != p.rows)
      fail("rows", "(" + num(p.rows) + ") must equal batch (" + num(p.batch) +
                       ") * rows_per_sample (" + num(p.rows_per_sample) +
                       ") for per-sample modulation");
  }
  const int64_t mod_rows = p.per_token ? p.rows : p.batch;
  check_matrix(p.x, p.x_stride, p.rows, p.dim, "x", "x_stride");
  check_matrix(p.scale, p.scale_stride, mod_rows, p.dim, "scale", "scale_stride");
}

// Only the forward reads shift (the backward's dshift needs dy alone).
void check_shift(const AdalnParams& p) {
  check_matrix(p.shift, p.shift_stride, p.per_token ? p.rows : p.batch, p.dim, "shift",
               "shift_stride");
}

void validate_pass(const AdalnParams& p, AdalnPass pass, bool allow_f64) {
  check_common(p, allow_f64);
  const bool has_rows = p.rows > 0 && p.dim > 0;
  if (has_rows && adaln_stats_dtype(p.x_dtype) == DType::F64) {
    if (p.mean_f64 == nullptr || p.rstd_f64 == nullptr)
      fail(p.mean_f64 == nullptr ? "mean_f64" : "rstd_f64",
           "is null; F64 x saves fp64 statistics there (the forward writes and the backward "
           "reads them; mean / rstd are the fp32 ones of F32 / BF16 / F16 x)");
  } else if (has_rows && (p.mean == nullptr || p.rstd == nullptr)) {
    fail(p.mean == nullptr ? "mean" : "rstd",
         "is null; the forward writes and the backward reads it");
  }
  if (pass == AdalnPass::Fwd) {
    check_shift(p);
    check_matrix(p.y, p.y_stride, p.rows, p.dim, "y", "y_stride");
    return;
  }
  check_matrix(p.dy, p.dy_stride, p.rows, p.dim, "dy", "dy_stride");
  check_matrix(p.dx, p.dx_stride, p.rows, p.dim, "dx", "dx_stride");
  const int64_t mod_rows = p.per_token ? p.rows : p.batch;
  if (p.dscale != nullptr && mod_rows > 0 && p.dscale_stride < p.dim)
    fail("dscale_stride", "(" + num(p.dscale_stride) + ") must be >= dim (" + num(p.dim) + ")");
  if (p.dshift != nullptr && mod_rows > 0 && p.dshift_stride < p.dim)
    fail("dshift_stride", "(" + num(p.dshift_stride) + ") must be >= dim (" + num(p.dim) + ")");
  if (p.dweight != nullptr && p.weight == nullptr)
    fail("dweight", "is set but weight is null (no weight, no weight gradient)");
  if (p.dbias != nullptr && p.bias == nullptr)
    fail("dbias", "is set but bias is null (no bias, no bias gradient)");
}

}  // namespace

void validate(const AdalnParams& p) {
  check_common(p);
  check_shift(p);
}

void validate(const AdalnParams& p, AdalnPass pass) { validate_pass(p, pass, false); }

void validate_reference(const AdalnParams& p, AdalnPass pass) { validate_pass(p, pass, true); }

void validate_segments(const AdalnParams& p) {
  if (p.cu_seqlens == nullptr) return;
  const int64_t n = p.batch;
  auto at = [&](int64_t i) { return "cu_seqlens[" + num(i) + "]"; };
  if (adaln_cu_seqlen(p, 0) != 0)
    fail(at(0),
         "(" + num(adaln_cu_seqlen(p, 0)) + ") must be 0: the first segment starts at row 0");
  for (int64_t i = 1; i <= n; ++i) {
    const int64_t a = adaln_cu_seqlen(p, i - 1), b = adaln_cu_seqlen(p, i);
    if (b < a)
      fail(at(i), "(" + num(b) + ") < " + at(i - 1) + " (" + num(a) +
                      "): segment offsets must ascend (equal offsets make an empty segment)");
  }
  if (adaln_cu_seqlen(p, n) != p.rows)
    fail(at(n), "(" + num(adaln_cu_seqlen(p, n)) + ") must equal rows (" + num(p.rows) +
                    "): the segments cover every row of x");
}

int64_t adaln_segment_of(const AdalnParams& p, int64_t r) {
  int64_t lo = 0, hi = p.batch - 1;  // the answer is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (adaln_cu_seqlen(p, mid) <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace adaptiveload
