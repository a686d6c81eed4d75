#include "runtime/weights.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/cpu_features.h"
#include "runtime/weights_avx2.h"

namespace kvgate::runtime {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// --- Block decoders, one per ggml type (layouts from ggml's block_* definitions) ---

// block_q4_0 {half d; uint8 qs[16]}: element j = (low nibble j) - 8, element j+16 = high nibble - 8.
void decode_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}
// block_q4_1 {half d; half m; uint8 qs[16]}: x = q * d + m.
void decode_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}
// block_q5_0 {half d; uint8 qh[4]; uint8 qs[16]}: the 5th bit of element j is bit j of qh.
void decode_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((qs[j] & 0x0f) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - 16) * d;
  }
}
// block_q5_1 {half d; half m; uint8 qh[4]; uint8 qs[16]}.
void decode_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>((qs[j] & 0x0f) | hi0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | hi1) * d + m;
  }
}
// block_q8_0 {half d; int8 qs[32]}.
void decode_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q4_K's 12 scale bytes pack eight 6-bit (scale, min) pairs.
inline void q4k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// block_q4_K {half d; half dmin; uint8 scales[12]; uint8 qs[128]}: 256 elements in 8 sub-blocks.
void decode_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    q4k_scale_min(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    q4k_scale_min(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}
// block_q6_K {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d}: 6-bit values, 16 scales.
void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

struct BlockType {
  GgmlType type;
  int block_elems;
  int block_bytes;
  void (*decode)(const uint8_t*, float*);
};

constexpr BlockType kBlockTypes[] = {
    {GgmlType::Q4_0, 32, 18, decode_q4_0}, {GgmlType::Q4_1, 32, 20, decode_q4_1},
    {GgmlType::Q5_0, 32, 22, decode_q5_0}, {GgmlType::Q5_1, 32, 24, decode_q5_1},
    {GgmlType::Q8_0, 32, 34, decode_q8_0}, {GgmlType::Q4_K, 256, 144, decode_q4_k},
    {GgmlType::Q6_K, 256, 210, decode_q6_k},
};

const BlockType* block_type(GgmlType t) {
  for (const BlockType& b : kBlockTypes)
    if (b.type == t) return &b;
  return nullptr;
}

}  // namespace

bool weight_type_supported(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_type(type) != nullptr;
}

WeightMatrix weight_from_tensor(const GgufFile& file, const GgufTensor& t) {
  if (!weight_type_supported(t.type))
    throw_input_error_at(file.name(), t.file_offset,
                         "tensor '" + std::string(t.name) + "' has weight type " + ggml_type_name(t.type) +
                             ", which the runtime does not multiply with (supported: F32, F16, BF16, Q4_0, Q4_1, "
                             "Q5_0, Q5_1, Q8_0, Q4_K, Q6_K)");
  if (t.n_dims > 2 || t.dims[2] != 1 || t.dims[3] != 1)
    throw_input_error_at(file.name(), t.file_offset, "tensor '" + std::string(t.name) + "' is not a matrix");
  WeightMatrix w;
  w.name = std::string(t.name);
  w.type = t.type;
  w.cols = static_cast<int64_t>(t.dims[0]);
  w.rows = static_cast<int64_t>(t.n_dims >= 2 ? t.dims[1] : 1);
  w.row_bytes = static_cast<size_t>(t.n_bytes / static_cast<uint64_t>(w.rows));
  w.data = t.data;
  return w;
}

