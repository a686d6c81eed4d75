#pragma once
// What the inference commands share: a loaded model with its tokenizer, and the two passes
// that teacher-force a token sequence through a KV config (perplexity, KLD against a reference).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kv_config.h"
#include "runtime/backend.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"
#include "scoring/kld_report.h"

namespace kvgate::harness {

struct LoadedModel {
  std::unique_ptr<runtime::Model> model;
  runtime::Tokenizer tokenizer;
};

// --model PATH or the cached default model.
LoadedModel load_model(const std::string& model_flag);

// One config's pass over a token sequence with a fresh cache: logits[i] predicts tokens[i+1].
// Calls on_logits(i, logits_row) for positions [first_scored, n-1), in order.
void teacher_force(runtime::Backend& backend, const kernels::KvConfig& config,
                   const std::vector<int32_t>& tokens, int chunk_tokens, int64_t first_scored,
                   const std::function<void(int64_t, const float*)>& on_logits);

// Greedy decoding, the one loop of `generate` and of the eval's greedy answers: from `logits`
// (the row that predicts the next token of `seq`), up to max_new tokens, the lowest id winning
// a tie; it stops before a token for which `stops(id)` is true (that token is neither kept nor
// fed back). token_ms[i]: when token i was chosen, ms after the call began; a stopping token
// gets a time too (it ends the answer, so it is part of the last token's latency). on_token
// sees each kept token as it is chosen (a live display). The last kept token is not fed back.
struct GreedyTokens {
  std::vector<int32_t> tokens;
  std::vector<double> token_ms;
  // The CPU time of the work (core/cpu_time.h) spent by each token's emission, ms from the
  // decode's start: latency as the work, whatever share of the machine the process got.
  std::vector<double> token_cpu_ms;
};
GreedyTokens greedy_decode(runtime::Backend& backend, runtime::BackendSequence& seq, std::vector<float> logits,
                           int max_new, const std::function<bool(int32_t)>& stops,
                           const std::function<void(int32_t)>& on_token = {});

struct PerplexityOptions {
  int ctx = 512;           // tokens per chunk (llama.cpp's -c)
  int max_chunks = 0;      // 0 = all
  int batch = 512;         // tokens per forward call inside a chunk
  scoring::KldDefinition kld = scoring::KldDefinition::kLlamaCpp;
};

// The token sequence llama-perplexity scores for a text: special-token text kept as plain text,
// and a BOS in front when the model's vocabulary asks for one (common_tokenize with
// add_special), so chunk boundaries fall where llama.cpp's do.
std::vector<int32_t> perplexity_tokens(const LoadedModel& lm, const std::string& text, const std::string& source);

struct PerplexityResult {
  int chunks = 0;
  size_t scored_tokens = 0;
  scoring::ValueWithError ppl;            // candidate config
  std::vector<double> chunk_ppl;          // running value after each chunk, as llama.cpp prints
  bool has_ref = false;
  scoring::KldReport kld;                 // when a reference config was given
  double seconds = 0.0;                   // the whole run, shared by all candidates
};

// llama.cpp's definition: the text is cut into chunks of ctx tokens, each evaluated from an
// empty cache with its first token replaced by BOS when the model uses one, and only the second
// half of each chunk is scored (positions ctx/2 .. ctx-2 predict the next token). With `ref`,
// the reference pass runs on each chunk once, right before the candidates, in the same
// process, and only the scored rows of its logits are kept (never the whole text's). One
// result per candidate, in order; each is bit-identical to a run with that candidate alone.
std::vector<PerplexityResult> run_perplexity(runtime::Backend& backend, const LoadedModel& lm,
                                             const std::vector<int32_t>& tokens,
                                             const std::vector<kernels::KvConfig>& candidates,
                                             const kernels::KvConfig* ref, const PerplexityOptions& options,
                                             const std::function<void(int done, int total)>& progress);

}  // namespace kvgate::harness
