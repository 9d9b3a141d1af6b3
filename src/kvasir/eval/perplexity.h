// Perplexity of a model over a token stream, computed the way llama.cpp's `llama-perplexity`
// does so the numbers are comparable: the text is cut into non-overlapping chunks of `ctx`
// tokens; each chunk is evaluated from an empty cache with its first token replaced by BOS (when
// the vocabulary adds BOS); only the predictions in the second half of each chunk are scored, so
// every scored token has at least ctx/2 tokens of context. ppl = exp(mean negative log-likelihood).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct PerplexityOptions {
  int ctx = 512;
  int bos_id = -1;      // replaces each chunk's first token when >= 0
  int max_chunks = -1;  // -1: all
  int max_batch = 512;
  KVCacheType kv_type{};
  // The key transform of a quantized K cache (engine/model_runner.h's ModelRunnerOptions).
  std::shared_ptr<const KeyTransform> key_transform;
};

struct PerplexityResult {
  double ppl = 0;
  double nll = 0;      // mean negative log-likelihood (nats)
  int64_t scored = 0;  // tokens scored
  int chunks = 0;
  double seconds = 0;
};

// Called for every scored prediction, in order: the model's logits (n_vocab floats) at chunk
// position j (ctx/2 <= j <= ctx-2) and the token that follows. The KL divergence tools
// (eval/kl_divergence.h) save or compare these rows.
using ScoredRowFn =
    std::function<void(int chunk, int j, std::span<const float> logits, int32_t next)>;

// Throws kvasir::Error if the tokens do not fill at least one chunk of ctx tokens.
PerplexityResult perplexity(const Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
                            const PerplexityOptions& opt,
                            const std::function<void(int chunk, double running_ppl)>& progress = {},
                            const ScoredRowFn& on_row = {});

}  // namespace kvasir
