#include "runtime/blas_kernels.h"

#include <gtest/gtest.h>

namespace kvgate::runtime {
namespace {

TEST(BlasKernels, TheGenericFallbackIsReplacedByTheWidestSetTheCpuRuns) {
  EXPECT_EQ(blas_kernels_to_request("Prescott", {.avx2_fma = true, .avx512 = true, .avx512_bf16 = true}), "Cooperlake");
  EXPECT_EQ(blas_kernels_to_request("PRESCOTT", {.avx2_fma = true, .avx512 = true}), "SkylakeX");
  EXPECT_EQ(blas_kernels_to_request("prescott", {.avx2_fma = true}), "Haswell");
  // Nothing wider than SSE3: the fallback is the right set.
  EXPECT_EQ(blas_kernels_to_request("Prescott", {}), "");
}

TEST(BlasKernels, ASetTheLibraryChoseForACpuItKnowsStands) {
  const CpuVectors every{.avx2_fma = true, .avx512 = true, .avx512_bf16 = true};
  for (const char* chosen : {"Haswell", "SkylakeX", "Zen", "Sandybridge", "Nehalem", "Cooperlake"})
    EXPECT_EQ(blas_kernels_to_request(chosen, every), "") << chosen;
}

// This process chose before main and nothing here re-executes it, so the name is what the
// library picked for this machine (or what OPENBLAS_CORETYPE asked for): never empty.
TEST(BlasKernels, TheLoadedLibraryNamesItsKernels) { EXPECT_FALSE(blas_kernels_name().empty()); }

}  // namespace
}  // namespace kvgate::runtime
