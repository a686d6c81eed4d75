#pragma once
// A fixed pool with static partitioning. Work is split into the same contiguous ranges for a
// given (n, thread count) every time, so any per-range reduction the caller does in range order
// is bit-reproducible — the determinism contract of docs/design.md.
//
// Decode calls run() a few hundred times per token, each part lasting tens of microseconds, so
// a hand-off must cost far less than that: workers spin briefly on an atomic generation counter
// before they sleep (futex, via std::atomic::wait), and the job is passed by reference, never
// copied into a std::function (which would allocate for most lambdas).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvgate {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Seconds that every pool's threads have spent polling for a hand-off since the process
  // started, each poll counted up to the polling limit (what it can burn; a poll the scheduler
  // interrupted burned less than its wall time). core/cpu_time.h takes it off the process's CPU
  // time. Each thread adds to a slot of its own, so counting costs no shared cache line.
  static double polled_seconds();

  // Calls fn(part, begin, end) for part = 0..size()-1 over [0, n) split into equal contiguous
  // ranges (the caller's thread runs part 0; a part may be empty). Returns when all parts are
  // done; rethrows the exception of the lowest part that raised one. Not reentrant: fn must
  // not call run() on the same pool.
  template <class Fn>
  void run(size_t n, Fn&& fn) {
    using Callable = std::remove_reference_t<Fn>;
    run_job(n, Job{const_cast<void*>(static_cast<const void*>(&fn)), [](void* f, int part, size_t b, size_t e) {
                     (*static_cast<Callable*>(f))(part, b, e);
                   }});
  }

 private:
  struct Job {
    void* fn = nullptr;
    void (*call)(void*, int, size_t, size_t) = nullptr;
  };
  void run_job(size_t n, Job job);
  void worker_loop(int index);
  void run_part(int part);

  std::vector<std::thread> workers_;
  Job job_;
  size_t n_ = 0;
  std::vector<std::exception_ptr> errors_;  // one slot per part
  // generation_ announces a job (written after job_ and n_, read before them); pending_ counts
  // the workers still running it.
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvgate
