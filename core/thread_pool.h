#pragma once
// A fixed pool with static partitioning. Work is split into the same contiguous ranges for a
// given (n, thread count) every time, so any per-range reduction the caller does in range order
// is bit-reproducible — the determinism contract of design.md.
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvgate {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(part, begin, end) for part = 0..size()-1 over [0, n) split into equal contiguous
  // ranges (the caller's thread runs part 0). Returns when all parts are done; rethrows the
  // first exception raised by any part.
  void run(size_t n, const std::function<void(int part, size_t begin, size_t end)>& fn);

 private:
  void worker_loop(int index);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int, size_t, size_t)>* job_ = nullptr;
  size_t n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace kvgate