void dequantize_weight_row(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* p = w.row(r);
  switch (w.type) {
    case GgmlType::F32: std::memcpy(out, p, sizeof(float) * w.cols); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = half_at(p + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    default: break;
  }
  const BlockType* bt = block_type(w.type);
  KVGATE_CHECK(bt != nullptr, "unsupported weight type reached dequantize_weight_row");
  for (int64_t i = 0; i < w.cols; i += bt->block_elems, p += bt->block_bytes) bt->decode(p, out + i);
}

float dot_weight_row(const WeightMatrix& w, int64_t r, const float* x) {
  const uint8_t* p = w.row(r);
  float sum = 0.0f;
  if (w.type == GgmlType::F32) {
    const float* row = reinterpret_cast<const float*>(p);
    for (int64_t i = 0; i < w.cols; ++i) sum += row[i] * x[i];
    return sum;
  }
  if (w.type == GgmlType::F16 || w.type == GgmlType::BF16) {
    float tmp[256];
    for (int64_t i0 = 0; i0 < w.cols; i0 += 256) {
      const int64_t n = std::min<int64_t>(256, w.cols - i0);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * (i0 + i), 2);
        tmp[i] = w.type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      for (int64_t i = 0; i < n; ++i) sum += tmp[i] * x[i0 + i];
    }
    return sum;
  }
  const BlockType* bt = block_type(w.type);
  KVGATE_CHECK(bt != nullptr, "unsupported weight type reached dot_weight_row");
  float block[256];
  for (int64_t i = 0; i < w.cols; i += bt->block_elems, p += bt->block_bytes) {
    bt->decode(p, block);
    float partial = 0.0f;
    for (int j = 0; j < bt->block_elems; ++j) partial += block[j] * x[i + j];
    sum += partial;
  }
  return sum;
}

void matvec(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y) {
  const bool simd = kernels::cpu_has_avx2_fma_f16c();
  const int64_t n_blocks = w.cols / 32;
  using BlockDot = float (*)(const uint8_t*, int64_t, const float*, const float*);
  BlockDot block_dot = nullptr;
  if (simd && w.cols % 32 == 0) {
    if (w.type == GgmlType::Q4_0) block_dot = avx2::dot_q4_0;
    if (w.type == GgmlType::Q4_1) block_dot = avx2::dot_q4_1;
    if (w.type == GgmlType::Q8_0) block_dot = avx2::dot_q8_0;
  }
  std::vector<float> block_sums;
  if (block_dot == avx2::dot_q4_1) {
    block_sums.resize(static_cast<size_t>(n_blocks));
    for (int64_t b = 0; b < n_blocks; ++b) {
      float s = 0.0f;
      for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
      block_sums[static_cast<size_t>(b)] = s;
    }
  }
  pool.run(static_cast<size_t>(w.rows), [&](int, size_t b, size_t e) {
    for (size_t r = b; r < e; ++r) {
      const int64_t row = static_cast<int64_t>(r);
      if (block_dot) {
        y[r] = block_dot(w.row(row), n_blocks, x, block_sums.data());
      } else if (simd && w.type == GgmlType::F32) {
        y[r] = avx2::dot_f32(reinterpret_cast<const float*>(w.row(row)), w.cols, x);
      } else if (simd && w.type == GgmlType::F16) {
        y[r] = avx2::dot_f16(w.row(row), w.cols, x);
      } else {
        y[r] = dot_weight_row(w, row, x);
      }
    }
  });
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int n, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  if (n == 1) return matvec(pool, w, x, y);
  constexpr int64_t kTile = 64;
  const size_t tiles = static_cast<size_t>((rows + kTile - 1) / kTile);
  pool.run(tiles, [&](int, size_t b, size_t e) {
    std::vector<float> tile(static_cast<size_t>(kTile * cols));
    for (size_t t = b; t < e; ++t) {
      const int64_t r0 = static_cast<int64_t>(t) * kTile;
      const int64_t nr = std::min(kTile, rows - r0);
      for (int64_t r = 0; r < nr; ++r) dequantize_weight_row(w, r0 + r, tile.data() + r * cols);
      // y[:, r0:r0+nr] = x · tileᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr), static_cast<int>(cols), 1.0f, x,
                  static_cast<int>(cols), tile.data(), static_cast<int>(cols), 0.0f, y + r0, static_cast<int>(rows));
    }
  });
}

}  // namespace kvgate::runtime
