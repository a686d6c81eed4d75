#include "harness/inference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include "core/cpu_time.h"
#include "core/error.h"
#include "runtime/model_store.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {

LoadedModel load_model(const std::string& model_flag) {
  LoadedModel lm;
  lm.model = runtime::Model::load(runtime::resolve_model_path(model_flag));
  lm.tokenizer = lm.model->files().tokenizer();
  return lm;
}

void teacher_force(runtime::Backend& backend, const kernels::KvConfig& config,
                   const std::vector<int32_t>& tokens, int chunk_tokens, int64_t first_scored,
                   const std::function<void(int64_t, const float*)>& on_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const size_t vocab = backend.arch().n_vocab;
  const std::unique_ptr<runtime::BackendSequence> seq = backend.start(config, n);
  std::vector<float> logits;
  for (int64_t start = 0; start < n; start += chunk_tokens) {
    const int64_t len = std::min<int64_t>(chunk_tokens, n - start);
    logits.resize(static_cast<size_t>(len) * vocab);
    backend.forward(*seq, std::span<const int32_t>(tokens.data() + start, static_cast<size_t>(len)), true, logits.data());
    for (int64_t i = 0; i < len; ++i) {
      const int64_t pos = start + i;
      if (pos >= first_scored && pos + 1 < n) on_logits(pos, logits.data() + static_cast<size_t>(i) * vocab);
    }
  }
}

GreedyTokens greedy_decode(runtime::Backend& backend, runtime::BackendSequence& seq, std::vector<float> logits,
                           int max_new, const std::function<bool(int32_t)>& stops,
                           const std::function<void(int32_t)>& on_token) {
  GreedyTokens out;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = work_cpu_seconds();
  for (int g = 0; g < max_new; ++g) {
    int32_t best = 0;
    for (size_t t = 1; t < logits.size(); ++t)
      if (logits[t] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(t);
    out.token_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    // A poll the scheduler cut short is counted in full (core/thread_pool.h), so the net clock
    // can step back by a few microseconds: the series is kept non-decreasing.
    const double cpu = 1e3 * (work_cpu_seconds() - cpu0);
    out.token_cpu_ms.push_back(out.token_cpu_ms.empty() ? std::max(0.0, cpu) : std::max(out.token_cpu_ms.back(), cpu));
    if (stops && stops(best)) break;
    out.tokens.push_back(best);
    if (on_token) on_token(best);
    if (g + 1 < max_new) backend.forward(seq, std::span<const int32_t>(&best, 1), false, logits.data());
  }
  return out;
}

std::vector<int32_t> perplexity_tokens(const LoadedModel& lm, const std::string& text, const std::string& source) {
  std::vector<int32_t> tokens = lm.tokenizer.encode(text, false, source);
  if (lm.tokenizer.add_bos() && lm.tokenizer.bos_id()) tokens.insert(tokens.begin(), *lm.tokenizer.bos_id());
  return tokens;
}

namespace {

// One candidate's running sums over the scored positions.
struct CandidateScore {
  scoring::KldAccumulator acc;
  double nll_sum = 0.0, nll_sum2 = 0.0;
  size_t count = 0;
  PerplexityResult result;
};

}  // namespace

std::vector<PerplexityResult> run_perplexity(runtime::Backend& backend, const LoadedModel& lm,
                                             const std::vector<int32_t>& tokens,
                                             const std::vector<kernels::KvConfig>& candidates,
                                             const kernels::KvConfig* ref, const PerplexityOptions& options,
                                             const std::function<void(int done, int total)>& progress) {
  if (options.ctx < 8) throw_usage_error("--ctx must be at least 8 tokens, got " + std::to_string(options.ctx));
  if (candidates.empty()) throw_internal_error("run_perplexity: no candidate config");
  const int64_t available = static_cast<int64_t>(tokens.size()) / options.ctx;
  if (available == 0)
    throw_usage_error("the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of --ctx " +
                      std::to_string(options.ctx));
  const int chunks = static_cast<int>(options.max_chunks > 0 ? std::min<int64_t>(available, options.max_chunks) : available);
  const auto t0 = std::chrono::steady_clock::now();
  const size_t vocab = lm.model->arch().n_vocab;
  const int64_t first = options.ctx / 2;

  std::vector<CandidateScore> scores(candidates.size());
  std::vector<float> ref_rows;  // only the scored rows of one chunk: [ctx - first - 1][vocab]
  std::vector<double> log_probs(vocab);
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(c) * options.ctx,
                               tokens.begin() + static_cast<int64_t>(c + 1) * options.ctx);
    if (lm.tokenizer.add_bos() && lm.tokenizer.bos_id()) chunk[0] = *lm.tokenizer.bos_id();
    if (ref) {
      ref_rows.assign(static_cast<size_t>(options.ctx - first - 1) * vocab, 0.0f);
      teacher_force(backend, *ref, chunk, options.batch, first, [&](int64_t pos, const float* row) {
        std::copy(row, row + vocab, ref_rows.begin() + static_cast<int64_t>(pos - first) * static_cast<int64_t>(vocab));
      });
    }
    for (size_t k = 0; k < candidates.size(); ++k) {
      CandidateScore& s = scores[k];
      teacher_force(backend, candidates[k], chunk, options.batch, first, [&](int64_t pos, const float* row) {
        const uint32_t target = static_cast<uint32_t>(chunk[static_cast<size_t>(pos + 1)]);
        std::span<const float> q(row, vocab);
        if (ref) {
          std::span<const float> r(ref_rows.data() + static_cast<size_t>(pos - first) * vocab, vocab);
          const scoring::PositionComparison cmp = scoring::compare_position(r, q, target, options.kld);
          s.acc.add(cmp);
          s.nll_sum += cmp.nll_q;
          s.nll_sum2 += cmp.nll_q * cmp.nll_q;
        } else {
          scoring::log_softmax(q, log_probs);
          const double nll = -log_probs[target];
          s.nll_sum += nll;
          s.nll_sum2 += nll * nll;
        }
        ++s.count;
      });
      s.result.chunk_ppl.push_back(std::exp(s.nll_sum / static_cast<double>(s.count)));
    }
    if (progress) progress(c + 1, chunks);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<PerplexityResult> results;
  for (CandidateScore& s : scores) {
    PerplexityResult& r = s.result;
    r.has_ref = ref != nullptr;
    r.chunks = chunks;
    r.scored_tokens = s.count;
    const scoring::ValueWithError nll = scoring::llama_mean_and_uncertainty(s.nll_sum, s.nll_sum2, s.count);
    r.ppl.value = std::exp(nll.value);
    r.ppl.error = r.ppl.value * nll.error;
    if (ref) r.kld = s.acc.report();
    r.seconds = seconds;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace kvgate::harness
