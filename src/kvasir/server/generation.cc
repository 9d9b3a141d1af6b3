#include "kvasir/server/generation.h"

#include <fmt/format.h>

#include <chrono>

#include "kvasir/util/timer.h"

namespace kvasir::server {

Generation::Generation(int n_choices, double start, std::function<void(Generation&)> on_done)
    : choices_(static_cast<size_t>(n_choices)), start_(start), on_done_(std::move(on_done)) {}

OutputSink Generation::sink(int choice) {
  std::shared_ptr<Generation> self = shared_from_this();
  return [self, choice](const RequestOutput& out) { self->push(choice, out); };
}

void Generation::finish_one_locked(bool& all_done) {
  n_finished_++;
  all_done = n_finished_ == n_choices();
}

void Generation::limit_backlog(size_t max_queued, Engine& engine) {
  std::lock_guard<std::mutex> lock(mu_);
  max_queued_ = max_queued;
  backlog_engine_ = &engine;
}

void Generation::push(int i, const RequestOutput& out) {
  const double now = now_seconds();
  bool all_done = false;
  std::vector<uint64_t> to_abort;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& c = choices_[static_cast<size_t>(i)];
    if (c.finished) return;  // nothing may follow the final output
    c.prompt_tokens = out.prompt_tokens;
    c.cached_tokens = out.cached_tokens;
    c.completion_tokens = out.completion_tokens;
    c.spec_proposed = out.spec_proposed;
    c.spec_accepted = out.spec_accepted;
    c.spec_passes = out.spec_passes;
    if (out.queue_time > 0) c.queue_time = out.queue_time;
    if (!out.tokens.empty()) {
      if (c.first_token_time == 0)
        c.first_token_time = now;
      else
        c.gaps.push_back(now - c.last_token_time);
      c.last_token_time = now;
    }
    queue_.push_back(Event{i, out, now});
    if (out.finished) {
      if (overflowed_ && out.finish_reason == FinishReason::kAbort && out.error.empty())
        queue_.back().output.error = fmt::format(
            "the client did not read its stream ({} outputs were waiting)", max_queued_);
      c.finished = true;
      c.finish_time = now;
      c.reason = out.finish_reason;
      c.error = queue_.back().output.error;
      finish_one_locked(all_done);
    }
    if (max_queued_ > 0 && queue_.size() >= max_queued_ && !overflowed_) {
      overflowed_ = true;
      for (const Choice& o : choices_)
        if (o.submitted && !o.finished) to_abort.push_back(o.engine_id);
    }
  }
  // Engine::abort only queues the id: safe from the engine thread that delivers this output.
  for (uint64_t id : to_abort) backlog_engine_->abort(id);
  complete(all_done);
}

void Generation::complete(bool all_done) {
  if (all_done) {
    if (on_done_) on_done_(*this);
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void Generation::set_submitted(int i, uint64_t engine_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Choice& c = choices_[static_cast<size_t>(i)];
  c.engine_id = engine_id;
  c.submitted = true;
}

void Generation::mark_not_submitted(int i, FinishReason reason) {
  bool all_done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& c = choices_[static_cast<size_t>(i)];
    if (c.finished) return;
    c.finished = true;
    c.refused = true;
    c.reason = reason;
    finish_one_locked(all_done);
  }
  complete(all_done);
}

void Generation::abort(Engine& engine) {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Choice& c : choices_)
      if (c.submitted && !c.finished) ids.push_back(c.engine_id);
  }
  for (uint64_t id : ids) engine.abort(id);
}

bool Generation::wait(std::vector<Event>& out, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty() && !done_) {
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                 [&] { return !queue_.empty() || done_; });
  }
  for (Event& e : queue_) out.push_back(std::move(e));
  queue_.clear();
  return done_;
}

bool Generation::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

}  // namespace kvasir::server
