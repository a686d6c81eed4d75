// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
//
// Bit-exactness with the CPU reference rests on three things: the same scalar conversions
// (core/float_convert.h), the same operations in the same order (division where the CPU
// divides, 1/d then multiply where ggml does), and no contraction into FMA — the CPU kernels
// build with -ffp-contract=off, so every multiply-add here goes through __fmul_rn/__fadd_rn,
// which compilers never fuse (and kernels/gpu/CMakeLists.txt turns contraction off as well).
#include "kernels/gpu/gpu_kv.h"

#include <cfloat>
#include <climits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr int kGgmlBlock = 32;
constexpr int kThreads = 256;  // == kMaxKvHeadDim: one thread per element in attention

void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess)
    throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(gpuMalloc(&ptr, bytes ? bytes : 1), "malloc"); }
  ~DeviceBuffer() { (void)gpuFree(ptr); }  // nothing useful to do with a failure here
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__host__ __device__ size_t ggml_block_bytes(KvFormat f) {
  return f == KvFormat::q8_0 ? 34 : f == KvFormat::q4_0 ? 18 : 20;
}
__host__ __device__ bool is_ggml(KvFormat f) {
  return f == KvFormat::q8_0 || f == KvFormat::q4_0 || f == KvFormat::q4_1;
}
__host__ __device__ size_t row_bytes(KvFormat f, int head_dim) {
  if (is_ggml(f)) return static_cast<size_t>(head_dim / kGgmlBlock) * ggml_block_bytes(f);
  if (f == KvFormat::fp8_e4m3) return static_cast<size_t>(head_dim);
  return 4 + static_cast<size_t>(head_dim);  // f32 scale + one byte per element
}

// Rows are unaligned, so multi-byte fields go byte by byte, little-endian as on the CPU.
__device__ __forceinline__ void store_f32(uint8_t* p, float v) {
  const uint32_t u = f32_bits(v);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(u >> (8 * k));
}
__device__ __forceinline__ float load_f32(const uint8_t* p) {
  return f32_from_bits(p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24));
}
__device__ __forceinline__ void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// What static_cast<int8_t>(float) gives in the x86-64 build of the CPU reference: cvttss2si to
// 32 bits (NaN and out-of-range give INT_MIN), then the low byte. The GPU's own conversion
// saturates instead, which would differ for NaN inputs.
__device__ __forceinline__ int x86_trunc_to_int8(float v) {
  const int wide = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int>(v) : INT_MIN;
  return static_cast<int8_t>(static_cast<uint8_t>(wide & 0xff));
}

// std::nearbyint then clamp in the float domain, so NaN lands on `lo` (formats_pth.cc).
__device__ __forceinline__ int round_clamp(float v, int lo, int hi) {
  const float r = rintf(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// std::max(a, b) semantics ((a < b) ? b : a): a NaN candidate never replaces the running max,
// which makes the result order-independent and so safe for a tree reduction.
__device__ __forceinline__ float max_ignoring_nan(float a, float b) { return a < b ? b : a; }

__device__ float block_abs_max(const float* x, int n, float* shared) {
  float amax = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) amax = max_ignoring_nan(amax, fabsf(x[i]));
  shared[threadIdx.x] = amax;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = max_ignoring_nan(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
}

// ---- ggml blocks, operation for operation as kernels/formats_ggml.cc ----

__device__ void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  for (int j = 0; j < kGgmlBlock; ++j) b[2 + j] = static_cast<uint8_t>(x86_trunc_to_int8(roundf(__fmul_rn(x[j], id))));
}

__device__ float signed_abs_max(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

__device__ void quantize_q4_0(const float* x, uint8_t* b) {
  const float d = __fdiv_rn(signed_abs_max(x), -8.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const int xi0 = min(15, x86_trunc_to_int8(__fadd_rn(__fmul_rn(x[j], id), 8.5f)));
    const int xi1 = min(15, x86_trunc_to_int8(__fadd_rn(__fmul_rn(x[16 + j], id), 8.5f)));
    b[2 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
  }
}

__device__ void quantize_q4_1(const float* x, uint8_t* b) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < kGgmlBlock; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = __fdiv_rn(__fsub_rn(hi, lo), 15.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  store_u16(b + 2, f32_to_f16(lo));
  for (int j = 0; j < 16; ++j) {
    const int xi0 = min(15, x86_trunc_to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f)));
    const int xi1 = min(15, x86_trunc_to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[16 + j], lo), id), 0.5f)));
    b[4 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
  }
}

