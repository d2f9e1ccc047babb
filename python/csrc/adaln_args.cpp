// Tensor checks of the fused adaLN op and AdalnParams filling; see adaln_args.h.
#include "adaln_args.h"

#include <sstream>
#include <string>

namespace adaptiveload {
namespace py {
namespace {

constexpr const char* kOp = "fused_adaln";

std::string shape(at::IntArrayRef s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

std::string dtype_str(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kBool:
      return "bool";
    default:
      return std::string(c10::toString(t));
  }
}

// float32 / bfloat16 / float16 / float64 -> DType; anything else is a ValueError naming `arg`.
// float64 runs the fp64 reference (CPU only): for gradcheck, not for speed.
DType to_dtype(const at::Tensor& t, const char* arg) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::F32;
    case at::kDouble:
      return DType::F64;
    case at::kBFloat16:
      return DType::BF16;
    case at::kHalf:
      return DType::F16;
    default:
      TORCH_CHECK_VALUE(
          false, kOp, ": ", arg, " has dtype ", dtype_str(t.scalar_type()),
          "; supported are float32, bfloat16, float16 and (CPU, through the fp64 reference) "
          "float64");
  }
  return DType::F32;  // not reached
}

void check_device(const at::Tensor& x, const at::Tensor& t, const char* arg) {
  TORCH_CHECK(t.device() == x.device(), kOp, ": ", arg, " is on ", t.device(), " but x is on ",
              x.device(), "; move all inputs to one device");
}

void check_vector(const at::Tensor& x, const c10::optional<at::Tensor>& t, const char* arg,
                  int64_t D) {
  if (!t.has_value() || !t->defined()) return;
  check_device(x, *t, arg);
  TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == D, kOp, ": ", arg, " has shape ",
                    shape(t->sizes()), "; it must be [D] = [", D, "] (D = x.shape[-1])");
  to_dtype(*t, arg);
}

// Segments: x [N, D] packed, cu_seqlens [n + 1] int32 / int64 on x's device, scale and
// shift [n, D].
void check_segments(const at::Tensor& x, const at::Tensor& cu, at::IntArrayRef s,
                    AdalnLayout& lay) {
  TORCH_CHECK_VALUE(cu.scalar_type() == at::kInt || cu.scalar_type() == at::kLong, kOp,
                    ": cu_seqlens has dtype ", dtype_str(cu.scalar_type()),
                    "; it must be int32 or int64 (the segments' row offsets)");
  TORCH_CHECK(cu.device() == x.device(), kOp, ": cu_seqlens is on ", cu.device(), " but x is on ",
              x.device(), "; move cu_seqlens to x's device");
  TORCH_CHECK_VALUE(cu.dim() == 1 && cu.size(0) >= 1, kOp, ": cu_seqlens has shape ",
                    shape(cu.sizes()),
                    "; it must be [n + 1]: the offsets 0 = cu_seqlens[0] <= ... <= cu_seqlens[n] "
                    "= N of n segments");
  TORCH_CHECK_VALUE(x.dim() == 2, kOp, ": x has shape ", shape(x.sizes()),
                    " but cu_seqlens is given; a packed batch is [N, D] (the segments' rows one "
                    "after another: x.flatten(0, -2))");
  const int64_t n = cu.size(0) - 1, D = x.size(-1);
  TORCH_CHECK_VALUE(s.size() == 2 && s[0] == n && s[1] == D, kOp, ": scale and shift have shape ",
                    shape(s), " but cu_seqlens has ", n + 1, " offsets (", n,
                    " segments); they must be [n, D] = [", n, ", ", D,
                    "]: one modulation row a segment");
  lay.batch = n, lay.rows_per_sample = 0, lay.per_token = false;
  lay.segments = true;
  lay.cu_seqlens_i64 = cu.scalar_type() == at::kLong;
}

}  // namespace

