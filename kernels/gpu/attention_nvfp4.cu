// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the nvfp4
// family (kv_tile.h kKernelPairs, kKernelHeadDims).
#include "kernels/gpu/attention_kernels.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_decode_kernel_nvfp4(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::nvfp4, kDecodeKernel>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
