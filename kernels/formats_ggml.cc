// llama.cpp KV cache types (-ctk/-ctv q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl). Quantization
// follows ggml's quantize_row_*_ref operation for operation (the same arithmetic as ggml's CUDA
// cpy kernels), so bytes match what llama.cpp writes on GPU. Note: ggml's x86 AVX2
// quantize_row_q8_0 rounds ties to even and uses id = 127/amax, so a CPU-built llama.cpp can
// differ from the reference (and from us) in the last bit of rare ties; we mirror the reference.
//
// Optional rotation (rot=hadamard): rows are stored as q(R x) with R the randomized
// Walsh-Hadamard rotation, as llama.cpp's rotated quantized caches do; the query is rotated
// once (prepare_query) and attention outputs are rotated back (finish_output).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/ggml_blocks.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

using namespace ggml;

uint16_t fp16(float f) { return f32_to_f16(f); }
float fp32(uint16_t h) { return f16_to_f32(h); }

// ggml's "signed value of the first element with the largest magnitude" (q4_0, q5_0).
float signed_abs_max(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr simd::RowKind kSimd = simd::RowKind::q8_0;
  static void quantize(const float* x, Block& b) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = fp16(d);
    for (int j = 0; j < kBlock; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d);
    for (int j = 0; j < kBlock; ++j) y[j] = b.qs[j] * d;
  }
};

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr simd::RowKind kSimd = simd::RowKind::q4_0;
  static void quantize(const float* x, Block& b) {
    const float d = signed_abs_max(x) / -8;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int xi1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 8.5f)));
      b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((b.qs[j] & 0x0f) - 8) * d;
      y[j + 16] = ((b.qs[j] >> 4) - 8) * d;
    }
  }
};

struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr simd::RowKind kSimd = simd::RowKind::q4_1;
  static void quantize(const float* x, Block& b) {
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = fp16(d);
    b.m = fp16(min);
    for (int j = 0; j < 16; ++j) {
      const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int xi1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[16 + j] - min) * id + 0.5f)));
      b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d), m = fp32(b.m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (b.qs[j] & 0x0f) * d + m;
      y[j + 16] = (b.qs[j] >> 4) * d + m;
    }
  }
};

// The 5th bits: element j's in bit j of qh (elements 16..31 in bits 16..31).
void store_q5(const int* xi, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((xi[j] & 0x0f) | ((xi[16 + j] & 0x0f) << 4));
    qh |= ((static_cast<uint32_t>(xi[j]) & 0x10u) >> 4) << j;
    qh |= ((static_cast<uint32_t>(xi[16 + j]) & 0x10u) >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) qh_bytes[k] = static_cast<uint8_t>(qh >> (8 * k));  // little-endian
}
void load_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  const uint32_t qh = qh_bytes[0] | (qh_bytes[1] << 8) | (qh_bytes[2] << 16) | (static_cast<uint32_t>(qh_bytes[3]) << 24);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | (((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
  }
}

struct Q5_0 {
  using Block = BlockQ5_0;
  static constexpr simd::RowKind kSimd = simd::RowKind::q5_0;  // fused dot/axpy and dequantize; quantize is scalar
  static void quantize(const float* x, Block& b) {
    const float d = signed_abs_max(x) / -16;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = fp16(d);
    int xi[kBlock];
    for (int j = 0; j < kBlock; ++j) xi[j] = std::min(31, static_cast<int>(static_cast<uint8_t>(static_cast<int8_t>(x[j] * id + 16.5f))));
    store_q5(xi, b.qs, b.qh);
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d);
    int q[kBlock];
    load_q5(b.qs, b.qh, q);
    for (int j = 0; j < kBlock; ++j) y[j] = (q[j] - 16) * d;
  }
};

struct Q5_1 {
  using Block = BlockQ5_1;
  static constexpr simd::RowKind kSimd = simd::RowKind::q5_1;  // fused dot/axpy and dequantize; quantize is scalar
  static void quantize(const float* x, Block& b) {
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = fp16(d);
    b.m = fp16(min);
    int xi[kBlock];
    for (int j = 0; j < kBlock; ++j) xi[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    store_q5(xi, b.qs, b.qh);
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d), m = fp32(b.m);
    int q[kBlock];
    load_q5(b.qs, b.qh, q);
    for (int j = 0; j < kBlock; ++j) y[j] = q[j] * d + m;
  }
};

// ggml's best_index_int8: nearest grid value by bisection; a tie goes to the upper value.
int best_index_iq4nl(float x) {
  const int8_t* val = kValuesIq4nl;
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < val[mid]) hi = mid;
    else lo = mid;
  }
  return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

