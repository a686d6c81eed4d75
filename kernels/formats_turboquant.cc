// TurboQuant key formats (Zandieh et al., "TurboQuant: Online Vector Quantization with
// Near-optimal Distortion Rate"), as vLLM's TurboQuant backend stores them:
//
//   tq{b}      keys: x = ||x|| u; the rotated unit vector y = R u has coordinates ~ N(0, 1/d), each
//              quantized with the b-bit Lloyd–Max codebook for that density; fp16 ||x|| per
//              token-head. `nc` stores ||x|| / ||c|| instead (c = the centroid vector), so the
//              dequantized key has exactly the original norm, as vLLM's *_nc presets do.
//   tq2.5/3.5  fractional widths: `outliers` rotated coordinates (default head_dim/4) get b+1
//              bits. After a random rotation every coordinate has the same distribution, so the
//              fixed rule "the first `outliers` rotated coordinates" is as good as any choice
//              that depends on the data, and needs no stored channel indices.
//   tqprod{b}  the paper's inner-product variant: (b-1)-bit codes as above plus a 1-bit QJL
//              sketch sign(S r) of the residual r = y - c (S: d x d iid N(0,1), seeded) with fp16
//              ||r||; <q, k~> is an unbiased estimate of <q, k>.
//
// R is the randomized Walsh–Hadamard rotation by default, or a seeded Haar orthogonal matrix
// with `rot=qr`. Keys stay in the rotated basis; attention rotates the query once.
//
// Layout of one token (token_group == 1), little-endian:
//   tq{b}:     fp16 norm | codes: LSB-first bit stream, coordinate 0 first (b or b+1 bits each)
//   tqprod{b}: fp16 norm | fp16 residual norm | (b-1)-bit codes | d sign bits (1 = +)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/format_families.h"
#include "kernels/hadamard.h"
#include "kernels/lloyd_max.h"
#include "kernels/orthogonal.h"

namespace kvgate::kernels {
namespace {

constexpr int kMaxDim = 1024;  // make_codec rejects larger head dims
constexpr uint64_t kQjlSeedSalt = 0x514a4c2d736b6574ull;  // keeps S independent of the rotation signs

inline void put_bits(uint8_t* dst, size_t bit, uint32_t value, int nbits) {
  for (int i = 0; i < nbits; ++i, ++bit)
    if ((value >> i) & 1u) dst[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
}

// Sequential reader of an LSB-first bit stream; it touches only the bytes the codes occupy.
class BitReader {
 public:
  explicit BitReader(const uint8_t* src) : p_(src) {}
  uint32_t read(int nbits) {
    while (have_ < nbits) {
      buf_ |= static_cast<uint64_t>(*p_++) << have_;
      have_ += 8;
    }
    const uint32_t v = static_cast<uint32_t>(buf_ & ((1u << nbits) - 1u));
    buf_ >>= nbits;
    have_ -= nbits;
    return v;
  }

 private:
  const uint8_t* p_;
  uint64_t buf_ = 0;
  int have_ = 0;
};

inline uint16_t f16_bits_clamped(double v) {
  return f32_to_f16(static_cast<float>(std::min(v, 65504.0)));
}

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline void store_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// The rotation a TurboQuant codec applies: Walsh–Hadamard (default) or QR.
class KeyRotation {
 public:
  KeyRotation(const FormatInfo& info, int d, const FormatOptions& o) : qr_(o.rotation == Rotation::qr) {
    if (qr_) {
      orthogonal_ = OrthogonalRotation(d, o.seed);
    } else {
      if ((d & (d - 1)) != 0)
        throw_usage_error("KV format " + std::string(info.name) +
                          " with the Walsh-Hadamard rotation needs a power-of-two head_dim, got " + std::to_string(d) +
                          " (rot=qr works for any head_dim)");
      hadamard_ = HadamardRotation(d, o.seed);
    }
  }
  void forward(const float* x, float* out) const {
    if (qr_) orthogonal_.forward(x, out);
    else hadamard_.forward(x, out);
  }
  void inverse(const float* x, float* out) const {
    if (!qr_) return hadamard_.inverse(x, out);
    float tmp[kMaxDim];
    std::memcpy(tmp, x, sizeof(float) * orthogonal_.size());
    orthogonal_.inverse(tmp, out);
  }

 private:
  bool qr_;
  HadamardRotation hadamard_;
  OrthogonalRotation orthogonal_;
};

// A Lloyd–Max codebook scaled for N(0, 1/d), in float for the hot paths.
struct ScaledCodebook {
  int bits = 0;
  std::vector<float> centroids;
  std::vector<float> thresholds;
  std::array<float, 16> table16{};  // centroids padded for the vector lookup (bits <= 4)
  ScaledCodebook() = default;
  ScaledCodebook(int b, int d) : bits(b) {
    const LloydMaxCodebook& cb = gaussian_lloyd_max(b);
    const double sigma = 1.0 / std::sqrt(static_cast<double>(d));
    for (double c : cb.centroids) centroids.push_back(static_cast<float>(c * sigma));
    for (double t : cb.thresholds) thresholds.push_back(static_cast<float>(t * sigma));
    if (b <= 4) std::copy(centroids.begin(), centroids.end(), table16.begin());
  }
  uint32_t encode(float y) const {
    return static_cast<uint32_t>(std::upper_bound(thresholds.begin(), thresholds.end(), y) - thresholds.begin());
  }
};

// sum_i q[i] * table[code_i] over n codes (n a multiple of 8, bits <= 4), 8 codes per step:
// b bytes hold eight b-bit codes; a variable shift extracts them and two 8-entry permutes
// look them up in the 16-entry table.
#if defined(__x86_64__)
// The vector dot sums in another order than dot_ref, so its bits differ: KVGATE_DISABLE_SIMD
// (through cpu_features) must be able to take the scalar path here as everywhere else.
bool simd_dot_available() { return cpu_has_avx2_fma_f16c(); }

template <int Bits>
__attribute__((target("avx2,fma"))) inline __m256 lookup8(const uint8_t* codes, __m256 lo_tab, __m256 hi_tab) {
  const __m256i shifts = _mm256_setr_epi32(0, Bits, 2 * Bits, 3 * Bits, 4 * Bits, 5 * Bits, 6 * Bits, 7 * Bits);
  uint32_t packed = 0;
  for (int b = 0; b < Bits; ++b) packed |= static_cast<uint32_t>(codes[b]) << (8 * b);
  const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(packed)), shifts),
                                       _mm256_set1_epi32((1 << Bits) - 1));
  const __m256 value = _mm256_permutevar8x32_ps(lo_tab, idx);
  if constexpr (Bits < 4) return value;
  return _mm256_blendv_ps(value, _mm256_permutevar8x32_ps(hi_tab, idx),
                          _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7))));
}

