#pragma once
// A real llama-server (llama.cpp b11434, built by scripts/fetch-llama-cpp) for the engine-mode
// end-to-end tests: started on 127.0.0.1 with an ephemeral port and the default model, killed
// when the object goes (and with the test process, should that die first).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serving/http_client.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {

// $KVGATE_LLAMA_CPP_BIN/llama-server, else where scripts/fetch-llama-cpp installs it; "" when
// neither exists (scripts/test runs the fetch script before the tests).
inline std::string llama_server_binary() {
  struct stat st {};
  if (const char* dir = std::getenv("KVGATE_LLAMA_CPP_BIN"); dir && *dir) {
    const std::string p = std::string(dir) + "/llama-server";
    return ::stat(p.c_str(), &st) == 0 ? p : "";
  }
  const char* home = std::getenv("KVGATE_HOME");
  const std::string root = home && *home ? std::string(home) : std::string(std::getenv("HOME") ? std::getenv("HOME") : "/") + "/.cache/kvgate";
  const std::string p = root + "/llama.cpp/b11434/bin/llama-server";
  return ::stat(p.c_str(), &st) == 0 ? p : "";
}

#define KVGATE_SKIP_UNLESS_LLAMA_SERVER()                                                                   \
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();                                                                       \
  if (::kvgate::testing::llama_server_binary().empty())                                                     \
  GTEST_SKIP() << "llama-server (llama.cpp b11434) is not built: run scripts/fetch-llama-cpp (scripts/test " \
                  "does), or point KVGATE_LLAMA_CPP_BIN at a directory holding llama-server"

class LlamaServer {
 public:
  // `kv_args`: the cache flags, e.g. {"-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"}. Small
  // context, two slots, one thread: two servers share a 2-core CI machine.
  explicit LlamaServer(std::vector<std::string> kv_args, std::string log_path) : log_(std::move(log_path)) {
    std::vector<std::string> args = {llama_server_binary(), "-m", default_model_file(), "--host", "127.0.0.1",
                                     "--port", "0", "-c", "4096", "-np", "2", "-t", "1", "--no-webui"};
    args.insert(args.end(), kv_args.begin(), kv_args.end());
    // Emptied before the child starts, so an earlier server's log line is never read as this one's port.
    std::ofstream(log_, std::ios::trunc).close();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~LlamaServer() { kill(); }
  LlamaServer(const LlamaServer&) = delete;
  LlamaServer& operator=(const LlamaServer&) = delete;

  // Waits until the server listens and has loaded the model; "" with the log's tail on failure.
  std::string wait_ready(std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "";
      }
      if (url_.empty()) {
        std::smatch m;
        const std::string log = slurp(log_);
        if (std::regex_search(log, m, listening)) url_ = "http://127.0.0.1:" + m[1].str();
      }
      if (!url_.empty()) {
        serving::HttpRequest r;
        r.endpoint = "health";
        r.method = "GET";
        r.url = url_ + "/health";
        r.timeouts.total = std::chrono::milliseconds(5000);
        try {
          serving::fetch(r, serving::RetryPolicy{1, {}, {}});
          return url_;
        } catch (const std::exception&) {
          // 503 while the model loads
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "";
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  const std::string& url() const { return url_; }
  std::string log_tail() const {
    const std::string log = slurp(log_);
    return log.size() > 2000 ? log.substr(log.size() - 2000) : log;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  std::string url_;
};

}  // namespace kvgate::testing
