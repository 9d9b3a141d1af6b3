#include "kvasir/bench/spec_bench.h"

#include <condition_variable>
#include <mutex>
#include <random>

#include "kvasir/engine.h"
#include "kvasir/engine/draft_proposer.h"
#include "kvasir/engine/model_runner.h"
#include "kvasir/kv/block_pool.h"
#include "kvasir/spec/replay_proposer.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"
#include "kvasir/util/timer.h"

namespace kvasir::bench {

namespace {

// One greedy request through `engine`: its tokens and decode tok/s (first to last token).
struct Run {
  std::vector<int32_t> tokens;
  double tok_s = 0;
  RequestOutput last;
};

Run generate(Engine& engine, const std::vector<int32_t>& prompt, int n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.detokenize = false;
  std::mutex mu;
  std::condition_variable cv;
  Run run;
  bool done = false;
  double t_first = 0, t_last = 0;
  int after_first = 0;
  engine.submit(std::move(r), [&](const RequestOutput& o) {
    const double now = now_seconds();
    std::lock_guard lk(mu);
    for (const TokenInfo& t : o.tokens) run.tokens.push_back(t.token);
    if (!o.tokens.empty()) {
      if (t_first == 0) {
        t_first = now;
        after_first += static_cast<int>(o.tokens.size()) - 1;
      } else {
        after_first += static_cast<int>(o.tokens.size());
      }
      t_last = now;
    }
    if (o.finished) {
      run.last = o;
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
  if (!run.last.error.empty()) fail("bench spec: the request failed: {}", run.last.error);
  run.tok_s = t_last > t_first ? after_first / (t_last - t_first) : 0;
  return run;
}

// Alternated single-token and (K+1)-token passes at one position.
void time_passes(const Model& m, const SpecBenchOptions& o, const std::vector<int32_t>& prompt,
                 std::vector<double>& one, std::vector<double>& many) {
  ThreadPool pool(o.threads);
  const int ctx = static_cast<int>(prompt.size()) + o.k + 2;
  const int bs = 16;
  BlockPool blocks((ctx + bs - 1) / bs);
  std::vector<int32_t> table;
  if (!blocks.allocate((ctx + bs - 1) / bs, table)) fail("bench spec: no KV blocks");
  ModelRunnerOptions ro;
  ro.kv_blocks = blocks.n_blocks();
  ro.block_size = bs;
  ro.kv_type = o.kv_type;
  if (&m != o.draft) ro.key_transform = o.key_transform;  // the target's cache only
  ro.max_tokens = std::max<int>(static_cast<int>(prompt.size()), o.k + 1);
  ro.max_logit_rows = o.k + 1;
  ModelRunner runner(m, pool, ro);
  SeqWork w;
  w.blocks = &table;
  w.tokens = prompt;
  w.start = 0;
  runner.run(std::span(&w, 1));
  std::vector<int32_t> verify(static_cast<size_t>(o.k + 1), prompt.back());
  for (int rep = 0; rep < o.reps; ++rep) {
    for (int i = 0; i < o.passes + 2; ++i) {  // two untimed warm-up rounds
      SeqWork a = w;
      a.tokens = std::span<const int32_t>(verify).first(1);
      a.start = static_cast<int>(prompt.size());
      a.logits = Logits::kLast;
      double t0 = now_seconds();
      runner.run(std::span(&a, 1));
      const double t_one = now_seconds() - t0;
      SeqWork b = a;
      b.tokens = verify;
      b.logits = Logits::kAll;
      t0 = now_seconds();
      runner.run(std::span(&b, 1));
      const double t_many = now_seconds() - t0;
      if (i >= 2) {
        one.push_back(t_one);
        many.push_back(t_many);
      }
    }
  }
}

}  // namespace

SpecBenchResult run_spec_bench(const Model& target, const SpecBenchOptions& o) {
  if (o.k < 1 || o.n < 2 || o.prompt < 1 || o.reps < 1 || o.passes < 1)
    fail("bench spec: k, n (>= 2), prompt, reps and passes must be positive");
  if (!o.replay && o.draft == nullptr) fail("bench spec: without replay a draft model is needed");
  const int V = target.config().n_vocab;
  std::mt19937 rng(o.seed);
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt));
  prompt[0] = 1;
  for (size_t i = 1; i < prompt.size(); ++i)
    prompt[i] = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(std::max(1, V - 3)));

  SpecBenchResult res;
  std::vector<double> one, many;
  time_passes(target, o, prompt, one, many);
  res.decode_pass_s = summarize(one);
  res.verify_pass_s = summarize(many);
  res.verify_ratio = res.verify_pass_s.median / res.decode_pass_s.median;

  const Tokenizer tok = Tokenizer::from_gguf(target.file());
  EngineConfig ec;
  ec.max_seqs = 1;
  ec.max_batched_tokens = std::max(o.prompt, 64);
  ec.max_model_len = o.prompt + o.n + 1;
  ec.kv_type = o.kv_type;
  ec.key_transform = o.key_transform;
  ec.threads = o.threads;
  Engine plain(target, tok, ec);
  const Run reference = generate(plain, prompt, o.n);  // warm-up and the replayed output

  EngineConfig sc = ec;
  sc.spec.k = o.k;
  sc.spec.warn_acceptance = o.warn_acceptance;
  std::shared_ptr<Proposer> draft;
  ThreadPool draft_pool(o.threads);
  if (o.draft) {
    DraftProposerOptions d;
    d.kv_blocks = (ec.max_model_len + o.k + 15) / 16 + 1;
    d.kv_type = o.kv_type;
    d.max_tokens = ec.max_batched_tokens;
    d.max_seqs = 1;
    d.k_max = o.k;
    draft = std::make_shared<DraftProposer>(*o.draft, draft_pool, d);
  }
  std::vector<int32_t> ref = prompt;
  ref.insert(ref.end(), reference.tokens.begin(), reference.tokens.end());
  if (o.replay) {
    sc.spec.proposer = std::make_shared<ReplayProposer>(std::vector<std::vector<int32_t>>{ref},
                                                        o.corrupt, o.seed, draft);
  } else {
    sc.spec.proposer = draft;
  }
  Engine spec(target, tok, sc);
  generate(spec, prompt, o.n);  // warm-up
  const EngineStats before = spec.stats();
  std::vector<double> plain_s, spec_s, ratio;
  for (int rep = 0; rep < o.reps; ++rep) {
    const Run p = generate(plain, prompt, o.n);
    const Run s = generate(spec, prompt, o.n);
    if (s.tokens != reference.tokens || p.tokens != reference.tokens)
      fail("bench spec: speculative decoding changed the greedy output (a bug)");
    plain_s.push_back(p.tok_s);
    spec_s.push_back(s.tok_s);
    ratio.push_back(s.tok_s / p.tok_s);
  }
  const EngineStats after = spec.stats();
  res.plain_tok_s = summarize(plain_s);
  res.spec_tok_s = summarize(spec_s);
  res.speedup = summarize(ratio);
  const double proposed = static_cast<double>(after.spec_proposed - before.spec_proposed);
  const double accepted = static_cast<double>(after.spec_accepted - before.spec_accepted);
  const double passes = static_cast<double>(after.spec_passes - before.spec_passes);
  res.acceptance = proposed > 0 ? accepted / proposed : 0;
  res.tokens_per_pass = passes > 0 ? (accepted + passes) / passes : 0;
  res.judged_per_token = proposed / (static_cast<double>(o.reps) * o.n);
  return res;
}

}  // namespace kvasir::bench
