// Prefill-sized matmuls on tensor cores through cuBLASLt (CUDA builds where CMake finds it;
// gpu_ops.h gemm_xwt_fast says what it computes), f32 operands as f16 pairs. Not part of the HIP build: Debian ships no
// hipBLAS, and the HIP forward keeps gemm_xwt.
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/gpu/vendor.h"
#include "kernels/gpu/weight_dispatch.h"

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
// Rows of a quantized weight decoded to f16 per GEMM: 32 MiB of f16 at 4096 columns, so the
// scratch stays small next to the weights whatever the vocabulary.
constexpr int64_t kTileElements = int64_t{16} << 20;

unsigned blocks_for(size_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

// f16 operands carry 11 bits of a float, so each operand goes as a pair: hi = f16(v) and
// lo = f16((v - hi) * 2^11), and x . w = hi.hi + 2^-11 (hi.lo + lo.hi) to about 2^-22 relative,
// near the f32 products gemm_xwt and the CPU runtime compute (the lo.lo term is below that).
// Scaling lo by 2^11 keeps it out of f16's subnormals; the GEMM's alpha takes the 2^-11 back,
// exactly. A value f16 cannot hold (|v| >= 65504, or not finite) raises *overflow, and the
// matmul is redone on gemm_xwt: rounding it to inf would be an error the f32 path does not make.
constexpr float kLoScale = 2048.0f;
constexpr float kF16Max = 65504.0f;

__device__ void split_f16(float v, __half* hi, __half* lo, int* overflow) {
  if (!(fabsf(v) < kF16Max)) {
    *overflow = 1;
    v = 0.0f;
  }
  const __half h = __float2half_rn(v);
  *hi = h;
  *lo = __float2half_rn((v - __half2float(h)) * kLoScale);
}

__global__ void split_f16_kernel(const float* x, size_t n, __half* hi, __half* lo, int* overflow) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) split_f16(x[i], hi + i, lo + i, overflow);
}

// Rows [r0, r0 + rows) of w decoded as gemm_xwt decodes them, split as above.
template <WeightType T>
__global__ void weight_rows_split_kernel(const uint8_t* w, size_t row_bytes, int cols, int r0, int rows, __half* hi,
                                         __half* lo, int* overflow) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(rows) * cols) return;
  const size_t r = e / cols, k = e % cols;
  split_f16(weight_element(T, w + (r0 + r) * row_bytes, static_cast<int64_t>(k)), hi + e, lo + e, overflow);
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
  Blas() {
    check(cublasLtCreate(&handle_), "create");
    workspace_.reserve(kWorkspaceBytes);
  }
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

  // Y[m][n] (column-major, ld ldc) = A^T B with A [k][m] and B [k][n] column-major f16, i.e.
  // y[n][rows] = x[n][cols] . w^T for m = rows of this tile, k = cols.
  const Plan& plan(int m, int n, int k, int ldc) {
    const auto key = std::make_tuple(m, n, k, ldc);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan p;
    check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
    const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), "transa");
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain), "transb");
    check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, k, m, k), "layout A");
    check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, k, n, k), "layout B");
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

  // c = alpha a^T b + (accumulate ? c : 0).
  void run(const Plan& p, float alpha, const __half* a, const __half* b, float* c, bool accumulate) {
    const float beta = accumulate ? 1.0f : 0.0f;
    check(cublasLtMatmul(handle_, p.desc, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &p.algo, workspace_.bytes(),
                         kWorkspaceBytes, 0),
          "matmul");
  }

  DeviceMemory& x_halves() { return x_halves_; }
  DeviceMemory& w_halves() { return w_halves_; }
  DeviceMemory& overflow() { return overflow_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  DeviceMemory workspace_, x_halves_, w_halves_, overflow_;
  std::map<std::tuple<int, int, int, int>, Plan> plans_;
};

Blas& blas() {
  // Made on first use (a process without a GPU never creates a handle) and never destroyed:
  // static destructors run after the CUDA runtime's own teardown at exit.
  static Blas* b = new Blas();
  return *b;
}

}  // namespace

bool gemm_xwt_cublaslt(const float* x, int n, const DeviceWeight& w, float* y) {
  if (n <= 0 || w.rows <= 0) return true;
  Blas& b = blas();
  const int k = w.cols;
  const int tile_rows = w.type == WeightType::f16
                            ? w.rows
                            : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(w.rows, kTileElements / k)));
  // Every tile's shape must have an algorithm, or the whole matmul stays on gemm_xwt: a matmul
  // is done one way or the other, never half and half.
  for (int r0 = 0; r0 < w.rows; r0 += tile_rows)
    if (!b.plan(std::min(tile_rows, w.rows - r0), n, k, w.rows).usable) return false;

  const size_t x_elems = static_cast<size_t>(n) * k;
  b.x_halves().reserve(2 * x_elems * sizeof(__half));
  auto* xh = reinterpret_cast<__half*>(b.x_halves().bytes());
  __half* xl = xh + x_elems;
  b.overflow().reserve(sizeof(int));
  int* overflow = b.overflow().ints();
  check(cudaMemsetAsync(overflow, 0, sizeof(int)), "overflow flag reset");
  split_f16_kernel<<<blocks_for(x_elems), kThreads>>>(x, x_elems, xh, xl, overflow);
  check(cudaGetLastError(), "f16 input launch");
  constexpr float kLo = 1.0f / kLoScale;
  if (w.type == WeightType::f16) {
    // Stored rows of f16 are the A operand as they are ([k][rows] column-major), exact: no lo.
    const Plan& p = b.plan(w.rows, n, k, w.rows);
    const auto* wh = reinterpret_cast<const __half*>(w.data);
    b.run(p, 1.0f, wh, xh, y, false);
    b.run(p, kLo, wh, xl, y, true);
  } else {
    b.w_halves().reserve(2 * static_cast<size_t>(tile_rows) * k * sizeof(__half));
    auto* wh = reinterpret_cast<__half*>(b.w_halves().bytes());
    __half* wl = wh + static_cast<size_t>(tile_rows) * k;
    for (int r0 = 0; r0 < w.rows; r0 += tile_rows) {
      const int rows = std::min(tile_rows, w.rows - r0);
      const size_t elems = static_cast<size_t>(rows) * k;
      with_weight_type(w.type, [&](auto type) {
        weight_rows_split_kernel<decltype(type)::value>
            <<<blocks_for(elems), kThreads>>>(w.data, w.row_bytes, k, r0, rows, wh, wl, overflow);
      });
      check(cudaGetLastError(), "f16 weight tile launch");
      // This tile's outputs are rows r0.. of Y (column-major, ld w.rows): y + r0.
      const Plan& p = b.plan(rows, n, k, w.rows);
      b.run(p, 1.0f, wh, xh, y + r0, false);
      b.run(p, kLo, wh, xl, y + r0, true);
      b.run(p, kLo, wl, xh, y + r0, true);
    }
  }
  int overflowed = 0;
  b.overflow().download(&overflowed, sizeof overflowed);
  return overflowed == 0;  // false: the caller's gemm_xwt overwrites all of y
}

}  // namespace kvgate::kernels::gpu
