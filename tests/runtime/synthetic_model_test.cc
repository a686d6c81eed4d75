// The product's GGUF writer and the synthetic models written with it: files the reader accepts
// value for value, deterministic bytes, and a model the CPU forward runs on with finite logits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/gguf_writer.h"
#include "runtime/model.h"
#include "runtime/synthetic_model.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime {
namespace {

namespace t = kvgate::testing;

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "kvgate_synth_" + std::to_string(::getpid()) + "_" + name;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tokenizer-only GGUF with one value of each kind the copy must carry.
std::string tokenizer_file() {
  t::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b", "c", "ab", "bc", "abc"});
  w.add_array<int32_t>("tokenizer.ggml.token_type", t::kI32, {3, 3, 1, 1, 1, 1, 1, 1});
  w.add_array<float>("tokenizer.ggml.scores", t::kF32, {0, 0, -1, -2, -3, -4, -5, -6.5f});
  w.add<uint32_t>("tokenizer.ggml.bos_token_id", t::kU32, 0);
  w.add<int32_t>("tokenizer.ggml.padding_token_id", t::kI32, -1);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add<uint32_t>("llama.block_count", t::kU32, 99);  // not a tokenizer key: not copied
  const std::string path = temp("tokenizer.gguf");
  t::write_file(path, w.finish());
  return path;
}

TEST(GgufWriter, CopiedValuesReadBackEqual) {
  const GgufFile src = GgufFile::open(tokenizer_file());
  GgufWriter w;
  for (const auto& [key, value] : src.metadata()) w.copy_value(key, value);
  w.add_u32("x.u32", 7);
  w.add_f32("x.f32", 0.25f);
  w.add_bool("x.bool", true);
  const size_t tensor = w.add_tensor("m", GgmlType::Q8_0, {64, 3});
  EXPECT_EQ(w.tensor_bytes(tensor), 3u * 2 * 34);
  const std::string path = temp("copy.gguf");
  w.write(path, [](size_t, uint64_t offset, std::span<uint8_t> out) {
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<uint8_t>(offset + k);
  });
  const GgufFile f = GgufFile::open(path);
  ASSERT_EQ(f.metadata().size(), src.metadata().size() + 3);
  for (const auto& [key, value] : src.metadata()) {
    const GgufValue* got = f.find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(got->type(), value.type()) << key;
  }
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens")->strings[7], "abc");
  EXPECT_EQ(GgufValue::array_float(*f.get_array("tokenizer.ggml.scores"), 7), -6.5);
  EXPECT_EQ(f.find("tokenizer.ggml.padding_token_id")->as_int(), -1);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(f.get_u32("x.u32"), 7u);
  EXPECT_EQ(f.get_f32("x.f32"), 0.25f);
  const GgufTensor* m = f.find_tensor("m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->type, GgmlType::Q8_0);
  ASSERT_EQ(m->n_bytes, 204u);
  for (uint64_t k = 0; k < m->n_bytes; ++k) ASSERT_EQ(m->data[k], static_cast<uint8_t>(k)) << k;
}

TEST(GgufWriter, UnwritablePathIsAnEnvironmentErrorLeavingNothing) {
  GgufWriter w;
  w.add_u32("x", 1);
  try {
    w.write("/nonexistent-kvgate-dir/m.gguf", [](size_t, uint64_t, std::span<uint8_t>) {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-kvgate-dir/m.gguf"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.add_tensor("bad", GgmlType::Q4_K, {128, 2}), Error);  // not whole 256-blocks
}

TEST(SyntheticModel, ShapesParse) {
  EXPECT_EQ(parse_synthetic_shape("llama-3.1-8b").n_layers, 32u);
  const SyntheticShape s = parse_synthetic_shape("llama-3.1-70b-layers=8");
  EXPECT_EQ(s.n_layers, 8u);
  EXPECT_EQ(s.n_embd, 8192u);
  EXPECT_EQ(s.name, "llama-3.1-70b-layers=8");
  EXPECT_EQ(parse_synthetic_shape("qwen3-8b").arch, "qwen3");
  EXPECT_THROW(parse_synthetic_shape("llama-3.1-8b-layers=33"), Error);
  EXPECT_THROW(parse_synthetic_shape("llama-3.1-8b-layers=0"), Error);
  EXPECT_THROW(parse_synthetic_shape("gpt-5"), Error);
  EXPECT_THROW(parse_synthetic_weights("q6_k"), Error);
  // Every shape's matrices are whole Q4_K super-blocks, and its heads divide its width.
  for (const SyntheticShape& sh : synthetic_shapes()) {
    EXPECT_EQ(sh.n_embd % 256, 0u) << sh.name;
    EXPECT_EQ(sh.n_ff % 256, 0u) << sh.name;
    EXPECT_EQ(sh.n_embd % sh.n_heads, 0u) << sh.name;
    EXPECT_EQ(sh.n_heads % sh.n_kv_heads, 0u) << sh.name;
  }
}

TEST(SyntheticModel, DeterministicAndRunsOnTheCpu) {
  const std::string tok = tokenizer_file();
  for (const char* weights : {"f16", "q8_0", "q4_0", "q4_k"}) {
    SyntheticModel m;
    m.shape = parse_synthetic_shape("tiny");
    m.weights = parse_synthetic_weights(weights);
    m.seed = 5;
    m.tokenizer_from = tok;
    const std::string a = temp(std::string(weights) + "_a.gguf"), b = temp(std::string(weights) + "_b.gguf"),
                      c = temp(std::string(weights) + "_c.gguf");
    const SyntheticSummary s = write_synthetic_model(m, a);
    EXPECT_EQ(s.n_vocab, 8u);
    EXPECT_EQ(s.n_tensors, 3u + 2 * 9);
    EXPECT_EQ(s.file_bytes, std::filesystem::file_size(a));
    write_synthetic_model(m, b);
    m.seed = 6;
    write_synthetic_model(m, c);
    EXPECT_EQ(slurp(a), slurp(b)) << weights;
    EXPECT_NE(slurp(a), slurp(c)) << weights;

    const std::unique_ptr<Model> model = Model::load(a);
    EXPECT_TRUE(is_synthetic((*model->files().gguf())));
    EXPECT_FALSE((*model->files().gguf()).find("llama.block_count")->as_uint() == 99u);
    EXPECT_EQ((*model->files().gguf()).get_array("tokenizer.ggml.tokens")->count, 8u);
    ThreadPool pool(2);
    const auto cache = model->make_cache(kernels::parse_kv_config("f16"), 16);
    const kernels::SeqId seq = cache->create_sequence();
    const std::vector<int32_t> tokens = {0, 2, 3, 4, 7, 5};
    std::vector<float> logits(tokens.size() * 8);
    model->forward(pool, *cache, seq, tokens, true, logits.data());
    float spread = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v)) << weights;
      spread = std::max(spread, std::fabs(v - logits[0]));
    }
    EXPECT_GT(spread, 0.0f) << weights << ": random weights give logits that differ";
  }
}

TEST(SyntheticModel, QwenShapeLoadsWithItsNorms) {
  SyntheticModel m;
  m.shape = parse_synthetic_shape("qwen3-8b-layers=1");
  m.shape.n_embd = 256, m.shape.n_heads = 2, m.shape.n_kv_heads = 1, m.shape.n_ff = 256;  // small, same tensors
  m.weights = GgmlType::Q4_0;
  m.tokenizer_from = tokenizer_file();
  const std::string path = temp("qwen.gguf");
  write_synthetic_model(m, path);
  const std::unique_ptr<Model> model = Model::load(path);
  EXPECT_EQ(model->arch().arch, "qwen3");
  EXPECT_FALSE(model->layers()[0].q_norm.empty());
}

}  // namespace
}  // namespace kvgate::runtime
