// cuda_emu self-test: the runtime runs CUDA kernels as written (barriers, shuffles, votes,
// shared memory, atomics, grids) under every thread order, and reports the bugs it is
// meant to catch (barrier and warp divergence, bad masks, launch limits, races that a
// thread order exposes). Built with emu_rewrite.py like the project's kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "adaptiveload/kernels/half_types.h"

namespace {

using cuda_emu::Order;

const Order kOrders[] = {Order::Forward, Order::Reverse, Order::Random, Order::Lagged};
const char* order_name(Order o) {
  return o == Order::Forward   ? "forward"
         : o == Order::Reverse ? "reverse"
         : o == Order::Random  ? "random"
                               : "lagged";
}

struct OrderGuard {
  Order saved = cuda_emu::order();
  ~OrderGuard() { cuda_emu::set_order(saved); }
};

// Runs a launch expected to fail during execution; returns the emulator's message.
std::string failure_of(cudaError_t e) {
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  return cuda_emu::take_failure();
}

// ------------------------------------------------------------------ kernels

// out[block] = sum of in[block * n .. + n), one value per thread, tree in shared memory.
__global__ void block_sum(const float* in, float* out) {
  extern __shared__ float buf[];
  const unsigned t = threadIdx.x + threadIdx.y * blockDim.x;
  const unsigned n = blockDim.x * blockDim.y;
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  buf[t] = in[b * n + t];
  __syncthreads();
  for (unsigned s = 1; s < n; s <<= 1) {
    const float v = (t % (2 * s) == 0 && t + s < n) ? buf[t + s] : 0.f;
    __syncthreads();
    buf[t] += v;
    __syncthreads();
  }
  if (t == 0) out[b] = buf[0];
}

// The team_sum pattern of the adaLN kernels: shuffles within a warp, warp partials in
// shared memory, `slots` = 2 alternates the slot between back-to-back reductions.
__global__ void two_reductions(const float* in, float* out, int slots) {
  __shared__ float red[2][32];
  const int t = threadIdx.x, warp = t / 32, nw = blockDim.x / 32;
  float v[2] = {in[t], in[t] * 2.f};
  for (int r = 0; r < 2; ++r) {
    for (int o = 16; o > 0; o >>= 1) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
    const int slot = slots == 2 ? r : 0;
    if (t % 32 == 0) red[slot][warp] = v[r];
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < nw; ++w) s += red[slot][w];
    v[r] = s;
  }
  out[2 * t] = v[0];
  out[2 * t + 1] = v[1];
}

__global__ void shuffles(const int* in, int* out, int width) {
  const int t = threadIdx.x;
  const int v = in[t];
  int* o = out + 8 * t;
  o[0] = __shfl_sync(0xffffffffu, v, 3, width);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2, width);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5, width);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 1, width);
  o[4] = int(__ballot_sync(0xffffffffu, v % 3 == 0));
  o[5] = __any_sync(0xffffffffu, v == 7);
  o[6] = __all_sync(0xffffffffu, v >= 0);
  o[7] = __reduce_add_sync(0xffffffffu, v);
}

__global__ void block_ids(unsigned* out) {
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[b] = b + 1;
  }
}

__global__ void count_atomic(unsigned* n, float* f) {
  atomicAdd(n, 1u);
  atomicAdd(f, 0.5f);
}

__global__ void early_return(float* out) {
  if (threadIdx.x < 16) return;
  __syncthreads();
  out[threadIdx.x] = 1.f;
}

__global__ void different_barriers(float* out) {
  if (threadIdx.x % 64 < 32) {
    out[threadIdx.x] = 1.f;
    __syncthreads();
  } else {
    __syncthreads();
    out[threadIdx.x] = 2.f;
  }
}

__global__ void full_mask(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1); }

__global__ void half_mask_reads_outside(float* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.f, 16, 32);  // reads lanes 16-31
}

__global__ void mask_without_caller(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.f, 1);
}

__global__ void shfl_after_exit(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.f, 1);
}

