// WorkerPool: the threads that run complete HTTP requests (a streamed response holds its thread
// for its whole length).
//
// Threads are started on demand, up to max_threads, and an idle thread waits on its own
// condition variable in a LIFO stack: the next request goes to the thread that finished most
// recently. So the threads that ever run (and whose stacks, thread_local scratch and malloc caches
// grow to their high-water marks) are as many as the peak number of requests in flight, not the
// configured maximum: a server sized for 336 concurrent requests that sees 64 keeps ~64 threads
// warm and its memory flat (a FIFO condition variable hands work round-robin to every thread, and
// the soak test's RSS kept rising for 30 minutes as each of the 336 reached its high-water).
// When max_threads are busy, up to max_pending requests wait in a queue.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvasir::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads = 64);
  ~WorkerPool();  // stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn on an idle thread, a new one (below max_threads) or, when all are busy, queues it;
  // false (fn dropped) when max_pending are already queued or the pool is stopping.
  bool post(std::function<void()> fn, size_t max_pending);
  // Runs what is queued, then joins every thread. Idempotent.
  void stop();

  int threads_started() const;  // threads that exist (never more than the peak in flight)
  int idle_threads() const;     // started threads waiting for a job
  int max_threads() const { return max_threads_; }

 private:
  struct Worker {
    std::condition_variable cv;
    std::function<void()> job;  // set by post() while the worker is idle
  };
  void loop(Worker& w);

  const int max_threads_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::vector<Worker*> idle_;  // a stack: back() is the most recently idle
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
};

}  // namespace kvasir::server