// The one FMA sequence of the vector dot, over values already looked up: two accumulators (one
// chain would wait on its own latency every 8 codes), then a fixed horizontal sum. Scoring from
// codes and from decoded values both end here, so they give the same bits.
template <class Values>
__attribute__((target("avx2,fma"))) inline float dot_values_simd(const float* q, int n, Values values_at) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), values_at(i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), values_at(i + 8), acc1);
  }
  if (i < n) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), values_at(i), acc0);
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Values 8 at a time, for dot_values_simd: looked up from codes, or loaded once decoded. (Functors
// with target attributes: a lambda would not inherit the enclosing function's.)
template <int Bits>
struct CodeValues {
  const uint8_t* codes;
  __m256 lo_tab, hi_tab;
  __attribute__((target("avx2,fma"))) __m256 operator()(int i) const { return lookup8<Bits>(codes + i / 8 * Bits, lo_tab, hi_tab); }
};
struct DecodedValues {
  const float* values;
  __attribute__((target("avx2,fma"))) __m256 operator()(int i) const { return _mm256_loadu_ps(values + i); }
};

template <int Bits>
__attribute__((target("avx2,fma"))) float dot_codes_simd_fixed(const float* q, const uint8_t* codes, int n,
                                                                const float* table16) {
  const __m256 lo_tab = _mm256_loadu_ps(table16);
  const __m256 hi_tab = _mm256_loadu_ps(table16 + 8);
  return dot_values_simd(q, n, CodeValues<Bits>{codes, lo_tab, hi_tab});
}

template <int Bits>
__attribute__((target("avx2,fma"))) void decode_codes_simd_fixed(const uint8_t* codes, int n, const float* table16,
                                                                  float* out) {
  const __m256 lo_tab = _mm256_loadu_ps(table16);
  const __m256 hi_tab = _mm256_loadu_ps(table16 + 8);
  for (int i = 0; i < n; i += 8, codes += Bits) _mm256_storeu_ps(out + i, lookup8<Bits>(codes, lo_tab, hi_tab));
}

float dot_codes_simd(const float* q, const uint8_t* codes, int n, int bits, const float* table16) {
  switch (bits) {
    case 1: return dot_codes_simd_fixed<1>(q, codes, n, table16);
    case 2: return dot_codes_simd_fixed<2>(q, codes, n, table16);
    case 3: return dot_codes_simd_fixed<3>(q, codes, n, table16);
    default: return dot_codes_simd_fixed<4>(q, codes, n, table16);
  }
}

// The table values of n codes (n a multiple of 8), as lookup8 forms them for dot_codes_simd.
void decode_codes_simd(const uint8_t* codes, int n, int bits, const float* table16, float* out) {
  switch (bits) {
    case 1: return decode_codes_simd_fixed<1>(codes, n, table16, out);
    case 2: return decode_codes_simd_fixed<2>(codes, n, table16, out);
    case 3: return decode_codes_simd_fixed<3>(codes, n, table16, out);
    default: return decode_codes_simd_fixed<4>(codes, n, table16, out);
  }
}

// dot_codes_simd over values decode_codes_simd wrote: the same products in the same order.
__attribute__((target("avx2,fma"))) float dot_decoded_simd(const float* q, const float* values, int n) {
  return dot_values_simd(q, n, DecodedValues{values});
}
#else
bool simd_dot_available() { return false; }
float dot_codes_simd(const float*, const uint8_t*, int, int, const float*) { return 0.0f; }
void decode_codes_simd(const uint8_t*, int, int, const float*, float*) {}
float dot_decoded_simd(const float*, const float*, int) { return 0.0f; }
#endif

void check_common_options(const FormatInfo& info, const FormatOptions& o) {
  if (o.scale != 1.0f) throw_usage_error("KV format " + std::string(info.name) + " takes no scale option");
  if (o.token_group != 0 || o.residual_tokens != FormatOptions{}.residual_tokens)
    throw_usage_error("KV format " + std::string(info.name) + " takes no group/residual options (KIVI only)");
}

// Description of the per-coordinate widths: the first `outliers` coordinates use b+1 bits.
struct TqWidths {
  int base_bits;
  int outliers;
};

class TurboQuantMseCodec final : public Codec {
 public:
  TurboQuantMseCodec(const FormatInfo& info, int d, const FormatOptions& o, TqWidths w)
      : Codec(info, d, o), rotation_(info, d, o), widths_(w) {
    check_common_options(info, o);
    if (widths_.outliers < 0 || widths_.outliers > d)
      throw_usage_error("KV format " + std::string(info.name) + ": outliers=" + std::to_string(widths_.outliers) +
                        " exceeds head_dim " + std::to_string(d));
    low_ = ScaledCodebook(widths_.base_bits, d);
    if (widths_.outliers > 0) high_ = ScaledCodebook(widths_.base_bits + 1, d);
    code_bits_ = static_cast<size_t>(widths_.outliers) * (widths_.base_bits + 1) +
                 static_cast<size_t>(d - widths_.outliers) * widths_.base_bits;
  }

  size_t group_bytes() const override { return 2 + (code_bits_ + 7) / 8; }
  bool rotates() const override { return true; }
  void prepare_query(const float* q, float* q_prepared) const override { rotation_.forward(q, q_prepared); }

  void quantize_ref(const float* x, uint8_t* dst) const override {
    std::memset(dst, 0, group_bytes());
    double norm2 = 0.0;
    for (int i = 0; i < head_dim_; ++i) norm2 += static_cast<double>(x[i]) * x[i];
    const double norm = std::sqrt(norm2);
    if (!(norm > 0.0) || !std::isfinite(norm)) {
      // A zero (or non-finite) key is stored as the zero vector: norm 0, codes of centroid 0.
      store_f16(dst, 0);
      return;
    }
    float unit[kMaxDim], y[kMaxDim];
    const float inv = static_cast<float>(1.0 / norm);
    for (int i = 0; i < head_dim_; ++i) unit[i] = x[i] * inv;
    rotation_.forward(unit, y);
    double centroid_norm2 = 0.0;
    size_t bit = 0;
    for (int i = 0; i < head_dim_; ++i) {
      const ScaledCodebook& cb = codebook_for(i);
      const uint32_t code = cb.encode(y[i]);
      put_bits(dst + 2, bit, code, cb.bits);
      bit += cb.bits;
      centroid_norm2 += static_cast<double>(cb.centroids[code]) * cb.centroids[code];
    }
    const double stored = options_.norm_correction ? norm / std::sqrt(centroid_norm2) : norm;
    store_f16(dst, f16_bits_clamped(stored));
  }

  void dequantize_stored_ref(const uint8_t* src, float* y) const override {
    const float norm = load_f16(src);
    BitReader codes(src + 2);
    for (int i = 0; i < head_dim_; ++i) {
      const ScaledCodebook& cb = codebook_for(i);
      y[i] = norm * cb.centroids[codes.read(cb.bits)];
    }
  }
  void dequantize_ref(const uint8_t* src, float* y) const override {
    float stored[kMaxDim];
    dequantize_stored_ref(src, stored);
    rotation_.inverse(stored, y);
  }

  float dot_ref(const float* q, const uint8_t* src, int) const override {
    float sum = 0.0f;
    BitReader codes(src + 2);
    for (int i = 0; i < head_dim_; ++i) {
      const ScaledCodebook& cb = codebook_for(i);
      sum += q[i] * cb.centroids[codes.read(cb.bits)];
    }
    return load_f16(src) * sum;
  }

  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    const size_t stride = group_bytes();
    // The code stream splits into the outlier segment and the rest; each is byte-aligned for
    // the vector kernel when its length is a multiple of 8 codes.
    const int rest = head_dim_ - widths_.outliers;
    const size_t rest_offset = static_cast<size_t>(widths_.outliers) * (widths_.base_bits + 1) / 8;
    const bool simd = simd_dot_available() && widths_.outliers % 8 == 0 && rest % 8 == 0 &&
                      widths_.base_bits + (widths_.outliers > 0 ? 1 : 0) <= 4;
    if (simd && n_q > 1) {
      // Several query rows (a GQA group, a prefill block): each key's codes are looked up once
      // into floats, and every row's dot reads them (bit-identical to scoring from the codes).
      thread_local std::vector<float> decoded;
      decoded.resize(static_cast<size_t>(n_tokens) * head_dim_);
      for (int t = 0; t < n_tokens; ++t) {
        const uint8_t* g = groups + t * stride;
        float* values = &decoded[static_cast<size_t>(t) * head_dim_];
        if (widths_.outliers > 0)
          decode_codes_simd(g + 2, widths_.outliers, widths_.base_bits + 1, high_.table16.data(), values);
        decode_codes_simd(g + 2 + rest_offset, rest, widths_.base_bits, low_.table16.data(), values + widths_.outliers);
      }
      for (int qi = 0; qi < n_q; ++qi) {
        const float* qrow = q + static_cast<size_t>(qi) * head_dim_;
        for (int t = 0; t < n_tokens; ++t) {
          const float* values = &decoded[static_cast<size_t>(t) * head_dim_];
          float sum = dot_decoded_simd(qrow + widths_.outliers, values + widths_.outliers, rest);
          if (widths_.outliers > 0) sum += dot_decoded_simd(qrow, values, widths_.outliers);
          scores[static_cast<size_t>(qi) * n_tokens + t] = sum * load_f16(groups + t * stride);
        }
      }
      return;
    }
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qrow = q + static_cast<size_t>(qi) * head_dim_;
      for (int t = 0; t < n_tokens; ++t) {
        const uint8_t* g = groups + t * stride;
        float sum;
        if (simd) {
          sum = dot_codes_simd(qrow + widths_.outliers, g + 2 + rest_offset, rest, widths_.base_bits, low_.table16.data());
          if (widths_.outliers > 0)
            sum += dot_codes_simd(qrow, g + 2, widths_.outliers, widths_.base_bits + 1, high_.table16.data());
          sum *= load_f16(g);
        } else {
          sum = dot_ref(qrow, g, 0);
        }
        scores[static_cast<size_t>(qi) * n_tokens + t] = sum;
      }
    }
  }

 private:
  const ScaledCodebook& codebook_for(int i) const { return i < widths_.outliers ? high_ : low_; }

  KeyRotation rotation_;
  TqWidths widths_;
  ScaledCodebook low_, high_;
  size_t code_bits_ = 0;
};