__global__ void shfl_vs_barrier(float* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.f, 1);
    __syncthreads();
  }
}

__global__ void __launch_bounds__(256) bounded(float* out) { out[threadIdx.x] = 1.f; }

__global__ void big_static(float* out) {
  __shared__ float big[13 * 1024];  // 52 KiB > 48 KiB
  big[threadIdx.x] = 1.f;
  out[threadIdx.x] = big[threadIdx.x];
}

__global__ void read_dynamic(float* out, int n) {
  extern __shared__ float buf[];
  if (threadIdx.x == 0)
    for (int i = 0; i < n; ++i) out[i] = buf[i];
}

// ------------------------------------------------------------------ tests

TEST(CudaEmu, HalfConversionsMatchTheCpuConverters) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = __bfloat162float(__ushort_as_bfloat16(uint16_t(h)));
    const float b = adaptiveload::bf16_to_float(uint16_t(h));
    ASSERT_TRUE(std::memcmp(&a, &b, 4) == 0) << h;
    const float c = __half2float(__ushort_as_half(uint16_t(h)));
    const float d = adaptiveload::f16_to_float(uint16_t(h));
    ASSERT_TRUE(std::memcmp(&c, &d, 4) == 0 || (std::isnan(c) && std::isnan(d))) << h;
  }
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65521) {
    float f;
    const uint32_t v = uint32_t(u);
    std::memcpy(&f, &v, 4);
    ASSERT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(f)), adaptiveload::float_to_bf16(f)) << v;
    ASSERT_EQ(__half_as_ushort(__float2half_rn(f)), adaptiveload::float_to_f16(f)) << v;
  }
}

TEST(CudaEmu, BlockReductionEveryOrderAndShape) {
  OrderGuard g;
  for (Order o : kOrders) {
    cuda_emu::set_order(o, 3);
    for (dim3 block : {dim3(1), dim3(33), dim3(256), dim3(1024), dim3(16, 8), dim3(32, 32)}) {
      const dim3 grid(3, 2, 2);
      const unsigned n = block.x * block.y, nb = 12;
      std::vector<float> in(n * nb), out(nb, -1.f);
      for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 97);
      float *din, *dout;
      ASSERT_EQ(cudaMalloc((void**)&din, in.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc((void**)&dout, nb * 4), cudaSuccess);
      cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice);
      block_sum<<<grid, block, n * sizeof(float)>>>(din, dout);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuda_emu::take_failure();
      ASSERT_EQ(cudaMemcpy(out.data(), dout, nb * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (unsigned b = 0; b < nb; ++b) {
        double want = 0;
        for (unsigned t = 0; t < n; ++t) want += in[b * n + t];
        EXPECT_EQ(out[b], float(want))
            << order_name(o) << " block " << block.x << "x" << block.y << " #" << b;
      }
      cudaFree(din);
      cudaFree(dout);
    }
  }
}

TEST(CudaEmu, SlotReuseRaceShowsUnderLaggedOrder) {
  OrderGuard g;
  const int n = 256;
  std::vector<float> in(n), out(2 * n);
  for (int i = 0; i < n; ++i) in[i] = float(i % 13);
  double s0 = 0;
  for (float v : in) s0 += v;
  float *din, *dout;
  cudaMalloc((void**)&din, n * 4);
  cudaMalloc((void**)&dout, 2 * n * 4);
  cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice);
  auto run = [&](int slots) {
    two_reductions<<<1, n>>>(din, dout, slots);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(out.data(), dout, 2 * n * 4, cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int t = 0; t < n; ++t) wrong += out[2 * t] != float(s0) || out[2 * t + 1] != float(2 * s0);
    return wrong;
  };
  for (Order o : kOrders) {
    cuda_emu::set_order(o, 1);
    EXPECT_EQ(run(2), 0) << order_name(o);
  }
  cuda_emu::set_order(Order::Lagged, 1);
  EXPECT_GT(run(1), 0) << "the lagged order must expose the reuse of one slot without a barrier";
  cudaFree(din);
  cudaFree(dout);
}

