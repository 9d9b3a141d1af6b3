// Runs one sequence through a model with its own paged KV cache: the offline path used by
// `kvasir run`, `kvasir perplexity` and tests. It is a ModelRunner (model_runner.h) over a
// BlockPool of its own, holding one sequence.
//
// feed() appends tokens to the sequence: they are processed in chunks of at most `max_batch`
// tokens (chunked prefill), their K/V written to freshly allocated 16-token blocks, and the
// logits of the requested rows are returned. Blocks are allocated as positions are reached, never
// reserved up to the maximum length.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/kv/block_pool.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct SequenceRunnerOptions {
  int max_ctx = 0;      // 0: the model's training context
  int max_batch = 512;  // tokens per forward step (chunk size of the prefill)
  KVCacheType kv_type{};
  int block_size = 16;
  // feed() may ask for every token's logits: sizes the logits rows for max_batch tokens
  // (max_batch x n_vocab floats) instead of one.
  bool all_logits = false;
  // The key transform of a quantized K cache (ModelRunnerOptions).
  std::shared_ptr<const KeyTransform> key_transform;
};

class SequenceRunner {
 public:
  SequenceRunner(const Model& model, ThreadPool& pool, const SequenceRunnerOptions& opt);

  // Processes `tokens` at positions n_past().. and returns logits: of the last token only, or of
  // every token when all_logits is true (row i = logits after tokens[i]; needs the option). The
  // span is valid until the next call. Throws kvasir::Error if the context would overflow.
  std::span<const float> feed(std::span<const int32_t> tokens, bool all_logits = false);

  int n_past() const { return n_past_; }
  int max_ctx() const { return max_ctx_; }
  int n_vocab() const { return runner_.n_vocab(); }
  // Forgets the sequence (blocks return to the pool).
  void reset();
  const BlockPool& pool() const { return blocks_; }
  const Backend& backend() const { return runner_.backend(); }

 private:
  SequenceRunnerOptions opt_;
  int max_ctx_;
  BlockPool blocks_;
  ModelRunner runner_;
  std::vector<int32_t> table_;
  int n_past_ = 0;
  std::vector<float> logits_;  // every token's logits over several chunks
};

}  // namespace kvasir
