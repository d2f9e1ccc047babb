// The backward's variant -> kernel choice, written once: visit_bwd_kernel hands the kernel
// instantiation of a KernelVariant (kernel_variant, adaln_launch_plan.h) to a callback,
// and both the launch and the occupancy query that sizes the chunks and the workspace go
// through it, so they cannot pick different kernels. Included by
// adaln_bwd_{f32,bf16,f16}.cu, which instantiate it per dtype pair.
#pragma once

#include <stdexcept>

#include "adaln_bwd_kernels.cuh"
#include "adaln_launch.cuh"
#include "adaln_seg_kernels.cuh"
#include "adaln_static_switch.h"

namespace adaptiveload {
namespace adaln_cuda {

// fn(kernel) with the backward kernel of variant v (there is no affine wide kernel:
// make_layout gives the affine backward two vectors a thread instead).
template <typename T, typename TM, typename Fn>
void visit_bwd_kernel(const KernelVariant& v, Fn&& fn) {
  if (v.family == KernelFamily::Seg) return fn(adaln_bwd_seg_kernel<T, TM>);  // affine at run time
  AL_BOOL_SWITCH(v.affine, AFFINE, [&] {
    if (v.family == KernelFamily::Loop) return fn(adaln_bwd_loop_kernel<T, TM, AFFINE>);
    AL_BOOL_SWITCH(v.sample_teams, ST, [&] {
      if (v.family == KernelFamily::Wide) {
        if constexpr (AFFINE)
          throw std::logic_error(
              "adaln CUDA: no wide backward kernel with weight / bias (make_layout)");
        else
          return fn(adaln_bwd_wide_kernel<T, TM, ST>);
      }
      AL_VPT_SWITCH(v.vectors_per_thread, VPT,
                    [&] { fn(adaln_bwd_kernel<T, TM, VPT, AFFINE, ST>); });
    });
  });
}

template <typename T, typename TM>
void launch_bwd(const Args& a, const KernelVariant& v, cudaStream_t st) {
  const size_t smem = dynamic_smem(a.p, a.c, true);
  visit_bwd_kernel<T, TM>(
      v, [&](auto* kernel) { launch_kernel(kernel, v, a, smem, st, "backward kernel"); });
}

template <typename T, typename TM>
int bwd_blocks_per_sm(const KernelVariant& v, int block_threads, size_t smem) {
  int n = 0;
  visit_bwd_kernel<T, TM>(
      v, [&](auto* kernel) { n = kernel_blocks_per_sm(kernel, block_threads, smem); });
  return n;
}

}  // namespace adaln_cuda
}  // namespace adaptiveload
