// Scalar row kernels of the CPU adaLN (one lane, plain C++): the path for CPUs without
// AVX2 and for other architectures. See adaln_cpu_rows.h.
#define AL_ROWS_TARGET
#include "adaptiveload/kernels/adaln_cpu_rows.h"

namespace adaptiveload {
namespace adaln_cpu {

RowKernels scalar_kernels() { return row_kernels<simd::Scalar>(); }

}  // namespace adaln_cpu
}  // namespace adaptiveload
