#include "runtime/blas_kernels.h"

#include <cblas.h>

#include "core/cpu_features.h"

namespace kvgate::runtime {

// core's detection (which also asks whether the OS saves the 512-bit state, and honours
// KVGATE_DISABLE_SIMD / KVGATE_DISABLE_AVX512: with SIMD off kvgate keeps OpenBLAS's own choice),
// plus BF16, which only this choice needs.
CpuVectors host_cpu_vectors() {
  const CpuFeatures& f = cpu_features();
  CpuVectors v;
  v.avx2_fma = f.avx2 && f.fma;
  v.avx512 = f.avx512;
#if defined(__x86_64__) || defined(__i386__)
  v.avx512_bf16 = v.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return v;
}

std::string blas_kernels_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string blas_kernels_to_request(std::string_view chosen, const CpuVectors& cpu) {
  // OpenBLAS names its fallback "Prescott" (in any case); any other name is a set it chose
  // for a CPU it knows, which kvgate does not second-guess.
  std::string lower(chosen);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower != "prescott") return "";
  if (cpu.avx512_bf16) return "Cooperlake";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

}  // namespace kvgate::runtime
