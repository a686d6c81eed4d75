// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the
// nvfp4 family (kv_tile.h kKernelPairs), at head_dim 128.
#include "kernels/gpu/attention_tile.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_tile_kernel_nvfp4(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::nvfp4>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
