#include "harness/eval/sources.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "core/cpu_time.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<TopList> in_process_lists(const std::vector<float>& rows, size_t vocab, const std::vector<int32_t>& span, int k) {
  std::vector<TopList> out(span.size());
  std::vector<double> lp(vocab);
  for (size_t j = 0; j < span.size(); ++j) {
    scoring::log_softmax(std::span<const float>(rows.data() + j * vocab, vocab), lp);
    out[j].top = scoring::top_k_of(lp, static_cast<size_t>(k));
    out[j].target_logprob = lp[static_cast<size_t>(span[j])];
  }
  return out;
}

std::vector<TopList> engine_lists(const serving::ScoreResult& r) {
  std::vector<TopList> out(r.tokens.size());
  for (size_t j = 0; j < r.tokens.size(); ++j) {
    for (const serving::TokenLogprob& t : r.tokens[j].top)
      if (t.id) out[j].top.push_back({*t.id, t.logprob});
    out[j].target_logprob = r.tokens[j].target_logprob;
  }
  return out;
}

struct EngineAnswer {
  std::vector<int32_t> tokens;
  std::vector<double> token_ms;
  std::string text;
  std::optional<int64_t> prompt_tokens, cached_tokens;
};

std::vector<int32_t> ids_without_eos(const serving::Completion& c, const LoadedModel& lm, bool& complete) {
  std::vector<int32_t> ids;
  complete = true;
  for (const serving::StreamedToken& t : c.tokens) {
    if (!t.id) complete = false;
    else ids.push_back(*t.id);
  }
  // The in-process answer stops before the token that ends generation; an engine that streams
  // that token itself gets it dropped here so both answer the same way.
  if (complete && !ids.empty() && lm.tokenizer.ends_generation(ids.back())) ids.pop_back();
  return ids;
}

// No top-k lists: an answer keeps its tokens and their times only, and the engines pay per token
// for lists (llama-server sorts the vocabulary, and turns backend sampling off), which would be
// in TTFT and TPOT.
EngineAnswer engine_greedy(serving::EngineClient& client, const LoadedModel& lm, const std::vector<int32_t>& prompt,
                           int max_new) {
  serving::GenerateRequest g;
  g.prompt_tokens = prompt;
  g.max_tokens = max_new;
  g.top_logprobs = 0;
  g.stream = true;
  serving::GenerationResult res = client.generate(g);
  EngineAnswer a;
  bool ids = true;
  a.tokens = ids_without_eos(res.completion, lm, ids);
  const int64_t streamed = static_cast<int64_t>(res.completion.tokens.size());
  if (client.kind() == serving::EngineKind::llama_server && res.completion.usage.completion_tokens.value_or(0) > streamed) {
    // llama-server streams a token that ends inside a UTF-8 character only with the token that
    // completes it, under that token's id alone, and never one left incomplete at the end; its
    // whole (non-streamed) answer lists every generated id. The same greedy request again, with
    // the prompt cached, gives them; the times stay the stream's.
    serving::GenerateRequest whole = g;
    whole.stream = false;
    a.tokens = ids_without_eos(client.generate(whole).completion, lm, ids);
  }
  if (ids) {
    a.text = lm.tokenizer.decode(a.tokens, false);
  } else {
    // Engines that stream text only (the plain OpenAI API): kvgate's tokenizer gives the ids.
    a.text = res.completion.text;
    a.tokens = lm.tokenizer.encode(a.text, false);
  }
  a.token_ms = std::move(res.token_ms);
  // Nothing streamed (every token withheld, or none generated): the answer arrived at the end.
  if (a.token_ms.empty())
    a.token_ms.push_back(std::chrono::duration<double, std::milli>(res.http.finished - res.http.submitted).count());
  a.prompt_tokens = res.completion.usage.prompt_tokens;
  if (!a.prompt_tokens) a.prompt_tokens = static_cast<int64_t>(prompt.size());
  a.cached_tokens = res.completion.cached_prompt_tokens();
  return a;
}

// Context tokens per forward pass of a prefill: large enough that the batched matmuls run at
// full speed, small enough that their activations stay a few MiB. The chunking is part of the
// arithmetic (a context past it gives other bits than one pass would: docs/perf.md), so it is
// a constant, never sized by the machine, or runs on two machines would not compare.
constexpr size_t kPrefillChunk = 512;

class InProcessSource final : public ConfigSource {
 public:
  InProcessSource(runtime::Backend& backend, const PlannedConfig& config, const LoadedModel& lm)
      : backend_(backend), config_(config), lm_(lm), vocab_(lm.model->arch().n_vocab) {}

  void begin_item(int64_t item_tokens, int max_new_tokens) override {
    // Room for the item plus one greedy answer per scored span (each on a fork).
    seq_ = backend_.start(config_.kv, item_tokens + max_new_tokens + 64);
    last_row_.assign(vocab_, 0.0f);
    pending_prefill_ms_ = pending_prefill_cpu_ms_ = 0;
  }

