#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvgate {

namespace {

void part_range(size_t n, int parts, int part, size_t& begin, size_t& end) {
  begin = n * static_cast<size_t>(part) / static_cast<size_t>(parts);
  end = n * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long a thread keeps polling before it sleeps. Long enough to cover the serial work
// between two calls within one forward pass (norms, RoPE, the K/V append: a few microseconds),
// short enough that an idle pool costs nothing measurable between forward passes.
constexpr auto kSpinFor = std::chrono::microseconds(50);

// Polls until `done()` holds or the spin time is over; true when it holds.
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  errors_.resize(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_part(int part) {
  try {
    size_t b, e;
    part_range(n_, size(), part, b, e);
    job_.call(job_.fn, part, b, e);
  } catch (...) {
    errors_[static_cast<size_t>(part)] = std::current_exception();
  }
}

void ThreadPool::run_job(size_t n, Job job) {
  const int parts = size();
  if (parts == 1 || n <= 1) {
    for (int p = 0; p < parts; ++p) {
      size_t b, e;
      part_range(n, parts, p, b, e);
      if (b < e || p == 0) job.call(job.fn, p, b, e);
    }
    return;
  }
  job_ = job;
  n_ = n;
  std::fill(errors_.begin(), errors_.end(), nullptr);
  pending_.store(parts - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_part(0);
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire))
      pending_.wait(left, std::memory_order_acquire);
  }
  job_ = Job{};
  for (const std::exception_ptr& e : errors_)
    if (e) std::rethrow_exception(e);
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }))
      generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    run_part(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace kvgate
