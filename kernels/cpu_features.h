#pragma once
// Run-time CPU feature detection. The binary is built for baseline x86-64 so it runs anywhere;
// the AVX2 fast paths are compiled with function-level target attributes and taken only when
// this says the running CPU has them.
namespace kvgate::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
};

// Detected once. Setting KVGATE_DISABLE_SIMD=1 in the environment reports no features, so the
// scalar reference paths can be benchmarked or debugged on the same machine.
const CpuFeatures& cpu_features();

// The fast paths in simd_avx2.cc need all three.
bool cpu_has_avx2_fma_f16c();

}  // namespace kvgate::kernels
