#include "harness/eval/calibration.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBlockRows = 8;         // rows of the prefill part's block
constexpr int64_t kColumns = 256;         // columns of each thread's matrix: ~0.6 MB at n_embd 576, in its core's L2
constexpr int kRounds = 16;               // the prefill part's hand-offs
constexpr int kTokens = 4;                // the decode part's steps
constexpr int64_t kMemoryCap = 64 << 20;  // bytes: beyond every core's private cache, a bounded RSS
// Multiply-adds per thread in the prefill part: ~0.4 G, ~20 ms on one core of this project's VM
// (SSE2, no FMA). With the decode part (4 passes over up to 64 MiB) a sample is ~40 ms of wall
// time on 2 threads.
constexpr double kPrefillMacs = 0.4e9;
// How long a waiting thread polls before it sleeps: core/thread_pool.cc's kSpinFor when this was
// written, kept here as it was so the yardstick does not follow the pool.
constexpr auto kSpinFor = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls `done` for kSpinFor, then sleeps on `word` (std::atomic::wait, a futex) until it holds;
// adds the polling, up to kSpinFor, to `polled_ns` (the pool's accounting, core/thread_pool.h).
template <class T, class Done>
void await(const std::atomic<T>& word, Done done, std::atomic<int64_t>& polled_ns) {
  const Clock::time_point start = Clock::now(), deadline = start + kSpinFor;
  bool held = false;
  Clock::time_point now = start;
  while (!held && now < deadline) {
    for (int i = 0; i < 64 && !held; ++i) {
      held = done();
      if (!held) cpu_relax();
    }
    now = Clock::now();
  }
  const auto polled = std::min<Clock::duration>(now - start, kSpinFor);
  polled_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(polled).count(), std::memory_order_relaxed);
  for (T seen = word.load(std::memory_order_acquire); !done(); seen = word.load(std::memory_order_acquire))
    word.wait(seen, std::memory_order_acquire);
}

}  // namespace

struct Calibration::Part {
  std::vector<float> a, b, c;  // kBlockRows x n_embd, n_embd x kColumns, kBlockRows x kColumns
  double sink = 0;             // every result lands here, so no phase can be optimised away
};

Calibration::Calibration(const CalibrationShape& shape) : shape_(shape) {
  shape_.threads = std::max(1, shape_.threads);
  shape_.n_embd = std::max<int64_t>(16, shape_.n_embd);
  shape_.n_layers = std::max<int64_t>(1, shape_.n_layers);
  const int64_t n = shape_.n_embd;
  rounds_ = kRounds;
  tokens_ = kTokens;
  gemms_ = std::max(1, static_cast<int>(kPrefillMacs / (static_cast<double>(kBlockRows * n * kColumns) * kRounds)));
  hand_offs_ = 4 * shape_.n_layers + 1;
  const int64_t bytes = std::clamp<int64_t>(shape_.weight_bytes, n * 4 * hand_offs_ * shape_.threads, kMemoryCap);
  memory_rows_ = bytes / (n * 4);
  // Values that keep every sum finite and away from denormals, whatever the shape.
  memory_.resize(static_cast<size_t>(memory_rows_ * n));
  for (size_t i = 0; i < memory_.size(); ++i) memory_[i] = 1.0f / static_cast<float>(1 + i % 13);
  vector_.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < vector_.size(); ++i) vector_[i] = 1.0f / static_cast<float>(1 + i % 7);
  for (int p = 0; p < shape_.threads; ++p) {
    auto part = std::make_unique<Part>();
    part->a.resize(static_cast<size_t>(kBlockRows * n));
    part->b.resize(static_cast<size_t>(n * kColumns));
    part->c.resize(static_cast<size_t>(kBlockRows * kColumns));
    for (size_t i = 0; i < part->a.size(); ++i) part->a[i] = 1.0f / static_cast<float>(1 + (i + p) % 11);
    for (size_t i = 0; i < part->b.size(); ++i) part->b[i] = 1.0f / static_cast<float>(1 + (i + p) % 5) - 0.25f;
    parts_.push_back(std::move(part));
  }
  workload_ = fmt::format(
      "kvgate calibration 2: prefill {} hand-offs of {} f32 GEMMs {}x{}x{} per thread; decode {} steps of {} "
      "hand-offs over {} rows of {} f32 ({:.1f} MiB); {} thread{}",
      rounds_, gemms_, kBlockRows, n, kColumns, tokens_, hand_offs_, memory_rows_, n,
      static_cast<double>(memory_rows_ * n * 4) / (1 << 20), shape_.threads, shape_.threads == 1 ? "" : "s");
  for (int t = 1; t < shape_.threads; ++t) workers_.emplace_back([this, t] { worker(t); });
}

