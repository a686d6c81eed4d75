#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#ifdef KVGATE_SLOWDOWN_SWITCH
#include <time.h>

#include <cstdlib>
#endif

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

// Polling time per thread, nanoseconds: one cache line per slot, a thread's slot fixed at its
// first poll (threads beyond the slots share, still exactly, through the atomic add).
constexpr size_t kPollSlots = 64;
struct alignas(64) PollSlot {
  std::atomic<int64_t> ns{0};
};
PollSlot g_polled[kPollSlots];
std::atomic<size_t> g_next_slot{0};

PollSlot& my_poll_slot() {
  thread_local PollSlot& slot = g_polled[g_next_slot.fetch_add(1, std::memory_order_relaxed) % kPollSlots];
  return slot;
}

// Polls until `done()` holds or the spin time is over; true when it holds.
template <class Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + kSpinFor;
  bool held = false;
  for (bool polling = true; polling;) {
    for (int i = 0; i < 64 && !held; ++i) {
      held = done();
      if (!held) cpu_relax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (held || now >= deadline) {
      held = held || done();
      const auto polled = std::min<std::chrono::steady_clock::duration>(now - start, kSpinFor);
      my_poll_slot().ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(polled).count(),
                                  std::memory_order_relaxed);
      polling = false;
    }
  }
  return held;
}

#ifdef KVGATE_SLOWDOWN_SWITCH
// A global slowdown on demand, for the latency gate's benchmark (bench/latency-gate-bench): with
// KVGATE_SLOWDOWN=F each part of every job, on its own thread, spins on that thread's CPU clock
// until it has used F times the CPU time its work took, as a runtime F times slower would (the
// forward pass's matmuls, attention and norms all run as jobs here). Only a build configured
// with -DKVGATE_SLOWDOWN_SWITCH=ON has it.
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

class InjectedSlowdown {
 public:
  InjectedSlowdown() : start_(factor() > 1 ? thread_cpu_seconds() : 0) {}
  ~InjectedSlowdown() {
    if (factor() <= 1) return;
    const double until = start_ + factor() * (thread_cpu_seconds() - start_);
    while (thread_cpu_seconds() < until) {
    }
  }

 private:
  static double factor() {
    static const double f = [] {
      const char* v = std::getenv("KVGATE_SLOWDOWN");
      return v ? std::atof(v) : 1.0;
    }();
    return f;
  }
  double start_;
};
#else
struct InjectedSlowdown {};
#endif

}  // namespace

double ThreadPool::polled_seconds() {
  int64_t ns = 0;
  for (const PollSlot& s : g_polled) ns += s.ns.load(std::memory_order_relaxed);
  return 1e-9 * static_cast<double>(ns);
}

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
    [[maybe_unused]] const InjectedSlowdown slowdown{};
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
      if (b < e || p == 0) {
        [[maybe_unused]] const InjectedSlowdown slowdown{};
        job.call(job.fn, p, b, e);
      }
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