// quantize_row_iq4_nl_ref = quantize_row_iq4_nl_impl(32, 32, ..., ntry = -1): an initial scale
// from the signed max, indices for it, then one weighted least-squares rescale (weights x^2)
// without re-picking the indices. A block below ggml's GROUP_MAX_EPS stores d = 0; ggml then
// leaves the indices unspecified, we store 0.
struct IQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr simd::RowKind kSimd = simd::RowKind::iq4_nl;  // fused dot/axpy and dequantize; quantize is scalar
  static void quantize(const float* x, Block& b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    std::memset(b.qs, 0, sizeof b.qs);
    b.d = fp16(0.0f);
    if (amax < 1e-15f) return;
    const float d0 = max / kValuesIq4nl[0];
    const float id = 1 / d0;
    float sumqx = 0.0f, sumq2 = 0.0f;
    int idx[kBlock];
    for (int j = 0; j < kBlock; ++j) {
      const float w = x[j] * x[j];
      idx[j] = best_index_iq4nl(id * x[j]);
      const float q = kValuesIq4nl[idx[j]];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    b.d = fp16(sumqx / sumq2);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(idx[j] | (idx[16 + j] << 4));
  }
  static void dequantize(const Block& b, float* y) {
    const float d = fp32(b.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kValuesIq4nl[b.qs[j] & 0x0f];
      y[j + 16] = d * kValuesIq4nl[b.qs[j] >> 4];
    }
  }
};

template <class T>
class GgmlCodec final : public QuantizedCodec {
  using Block = typename T::Block;

 public:
  GgmlCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : QuantizedCodec(info, head_dim, options, /*allow_rotation=*/true),
        blocks_(head_dim / kBlock),
        row_{T::kSimd, head_dim, static_cast<size_t>(head_dim / kBlock) * sizeof(Block), 1.0f} {}
  size_t group_bytes() const override { return static_cast<size_t>(blocks_) * sizeof(Block); }

  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores))
      QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc))
      QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  // Blocks are copied through a local struct: rows carry no alignment guarantee.
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    for (int i = 0; i < blocks_; ++i) {
      Block b;
      T::quantize(x + i * kBlock, b);
      std::memcpy(dst + i * sizeof(Block), &b, sizeof b);
    }
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    for (int i = 0; i < blocks_; ++i) {
      Block b;
      std::memcpy(&b, src + i * sizeof(Block), sizeof b);
      T::dequantize(b, y + i * kBlock);
    }
  }
  void encode_row(const float* x, uint8_t* dst) const override {
    if (!simd::quantize_row(row_, x, dst)) encode_row_ref(x, dst);
  }
  void decode_row(const uint8_t* src, float* y) const override {
    if (!simd::dequantize_row(row_, src, y)) decode_row_ref(src, y);
  }

 private:
  int blocks_;
  simd::RowFormat row_;
};

constexpr uint32_t kGgmlBackends = kAllBackends;

const FormatInfo kQ8_0{"q8_0", "llama.cpp", "llama.cpp -ctk/-ctv q8_0",
                       "ggml block_q8_0: 32 x int8 + fp16 scale (8.5 bits)", true, true, 32, false, kGgmlBackends,
                       &make_quantized_codec<GgmlCodec<Q8_0>>};
const FormatInfo kQ5_0{"q5_0", "llama.cpp", "llama.cpp -ctk/-ctv q5_0",
                       "ggml block_q5_0: 32 x 5-bit symmetric + fp16 scale (5.5 bits)", true, true, 32, false,
                       kGgmlBackends, &make_quantized_codec<GgmlCodec<Q5_0>>};
const FormatInfo kQ5_1{"q5_1", "llama.cpp", "llama.cpp -ctk/-ctv q5_1",
                       "ggml block_q5_1: 32 x 5-bit + fp16 scale and min (6 bits)", true, true, 32, false,
                       kGgmlBackends, &make_quantized_codec<GgmlCodec<Q5_1>>};
const FormatInfo kQ4_0{"q4_0", "llama.cpp", "llama.cpp -ctk/-ctv q4_0",
                       "ggml block_q4_0: 32 x 4-bit symmetric (-8 offset) + fp16 scale (4.5 bits)", true, true, 32,
                       false, kGgmlBackends, &make_quantized_codec<GgmlCodec<Q4_0>>};
const FormatInfo kQ4_1{"q4_1", "llama.cpp", "llama.cpp -ctk/-ctv q4_1",
                       "ggml block_q4_1: 32 x 4-bit + fp16 scale and min (5 bits)", true, true, 32, false,
                       kGgmlBackends, &make_quantized_codec<GgmlCodec<Q4_1>>};
const FormatInfo kIQ4_NL{"iq4_nl", "llama.cpp", "llama.cpp -ctk/-ctv iq4_nl",
                         "ggml block_iq4_nl: 32 x 4-bit non-linear grid + fp16 scale (4.5 bits)", true, true, 32,
                         false, kGgmlBackends, &make_quantized_codec<GgmlCodec<IQ4_NL>>};

}  // namespace

void append_llama_cpp_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kQ8_0);
  out.push_back(&kQ5_0);
  out.push_back(&kQ5_1);
  out.push_back(&kQ4_0);
  out.push_back(&kQ4_1);
  out.push_back(&kIQ4_NL);
}

}  // namespace kvgate::kernels