class TurboQuantProdCodec final : public Codec {
 public:
  TurboQuantProdCodec(const FormatInfo& info, int d, const FormatOptions& o, int bits)
      : Codec(info, d, o), rotation_(info, d, o), mse_(bits - 1, d), sketch_(static_cast<size_t>(d) * d) {
    check_common_options(info, o);
    if (o.norm_correction || o.outlier_channels != 0)
      throw_usage_error("KV format " + std::string(info.name) +
                        " takes no nc/outliers options (they would bias its inner products)");
    Rng rng(o.seed ^ kQjlSeedSalt);
    for (float& s : sketch_) s = static_cast<float>(rng.normal());
    qjl_scale_ = static_cast<float>(std::sqrt(M_PI / 2.0) / d);
  }

  size_t group_bytes() const override {
    return 4 + (static_cast<size_t>(head_dim_) * mse_.bits + 7) / 8 + (static_cast<size_t>(head_dim_) + 7) / 8;
  }
  bool rotates() const override { return true; }
  void prepare_query(const float* q, float* q_prepared) const override { rotation_.forward(q, q_prepared); }

  void quantize_ref(const float* x, uint8_t* dst) const override {
    std::memset(dst, 0, group_bytes());
    double norm2 = 0.0;
    for (int i = 0; i < head_dim_; ++i) norm2 += static_cast<double>(x[i]) * x[i];
    const double norm = std::sqrt(norm2);
    if (!(norm > 0.0) || !std::isfinite(norm)) return;  // zero norms: the zero vector
    float unit[kMaxDim], y[kMaxDim], residual[kMaxDim];
    const float inv = static_cast<float>(1.0 / norm);
    for (int i = 0; i < head_dim_; ++i) unit[i] = x[i] * inv;
    rotation_.forward(unit, y);
    uint8_t* codes = dst + 4;
    double r2 = 0.0;
    for (int i = 0; i < head_dim_; ++i) {
      const uint32_t code = mse_.encode(y[i]);
      put_bits(codes, static_cast<size_t>(i) * mse_.bits, code, mse_.bits);
      residual[i] = y[i] - mse_.centroids[code];
      r2 += static_cast<double>(residual[i]) * residual[i];
    }
    uint8_t* signs = codes + (static_cast<size_t>(head_dim_) * mse_.bits + 7) / 8;
    for (int j = 0; j < head_dim_; ++j) {
      const float* row = sketch_.data() + static_cast<size_t>(j) * head_dim_;
      double s = 0.0;
      for (int i = 0; i < head_dim_; ++i) s += static_cast<double>(row[i]) * residual[i];
      if (s >= 0.0) signs[j >> 3] |= static_cast<uint8_t>(1u << (j & 7));
    }
    store_f16(dst, f16_bits_clamped(norm));
    store_f16(dst + 2, f16_bits_clamped(std::sqrt(r2)));
  }

