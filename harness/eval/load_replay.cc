#include "harness/eval/load_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "scoring/latency.h"

namespace kvgate::harness {

namespace {

using Clock = std::chrono::steady_clock;

// Ids a prompt may use: every token but the control ones (BOS/EOS/padding, "<|im_start|>",
// byte tokens "<0x0A>"), so a synthetic prompt never ends a turn or a document by accident.
std::vector<int32_t> ordinary_tokens(const runtime::Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (id == tokenizer.bos_id() || id == tokenizer.eos_id() || id == tokenizer.unk_id() || id == tokenizer.pad_id()) continue;
    const std::string& text = tokenizer.token_text(id);
    if (text.empty() || (text.front() == '<' && text.back() == '>')) continue;
    out.push_back(id);
  }
  if (out.empty()) throw_input_error("the model's vocabulary has no ordinary tokens to build prompts from");
  return out;
}

void append_drawn(std::vector<int32_t>& prompt, const std::vector<int32_t>& pool, uint64_t stream, int64_t count) {
  Rng rng(stream);
  for (int64_t i = 0; i < count; ++i) prompt.push_back(pool[rng.below(pool.size())]);
}

}  // namespace

std::vector<std::vector<int32_t>> synthesize_prompts(const workloads::Trace& trace, const runtime::Tokenizer& tokenizer,
                                                     uint64_t seed) {
  const std::vector<int32_t> pool = ordinary_tokens(tokenizer);
  std::vector<std::vector<int32_t>> out;
  out.reserve(trace.requests.size());
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const workloads::TraceRequest& r = trace.requests[i];
    std::vector<int32_t> prompt;
    prompt.reserve(static_cast<size_t>(r.input_tokens));
    if (trace.block_tokens > 0 && !r.block_ids.empty()) {
      for (size_t b = 0; b < r.block_ids.size(); ++b) {
        const int64_t n = workloads::block_token_count(r, trace.block_tokens, b);
        // A block's tokens depend on its id (and the seed) only; a shorter last block is the
        // same block cut short, so it still shares its start with the full one.
        append_drawn(prompt, pool, seed ^ (r.block_ids[b] * 0x9e3779b97f4a7c15ull + 0x6b76676174650001ull), n);
      }
    }
    // Tokens the block ids do not cover (or a request without them) are the request's own.
    if (static_cast<int64_t>(prompt.size()) < r.input_tokens)
      append_drawn(prompt, pool, seed ^ (0xc0ffee0000000000ull + i), r.input_tokens - static_cast<int64_t>(prompt.size()));
    prompt.resize(static_cast<size_t>(r.input_tokens));
    out.push_back(std::move(prompt));
  }
  return out;
}

std::vector<results::LoadRequest> replay_load(serving::EngineClient& client, serving::HttpClient& http,
                                              const workloads::Trace& trace,
                                              const std::vector<std::vector<int32_t>>& prompts, const LoadReplayRun& run,
                                              const std::function<void(size_t, size_t)>& progress) {
  const size_t n = trace.requests.size();
  if (run.max_inflight > 0) http.set_queue_limit(client.endpoint().name, run.max_inflight);
  std::vector<results::LoadRequest> rows(n);
  size_t done = 0, next = 0;
  const Clock::time_point start = Clock::now();
  auto arrival_ms = [&](size_t i) { return trace.requests[i].arrival_s * run.time_scale * 1000.0; };
  while (next < n || done < n) {
    const double now_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    for (; next < n && arrival_ms(next) <= now_ms; ++next) {
      const size_t i = next;
      const workloads::TraceRequest& tr = trace.requests[i];
      results::LoadRequest& row = rows[i];
      row.request_index = static_cast<int64_t>(i);
      row.arrival_ms = arrival_ms(i);
      row.prompt_tokens = tr.input_tokens;
      row.max_tokens = std::max<int64_t>(1, run.max_output_tokens > 0 ? std::min(tr.output_tokens, run.max_output_tokens)
                                                                        : tr.output_tokens);
      serving::GenerateRequest g;
      g.prompt_tokens = prompts[i];
      g.max_tokens = static_cast<int>(row.max_tokens);
      g.stream = true;
      g.ignore_eos = true;  // the traced output length, not wherever the synthetic text ends
      const Clock::time_point scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                                      std::chrono::duration<double, std::milli>(row.arrival_ms));
      client.submit_generate(g, [&, i, scheduled](serving::GenerationOutcome o) {
        results::LoadRequest& r = rows[i];
        ++done;
        if (progress) progress(done, n);
        r.ok = o.ok;
        r.failure = o.ok ? "" : serving::failure_name(o.failure);
        const double nan = std::nan("");
        r.ttft_ms = r.tpot_ms = r.latency_ms = r.max_gap_ms = nan;
        if (!o.ok) return;
        const serving::Completion& c = o.result.completion;
        r.output_tokens = static_cast<int64_t>(c.tokens.size());
        r.cached_tokens = c.cached_prompt_tokens();
        if (c.usage.prompt_tokens) r.prompt_tokens = *c.usage.prompt_tokens;
        if (o.result.token_ms.empty()) return;
        // From the traced arrival, not from when this loop got round to submitting.
        const double late_ms = std::chrono::duration<double, std::milli>(o.result.http.submitted - scheduled).count();
        std::vector<double> times = o.result.token_ms;
        for (double& t : times) t += std::max(0.0, late_ms);
        const scoring::LatencyBreakdown lat = scoring::derive_latency(times);
        r.ttft_ms = lat.ttft;
        r.tpot_ms = lat.tpot;
        r.latency_ms = lat.latency;
        r.max_gap_ms = lat.gaps.empty() ? nan : lat.gap_max;
      });
    }
    const double wait_ms = next < n ? arrival_ms(next) - now_ms : 50.0;
    http.poll(std::chrono::milliseconds(static_cast<int64_t>(std::clamp(wait_ms, 0.0, 50.0))));
  }
  return rows;
}

}  // namespace kvgate::harness
