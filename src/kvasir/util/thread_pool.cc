#include "kvasir/util/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVASIR_PAUSE() _mm_pause()
#else
#define KVASIR_PAUSE() ((void)0)
#endif

namespace kvasir {

namespace {
// About 50-100 µs of spinning on Zen 3 before sleeping: longer than the gap between two kernels
// of one decode step, far shorter than the gap between requests.
constexpr int kSpinIterations = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::spin_wait(const std::atomic<uint32_t>& a, uint32_t old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    KVASIR_PAUSE();
  }
  while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

void ThreadPool::run_impl(Trampoline t, void* ctx) {
  if (n_threads_ == 1) {
    t(ctx, 0, 1);
    return;
  }
  tramp_ = t;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  uint32_t done = done_gen_.load(std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  t(ctx, 0, n_threads_);
  spin_wait(done_gen_, done);
}

void ThreadPool::worker_loop(int ith) {
  uint32_t seen = 0;
  for (;;) {
    spin_wait(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    tramp_(ctx_, ith, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      done_gen_.fetch_add(1, std::memory_order_acq_rel);
      done_gen_.notify_one();
    }
  }
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_acq_rel);
    barrier_gen_.notify_all();
    return;
  }
  spin_wait(barrier_gen_, gen);
}

}  // namespace kvasir
