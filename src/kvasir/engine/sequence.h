// A request inside the engine: its tokens (prompt followed by output), how many of them have
// K/V in the cache, its blocks, its sampler and its streaming state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/engine/pooling.h"
#include "kvasir/engine/prompt_scorer.h"
#include "kvasir/grammar/token_matcher.h"
#include "kvasir/kv/kv_cache_manager.h"
#include "kvasir/sampling/sampler.h"
#include "kvasir/sampling/stop_matcher.h"
#include "kvasir/tokenizer/incremental_detokenizer.h"

namespace kvasir {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  GenerateRequest req;
  OutputSink sink;
  std::vector<int32_t> tokens;  // prompt + generated
  int n_prompt = 0;
  int max_tokens = 0;    // generation limit (resolved against the context)
  int num_computed = 0;  // leading tokens whose K/V are in the cache
  SeqBlocks kv;
  SeqStatus status = SeqStatus::kWaiting;
  std::unique_ptr<Sampler> sampler;
  // Constrained decoding: the request's compiled grammar (set at submit) and this sequence's
  // position in it (made on the engine thread, which alone touches the grammar's mask cache).
  std::shared_ptr<grammar::ConstrainedGrammar> grammar;
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  std::unique_ptr<Pooler> pooler;  // embedding requests only: pools the prompt's hidden rows
  // Prompt-scoring requests only: scores the prompt's logits rows (every position, so the
  // scheduler never hands it prefix-cache hits and caps its tokens per step).
  std::unique_ptr<PromptScorer> scorer;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopMatcher> stop;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache (first admission)
  bool admitted_once = false;
  double arrival = 0, first_scheduled = 0, first_token = 0;
  // Output accumulated during a step, flushed to the sink after it.
  RequestOutput pending;
  // Speculative decoding: this step's proposal, its distributions (null: one-hot) and the
  // verification tokens (the last token, then the proposal) the step computes.
  std::vector<int32_t> draft;
  const float* draft_q = nullptr;
  std::vector<int32_t> verify;
  int spec_proposed = 0, spec_accepted = 0, spec_passes = 0;  // this request's, cumulative

  int n_generated() const { return static_cast<int>(tokens.size()) - n_prompt; }
  int n_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace kvasir
