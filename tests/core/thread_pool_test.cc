#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/cpu_time.h"

namespace kvgate {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceInContiguousParts) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 2u, 5u, 1000u}) {
    std::vector<int> hits(n, 0);
    std::vector<std::pair<size_t, size_t>> ranges(pool.size());
    pool.run(n, [&](int part, size_t b, size_t e) {
      ranges[part] = {b, e};
      for (size_t i = b; i < e; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, SamePartitionEveryTime) {
  ThreadPool pool(4);
  std::vector<size_t> first(pool.size()), second(pool.size());
  pool.run(97, [&](int part, size_t b, size_t) { first[part] = b; });
  pool.run(97, [&](int part, size_t b, size_t) { second[part] = b; });
  EXPECT_EQ(first, second);
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(10, [](int part, size_t, size_t) {
                 if (part == 1) throw std::runtime_error("boom");
               }),
               std::runtime_error);
  std::atomic<int> calls{0};
  pool.run(10, [&](int, size_t, size_t) { ++calls; });  // still usable afterwards
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
// The polling that core/cpu_time.h takes off the CPU time: every hand-off a pool waits on adds
// to it, never more than the polling limit per wait, and the work clock stays below the process's.
TEST(ThreadPool, CountsItsPollingForCpuTimeNetOfIt) {
  const double before = ThreadPool::polled_seconds();
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  constexpr int kJobs = 2000;
  for (int j = 0; j < kJobs; ++j) pool.run(2, [&](int, size_t b, size_t e) { sum += static_cast<int64_t>(e - b); });
  EXPECT_EQ(sum.load(), 2 * kJobs);
  const double polled = ThreadPool::polled_seconds() - before;
  EXPECT_GT(polled, 0.0) << "the caller polls for the worker's part of every job";
  EXPECT_LE(polled, 2 * kJobs * 50e-6 + 1e-3) << "at most the 50 us limit per wait, per thread";
  const double work = work_cpu_seconds(), process = process_cpu_seconds();
  EXPECT_LE(work, process);
  EXPECT_GT(process, 0.0);
}

}  // namespace kvgate
