#pragma once
// Model weights kept in their stored GGUF type. Weight quantization and KV quantization are
// separate axes (docs/design.md): we never re-quantize or expand a whole matrix. Decode multiplies
// quantized rows by a float vector block by block; prefill expands one tile of rows at a time
// into a small float buffer and hands it to BLAS.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/thread_pool.h"
#include "kernels/arithmetic.h"
#include "kernels/ggml_blocks.h"
#include "runtime/gguf.h"

namespace kvgate::runtime {

// A 2-D weight [rows][cols] in ggml order: each of the `rows` rows holds `cols` contiguous
// elements (ggml dims[0] == cols).
struct WeightMatrix {
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Types the forward pass can multiply with.
bool weight_type_supported(GgmlType type);
// Wraps a GGUF tensor; an input error naming the tensor when its type or shape is unusable.
WeightMatrix weight_from_tensor(const GgufFile& file, const GgufTensor& tensor);
struct ModelTensor;
WeightMatrix weight_from_tensor(const ModelTensor& tensor);

// out[0..cols) = row r of w, in float.
void dequantize_weight_row(const WeightMatrix& w, int64_t r, float* out);
// x · row r of w, decoding one block at a time (no expanded copy of the row).
float dot_weight_row(const WeightMatrix& w, int64_t r, const float* x);

// y[w.rows] = w · x with the fastest row dot the CPU has (AVX2 for Q4_0/Q4_1/Q8_0/F32/F16);
// equal to dot_weight_row up to float summation order.
void matvec(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y);

// y[n][w.rows] = x[n][w.cols] · wᵀ. n == 1 uses the quantized dot; n > 1 expands tiles of rows
// and uses single-threaded sgemm per tile, tiles spread over the pool. The partition depends
// only on the sizes, so results are bit-identical for a given thread count.
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int n, float* y);

// Rounds x [n][cols] in place as llama.cpp's CPU mul_mat converts its f32 input before it meets
// weights of `type` (the weight type's ggml vec_dot_type, ggml-cpu.c): q8_1 blocks of 32 for
// Q4_1/Q5_1, q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL (AVX2 quantize_row_q8_0/q8_1: id = 127/amax, ties to
// even), q8_K blocks of 256 for the k-quants (quantize_row_q8_K_ref), f16 for F16, bf16 for BF16;
// F32 stays f32. Used for @engine=llama.cpp, where those roundings make a small perturbation
// (a q8_0 cache) flip the activations' 8-bit codes downstream, which is most of llama.cpp's KLD.
void round_input_like_llama_cpp(GgmlType type, float* x, int64_t n, int64_t cols);
// What the config's engine rounds a matmul input to next to weights of `type`
// (kernels/arithmetic.h arithmetic_matmul_inputs says it in words; the GPU forward rounds the same
// way, kernels/gpu/weight_blocks.h arithmetic_dot_input): llama.cpp's CPU dot types above; f16/bf16
// next to F16/BF16 weights under llama.cpp-cuda and vllm-fa3 (their GEMMs take 16-bit
// activations); f32 otherwise.
kernels::ggml::DotInput arithmetic_dot_input(kernels::Arithmetic arithmetic, GgmlType type);
void round_matmul_input(kernels::Arithmetic arithmetic, GgmlType type, float* x, int64_t n, int64_t cols);

// ys[i] = matmul(ws[i], x) for several matrices of the same input width in one hand-off to the
// pool (a decode step's Q/K/V, or gate and up), with the same per-row and per-tile arithmetic
// as one matmul at a time, so the results are bit-identical to it.
void matmul_many(ThreadPool& pool, std::span<const WeightMatrix* const> ws, const float* x, int n,
                 std::span<float* const> ys);

}  // namespace kvgate::runtime
