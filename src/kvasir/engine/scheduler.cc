#include "kvasir/engine/scheduler.h"

#include <algorithm>

namespace kvasir {

void Scheduler::preempt(Sequence* s) {
  kv_.free(s->kv);
  s->num_computed = 0;
  s->draft.clear();
  s->status = SeqStatus::kWaiting;
  waiting_.push_front(s);
}

void Scheduler::remove(Sequence* s) {
  kv_.free(s->kv);
  auto r = std::find(running_.begin(), running_.end(), s);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), s);
  if (w != waiting_.end()) waiting_.erase(w);
  s->status = SeqStatus::kFinished;
}

void Scheduler::schedule(std::vector<ScheduledSeq>& out, std::vector<Sequence*>& preempted) {
  out.clear();
  int budget = cfg_.max_batched_tokens;
  // Prompt scoring's own cap (a logits row per token), within the budget.
  int score_budget = cfg_.max_score_tokens > 0 ? cfg_.max_score_tokens : budget;
  auto cap = [&](const Sequence* s, int n) { return s->scorer ? std::min(n, score_budget) : n; };
  bool did_preempt = false;

  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    // A speculating sequence also computes its draft tokens (verification), as far as the budget
    // goes; draft tokens never cost a preemption: without room they are dropped.
    int n_new = cap(s, std::min(s->n_uncomputed() + static_cast<int>(s->draft.size()), budget));
    if (n_new <= 0) {
      ++i;
      continue;
    }
    if (n_new > s->n_uncomputed() && !kv_.allocate_slots(s->kv, s->num_computed + n_new))
      n_new = std::min(s->n_uncomputed(), budget);
    if (n_new <= s->n_uncomputed())
      s->draft.clear();
    else
      s->draft.resize(static_cast<size_t>(n_new - s->n_uncomputed()));
    bool self_preempted = false;
    // Victims come from the back of running_ while this loop serves it from the front, so a
    // victim is s itself or a sequence not yet scheduled in this step.
    while (!kv_.allocate_slots(s->kv, s->num_computed + n_new)) {
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      preempted.push_back(victim);
      did_preempt = true;
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the last running sequence
    out.push_back({s, n_new});
    budget -= n_new;
    if (s->scorer) score_budget -= n_new;
    ++i;
  }
  if (did_preempt) return;

  // 2. Waiting sequences (preempted ones are at the front).
  if (cfg_.static_batching && !running_.empty()) return;
  const int watermark = static_cast<int>(cfg_.watermark * kv_.n_blocks());
  const int bs = kv_.block_size();
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_seqs) {
    Sequence* s = waiting_.front();
    const int total = static_cast<int>(s->tokens.size());
    int hit = 0;
    // A scoring sequence waits for the next step once the step's scoring tokens are spent.
    if (s->scorer && score_budget <= 0) break;
    // An embedding needs every token's hidden state, a scoring sequence every position's logits:
    // they compute their whole prompt.
    if (kv_.prefix_caching() && !s->pooler && !s->scorer) {
      // Keep at least one token to compute: its logits are the next prediction.
      hit = kv_.acquire_cached_prefix(s->tokens, (total - 1) / bs, s->kv);
      s->num_computed = hit;
    }
    const int n_new = cap(s, std::min(total - s->num_computed, budget));
    const int need = kv_.blocks_needed(s->kv, s->num_computed + n_new);
    if (kv_.n_free() - need < watermark && !running_.empty()) {
      kv_.free(s->kv);  // give back the prefix references; retry in a later step
      s->num_computed = 0;
      break;
    }
    if (!kv_.allocate_slots(s->kv, s->num_computed + n_new)) {
      kv_.free(s->kv);
      s->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    if (!s->admitted_once) {
      s->admitted_once = true;
      s->cached_tokens = hit;
      if (!s->scorer) {  // a scoring sequence does not look its prompt up
        prefix_queries_ += static_cast<uint64_t>(s->n_prompt);
        prefix_hits_ += static_cast<uint64_t>(hit);
      }
    }
    s->status = SeqStatus::kRunning;
    running_.push_back(s);
    out.push_back({s, n_new});
    budget -= n_new;
    if (s->scorer) score_budget -= n_new;
  }
}

}  // namespace kvasir
