#pragma once
// Runs the real kvgate binary (built in this tree) and captures what a user would see.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

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

// A scratch path of this test process under gtest's TempDir: "kvgate_<prefix>_<pid>_<name>".
// Every path handed out, and every file beside it whose name it begins (SQLite's -wal and -shm,
// a run's .shard-N databases), is removed when the test binary exits, so test runs do not pile
// their databases up in /tmp. Paths first asked for in a forked child are the child's: ask in
// the parent.
inline std::string scratch_path(const std::string& prefix, const std::string& name) {
  struct Registry {
    std::vector<std::string> paths;
    ~Registry() {
      namespace fs = std::filesystem;
      std::error_code ignored;
      for (const std::string& p : paths) {
        const fs::path path(p);
        const std::string stem = path.filename().string();
        for (fs::directory_iterator it(path.parent_path(), ignored), end; !ignored && it != end; it.increment(ignored))
          if (it->path().filename().string().rfind(stem, 0) == 0) fs::remove_all(it->path(), ignored);
        ignored.clear();
      }
    }
  };
  static Registry registry;
  std::string path = ::testing::TempDir() + "kvgate_" + prefix + "_" + std::to_string(::getpid()) + "_" + name;
  registry.paths.push_back(path);
  return path;
}

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

// scripts/check-report-html on an HTML report: strict XHTML, every chart in the rendered DOM,
// nothing wider than a laptop's window, a screenshot (kept at `screenshot` when given). Exit 77:
// no chromium on this machine (scripts/test installs Debian's where apt can); the log says so.
struct ReportCheck {
  int exit_code = 0;
  std::string log;
};
inline ReportCheck check_report_html(const std::string& html, const std::string& screenshot = "") {
  const std::string log = html + ".check.log";
  const std::string cmd = std::string(KVGATE_SOURCE_DIR) + "/scripts/check-report-html " + html +
                          (screenshot.empty() ? "" : " " + screenshot) + " >" + log + " 2>&1 </dev/null";
  const int status = std::system(cmd.c_str());
  ReportCheck r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(log)};
  std::remove(log.c_str());
  return r;
}

// In a test body, last: the report passes check-report-html, or the test is skipped with the
// script's reason where chromium is missing (ctest lists it as skipped, never as passed).
#define EXPECT_REPORT_RENDERS(html)                                            \
  do {                                                                         \
    const ::kvgate::testing::ReportCheck check_ = ::kvgate::testing::check_report_html(html); \
    if (check_.exit_code == 77) GTEST_SKIP() << check_.log;                    \
    EXPECT_EQ(check_.exit_code, 0) << check_.log;                              \
  } while (0)

}  // namespace kvgate::testing
