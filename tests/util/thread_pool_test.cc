#include "kvasir/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvasir {

TEST(ThreadPool, RunsEveryThreadOncePerCall) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 1000; ++rep) {
    std::vector<int> hits(4, 0);
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, 4);
      hits[ith]++;
    });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
    std::vector<std::atomic<int>> seen(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) seen[i]++;
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

TEST(ThreadPool, BarrierSeparatesPhases) {
  ThreadPool pool(4);
  std::vector<int> a(4, 0), b(4, 0);
  for (int rep = 0; rep < 200; ++rep) {
    pool.run([&](int ith, int nth) {
      a[ith] = rep;
      pool.barrier();
      int sum = 0;
      for (int i = 0; i < nth; ++i) sum += a[i] == rep;
      b[ith] = sum;
      pool.barrier();
    });
    for (int x : b) ASSERT_EQ(x, 4);
  }
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  int calls = 0;
  pool.run([&](int ith, int nth) {
    EXPECT_EQ(ith, 0);
    EXPECT_EQ(nth, 1);
    calls++;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace kvasir
