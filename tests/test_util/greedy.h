// greedy_alone(): a prompt's greedy continuation computed alone, token by token, with the offline
// runner: the reference that batched, preempted or speculative outputs are held to. Needs
// kvasir_engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/model/model.h"
#include "test_util/tokens.h"

namespace kvasir::test_util {

inline std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt,
                                         int n, KVCacheType kv = {}) {
  ThreadPool pool(1);
  SequenceRunnerOptions o;
  o.kv_type = kv;
  o.max_ctx = static_cast<int>(prompt.size()) + n + 1;
  SequenceRunner r(model, pool, o);
  std::vector<int32_t> out;
  auto logits = r.feed(prompt);
  for (int i = 0; i < n; ++i) {
    int32_t best = argmax(logits.data(), r.n_vocab());
    out.push_back(best);
    if (i + 1 < n) logits = r.feed(std::span(&best, 1));
  }
  return out;
}

}  // namespace kvasir::test_util
