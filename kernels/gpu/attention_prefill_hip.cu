// HIP builds have no tensor-core prefill kernels: every prefill chunk and scoring pass there runs
// the general kernel (gpu_attention.cu). The prefill units (attention_<family>_prefill.cu) are
// CUDA-only because HIP has no mma.m16n8k16 on the targets kvgate builds for, and the emulated
// fragment arithmetic (gpu_mma.h) took 29 s of CPU per arch for the f16 unit alone and over 20
// minutes for the ggml one, far past the compile budget of 15 s per unit per arch, for a kernel
// no AMD device here could ever run. An MFMA wrapper would bring them back (docs/design.md).
#include "kernels/gpu/attention_common.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_prefill_kernel_float16(FormatId, FormatId, int) { return nullptr; }
const TileKernel* find_prefill_kernel_fp8(FormatId, FormatId, int) { return nullptr; }
const TileKernel* find_prefill_kernel_per_token_head(FormatId, FormatId, int) { return nullptr; }
const TileKernel* find_prefill_kernel_ggml(FormatId, FormatId, int) { return nullptr; }
const TileKernel* find_prefill_kernel_nvfp4(FormatId, FormatId, int) { return nullptr; }
const TileKernel* find_prefill_kernel_turboquant(FormatId, FormatId, int) { return nullptr; }

}  // namespace kvgate::kernels::gpu
