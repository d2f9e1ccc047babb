# The kernel sources of adaptiveload_cuda beside the host API (adaln_cuda.cu) and the
# host-side plan (adaln_launch_plan.cpp): one file per kernel family and x dtype, so they
# compile in parallel. The one list of them: cuda/CMakeLists.txt, tests/cuda_emu (the
# emulated build), scripts/gpu_check.sh and scripts/cuda_resource_gate.sh read it.
set(AL_CUDA_KERNEL_SOURCES
    adaln_fwd_f32.cu
    adaln_fwd_bf16.cu
    adaln_fwd_f16.cu
    adaln_bwd_f32.cu
    adaln_bwd_bf16.cu
    adaln_bwd_f16.cu
    adaln_finalize.cu)
