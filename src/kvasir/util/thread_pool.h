// Persistent thread pool for the compute kernels.
//
// run(fn) executes fn(ith, nth) on every thread of the pool (the caller is thread 0) and returns
// when all have finished. Workers stay alive between calls and wait with a spin-then-sleep scheme:
// they spin on an atomic generation counter for a short while (a decode step dispatches many
// small jobs back to back, so sleeping between them would cost a futex wake-up each time), then
// fall back to std::atomic::wait (a futex) so an idle pool burns no CPU.
// barrier() may be called by all threads inside fn to separate phases.
// Dispatching does not allocate: the callable is passed by reference.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace kvasir {

class ThreadPool {
 public:
  // n_threads includes the calling thread; n_threads <= 0 means hardware concurrency.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  template <class F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl(
        [](void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end, ith).
  template <class F>
  void parallel_for(int64_t n, F&& fn) {
    run([&](int ith, int nth) {
      int64_t chunk = (n + nth - 1) / nth;
      int64_t b = std::min<int64_t>(n, chunk * ith);
      int64_t e = std::min<int64_t>(n, b + chunk);
      if (b < e) fn(b, e, ith);
    });
  }

  // All threads of the current run() must call it; returns when all have arrived.
  void barrier();

 private:
  using Trampoline = void (*)(void*, int, int);
  void run_impl(Trampoline t, void* ctx);
  void worker_loop(int ith);
  static void spin_wait(const std::atomic<uint32_t>& a, uint32_t old);

  int n_threads_;
  std::vector<std::thread> workers_;
  Trampoline tramp_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<uint32_t> done_gen_{0};
  alignas(64) std::atomic<int> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_gen_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvasir
