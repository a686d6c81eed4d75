#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvgate {
namespace {

bool env_set(const char* name) {
  const char* value = std::getenv(name);
  return value && *value && std::strcmp(value, "0") != 0;
}

CpuFeatures detect() {
  CpuFeatures f;
  if (env_set("KVGATE_DISABLE_SIMD")) return f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // GCC 12 does not know "f16c" in __builtin_cpu_supports, so ask CPUID leaf 1 (ECX bit 29).
  unsigned eax, ebx, ecx, edx;
  __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
  f.f16c = (ecx >> 29) & 1u;
  // libgcc's answers for these also check that XCR0 enables the opmask and zmm state.
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  if (env_set("KVGATE_DISABLE_AVX512")) f.avx512 = false;
#endif
  return f;
}

std::atomic<bool> avx512_allowed{true};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_has_avx2_fma_f16c() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

bool cpu_has_avx512() {
  const CpuFeatures& f = cpu_features();
  return f.avx512 && f.avx2 && f.fma && f.f16c && avx512_allowed.load(std::memory_order_relaxed);
}

void set_avx512_allowed(bool allowed) { avx512_allowed.store(allowed, std::memory_order_relaxed); }

}  // namespace kvgate
