// Proposer: the source of speculative tokens (a draft model, an n-gram lookup, or a test hook).
//
// Each engine step, before scheduling, the engine hands the proposer one ProposalSlot per
// decoding sequence that speculates; the proposer writes up to `k` draft tokens after the slot's
// tokens (prompt + output so far; the last token is the one the target computes next). A proposer
// that draws its tokens from distributions (a draft model under a sampled request) also returns
// those distributions q (one dense row of n_vocab probabilities per draft token), which the
// rejection sampler needs (rejection_sampler.h); a deterministic proposer (n-gram, greedy draft)
// leaves q null, which means one-hot on the proposed token. After verification the engine calls
// accepted() with the sequence's tokens as they now are, so a proposer with a KV cache keeps what
// is still valid; release() forgets a sequence (finished, aborted or preempted).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvasir {

class Sampler;

struct ProposalSlot {
  uint64_t id = 0;                  // the sequence
  std::span<const int32_t> tokens;  // prompt + output so far (never empty)
  int k = 0;                        // at most this many draft tokens
  Sampler* sampler = nullptr;       // the sequence's target sampler (parameters, penalty history)
  // Filled by propose():
  std::vector<int32_t>* draft = nullptr;  // the draft tokens (cleared first; 0..k of them)
  const float* q = nullptr;               // draft.size() rows of n_vocab, or null (one-hot)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  // Proposes for every slot; q rows stay valid until the next propose() call.
  virtual void propose(std::span<ProposalSlot> slots) = 0;
  // The sequence's tokens after this step's verification (a continuation of the slot's tokens).
  virtual void accepted(uint64_t /*id*/, std::span<const int32_t> /*tokens*/) {}
  virtual void release(uint64_t /*id*/) {}
  // Seconds spent in propose() so far (the auto-K cost model reads it).
  double busy_seconds() const { return busy_seconds_; }

 protected:
  double busy_seconds_ = 0;
};

}  // namespace kvasir
