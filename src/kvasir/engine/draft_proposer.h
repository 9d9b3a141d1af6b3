// DraftProposer: speculative tokens from a smaller model that shares the target's vocabulary
// (spec/proposer.h). It lives in engine/ because it runs a model, and models run through a
// ModelRunner (the one place Batches are built).
//
// The draft has a paged KV cache of its own (a KVCacheManager without prefix caching over
// kv_blocks blocks) and per sequence: its block table, how many leading tokens of the sequence
// have draft K/V, and a Sampler with the request's parameters (its own RNG stream, seeded from the
// request's seed; its penalty history copied from the target's sampler at every proposal), so
// bias, penalties, temperature, top-k/p and min-p shape q exactly as they shape p. propose() runs
// all slots together: first one or more steps that bring each draft cache up to the sequence's
// tokens (a new sequence's whole prompt, else the one or two tokens verification added), then
// up to K - 1 single-token steps, every step one Batch over all slots. Greedy requests take the
// draft's argmax (q null: one-hot); sampled ones draw from q and return it. accepted() keeps the
// draft K/V of the proposal's tokens that the target kept and truncates the block table past
// them. A slot whose draft blocks cannot be allocated proposes nothing this step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/kv/kv_cache_manager.h"
#include "kvasir/model/model.h"
#include "kvasir/sampling/sampler.h"
#include "kvasir/spec/proposer.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct DraftProposerOptions {
  int64_t kv_blocks = 0;  // draft KV blocks
  int block_size = 16;
  KVCacheType kv_type{};
  int max_tokens = 512;  // tokens per draft step (the catch-up steps are chunked to it)
  int max_seqs = 64;     // slots per propose()
  int k_max = 8;         // largest K asked for
};

class DraftProposer final : public Proposer {
 public:
  // Throws kvasir::Error for bad options or when memory is not there.
  DraftProposer(const Model& draft, ThreadPool& pool, const DraftProposerOptions& options);

  const char* name() const override { return "draft"; }
  void propose(std::span<ProposalSlot> slots) override;
  void accepted(uint64_t id, std::span<const int32_t> tokens) override;
  void release(uint64_t id) override;

  int64_t blocks_in_use() const { return kv_.n_used(); }
  size_t n_sequences() const { return seqs_.size(); }
  const Model& model() const { return runner_.model(); }

 private:
  struct Seq {
    SeqBlocks kv;
    int n_computed = 0;            // leading tokens of the sequence with draft K/V
    int base = 0;                  // the sequence's length at the last proposal
    std::vector<int32_t> drafted;  // the last proposal, until accepted() judges it
    bool proposed = false;         // a proposal awaits accepted()
    std::unique_ptr<Sampler> sampler;
  };
  struct Active {
    ProposalSlot* slot;
    Seq* seq;
    int k;     // tokens to draft
    int next;  // next token of slot->tokens to feed in the catch-up phase
    float* q;  // k rows, or null (greedy)
  };
  void commit(Seq& s, std::span<const int32_t> tokens);
  void draw(Active& a, const float* row);

  DraftProposerOptions opt_;
  KVCacheManager kv_;
  ModelRunner runner_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<float> q_;
  std::vector<Active> active_;
  std::vector<SeqWork> work_;
  std::vector<size_t> work_owner_;  // work_[i] belongs to active_[work_owner_[i]]
  std::vector<int32_t> feed_;       // the single tokens of a decode step, one per active slot
};

}  // namespace kvasir
