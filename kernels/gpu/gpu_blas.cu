// Prefill-sized matmuls on tensor cores through cuBLASLt (CUDA builds where CMake finds it;
// gpu_ops.h MatmulPath says what each path computes, split_columns.h the exact path's
// arithmetic). Nothing here waits for the device: a value the exact path cannot split raises the
// matmul flag, which the forward reads once after its logits. Not part of the HIP build (Debian
// ships no hipBLAS/hipBLASLt): HIP keeps gemm_xwt.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/gpu/gpu_timing.h"
#include "kernels/gpu/split_columns.h"
#include "kernels/gpu/vendor.h"
#include "kernels/gpu/weight_dispatch.h"
#include "kernels/gpu/weight_planes.h"

namespace kvgate::kernels::gpu {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_environment_error(std::string("cuBLASLt ") + what + ": status " + std::to_string(static_cast<int>(s)));
}
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw_environment_error(std::string("GPU cuda ") + what + ": " + cudaGetErrorString(err));
}

constexpr int kThreads = 256;
// A fixed workspace: cuBLASLt may pick another algorithm for another workspace size, and the
// algorithm decides the summation order.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Rows of a quantized weight dequantized to f16 per tile: 32 MiB of f16 at 4096 columns, so the
// scratch stays small next to the weights whatever the vocabulary.
constexpr int64_t kTileElements = int64_t{16} << 20;
// The exact path's f32 columns before the combine: pieces x tokens x rows. Past this the
// tokens go in chunks (only the all-logits head of a large vocabulary gets there).
constexpr size_t kColumnsBytes = size_t{1} << 30;

unsigned blocks_for(size_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

// One block per token: the token's scale (split_columns.h), then its f16 hi/lo columns. The
// pieces of token t go to columns t (hi) and n + t (lo) of B ([k][2n], column-major).
__global__ void split_f16_columns_kernel(const float* x, int n, int k, __half* b, float* inv_scale, int* flag) {
  __shared__ float partial[kThreads];
  __shared__ int bad;
  const int t = static_cast<int>(blockIdx.x);
  const float* row = x + static_cast<size_t>(t) * k;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  float amax = 0.0f;
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const float v = fabsf(row[j]);
    if (!isfinite(v)) bad = 1;  // a benign race: every writer writes 1
    amax = fmaxf(amax, v);
  }
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  if (bad) {
    if (threadIdx.x == 0) *flag = 1;
    return;  // the forward is redone in f32; these columns are never combined into a result
  }
  const int e = token_scale_exponent(partial[0]);
  const float s = pow2(e);
  if (threadIdx.x == 0) inv_scale[t] = pow2(-e);
  __half* hi = b + static_cast<size_t>(t) * k;
  __half* lo = b + static_cast<size_t>(n + t) * k;
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const F16Pair p = split_f16_pair(rn_mul(row[j], s));
    hi[j] = __ushort_as_half(p.hi);
    lo[j] = __ushort_as_half(p.lo);
  }
}

__global__ void split_bf16_columns_kernel(const float* x, int n, int k, __nv_bfloat16* b, int* flag) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(n) * k) return;
  const float v = x[e];
  if (!isfinite(v)) *flag = 1;
  const Bf16Triple p = split_bf16_triple(v);
  const size_t plane = static_cast<size_t>(n) * k;
  b[e] = __ushort_as_bfloat16(p.p0);
  b[plane + e] = __ushort_as_bfloat16(p.p1);
  b[2 * plane + e] = __ushort_as_bfloat16(p.p2);
}

// The engine path: x as the caller already rounded it, in the weights' 16-bit type.
template <typename H>
__global__ void to_16bit_kernel(const float* x, size_t n, H* b) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  if constexpr (std::is_same_v<H, __half>) b[e] = __ushort_as_half(f32_to_f16(x[e]));
  else b[e] = __ushort_as_bfloat16(f32_to_bf16(x[e]));
}

