// WorkerPool: threads start on demand up to the maximum, the most recently idle thread takes the
// next job (so only as many threads as the peak in flight ever run), jobs past the maximum queue
// up to max_pending, and stop() runs what was queued.
#include "kvasir/server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

namespace kvasir::server {
namespace {

using namespace std::chrono_literals;

void wait_all_idle(const WorkerPool& pool) {
  while (pool.idle_threads() < pool.threads_started()) std::this_thread::sleep_for(1ms);
}

TEST(WorkerPool, MostRecentlyIdleThreadTakesTheNextJob) {
  WorkerPool pool(100);
  {  // four threads started at once
    std::latch started(4), release(1);
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(pool.post(
          [&] {
            started.count_down();
            release.wait();
          },
          0));
    started.wait();
    release.count_down();
    wait_all_idle(pool);  // the workers are done with the latches before they go out of scope
  }
  ASSERT_EQ(pool.threads_started(), 4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.post(
        [&] {
          std::lock_guard lk(mu);
          ids.insert(std::this_thread::get_id());
        },
        0));
    wait_all_idle(pool);
  }
  // LIFO: the thread that ran job i is on top of the idle stack when job i+1 is posted, so one
  // thread runs all 50. A FIFO hand-off (a shared condition variable) would rotate through all 4.
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(pool.threads_started(), 4);
}

TEST(WorkerPool, ThreadsNeverExceedPeakConcurrency) {
  WorkerPool pool(64);
  for (int round = 0; round < 20; ++round) {
    std::latch started(8), release(1);
    std::atomic<int> finished{0};
    for (int i = 0; i < 8; ++i)
      ASSERT_TRUE(pool.post(
          [&] {
            started.count_down();
            release.wait();
            finished.fetch_add(1);
          },
          0));
    started.wait();  // 8 in flight at once: 8 threads needed
    release.count_down();
    while (finished.load() < 8) std::this_thread::sleep_for(1ms);
    wait_all_idle(pool);
  }
  EXPECT_EQ(pool.threads_started(), 8);  // every round found the 8 idle threads
}

TEST(WorkerPool, QueuesPastMaxThreadsThenRefuses) {
  WorkerPool pool(2);
  std::latch release(1);
  std::atomic<int> ran{0};
  auto job = [&] {
    release.wait();
    ran.fetch_add(1);
  };
  EXPECT_TRUE(pool.post(job, 2));
  EXPECT_TRUE(pool.post(job, 2));
  EXPECT_TRUE(pool.post(job, 2));   // queued
  EXPECT_TRUE(pool.post(job, 2));   // queued
  EXPECT_FALSE(pool.post(job, 2));  // max_pending reached: dropped
  EXPECT_EQ(pool.threads_started(), 2);
  release.count_down();
  pool.stop();  // runs the queued ones, joins
  EXPECT_EQ(ran.load(), 4);
  EXPECT_FALSE(pool.post(job, 2));  // stopped
}

TEST(WorkerPool, StopWithIdleThreadsReturns) {
  WorkerPool pool(4);
  std::atomic<int> ran{0};
  for (int i = 0; i < 4; ++i) pool.post([&] { ran.fetch_add(1); }, 0);
  std::this_thread::sleep_for(10ms);
  pool.stop();
  pool.stop();  // idempotent
  EXPECT_EQ(ran.load(), 4);
}

}  // namespace
}  // namespace kvasir::server
