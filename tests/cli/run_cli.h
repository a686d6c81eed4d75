#pragma once
// Runs the real kvgate binary (built in this tree) and captures what a user would see.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvgate::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Where `kvgate model fetch` puts the default model with the caller's environment.
inline std::string default_model_file() {
  const char* home = std::getenv("KVGATE_HOME");
  const std::string dir = home && *home ? std::string(home)
                                        : std::string(std::getenv("HOME") ? std::getenv("HOME") : "/") + "/.cache/kvgate";
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool default_model_fetched() { return std::ifstream(default_model_file()).good(); }

// Tests that run the real default model skip, saying why, where it has not been fetched.
#define KVGATE_SKIP_UNLESS_DEFAULT_MODEL()                                                          \
  if (!::kvgate::testing::default_model_fetched())                                                  \
  GTEST_SKIP() << "default model not fetched (" << ::kvgate::testing::default_model_file()          \
               << " missing); run `kvgate model fetch` first (scripts/test does)"

inline std::string kvgate_binary() { return std::string(KVGATE_BINARY_DIR) + "/bin/kvgate"; }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// args is appended to the command line as-is (the caller quotes what needs quoting).
inline CliResult run_kvgate(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const std::string base = ::testing::TempDir() + "kvgate_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::string cmd = env + " " + kvgate_binary() + " " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace kvgate::testing
