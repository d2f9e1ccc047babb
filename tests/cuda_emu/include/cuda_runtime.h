// cuda_emu stand-in for the CUDA runtime API: the subset the project's kernels, tests and
// benchmarks use. Memory is host memory; launches and copies run synchronously on the
// calling thread (streams are accepted and ignored). See ../cuda_emu.h.
#pragma once

#include <cstddef>

#include "../cuda_emu.h"

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int maxThreadsPerMultiProcessor;
  int maxBlocksPerMultiProcessor;
  int multiProcessorCount;
  int major, minor;
  int memoryBusWidth;
  int l2CacheSize;
};

const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t s = nullptr);

// Occupancy and attributes take the kernel as a function pointer, like the runtime's
// templates. The emulated occupancy counts threads, blocks and shared memory per SM only
// (registers are unknown here; scripts/cuda_resource_gate.sh reports them).
namespace cuda_emu {
namespace detail {
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute a, int v);
cudaError_t occupancy(int* blocks, const void* kernel, int block_size, size_t smem);
}  // namespace detail
}  // namespace cuda_emu
template <typename K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute a, int v) {
  return cuda_emu::detail::func_set_attribute(reinterpret_cast<const void*>(kernel), a, v);
}
template <typename K>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, K* kernel, int block_size,
                                                          size_t smem) {
  return cuda_emu::detail::occupancy(blocks, reinterpret_cast<const void*>(kernel), block_size,
                                     smem);
}
