// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
// The tile decode kernels (attention_tile.cuh) of the key/value pairs whose key is of the fp8
// family (kv_tile.h kKernelPairs, kKernelHeadDims).
#include "kernels/gpu/attention_kernels.cuh"

namespace kvgate::kernels::gpu {

const TileKernel* find_decode_kernel_fp8(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<KernelFamily::fp8, kDecodeKernel>(key, value, head_dim);
}

}  // namespace kvgate::kernels::gpu
