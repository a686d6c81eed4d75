#include "runtime/weights.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/cpu_features.h"
#include "kernels/ggml_blocks.h"
#include "runtime/weights_avx2.h"

namespace kvgate::runtime {
namespace {

namespace ggml = kernels::ggml;

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The block decoders are kernels/ggml_blocks.h's, which the GPU weight decode and the KV codecs
// share (layouts from ggml's block_* definitions).
struct BlockType {
  GgmlType type;
  int block_elems;
  int block_bytes;
  void (*decode)(const uint8_t*, float*);
};

template <class T>
constexpr BlockType block_type_of(GgmlType type) {
  return {type, T::kElems, T::kBytes, &T::dequantize};
}

constexpr BlockType kBlockTypes[] = {
    block_type_of<ggml::Q4_0>(GgmlType::Q4_0), block_type_of<ggml::Q4_1>(GgmlType::Q4_1),
    block_type_of<ggml::Q5_0>(GgmlType::Q5_0), block_type_of<ggml::Q5_1>(GgmlType::Q5_1),
    block_type_of<ggml::Q8_0>(GgmlType::Q8_0), block_type_of<ggml::Q4_K>(GgmlType::Q4_K),
    block_type_of<ggml::Q6_K>(GgmlType::Q6_K),
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
