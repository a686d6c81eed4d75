#include <gtest/gtest.h>

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
