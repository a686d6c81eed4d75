#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

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
}  // namespace kvgate