// y[t][r] (+)= the combined columns of c ([pieces * n][ldc] column-major: piece p of token t is
// column p * n + t). Tokens [t0, t0 + n) of y.
__global__ void combine_columns_kernel(const float* c, int pieces, int n, int rows, int ldc, const float* inv_scale,
                                       float* y, int accumulate) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(n) * rows) return;
  const int t = static_cast<int>(e / rows), r = static_cast<int>(e % rows);
  const float* col = c + static_cast<size_t>(t) * ldc + r;
  const size_t piece = static_cast<size_t>(n) * ldc;
  const float v = pieces == 2 ? combine_f16_pair(col[0], col[piece], inv_scale[t])
                              : combine_bf16_triple(col[0], col[piece], col[2 * piece]);
  float* out = y + e;
  *out = accumulate ? *out + v : v;
}

// Rows [r0, r0 + rows) of a quantized weight as f16 hi and lo tiles ([rows][k] row-major, the
// A operand [k][rows] column-major), each element plane_element's value: the very floats
// gemm_xwt multiplies.
template <WeightType T>
__global__ void weight_tile_kernel(DeviceWeight w, int r0, int rows, __half* hi, __half* lo, int* flag) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(rows) * w.cols) return;
  const size_t r = r0 + e / w.cols;
  const float v = plane_element(T, w.data + r * w.row_bytes, w.meta + r * w.meta_row_bytes,
                                static_cast<int64_t>(e % w.cols));
  if (!(fabsf(v) < 65504.0f)) *flag = 1;
  const F16Pair p = split_weight_f16(v);
  hi[e] = __ushort_as_half(p.hi);
  if (lo) lo[e] = __ushort_as_half(p.lo);
}

// One matmul shape's plan: descriptors and the algorithm chosen the first time, reused after.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: no algorithm fits without split-K; gemm_xwt serves the shape
};

class Blas {
 public:
  Blas() { check(cublasLtCreate(&handle_), "create"); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas() {
    for (auto& [shape, p] : plans_) {
      (void)cublasLtMatrixLayoutDestroy(p.a);
      (void)cublasLtMatrixLayoutDestroy(p.b);
      (void)cublasLtMatrixLayoutDestroy(p.c);
      (void)cublasLtMatmulDescDestroy(p.desc);
    }
    (void)cublasLtDestroy(handle_);
  }

  // C[m][n] (column-major, ld ldc, f32) = A^T B with A [k][m] and B [k][n] column-major of
  // `type` (f16 or bf16), i.e. y[n][rows] = x[n][cols] . w^T for m = rows, k = cols.
  const Plan& plan(cudaDataType_t type, int m, int n, int k, int ldc) {
    const auto key = std::make_tuple(static_cast<int>(type), m, n, k, ldc);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan p;
    check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
    const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), "transa");
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain), "transb");
    check(cublasLtMatrixLayoutCreate(&p.a, type, k, m, k), "layout A");
    check(cublasLtMatrixLayoutCreate(&p.b, type, k, n, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, m, n, ldc), "layout C");
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t workspace = kWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace),
          "workspace preference");
    // No split-K: its partial sums are reduced in an order (and, for some schemes, with atomics)
    // that would make the bits depend on more than the shape.
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction,
                                               sizeof no_reduction),
          "reduction preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      p.algo = result.algo;
      p.usable = true;
    }
    return plans_.emplace(key, p).first->second;
  }

  // c = a^T b + (accumulate ? c : 0), queued on the default stream.
  void run(const Plan& p, const void* a, const void* b, float* c, bool accumulate) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    workspace_.reserve(kWorkspaceBytes);
    check(cublasLtMatmul(handle_, p.desc, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &p.algo, workspace_.bytes(),
                         kWorkspaceBytes, 0),
          "matmul");
  }

  DeviceMemory& x_pieces() { return x_pieces_; }
  DeviceMemory& w_halves() { return w_halves_; }
  DeviceMemory& columns() { return columns_; }
  DeviceMemory& inv_scale() { return inv_scale_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  DeviceMemory workspace_, x_pieces_, w_halves_, columns_, inv_scale_;
  std::map<std::tuple<int, int, int, int, int>, Plan> plans_;
};

Blas& blas() {
  // Made on first use (a process without a GPU never creates a handle) and never destroyed:
  // static destructors run after the CUDA runtime's own teardown at exit.
  static Blas* b = new Blas();
  return *b;
}

