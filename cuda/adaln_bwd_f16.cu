// Backward kernels of the fused adaLN op for f16 x, y, dy, dx with f32 or f16 modulation: every
// variant of adaln_bwd_kernels.cuh for these dtypes, with the launch and occupancy entry points
// (adaln_bwd_launch_template.cuh). One file per x dtype, so they compile in parallel.
#include "adaln_bwd_launch_template.cuh"

namespace adaptiveload {
namespace adaln_cuda {

template void launch_bwd<__half, float>(const Args&, const KernelVariant&, cudaStream_t);
template int bwd_blocks_per_sm<__half, float>(const KernelVariant&, int, size_t);
template void launch_bwd<__half, __half>(const Args&, const KernelVariant&, cudaStream_t);
template int bwd_blocks_per_sm<__half, __half>(const KernelVariant&, int, size_t);

}  // namespace adaln_cuda
}  // namespace adaptiveload
