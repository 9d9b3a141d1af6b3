// Generation: the engine requests behind one HTTP request (one per choice) and the outputs they
// stream back, handed from the engine thread to the HTTP thread.
//
// The engine calls sink(i) for choice i's outputs (on its own thread); each output is queued with
// its arrival time and the per-choice accounting (usage, first/last token times, gaps between
// outputs) is updated. When the last choice finishes, `on_done` runs once, on the thread that
// delivered that output, outside the Generation's lock; only after it returned does wait()
// report the generation finished (so metrics are recorded before the response is complete).
// The HTTP thread drains the queue with wait(). A Generation is shared (shared_ptr) by the sinks
// and the HTTP handler, so whichever lets go last frees it; a client that went away never leaves a
// dangling sink.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kvasir/engine.h"

namespace kvasir::server {

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  struct Event {
    int choice = 0;
    RequestOutput output;
    double time = 0;  // arrival (now_seconds())
  };
  struct Choice {
    uint64_t engine_id = 0;
    bool submitted = false;
    bool finished = false;
    bool refused = false;  // never ran: submit() refused it or was not reached
    FinishReason reason = FinishReason::kNone;
    std::string error;
    int prompt_tokens = 0;
    int cached_tokens = 0;
    int spec_proposed = 0, spec_accepted = 0, spec_passes = 0;  // speculative decoding
    int completion_tokens = 0;
    double queue_time = 0;
    double first_token_time = 0;  // arrival of the first output with tokens; 0: none yet
    double last_token_time = 0;
    double finish_time = 0;    // arrival of the final output; 0: not yet
    std::vector<double> gaps;  // between successive outputs with tokens
  };

  // `start` is the request's arrival time (now_seconds()).
  Generation(int n_choices, double start, std::function<void(Generation&)> on_done);

  // The sink for choice i, to pass to Engine::submit.
  OutputSink sink(int choice);
  // Records the engine id once submit() returned it.
  void set_submitted(int choice, uint64_t engine_id);
  // Marks a choice that was never submitted (or whose submit failed) as finished.
  void mark_not_submitted(int choice, FinishReason reason);
  // Aborts every submitted, unfinished choice.
  void abort(Engine& engine);
  // Bounds the outputs queued for a reader that does not drain them (a streaming client that
  // stopped reading, so the HTTP thread is stuck in a write): once `max_queued` are waiting, the
  // generation is aborted on `engine` and its choices end with an error saying why. 0: no bound.
  // Call before submitting.
  void limit_backlog(size_t max_queued, Engine& engine);

  // Moves queued events into `out`, waiting up to `timeout_s` for at least one. Returns true
  // once every choice has finished and the queue is drained (out may still hold the last ones).
  bool wait(std::vector<Event>& out, double timeout_s);
  bool finished() const;

  int n_choices() const { return static_cast<int>(choices_.size()); }
  double start() const { return start_; }
  // Per-choice accounting; stable once finished() (read it after wait() returned true, or from
  // on_done).
  const Choice& choice(int i) const { return choices_[static_cast<size_t>(i)]; }

 private:
  void push(int choice, const RequestOutput& out);
  void finish_one_locked(bool& all_done);
  void complete(bool all_done);  // runs on_done (if all_done), then wakes waiters

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Choice> choices_;
  std::vector<Event> queue_;
  int n_finished_ = 0;
  size_t max_queued_ = 0;
  Engine* backlog_engine_ = nullptr;
  bool overflowed_ = false;
  bool done_ = false;  // all finished and on_done returned
  double start_;
  std::function<void(Generation&)> on_done_;
};

}  // namespace kvasir::server
