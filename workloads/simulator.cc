#include "workloads/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <memory>
#include <vector>

#include "core/error.h"

namespace kvgate::workloads {
namespace {

constexpr int32_t kNone = -1;

// Every chain key the trace can name, in one open-addressing table sized once up front (so
// cells never move): a cell holds the key's block slot while it is cached, kNone once evicted
// (which also records that it was computed before), and is absent if never computed.
class KeyTable {
 public:
  explicit KeyTable(size_t max_keys) {
    size_t cap = 16;
    while (cap < 2 * max_keys) cap *= 2;
    mask_ = cap - 1;
    cells_.assign(cap, Cell{});
  }
  // The value cell for key, or nullptr when the key was never inserted.
  int32_t* find(uint64_t key) {
    for (size_t i = key & mask_;; i = (i + 1) & mask_) {
      Cell& c = cells_[i];
      if (c.state == kEmpty) return nullptr;
      if (c.key == key) return &c.value;
    }
  }
  // The value cell for key, inserted (holding kNone) if absent; `existed` says which.
  int32_t* insert(uint64_t key, bool& existed) {
    for (size_t i = key & mask_;; i = (i + 1) & mask_) {
      Cell& c = cells_[i];
      if (c.state == kEmpty) {
        c.state = kUsed;
        c.key = key;
        existed = false;
        return &c.value;
      }
      if (c.key == key) {
        existed = true;
        return &c.value;
      }
    }
  }

 private:
  static constexpr int32_t kEmpty = 0, kUsed = 1;
  // Key, value and state share a cache line: one miss per probe.
  struct Cell {
    uint64_t key = 0;
    int32_t value = kNone;
    int32_t state = kEmpty;
  };
  size_t mask_ = 0;
  std::vector<Cell> cells_;
};

// Hashed blocks live in slots; unreferenced ones sit on an LRU list (head = evicted first).
// Blocks without a hash (generated tokens, prompts of traces without ids) are only counted.
class BlockPool {
 public:
  BlockPool(int64_t capacity, size_t max_keys) : free_(capacity), table_(max_keys) {}

  int64_t free_blocks() const { return free_; }
  int64_t evictable() const { return evictable_; }

  // The cached block for key, or kNone.
  int32_t find(uint64_t key) {
    const int32_t* cell = table_.find(key);
    return cell ? *cell : kNone;
  }
  bool unreferenced(int32_t slot) const { return slots_[slot].refs == 0; }

  void pin(int32_t slot) {
    Slot& s = slots_[slot];
    if (s.refs++ == 0) unlink(slot);
  }

  // Takes one block (free first, else the least recently used cached one) and returns the
  // tokens of the block it evicted, 0 if none. The caller checked that one is available.
  int64_t take_block() {
    if (free_ > 0) {
      --free_;
      return 0;
    }
    const int32_t victim = lru_head_;
    unlink(victim);
    *slots_[victim].cell = kNone;
    spare_.push_back(victim);
    return slots_[victim].tokens;
  }

  // Caches a block just taken with take_block() under `key`, referenced once. Returns its slot
  // and whether the key had been cached (and evicted) before.
  int32_t insert(uint64_t key, int64_t tokens, bool& cached_before) {
    int32_t* cell = table_.insert(key, cached_before);
    int32_t slot;
    if (!spare_.empty()) {
      slot = spare_.back();
      spare_.pop_back();
    } else {
      slot = static_cast<int32_t>(slots_.size());
      slots_.push_back({});
    }
    slots_[slot] = Slot{cell, tokens, 1, kNone, kNone};
    *cell = slot;
    return slot;
  }

  // Takes n blocks that will hold no hash; returns the tokens of the cached blocks evicted.
  int64_t take_anonymous(int64_t n) {
    const int64_t from_free = std::min(n, free_);
    free_ -= from_free;
    int64_t evicted = 0;
    for (int64_t i = from_free; i < n; ++i) evicted += take_block();
    return evicted;
  }

  void unpin(int32_t slot) {
    Slot& s = slots_[slot];
    if (--s.refs == 0) push_back(slot);
  }

  void release_anonymous(int64_t n) { free_ += n; }

