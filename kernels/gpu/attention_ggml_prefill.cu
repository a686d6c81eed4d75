// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tensor-core prefill kernels (attention_prefill.cuh) of the key/value pairs whose key is of the ggml
// family (kv_tile.h kKernelPairs, kKernelHeadDims).
#include "kernels/gpu/attention_kernels.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_prefill_kernel_ggml(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::ggml, kPrefillKernel>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
