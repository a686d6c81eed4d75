#include "runtime/weights.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/ggml_blocks.h"
#include "runtime/model_files.h"
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

namespace {

WeightMatrix make_weight(const std::string& file, std::string_view name, GgmlType type, uint32_t n_dims,
                         const std::array<uint64_t, 4>& dims, uint64_t n_elements, uint64_t n_bytes, uint64_t offset,
                         const uint8_t* data) {
  if (!weight_type_supported(type))
    throw_input_error_at(file, offset,
                         "tensor '" + std::string(name) + "' has weight type " + ggml_type_name(type) +
                             ", which the runtime does not multiply with (supported: F32, F16, BF16, Q4_0, Q4_1, "
                             "Q5_0, Q5_1, Q8_0, Q4_K, Q6_K)");
  if (n_dims > 2 || dims[2] != 1 || dims[3] != 1)
    throw_input_error_at(file, offset, "tensor '" + std::string(name) + "' is not a matrix");
  if (n_elements == 0) throw_input_error_at(file, offset, "tensor '" + std::string(name) + "' has a dimension of 0");
  WeightMatrix w;
  w.name = std::string(name);
  w.type = type;
  w.cols = static_cast<int64_t>(dims[0]);
  w.rows = static_cast<int64_t>(n_dims >= 2 ? dims[1] : 1);
  w.row_bytes = static_cast<size_t>(n_bytes / static_cast<uint64_t>(w.rows));
  w.data = data;
  return w;
}

}  // namespace

WeightMatrix weight_from_tensor(const GgufFile& file, const GgufTensor& t) {
  return make_weight(file.name(), t.name, t.type, t.n_dims, t.dims, t.n_elements, t.n_bytes, t.file_offset, t.data);
}

