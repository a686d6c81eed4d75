#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace kvgate {
namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

TEST(CpuFeatures, Avx512ImpliesTheAvx2Set) {
  if (cpu_has_avx512()) {
    EXPECT_TRUE(cpu_has_avx2_fma_f16c());
  }
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(cpu_has_avx2_fma_f16c(), f.avx2 && f.fma && f.f16c);
}

TEST(CpuFeatures, Avx512CanBeDisallowedAndAllowedAgain) {
  const bool before = cpu_has_avx512();
  set_avx512_allowed(false);
  EXPECT_FALSE(cpu_has_avx512());
  set_avx512_allowed(true);
  EXPECT_EQ(cpu_has_avx512(), before);
}

// ctest runs this once more under each variable (tests/core/CMakeLists.txt): detection reads
// the environment once, so one process checks one setting.
TEST(CpuFeatures, EnvironmentOverridesTurnFeaturesOff) {
  const bool no_simd = env_set("KVGATE_DISABLE_SIMD"), no_avx512 = env_set("KVGATE_DISABLE_AVX512");
  if (!no_simd && !no_avx512) GTEST_SKIP() << "neither KVGATE_DISABLE_SIMD nor KVGATE_DISABLE_AVX512 is set";
  const CpuFeatures& f = cpu_features();
  EXPECT_FALSE(f.avx512);
  EXPECT_FALSE(cpu_has_avx512());
  if (no_simd) {
    EXPECT_FALSE(f.avx2 || f.fma || f.f16c);
    EXPECT_FALSE(cpu_has_avx2_fma_f16c());
  }
}

}  // namespace
}  // namespace kvgate
