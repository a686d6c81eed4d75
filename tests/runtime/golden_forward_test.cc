// The forward pass against llama.cpp's logits for the same model file (tests/golden/README.md
// says how they were made). llama.cpp multiplies Q4_1 weights with activations quantized to
// Q8_1, kvgate with float activations, so logits agree to a few tenths, not bit for bit; the
// ranking of the top tokens and the log-sum-exp must agree closely.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_config.h"
#include "runtime/model.h"
#include "tests/cli/run_cli.h"

namespace kvgate::runtime {
namespace {

nlohmann::json load_json(const std::string& name) {
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/tests/golden/" + name);
  return nlohmann::json::parse(in);
}

struct Deviation {
  double max_top_logit = 0;   // log-prob deviation over the golden top-k entries
  double max_lse = 0;         // log-sum-exp of the full row
  double sum_top_logit = 0;   // for the mean deviation over all compared entries
  int top_entries = 0;
  int top1_mismatch = 0;
  int positions = 0;
};

Deviation compare_set(const Model& model, const nlohmann::json& set, const char* kv) {
  ThreadPool pool(2);
  Deviation d;
  const size_t vocab = model.arch().n_vocab;
  for (const auto& prompt : set["prompts"]) {
    const std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    auto cache = model.make_cache(kernels::parse_kv_config(kv), static_cast<int64_t>(ids.size()));
    const kernels::SeqId seq = cache->create_sequence();
    std::vector<float> logits(ids.size() * vocab);
    model.forward(pool, *cache, seq, ids, true, logits.data());
    for (const auto& pos : prompt["positions"]) {
      const size_t p = pos["position"].get<size_t>();
      const float* row = logits.data() + p * vocab;
      double mx = row[0];
      for (size_t i = 1; i < vocab; ++i) mx = std::max<double>(mx, row[i]);
      double sum = 0;
      for (size_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - mx);
      const double lse = mx + std::log(sum), gold_lse = pos["lse"].get<double>();
      d.max_lse = std::max(d.max_lse, std::fabs(lse - gold_lse));
      // Compared as log-probabilities: a shift of the whole row changes nothing the model says.
      for (const auto& entry : pos["top"]) {
        const double dev = std::fabs((row[entry[0].get<size_t>()] - lse) - (entry[1].get<double>() - gold_lse));
        d.max_top_logit = std::max(d.max_top_logit, dev);
        d.sum_top_logit += dev;
        ++d.top_entries;
      }
      const int32_t top1 = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      const auto& top = pos["top"];
      // A flip between two tokens whose golden logits are within the expected deviation is not
      // a disagreement about the model; count only clear ones.
      if (top1 != top[0][0].get<int32_t>() && top[0][1].get<double>() - top[1][1].get<double>() > 0.3) ++d.top1_mismatch;
      ++d.positions;
    }
  }
  return d;
}

class GoldenForward : public ::testing::Test {
 protected:
  void SetUp() override {
    KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
    model_ = Model::load(kvgate::testing::default_model_file());
  }
  std::unique_ptr<Model> model_;
};

TEST_F(GoldenForward, F32CacheLogitsMatchLlamaCpp) {
  const nlohmann::json golden = load_json("logits.json");
  const auto& set = golden["sets"][0];
  ASSERT_EQ(set["kv_type"], "f32");
  const Deviation d = compare_set(*model_, set, "f32");
  RecordProperty("max_top_logit_deviation", std::to_string(d.max_top_logit));
  RecordProperty("max_lse_deviation", std::to_string(d.max_lse));
  const double mean_top = d.sum_top_logit / d.top_entries;
  std::printf("golden f32: %d positions, top-%zu log-prob deviation mean %.4f max %.4f, lse max %.4f\n", d.positions,
              golden["top_k"].get<size_t>(), mean_top, d.max_top_logit, d.max_lse);
  EXPECT_GT(d.positions, 30);
  // llama.cpp's own F32-cache and F16-cache runs of this model differ by up to 0.84 in a top-20
  // logit (tests/golden/README.md); its Q8_1 activations account for that size of difference.
  EXPECT_LT(mean_top, 0.15);
  EXPECT_LT(d.max_top_logit, 1.0) << "positions " << d.positions;
  EXPECT_LT(d.max_lse, 0.6);
  EXPECT_EQ(d.top1_mismatch, 0);
}

TEST_F(GoldenForward, GreedyContinuationMatchesLlamaCpp) {
  const nlohmann::json g = load_json("greedy.json");
  std::vector<int32_t> ids = g["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = g["ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  auto cache = model_->make_cache(kernels::parse_kv_config("f32"), static_cast<int64_t>(ids.size() + want.size()));
  const kernels::SeqId seq = cache->create_sequence();
  std::vector<float> logits(model_->arch().n_vocab);
  model_->forward(pool, *cache, seq, ids, false, logits.data());
  // Compare up to the answer's end-of-turn token: after it, llama.cpp keeps sampling a chat
  // that has ended, where tiny numeric differences legitimately pick other tokens.
  size_t compared = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(tok, want[i]) << "greedy step " << i;
    ++compared;
    if (tok == 2) break;  // <|im_end|>
    model_->forward(pool, *cache, seq, std::span<const int32_t>(&tok, 1), false, logits.data());
  }
  EXPECT_GE(compared, 7u);
}

}  // namespace
}  // namespace kvgate::runtime
