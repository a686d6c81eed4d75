#pragma once
// Run-time CPU feature detection, the one copy every module asks. The binary is built for
// baseline x86-64 so it runs anywhere; the AVX2 and AVX-512 fast paths (the KV kernels, the
// weight matmuls, the TurboQuant codec, the token metrics) are compiled with function-level
// target attributes and taken only when this says the running CPU has them.
//
// Two environment overrides, read once at the first call:
//   KVGATE_DISABLE_SIMD=1    reports no features, so every module takes its scalar reference
//                            path (to benchmark or debug it on the same machine);
//   KVGATE_DISABLE_AVX512=1  reports no AVX-512, so the AVX2 paths run where the AVX-512 ones
//                            would (to compare one against the other in one build).
// Any value but empty or "0" sets an override.
namespace kvgate {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512 = false;  // AVX-512 F, DQ, VL and BW, with the OS saving the 512-bit state
};

// Detected once (thread-safe), the overrides above applied.
const CpuFeatures& cpu_features();

// AVX2, FMA and F16C together: what every AVX2 fast path in the tree is compiled for.
bool cpu_has_avx2_fma_f16c();

// AVX-512 on top of those three. The kernels' AVX-512 pair drivers (kernels/simd_avx512_pairs.h)
// give the same bits as their AVX2 drivers, so there this choice never changes a result.
bool cpu_has_avx512();
// Tests compare the AVX-512 and AVX2 paths in one process; false makes cpu_has_avx512() answer
// false until set back.
void set_avx512_allowed(bool allowed);

}  // namespace kvgate
