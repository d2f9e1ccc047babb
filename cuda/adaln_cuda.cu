// Fused LayerNorm-Modulate (adaLN) forward and backward, CUDA: the host API of
// adaln_cuda.h. Checks the params, plans the launch on the host (adaln_launch_plan.h, with
// the current device's SM count and occupancy) and launches the planned kernel variant of
// the x / modulation dtypes.
//
//   y = ((x - mean) * rstd * w + b) * (1 + scale) + shift        (see adaln.h for the math)
//
// Layout of the work (forward and backward alike):
//   - a "team" of ts threads owns one row at a time; each thread holds VPT vectors of 8
//     elements of the row in registers (vector v = i * ts + lane, see RowMap), so
//     the row is read from memory exactly once: 1-2 vectors in teams of up to 512 threads,
//     or one in teams of up to 1024 (the wide kernels, D 4097 - 8192); loads and stores
//     are 128-bit for the 16-byte aligned bulk of each row in every operand that agrees
//     on where it starts, per element for the head, the tail and the other operands
//     (RowMap); rows wider than 8192 are looped over by one team (adaln_*_loop_kernel);
//   - the forward loads the whole vectors of a team's next row while it reduces the
//     current one (software prefetch into registers);
//   - statistics are two-pass in fp32 from registers (mean, then the corrected sum of
//     squared deviations), reduced with warp shuffles (ts <= 32: sub-warp teams, several
//     rows per warp) or shuffles + shared memory (ts > 32);
//   - a block holds rpb teams (about 256 threads) and walks "chunks" of C = rpb * R rows
//     that never straddle a sample, so per-sample modulation is loaded once per chunk
//     into registers; blocks take chunks in a grid-stride loop (1D grid, any row count)
//     of as many blocks as the device holds at once (occupancy x SMs, make_cfg), about
//     one chunk each;
//   - backward: the same single pass over x and dy writes dx and accumulates dscale /
//     dshift (per-sample) and dweight / dbias in registers over the chunk; the teams of
//     a block combine through shared memory in team order and write two fp32 partial rows
//     per chunk to the workspace; one finalize launch then sums the partials of each sample
//     (and of all chunks for dweight / dbias) in a fixed order, coalesced over a D tile,
//     its rows cut into segments for enough blocks (adaln_finalize_kernel). No atomics on
//     data (a ticket counter picks the block that adds the segments, not the order); C
//     depends only on the shape and the device model, so results are bit-identical run to
//     run on one GPU model.
//
// Files: adaln_launch_plan.{h,cpp} the host-side plan (plain C++, tested by the gtest
// suite); adaln_device.cuh the device helpers; adaln_{fwd,bwd}_kernels.cuh and
// adaln_finalize.cu the kernel families; adaln_{fwd,bwd}_launch_template.cuh the variant ->
// kernel choice that launches and occupancy queries share; adaln_{fwd,bwd}_{f32,bf16,f16}.cu
// the instantiations, one per x dtype.
// Build: part of adaptiveload_cuda (cuda/CMakeLists.txt) or scripts/gpu_check.sh.
// Test:  adaptiveload_cuda_tests.  Bench: bench_adaln_cuda.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "adaln_cuda.h"
#include "adaln_launch.cuh"
#include "adaln_launch_plan.h"

namespace adaptiveload {

using adaln_cuda::KernelVariant;
using adaln_cuda::LaunchPlan;

namespace {

// An error left pending by earlier CUDA work would otherwise be reported as the failure
// of this call's first launch: take it now (cudaGetLastError clears it) and say whose it is.
void check_pending(const char* call) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(
        std::string("adaln CUDA: ") + call +
        ": a CUDA error from earlier work was pending before the launch (not raised by adaLN): " +
        cudaGetErrorString(e));
}

// Dispatch on (x dtype, mod dtype in {f32, x dtype}).
template <typename Fn>
void dispatch(const AdalnParams& p, Fn&& fn) {
  const bool mf = p.mod_dtype == DType::F32;
  switch (p.x_dtype) {
    case DType::F32:
      fn(float(), float());
      break;
    case DType::BF16:
      if (mf)
        fn(__nv_bfloat16(), float());
      else
        fn(__nv_bfloat16(), __nv_bfloat16());
      break;
    case DType::F16:
      if (mf)
        fn(__half(), float());
      else
        fn(__half(), __half());
      break;
    default:  // validate() admits only the three above on this path
      break;
  }
}

// The current device as the plan sees it: its SM count and the occupancy of the kernel
// variant the plan picks, for p's dtypes (0 when the runtime cannot say: no device).
adaln_cuda::DeviceProps current_device(const AdalnParams& p) {
  adaln_cuda::DeviceProps d;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return d;
  d.sms = sms;
  d.blocks_per_sm = [p](const KernelVariant& v, int threads, size_t smem) {
    int n = 0;
    dispatch(p, [&](auto t, auto tm) {
      using T = decltype(t);
      using TM = decltype(tm);
      n = v.backward ? adaln_cuda::bwd_blocks_per_sm<T, TM>(v, threads, smem)
                     : adaln_cuda::fwd_blocks_per_sm<T, TM>(v, threads, smem);
    });
    return n;
  };
  return d;
}

LaunchPlan plan(const AdalnParams& p, bool bwd) {
  return adaln_cuda::plan_launch(p, bwd, current_device(p));
}

}  // namespace

