// Backward kernels of the fused adaLN op for f32 x, y, dy, dx with f32 modulation: every variant of
// adaln_bwd_kernels.cuh for these dtypes, with the launch and occupancy entry points
// (adaln_bwd_launch_template.cuh). One file per x dtype, so they compile in parallel.
#include "adaln_bwd_launch_template.cuh"

namespace adaptiveload {
namespace adaln_cuda {

template void launch_bwd<float, float>(const Args&, const KernelVariant&, cudaStream_t);
template int bwd_blocks_per_sm<float, float>(const KernelVariant&, int, size_t);

}  // namespace adaln_cuda
}  // namespace adaptiveload
