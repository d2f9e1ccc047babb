// AVX-512 (F + BW + VL) row kernels of the CPU adaLN (16 fp32 lanes, masked row tails),
// compiled through target attributes for a baseline x86-64 build; the driver calls them
// only after a CPU check. See adaln_cpu_rows.h.
#include "adaptiveload/kernels/simd_cpu.h"

#if AL_SIMD_X86
#define AL_ROWS_TARGET AL_TARGET_AVX512
#include "adaptiveload/kernels/adaln_cpu_rows.h"
#else
#include "adaptiveload/kernels/adaln_cpu_paths.h"
#endif

namespace adaptiveload {
namespace adaln_cpu {

#if AL_SIMD_X86
RowKernels avx512_kernels() { return row_kernels<simd::Avx512>(); }
#else
RowKernels avx512_kernels() { return {}; }
#endif

}  // namespace adaln_cpu
}  // namespace adaptiveload