AdalnLayout adaln_check_inputs(const at::Tensor& x, const at::Tensor& shift,
                               const at::Tensor& scale, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, double eps,
                               const c10::optional<at::Tensor>& cu_seqlens) {
  TORCH_CHECK_VALUE(x.dim() == 2 || x.dim() == 3, kOp, ": x has shape ", shape(x.sizes()),
                    "; it must be [B, L, D] or [N, D]");
  AdalnLayout lay;
  lay.x_dtype = to_dtype(x, "x");
  check_device(x, shift, "shift");
  check_device(x, scale, "scale");
  const int64_t D = x.size(-1);
  TORCH_CHECK_VALUE(D >= 1 || x.numel() == 0, kOp, ": x has shape ", shape(x.sizes()),
                    "; the normalised dimension D must be >= 1");
  TORCH_CHECK_VALUE(shift.sizes() == scale.sizes(), kOp, ": shift has shape ", shape(shift.sizes()),
                    " but scale has shape ", shape(scale.sizes()),
                    "; they must have the same shape");
  lay.dim = D;
  lay.rows = D > 0 ? x.numel() / D : (x.dim() == 3 ? x.size(0) * x.size(1) : x.size(0));
  const auto s = scale.sizes();
  if (cu_seqlens.has_value() && cu_seqlens->defined()) {
    check_segments(x, *cu_seqlens, s, lay);
  } else if (x.dim() == 3) {
    const int64_t B = x.size(0), L = x.size(1);
    lay.batch = B;
    lay.rows_per_sample = L;
    if ((s.size() == 2 && s[0] == B && s[1] == D) ||
        (s.size() == 3 && s[0] == B && s[1] == 1 && s[2] == D)) {
      lay.per_token = false;
    } else if (s.size() == 3 && s[0] == B && s[1] == L && s[2] == D) {
      lay.per_token = true;
    } else {
      TORCH_CHECK_VALUE(false, kOp, ": scale and shift have shape ", shape(s), " but x is ",
                        shape(x.sizes()), "; they must be [B, D] = [", B, ", ", D,
                        "] or [B, 1, D] (per sample) or [B, L, D] = ", "[", B, ", ", L, ", ", D,
                        "] (per token)");
    }
  } else {
    const int64_t N = x.size(0);
    if (s.size() == 2 && s[0] == 1 && s[1] == D) {  // one sample of N rows
      lay.batch = 1, lay.rows_per_sample = N, lay.per_token = false;
    } else if (s.size() == 2 && s[0] == N && s[1] == D) {  // one modulation row per row
      lay.batch = N, lay.rows_per_sample = 1, lay.per_token = true;
    } else {
      TORCH_CHECK_VALUE(false, kOp, ": scale and shift have shape ", shape(s), " but x is ",
                        shape(x.sizes()), "; for x of shape [N, D] they must be [1, D] = [1, ", D,
                        "] or [N, D] = [", N, ", ", D,
                        "], or [n, D] with cu_seqlens [n + 1] (one row a segment of x)");
    }
  }
  lay.mod_dtype = to_dtype(scale, "scale");
  TORCH_CHECK_VALUE(shift.scalar_type() == scale.scalar_type(), kOp, ": shift has dtype ",
                    dtype_str(shift.scalar_type()), " but scale has dtype ",
                    dtype_str(scale.scalar_type()), "; give both in float32 or both in x's dtype");
  TORCH_CHECK_VALUE(lay.mod_dtype == DType::F32 || lay.mod_dtype == lay.x_dtype, kOp,
                    ": scale and shift have dtype ", dtype_str(scale.scalar_type()),
                    " but x has dtype ", dtype_str(x.scalar_type()),
                    "; the modulation must be float32 or x's dtype");
  check_vector(x, weight, "weight", D);
  check_vector(x, bias, "bias", D);
  const bool has_w = weight.has_value() && weight->defined(),
             has_b = bias.has_value() && bias->defined();
  if (has_w) lay.weight_dtype = to_dtype(*weight, "weight");
  if (has_b) lay.weight_dtype = to_dtype(*bias, "bias");
  if (has_w && has_b)
    TORCH_CHECK_VALUE(weight->scalar_type() == bias->scalar_type(), kOp, ": weight has dtype ",
                      dtype_str(weight->scalar_type()), " but bias has dtype ",
                      dtype_str(bias->scalar_type()), "; give both in one dtype");
  TORCH_CHECK_VALUE(eps >= 0 && eps < 1e30, kOp, ": eps (", eps, ") must be finite and >= 0");
  return lay;
}

