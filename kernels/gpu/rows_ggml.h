#pragma once
// GPU rows of the ggml block formats (q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl, mxfp4): the blocks,
// quantizers and decoders are kernels/ggml_blocks.h's, which the CPU codecs
// (kernels/formats_ggml.cc) run too; a row is head_dim / 32 blocks, stored as q(R x) when the
// format has llama.cpp's Hadamard rotation.
#include "kernels/ggml_blocks.h"
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

template <class T>
struct GgmlRows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    return static_cast<size_t>(head_dim / T::kElems) * T::kBytes;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    float rotated[kTqMaxHeadDim];
    if (a.rot) {
      rotate_forward(*a.rot, a.head_dim, x, rotated);
      x = rotated;
    }
    for (int blk = 0; blk < a.head_dim / T::kElems; ++blk) T::quantize(x + blk * T::kElems, dst + blk * T::kBytes);
  }
  // In the stored basis (rotated rows stay rotated, as the CPU's dequantize_stored_ref).
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) {
    return T::element(row + (i / T::kElems) * T::kBytes, i % T::kElems);
  }
  // A span lies inside one block, so the block's scale is read once.
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    static_assert(T::kElems % N == 0, "a span must not straddle a block");
    const uint8_t* b = row + (i0 / T::kElems) * T::kBytes;
    const int j0 = i0 % T::kElems;
    const typename T::Scale s = T::scale(b);
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? T::value(b, j0 + k, s) : 0.0f;
  }
};

}  // namespace kvgate::kernels::gpu