void launched(const char* what) { check(cudaGetLastError(), what); }

// The engine path on f16/bf16 weights: one GEMM straight into y.
bool sixteen_bit_gemm(const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
  Blas& b = blas();
  const bool bf16 = w.type == WeightType::bf16;
  const Plan& p = b.plan(bf16 ? CUDA_R_16BF : CUDA_R_16F, w.rows, n, w.cols, w.rows);
  if (!p.usable) return false;
  const size_t elems = static_cast<size_t>(n) * w.cols;
  b.x_pieces().reserve(elems * 2);
  if (bf16)
    to_16bit_kernel<<<blocks_for(elems), kThreads>>>(x, elems, reinterpret_cast<__nv_bfloat16*>(b.x_pieces().bytes()));
  else
    to_16bit_kernel<<<blocks_for(elems), kThreads>>>(x, elems, reinterpret_cast<__half*>(b.x_pieces().bytes()));
  launched("16-bit input launch");
  b.run(p, w.data, b.x_pieces().bytes(), y, accumulate);
  return true;
}

// The exact path on f16/bf16 weights: x's pieces as extra columns of one GEMM per token chunk
// (one chunk unless the columns would pass kColumnsBytes), combined into y.
bool exact_gemm_16bit(const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
  Blas& b = blas();
  const bool bf16 = w.type == WeightType::bf16;
  const int pieces = bf16 ? 3 : 2, k = w.cols;
  const int chunk = static_cast<int>(
      std::clamp<size_t>(kColumnsBytes / (sizeof(float) * pieces * static_cast<size_t>(w.rows)), 1, static_cast<size_t>(n)));
  for (int t0 = 0; t0 < n; t0 += chunk)
    if (!b.plan(bf16 ? CUDA_R_16BF : CUDA_R_16F, w.rows, pieces * std::min(chunk, n - t0), k, w.rows).usable) return false;
  int* flag = matmul_flag_device();
  b.x_pieces().reserve(static_cast<size_t>(pieces) * chunk * k * 2);
  b.columns().reserve(static_cast<size_t>(pieces) * chunk * w.rows * sizeof(float));
  b.inv_scale().reserve(static_cast<size_t>(chunk) * sizeof(float));
  for (int t0 = 0; t0 < n; t0 += chunk) {
    const int m = std::min(chunk, n - t0);
    const float* xt = x + static_cast<size_t>(t0) * k;
    if (bf16) {
      split_bf16_columns_kernel<<<blocks_for(static_cast<size_t>(m) * k), kThreads>>>(
          xt, m, k, reinterpret_cast<__nv_bfloat16*>(b.x_pieces().bytes()), flag);
    } else {
      split_f16_columns_kernel<<<static_cast<unsigned>(m), kThreads>>>(
          xt, m, k, reinterpret_cast<__half*>(b.x_pieces().bytes()), b.inv_scale().floats(), flag);
    }
    launched("input split launch");
    b.run(b.plan(bf16 ? CUDA_R_16BF : CUDA_R_16F, w.rows, pieces * m, k, w.rows), w.data, b.x_pieces().bytes(),
          b.columns().floats(), false);
    combine_columns_kernel<<<blocks_for(static_cast<size_t>(m) * w.rows), kThreads>>>(
        b.columns().floats(), pieces, m, w.rows, w.rows, b.inv_scale().floats(), y + static_cast<size_t>(t0) * w.rows,
        accumulate ? 1 : 0);
    launched("combine launch");
  }
  return true;
}