// One thread block per row. Per-token-head formats reduce the row's absmax across the block;
// ggml formats give each 32-element block to one thread (ggml's own scan is sequential and
// order-dependent — "first element of largest magnitude" — so it is not split further).
__global__ void quantize_rows_kernel(KvFormat f, int head_dim, float scale, const float* x, uint8_t* out) {
  __shared__ float shared[kThreads];
  const float* row = x + static_cast<size_t>(blockIdx.x) * head_dim;
  uint8_t* dst = out + static_cast<size_t>(blockIdx.x) * row_bytes(f, head_dim);
  switch (f) {
    case KvFormat::int8_pth:
    case KvFormat::fp8_pth: {
      const bool int8 = f == KvFormat::int8_pth;
      const float row_scale = __fdiv_rn(block_abs_max(row, head_dim, shared), int8 ? 127.0f : 448.0f);
      if (threadIdx.x == 0) store_f32(dst, row_scale);
      for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        if (row_scale == 0.0f) dst[4 + i] = 0;
        else if (int8) dst[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(round_clamp(__fdiv_rn(row[i], row_scale), -127, 127)));
        else dst[4 + i] = f32_to_fp8(__fdiv_rn(row[i], row_scale), Fp8Kind::e4m3fn);
      }
      break;
    }
    case KvFormat::fp8_e4m3:
      for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = f32_to_fp8(__fdiv_rn(row[i], scale), Fp8Kind::e4m3fn);
      break;
    case KvFormat::q8_0:
    case KvFormat::q4_0:
    case KvFormat::q4_1:
      for (int blk = threadIdx.x; blk < head_dim / kGgmlBlock; blk += blockDim.x) {
        const float* bx = row + blk * kGgmlBlock;
        uint8_t* bd = dst + blk * ggml_block_bytes(f);
        if (f == KvFormat::q8_0) quantize_q8_0(bx, bd);
        else if (f == KvFormat::q4_0) quantize_q4_0(bx, bd);
        else quantize_q4_1(bx, bd);
      }
      break;
  }
}

// Element i of a row, as the CPU decode_row_ref computes it.
__device__ __forceinline__ float dequantize_element(KvFormat f, const uint8_t* row, int i, float scale) {
  switch (f) {
    case KvFormat::int8_pth:
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(row[4 + i])), load_f32(row));
    case KvFormat::fp8_pth:
      return __fmul_rn(fp8_to_f32(row[4 + i], Fp8Kind::e4m3fn), load_f32(row));
    case KvFormat::fp8_e4m3:
      return __fmul_rn(fp8_to_f32(row[i], Fp8Kind::e4m3fn), scale);
    default: break;
  }
  const uint8_t* b = row + (i / kGgmlBlock) * ggml_block_bytes(f);
  const int j = i % kGgmlBlock;
  const float d = f16_to_f32(load_u16(b));
  if (f == KvFormat::q8_0) return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
  const int hdr = f == KvFormat::q4_0 ? 2 : 4;
  const int q = j < 16 ? (b[hdr + j] & 0x0f) : (b[hdr + j - 16] >> 4);
  if (f == KvFormat::q4_0) return __fmul_rn(static_cast<float>(q - 8), d);
  return __fadd_rn(__fmul_rn(static_cast<float>(q), d), f16_to_f32(load_u16(b + 2)));
}

__global__ void dequantize_rows_kernel(KvFormat f, int head_dim, float scale, const uint8_t* in, float* y) {
  const uint8_t* row = in + static_cast<size_t>(blockIdx.x) * row_bytes(f, head_dim);
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
    y[static_cast<size_t>(blockIdx.x) * head_dim + i] = dequantize_element(f, row, i, scale);
}

