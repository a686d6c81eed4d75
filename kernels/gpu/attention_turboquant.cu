// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the turboquant
// family (kv_tile.h kKernelPairs, kKernelHeadDims).
#include "kernels/gpu/attention_kernels.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_decode_kernel_turboquant(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::turboquant, kDecodeKernel>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