// Quantized weights (either path): f16 hi/lo tiles of the dequantized rows; per tile
// W_hi [x_hi x_lo] into the columns, then W_lo x_hi added onto the lo columns; one combine.
bool exact_gemm_quantized(const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
  Blas& b = blas();
  const int k = w.cols;
  const int tile_rows = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(w.rows, kTileElements / k)));
  if (static_cast<size_t>(2) * n * w.rows * sizeof(float) > kColumnsBytes) return false;  // gemm_xwt serves it
  // Every tile's shape must have an algorithm, or the whole matmul stays on gemm_xwt: a matmul
  // is done one way or the other, never half and half.
  for (int r0 = 0; r0 < w.rows; r0 += tile_rows) {
    const int rows = std::min(tile_rows, w.rows - r0);
    if (!b.plan(CUDA_R_16F, rows, 2 * n, k, w.rows).usable || !b.plan(CUDA_R_16F, rows, n, k, w.rows).usable) return false;
  }
  int* flag = matmul_flag_device();
  b.x_pieces().reserve(static_cast<size_t>(2) * n * k * 2);
  b.columns().reserve(static_cast<size_t>(2) * n * w.rows * sizeof(float));
  b.inv_scale().reserve(static_cast<size_t>(n) * sizeof(float));
  b.w_halves().reserve(static_cast<size_t>(2) * tile_rows * k * 2);
  auto* xh = reinterpret_cast<__half*>(b.x_pieces().bytes());
  split_f16_columns_kernel<<<static_cast<unsigned>(n), kThreads>>>(x, n, k, xh, b.inv_scale().floats(), flag);
  launched("input split launch");
  auto* wh = reinterpret_cast<__half*>(b.w_halves().bytes());
  __half* wl = wh + static_cast<size_t>(tile_rows) * k;
  float* c = b.columns().floats();
  for (int r0 = 0; r0 < w.rows; r0 += tile_rows) {
    const int rows = std::min(tile_rows, w.rows - r0);
    with_weight_type(w.type, [&](auto type) {
      weight_tile_kernel<decltype(type)::value>
          <<<blocks_for(static_cast<size_t>(rows) * k), kThreads>>>(w, r0, rows, wh, wl, flag);
    });
    launched("f16 weight tile launch");
    // This tile's outputs are rows r0.. of each column (column-major, ld w.rows): c + r0.
    b.run(b.plan(CUDA_R_16F, rows, 2 * n, k, w.rows), wh, xh, c + r0, false);
    b.run(b.plan(CUDA_R_16F, rows, n, k, w.rows), wl, xh, c + static_cast<size_t>(n) * w.rows + r0, true);
  }
  combine_columns_kernel<<<blocks_for(static_cast<size_t>(n) * w.rows), kThreads>>>(
      c, 2, n, w.rows, w.rows, b.inv_scale().floats(), y, accumulate ? 1 : 0);
  launched("combine launch");
  return true;
}

}  // namespace

bool gemm_tensor_cores(MatmulPath path, const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
  if (n <= 0 || w.rows <= 0) return true;
  if (w.type == WeightType::f32) return false;  // no 16-bit weights to multiply: gemm_xwt
  const bool sixteen_bit = w.type == WeightType::f16 || w.type == WeightType::bf16;
  if (sixteen_bit) return path == MatmulPath::sixteen_bit ? sixteen_bit_gemm(x, n, w, y, accumulate) : exact_gemm_16bit(x, n, w, y, accumulate);
  return exact_gemm_quantized(x, n, w, y, accumulate);
}

double tensor_core_gemm_gflop_s(int rows, int cols, int n, int iterations) {
  // The peer rate: one plain f16 GEMM (f32 accumulation and output) at this shape, timed with
  // events on the default stream, as PyTorch's a @ w is (bench/gpu-peers.py).
  Blas& b = blas();
  const Plan& p = b.plan(CUDA_R_16F, rows, n, cols, rows);
  if (!p.usable) return 0.0;
  DeviceMemory a(static_cast<size_t>(rows) * cols * 2), x(static_cast<size_t>(n) * cols * 2),
      c(static_cast<size_t>(n) * rows * sizeof(float));
  check(cudaMemset(a.bytes(), 0x38, a.size()), "memset");  // 0x3838: f16 0.5274
  check(cudaMemset(x.bytes(), 0x34, x.size()), "memset");
  const double ms = time_ms(iterations, [&] { b.run(p, a.bytes(), x.bytes(), c.floats(), false); });
  return 2.0 * rows * cols * static_cast<double>(n) / (ms * 1e-3) / 1e9;
}

}  // namespace kvgate::kernels::gpu