// Split-sequence decode attention (flash-decoding): block (chunk c, query head h) runs an online
// softmax over its chunk's tokens and leaves (max, sum of exp, unnormalized output) for the
// merge kernel. Thread i owns output element i; the q.k dot is a fixed-order tree reduction,
// so results are deterministic run to run.
__global__ void attention_chunk_kernel(DecodeAttentionArgs a, const uint8_t* keys, const uint8_t* values,
                                       const float* q, float* partial_max, float* partial_sum, float* partial_acc) {
  __shared__ float shared[kThreads];
  const int chunk = blockIdx.x, head = blockIdx.y, i = threadIdx.x;
  const int n_chunks = gridDim.x;
  const bool owns = i < a.head_dim;
  const float qi = owns ? q[static_cast<size_t>(head) * a.head_dim + i] : 0.0f;
  const size_t key_bytes = row_bytes(a.key_format, a.head_dim), value_bytes = row_bytes(a.value_format, a.head_dim);
  const int begin = chunk * a.chunk_tokens;
  const int end = min(a.n_tokens, begin + a.chunk_tokens);
  float running_max = -INFINITY, running_sum = 0.0f, acc = 0.0f;
  for (int t = begin; t < end; ++t) {
    shared[i] = owns ? qi * dequantize_element(a.key_format, keys + t * key_bytes, i, a.key_scale) : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (i < stride) shared[i] += shared[i + stride];
      __syncthreads();
    }
    const float score = shared[0] * a.softmax_scale;
    __syncthreads();  // shared[0] is overwritten by the next token
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);  // exp(-inf) = 0 on the first token
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    if (owns) acc = acc * correction + p * dequantize_element(a.value_format, values + t * value_bytes, i, a.value_scale);
    running_max = new_max;
  }
  const size_t slot = static_cast<size_t>(head) * n_chunks + chunk;
  if (i == 0) {
    partial_max[slot] = running_max;
    partial_sum[slot] = running_sum;
  }
  if (owns) partial_acc[slot * a.head_dim + i] = acc;
}

__global__ void attention_merge_kernel(int head_dim, int n_chunks, const float* partial_max, const float* partial_sum,
                                       const float* partial_acc, float* out) {
  const int head = blockIdx.x, i = threadIdx.x;
  if (i >= head_dim) return;
  const size_t base = static_cast<size_t>(head) * n_chunks;
  float global_max = -INFINITY;
  for (int c = 0; c < n_chunks; ++c) global_max = fmaxf(global_max, partial_max[base + c]);
  float sum = 0.0f, acc = 0.0f;
  for (int c = 0; c < n_chunks; ++c) {
    const float w = expf(partial_max[base + c] - global_max);
    sum += partial_sum[base + c] * w;
    acc += partial_acc[(base + c) * head_dim + i] * w;
  }
  out[static_cast<size_t>(head) * head_dim + i] = acc / sum;
}

void require_scale(KvFormat f, float scale) {
  if (f == KvFormat::fp8_e4m3 && !(scale > 0.0f && scale < FLT_MAX))
    throw_usage_error("GPU KV format fp8_e4m3: scale must be a positive finite number, got " + std::to_string(scale));
}

}  // namespace

const char* kv_format_name(KvFormat format) {
  switch (format) {
    case KvFormat::int8_pth: return "int8_pth";
    case KvFormat::fp8_pth: return "fp8_pth";
    case KvFormat::q8_0: return "q8_0";
    case KvFormat::q4_0: return "q4_0";
    case KvFormat::q4_1: return "q4_1";
    case KvFormat::fp8_e4m3: return "fp8_e4m3";
  }
  throw_usage_error("GPU KV format: unknown enumerator " + std::to_string(static_cast<int>(format)));
}

size_t kv_row_bytes(KvFormat format, int head_dim) {
  if (head_dim < 1 || head_dim > kMaxKvHeadDim)
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(format) + ": head_dim must be in 1.." +
                      std::to_string(kMaxKvHeadDim) + ", got " + std::to_string(head_dim));
  if (is_ggml(format) && head_dim % kGgmlBlock != 0)
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(format) + ": head_dim must be a multiple of 32, got " +
                      std::to_string(head_dim));
  return row_bytes(format, head_dim);
}

void quantize_rows(KvFormat format, int head_dim, float scale, const float* x, size_t n_rows, uint8_t* out) {
  const size_t bytes = kv_row_bytes(format, head_dim);
  require_scale(format, scale);
  if (n_rows == 0) return;
  if (n_rows > 0x7fffffffu) throw_usage_error("GPU quantize_rows: at most 2^31-1 rows per call, got " + std::to_string(n_rows));
  DeviceBuffer dx(n_rows * head_dim * sizeof(float)), dout(n_rows * bytes);
  check(gpuMemcpy(dx.ptr, x, n_rows * head_dim * sizeof(float), gpuMemcpyHostToDevice), "upload");
  quantize_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads>>>(format, head_dim, scale,
                                                                      static_cast<const float*>(dx.ptr),
                                                                      static_cast<uint8_t*>(dout.ptr));
  check(gpuGetLastError(), "quantize launch");
  check(gpuMemcpy(out, dout.ptr, n_rows * bytes, gpuMemcpyDeviceToHost), "download");
}