  void dequantize_stored_ref(const uint8_t* src, float* y) const override {
    const float norm = load_f16(src);
    const float gamma = load_f16(src + 2);
    const uint8_t* codes = src + 4;
    const uint8_t* signs = codes + (static_cast<size_t>(head_dim_) * mse_.bits + 7) / 8;
    std::vector<double> back(head_dim_, 0.0);  // S^T z
    for (int j = 0; j < head_dim_; ++j) {
      const double z = (signs[j >> 3] >> (j & 7)) & 1u ? 1.0 : -1.0;
      const float* row = sketch_.data() + static_cast<size_t>(j) * head_dim_;
      for (int i = 0; i < head_dim_; ++i) back[i] += z * row[i];
    }
    BitReader reader(codes);
    for (int i = 0; i < head_dim_; ++i) {
      const float c = mse_.centroids[reader.read(mse_.bits)];
      y[i] = norm * (c + qjl_scale_ * gamma * static_cast<float>(back[i]));
    }
  }
  void dequantize_ref(const uint8_t* src, float* y) const override {
    float stored[kMaxDim];
    dequantize_stored_ref(src, stored);
    rotation_.inverse(stored, y);
  }

  float dot_ref(const float* q, const uint8_t* src, int) const override {
    float sq[kMaxDim];
    sketch_query(q, sq);
    return dot_with_sketch(q, sq, src);
  }

  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    // S q is shared by every key, so it is computed once per query instead of once per key.
    float sq[kMaxDim];
    const bool simd = simd_dot_available() && head_dim_ % 8 == 0;
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qrow = q + static_cast<size_t>(qi) * head_dim_;
      sketch_query(qrow, sq);
      for (int t = 0; t < n_tokens; ++t) {
        const uint8_t* g = groups + t * group_bytes();
        scores[static_cast<size_t>(qi) * n_tokens + t] = simd ? dot_with_sketch_simd(qrow, sq, g) : dot_with_sketch(qrow, sq, g);
      }
    }
  }

 private:
  void sketch_query(const float* q, float* sq) const {
    for (int j = 0; j < head_dim_; ++j) {
      const float* row = sketch_.data() + static_cast<size_t>(j) * head_dim_;
      float s = 0.0f;
      for (int i = 0; i < head_dim_; ++i) s += row[i] * q[i];
      sq[j] = s;
    }
  }
  // <q, k~> = ||k|| (<q, c> + sqrt(pi/2)/d * gamma * <S q, z>).
  float dot_with_sketch(const float* q, const float* sq, const uint8_t* src) const {
    const uint8_t* codes = src + 4;
    const uint8_t* signs = codes + (static_cast<size_t>(head_dim_) * mse_.bits + 7) / 8;
    float mse_part = 0.0f, qjl_part = 0.0f;
    BitReader reader(codes);
    for (int i = 0; i < head_dim_; ++i) {
      mse_part += q[i] * mse_.centroids[reader.read(mse_.bits)];
      qjl_part += (signs[i >> 3] >> (i & 7)) & 1u ? sq[i] : -sq[i];
    }
    return load_f16(src) * (mse_part + qjl_scale_ * load_f16(src + 2) * qjl_part);
  }

  float dot_with_sketch_simd(const float* q, const float* sq, const uint8_t* src) const {
    static constexpr std::array<float, 16> kSignTable{-1.0f, 1.0f};
    const uint8_t* codes = src + 4;
    const uint8_t* signs = codes + static_cast<size_t>(head_dim_) * mse_.bits / 8;
    const float mse_part = dot_codes_simd(q, codes, head_dim_, mse_.bits, mse_.table16.data());
    const float qjl_part = dot_codes_simd(sq, signs, head_dim_, 1, kSignTable.data());
    return load_f16(src) * (mse_part + qjl_scale_ * load_f16(src + 2) * qjl_part);
  }

  KeyRotation rotation_;
  ScaledCodebook mse_;
  std::vector<float> sketch_;  // S, row-major d x d
  float qjl_scale_ = 0.0f;
};

