#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/blas_kernels.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

TEST(Cli, VersionNamesVersionShaAndBackends) {
  CliResult r = run_kvgate("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kvgate 0."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("git "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
}

// OpenBLAS falls back to its SSE3 kernels on CPUs newer than itself (runtime/blas_kernels.h);
// kvgate restarts itself with the kernels the CPU can run, so its forward pass is not 2.4x slow.
TEST(Cli, VersionNamesTheBlasKernelsAndTheyFitTheCpu) {
  ::unsetenv("OPENBLAS_CORETYPE");
  CliResult r = run_kvgate("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("OpenBLAS ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string kernels = r.out.substr(at + 9, r.out.find_first_of(")\n", at) - at - 9);
  EXPECT_FALSE(kernels.empty()) << r.out;
  if (runtime::host_cpu_vectors().avx2_fma) {
    EXPECT_NE(kernels, "Prescott") << r.out;
  }
  // A user's own choice stands.
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  r = run_kvgate("--version");
  ::unsetenv("OPENBLAS_CORETYPE");
  EXPECT_NE(r.out.find("OpenBLAS Prescott)"), std::string::npos) << r.out;
}

TEST(Cli, HelpListsCommands) {
  CliResult r = run_kvgate("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model"), std::string::npos) << r.out;
}

TEST(Cli, UnknownCommandIsUsageError) {
  CliResult r = run_kvgate("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.err.empty());
}

TEST(Cli, NoCommandIsUsageError) {
  CliResult r = run_kvgate("");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace kvgate::testing
