#pragma once
// Device memory and the dense kernels a decoder forward pass needs besides attention (gather,
// RMSNorm, GEMM against a weight in its stored GGUF type, RoPE, SwiGLU, residual add).
// Activations are float32; weights stay in their GGUF type, repacked into 16-byte planes
// (weight_planes.h) and decoded as they are loaded. Fixed reduction orders, so a forward pass is deterministic run to run. Pointers are device
// pointers; launches go to the default stream and are ordered with each other and with
// DevicePagedKv's. Vendor-neutral header: host code builds with any C++ compiler.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/gpu/weight_blocks.h"

namespace kvgate::kernels::gpu {

class PinnedHost;

// An owned device allocation (RAII); throws kvgate::Error (environment) when the device fails.
// Allocated and freed in stream order (cudaMallocAsync/FreeAsync), so growing a buffer inside a
// forward does not wait for the device.
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
  // Blocking copies (they wait for the device; host_waits counts them).
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  // The first `bytes` of pinned host memory, queued after the work before it; returns at once.
  void upload_async(const PinnedHost& host, size_t bytes);
  size_t size() const { return bytes_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  int32_t* ints() const { return static_cast<int32_t*>(ptr_); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, the source of upload_async. Growing it waits for the device (freeing
// pinned memory does), so owners size it before their first forward.
class PinnedHost {
 public:
  PinnedHost() = default;
  ~PinnedHost();
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  void reserve(size_t bytes);
  size_t size() const { return bytes_; }
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for the device's queued work; throws on an asynchronous kernel failure.
void device_synchronize();

// How many times this process's kvgate GPU calls have waited for the device so far (blocking
// copies, device_synchronize, regrowing pinned memory): a forward pass should add exactly one,
// the download of its logits (tests/gpu checks it on a device; tests/runtime's recording stub
// checks the forward's calls without one).
uint64_t host_waits();

// A weight matrix on the device: `rows` rows of `cols` elements of `type` (cols a multiple of
// its block size) in the planes of weight_planes.h: `data` the quant plane (row_bytes per row;
// for the float types the GGUF rows as they are), `meta` the meta plane (meta_row_bytes per row;
// none for the float types). upload_weight makes them from GGUF rows once.
struct DeviceWeight {
  const uint8_t* data = nullptr;
  const uint8_t* meta = nullptr;
  WeightType type = WeightType::f32;
  int rows = 0;
  int cols = 0;
  size_t row_bytes = 0;
  size_t meta_row_bytes = 0;
};

// Device memory holding a weight's planes, and its view. rows x cols GGUF rows of `type`,
// row_bytes apart, repacked on the host and uploaded (blocking: upload time, not forward time).
struct UploadedWeight {
  DeviceMemory memory;
  DeviceWeight view;  // points into memory
};
UploadedWeight upload_weight(WeightType type, const uint8_t* rows_data, int rows, int cols, size_t row_bytes);

// out[i][:] = table[ids[i]][:] decoded to float; ids are checked on the host by the caller.
void gather_rows(const DeviceWeight& table, const int32_t* ids, int n, float* out);
// out[i] = x[i] / rms(x[i]) * weight, rms accumulated in double (as the CPU runtime does).
void rms_norm_rows(const float* x, int n, int dim, const float* weight, float eps, float* out);
// y[n][w.rows] = x[n][w.cols] . w^T (y += that when accumulate: the residual adds ride on the
// matmul). f32 products of the weights' exact values and x. Up to kGemvMaxTokens rows of x
// (decode steps, small batches) go through a GEMV that streams each weight row once for all of
// them (gpu_gemv.cu, on the weight planes with 128-bit loads), more through a tiled GEMM. Both
// sum each output in a fixed order, so a forward pass is the same every run.
inline constexpr int kGemvMaxTokens = 8;
void gemm_xwt(const float* x, int n, const DeviceWeight& w, float* y, bool accumulate = false);
// gpu_gemv.cu: the planes GEMV of gemm_xwt, y[i] = x . w[i]^T for `count` (1..3) weights of one
// type and width in one launch; false (nothing launched) when the shapes or x's alignment do not
// suit it.
bool gemv_planes(const float* x, int n, int count, const DeviceWeight* const* w, float* const* y, bool accumulate);

// True when this build multiplies prefill-sized batches on tensor cores: CUDA with cuBLASLt
// (KVGATE_HAVE_CUBLAS, when CMake finds it). Other builds run every matmul on gemm_xwt.
bool have_tensor_core_gemm();

// How a prefill-sized matmul (more than kGemvMaxTokens rows of x) forms its products; decode-sized
// ones always take gemm_xwt's GEMV, whose f32 products every path agrees with.
enum class MatmulPath : uint8_t {
  // gemm_xwt: f32 products, the tiled GEMM (@engine=llama.cpp, whose inputs the forward rounds
  // as ggml-cpu does; and builds without cuBLASLt).
  f32,
  // Tensor cores to about f32 precision (gpu_blas.cu): x split into 16-bit pieces that ride as
  // extra columns of ONE GEMM per matmul (f16 weights: hi and lo of x scaled per token by a
  // power of two, N = 2 x tokens; bf16 weights: three bf16 pieces, N = 3 x tokens), combined
  // after; quantized weights are dequantized to f16 hi/lo tiles, W_hi [x_hi x_lo] + W_lo x_hi
  // (two GEMMs per tile). A non-finite x or weight raises the matmul flag instead of being
  // rounded; the forward checks it once and redoes the pass on f32.
  exact,
  // One GEMM on the 16-bit weights and x as the caller rounded it to f16/bf16 (the forward does
  // under @engine=llama.cpp-cuda and vllm-fa3): what llama.cpp's cuBLAS path and vLLM compute.
  // Quantized weights take the exact path (llama.cpp CUDA's MMQ arithmetic is not reproduced).
  sixteen_bit,
};
// One algorithm per shape, chosen once and kept, a fixed workspace and no split-K reduction, so
// the same GPU, build and inputs give the same bits. Nothing here waits for the device.
void matmul(MatmulPath path, const float* x, int n, const DeviceWeight& w, float* y, bool accumulate = false);

// The rate of one plain f16 GEMM (f32 accumulation and output) at y[n][rows] = x[n][cols] . w^T
// on this device, in GFLOP/s over `iterations` back-to-back calls: the peer `kvgate bench model`
// divides prefill by (what PyTorch's a @ w runs). 0 without cuBLASLt.
double tensor_core_gemm_gflop_s(int rows, int cols, int n, int iterations);
// Bytes a read-only kernel reads per second (GB/s) over a `bytes` buffer: the bound of every
// bandwidth ratio kvgate's GPU tables print (one convention: bytes read, not a copy's read + write).
double device_read_gbps(size_t bytes, int iterations);

// y[i] = x . w[i]^T for `count` weights that share an input (Q, K and V; gate and up): one GEMV
// launch for decode-sized batches when they have one type and width, else one matmul each.
void matmul_many(MatmulPath path, const float* x, int n, int count, const DeviceWeight* const* w, float* const* y);

// The exact path's flag: reset it before a forward (queued), fetch it after the forward's last
// matmul (queued copy to pinned host memory), read it after the next blocking call.
void matmul_flag_reset();
void matmul_flag_fetch();
bool matmul_flag_raised();
int* matmul_flag_device();  // for gpu_blas.cu's kernels

// x[n][w.cols] rounded in place to `t` (weight_blocks.h arithmetic_dot_input: what the config's
// engine rounds a matmul input to next to w's type) with the very function the CPU runtime's
// round_matmul_input runs (ggml_blocks.h round_dot_input): q8_1/q8_0/q8_K blocks as
// ggml-cpu converts them under @engine=llama.cpp, f16/bf16 under the CUDA engines. One thread per
// rounding unit; nothing for f32.
void round_matmul_input(ggml::DotInput t, const DeviceWeight& w, float* x, int n);
// Rotates adjacent pairs (v[2p], v[2p+1]) of each head's first n_rot elements by
// (pos0 + token) * inv_freq[p]; angles in double, as the CPU runtime computes them.
// q: [n][heads_q][head_dim] and k: [n][heads_k][head_dim], in one launch.
void rope_pairs(float* q, int heads_q, float* k, int heads_k, int n, int head_dim, int n_rot, int64_t pos0,
                const float* inv_freq);
// gate[i] = silu(gate[i]) * up[i].
void silu_mul(float* gate, const float* up, size_t n);
// y[i] += x[i].
void add_into(float* y, const float* x, size_t n);

}  // namespace kvgate::kernels::gpu