template <int BaseBits, int OutlierDivisor>
std::unique_ptr<Codec> make_mse(const FormatInfo& info, int d, const FormatOptions& o) {
  // Fractional formats default to head_dim / OutlierDivisor outlier channels; integer ones to none.
  const int outliers = o.outlier_channels != 0 ? o.outlier_channels : (OutlierDivisor ? d / OutlierDivisor : 0);
  return std::make_unique<TurboQuantMseCodec>(info, d, o, TqWidths{BaseBits, outliers});
}

template <int Bits>
std::unique_ptr<Codec> make_prod(const FormatInfo& info, int d, const FormatOptions& o) {
  return std::make_unique<TurboQuantProdCodec>(info, d, o, Bits);
}

constexpr std::string_view kMirrors = "vLLM TurboQuant keys (turboquant_* presets); TurboQuant paper";

// Every TurboQuant key picks its rotation (rot=hadamard|qr) and seed; tqprod{b}'s codec rejects
// nc and outliers (they would bias its inner products), with a message that says so.
constexpr uint32_t kTqOptions = kOptionRotationKind | kOptionNormCorrection | kOptionSeed | kOptionOutliers;

const FormatInfo kTq1{.id = FormatId::tq1, .name = "tq1", .family = "turboquant",
                      .mirrors = kMirrors,
                      .description = "rotation + 1-bit Lloyd-Max codes, fp16 norm",
                      .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<1, 0>};
