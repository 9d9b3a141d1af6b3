// B sequences decoding together through one forward pass per step: the workload of tgB.
//
// The decoder is a ModelRunner (engine/model_runner.h: it builds the Batches) with a KV cache big
// enough for n_seqs sequences of max_ctx tokens, over a BlockPool of its own; every sequence has
// its own block table, filled as its positions are reached.
// prefill() feeds one sequence's prompt (chunks of max_batch tokens, logits of the last token
// only). step() appends one token to EVERY sequence through ONE Batch holding n_seqs sequences
// (one token each, each with its own block table and logits row) and returns n_seqs rows of
// n_vocab logits, row s for sequence s. truncate() forgets a sequence's positions >= n (its
// extra blocks return to the pool), so a benchmark can repeat a run without re-filling the
// cache. Errors (context overflow, wrong token count, bad sequence index) are kvasir::Error,
// raised before the forward pass; the step itself does not allocate after the first call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/kv/block_pool.h"
#include "kvasir/model/batch.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::bench {

struct DecoderOptions {
  int n_seqs = 1;
  int max_ctx = 0;  // positions per sequence; 0: the model's training context
  int max_batch = 512;
  KVCacheType kv_type{};
  std::shared_ptr<const KeyTransform> key_transform;  // of quantized keys (kv/key_transform.h)
  int block_size = 16;
};

class MultiSeqDecoder {
 public:
  MultiSeqDecoder(const Model& model, ThreadPool& pool, const DecoderOptions& opt);

  int n_seqs() const { return static_cast<int>(seqs_.size()); }
  int max_ctx() const { return max_ctx_; }
  int n_vocab() const { return runner_.n_vocab(); }
  int n_past(int seq) const;
  const std::vector<int32_t>& block_table(int seq) const;
  const KVShape& kv_shape() const { return runner_.kv().shape(); }

  // Appends `tokens` to sequence `seq`; returns the logits after its last token.
  std::span<const float> prefill(int seq, std::span<const int32_t> tokens);

  // One decode step: tokens[s] is appended to sequence s, for all n_seqs sequences at once.
  std::span<const float> step(std::span<const int32_t> tokens);

  // Keeps only positions [0, n) of sequence `seq` (n <= n_past(seq)).
  void truncate(int seq, int n);

  // The Batch of the last prefill()/step() call (for tests: its sequences and block tables).
  const Batch& last_batch() const { return runner_.last_batch(); }

 private:
  struct Seq {
    std::vector<int32_t> table;
    int n_past = 0;
  };
  Seq& seq_at(int seq);
  // Makes sure sequence s has blocks for positions < n.
  void reserve_positions(Seq& s, int n);

  DecoderOptions opt_;
  int max_ctx_;
  BlockPool blocks_;
  ModelRunner runner_;
  std::vector<Seq> seqs_;
  std::vector<SeqWork> work_;
};

}  // namespace kvasir::bench
