// The CUDA side of a launch, between the host API (adaln_cuda.cu) and the kernel
// instantiation files: the launch and occupancy entry points of each kernel family per
// dtype pair, and the two helpers that every launch and every occupancy query go through.
// A family's variant -> kernel choice is written once, in its launch template
// (adaln_fwd_launch_template.cuh, adaln_bwd_launch_template.cuh), which both entry points
// call; instantiated per x dtype in adaln_{fwd,bwd}_{f32,bf16,f16}.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "adaln_launch_plan.h"

namespace adaptiveload {
namespace adaln_cuda {

// T: x / y / dy / dx element type, TM: modulation (float or T), as the kernels.
template <typename T, typename TM>
void launch_fwd(const Args& a, const KernelVariant& v, cudaStream_t st);
template <typename T, typename TM>
int fwd_blocks_per_sm(const KernelVariant& v, int block_threads, size_t smem);
template <typename T, typename TM>
void launch_bwd(const Args& a, const KernelVariant& v, cudaStream_t st);
template <typename T, typename TM>
int bwd_blocks_per_sm(const KernelVariant& v, int block_threads, size_t smem);
// The backward's finalize (adaln_finalize.cu), after launch_bwd on the same stream.
void launch_finalize(const Args& a, const FinPlan& f, cudaStream_t st);

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("adaln CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Launches kernel(a) for variant v as the plan says: grid_blocks x block_threads, the
// dynamic shared memory (above 48 KiB the kernel must opt in first).
template <typename K>
void launch_kernel(K* kernel, const KernelVariant& v, const Args& a, size_t smem, cudaStream_t st,
                   const char* what) {
  const int threads = block_threads(a.c);
  if (threads > launch_bound(v))  // the plan keeps to the kernels' __launch_bounds__
    throw std::logic_error(std::string("adaln CUDA: ") + what + ": " + std::to_string(threads) +
                           " threads a block exceed the kernel's launch bound of " +
                           std::to_string(launch_bound(v)));
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(smem)) != cudaSuccess)
    check_launch("backward kernel (shared memory opt-in)");
  const dim3 grid(grid_blocks(a.c)), block(threads);
  kernel<<<grid, block, smem, st>>>(a);
  check_launch(what);
}

// Blocks of `kernel` one SM holds at once; 0 when the runtime cannot say (no device).
template <typename K>
int kernel_blocks_per_sm(K* kernel, int block_threads, size_t smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, smem) !=
      cudaSuccess)
    return 0;
  return per_sm;
}

}  // namespace adaln_cuda
}  // namespace adaptiveload