Calibration::~Calibration() {
  if (workers_.empty()) return;
  phase_ = Phase::stop;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Calibration::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    await(generation_, [&] { return generation_.load(std::memory_order_acquire) != seen; }, polled_ns_);
    seen = generation_.load(std::memory_order_acquire);
    if (phase_ == Phase::stop) return;
    run_phase(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

// Every thread runs its share of one phase; returns when all have.
void Calibration::hand_off(Phase phase, int64_t first_row, int64_t rows) {
  phase_ = phase;
  first_row_ = first_row;
  rows_ = rows;
  if (workers_.empty()) {
    run_phase(0);
    return;
  }
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_phase(0);
  await(pending_, [this] { return pending_.load(std::memory_order_acquire) == 0; }, polled_ns_);
}

void Calibration::run_phase(int index) {
  Part& part = *parts_[static_cast<size_t>(index)];
  if (phase_ == Phase::prefill) {
    prefill(part);
    return;
  }
  const int64_t threads = shape_.threads;
  decode(part, first_row_ + rows_ * index / threads, rows_ * (index + 1) / threads - rows_ * index / threads);
}

// C = A B, `gemms_` times, over data that stays in this thread's core caches. The loop order
// keeps one row of B and the block C in L1 while eight rows of A use them.
void Calibration::prefill(Part& part) const {
  const int64_t n = shape_.n_embd;
  float* c = part.c.data();
  for (int g = 0; g < gemms_; ++g) {
    std::fill(part.c.begin(), part.c.end(), 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      const float* brow = part.b.data() + k * kColumns;
      for (int64_t i = 0; i < kBlockRows; ++i) {
        const float a = part.a[static_cast<size_t>(i * n + k)];
        float* crow = c + i * kColumns;
        for (int64_t j = 0; j < kColumns; ++j) crow[j] += a * brow[j];
      }
    }
    part.sink += c[static_cast<size_t>(g) % part.c.size()];
  }
}

// Rows [first_row, first_row + rows) of the buffer, each dotted with one vector.
void Calibration::decode(Part& part, int64_t first_row, int64_t rows) const {
  const int64_t n = shape_.n_embd;
  const float* x = vector_.data();
  float total = 0;
  for (int64_t r = first_row; r < first_row + rows; ++r) {
    const float* row = memory_.data() + r * n;
    float acc[8] = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
      for (int l = 0; l < 8; ++l) acc[l] += row[k + l] * x[k + l];
    for (; k < n; ++k) acc[0] += row[k] * x[k];
    for (const float a : acc) total += a;
  }
  part.sink += total;
}

results::ItemCalibration Calibration::sample() {
  results::ItemCalibration out;
  const double c0 = work_cpu_ms();
  for (int r = 0; r < rounds_; ++r) hand_off(Phase::prefill, 0, 0);
  const double c1 = work_cpu_ms();
  for (int t = 0; t < tokens_; ++t)
    for (int64_t h = 0; h < hand_offs_; ++h) {
      const int64_t first = memory_rows_ * h / hand_offs_;
      hand_off(Phase::decode, first, memory_rows_ * (h + 1) / hand_offs_ - first);
    }
  out.prefill_ms = c1 - c0;
  out.decode_ms = work_cpu_ms() - c1;
  return out;
}

// The process's CPU time less this yardstick's polling, ms: core/cpu_time.h's clock, taken here
// from the system so the yardstick shares no code with kvgate.
double Calibration::work_cpu_ms() const {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec) -
         1e-6 * static_cast<double>(polled_ns_.load(std::memory_order_relaxed));
}

}  // namespace kvgate::harness
