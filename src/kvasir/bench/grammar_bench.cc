#include "kvasir/bench/grammar_bench.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::bench {

std::string default_bench_grammar() {
  return R"(root ::= "{" ws "\"title\":" ws string "," ws "\"tags\":" ws tags "," ws "\"body\":" ws string "}"
tags ::= "[" ws ( string ( "," ws string )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
ws ::= | " " | "\n" [ \t]{0,20}
)";
}

namespace {

struct RunResult {
  double step_s = 0;      // mean seconds per counted step
  double mask_s = 0;      // mean engine mask seconds per counted step
  int counted = 0;        // steps counted
  double mean_batch = 0;  // running sequences per counted step
  uint64_t masks = 0, hits = 0;
};

RunResult run_once(const Model& model, const Tokenizer& tok, const GrammarBenchOptions& o,
                   const std::vector<std::vector<int32_t>>& prompts, const std::string& grammar,
                   uint64_t seed) {
  EngineConfig ec;
  ec.max_seqs = o.batch;
  ec.max_batched_tokens = std::max(512, o.batch * o.prompt);
  ec.max_model_len = o.prompt + o.n + 1;
  ec.threads = o.threads;
  ec.prefix_caching = false;
  Engine engine(model, tok, ec);

  // Step timestamps from the observer (engine thread).
  struct Step {
    double t;
    int running;
    int waiting;
    double grammar_s;
  };
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(o.n) * 2 + 64);
  std::mutex smu;
  engine.set_step_observer([&](const EngineStats& s) {
    std::lock_guard lk(smu);
    steps.push_back({now_seconds(), s.running, s.waiting, s.grammar_seconds});
  });

  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  int with_first_token = 0;
  double all_started = 0;  // when every request had its first token
  std::string error;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt = prompts[i];
    r.params.temperature = 1.0f;
    r.params.seed = seed + i;
    r.params.max_tokens = o.n;
    r.params.ignore_eos = true;
    r.grammar = grammar;
    engine.submit(std::move(r), [&, first = true](const RequestOutput& out) mutable {
      std::lock_guard lk(mu);
      if (first && !out.tokens.empty()) {
        first = false;
        if (++with_first_token == static_cast<int>(prompts.size())) all_started = now_seconds();
      }
      if (out.finished) {
        if (!out.error.empty() && error.empty()) error = out.error;
        ++done;
        cv.notify_all();
      }
    });
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done == static_cast<int>(prompts.size()); });
  }
  engine.wait_idle();
  if (!error.empty()) fail("bench grammar: a request failed: {}", error);
  const EngineStats st = engine.stats();
  RunResult rr;
  rr.masks = st.grammar_masks_computed;
  rr.hits = st.grammar_mask_cache_hits;
  std::lock_guard lk(smu);
  // A step's duration is the time since the previous observer call; count decode steps after
  // every request had its first token, while the whole batch was running.
  double sum_t = 0, sum_g = 0, sum_batch = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    if (all_started == 0 || steps[i - 1].t < all_started) continue;
    if (steps[i].running != o.batch || steps[i].waiting != 0) continue;
    sum_t += steps[i].t - steps[i - 1].t;
    sum_g += steps[i].grammar_s - steps[i - 1].grammar_s;
    sum_batch += steps[i].running;
    ++rr.counted;
  }
  if (rr.counted > 0) {
    rr.step_s = sum_t / rr.counted;
    rr.mask_s = sum_g / rr.counted;
    rr.mean_batch = sum_batch / rr.counted;
  }
  return rr;
}

}  // namespace

GrammarBenchResult run_grammar_bench(const Model& model, const Tokenizer& tok,
                                     const GrammarBenchOptions& o) {
  if (o.batch < 1) fail("bench grammar: --batch must be >= 1, got {}", o.batch);
  if (o.n < 2) fail("bench grammar: -n must be >= 2, got {}", o.n);
  if (o.prompt < 1) fail("bench grammar: --prompt must be >= 1, got {}", o.prompt);
  if (o.reps < 1) fail("bench grammar: --reps must be >= 1, got {}", o.reps);
  const std::string grammar = o.grammar.empty() ? default_bench_grammar() : o.grammar;
  std::mt19937 rng(o.seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.batch));
  const int32_t n_vocab = tok.n_vocab();
  for (auto& p : prompts) {
    if (tok.bos_id() >= 0) p.push_back(tok.bos_id());
    while (static_cast<int>(p.size()) < o.prompt) {
      int32_t t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
      if (!tok.is_control(t) && !tok.is_eog(t)) p.push_back(t);
    }
  }
  std::vector<double> plain, constrained, overhead, share;
  GrammarBenchResult res;
  double batch_sum = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    const uint64_t seed = o.seed * 1000003ull + static_cast<uint64_t>(rep) * 7919ull;
    const RunResult p = run_once(model, tok, o, prompts, "", seed);
    const RunResult c = run_once(model, tok, o, prompts, grammar, seed);
    if (p.counted == 0 || c.counted == 0)
      fail(
          "bench grammar: no decode step ran with the whole batch of {} (constrained requests "
          "ended early?): raise -n or use a grammar that does not end soon",
          o.batch);
    plain.push_back(p.step_s);
    constrained.push_back(c.step_s);
    overhead.push_back(c.step_s / p.step_s - 1.0);
    share.push_back(c.mask_s / p.step_s);
    res.masks_computed += c.masks;
    res.mask_cache_hits += c.hits;
    batch_sum += c.mean_batch * c.counted;
    res.counted_steps += c.counted;
  }
  res.plain_step_s = summarize(plain);
  res.constrained_step_s = summarize(constrained);
  res.overhead = summarize(overhead);
  res.mask_share = summarize(share);
  res.mean_batch = res.counted_steps > 0 ? batch_sum / res.counted_steps : 0;
  return res;
}

}  // namespace kvasir::bench
