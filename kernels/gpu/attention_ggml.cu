// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the
// ggml family (kv_tile.h kKernelPairs), at head_dim 128.
#include "kernels/gpu/attention_tile.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_tile_kernel_ggml(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::ggml>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
