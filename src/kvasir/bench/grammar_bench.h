// `kvasir bench grammar`: what constrained decoding costs a decode step, measured in one run.
//
// Each repetition runs `batch` sampled requests (random seeded prompts of `prompt` tokens,
// temperature 1, `n` tokens each, ignore_eos) through the serving engine twice, alternated: plain,
// and constrained by `grammar` (GBNF; by default a JSON object grammar whose strings are
// unbounded, so requests rarely end early). The engine's step observer timestamps every step; only
// decode steps with the whole batch running count (prefill steps and the tail where requests have
// ended are left out). Reported per repetition and summarized (median, min, max):
//   plain_step_s        seconds per full-batch decode step, unconstrained
//   constrained_step_s  the same with every request constrained
//   overhead            constrained / plain - 1 (same repetition)
//   mask_share          the engine's own mask time (EngineStats::grammar_seconds, the trie walks
//                       and cache lookups; the sampler's masking is in the step time only) per
//                       constrained step, over the plain step time
// plus the mask cache's hits and misses and the mean batch of the counted constrained steps.
#pragma once

#include <cstdint>
#include <string>

#include "kvasir/bench/stats.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::bench {

struct GrammarBenchOptions {
  int batch = 16;
  int n = 64;       // tokens per request
  int prompt = 16;  // prompt tokens per request
  int reps = 3;
  int threads = 0;
  std::string grammar;  // GBNF; empty: default_bench_grammar()
  uint32_t seed = 1;
};

struct GrammarBenchResult {
  Summary plain_step_s;
  Summary constrained_step_s;
  Summary overhead;
  Summary mask_share;
  uint64_t masks_computed = 0;  // all constrained runs
  uint64_t mask_cache_hits = 0;
  double mean_batch = 0;  // running sequences in the counted constrained steps
  int counted_steps = 0;  // constrained steps counted, all repetitions
};

// A JSON object {"title": string, "tags": [string, ...], "body": string} with unbounded strings.
std::string default_bench_grammar();

// Throws kvasir::Error for invalid options, a grammar that does not parse, or a failed request.
GrammarBenchResult run_grammar_bench(const Model& model, const Tokenizer& tok,
                                     const GrammarBenchOptions& o);

}  // namespace kvasir::bench
