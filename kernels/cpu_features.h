#pragma once
// Run-time CPU feature detection. The binary is built for baseline x86-64 so it runs anywhere;
// the AVX2 fast paths are compiled with function-level target attributes and taken only when
// this says the running CPU has them.
namespace kvgate::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512 = false;  // AVX-512 F, DQ, VL and BW, with the OS saving the 512-bit state
};

// Detected once. Setting KVGATE_DISABLE_SIMD=1 in the environment reports no features, so the
// scalar reference paths can be benchmarked or debugged on the same machine.
const CpuFeatures& cpu_features();

// The fast paths in simd_avx2.cc need all three.
bool cpu_has_avx2_fma_f16c();

// The AVX-512 pair drivers (kernels/simd_avx512_pairs.h) need AVX-512 on top of those three.
// They give the same bits as the AVX2 drivers, so this choice never changes a result; setting
// KVGATE_DISABLE_AVX512=1 keeps the AVX2 ones (to benchmark one against the other in one build).
bool cpu_has_avx512();
// Tests compare the two drivers in one process; false takes the AVX2 ones until set back.
void set_avx512_allowed(bool allowed);

}  // namespace kvgate::kernels
