#include "harness/eval/calibration.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBlockRows = 8;         // rows of the compute block: a short prefill's
constexpr int64_t kColumns = 256;         // columns of each thread's matrix: ~0.6 MB at n_embd 576, in its core's L2
constexpr int kRounds = 16;               // phases per sample, each ended by a barrier
constexpr int64_t kMemoryCap = 64 << 20;  // bytes: beyond every core's private cache, a bounded RSS
// Floating-point work per thread and sample, in multiply-adds: ~0.5 G, ~25 ms on one core of this
// project's VM. Together with one pass over the memory workload a sample is ~40 ms of wall time
// on 2 threads, about 1 % of a smoke item.
constexpr double kComputeMacs = 0.5e9;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

struct Calibration::Part {
  std::vector<float> a, b, c;  // kBlockRows x n_embd, n_embd x kColumns, kBlockRows x kColumns
  double sink = 0;
};

Calibration::Calibration(const CalibrationShape& shape)
    : shape_(shape), barrier_(std::max(1, shape.threads)) {
  shape_.threads = std::max(1, shape_.threads);
  shape_.n_embd = std::max<int64_t>(16, shape_.n_embd);
  const int64_t n = shape_.n_embd;
  rounds_ = kRounds;
  const double macs_per_gemm = static_cast<double>(kBlockRows * n * kColumns);
  gemms_ = std::max(1, static_cast<int>(kComputeMacs / (macs_per_gemm * kRounds)));
  const int64_t bytes = std::clamp<int64_t>(shape_.weight_bytes, n * 4 * kRounds * shape_.threads, kMemoryCap);
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
      "kvgate calibration 1: {} rounds of {} f32 GEMMs {}x{}x{} per thread, then {} rows of {} f32 ({:.1f} MiB) read "
      "once as a matrix-vector product; {} thread{}",
      rounds_, gemms_, kBlockRows, n, kColumns, memory_rows_, n,
      static_cast<double>(memory_rows_ * n * 4) / (1 << 20), shape_.threads, shape_.threads == 1 ? "" : "s");
  for (int t = 1; t < shape_.threads; ++t) workers_.emplace_back([this, t] { worker(t); });
}

Calibration::~Calibration() {
  stop_ = true;
  if (!workers_.empty()) barrier_.arrive_and_wait();
  for (std::thread& t : workers_) t.join();
}

void Calibration::worker(int index) {
  Part& part = *parts_[static_cast<size_t>(index)];
  for (;;) {
    barrier_.arrive_and_wait();  // a sample starts (or the destructor stops the workers)
    if (stop_) return;
    for (int r = 0; r < rounds_; ++r) {
      compute(part);
      barrier_.arrive_and_wait();
      memory(part, index, r);
      barrier_.arrive_and_wait();
    }
  }
}

// C = A B, `gemms_` times, over data that stays in this thread's core caches. The loop order
// keeps one row of B and the block C in L1 while eight rows of A use them.
void Calibration::compute(Part& part) const {
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

// This thread's share of round `round`'s rows of the memory workload, each row dotted with one
// vector: every byte is read once per sample, from wherever the weights would be.
void Calibration::memory(Part& part, int index, int round) const {
  const int64_t n = shape_.n_embd;
  const int64_t round_begin = memory_rows_ * round / rounds_, round_end = memory_rows_ * (round + 1) / rounds_;
  const int64_t span = round_end - round_begin, threads = shape_.threads;
  const int64_t begin = round_begin + span * index / threads, end = round_begin + span * (index + 1) / threads;
  const float* x = vector_.data();
  float total = 0;
  for (int64_t r = begin; r < end; ++r) {
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
  Part& part = *parts_[0];
  results::ItemCalibration out;
  barrier_.arrive_and_wait();  // the workers start
  for (int r = 0; r < rounds_; ++r) {
    const Clock::time_point t0 = Clock::now();
    compute(part);
    barrier_.arrive_and_wait();
    out.compute_ms += ms_since(t0);
    const Clock::time_point t1 = Clock::now();
    memory(part, 0, r);
    barrier_.arrive_and_wait();
    out.memory_ms += ms_since(t1);
  }
  // The workers' results are read only after the last barrier, which orders their writes.
  for (const auto& p : parts_) sink_ += p->sink;
  return out;
}

}  // namespace kvgate::harness