TEST(CudaEmu, ShufflesVotesAndReductions) {
  OrderGuard g;
  for (Order o : kOrders) {
    cuda_emu::set_order(o, 5);
    for (int width : {32, 16, 8, 4, 2, 1}) {
      const int n = 64;
      std::vector<int> in(n), out(8 * n);
      for (int i = 0; i < n; ++i) in[i] = (i * 7 + 3) % 23;
      int *din, *dout;
      cudaMalloc((void**)&din, n * 4);
      cudaMalloc((void**)&dout, 8 * n * 4);
      cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice);
      shuffles<<<1, n>>>(din, dout, width);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuda_emu::take_failure();
      cudaMemcpy(out.data(), dout, 8 * n * 4, cudaMemcpyDeviceToHost);
      for (int t = 0; t < n; ++t) {
        const int lane = t % 32, base = t - lane, seg = lane & ~(width - 1);
        auto at = [&](int l) { return in[base + l]; };
        unsigned ballot = 0;
        int any = 0, all = 1, sum = 0;
        for (int l = 0; l < 32; ++l) {
          ballot |= unsigned(at(l) % 3 == 0) << l;
          any |= at(l) == 7;
          all &= at(l) >= 0;
          sum += at(l);
        }
        const int* o8 = &out[8 * t];
        EXPECT_EQ(o8[0], at(seg + 3 % width)) << "idx w=" << width << " t=" << t;
        EXPECT_EQ(o8[1], lane - 2 >= seg ? at(lane - 2) : at(lane))
            << "up w=" << width << " t=" << t;
        EXPECT_EQ(o8[2], lane + 5 < seg + width ? at(lane + 5) : at(lane))
            << "down w=" << width << " t=" << t;
        EXPECT_EQ(o8[3], (lane ^ 1) < seg + width ? at(lane ^ 1) : at(lane))
            << "xor w=" << width << " t=" << t;
        EXPECT_EQ(unsigned(o8[4]), ballot);
        EXPECT_EQ(o8[5], any);
        EXPECT_EQ(o8[6], all);
        EXPECT_EQ(o8[7], sum);
      }
      cudaFree(din);
      cudaFree(dout);
    }
  }
}

TEST(CudaEmu, GridsBlocksAndAtomics) {
  cuda_emu::set_threads(3);
  const dim3 grid(70000, 3, 2);  // more blocks than a 16-bit grid dimension
  const size_t nb = size_t(grid.x) * grid.y * grid.z;
  unsigned* d;
  cudaMalloc((void**)&d, nb * 4);
  cudaMemset(d, 0, nb * 4);
  block_ids<<<grid, dim3(2, 2)>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<unsigned> h(nb);
  cudaMemcpy(h.data(), d, nb * 4, cudaMemcpyDeviceToHost);
  for (size_t b = 0; b < nb; ++b) ASSERT_EQ(h[b], b + 1) << b;
  unsigned* n;
  float* f;
  cudaMalloc((void**)&n, 4);
  cudaMalloc((void**)&f, 4);
  cudaMemset(n, 0, 4);
  cudaMemset(f, 0, 4);
  count_atomic<<<97, 64>>>(n, f);
  unsigned hn = 0;
  float hf = 0;
  cudaMemcpy(&hn, n, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&hf, f, 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(hn, 97u * 64u);
  EXPECT_EQ(hf, 97.f * 32.f);
  cuda_emu::set_threads(2);
  cudaFree(d);
  cudaFree(n);
  cudaFree(f);
}

TEST(CudaEmu, ReportsBarrierDivergence) {
  float* d;
  cudaMalloc((void**)&d, 1024 * 4);
  early_return<<<2, 64>>>(d);
  std::string m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("barrier divergence"), std::string::npos) << m;
  EXPECT_NE(m.find("early_return"), std::string::npos) << m;
  different_barriers<<<1, 128>>>(d);
  m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("barrier divergence"), std::string::npos) << m;
  EXPECT_NE(m.find("test_cuda_emu.cu"), std::string::npos) << "names the barrier's file: " << m;
  shfl_vs_barrier<<<1, 32>>>(d);
  m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("divergence"), std::string::npos) << m;
  cudaFree(d);
}