void dequantize_rows(KvFormat format, int head_dim, float scale, const uint8_t* in, size_t n_rows, float* y) {
  const size_t bytes = kv_row_bytes(format, head_dim);
  require_scale(format, scale);
  if (n_rows == 0) return;
  if (n_rows > 0x7fffffffu) throw_usage_error("GPU dequantize_rows: at most 2^31-1 rows per call, got " + std::to_string(n_rows));
  DeviceBuffer din(n_rows * bytes), dy(n_rows * head_dim * sizeof(float));
  check(gpuMemcpy(din.ptr, in, n_rows * bytes, gpuMemcpyHostToDevice), "upload");
  dequantize_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads>>>(format, head_dim, scale,
                                                                        static_cast<const uint8_t*>(din.ptr),
                                                                        static_cast<float*>(dy.ptr));
  check(gpuGetLastError(), "dequantize launch");
  check(gpuMemcpy(y, dy.ptr, n_rows * head_dim * sizeof(float), gpuMemcpyDeviceToHost), "download");
}

void decode_attention(const DecodeAttentionArgs& args, const uint8_t* keys, const uint8_t* values, const float* q,
                      float* out) {
  const size_t key_bytes = kv_row_bytes(args.key_format, args.head_dim);
  const size_t value_bytes = kv_row_bytes(args.value_format, args.head_dim);
  require_scale(args.key_format, args.key_scale);
  require_scale(args.value_format, args.value_scale);
  if (args.n_tokens < 1) throw_usage_error("GPU decode_attention: n_tokens must be >= 1, got " + std::to_string(args.n_tokens));
  if (args.n_query_heads < 1 || args.n_query_heads > 65535)
    throw_usage_error("GPU decode_attention: n_query_heads must be in 1..65535, got " + std::to_string(args.n_query_heads));
  if (args.chunk_tokens < 1)
    throw_usage_error("GPU decode_attention: chunk_tokens must be >= 1, got " + std::to_string(args.chunk_tokens));
  const int n_chunks = (args.n_tokens + args.chunk_tokens - 1) / args.chunk_tokens;
  const size_t n_tokens = static_cast<size_t>(args.n_tokens), heads = static_cast<size_t>(args.n_query_heads);
  const size_t slots = heads * n_chunks;
  DeviceBuffer dk(n_tokens * key_bytes), dv(n_tokens * value_bytes), dq(heads * args.head_dim * sizeof(float));
  DeviceBuffer dmax(slots * sizeof(float)), dsum(slots * sizeof(float)), dacc(slots * args.head_dim * sizeof(float));
  DeviceBuffer dout(heads * args.head_dim * sizeof(float));
  check(gpuMemcpy(dk.ptr, keys, n_tokens * key_bytes, gpuMemcpyHostToDevice), "upload keys");
  check(gpuMemcpy(dv.ptr, values, n_tokens * value_bytes, gpuMemcpyHostToDevice), "upload values");
  check(gpuMemcpy(dq.ptr, q, heads * args.head_dim * sizeof(float), gpuMemcpyHostToDevice), "upload queries");
  attention_chunk_kernel<<<dim3(n_chunks, args.n_query_heads), kThreads>>>(
      args, static_cast<const uint8_t*>(dk.ptr), static_cast<const uint8_t*>(dv.ptr), static_cast<const float*>(dq.ptr),
      static_cast<float*>(dmax.ptr), static_cast<float*>(dsum.ptr), static_cast<float*>(dacc.ptr));
  check(gpuGetLastError(), "attention launch");
  attention_merge_kernel<<<args.n_query_heads, kThreads>>>(args.head_dim, n_chunks, static_cast<const float*>(dmax.ptr),
                                                           static_cast<const float*>(dsum.ptr),
                                                           static_cast<const float*>(dacc.ptr), static_cast<float*>(dout.ptr));
  check(gpuGetLastError(), "attention merge launch");
  check(gpuMemcpy(out, dout.ptr, heads * args.head_dim * sizeof(float), gpuMemcpyDeviceToHost), "download");
}

}  // namespace kvgate::kernels::gpu