  void add_context(const std::vector<int32_t>& tokens) override {
    const auto t0 = Clock::now();
    const double cpu0 = work_cpu_seconds();
    // A forward pass holds activations for every token it is given (and a sliding-window cache
    // every token until the pass ends), so a 32k-token document in one pass would need as much
    // memory again as its KV cache. Prefilled in chunks, as engines do (llama.cpp's ubatch,
    // vLLM's chunked prefill), the peak stays flat in context length (docs/perf.md).
    const std::span<const int32_t> all(tokens);
    for (size_t begin = 0; begin < all.size();) {
      size_t n = std::min(kPrefillChunk, all.size() - begin);
      // Never leave one token alone: a one-token pass takes the decode path, whose rounding
      // differs from the batched one, and a context's last token would depend on the chunking.
      if (all.size() - begin - n == 1) ++n;
      backend_.forward(*seq_, all.subspan(begin, n), false, last_row_.data());
      begin += n;
    }
    pending_prefill_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    pending_prefill_cpu_ms_ += std::max(0.0, 1e3 * (work_cpu_seconds() - cpu0));
  }

  Answer answer(int max_new) override {
    // On a fork, so the answer's tokens never enter the item's sequence. TTFT: the new turn's
    // prefill (the prefix stays cached, as in a serving engine) plus the first token.
    const std::unique_ptr<runtime::BackendSequence> fork = seq_->fork(seq_->length());
    GreedyTokens g =
        greedy_decode(backend_, *fork, last_row_, max_new, [this](int32_t id) { return lm_.tokenizer.ends_generation(id); });
    for (double& t : g.token_ms) t += pending_prefill_ms_;
    for (double& t : g.token_cpu_ms) t += pending_prefill_cpu_ms_;
    pending_prefill_ms_ = pending_prefill_cpu_ms_ = 0;
    Answer a;
    a.text = lm_.tokenizer.decode(g.tokens, false);
    a.tokens = std::move(g.tokens);
    a.token_ms = std::move(g.token_ms);
    a.token_cpu_ms = std::move(g.token_cpu_ms);
    return a;
  }

  void score_span(const std::vector<int32_t>& span, SpanDistributions& out) override {
    const size_t n = span.size();
    // rows[j] predicts span[j]: row 0 is the row before the span, rows 1..n the forward pass's.
    out.rows.resize((n + 1) * vocab_);
    std::copy(last_row_.begin(), last_row_.end(), out.rows.begin());
    backend_.forward(*seq_, span, true, out.rows.data() + vocab_);
    std::copy(out.rows.end() - static_cast<std::ptrdiff_t>(vocab_), out.rows.end(), last_row_.begin());
    out.top_k = config_.top_k > 0;
    if (out.top_k) out.lists = in_process_lists(out.rows, vocab_, span, config_.top_k);
  }

 private:
  runtime::Backend& backend_;
  const PlannedConfig& config_;
  const LoadedModel& lm_;
  size_t vocab_;
  std::unique_ptr<runtime::BackendSequence> seq_;
  std::vector<float> last_row_;  // logits that predict the next token to be appended
  double pending_prefill_ms_ = 0, pending_prefill_cpu_ms_ = 0;
};

class EndpointSource final : public ConfigSource {
 public:
  EndpointSource(serving::EngineClient& client, const PlannedConfig& config, const LoadedModel& lm)
      : client_(client), config_(config), lm_(lm) {}

  void begin_item(int64_t, int) override { sent_.clear(); }
  void add_context(const std::vector<int32_t>& tokens) override { sent_.insert(sent_.end(), tokens.begin(), tokens.end()); }

  Answer answer(int max_new) override {
    EngineAnswer e = engine_greedy(client_, lm_, sent_, max_new);
    Answer a;
    a.tokens = std::move(e.tokens);
    a.token_ms = std::move(e.token_ms);
    a.text = std::move(e.text);
    a.prompt_tokens = e.prompt_tokens;
    a.cached_tokens = e.cached_tokens;
    return a;
  }

  void score_span(const std::vector<int32_t>& span, SpanDistributions& out) override {
    out.top_k = true;
    out.lists.clear();
    // The plain OpenAI API returns no prompt logprobs: such a config has answers, no KLD.
    if (client_.kind() != serving::EngineKind::openai)
      out.lists = engine_lists(client_.score({sent_, span, config_.top_k, std::nullopt}));
    sent_.insert(sent_.end(), span.begin(), span.end());
  }

  serving::EngineClient* client() override { return &client_; }

 private:
  serving::EngineClient& client_;
  const PlannedConfig& config_;
  const LoadedModel& lm_;
  std::vector<int32_t> sent_;  // the item's tokens so far: every request's prompt
};

}  // namespace

std::unique_ptr<ConfigSource> make_in_process_source(runtime::Backend& backend, const PlannedConfig& config,
                                                     const LoadedModel& lm) {
  return std::make_unique<InProcessSource>(backend, config, lm);
}

std::unique_ptr<ConfigSource> make_endpoint_source(serving::EngineClient& client, const PlannedConfig& config,
                                                   const LoadedModel& lm) {
  return std::make_unique<EndpointSource>(client, config, lm);
}

}  // namespace kvgate::harness