WeightMatrix weight_from_tensor(const ModelTensor& t) {
  return make_weight(t.file, t.name, t.type, t.n_dims, t.dims, t.n_elements, t.n_bytes, t.file_offset, t.data);
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
  static const bool simd = kvgate::cpu_has_avx2_fma_f16c();
  if (simd && w.cols % 32 == 0) {
    const int64_t blocks = w.cols / 32;
    if (w.type == GgmlType::Q4_0) return avx2::dequantize_q4_0(p, blocks, out);
    if (w.type == GgmlType::Q4_1) return avx2::dequantize_q4_1(p, blocks, out);
    if (w.type == GgmlType::Q8_0) return avx2::dequantize_q8_0(p, blocks, out);
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

namespace {

using BlockDot = float (*)(const uint8_t*, int64_t, const float*, const float*);

// The row dot a matrix gets: an AVX2 block kernel, an AVX2 float kernel, or the scalar decoder.
struct RowKernel {
  const WeightMatrix* w = nullptr;
  BlockDot block_dot = nullptr;
  bool simd = false;

  float dot(int64_t row, const float* x, const float* block_sums) const {
    if (block_dot) return block_dot(w->row(row), w->cols / 32, x, block_sums);
    if (simd && w->type == GgmlType::F32) return avx2::dot_f32(reinterpret_cast<const float*>(w->row(row)), w->cols, x);
    if (simd && w->type == GgmlType::F16) return avx2::dot_f16(w->row(row), w->cols, x);
    if (simd && w->type == GgmlType::BF16) return avx2::dot_bf16(w->row(row), w->cols, x);
    return dot_weight_row(*w, row, x);
  }
};

RowKernel row_kernel(const WeightMatrix& w) {
  RowKernel k;
  k.w = &w;
  k.simd = kvgate::cpu_has_avx2_fma_f16c();
  if (k.simd && w.cols % 32 == 0) {
    if (w.type == GgmlType::Q4_0) k.block_dot = avx2::dot_q4_0;
    if (w.type == GgmlType::Q4_1) k.block_dot = avx2::dot_q4_1;
    if (w.type == GgmlType::Q8_0) k.block_dot = avx2::dot_q8_0;
  }
  return k;
}

// Σ x over each 32-element block, which every Q4_1 row's minimum term multiplies.
std::vector<float> block_sums_of(const float* x, int64_t cols) {
  std::vector<float> sums(static_cast<size_t>(cols / 32));
  for (size_t b = 0; b < sums.size(); ++b) {
    float s = 0.0f;
    for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
    sums[b] = s;
  }
  return sums;
}

// OpenBLAS starts its own worker threads and, left alone, splits each sgemm over them; every
// sgemm here already runs inside one of the pool's parts, so those threads would only add
// cores beyond --threads (and spin after each call). Set once, before the first sgemm.
void use_one_blas_thread() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

constexpr int64_t kTile = 64;


}  // namespace

void matvec(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y) {
  const WeightMatrix* ws[] = {&w};
  float* ys[] = {y};
  matmul_many(pool, ws, x, 1, ys);
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int n, float* y) {
  const WeightMatrix* ws[] = {&w};
  float* ys[] = {y};
  matmul_many(pool, ws, x, n, ys);
}

void matmul_many(ThreadPool& pool, std::span<const WeightMatrix* const> ws, const float* x, int n,
                 std::span<float* const> ys) {
  KVGATE_CHECK(ws.size() == ys.size() && !ws.empty(), "matmul_many: one output per weight matrix");
  const int64_t cols = ws[0]->cols;
  for (const WeightMatrix* w : ws) KVGATE_CHECK(w->cols == cols, "matmul_many: the matrices take inputs of different widths");

  if (n == 1) {
    // One hand-off for all the matrices' rows: row i of the concatenation is row i - first[m]
    // of matrix m. Each row's dot is independent of the partition, so the result is too.
    std::vector<RowKernel> kernels;
    std::vector<size_t> first{0};
    bool needs_block_sums = false;
    for (const WeightMatrix* w : ws) {
      kernels.push_back(row_kernel(*w));
      first.push_back(first.back() + static_cast<size_t>(w->rows));
      needs_block_sums |= kernels.back().block_dot == avx2::dot_q4_1;
    }
    const std::vector<float> block_sums = needs_block_sums ? block_sums_of(x, cols) : std::vector<float>();
    pool.run(first.back(), [&](int, size_t b, size_t e) {
      size_t m = 0;
      for (size_t r = b; r < e; ++r) {
        while (r >= first[m + 1]) ++m;
        ys[m][r - first[m]] = kernels[m].dot(static_cast<int64_t>(r - first[m]), x, block_sums.data());
      }
    });
    return;
  }

  // Tiles of kTile rows per matrix (the same tiles as one matrix at a time), expanded to float
  // and multiplied by single-threaded sgemm; which part runs a tile changes nothing in it.
  use_one_blas_thread();
  std::vector<std::pair<size_t, int64_t>> tiles;  // (matrix, first row)
  for (size_t m = 0; m < ws.size(); ++m)
    for (int64_t r0 = 0; r0 < ws[m]->rows; r0 += kTile) tiles.emplace_back(m, r0);
  pool.run(tiles.size(), [&](int, size_t b, size_t e) {
    if (b >= e) return;
    std::vector<float> tile(static_cast<size_t>(kTile * cols));
    for (size_t t = b; t < e; ++t) {
      const WeightMatrix& w = *ws[tiles[t].first];
      const int64_t r0 = tiles[t].second, rows = w.rows;
      const int64_t nr = std::min(kTile, rows - r0);
      for (int64_t r = 0; r < nr; ++r) dequantize_weight_row(w, r0 + r, tile.data() + r * cols);
      // y[:, r0:r0+nr] = x · tileᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr), static_cast<int>(cols), 1.0f, x,
                  static_cast<int>(cols), tile.data(), static_cast<int>(cols), 0.0f, ys[tiles[t].first] + r0,
                  static_cast<int>(rows));
    }
  });
}

namespace {

// The weight type's vec_dot_type (ggml-cpu.c type_traits_cpu); the GPU forward maps its weight
// types the same way (kernels/gpu/weight_blocks.h llama_cpp_dot_input).
ggml::DotInput llama_cpp_dot_input(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return ggml::DotInput::f32;
    case GgmlType::F16: return ggml::DotInput::f16;
    case GgmlType::BF16: return ggml::DotInput::bf16;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ggml::DotInput::q8_1;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL: return ggml::DotInput::q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return ggml::DotInput::q8_k;
    default: break;
  }
  throw_internal_error(std::string("llama.cpp input rounding: no vec_dot_type for weight type ") + ggml_type_name(type));
}

}  // namespace

namespace {
void round_input_to(ggml::DotInput dot, GgmlType type, float* x, int64_t n, int64_t cols) {
  if (dot == ggml::DotInput::f32) return;
  const int block = ggml::dot_input_block(dot);
  KVGATE_CHECK(cols % block == 0, std::string("matmul input rounding: a row of ") + std::to_string(cols) +
                                      " is not whole blocks of " + std::to_string(block) + " for weight type " +
                                      ggml_type_name(type));
  const int64_t count = n * cols;
  for (int64_t i = 0; i < count; i += block) ggml::round_dot_input(dot, x + i);
}
}  // namespace

void round_input_like_llama_cpp(GgmlType type, float* x, int64_t n, int64_t cols) {
  round_input_to(llama_cpp_dot_input(type), type, x, n, cols);
}

ggml::DotInput arithmetic_dot_input(kernels::Arithmetic arithmetic, GgmlType type) {
  switch (arithmetic) {
    case kernels::Arithmetic::exact: return ggml::DotInput::f32;
    case kernels::Arithmetic::llama_cpp: return llama_cpp_dot_input(type);
    case kernels::Arithmetic::llama_cpp_cuda:
    case kernels::Arithmetic::vllm_fa3:
      return type == GgmlType::F16 ? ggml::DotInput::f16 : type == GgmlType::BF16 ? ggml::DotInput::bf16 : ggml::DotInput::f32;
  }
  return ggml::DotInput::f32;
}

void round_matmul_input(kernels::Arithmetic arithmetic, GgmlType type, float* x, int64_t n, int64_t cols) {
  round_input_to(arithmetic_dot_input(arithmetic, type), type, x, n, cols);
}

}  // namespace kvgate::runtime
