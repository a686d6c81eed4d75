#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace kvgate::kernels {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  const char* disable = std::getenv("KVGATE_DISABLE_SIMD");
  if (disable && std::strcmp(disable, "0") != 0 && *disable) return f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // GCC 12 does not know "f16c" in __builtin_cpu_supports, so ask CPUID leaf 1 (ECX bit 29).
  unsigned eax, ebx, ecx, edx;
  __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
  f.f16c = (ecx >> 29) & 1u;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_has_avx2_fma_f16c() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

}  // namespace kvgate::kernels
