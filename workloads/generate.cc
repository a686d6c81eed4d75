#include "workloads/generate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::workloads {
namespace {

// Block ids stay below 2^53 so every JSON reader keeps them exact.
constexpr uint64_t kIdMask = (1ull << 53) - 1;

uint64_t mix(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  uint64_t state = a * 0x9e3779b97f4a7c15ull ^ b;
  uint64_t h = splitmix64(state);
  state ^= c * 0xbf58476d1ce4e5b9ull;
  h ^= splitmix64(state);
  state ^= d * 0x94d049bb133111ebull;
  h ^= splitmix64(state);
  return h & kIdMask;
}

void check_range(const char* flag, double value, double lo, double hi) {
  if (!(value >= lo && value <= hi) || !std::isfinite(value))
    throw_usage_error(std::string(flag) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi));
}

int64_t jittered(Rng& rng, int64_t mean, double jitter) {
  const double f = 1.0 + jitter * (2.0 * rng.uniform() - 1.0);
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(mean) * f)));
}

}  // namespace

Trace generate_agentic_trace(const AgenticOptions& o) {
  check_range("--sessions", o.sessions, 1, 1'000'000);
  check_range("--concurrency", o.concurrency, 1, 1'000'000);
  check_range("--rounds", o.rounds, 1, 10'000);
  if (static_cast<int64_t>(o.sessions) * o.rounds > 10'000'000) throw_usage_error("--sessions x --rounds must be at most 10,000,000");
  check_range("--system-tokens", static_cast<double>(o.system_tokens), 0, 10'000'000);
  check_range("--session-prefix-tokens", static_cast<double>(o.session_prefix_tokens), 0, 10'000'000);
  check_range("--input-tokens", static_cast<double>(o.input_tokens), 1, 10'000'000);
  check_range("--output-tokens", static_cast<double>(o.output_tokens), 1, 10'000'000);
  check_range("--jitter", o.jitter, 0, 0.9);
  check_range("--round-interval-s", o.round_interval_s, 0, 1e6);
  check_range("--session-gap-s", o.session_gap_s, 0, 1e6);
  check_range("--block-tokens", o.block_tokens, 1, 1 << 20);
  const double longest = static_cast<double>(o.system_tokens + o.session_prefix_tokens) +
                         static_cast<double>(o.rounds) * static_cast<double>(o.input_tokens + o.output_tokens) * (1 + o.jitter);
  if (longest > 1e9) throw_usage_error("the last round's prompt would exceed 1e9 tokens; use fewer rounds or tokens");
  // Every round lists an id per block of its whole prompt; keep the trace within memory.
  if (static_cast<double>(o.sessions) * o.rounds * (longest / o.block_tokens + 1) > 2e8)
    throw_usage_error("the trace would hold more than 2e8 block ids; use fewer sessions, rounds or tokens, or larger --block-tokens");

  Trace trace;
  trace.source = "generated";
  trace.format = TraceFormat::kvgate;
  trace.block_tokens = o.block_tokens;
  trace.has_sessions = true;
  const uint64_t shared_owner = mix(o.seed, 0xa11);
  const double session_span = o.rounds * o.round_interval_s + o.session_gap_s;
  for (int s = 0; s < o.sessions; ++s) {
    Rng rng(mix(o.seed, 0x5e55, static_cast<uint64_t>(s)));
    const uint64_t owner = mix(o.seed, 0x0b1, static_cast<uint64_t>(s));
    const int slot = s % o.concurrency;
    const int wave = s / o.concurrency;
    // Slots are staggered across one round interval so rounds do not arrive in lockstep.
    const double start = wave * session_span + o.round_interval_s * slot / o.concurrency;
    int64_t context = o.system_tokens + o.session_prefix_tokens;
    for (int round = 0; round < o.rounds; ++round) {
      TraceRequest r;
      r.session = s;
      r.turn = round + 1;
      const double wobble = 0.1 * o.round_interval_s * (rng.uniform() - 0.5);
      r.arrival_s = std::max(0.0, start + round * o.round_interval_s + (round > 0 ? wobble : 0.0));
      r.input_tokens = context + jittered(rng, o.input_tokens, o.jitter);
      r.output_tokens = jittered(rng, o.output_tokens, o.jitter);
      const int64_t B = o.block_tokens;
      const int64_t n_blocks = (r.input_tokens + B - 1) / B;
      r.block_ids.reserve(static_cast<size_t>(n_blocks));
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t end = (b + 1) * B;
        if (end <= o.system_tokens) {
          r.block_ids.push_back(mix(shared_owner, static_cast<uint64_t>(b)));
        } else if (end <= r.input_tokens) {
          r.block_ids.push_back(mix(owner, static_cast<uint64_t>(b)));
        } else {
          // A partial last block holds different tokens each round: its own id.
          r.block_ids.push_back(mix(owner, static_cast<uint64_t>(b), static_cast<uint64_t>(round) + 1,
                                    static_cast<uint64_t>(r.input_tokens - b * B)));
        }
      }
      context = r.input_tokens + r.output_tokens;
      trace.requests.push_back(std::move(r));
    }
  }
  std::stable_sort(trace.requests.begin(), trace.requests.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return trace;
}

}  // namespace kvgate::workloads
