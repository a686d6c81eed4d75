#pragma once
// The capacity simulator: replays a shape trace against one GPU, one model and one KV config,
// with continuous batching, a token budget per step, chunked prefill, prefix caching by block
// hash and LRU eviction of unreferenced blocks. Step times come from a roofline model; no model
// runs. Deterministic: the same inputs give bit-identical results.
//
// Simplifications, each chosen so the comparison between KV configs stays fair:
// - a request reserves blocks for prompt + output when admitted (no preemption); admission is
//   first come, first served, so a request that does not fit blocks the ones behind it;
// - a block is cached under its hash as soon as its request is admitted, and only prompt blocks
//   that the trace names are cached; generated tokens' blocks are freed at completion;
// - a step's time is max(FLOPs / peak, (weight bytes + KV bytes x format overhead) / bandwidth)
//   plus a fixed per-step overhead.
#include <cstdint>
#include <string>

#include "workloads/presets.h"
#include "workloads/stats.h"
#include "workloads/trace.h"

namespace kvgate::workloads {

struct KvCandidate {
  std::string name;              // canonical spec, for display
  double bytes_per_token = 0;    // K and V over all layers and KV heads, scales and norms included
  double bits_per_element = 0;   // for display
  double overhead = 1.0;         // multiplies the time to read and write this format's cache
  // Sliding-window models: the part of bytes_per_token in sliding-window layers, which keep at
  // most `window` tokens of a request (window_bytes_per_token for presets and GGUF files).
  // Prefix-cache blocks hold the global layers only; each running request also reserves its
  // window for min(prompt + output, window) tokens. Step times still charge full-context reads.
  double window_bytes_per_token = 0;
  int64_t window = 0;
};

struct SimOptions {
  double mem_util = 0.9;           // share of GPU memory the engine may use (vLLM's gpu_memory_utilization)
  int tensor_parallel = 1;         // GPUs; memory, bandwidth and FLOPs add up, weights are split
  double time_scale = 1.0;         // arrival times are multiplied by this (0.5 replays twice as fast)
  int64_t max_batch_tokens = 8192; // tokens per step, decode first, then prefill chunks
  int max_running = 256;           // concurrent requests
  int block_tokens = 16;           // cache block size when the trace has no block ids
  double step_overhead_s = 0.0;    // scheduler and launch time added to every step
};

struct SimResult {
  std::string kv_name;
  double kv_bytes_per_token = 0;
  double kv_window_bytes_per_token = 0;  // KvCandidate::window_bytes_per_token
  int64_t sliding_window = 0;
  double kv_bits_per_element = 0;
  double overhead = 1.0;
  double weight_bytes = 0;
  double usable_bytes = 0;     // mem x mem_util x tensor_parallel
  double kv_budget_bytes = 0;  // usable - weights
  bool weights_fit = false;
  int block_tokens = 0;
  int64_t kv_blocks = 0;
  int64_t kv_token_capacity = 0;

  uint64_t requests = 0;
  uint64_t completed = 0;
  uint64_t rejected = 0;  // need more blocks than the whole cache holds
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;        // prompt tokens served from the prefix cache
  int64_t evicted_tokens = 0;    // tokens in cached blocks evicted to make room
  int64_t recomputed_tokens = 0; // prompt tokens computed again because their cached block was evicted
  int64_t output_tokens = 0;
  double hit_rate = 0;           // hit_tokens / prompt_tokens
  Distribution queue_delay_s;    // arrival to admission
  Distribution ttft_s;
  Distribution tpot_s;           // (finish - first token) / (output - 1), requests with >= 2 output tokens
  double makespan_s = 0;         // first arrival to last completion
  double output_tokens_per_s = 0;
  double requests_per_s = 0;
  double memory_blocked_s = 0;   // time the queue's head waited for KV blocks
  double time_compute_s = 0;     // step time in steps limited by FLOPs
  double time_weights_s = 0;     // ... by reading weights
  double time_kv_s = 0;          // ... by reading and writing the KV cache
  uint64_t steps = 0;
  int peak_running = 0;
  std::string verdict;           // "weight-bound", "KV-bound" or "compute-bound"
  std::string verdict_reason;
};

// Throws a usage error for options out of range (mem_util outside (0, 1], tensor_parallel < 1,
// time_scale <= 0, max_batch_tokens < max_running, ...).
SimResult simulate_capacity(const Trace& trace, const ModelShape& model, const GpuSpec& gpu,
                            const KvCandidate& kv, const SimOptions& options);

}  // namespace kvgate::workloads
