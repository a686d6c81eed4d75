// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h and gpu_ops.h.
#include "kernels/gpu/gpu_ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/gpu/gpu_timing.h"
#include "kernels/gpu/vendor.h"
#include "kernels/gpu/weight_dispatch.h"
#include "kernels/gpu/weight_planes.h"

namespace kvgate::kernels::gpu {
namespace {

void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess)
    throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
}

unsigned blocks_for(size_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

template <WeightType T>
__global__ void gather_rows_kernel(DeviceWeight table, const int32_t* ids, int n, float* out) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(n) * table.cols) return;
  const size_t i = e / table.cols, j = e % table.cols;
  const size_t id = static_cast<size_t>(ids[i]);
  out[e] = plane_element(T, table.data + id * table.row_bytes, table.meta + id * table.meta_row_bytes,
                         static_cast<int64_t>(j));
}

constexpr int kNormThreads = 256;

__global__ void rms_norm_kernel(const float* x, int dim, const float* weight, float eps, float* out) {
  __shared__ double partial[kNormThreads];
  const float* row = x + static_cast<size_t>(blockIdx.x) * dim;
  double ss = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) ss += static_cast<double>(row[j]) * row[j];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float scale = static_cast<float>(1.0 / sqrt(partial[0] / dim + eps));
  float* o = out + static_cast<size_t>(blockIdx.x) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) o[j] = row[j] * scale * weight[j];
}

// 64 x 64 output tile per block, 16-deep k slices through shared memory, 4 x 4 outputs per
// thread. Each output sums over k in order, so the result does not depend on the launch.
constexpr int kTile = 64, kDepth = 16, kGemmThreads = 256;

template <WeightType T>
__global__ void __launch_bounds__(kGemmThreads)
    gemm_xwt_kernel(const float* x, int n, DeviceWeight w, float* y, int accumulate) {
  const int rows = w.rows, cols = w.cols;
  __shared__ float xs[kDepth][kTile + 1];
  __shared__ float ws[kDepth][kTile + 1];
  const int m0 = blockIdx.y * kTile, r0 = blockIdx.x * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < cols; k0 += kDepth) {
    for (int e = threadIdx.x; e < kTile * kDepth; e += kGemmThreads) {
      const int row = e / kDepth, k = e % kDepth;
      const int m = m0 + row, r = r0 + row, kk = k0 + k;
      xs[k][row] = (m < n && kk < cols) ? x[static_cast<size_t>(m) * cols + kk] : 0.0f;
      ws[k][row] = (r < rows && kk < cols) ? plane_element(T, w.data + static_cast<size_t>(r) * w.row_bytes,
                                                           w.meta + static_cast<size_t>(r) * w.meta_row_bytes, kk)
                                           : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[k][ty * 4 + i];
        b[i] = ws[k][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= n) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = r0 + tx * 4 + j;
      if (r < rows) {
        float* out = y + static_cast<size_t>(m) * rows + r;
        *out = accumulate ? *out + acc[i][j] : acc[i][j];
      }
    }
  }
}

// The GEMV for what gemv_planes (gpu_gemv.cu) does not take: float rows that are not whole
// 16-byte units, or an x that is not 16-byte aligned. One 32-lane warp per weight row, lane l
// taking the 8-element chunks l, l + 32, ... of the row; each element decoded once and multiplied
// into every token's accumulator; a fixed butterfly then sums the lanes.
constexpr int kGemvWarps = 8, kGemvChunk = 8;

template <WeightType T>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_xwt_kernel(const float* x, int n, DeviceWeight w, float* y, int accumulate) {
  const int lane = threadIdx.x % 32;
  const int rows = w.rows, cols = w.cols;
  const int r = blockIdx.x * kGemvWarps + static_cast<int>(threadIdx.x / 32);
  if (r >= rows) return;  // whole warps leave together: the shuffles below see full warps
  const uint8_t* q = w.data + static_cast<size_t>(r) * w.row_bytes;
  const uint8_t* m = w.meta + static_cast<size_t>(r) * w.meta_row_bytes;
  float acc[kGemvMaxTokens] = {};
  for (int c0 = lane * kGemvChunk; c0 < cols; c0 += 32 * kGemvChunk) {
    const int end = min(c0 + kGemvChunk, cols);
    for (int i = c0; i < end; ++i) {
      const float wi = plane_element(T, q, m, i);
#pragma unroll
      for (int t = 0; t < kGemvMaxTokens; ++t)
        if (t < n) acc[t] = fmaf(wi, x[static_cast<size_t>(t) * cols + i], acc[t]);
    }
  }
  // A guard rather than a break, so the loop unrolls and acc[] stays in registers; n is the
  // same for the whole warp, so the shuffles still see every lane.
#pragma unroll
  for (int t = 0; t < kGemvMaxTokens; ++t) {
    if (t < n) {
      float v = acc[t];
#pragma unroll
      for (int mask = 16; mask > 0; mask /= 2) v += gpu_shfl_xor(v, mask);
      if (lane == 0) {
        float* out = y + static_cast<size_t>(t) * rows + r;
        *out = accumulate ? *out + v : v;
      }
    }
  }
}

