// Malformed Hugging Face directories and safetensors files: each is an input error (exit 2)
// naming the file and the problem, never a crash or a model run without part of itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/hf/" + name; }

// A writable copy of a fixture directory, removed at the end of the test.
class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : dir_(fs::path(::testing::TempDir()) / ("kvgate_hf_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir_);
    fs::copy(fixture(name), dir_, fs::copy_options::recursive);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path operator/(const std::string& f) const { return dir_ / f; }
  std::string str() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The message of the input error loading `dir` throws; fails the test if it loads or throws
// another kind.
std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << dir << " loaded";
  return "";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(HfCheckpoint, MissingShardNamesTheIndexAndTheShard) {
  Scratch d("qwen3");
  const nlohmann::json index = nlohmann::json::parse(read_file(d / "model.safetensors.index.json"));
  const std::string shard = index["weight_map"].begin().value().get<std::string>();
  fs::remove(d / shard);
  const std::string e = load_error(d.str());
  EXPECT_HAS(e, "model.safetensors.index.json");
  EXPECT_HAS(e, "shard '" + shard + "' is missing");
}

TEST(HfCheckpoint, WrongDtypeNamesTheShardTensorAndDtype) {
  Scratch d("qwen2");
  std::string bytes = read_file(d / "model.safetensors");
  // BF16 -> I16: the same element size, so the file stays valid safetensors.
  const size_t at = bytes.find("\"BF16\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 6, "\"I16\" ");
  write_file(d / "model.safetensors", bytes);
  const std::string e = load_error(d.str());
  EXPECT_HAS(e, "model.safetensors");
  EXPECT_HAS(e, "has dtype I16; kvgate reads F32, F16 and BF16 weights");
}

TEST(HfCheckpoint, UnknownTensorNameIsRefused) {
  Scratch d("qwen2");
  std::string bytes = read_file(d / "model.safetensors");
  const size_t at = bytes.find("model.norm.weight");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 17, "model.nurm.weight");
  write_file(d / "model.safetensors", bytes);
  const std::string e = load_error(d.str());
  EXPECT_HAS(e, "model.safetensors: at byte ");
  EXPECT_HAS(e, "tensor 'model.nurm.weight' is not part of kvgate's qwen2 forward pass");
}

TEST(HfCheckpoint, UnknownConfigKeyIsRefused) {
  Scratch d("llama3");
  nlohmann::json config = nlohmann::json::parse(read_file(d / "config.json"));
  config["attention_sink_tokens"] = 4;
  write_file(d / "config.json", config.dump());
  const std::string e = load_error(d.str());
  EXPECT_HAS(e, "config.json: attention_sink_tokens: is not a config key kvgate knows for llama");
}

TEST(HfCheckpoint, TruncatedSafetensorsHeader) {
  Scratch d("gemma3");
  const std::string bytes = read_file(d / "model.safetensors");
  write_file(d / "model.safetensors", bytes.substr(0, 200));
  const std::string e = load_error(d.str());
  EXPECT_HAS(e, "model.safetensors: at byte 0: truncated safetensors header");
  write_file(d / "model.safetensors", bytes.substr(0, 5));
  EXPECT_HAS(load_error(d.str()), "shorter than the 8-byte header length");
  // A whole header with the data cut short names the tensor whose bytes are missing.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  write_file(d / "model.safetensors", bytes.substr(0, 8 + n + 16));
  EXPECT_HAS(load_error(d.str()), "extends past the end of the");
}

TEST(HfCheckpoint, RefusedConfigurationsNameTheKey) {
  struct Case {
    const char* fixture;
    nlohmann::json patch;
    const char* message;
  };
  const Case cases[] = {
      {"llama3", {{"model_type", "phi3"}}, "model_type: 'phi3' is not supported"},
      {"llama3", {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 10000.0}}}},
       "rope_parameters.rope_type: 'yarn' is not supported"},
      {"llama3", {{"rope_parameters", {{"rope_type", "longrope"}, {"rope_theta", 10000.0}}}}, "'longrope' is not supported"},
      {"qwen2", {{"num_experts", 8}}, "num_experts: mixture-of-experts models are not supported"},
      {"qwen2", {{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}}}, "quant_method 'gptq'"},
      {"qwen2", {{"quantization_config", {{"quant_method", "awq"}}}}, "quant_method 'awq'"},
      {"qwen2", {{"quantization_config", {{"quant_method", "compressed-tensors"}}}}, "quant_method 'compressed-tensors'"},
      {"gemma3", {{"model_type", "gemma3"}}, "multimodal Gemma 3"},
      {"gemma3", {{"attn_logit_softcapping", 50.0}}, "attn_logit_softcapping"},
      {"mistral", {{"hidden_act", "gelu"}}, "hidden_act: 'gelu' is not supported"},
  };
  for (const Case& c : cases) {
    Scratch d(c.fixture);
    nlohmann::json config = nlohmann::json::parse(read_file(d / "config.json"));
    config.merge_patch(c.patch);
    write_file(d / "config.json", config.dump());
    const std::string e = load_error(d.str());
    EXPECT_HAS(e, "config.json: ");
    EXPECT_HAS(e, c.message);
  }
}

TEST(HfCheckpoint, NotADirectoryOfAModel) {
  Scratch d("qwen2");
  fs::remove(d / "config.json");
  EXPECT_HAS(load_error(d.str()), "no config.json");
  Scratch t("qwen2");
  fs::remove(t / "tokenizer.json");
  try {
    Model::load(t.str())->files().tokenizer();
    ADD_FAILURE() << "no tokenizer.json accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_HAS(std::string(e.what()), "no tokenizer.json");
  }
}

TEST(Safetensors, ValidatesLayout) {
  auto parse = [](const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> bytes(8 + header.size() + data_bytes, 0);
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    return SafetensorsFile::parse(bytes, "t.safetensors");
  };
  auto error_of = [&](const std::string& header, size_t data_bytes) -> std::string {
    try {
      parse(header, data_bytes);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of("{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8), "");
  EXPECT_HAS(error_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8), "holds 4 bytes");
  EXPECT_HAS(error_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4), "extends past the end");
  EXPECT_HAS(error_of("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), "dtype 'Q4'");
  EXPECT_HAS(error_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      12),
             "overlaps");
  EXPECT_HAS(error_of("{\"a\":", 0), "not valid JSON");
  EXPECT_HAS(error_of("[1,2]", 0), "not a JSON object");
}

}  // namespace
}  // namespace kvgate::runtime
