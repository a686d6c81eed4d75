#pragma once
// Device memory and the dense kernels a decoder forward pass needs besides attention (gather,
// RMSNorm, GEMM against a weight in its stored GGUF type, RoPE, SwiGLU, residual add).
// Activations are float32; weights are decoded element by element as they are loaded
// (weight_blocks.h). Fixed reduction orders, so a forward pass is deterministic run to run. Pointers are device
// pointers; launches go to the default stream and are ordered with each other and with
// DevicePagedKv's. Vendor-neutral header: host code builds with any C++ compiler.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/gpu/weight_blocks.h"

namespace kvgate::kernels::gpu {

// An owned device allocation (RAII); throws kvgate::Error (environment) when the device fails.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Grows (discarding the contents) when `bytes` exceeds the current size.
  void reserve(size_t bytes);
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  size_t size() const { return bytes_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  int32_t* ints() const { return static_cast<int32_t*>(ptr_); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for the device's queued work; throws on an asynchronous kernel failure.
void device_synchronize();

// A weight matrix on the device: `rows` rows of `cols` elements, each row `row_bytes` bytes of
// ggml blocks of `type` (cols a multiple of the block size), row-major as GGUF stores it.
struct DeviceWeight {
  const uint8_t* data = nullptr;
  WeightType type = WeightType::f32;
  int rows = 0;
  int cols = 0;
  size_t row_bytes = 0;
};

// out[i][:] = table[ids[i]][:] decoded to float; ids are checked on the host by the caller.
void gather_rows(const DeviceWeight& table, const int32_t* ids, int n, float* out);
// out[i] = x[i] / rms(x[i]) * weight, rms accumulated in double (as the CPU runtime does).
void rms_norm_rows(const float* x, int n, int dim, const float* weight, float eps, float* out);
// y[n][w.rows] = x[n][w.cols] . w^T. Up to kGemvMaxTokens rows of x (decode steps, small
// batches) go through a GEMV that streams each weight row once for all of them; more go through
// a tiled GEMM. Both sum each output over k in a fixed order.
inline constexpr int kGemvMaxTokens = 8;
void gemm_xwt(const float* x, int n, const DeviceWeight& w, float* y);

// True when this build multiplies prefill-sized batches on tensor cores: CUDA with cuBLASLt
// (KVGATE_HAVE_CUBLAS, when CMake finds it). HIP builds keep gemm_xwt (Debian has no hipBLAS).
bool have_tensor_core_gemm();
// y = x . w^T as gemm_xwt computes it, to about f32 precision, but more than kGemvMaxTokens rows
// go to cuBLASLt where the build has it: f16 tensor cores with f32 accumulation, each operand
// split into an f16 pair (hi + lo, gpu_blas.cu; w's F16 rows are their own hi, the other types
// decoded to tiles by weight_element, the very floats gemm_xwt multiplies): three products, so
// the exact path stays within the CPU runtime's bounds (plain f16 inputs moved a small random
// model's top-20 log-probs by up to 0.9 on an H200). A value beyond f16's range sends the
// matmul back to gemm_xwt. One algorithm per shape, chosen once and kept, a fixed workspace and
// no split-K reduction, so the same GPU, build and inputs give the same bits. Decode steps
// (n <= kGemvMaxTokens) keep the GEMV. Paths that must reproduce another engine's arithmetic
// (@engine=llama.cpp) call gemm_xwt, whose f32 products of the rounded inputs mirror the CPU's.
void gemm_xwt_fast(const float* x, int n, const DeviceWeight& w, float* y);
// x[n][w.cols] rounded in place as llama.cpp's CPU mul_mat converts its input before it meets
// weights of w's type (llama_cpp_dot_input: q8_1 blocks next to Q4_1/Q5_1, q8_0 next to
// Q4_0/Q5_0/Q8_0, q8_K next to the k-quants, f16/bf16 next to F16/BF16), with the very function
// the CPU runtime's round_input_like_llama_cpp runs (ggml_blocks.h round_dot_input): the GPU
// forward's matmul inputs under @engine=llama.cpp. One thread per block.
void round_input_like_llama_cpp(const DeviceWeight& w, float* x, int n);
// Rotates adjacent pairs (v[2p], v[2p+1]) of each head's first n_rot elements by
// (pos0 + token) * inv_freq[p]; angles in double, as the CPU runtime computes them.
void rope_pairs(float* x, int n, int heads, int head_dim, int n_rot, int64_t pos0, const float* inv_freq);
// gate[i] = silu(gate[i]) * up[i].
void silu_mul(float* gate, const float* up, size_t n);
// y[i] += x[i].
void add_into(float* y, const float* x, size_t n);

}  // namespace kvgate::kernels::gpu