TEST(CudaEmu, ReportsBadShuffleMasks) {
  float* d;
  cudaMalloc((void**)&d, 1024 * 4);
  full_mask<<<1, 48>>>(d);  // the second warp has 16 lanes
  std::string m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("absent"), std::string::npos) << m;
  half_mask_reads_outside<<<1, 32>>>(d);
  m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("which is not in mask"), std::string::npos) << m;
  mask_without_caller<<<1, 32>>>(d);
  m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("does not name the caller"), std::string::npos) << m;
  shfl_after_exit<<<1, 32>>>(d);
  m = failure_of(cudaGetLastError());
  EXPECT_TRUE(m.find("exited") != std::string::npos || m.find("exits") != std::string::npos) << m;
  full_mask<<<1, 64>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << cuda_emu::take_failure();
  cudaFree(d);
}

TEST(CudaEmu, ReportsLaunchLimits) {
  float* d;
  cudaMalloc((void**)&d, 4096 * 4);
  full_mask<<<1, 1056>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  full_mask<<<1, dim3(1, 1, 65)>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  full_mask<<<dim3(1, 65536), 32>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  full_mask<<<0, 32>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError clears the error";
  bounded<<<1, 512>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  bounded<<<1, 256>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  read_dynamic<<<1, 32, 64 * 1024>>>(d, 4);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue)
      << "dynamic shared memory above 48 KiB needs an opt-in";
  ASSERT_EQ(
      cudaFuncSetAttribute(read_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
      cudaSuccess);
  read_dynamic<<<1, 32, 64 * 1024>>>(d, 4);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(
      cudaFuncSetAttribute(read_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
      cudaErrorInvalidValue);
  cudaGetLastError();
  big_static<<<1, 32>>>(d);
  const std::string m = failure_of(cudaGetLastError());
  EXPECT_NE(m.find("static __shared__"), std::string::npos) << m;
  int blocks = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 256, 0);
  EXPECT_EQ(blocks, 8);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 256, 100 * 1024);
  EXPECT_EQ(blocks, 2);
  cudaFree(d);
}

// What a grid sized from the device (occupancy x SMs) reads: an H100-like sm_90 with
// CUDA_EMU_SMS SMs (132 unless set), and set_sms overriding it.
TEST(CudaEmu, DeviceSmCountAndOccupancy) {
  int sms = 0, dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  const char* env = std::getenv("CUDA_EMU_SMS");
  EXPECT_EQ(sms, env ? std::max(1, std::atoi(env)) : 132);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, dev), cudaSuccess);
  EXPECT_EQ(prop.multiProcessorCount, sms);
  cuda_emu::set_sms(3);
  int now = 0;
  cudaDeviceGetAttribute(&now, cudaDevAttrMultiProcessorCount, 0);
  EXPECT_EQ(now, 3);
  cuda_emu::set_sms(sms);
  int blocks = 0;  // 2048 threads an SM, at most 32 blocks
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, full_mask, 512, 0);
  EXPECT_EQ(blocks, 4);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, full_mask, 32, 0);
  EXPECT_EQ(blocks, 32);
  EXPECT_EQ(cudaDeviceGetAttribute(&now, cudaDevAttrMultiProcessorCount, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST(CudaEmu, SharedMemoryStartsPoisoned) {
  float* d;
  cudaMalloc((void**)&d, 16 * 4);
  read_dynamic<<<1, 32, 16 * 4>>>(d, 16);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> h(16);
  cudaMemcpy(h.data(), d, 16 * 4, cudaMemcpyDeviceToHost);
  for (float v : h) EXPECT_TRUE(std::isnan(v));
  cudaFree(d);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
