// Hugging Face model directories against transformers (tests/golden/hf/README.md): the tiny
// random models of every supported architecture committed in tests/golden/hf (tokens, chat
// rendering, f32 logits), and the default model's directory that scripts/make-hf-default
// writes (skipped, saying so, when it has not been made).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_config.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/hf_tokenizer.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/hf/" + name; }

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

fs::path kvgate_home() {
  const char* home = std::getenv("KVGATE_HOME");
  return home && *home ? fs::path(home) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/") / ".cache" / "kvgate";
}

std::vector<int32_t> with_bos(const Tokenizer& tok, std::vector<int32_t> ids) {
  if (tok.add_bos() && tok.bos_id() && (ids.empty() || ids.front() != *tok.bos_id())) ids.insert(ids.begin(), *tok.bos_id());
  return ids;
}

// Every text's ids, with and without the special tokens transformers adds (BOS).
void check_tokens(const Tokenizer& tok, const nlohmann::json& golden) {
  int checked = 0;
  for (const auto& t : golden["tokens"]) {
    const std::string text = t["text"].get<std::string>();
    const std::vector<int32_t> ids = tok.encode(text, true);
    EXPECT_EQ(ids, t["ids"].get<std::vector<int32_t>>()) << "text: \"" << text << "\"";
    EXPECT_EQ(with_bos(tok, ids), t["ids_with_special"].get<std::vector<int32_t>>()) << "text: \"" << text << "\"";
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

struct Deviation {
  double max_logit = 0;    // over full rows, where the fixture has them
  double max_logprob = 0;  // over the top-20
  double max_lse = 0;
  int top1_mismatch = 0;
  int positions = 0;
};

Deviation compare_logits(const Model& model, const nlohmann::json& golden, double tie_margin) {
  ThreadPool pool(2);
  Deviation d;
  const size_t vocab = model.arch().n_vocab;
  for (const auto& prompt : golden["prompts"]) {
    const std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    auto cache = model.make_cache(kernels::parse_kv_config("f32"), static_cast<int64_t>(ids.size()));
    const kernels::SeqId seq = cache->create_sequence();
    std::vector<float> logits(ids.size() * vocab);
    model.forward(pool, *cache, seq, ids, true, logits.data());
    for (const auto& pos : prompt["positions"]) {
      const float* row = logits.data() + pos["position"].get<size_t>() * vocab;
      double mx = row[0];
      for (size_t i = 1; i < vocab; ++i) mx = std::max<double>(mx, row[i]);
      double sum = 0;
      for (size_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - mx);
      const double lse = mx + std::log(sum), gold_lse = pos["lse"].get<double>();
      d.max_lse = std::max(d.max_lse, std::fabs(lse - gold_lse));
      const auto& top = pos["top"];
      for (const auto& entry : top)
        d.max_logprob = std::max(d.max_logprob,
                                 std::fabs((row[entry[0].get<size_t>()] - lse) - (entry[1].get<double>() - gold_lse)));
      if (pos.contains("logits") && pos["logits"].is_array()) {
        const auto& full = pos["logits"];
        EXPECT_EQ(full.size(), vocab);
        for (size_t i = 0; i < full.size() && i < vocab; ++i)
          d.max_logit = std::max(d.max_logit, std::fabs(row[i] - full[i].get<double>()));
      }
      const int32_t top1 = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      const double margin = top[0][1].get<double>() - top[1][1].get<double>();
      if (top1 != top[0][0].get<int32_t>() && margin > tie_margin) ++d.top1_mismatch;
      ++d.positions;
    }
  }
  return d;
}

class TinyHf : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyHf, TokensChatAndLogitsMatchTransformers) {
  const std::string name = GetParam();
  const nlohmann::json golden = load_json(fixture(name + ".golden.json"));
  const std::unique_ptr<Model> model = Model::load(fixture(name));
  ASSERT_EQ(model->files().format(), ModelFormat::hf);
  const Tokenizer tok = model->files().tokenizer();
  check_tokens(tok, golden);

  for (const auto& prompt : golden["prompts"]) {
    if (!prompt.contains("rendered")) continue;
    // The chat prompt: kvgate's rendering and ids are transformers' apply_chat_template's.
    std::vector<ChatMessage> messages = {{"system", "You are terse."},
                                         {"user", "What is the capital of France?"},
                                         {"assistant", "Paris."},
                                         {"user", "And of Korea?"}};
    if (model->arch().arch == "gemma3") messages.erase(messages.begin());  // the fixture's template has no system turn
    const std::string text = model->files().chat_template().apply(messages, true);
    EXPECT_EQ(text, prompt["rendered"].get<std::string>());
    EXPECT_EQ(with_bos(tok, tok.encode(text, true)), prompt["ids"].get<std::vector<int32_t>>());
  }

  const Deviation d = compare_logits(*model, golden, 1e-3);
  std::printf("  %s: %d positions, max |logit| deviation %.3g, top-20 log-prob %.3g, lse %.3g\n", name.c_str(),
              d.positions, d.max_logit, d.max_logprob, d.max_lse);
  EXPECT_EQ(d.positions, 8 * static_cast<int>(golden["prompts"].size()));
  // Same weights (stored F32/F16/BF16, widened to float on both sides) and float arithmetic:
  // only summation order differs. A wrong RoPE layout, norm offset, bias or window moves these
  // by tenths or more.
  EXPECT_LT(d.max_logit, 1e-3);
  EXPECT_LT(d.max_logprob, 1e-3);
  EXPECT_LT(d.max_lse, 1e-3);
  EXPECT_EQ(d.top1_mismatch, 0);
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyHf, ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

TEST(TinyHf, ReadsWhatTheConfigSays) {
  const auto llama = Model::load(fixture("llama3"));
  EXPECT_EQ(llama->arch().rope_layout, RopeLayout::halves);
  EXPECT_TRUE(llama->is_plain_llama());  // the GPU backend reorders its Q/K rows (rows_for_adjacent_pairs)
  const auto mistral = Model::load(fixture("mistral"));
  EXPECT_EQ(mistral->arch().n_swa_layers(), mistral->arch().n_layers);
  EXPECT_EQ(mistral->arch().sliding_window, 16u);
  const auto gemma = Model::load(fixture("gemma3"));
  EXPECT_EQ(gemma->arch().n_swa_layers(), 2u);
  EXPECT_FLOAT_EQ(gemma->features().final_logit_softcap, 30.0f);
  EXPECT_FLOAT_EQ(gemma->features().attention_scale, 1.0f / std::sqrt(24.0f));
  const auto qwen3 = Model::load(fixture("qwen3"));
  EXPECT_GT(static_cast<const HfCheckpoint&>(qwen3->files()).shards().size(), 1u);
  EXPECT_EQ(qwen3->files().tensors().front().type, GgmlType::F32);
  EXPECT_EQ(Model::load(fixture("qwen2"))->files().tensors().front().type, GgmlType::BF16);
  EXPECT_EQ(mistral->files().tensors().front().type, GgmlType::F16);
}

TEST(TinyHf, AdjacentPairRowsEqualHalvesRope) {
  // q = W x rotated on halves equals (W with reordered rows) x rotated on adjacent pairs, reordered.
  const auto model = Model::load(fixture("llama3"));
  const WeightMatrix& wq = model->layers()[0].wq;
  const int hd = static_cast<int>(model->arch().head_dim);
  const std::vector<uint8_t> bytes = rows_for_adjacent_pairs(wq, hd);
  WeightMatrix permuted = wq;
  permuted.data = bytes.data();
  std::vector<float> a(static_cast<size_t>(wq.cols)), b(static_cast<size_t>(wq.cols));
  for (int64_t r = 0; r < wq.rows; ++r) {
    const int64_t head = r / hd, in_head = r % hd;
    dequantize_weight_row(permuted, r, a.data());
    dequantize_weight_row(wq, head * hd + in_head / 2 + (in_head % 2) * (hd / 2), b.data());
    ASSERT_EQ(a, b) << "row " << r;
  }
}

// The Llama 3 and Mistral fixtures with their family's real chat template (Llama 3.1 Instruct,
// Mistral 7B Instruct v0.3) as chat_template.jinja: the rendering and ids of transformers'
// apply_chat_template (tests/golden/hf/chat/golden.json, fixture_chats).
TEST(TinyHfChat, RealTemplatesRenderAndTokenizeAsTransformers) {
  const nlohmann::json golden = load_json(fixture("chat/golden.json"));
  int checked = 0;
  for (const auto& c : golden["fixture_chats"]) {
    const fs::path dir = fs::path(::testing::TempDir()) / ("kvgate_hf_chat_" + c["fixture"].get<std::string>());
    fs::remove_all(dir);
    fs::copy(fixture(c["fixture"].get<std::string>()), dir, fs::copy_options::recursive);
    fs::copy_file(fixture("chat/" + c["template"].get<std::string>()), dir / "chat_template.jinja");
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const std::string text = hf_chat_template(dir.string()).apply(messages, true);
    EXPECT_EQ(text, c["text"].get<std::string>()) << c["fixture"];
    const Tokenizer tok = hf_tokenizer(dir.string(), {});
    EXPECT_EQ(with_bos(tok, tok.encode(text, true)), c["ids"].get<std::vector<int32_t>>()) << c["fixture"];
    fs::remove_all(dir);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(DefaultHf, TokensAndLogitsMatchTransformers) {
  const fs::path dir = kvgate_home() / "models" / "SmolLM2-135M-Instruct-hf";
  const fs::path golden_path = kvgate_home() / "models" / "SmolLM2-135M-Instruct-hf.golden.json";
  if (!fs::exists(golden_path))
    GTEST_SKIP() << "the default model's Hugging Face directory is not made (" << golden_path
                 << " missing); run scripts/make-hf-default (scripts/test does)";
  const nlohmann::json golden = load_json(golden_path.string());
  const std::unique_ptr<Model> model = Model::load(dir.string());
  const Tokenizer tok = model->files().tokenizer();
  check_tokens(tok, golden);
  // SmolLM2's ChatML template (with its default system prompt) renders as transformers does.
  const std::vector<ChatMessage> messages = {{"system", "You are terse."},
                                             {"user", "What is the capital of France?"},
                                             {"assistant", "Paris."},
                                             {"user", "And of Korea?"}};
  const std::string text = model->files().chat_template().apply(messages, true);
  EXPECT_EQ(text, golden["prompts"][0]["rendered"].get<std::string>());
  EXPECT_EQ(with_bos(tok, tok.encode(text, true)), golden["prompts"][0]["ids"].get<std::vector<int32_t>>());
  const Deviation d = compare_logits(*model, golden, 0.05);
  std::printf("  default model (bf16 directory): %d positions, top-20 log-prob %.3g, lse %.3g, top-1 mismatches %d\n",
              d.positions, d.max_logprob, d.max_lse, d.top1_mismatch);
  EXPECT_EQ(d.positions, 16);
  // 30 layers of f32 arithmetic in another summation order (OpenBLAS against PyTorch's).
  EXPECT_LT(d.max_logprob, 2e-3);
  EXPECT_LT(d.max_lse, 2e-3);
  EXPECT_EQ(d.top1_mismatch, 0);
}

}  // namespace
}  // namespace kvgate::runtime