int64_t adaln_cuda_max_dim() { return adaln_cuda::max_dim(); }

AdalnCudaRowLayout adaln_cuda_row_layout(const AdalnParams& p, bool backward) {
  validate(p, backward ? AdalnPass::Bwd : AdalnPass::Fwd);
  adaln_cuda::check_cuda_limits(p);
  const adaln_cuda::RowMap m =
      adaln_cuda::row_map(p, adaln_cuda::make_layout(p, backward), backward);
  AdalnCudaRowLayout r;
  r.vector_operands = m.ok;
  r.head = m.head;
  r.vectors = m.count;
  return r;
}

void adaln_fwd_cuda(const AdalnParams& p, void* stream) {
  validate(p, AdalnPass::Fwd);
  adaln_cuda::check_cuda_limits(p);
  if (p.rows == 0 || p.dim == 0) return;
  check_pending("adaln_fwd_cuda");
  const LaunchPlan lp = plan(p, false);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  dispatch(p, [&](auto t, auto tm) {
    adaln_cuda::launch_fwd<decltype(t), decltype(tm)>(lp.args, lp.variant, st);
  });
}

size_t adaln_bwd_cuda_workspace_bytes(const AdalnParams& p) {
  return size_t(plan(p, true).workspace_floats) * sizeof(float);
}

AdalnCudaBwdPlan adaln_bwd_cuda_plan(const AdalnParams& p) {
  const LaunchPlan lp = plan(p, true);
  const adaln_cuda::Cfg& c = lp.args.c;
  AdalnCudaBwdPlan r;
  r.team = c.team_size;
  r.vectors_per_thread = c.vectors_per_thread;
  r.chunks = c.chunks;
  r.rows_per_chunk = c.chunk_rows;
  r.blocks = adaln_cuda::grid_blocks(c);
  r.samples_per_chunk = c.samples_per_chunk;
  if (lp.args.off_t >= 0 && p.dim > 0) {
    r.finalize_mode = lp.fin.mode;
    r.finalize_segments = lp.fin.nseg;
    r.finalize_blocks = lp.fin.ntiles * lp.fin.nseg;
    r.partial_bytes = 2 * 2 * adaln_cuda::partial_rows(p, c) * p.dim * int64_t(sizeof(float));
  }
  return r;
}

void adaln_bwd_cuda(const AdalnParams& p, void* stream) {
  validate(p, AdalnPass::Bwd);
  adaln_cuda::check_cuda_limits(p);
  const LaunchPlan lp = plan(p, true);
  const size_t need = size_t(lp.workspace_floats) * sizeof(float);
  if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need))
    throw std::invalid_argument("AdalnParams.workspace: needs " + std::to_string(need) +
                                " bytes (got " + std::to_string(p.workspace_bytes) +
                                (p.workspace ? "" : ", null") +
                                "); size it with adaln_bwd_cuda_workspace_bytes()");
  check_pending("adaln_bwd_cuda");
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (lp.args.c.chunks > 0)
    dispatch(p, [&](auto t, auto tm) {
      adaln_cuda::launch_bwd<decltype(t), decltype(tm)>(lp.args, lp.variant, st);
    });
  if (lp.args.off_t < 0 || p.dim == 0) return;  // no reduction over rows wanted
  adaln_cuda::launch_finalize(lp.args, lp.fin, st);
}

}  // namespace adaptiveload