void adaln_check_bwd_inputs(const AdalnLayout& lay, const at::Tensor& dy, const at::Tensor& x,
                            const at::Tensor& mean, const at::Tensor& rstd) {
  TORCH_CHECK_VALUE(dy.sizes() == x.sizes(), kOp, " backward: grad_output has shape ",
                    shape(dy.sizes()), " but x is ", shape(x.sizes()));
  TORCH_CHECK_VALUE(dy.scalar_type() == x.scalar_type(), kOp, " backward: grad_output has dtype ",
                    dtype_str(dy.scalar_type()), " but x has dtype ", dtype_str(x.scalar_type()));
  check_device(x, dy, "grad_output");
  const at::ScalarType stats = adaln_stats_scalar_type(lay);
  for (const at::Tensor* t : {&mean, &rstd}) {
    const char* name = t == &mean ? "mean" : "rstd";
    check_device(x, *t, name);
    TORCH_CHECK_VALUE(t->scalar_type() == stats && t->numel() == lay.rows, kOp, " backward: ", name,
                      " must be ", dtype_str(stats), " (x is ", dtype_str(x.scalar_type()),
                      ") with one value per row of x (", lay.rows, "), got ",
                      dtype_str(t->scalar_type()), " ", shape(t->sizes()),
                      "; pass the forward's outputs");
  }
}

void adaln_check_cu_seqlens_values(const AdalnLayout& lay, const at::Tensor& cu_seqlens) {
  const at::Tensor h = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* v = h.data_ptr<int64_t>();
  const int64_t n = h.numel() - 1;
  TORCH_CHECK_VALUE(v[0] == 0, kOp, ": cu_seqlens[0] is ", v[0],
                    "; the offsets must start at 0 (segment i is rows cu_seqlens[i] .. "
                    "cu_seqlens[i + 1] - 1 of x)");
  for (int64_t i = 1; i <= n; ++i)
    TORCH_CHECK_VALUE(v[i] >= v[i - 1], kOp, ": cu_seqlens[", i, "] = ", v[i], " < cu_seqlens[",
                      i - 1, "] = ", v[i - 1],
                      "; the offsets must ascend (a repeated offset is an empty segment)");
  TORCH_CHECK_VALUE(v[n] == lay.rows, kOp, ": cu_seqlens[", n, "] (the last offset) is ", v[n],
                    " but x has ", lay.rows, " rows; the segments must cover x: cu_seqlens[n] = N");
}

void set_stats_ptrs(AdalnParams& p, const at::Tensor& mean, const at::Tensor& rstd) {
  // The backward reads them only; the struct has one pointer type for both passes.
  if (adaln_stats_dtype(p.x_dtype) == DType::F64) {
    p.mean_f64 = const_cast<double*>(mean.data_ptr<double>());
    p.rstd_f64 = const_cast<double*>(rstd.data_ptr<double>());
  } else {
    p.mean = const_cast<float*>(mean.data_ptr<float>());
    p.rstd = const_cast<float*>(rstd.data_ptr<float>());
  }
}

AdalnParams adaln_params(const AdalnLayout& lay, double eps) {
  AdalnParams p;
  p.rows = lay.rows;
  p.dim = lay.dim;
  p.batch = lay.batch;
  p.rows_per_sample = lay.rows_per_sample;
  p.per_token = lay.per_token;
  p.cu_seqlens_i64 = lay.cu_seqlens_i64;
  p.eps = float(eps);
  p.x_dtype = lay.x_dtype;
  p.mod_dtype = lay.mod_dtype;
  p.weight_dtype = lay.weight_dtype;
  adaln_set_contiguous_strides(p);
  return p;
}

c10::optional<at::Tensor> contiguous_or_none(const c10::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return c10::nullopt;
  return t->contiguous();
}

}  // namespace py
}  // namespace adaptiveload
