// The scheduler: from (waiting queue, running set, KV cache, token budget) to the work of one
// step, as in vLLM v1.
//
// Each step has a budget of max_batched_tokens. Running sequences are served first, in admission
// order: a decoding sequence needs one token, a sequence still in its prompt gets the next chunk
// (chunked prefill). When the KV cache cannot hold a running sequence's next tokens, the most
// recently admitted running sequence is preempted (recompute: its blocks are freed and it goes back
// to the *front* of the waiting queue, to be resumed first, recomputing its K/V — batch-invariant
// kernels make the recomputation bit-identical). Then waiting sequences are admitted in order
// while the budget, max_seqs and the cache allow, each reusing its longest cached prefix (except
// an embedding request, Sequence::pooler: it needs every token's hidden state, and a prompt-scoring
// request, Sequence::scorer: it needs every position's logits). No new sequence
// is admitted in a step that had to preempt, and admission keeps a small watermark of free blocks
// so a new prompt does not immediately force a preemption.
// Prompt scoring needs a logits row per computed token: the tokens of scoring sequences in one
// step are capped at max_score_tokens (their chunks are cut; a scoring sequence that finds the cap
// reached waits for the next step, and admission stops at a waiting one), so the step's logits
// rows stay within what the model runner holds.
// static_batching (kept for comparison only): new sequences join only when none is running.
// Speculation: a running sequence with draft tokens (Sequence::draft) asks for them on top of its
// uncomputed token; the budget and the cache may cut the draft short (the draft is truncated to
// what was scheduled), and draft tokens alone never preempt anyone.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kvasir/engine/sequence.h"
#include "kvasir/kv/kv_cache_manager.h"

namespace kvasir {

struct ScheduledSeq {
  Sequence* seq;
  int n_new;  // tokens to compute this step, starting at seq->num_computed
};

struct SchedulerConfig {
  int max_seqs = 64;
  int max_batched_tokens = 512;
  bool static_batching = false;
  double watermark = 0.01;   // fraction of blocks kept free when admitting
  int max_score_tokens = 0;  // tokens of prompt-scoring sequences per step; 0: no cap of its own
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KVCacheManager& kv) : cfg_(cfg), kv_(kv) {}

  void add(Sequence* s) { waiting_.push_back(s); }
  // Computes this step's work into `out` (cleared first). Preempted sequences are appended to
  // `preempted`.
  void schedule(std::vector<ScheduledSeq>& out, std::vector<Sequence*>& preempted);
  // Removes a finished or aborted sequence from the queues and frees its blocks.
  void remove(Sequence* s);

  int n_running() const { return static_cast<int>(running_.size()); }
  // The running sequences, in admission order (the engine proposes speculative tokens for them
  // before schedule()).
  const std::vector<Sequence*>& running() const { return running_; }
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }

 private:
  void preempt(Sequence* s);

  SchedulerConfig cfg_;
  KVCacheManager& kv_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  uint64_t prefix_queries_ = 0;
  uint64_t prefix_hits_ = 0;
};

}  // namespace kvasir
