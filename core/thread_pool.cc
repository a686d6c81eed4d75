#include "core/thread_pool.h"

#include <algorithm>

namespace kvgate {

namespace {
void part_range(size_t n, int parts, int part, size_t& begin, size_t& end) {
  begin = n * static_cast<size_t>(part) / static_cast<size_t>(parts);
  end = n * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(size_t n, const std::function<void(int, size_t, size_t)>& fn) {
  const int parts = size();
  if (parts == 1 || n <= 1) {
    for (int p = 0; p < parts; ++p) {
      size_t b, e;
      part_range(n, parts, p, b, e);
      if (b < e || p == 0) fn(p, b, e);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    n_ = n;
    pending_ = parts - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  std::exception_ptr own_error;
  try {
    size_t b, e;
    part_range(n, parts, 0, b, e);
    fn(0, b, e);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, size_t, size_t)>* job;
    size_t n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    std::exception_ptr err;
    try {
      size_t b, e;
      part_range(n, size(), index, b, e);
      (*job)(index, b, e);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace kvgate
