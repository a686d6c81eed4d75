#pragma once
// The thin per-vendor layer under the tensor-core kernels (attention_prefill.cuh): one warp-wide
// D = A B + C of 16 x 8 x 16 with f16 A and B and f32 C, in mma.m16n8k16's fragment layout
// (prefill_tile.h mma_a/b/c_*). CUDA (sm_80 and later) runs the instruction. HIP has no such
// instruction on the targets kvgate builds for (MFMA's fragments differ); the emulation below, the
// same layout from shuffles and FMAs, compiled far past the budget, so HIP builds leave the
// prefill units out (attention_prefill_hip.cu) and it serves no build today. Device code only.
#include <cstdint>

#include "core/float_convert.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {

#if defined(__HIP_PLATFORM_AMD__) || defined(KVGATE_GPU_HIP)
#define KVGATE_MMA_INLINE __noinline__  // the emulation out of line: the kernels' unrolled loops stay small
#else
#define KVGATE_MMA_INLINE __forceinline__
#endif

__device__ KVGATE_MMA_INLINE void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  // Lane 4g + t holds C rows g and g + 8, columns 2t and 2t + 1. A's row g, columns 2u + e (+8)
  // live in lane 4g + u, registers 0 (2) and 1 (3) for row g + 8; B's column n, rows 2u + e (+8)
  // in lane 4n + u, register 0 (1).
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  auto lo = [](uint32_t v) { return f16_to_f32(static_cast<uint16_t>(v & 0xffffu)); };
  auto hi = [](uint32_t v) { return f16_to_f32(static_cast<uint16_t>(v >> 16)); };
  for (int half = 0; half < 2; ++half)
    for (int u = 0; u < 4; ++u) {
      const uint32_t a_g = gpu_shfl(a[2 * half], 4 * g + u), a_g8 = gpu_shfl(a[2 * half + 1], 4 * g + u);
      const uint32_t b0 = gpu_shfl(b[half], 4 * (2 * t) + u), b1 = gpu_shfl(b[half], 4 * (2 * t + 1) + u);
      c[0] = fmaf(lo(a_g), lo(b0), fmaf(hi(a_g), hi(b0), c[0]));
      c[1] = fmaf(lo(a_g), lo(b1), fmaf(hi(a_g), hi(b1), c[1]));
      c[2] = fmaf(lo(a_g8), lo(b0), fmaf(hi(a_g8), hi(b0), c[2]));
      c[3] = fmaf(lo(a_g8), lo(b1), fmaf(hi(a_g8), hi(b1), c[3]));
    }
#endif
}

}  // namespace kvgate::kernels::gpu