const FormatInfo kTq2{.id = FormatId::tq2, .name = "tq2", .family = "turboquant",
                      .mirrors = kMirrors,
                      .description = "rotation + 2-bit Lloyd-Max codes, fp16 norm",
                      .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<2, 0>};
const FormatInfo kTq25{.id = FormatId::tq2_5, .name = "tq2.5", .family = "turboquant",
                       .mirrors = kMirrors,
                       .description = "tq2 with head_dim/4 rotated channels at 3 bits",
                       .for_keys = true, .for_values = false, .head_dim_multiple = 4, .head_dim_power_of_two = false,
                       .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<2, 4>};
const FormatInfo kTq3{.id = FormatId::tq3, .name = "tq3", .family = "turboquant",
                      .mirrors = kMirrors,
                      .description = "rotation + 3-bit Lloyd-Max codes, fp16 norm",
                      .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<3, 0>};
const FormatInfo kTq35{.id = FormatId::tq3_5, .name = "tq3.5", .family = "turboquant",
                       .mirrors = kMirrors,
                       .description = "tq3 with head_dim/4 rotated channels at 4 bits",
                       .for_keys = true, .for_values = false, .head_dim_multiple = 4, .head_dim_power_of_two = false,
                       .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<3, 4>};
const FormatInfo kTq4{.id = FormatId::tq4, .name = "tq4", .family = "turboquant",
                      .mirrors = kMirrors,
                      .description = "rotation + 4-bit Lloyd-Max codes, fp16 norm",
                      .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_mse<4, 0>};
const FormatInfo kTqProd2{.id = FormatId::tqprod2, .name = "tqprod2", .family = "turboquant",
                          .mirrors = "TurboQuant paper (TurboQuant_prod)",
                          .description = "1-bit Lloyd-Max codes + 1-bit QJL residual sketch; unbiased inner products",
                          .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_prod<2>};
const FormatInfo kTqProd3{.id = FormatId::tqprod3, .name = "tqprod3", .family = "turboquant",
                          .mirrors = "TurboQuant paper (TurboQuant_prod)",
                          .description = "2-bit Lloyd-Max codes + 1-bit QJL residual sketch; unbiased inner products",
                          .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_prod<3>};
const FormatInfo kTqProd4{.id = FormatId::tqprod4, .name = "tqprod4", .family = "turboquant",
                          .mirrors = "TurboQuant paper (TurboQuant_prod)",
                          .description = "3-bit Lloyd-Max codes + 1-bit QJL residual sketch; unbiased inner products",
                          .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = kTqOptions, .gpu = GpuStorage::turboquant, .make = &make_prod<4>};

}  // namespace

void append_turboquant_formats(std::vector<const FormatInfo*>& out) {
  for (const FormatInfo* f : {&kTq1, &kTq2, &kTq25, &kTq3, &kTq35, &kTq4, &kTqProd2, &kTqProd3, &kTqProd4})
    out.push_back(f);
}

}  // namespace kvgate::kernels
