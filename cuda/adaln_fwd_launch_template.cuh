// The forward's variant -> kernel choice, written once: visit_fwd_kernel hands the kernel
// instantiation of a KernelVariant (kernel_variant, adaln_launch_plan.h) to a callback,
// and both the launch and the occupancy query that sizes the grid go through it, so they
// cannot pick different kernels. Included by adaln_fwd_{f32,bf16,f16}.cu, which
// instantiate it per dtype pair.
#pragma once

#include "adaln_fwd_kernels.cuh"
#include "adaln_launch.cuh"
#include "adaln_seg_kernels.cuh"
#include "adaln_static_switch.h"

namespace adaptiveload {
namespace adaln_cuda {

// fn(kernel) with the forward kernel of variant v.
template <typename T, typename TM, typename Fn>
void visit_fwd_kernel(const KernelVariant& v, Fn&& fn) {
  if (v.family == KernelFamily::Loop) return fn(adaln_fwd_loop_kernel<T, TM>);
  if (v.family == KernelFamily::Seg) return fn(adaln_fwd_seg_kernel<T, TM>);
  AL_BOOL_SWITCH(v.sample_teams, ST, [&] {
    if (v.family == KernelFamily::Wide) return fn(adaln_fwd_wide_kernel<T, TM, ST>);
    AL_VPT_SWITCH(v.vectors_per_thread, VPT, [&] { fn(adaln_fwd_kernel<T, TM, VPT, ST>); });
  });
}

template <typename T, typename TM>
void launch_fwd(const Args& a, const KernelVariant& v, cudaStream_t st) {
  visit_fwd_kernel<T, TM>(
      v, [&](auto* kernel) { launch_kernel(kernel, v, a, 0, st, "forward kernel"); });
}

template <typename T, typename TM>
int fwd_blocks_per_sm(const KernelVariant& v, int block_threads, size_t smem) {
  int n = 0;
  visit_fwd_kernel<T, TM>(
      v, [&](auto* kernel) { n = kernel_blocks_per_sm(kernel, block_threads, smem); });
  return n;
}

}  // namespace adaln_cuda
}  // namespace adaptiveload
