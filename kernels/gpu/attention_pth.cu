// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the per_token_head
// family (kv_tile.h kKernelPairs, kKernelHeadDims).
#include "kernels/gpu/attention_kernels.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_decode_kernel_per_token_head(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::per_token_head, kDecodeKernel>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
