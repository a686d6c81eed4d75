#pragma once
// What a family's translation units instantiate: attention_<family>.cu the tile decode kernels
// (attention_tile.cuh), attention_<family>_prefill.cu the tensor-core prefill kernels
// (attention_prefill.cuh), of every pair of kv_tile.h's kKernelPairs whose key is of the family,
// at every head_dim of kKernelHeadDims, each only where both tables name its kind (two units per
// family keep each within the compile budget). GPU sources only.
#include <iterator>
#include <utility>

#include "kernels/gpu/attention_prefill.cuh"
#include "kernels/gpu/attention_tile.cuh"

namespace kvgate::kernels::gpu {

// The kernel of kind K of kKernelPairs[I] at kKernelHeadDims[J] when that pair belongs to family
// F, both tables name the kind, and it is the one asked for.
template <KernelFamily F, KernelKinds K, size_t I, size_t J>
const TileKernel* tile_kernel_at(FormatId key, FormatId value, int head_dim) {
  constexpr KvPair pair = kKernelPairs[I];
  constexpr int D = kKernelHeadDims[J].head_dim;
  if constexpr (kernel_family(pair.key) != F || (pair.kinds & kKernelHeadDims[J].kinds & K) == 0) {
    return nullptr;
  } else {
    if (pair.key != key || pair.value != value || head_dim != D) return nullptr;
    using KT = KvTile<typename RowsFor<pair.key>::type>;
    using VT = KvTile<typename RowsFor<pair.value>::type>;
    if constexpr (K == kDecodeKernel) {
      static const TileKernel decode{[](int kb, int vb) { return tile_smem(D, kb, vb).total; },
                                     &launch_tile_decode<KT, VT, D>, &tile_decode_blocks_per_sm<KT, VT, D>};
      return &decode;
    } else {
      static const TileKernel prefill{[](int kb, int vb) { return prefill_smem(D, kb, vb, !kF16ExactKeys<KT>).total; },
                                      &launch_tile_prefill<KT, VT, D>, &tile_prefill_blocks_per_sm<KT, VT, D>};
      return &prefill;
    }
  }
}

template <KernelFamily F, KernelKinds K, size_t I, size_t... J>
const TileKernel* tile_kernel_of_pair(FormatId key, FormatId value, int head_dim, std::index_sequence<J...>) {
  const TileKernel* found = nullptr;
  ((found = found ? found : tile_kernel_at<F, K, I, J>(key, value, head_dim)), ...);
  return found;
}

template <KernelFamily F, KernelKinds K, size_t... I>
const TileKernel* find_family_tile_kernel(FormatId key, FormatId value, int head_dim, std::index_sequence<I...>) {
  const TileKernel* found = nullptr;
  ((found = found ? found
                  : tile_kernel_of_pair<F, K, I>(key, value, head_dim,
                                                 std::make_index_sequence<std::size(kKernelHeadDims)>{})),
   ...);
  return found;
}
// Every kernel of kind K of family F (one translation unit each: attention_<family>[_prefill].cu).
template <KernelFamily F, KernelKinds K>
const TileKernel* find_family_tile_kernel(FormatId key, FormatId value, int head_dim) {
  return find_family_tile_kernel<F, K>(key, value, head_dim, std::make_index_sequence<std::size(kKernelPairs)>{});
}

}  // namespace kvgate::kernels::gpu