 private:
  struct Slot {
    int32_t* cell = nullptr;  // this block's value cell in the key table
    int64_t tokens = 0;
    int32_t refs = 0;
    int32_t prev = kNone, next = kNone;
  };
  void unlink(int32_t slot) {
    Slot& s = slots_[slot];
    if (s.prev != kNone) slots_[s.prev].next = s.next; else lru_head_ = s.next;
    if (s.next != kNone) slots_[s.next].prev = s.prev; else lru_tail_ = s.prev;
    s.prev = s.next = kNone;
    --evictable_;
  }
  void push_back(int32_t slot) {
    Slot& s = slots_[slot];
    s.prev = lru_tail_;
    s.next = kNone;
    if (lru_tail_ != kNone) slots_[lru_tail_].next = slot; else lru_head_ = slot;
    lru_tail_ = slot;
    ++evictable_;
  }

  int64_t free_;
  int64_t evictable_ = 0;
  KeyTable table_;
  std::vector<Slot> slots_;
  std::vector<int32_t> spare_;
  int32_t lru_head_ = kNone, lru_tail_ = kNone;
};

// A request from admission to completion. Decoding requests are not touched every step: each
// decoding request advances by exactly one token per step (the token budget always covers every
// decode), so its context is entry_context + (step - entry_step) and the batch's total context
// is kept as an aggregate.
struct Running {
  uint32_t request = 0;
  int64_t prefill_left = 0;     // prompt tokens still to compute
  int64_t context = 0;          // tokens in the cache (while prefilling)
  int64_t output_left = 0;      // tokens still to generate (while prefilling)
  int64_t entry_context = 0;    // context when decoding began
  int64_t entry_step = 0;       // step counter when decoding began
  std::vector<int32_t> pinned;  // hashed blocks, prompt order
  int64_t anonymous_blocks = 0;
};

struct Timing {
  double admitted = -1, first_token = -1, finished = -1;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Simulator {
 public:
  Simulator(const Trace& trace, const ModelShape& model, const GpuSpec& gpu, const KvCandidate& kv,
            const SimOptions& opt, SimResult& out)
      : trace_(trace), model_(model), kv_(kv), opt_(opt), out_(out) {
    const double tp = opt.tensor_parallel;
    flops_rate_ = gpu.bf16_flops_per_s * tp;
    bandwidth_ = gpu.bandwidth_bytes_per_s * tp;
    weight_time_ = model.weight_bytes / bandwidth_;
    attention_flops_per_pair_ = 4.0 * model.n_layers * model.n_heads * model.head_dim;
    block_ = out.block_tokens;
    timings_.resize(trace.requests.size());
    key_offsets_.reserve(trace.requests.size() + 1);
    key_offsets_.push_back(0);
    for (const TraceRequest& r : trace.requests) {
      const size_t hashed = std::min<size_t>(r.block_ids.size(), ceil_div(r.input_tokens, block_));
      uint64_t key = 0;
      for (size_t i = 0; i < hashed; ++i) keys_.push_back(key = chain_block_key(key, r.block_ids[i]));
      key_offsets_.push_back(keys_.size());
    }
    pool_ = std::make_unique<BlockPool>(out.kv_blocks, keys_.size());
  }

  void run() {
    const size_t n = trace_.requests.size();
    size_t next_arrival = 0;
    double now = 0;
    uint64_t done = 0;
    uint64_t blocked_at_release = std::numeric_limits<uint64_t>::max();
    while (done < n) {
      while (next_arrival < n && arrival(next_arrival) <= now) waiting_.push_back(next_arrival++);
      bool memory_blocked = false;
      while (!waiting_.empty() && active() < opt_.max_running) {
        // A blocked head stays blocked until some request releases blocks.
        if (blocked_at_release == releases_) {
          memory_blocked = true;
          break;
        }
        const Admission a = try_admit(waiting_.front(), now);
        if (a == Admission::blocked) {
          blocked_at_release = releases_;
          memory_blocked = true;
          break;
        }
        blocked_at_release = std::numeric_limits<uint64_t>::max();
        if (a == Admission::rejected) ++done;
        waiting_.pop_front();
      }
      if (active() == 0) {
        if (next_arrival >= n) break;  // only rejected requests were left
        now = std::max(now, arrival(next_arrival));
        continue;
      }
      out_.peak_running = std::max(out_.peak_running, active());
      if (prefilling_.empty()) {
        const bool watch_arrivals = waiting_.empty() && next_arrival < n && active() < opt_.max_running;
        done += decode_run(now, memory_blocked, watch_arrivals ? arrival(next_arrival)
                                                               : std::numeric_limits<double>::infinity());
      } else {
        done += mixed_step(now, memory_blocked);
      }
    }
  }

  const std::vector<Timing>& timings() const { return timings_; }

 private:
  enum class Admission { admitted, blocked, rejected };

  double arrival(size_t i) const { return trace_.requests[i].arrival_s * opt_.time_scale; }
  int active() const { return static_cast<int>(prefilling_.size() + decoders_); }

  int32_t new_slot() {
    if (!free_slots_.empty()) {
      const int32_t s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
    slots_.emplace_back();
    return static_cast<int32_t>(slots_.size() - 1);
  }

  Admission try_admit(uint32_t index, double now) {
    const TraceRequest& r = trace_.requests[index];
    const int64_t prompt = std::max<int64_t>(r.input_tokens, 1);
    // A sliding-window model's local layers hold min(tokens, window) of this request, counted
    // in blocks of the global layers' size and freed with the request.
    int64_t window_blocks = 0;
    if (out_.kv_window_bytes_per_token > 0) {
      const double window_bytes =
          out_.kv_window_bytes_per_token * static_cast<double>(std::min(prompt + r.output_tokens, out_.sliding_window));
      const double block_bytes = (out_.kv_bytes_per_token - out_.kv_window_bytes_per_token) * block_;
      window_blocks = static_cast<int64_t>(std::ceil(window_bytes / block_bytes));
    }
    const int64_t total_blocks = ceil_div(prompt + r.output_tokens, block_) + window_blocks;
    if (total_blocks > out_.kv_blocks) {
      ++out_.rejected;
      out_.prompt_tokens += r.input_tokens;
      return Admission::rejected;
    }
    const uint64_t* keys = keys_.data() + key_offsets_[index];
    const size_t n_keys = key_offsets_[index + 1] - key_offsets_[index];
    // Present blocks need no new memory; the ones idle on the LRU list cannot also be evicted
    // to make room for this request.
    size_t leading_hits = 0;
    bool prefix_intact = true;
    int64_t present = 0, present_idle = 0;
    for (size_t i = 0; i < n_keys; ++i) {
      const int32_t slot = pool_->find(keys[i]);
      if (slot == kNone) {
        prefix_intact = false;
        continue;
      }
      if (prefix_intact) ++leading_hits;
      ++present;
      if (pool_->unreferenced(slot)) ++present_idle;
    }
    const int64_t need = total_blocks - present;
    if (need > pool_->free_blocks() + pool_->evictable() - present_idle) return Admission::blocked;

    const int32_t id = new_slot();
    Running& run = slots_[id];
    run = Running{};
    run.request = index;
    run.pinned.assign(n_keys, kNone);
    int64_t hit_tokens = 0;
    // Pin every present block before allocating, so making room never evicts one of them.
    for (size_t i = 0; i < n_keys; ++i) {
      const int32_t slot = pool_->find(keys[i]);
      if (slot == kNone) continue;
      pool_->pin(slot);
      run.pinned[i] = slot;
      if (i < leading_hits) hit_tokens += block_token_count(r, block_, i);
    }
    for (size_t i = 0; i < n_keys; ++i) {
      if (run.pinned[i] != kNone) continue;
      int32_t slot = pool_->find(keys[i]);
      if (slot != kNone) {  // the same chain key twice in one prompt
        pool_->pin(slot);
      } else {
        const int64_t tokens = block_token_count(r, block_, i);
        out_.evicted_tokens += pool_->take_block();
        bool cached_before = false;
        slot = pool_->insert(keys[i], tokens, cached_before);
        if (cached_before) out_.recomputed_tokens += tokens;
      }
      run.pinned[i] = slot;
    }
    run.anonymous_blocks = total_blocks - static_cast<int64_t>(n_keys);
    out_.evicted_tokens += pool_->take_anonymous(run.anonymous_blocks);

    out_.prompt_tokens += r.input_tokens;
    out_.hit_tokens += hit_tokens;
    run.context = hit_tokens;
    run.prefill_left = std::max<int64_t>(prompt - hit_tokens, 1);  // the last token always runs
    if (hit_tokens == prompt) run.context = prompt - 1;
    run.output_left = r.output_tokens;
    timings_[index].admitted = now;
    prefilling_.push_back(id);
    return Admission::admitted;
  }

  // Step time, attributed to the resource that set it.
  double step_time(double tokens, double attention_pairs, double kv_bytes) {
    const double t_compute = (2.0 * model_.n_params * tokens + attention_flops_per_pair_ * attention_pairs) / flops_rate_;
    const double t_kv = kv_bytes * kv_.overhead / bandwidth_;
    const double t_memory = weight_time_ + t_kv;
    const double dt = std::max(t_compute, t_memory) + opt_.step_overhead_s;
    if (t_compute >= t_memory) out_.time_compute_s += dt;
    else if (weight_time_ >= t_kv) out_.time_weights_s += dt;
    else out_.time_kv_s += dt;
    ++out_.steps;
    return dt;
  }

  // Total context of the decoding requests at the current step.
  int64_t decode_context() const { return decode_entry_context_ - decode_entry_step_ + decoders_ * step_; }

  // Decode-only stretch: the batch cannot change until a request finishes or (when the queue
  // is empty and there is room) the next request arrives, so steps are timed from aggregates.
  uint64_t decode_run(double& now, bool memory_blocked, double stop_at) {
    const int64_t last_step = finish_queue_.top().first;
    const double batch = static_cast<double>(decoders_);
    while (step_ < last_step) {
      // Each request appends one token and attends over context + 1.
      const double context = static_cast<double>(decode_context());
      const double dt = step_time(batch, context + batch, kv_.bytes_per_token * (context + 2 * batch));
      now += dt;
      if (memory_blocked) out_.memory_blocked_s += dt;
      ++step_;
      if (now >= stop_at) break;
    }
    return retire(now);
  }

  uint64_t mixed_step(double& now, bool memory_blocked) {
    int64_t budget = opt_.max_batch_tokens - decoders_;
    const double context = static_cast<double>(decode_context());
    double tokens = static_cast<double>(decoders_);
    double pairs = context + tokens;
    double kv_tokens = context + 2 * tokens;  // read context + 1, write 1
    chunks_.assign(prefilling_.size(), 0);
    for (size_t i = 0; i < prefilling_.size() && budget > 0; ++i) {
      const Running& r = slots_[prefilling_[i]];
      const int64_t c = std::min(r.prefill_left, budget);
      chunks_[i] = c;
      budget -= c;
      const double cd = static_cast<double>(c), ctx = static_cast<double>(r.context);
      tokens += cd;
      pairs += cd * (ctx + (cd + 1) / 2);  // causal: token j of the chunk sees ctx + j + 1 keys
      kv_tokens += ctx + 2 * cd;           // read the cache once per chunk, write the chunk
    }
    const double dt = step_time(tokens, pairs, kv_.bytes_per_token * kv_tokens);
    now += dt;
    if (memory_blocked) out_.memory_blocked_s += dt;
    ++step_;
    size_t keep = 0;
    for (size_t i = 0; i < prefilling_.size(); ++i) {
      const int32_t id = prefilling_[i];
      Running& r = slots_[id];
      r.context += chunks_[i];
      r.prefill_left -= chunks_[i];
      if (r.prefill_left > 0) {
        prefilling_[keep++] = id;
        continue;
      }
      timings_[r.request].first_token = now;  // the last prompt step samples the first token
      if (r.output_left > 0) r.output_left -= 1;
      r.entry_context = r.context;
      r.entry_step = step_;
      decode_entry_context_ += r.entry_context;
      decode_entry_step_ += r.entry_step;
      ++decoders_;
      finish_queue_.emplace(step_ + r.output_left, id);
    }
    prefilling_.resize(keep);
    return retire(now);
  }

  // Frees finished requests; their prompt blocks stay cached until evicted. Blocks go on the
  // LRU list tail first, so a chain's tail is evicted before its head and a cached prefix
  // stays usable as long as possible.
  uint64_t retire(double now) {
    uint64_t finished = 0;
    while (!finish_queue_.empty() && finish_queue_.top().first <= step_) {
      const int32_t id = finish_queue_.top().second;
      finish_queue_.pop();
      Running& r = slots_[id];
      timings_[r.request].finished = now;
      decode_entry_context_ -= r.entry_context;
      decode_entry_step_ -= r.entry_step;
      --decoders_;
      for (auto it = r.pinned.rbegin(); it != r.pinned.rend(); ++it) pool_->unpin(*it);
      pool_->release_anonymous(r.anonymous_blocks);
      r.pinned.clear();
      free_slots_.push_back(id);
      ++releases_;
      ++finished;
    }
    return finished;
  }

  const Trace& trace_;
  const ModelShape& model_;
  const KvCandidate& kv_;
  const SimOptions& opt_;
  SimResult& out_;
  std::unique_ptr<BlockPool> pool_;
  double flops_rate_ = 0, bandwidth_ = 0, weight_time_ = 0, attention_flops_per_pair_ = 0;
  int block_ = 16;
  std::vector<uint64_t> keys_;
  std::vector<size_t> key_offsets_;
  std::vector<Timing> timings_;
  std::deque<uint32_t> waiting_;
  std::vector<Running> slots_;
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> prefilling_;  // admission order: prefill chunks are served first come first
  std::vector<int64_t> chunks_;
  int64_t step_ = 0;
  int64_t decoders_ = 0;
  int64_t decode_entry_context_ = 0;  // sums over decoding requests
  int64_t decode_entry_step_ = 0;
  // (step at which it finishes, slot); ties finish in slot order, deterministically.
  std::priority_queue<std::pair<int64_t, int32_t>, std::vector<std::pair<int64_t, int32_t>>, std::greater<>>
      finish_queue_;
  uint64_t releases_ = 0;
};

void validate(const ModelShape& model, const GpuSpec& gpu, const KvCandidate& kv, const SimOptions& o) {
  if (!(o.mem_util > 0 && o.mem_util <= 1)) throw_usage_error("--mem-util must be in (0, 1]");
  if (o.tensor_parallel < 1 || o.tensor_parallel > 1024) throw_usage_error("--tp must be in 1..1024");
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale)) throw_usage_error("--time-scale must be a positive number");
  if (o.max_running < 1) throw_usage_error("--max-seqs must be at least 1");
  if (o.max_batch_tokens < o.max_running)
    throw_usage_error("--max-batch-tokens must be at least --max-seqs, so every running request can decode each step");
  if (o.block_tokens < 1 || o.block_tokens > (1 << 20)) throw_usage_error("--block-tokens must be in 1..1048576");
  if (!(o.step_overhead_s >= 0) || !std::isfinite(o.step_overhead_s)) throw_usage_error("step overhead must be >= 0");
  if (!(gpu.mem_bytes > 0 && gpu.bandwidth_bytes_per_s > 0 && gpu.bf16_flops_per_s > 0))
    throw_usage_error("GPU memory, bandwidth and FLOP rate must be positive");
  if (model.n_layers < 1 || model.n_heads < 1 || model.head_dim < 1 || !(model.n_params > 0) || !(model.weight_bytes > 0))
    throw_usage_error("model " + model.name + ": layers, heads, head_dim, parameters and weight bytes must be positive");
  if (!(kv.bytes_per_token > 0) || !std::isfinite(kv.bytes_per_token))
    throw_usage_error("KV config " + kv.name + ": bytes per token must be positive");
  if (!(kv.overhead > 0) || !std::isfinite(kv.overhead))
    throw_usage_error("KV config " + kv.name + ": overhead factor must be positive");
  if (kv.window_bytes_per_token < 0 || kv.window < 0 ||
      (kv.window_bytes_per_token > 0 && !(kv.window_bytes_per_token < kv.bytes_per_token)))
    throw_usage_error("KV config " + kv.name + ": the sliding-window layers' bytes per token must be less than the "
                      "total (the simulator needs at least one global-attention layer)");
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
  return buf;
}

void decide_verdict(SimResult& r) {
  if (!r.weights_fit) {
    r.verdict = "weight-bound";
    r.verdict_reason = "weights (" + gib(r.weight_bytes) + ") leave no room for KV in " + gib(r.usable_bytes) +
                       " of usable memory";
    return;
  }
  const double blocked_share = r.makespan_s > 0 ? r.memory_blocked_s / r.makespan_s : 0;
  const double recompute_share = r.prompt_tokens > 0 ? static_cast<double>(r.recomputed_tokens) / r.prompt_tokens : 0;
  if (r.rejected > 0 || blocked_share >= 0.10 || recompute_share >= 0.05) {
    r.verdict = "KV-bound";
    r.verdict_reason = "KV capacity: requests waited for cache blocks " + percent(blocked_share) +
                       " of the time, " + percent(recompute_share) + " of prompt tokens were recomputed after eviction" +
                       (r.rejected ? ", " + std::to_string(r.rejected) + " requests never fit" : "");
    return;
  }
  const double total = r.time_compute_s + r.time_weights_s + r.time_kv_s;
  auto share = [&](double t) { return percent(total > 0 ? t / total : 0); };
  if (r.time_compute_s >= r.time_weights_s && r.time_compute_s >= r.time_kv_s) {
    r.verdict = "compute-bound";
    r.verdict_reason = "steps limited by FLOPs " + share(r.time_compute_s) + " of the time";
  } else if (r.time_weights_s >= r.time_kv_s) {
    r.verdict = "weight-bound";
    r.verdict_reason = "steps limited by reading weights " + share(r.time_weights_s) + " of the time";
  } else {
    r.verdict = "KV-bound";
    r.verdict_reason = "KV bandwidth: steps limited by reading the cache " + share(r.time_kv_s) + " of the time";
  }
}

}  // namespace

SimResult simulate_capacity(const Trace& trace, const ModelShape& model, const GpuSpec& gpu, const KvCandidate& kv,
                            const SimOptions& options) {
  validate(model, gpu, kv, options);
  SimResult out;
  out.kv_name = kv.name;
  out.kv_bytes_per_token = kv.bytes_per_token;
  out.kv_window_bytes_per_token = kv.window > 0 ? kv.window_bytes_per_token : 0;
  out.sliding_window = kv.window;
  out.kv_bits_per_element = kv.bits_per_element;
  out.overhead = kv.overhead;
  out.weight_bytes = model.weight_bytes;
  out.usable_bytes = gpu.mem_bytes * options.mem_util * options.tensor_parallel;
  out.kv_budget_bytes = std::max(0.0, out.usable_bytes - model.weight_bytes);
  out.block_tokens = trace.block_tokens > 0 ? trace.block_tokens : options.block_tokens;
  // Blocks hold the global layers; sliding-window layers are reserved per request (try_admit).
  out.kv_blocks = static_cast<int64_t>(
      std::floor(out.kv_budget_bytes / ((kv.bytes_per_token - out.kv_window_bytes_per_token) * out.block_tokens)));
  out.kv_token_capacity = out.kv_blocks * out.block_tokens;
  out.weights_fit = out.kv_blocks > 0;
  out.requests = trace.requests.size();
  if (!out.weights_fit) {
    decide_verdict(out);
    return out;
  }

  Simulator sim(trace, model, gpu, kv, options, out);
  sim.run();

  std::vector<double> queue, ttft, tpot;
  double last_finish = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const auto& t = sim.timings()[i];
    if (t.finished < 0) continue;
    const TraceRequest& r = trace.requests[i];
    const double arrival = r.arrival_s * options.time_scale;
    ++out.completed;
    out.output_tokens += r.output_tokens;
    queue.push_back(t.admitted - arrival);
    ttft.push_back(t.first_token - arrival);
    if (r.output_tokens >= 2) tpot.push_back((t.finished - t.first_token) / static_cast<double>(r.output_tokens - 1));
    last_finish = std::max(last_finish, t.finished);
  }
  out.hit_rate = out.prompt_tokens > 0 ? static_cast<double>(out.hit_tokens) / out.prompt_tokens : 0;
  out.queue_delay_s = summarize(std::move(queue));
  out.ttft_s = summarize(std::move(ttft));
  out.tpot_s = summarize(std::move(tpot));
  out.makespan_s = last_finish;
  if (last_finish > 0) {
    out.output_tokens_per_s = static_cast<double>(out.output_tokens) / last_finish;
    out.requests_per_s = static_cast<double>(out.completed) / last_finish;
  }
  decide_verdict(out);
  return out;
}

}  // namespace kvgate::workloads
