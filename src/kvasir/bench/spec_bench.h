// `kvasir bench spec`: what speculative decoding buys on one target model, measured in one run.
//
//   verify      the cost of one target forward pass over K+1 tokens of one sequence (the
//               verification of a K-token proposal) relative to a single-token decode pass, both
//               at the same position after a `prompt`-token prompt; the two are alternated,
//               `passes` each per repetition, and the ratio of their medians is reported.
//   plain       greedy decode through the serving engine (one sequence, `n` tokens after the
//               prompt), tok/s from the first generated token to the last.
//   spec        the same request in an engine that speculates with K draft tokens: with
//               `replay` the ReplayProposer proposes the target's own greedy output (from the
//               plain run), each token corrupted with probability `corrupt`, paying the real draft
//               model's cost when `draft` is set; without replay the draft model's own proposals.
//               tok/s, the speedup over plain (same repetition), acceptance (accepted / proposed)
//               and tokens per target pass.
// plain and spec alternate within each repetition; every figure is the median over `reps` with
// min and max. The output is checked: speculation must reproduce the plain greedy tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvasir/bench/stats.h"
#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/tensor/kv_quant.h"

namespace kvasir::bench {

struct SpecBenchOptions {
  int k = 4;
  int n = 128;      // tokens generated per run
  int prompt = 32;  // prompt tokens (random, seeded)
  int reps = 3;
  int passes = 16;  // verify figure: passes of each kind per repetition
  bool replay = true;
  double corrupt = 0.2;  // replay: probability that a proposed token is wrong
  // The engine's low-acceptance fallback threshold (SpecConfig::warn_acceptance): 0 measures
  // speculation itself; 0.6 (the serving default) measures what the fallback keeps of plain speed.
  double warn_acceptance = 0;
  const Model* draft = nullptr;
  int threads = 0;
  KVCacheType kv_type{};
  std::shared_ptr<const KeyTransform> key_transform;  // the target's (kv/key_transform.h)
  uint32_t seed = 1;
};

struct SpecBenchResult {
  Summary decode_pass_s;  // one single-token pass, seconds
  Summary verify_pass_s;  // one (K+1)-token pass, seconds
  double verify_ratio = 0;
  Summary plain_tok_s;
  Summary spec_tok_s;
  Summary speedup;             // per repetition: spec / plain
  double acceptance = 0;       // accepted / proposed draft tokens, all repetitions
  double tokens_per_pass = 0;  // tokens produced per verification pass
  // Draft tokens judged per generated token in the timed runs (a proposal counts up to its first
  // rejected token, as in `acceptance`): about 1 or more while speculating every step, near 0
  // once the low-acceptance fallback decodes plainly.
  double judged_per_token = 0;
};

// Throws kvasir::Error for invalid options, or when speculation changed the greedy output.
SpecBenchResult run_spec_bench(const Model& target, const SpecBenchOptions& o);

}  // namespace kvasir::bench
