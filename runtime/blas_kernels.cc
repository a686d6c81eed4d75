#include "runtime/blas_kernels.h"

#include <cblas.h>

namespace kvgate::runtime {

CpuVectors host_cpu_vectors() {
  CpuVectors v;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  v.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
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
