// Architecture metadata beyond Llama: the sliding-window pattern (default per architecture or
// stored), per-sequence KV bytes with local layers, RoPE layout and scaling keys, and the
// checks that keep a backend from running a model it does not implement.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/backend.h"
#include "runtime/gguf.h"
#include "runtime/model.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime {
namespace {

using kvgate::testing::GgufWriter;
using namespace kvgate::testing;

std::vector<uint8_t> gemma_like(int layers, bool with_window, const std::vector<uint8_t>* pattern = nullptr) {
  GgufWriter w;
  w.add_string("general.architecture", "gemma3");
  w.add<uint32_t>("gemma3.block_count", kU32, static_cast<uint32_t>(layers));
  w.add<uint32_t>("gemma3.embedding_length", kU32, 640);
  w.add<uint32_t>("gemma3.attention.head_count", kU32, 4);
  w.add<uint32_t>("gemma3.attention.head_count_kv", kU32, 1);
  w.add<uint32_t>("gemma3.attention.key_length", kU32, 256);
  w.add<uint32_t>("gemma3.attention.value_length", kU32, 256);
  w.add<uint32_t>("gemma3.feed_forward_length", kU32, 2048);
  w.add<float>("gemma3.rope.freq_base", kF32, 1e6f);
  if (with_window) w.add<uint32_t>("gemma3.attention.sliding_window", kU32, 512);
  if (pattern) w.add_array<uint8_t>("gemma3.attention.sliding_window_pattern", kBool, *pattern);
  return w.finish();
}

TEST(SlidingWindowArch, GemmaThreeDefaultsToFiveLocalLayersPerGlobalOne) {
  const std::vector<uint8_t> bytes = gemma_like(18, true);
  const ModelArch a = read_model_arch(GgufFile::parse(bytes, "gemma.gguf"));
  EXPECT_EQ(a.sliding_window, 512u);
  EXPECT_EQ(a.n_swa_layers(), 15u);
  for (uint32_t l = 0; l < 18; ++l) EXPECT_EQ(a.is_swa(l), l % 6 != 5) << l;
  EXPECT_EQ(a.rope_layout, RopeLayout::halves);
  EXPECT_EQ(a.rope_base_swa, 10000.0f);
  // f16: 1 KV head x (256 + 256) x 2 bytes = 1024 bytes per layer and token.
  EXPECT_EQ(a.kv_bytes_per_token(2.0), 18u * 1024u);
  EXPECT_EQ(a.kv_bytes_for_context(2.0, 100), 18u * 1024u * 100u);  // inside the window: every layer
  EXPECT_EQ(a.kv_bytes_for_context(2.0, 4096), (3u * 4096u + 15u * 512u) * 1024u);
}

TEST(SlidingWindowArch, StoredPatternWinsAndNoWindowMeansGlobal) {
  const std::vector<uint8_t> pattern = {1, 0, 1, 1};
  const std::vector<uint8_t> stored = gemma_like(4, true, &pattern);
  const ModelArch a = read_model_arch(GgufFile::parse(stored, "gemma.gguf"));
  EXPECT_EQ(a.layer_swa, (std::vector<bool>{true, false, true, true}));
  const std::vector<uint8_t> none = gemma_like(6, false);
  EXPECT_EQ(read_model_arch(GgufFile::parse(none, "gemma.gguf")).n_swa_layers(), 0u);
  const std::vector<uint8_t> short_pattern = {1, 0};
  const std::vector<uint8_t> bad = gemma_like(4, true, &short_pattern);
  EXPECT_THROW(read_model_arch(GgufFile::parse(bad, "gemma.gguf")), Error);
}

TEST(SlidingWindowArch, LlamaIgnoresASlidingWindowKeyAsLlamaCppDoes) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add<uint32_t>("llama.block_count", kU32, 2);
  w.add<uint32_t>("llama.embedding_length", kU32, 64);
  w.add<uint32_t>("llama.attention.head_count", kU32, 4);
  w.add<uint32_t>("llama.attention.sliding_window", kU32, 4096);
  w.add_string("llama.rope.scaling.type", "linear");
  w.add<float>("llama.rope.scaling.factor", kF32, 2.0f);
  const std::vector<uint8_t> bytes = w.finish();
  const ModelArch a = read_model_arch(GgufFile::parse(bytes, "mistral.gguf"));
  EXPECT_EQ(a.n_swa_layers(), 0u);
  EXPECT_EQ(a.rope_layout, RopeLayout::adjacent_pairs);
  EXPECT_EQ(a.rope_scaling, "linear");
  EXPECT_EQ(a.rope_freq_scale, 0.5f);
}

std::string tiny(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name; }

TEST(GpuForwardSupport, OnlyPlainLlamaBlocksPass) {
  const auto llama3 = Model::load(tiny("tiny-llama3.gguf"));
  EXPECT_NO_THROW(require_gpu_forward_support(*llama3, "cuda"));
  for (const char* name : {"tiny-qwen2.gguf", "tiny-qwen3.gguf"}) {
    const auto m = Model::load(tiny(name));
    try {
      require_gpu_forward_support(*m, "cuda");
      ADD_FAILURE() << name << " passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(m->arch().arch + " model has"), std::string::npos) << e.what();
    }
  }
}

TEST(ModelKvCacheSplit, SlidingWindowLayersGetTheirOwnWindowedCache) {
  // Gemma-like layer pattern on a tiny model's weights is not needed: the split is by arch.
  const auto qwen3 = Model::load(tiny("tiny-qwen3.gguf"));
  auto cache = qwen3->make_cache(kernels::parse_kv_config("f16"), 64);
  EXPECT_EQ(cache->local(), nullptr);
  EXPECT_EQ(cache->full().n_layers(), 2);
  EXPECT_EQ(cache->full().shape().window, 0);
}

}  // namespace
}  // namespace kvgate::runtime