// Queries (heads_q heads) and keys (heads_k) of the same tokens in one launch: item e < the
// queries' count rotates a query pair, the rest key pairs.
__global__ void rope_pairs_kernel(float* q, int heads_q, float* k, int heads_k, int n, int head_dim, int half_rot,
                                  int64_t pos0, const float* inv_freq) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t q_items = static_cast<size_t>(n) * half_rot * heads_q;
  if (e >= q_items + static_cast<size_t>(n) * half_rot * heads_k) return;
  const bool is_q = e < q_items;
  const size_t item = is_q ? e : e - q_items;
  const int heads = is_q ? heads_q : heads_k;
  float* x = is_q ? q : k;
  const int h = static_cast<int>(item % heads);
  const int p = static_cast<int>((item / heads) % half_rot);
  const size_t i = item / (static_cast<size_t>(heads) * half_rot);
  const double angle = static_cast<double>(pos0 + static_cast<int64_t>(i)) * static_cast<double>(inv_freq[p]);
  const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
  float* v = x + (i * heads + h) * head_dim + 2 * p;
  const float a = v[0], b = v[1];
  v[0] = a * c - b * s;
  v[1] = a * s + b * c;
}

__global__ void round_dot_input_kernel(ggml::DotInput t, int block, float* x, size_t blocks) {
  const size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < blocks) ggml::round_dot_input(t, x + b * block);
}

__global__ void silu_mul_kernel(float* gate, const float* up, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  gate[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void add_into_kernel(float* y, const float* x, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

constexpr int kThreads = 256;

// Reads every 16-byte word of `words` once and keeps one word per block, so nothing is
// optimized away and almost nothing is written.
__global__ void read_kernel(const uint4* words, size_t n, uint32_t* out) {
  uint32_t acc = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = words[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

}  // namespace

namespace {
// Every call below that waits for the device, counted (host_waits in gpu_ops.h).
uint64_t g_host_waits = 0;
void waited() { ++g_host_waits; }

// The exact path's flag (matmul_flag_* in gpu_ops.h): a device int and its pinned host copy.
struct MatmulFlag {
  int* device = nullptr;
  int* host = nullptr;
};
MatmulFlag& matmul_flag() {
  // Made on first use and never freed: static destructors run after the runtime's teardown.
  static MatmulFlag* f = [] {
    auto* m = new MatmulFlag();
    check(gpuMalloc(reinterpret_cast<void**>(&m->device), sizeof(int)), "flag malloc");
    check(gpuMemset(m->device, 0, sizeof(int)), "flag reset");
    check(gpuHostAlloc(reinterpret_cast<void**>(&m->host), sizeof(int), gpuHostAllocDefault), "pinned flag");
    *m->host = 0;
    return m;
  }();
  return *f;
}
}  // namespace

uint64_t host_waits() { return g_host_waits; }

DeviceMemory::DeviceMemory(size_t bytes) { reserve(bytes); }
DeviceMemory::~DeviceMemory() {
  if (ptr_) (void)gpuFreeAsync(ptr_, 0);  // nothing useful to do with a failure here
}
DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (ptr_) (void)gpuFreeAsync(ptr_, 0);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// Stream-ordered: growing a buffer inside a forward neither waits for the device nor lets the
// old buffer go before the kernels queued on it have run.
void DeviceMemory::reserve(size_t bytes) {
  if (ptr_ && bytes <= bytes_) return;
  if (ptr_) (void)gpuFreeAsync(ptr_, 0);
  ptr_ = nullptr;
  bytes_ = 0;
  check(gpuMallocAsync(&ptr_, bytes ? bytes : 1, 0), ("malloc of " + std::to_string(bytes) + " bytes").c_str());
  bytes_ = bytes;
}

void DeviceMemory::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_) throw_usage_error("GPU upload of " + std::to_string(bytes) + " bytes past the allocation");
  if (bytes) {
    waited();
    check(gpuMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, gpuMemcpyHostToDevice), "upload");
  }
}

void DeviceMemory::upload_async(const PinnedHost& host, size_t bytes) {
  if (bytes > bytes_ || bytes > host.size())
    throw_usage_error("GPU upload of " + std::to_string(bytes) + " bytes past the allocation");
  if (bytes) check(gpuMemcpyAsync(ptr_, host.data(), bytes, gpuMemcpyHostToDevice, 0), "async upload");
}

void DeviceMemory::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_) throw_usage_error("GPU download of " + std::to_string(bytes) + " bytes past the allocation");
  if (bytes) {
    waited();
    check(gpuMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, gpuMemcpyDeviceToHost), "download");
  }
}

PinnedHost::~PinnedHost() {
  if (ptr_) (void)gpuFreeHost(ptr_);
}
void PinnedHost::reserve(size_t bytes) {
  if (ptr_ && bytes <= bytes_) return;
  if (ptr_) {
    waited();  // freeing pinned memory waits for the device
    (void)gpuFreeHost(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
  check(gpuHostAlloc(&ptr_, bytes ? bytes : 1, gpuHostAllocDefault), "pinned host allocation");
  bytes_ = bytes;
}

void device_synchronize() {
  waited();
  check(gpuDeviceSynchronize(), "synchronize");
}

void matmul_flag_reset() { check(gpuMemsetAsync(matmul_flag().device, 0, sizeof(int), 0), "flag reset"); }
int* matmul_flag_device() { return matmul_flag().device; }
void matmul_flag_fetch() {
  MatmulFlag& f = matmul_flag();
  check(gpuMemcpyAsync(f.host, f.device, sizeof(int), gpuMemcpyDeviceToHost, 0), "flag copy");
}
bool matmul_flag_raised() { return *matmul_flag().host != 0; }

UploadedWeight upload_weight(WeightType type, const uint8_t* rows_data, int rows, int cols, size_t row_bytes) {
  const int block = weight_block_elems(type);
  if (rows < 0 || cols <= 0 || cols % block != 0 ||
      row_bytes != static_cast<size_t>(cols / block) * static_cast<size_t>(weight_block_bytes(type)))
    throw_usage_error("GPU weight: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                      " matrix whose rows are not whole blocks of its type");
  UploadedWeight out;
  DeviceWeight& v = out.view;
  v.type = type;
  v.rows = rows;
  v.cols = cols;
  v.row_bytes = quant_row_bytes(type, cols);
  v.meta_row_bytes = meta_row_bytes(type, cols);
  const size_t quant_bytes = v.row_bytes * static_cast<size_t>(rows), meta_bytes = v.meta_row_bytes * static_cast<size_t>(rows);
  // The meta plane starts 16-byte aligned after the quants (their size is a multiple of 16 for
  // the quantized types).
  const size_t meta_at = (quant_bytes + 15) / 16 * 16;
  out.memory = DeviceMemory(meta_at + meta_bytes);
  if (v.meta_row_bytes == 0) {
    out.memory.upload(rows_data, quant_bytes);
  } else {
    std::vector<uint8_t> planes(meta_at + meta_bytes);
    repack_planes(type, rows_data, rows, cols, row_bytes, planes.data(), planes.data() + meta_at);
    out.memory.upload(planes.data(), planes.size());
  }
  v.data = out.memory.bytes();
  v.meta = v.meta_row_bytes ? out.memory.bytes() + meta_at : nullptr;
  return out;
}

void gather_rows(const DeviceWeight& table, const int32_t* ids, int n, float* out) {
  if (n <= 0) return;
  with_weight_type(table.type, [&](auto type) {
    gather_rows_kernel<decltype(type)::value>
        <<<blocks_for(static_cast<size_t>(n) * table.cols, kThreads), kThreads>>>(table, ids, n, out);
  });
  check(gpuGetLastError(), "gather launch");
}

void rms_norm_rows(const float* x, int n, int dim, const float* weight, float eps, float* out) {
  if (n <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(n), kNormThreads>>>(x, dim, weight, eps, out);
  check(gpuGetLastError(), "rms_norm launch");
}

void gemm_xwt(const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
  if (n <= 0 || w.rows <= 0) return;
  if (w.cols % weight_block_elems(w.type) != 0)
    throw_usage_error("GPU GEMM: " + std::to_string(w.cols) + " columns are not whole blocks of the weight type");
  const DeviceWeight* ws[] = {&w};
  float* ys[] = {y};
  if (n <= kGemvMaxTokens && gemv_planes(x, n, 1, ws, ys, accumulate)) return;
  with_weight_type(w.type, [&](auto type) {
    constexpr WeightType T = decltype(type)::value;
    if (n <= kGemvMaxTokens) {
      gemv_xwt_kernel<T><<<static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps), kGemvWarps * 32>>>(
          x, n, w, y, accumulate ? 1 : 0);
    } else {
      const dim3 grid(static_cast<unsigned>((w.rows + kTile - 1) / kTile), static_cast<unsigned>((n + kTile - 1) / kTile));
      gemm_xwt_kernel<T><<<grid, kGemmThreads>>>(x, n, w, y, accumulate ? 1 : 0);
    }
  });
  check(gpuGetLastError(), "gemm launch");
}

#if defined(KVGATE_HAVE_CUBLAS)
// gpu_blas.cu: false when no algorithm fits the shape (gemm_xwt serves it then).
bool gemm_tensor_cores(MatmulPath path, const float* x, int n, const DeviceWeight& w, float* y, bool accumulate);
bool have_tensor_core_gemm() { return true; }
#else
bool have_tensor_core_gemm() { return false; }
double tensor_core_gemm_gflop_s(int, int, int, int) { return 0.0; }
#endif

double device_read_gbps(size_t bytes, int iterations) {
  DeviceMemory buffer(bytes), out(4096 * sizeof(uint32_t));
  check(gpuMemset(buffer.bytes(), 1, bytes), "memset");
  gpuDeviceProp_t prop;
  check(gpuGetDeviceProperties(&prop, 0), "device properties");
  const unsigned blocks = static_cast<unsigned>(std::min(4096, prop.multiProcessorCount * 8));
  const size_t words = bytes / 16;
  const double ms = time_ms(iterations, [&] {
    read_kernel<<<blocks, kThreads>>>(reinterpret_cast<const uint4*>(buffer.bytes()), words,
                                      reinterpret_cast<uint32_t*>(out.bytes()));
  });
  return static_cast<double>(words * 16) / (ms * 1e-3) / 1e9;
}

void matmul(MatmulPath path, const float* x, int n, const DeviceWeight& w, float* y, bool accumulate) {
#if defined(KVGATE_HAVE_CUBLAS)
  if (path != MatmulPath::f32 && n > kGemvMaxTokens && gemm_tensor_cores(path, x, n, w, y, accumulate)) return;
#endif
  gemm_xwt(x, n, w, y, accumulate);
}

void matmul_many(MatmulPath path, const float* x, int n, int count, const DeviceWeight* const* w, float* const* y) {
  if (n > 0 && n <= kGemvMaxTokens && gemv_planes(x, n, count, w, y, false)) return;
  for (int i = 0; i < count; ++i) matmul(path, x, n, *w[i], y[i]);
}

void round_matmul_input(ggml::DotInput t, const DeviceWeight& w, float* x, int n) {
  if (n <= 0 || t == ggml::DotInput::f32) return;
  const int block = ggml::dot_input_block(t);
  if (w.cols % block != 0)
    throw_usage_error("GPU matmul input rounding: rows of " + std::to_string(w.cols) + " are not whole blocks of " +
                      std::to_string(block));
  const size_t blocks = static_cast<size_t>(n) * w.cols / block;
  round_dot_input_kernel<<<blocks_for(blocks, kThreads), kThreads>>>(t, block, x, blocks);
  check(gpuGetLastError(), "input rounding launch");
}

void rope_pairs(float* q, int heads_q, float* k, int heads_k, int n, int head_dim, int n_rot, int64_t pos0,
                const float* inv_freq) {
  const size_t items = static_cast<size_t>(n) * (n_rot / 2) * (heads_q + heads_k);
  if (items == 0) return;
  rope_pairs_kernel<<<blocks_for(items, kThreads), kThreads>>>(q, heads_q, k, heads_k, n, head_dim, n_rot / 2, pos0,
                                                               inv_freq);
  check(gpuGetLastError(), "rope launch");
}

void silu_mul(float* gate, const float* up, size_t n) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n, kThreads), kThreads>>>(gate, up, n);
  check(gpuGetLastError(), "silu launch");
}

void add_into(float* y, const float* x, size_t n) {
  if (n == 0) return;
  add_into_kernel<<<blocks_for(n, kThreads), kThreads>>>(y, x, n);
  check(gpuGetLastError(), "add launch");
}

}  // namespace kvgate::kernels::gpu
