// Decode-sized matmuls (up to kGemvMaxTokens rows of x) over the weight planes of
// weight_planes.h, for every weight type, in the MMVQ manner of llama.cpp's mmvq.cu: a block of
// 128 threads owns kRows weight rows and splits their columns between its threads; each thread
// reads a unit (16 bytes of quants, 48 for Q6_K) of every row with 128-bit loads, the matching x
// through the read-only cache (float4), and decodes in registers (Units<T>::dot: no call, no
// per-element switch). The product is f32 (x is never rounded), the partial sums meet in a
// fixed order (warp butterfly, then the warps in turn), so the result is the same every run.
// scripts/gpu-static-check checks the compiled kernels (no spills, 128-bit weight loads,
// no calls: scripts/gpu-static-rules.tsv). One kernel source for CUDA and HIP.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/gpu/vendor.h"
#include "kernels/gpu/weight_dispatch.h"
#include "kernels/gpu/weight_planes.h"

namespace kvgate::kernels::gpu {

// Up to three weights of one type and width multiplied by the same x in one launch (Q, K and V;
// gate and up): a decode step launches fewer kernels. Blocks [first_block, next's) serve segment i.
// Outside the anonymous namespace: nvcc's host stubs cannot name a kernel parameter type in one.
inline constexpr int kMaxSegments = 3;
struct GemvSegment {
  const uint8_t* quants;
  const uint8_t* meta;
  size_t quant_row, meta_row;
  int rows, first_block;
  float* y;
};
struct GemvSegments {
  GemvSegment s[kMaxSegments];
  int count;
};

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
// Rows per block: each x load feeds two rows, and a 1024-row K/V projection still makes 512
// blocks (four waves of 132 SMs at 1 block each; several blocks fit per SM). Q6_K's units are
// 48 bytes and 64 elements: one row, or its registers spill.
template <WeightType T>
inline constexpr int kRowsPerBlock = T == WeightType::q6_k ? 1 : 2;

// kMaxTokens: 1 for decode steps (a kernel whose registers are not sized for 8 tokens), else
// kGemvMaxTokens.
template <WeightType T, int kMaxTokens>
__global__ void __launch_bounds__(kThreads)
    gemv_planes_kernel(const float* __restrict__ x, int n, int cols, GemvSegments segments, int accumulate) {
  using U = Units<T>;
  constexpr int kWords = U::kUnitBytes / 4;
  constexpr int kRows = kRowsPerBlock<T>;
  const int meta_bytes = plane_layout(T).meta_bytes;
  const int units = cols / U::kBlockElems * U::kUnitsPerBlock;
  // The block's segment, picked field by field with constant indices (a dynamic index into the
  // parameter struct would copy it to local memory).
  GemvSegment S = segments.s[0];
#pragma unroll
  for (int i = 1; i < kMaxSegments; ++i)
    if (i < segments.count && static_cast<int>(blockIdx.x) >= segments.s[i].first_block) S = segments.s[i];
  const int rows = S.rows;
  float* __restrict__ y = S.y;
  const int r0 = (static_cast<int>(blockIdx.x) - S.first_block) * kRows;
  const uint8_t* qr[kRows];
  const uint8_t* mr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // A block past the last row reads the last row again and writes nothing for it.
    const size_t row = static_cast<size_t>(min(r0 + r, rows - 1));
    qr[r] = S.quants + row * S.quant_row;
    mr[r] = S.meta + row * S.meta_row;
  }
  float acc[kRows][kMaxTokens];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) acc[r][t] = 0.0f;

  for (int u = static_cast<int>(threadIdx.x); u < units; u += kThreads) {
    const int block = u / U::kUnitsPerBlock, k = u % U::kUnitsPerBlock;
    uint32_t w[kRows][kWords];
    typename U::Scales s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4* q = reinterpret_cast<const uint4*>(qr[r] + static_cast<size_t>(u) * U::kUnitBytes);
#pragma unroll
      for (int v = 0; v < kWords / 4; ++v) {
        const uint4 word = q[v];
        w[r][4 * v] = word.x;
        w[r][4 * v + 1] = word.y;
        w[r][4 * v + 2] = word.z;
        w[r][4 * v + 3] = word.w;
      }
      s[r] = U::scales(mr[r] + static_cast<size_t>(block) * meta_bytes, k);
    }
    const float* xb = x + static_cast<size_t>(block) * U::kBlockElems;
    // A guard rather than a loop bound, so acc[][] stays in registers; n is the same for the
    // whole block.
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      if (t < n) {
        float xs[U::kUnitElems];
#pragma unroll
        for (int g = 0; g < U::kUnitElems / 4; ++g) {
          const float4 v =
              __ldg(reinterpret_cast<const float4*>(xb + static_cast<size_t>(t) * cols + U::x_index(k, 4 * g)));
          xs[4 * g] = v.x;
          xs[4 * g + 1] = v.y;
          xs[4 * g + 2] = v.z;
          xs[4 * g + 3] = v.w;
        }
        const typename U::Sums sums = U::sums(xs);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] = U::dot(acc[r][t], s[r], w[r], xs, sums);
      }
    }
  }

  __shared__ float partial[kWarps][kRows][kMaxTokens];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      if (t < n) {
        float v = acc[r][t];
#pragma unroll
        for (int mask = 16; mask > 0; mask /= 2) v += gpu_shfl_xor(v, mask);
        if (lane == 0) partial[warp][r][t] = v;
      }
    }
  __syncthreads();
  if (threadIdx.x < kRows * kMaxTokens) {
    const int r = static_cast<int>(threadIdx.x) / kMaxTokens, t = static_cast<int>(threadIdx.x) % kMaxTokens;
    if (t < n && r0 + r < rows) {
      float v = partial[0][r][t];
#pragma unroll
      for (int wp = 1; wp < kWarps; ++wp) v += partial[wp][r][t];
      float* out = y + static_cast<size_t>(t) * rows + r0 + r;
      *out = accumulate ? *out + v : v;
    }
  }
}

}  // namespace

bool gemv_planes(const float* x, int n, int count, const DeviceWeight* const* w, float* const* y, bool accumulate) {
  // float4 loads of x: its rows must start 16-byte aligned (cols a multiple of 4 does the rest).
  if (n < 1 || n > kGemvMaxTokens || count < 1 || count > kMaxSegments || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  for (int i = 1; i < count; ++i)
    if (w[i]->type != w[0]->type || w[i]->cols != w[0]->cols) return false;
  bool launched = false;
  with_weight_type(w[0]->type, [&](auto type) {
    constexpr WeightType T = decltype(type)::value;
    if (w[0]->cols % Units<T>::kBlockElems != 0) return;  // a float row that is not whole 16-byte units
    GemvSegments segments{};
    segments.count = count;
    int blocks = 0;
    for (int i = 0; i < count; ++i) {
      segments.s[i] = {w[i]->data, w[i]->meta, w[i]->row_bytes, w[i]->meta_row_bytes, w[i]->rows, blocks, y[i]};
      blocks += (w[i]->rows + kRowsPerBlock<T> - 1) / kRowsPerBlock<T>;
    }
    if (blocks == 0) return;
    if (n == 1)
      gemv_planes_kernel<T, 1><<<static_cast<unsigned>(blocks), kThreads>>>(x, n, w[0]->cols, segments, accumulate ? 1 : 0);
    else
      gemv_planes_kernel<T, kGemvMaxTokens>
          <<<static_cast<unsigned>(blocks), kThreads>>>(x, n, w[0]->cols, segments, accumulate ? 1 : 0);
    launched = true;
  });
  if (launched) {
    const gpuError_t err = gpuGetLastError();
    if (err != gpuSuccess) throw_environment_error(std::string("GPU GEMV launch: ") + gpuGetErrorString(err));
  }
  return launched;
}

}  // namespace kvgate::kernels::gpu
