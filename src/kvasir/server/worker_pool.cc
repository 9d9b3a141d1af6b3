#include "kvasir/server/worker_pool.h"

#include <algorithm>

namespace kvasir::server {

WorkerPool::WorkerPool(int max_threads) : max_threads_(std::max(1, max_threads)) {}

WorkerPool::~WorkerPool() {
  stop();
}

bool WorkerPool::post(std::function<void()> fn, size_t max_pending) {
  std::lock_guard lk(mu_);
  if (stop_) return false;
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->job = std::move(fn);
    w->cv.notify_one();
    return true;
  }
  if (static_cast<int>(threads_.size()) < max_threads_) {
    auto& w = *workers_.emplace_back(std::make_unique<Worker>());
    w.job = std::move(fn);
    threads_.emplace_back([this, &w] { loop(w); });
    return true;
  }
  if (queue_.size() >= max_pending) return false;
  queue_.push_back(std::move(fn));
  return true;
}

void WorkerPool::loop(Worker& w) {
  std::unique_lock lk(mu_);
  for (;;) {
    std::function<void()> fn;
    if (w.job) {
      fn = std::move(w.job);
      w.job = nullptr;
    } else if (!queue_.empty()) {
      fn = std::move(queue_.front());
      queue_.pop_front();
    } else if (stop_) {
      return;
    } else {
      idle_.push_back(&w);
      w.cv.wait(lk, [&] { return w.job != nullptr || stop_; });
      if (!w.job) {  // stopping: leave the idle stack, run what is still queued
        std::erase(idle_, &w);
      }
      continue;
    }
    lk.unlock();
    fn();
    fn = nullptr;  // the job's captures are released outside the lock
    lk.lock();
  }
}

void WorkerPool::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    for (Worker* w : idle_) w->cv.notify_one();
    threads.swap(threads_);
  }
  for (auto& t : threads)
    if (t.joinable()) t.join();
  std::lock_guard lk(mu_);
  idle_.clear();
  workers_.clear();
}

int WorkerPool::threads_started() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(threads_.size());
}

int WorkerPool::idle_threads() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(idle_.size());
}

}  // namespace kvasir::server
