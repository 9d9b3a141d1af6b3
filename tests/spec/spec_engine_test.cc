// Speculative decoding inside the engine, on stories260K: greedy outputs token for token equal
// to plain decoding (draft model and n-gram, alone and 32 concurrent, under preemption and prefix
// caching), sampled outputs distributed as the target's (chi-square over thousands of requests
// with a draft far from the target; the deliberately broken rejection rule fails the same test),
// stop strings and max_tokens inside a proposal, logprobs, the per-request opt-out, the
// acceptance warning with its fallback to plain decoding, and the vocabulary check.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "chi_square.h"
#include "kvasir/engine.h"
#include "kvasir/engine/draft_proposer.h"
#include "kvasir/engine/sequence_runner.h"
#include "kvasir/model/model.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/spec/proposer.h"
#include "kvasir/spec/rejection_sampler.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/greedy.h"
#include "test_util/models.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

test_util::Stories260K& fx() {
  return test_util::Stories260K::get();
}

// Drafts: stories260K quantized (close to the target), and a random-weight model with the same
// vocabulary (far from it: most proposals are rejected).
const Model& draft_model(const std::string& kind) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  static std::mutex mu;
  std::lock_guard lk(mu);
  auto& m = cache[kind];
  if (!m) {
    std::string path;
    if (kind == "random") {
      SynthSpec s;
      s.dim = 64;
      s.n_layers = 1;
      s.n_heads = 4;
      s.n_kv_heads = 2;
      s.ffn_dim = 96;
      s.n_vocab = 512;
      s.seed = 7;
      s.vocab_from = test_util::stories260k_path();
      path = test_util::synth_model(s, "spec_random_draft");
    } else {
      path = test_util::temp_dir() + "/spec_draft_" + kind + ".gguf";
      QuantizeOptions o;
      o.pure = true;
      quantize_gguf(test_util::stories260k_path(), path, *dtype_from_name(kind), o);
    }
    m = Model::load(path);
  }
  return *m;
}

std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int n) {
  return test_util::greedy_alone(*fx().model, prompt, n);
}

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<TokenInfo>> tokens;
  std::map<uint64_t, RequestOutput> final_out;
  std::map<uint64_t, std::string> text;
  int done = 0;

  OutputSink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard lk(mu);
      for (const auto& t : o.tokens) tokens[o.id].push_back(t);
      text[o.id] += o.text;
      if (o.finished) {
        final_out[o.id] = o;
        done++;
        cv.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done >= n; });
  }
  std::vector<int32_t> ids(uint64_t id) {
    std::vector<int32_t> v;
    for (const auto& t : tokens[id]) v.push_back(t.token);
    return v;
  }
};

GenerateRequest greedy(std::vector<int32_t> prompt, int n) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  return r;
}

// Prompts: story openings (their continuations repeat phrases, so n-grams hit) and random
// tokens, with repeats so the prefix cache serves some.
std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
  const char* texts[] = {"Once upon a time", "Lily and Tom went to the park.",
                         "The little dog was sad. The little dog", "One day, a bird"};
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    if (i % 3 == 2) {
      std::vector<int32_t> p(1 + rng() % 40);
      p[0] = 1;
      for (size_t j = 1; j < p.size(); ++j) p[j] = 3 + static_cast<int32_t>(rng() % 509);
      out.push_back(p);
    } else {
      out.push_back(fx().tok.encode(texts[rng() % 4], true, false));
    }
  }
  return out;
}

EngineConfig spec_config(SpecMethod m, const std::string& draft = "", int k = 4) {
  EngineConfig cfg;
  cfg.max_seqs = 32;
  cfg.max_batched_tokens = 256;
  cfg.max_model_len = 256;
  cfg.threads = 2;
  cfg.spec.method = m;
  cfg.spec.k = k;
  if (!draft.empty()) cfg.spec.draft = &draft_model(draft);
  cfg.spec.warn_acceptance = 0;  // judge every proposal: no fallback
  return cfg;
}

// Every request's greedy output equals plain decoding of it alone.
EngineStats check_greedy_identity(const EngineConfig& cfg, int n_requests, uint32_t seed) {
  const auto ps = prompts(n_requests, seed);
  std::mt19937 rng(seed);
  std::vector<int> n_out;
  for (int i = 0; i < n_requests; ++i) n_out.push_back(8 + static_cast<int>(rng() % 80));
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> ids;
  for (int i = 0; i < n_requests; ++i)
    ids.push_back(engine.submit(greedy(ps[i], n_out[i]), c.sink()));
  c.wait(n_requests);
  engine.wait_idle();
  for (int i = 0; i < n_requests; ++i) {
    EXPECT_EQ(c.ids(ids[i]), alone(ps[i], n_out[i])) << "request " << i;
    EXPECT_EQ(c.final_out[ids[i]].completion_tokens, n_out[i]);
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  return s;
}

TEST(SpecEngine, GreedyDraftAloneMatchesPlainDecoding) {
  const EngineStats s = check_greedy_identity(spec_config(SpecMethod::kDraft, "q4_0"), 1, 3);
  EXPECT_GT(s.spec_passes, 0u);
  EXPECT_GT(s.spec_accepted, 0u);
}

TEST(SpecEngine, GreedyDraftUnder32ConcurrentRequestsMatchesPlainDecoding) {
  for (const char* d : {"q8_0", "q4_0", "random"}) {
    SCOPED_TRACE(d);
    const EngineStats s = check_greedy_identity(spec_config(SpecMethod::kDraft, d), 64, 5);
    EXPECT_GT(s.spec_passes, 0u);
    EXPECT_LE(s.spec_accepted, s.spec_proposed);
    // Drafts never reach max_tokens, so every pass ends with one token of the target's own.
    EXPECT_EQ(s.spec_emitted, s.spec_accepted + s.spec_passes);
  }
}

TEST(SpecEngine, GreedyNgramAloneAndConcurrentMatchesPlainDecoding) {
  check_greedy_identity(spec_config(SpecMethod::kNgram), 1, 11);
  const EngineStats s = check_greedy_identity(spec_config(SpecMethod::kNgram, "", 5), 64, 12);
  EXPECT_GT(s.spec_accepted, 0u);
}

TEST(SpecEngine, PreemptionAndTinyBudgetsKeepGreedyOutputsIdentical) {
  for (SpecMethod m : {SpecMethod::kDraft, SpecMethod::kNgram}) {
    for (int budget : {64, 7}) {
      EngineConfig cfg = spec_config(m, m == SpecMethod::kDraft ? "q8_0" : "", 6);
      cfg.max_seqs = 16;
      cfg.max_batched_tokens = budget;
      cfg.kv_blocks = 256 / 16 + 4;  // one full sequence plus a little: heavy pressure
      const EngineStats s = check_greedy_identity(cfg, 40, 21);
      if (budget == 64) {
        EXPECT_GT(s.preemptions, 0u) << "the pool was meant to be too small";
      }
      EXPECT_GT(s.spec_passes, 0u);
    }
  }
}

TEST(SpecEngine, AutoKMatchesPlainDecoding) {
  const EngineStats s = check_greedy_identity(spec_config(SpecMethod::kDraft, "q8_0", 0), 32, 8);
  EXPECT_GE(s.spec_k, 1);
  EXPECT_LE(s.spec_k, 8);
}

// Plain and speculative engines on the same requests: text, tokens and logprobs agree.
TEST(SpecEngine, StopStringsMaxTokensAndLogprobsInsideAProposal) {
  const auto p = fx().tok.encode("Once upon a time", true, false);
  auto run = [&](bool spec, GenerateRequest r) {
    EngineConfig cfg = spec ? spec_config(SpecMethod::kNgram, "", 6) : EngineConfig{};
    cfg.threads = 2;
    cfg.max_model_len = 256;
    Engine e(*fx().model, fx().tok, cfg);
    Collector c;
    const uint64_t id = e.submit(std::move(r), c.sink());
    c.wait(1);
    return std::make_tuple(c.tokens[id], c.text[id], c.final_out[id]);
  };
  // The greedy story repeats "She" and "Lily": stop on the second sentence's end.
  for (const char* stop : {"park.", "Lily", "ball"}) {
    GenerateRequest r = greedy(p, 120);
    r.params.stop = {stop};
    r.params.ignore_eos = false;
    r.params.logprobs = true;
    r.params.top_logprobs = 2;
    auto [pt, ptext, pout] = run(false, r);
    auto [st, stext, sout] = run(true, r);
    EXPECT_EQ(stext, ptext) << stop;
    EXPECT_EQ(sout.finish_reason, pout.finish_reason);
    EXPECT_EQ(sout.completion_tokens, pout.completion_tokens);
    ASSERT_EQ(st.size(), pt.size());
    for (size_t i = 0; i < st.size(); ++i) {
      EXPECT_EQ(st[i].token, pt[i].token);
      EXPECT_EQ(st[i].logprob, pt[i].logprob) << i;
      EXPECT_EQ(st[i].top_logprobs, pt[i].top_logprobs) << i;
    }
  }
  for (int n : {1, 2, 3, 5, 7}) {
    auto [st, stext, sout] = run(true, greedy(p, n));
    EXPECT_EQ(static_cast<int>(st.size()), n);
    EXPECT_EQ(sout.finish_reason, FinishReason::kLength);
  }
}

TEST(SpecEngine, PerRequestOptOutDecodesPlainly) {
  Engine e(*fx().model, fx().tok, spec_config(SpecMethod::kNgram));
  Collector c;
  GenerateRequest off = greedy(fx().tok.encode("Once upon a time", true, false), 60);
  off.speculative = false;
  GenerateRequest on = off;
  on.speculative = true;
  const uint64_t a = e.submit(off, c.sink());
  const uint64_t b = e.submit(on, c.sink());
  c.wait(2);
  EXPECT_EQ(c.final_out[a].spec_passes, 0);
  EXPECT_EQ(c.final_out[a].spec_proposed, 0);
  EXPECT_GT(c.final_out[b].spec_passes, 0);
  EXPECT_GT(c.final_out[b].spec_accepted, 0);
  EXPECT_EQ(c.ids(a), c.ids(b));
  EXPECT_LT(c.final_out[b].spec_passes, 60) << "some passes must have produced several tokens";
}

// A proposer whose every token is wrong (an id stories260K never generates).
class WrongProposer final : public Proposer {
 public:
  const char* name() const override { return "wrong"; }
  void propose(std::span<ProposalSlot> slots) override {
    for (ProposalSlot& s : slots) s.draft->assign(static_cast<size_t>(s.k), 0);
  }
};

TEST(SpecEngine, LowAcceptanceWarnsAndFallsBackToPlainDecoding) {
  EngineConfig cfg = spec_config(SpecMethod::kNone);
  cfg.spec.proposer = std::make_shared<WrongProposer>();
  cfg.spec.warn_acceptance = 0.6;
  cfg.spec.window = 8;
  cfg.spec.reprobe_steps = 50;
  cfg.spec.probe = 4;
  Engine e(*fx().model, fx().tok, cfg);
  Collector c;
  const auto p = fx().tok.encode("Once upon a time", true, false);
  const uint64_t id = e.submit(greedy(p, 240), c.sink());
  c.wait(1);
  const EngineStats s = e.stats();
  EXPECT_EQ(c.ids(id), alone(p, 240));
  EXPECT_EQ(s.spec_warnings, 1u);
  EXPECT_TRUE(s.spec_fallback);
  EXPECT_EQ(s.spec_accepted, 0u);
  EXPECT_DOUBLE_EQ(s.spec_window_acceptance, 0.0);
  // 8 proposals to judge the window, then probes of 4 every 50 plain steps.
  EXPECT_GE(s.spec_probes, 3u);
  EXPECT_LE(s.spec_passes, 8u + 4u * s.spec_probes);
}

TEST(SpecEngine, DraftWithAnotherVocabularyIsRefused) {
  SynthSpec s;
  s.n_vocab = 32000;
  s.vocab_from = test_util::models_dir() + "/vocab/ggml-vocab-llama-spm.gguf";
  auto other = Model::load(test_util::synth_model(s, "spec_other_vocab"));
  EngineConfig cfg = spec_config(SpecMethod::kDraft);
  cfg.spec.draft = other.get();
  try {
    Engine e(*fx().model, fx().tok, cfg);
    FAIL() << "a draft with another vocabulary must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft model's vocabulary differs from the target's: "
                                         "token "),
              std::string::npos)
        << e.what();
  }
}

// ---- sampled outputs follow the target's distribution

// The target's next-token distribution after `context` under `sp` (no penalties used).
std::vector<double> target_next(const std::vector<int32_t>& context, const SamplingParams& sp) {
  ThreadPool pool(1);
  SequenceRunnerOptions o;
  o.max_ctx = static_cast<int>(context.size()) + 1;
  SequenceRunner r(*fx().model, pool, o);
  auto logits = r.feed(context);
  Sampler s(sp, r.n_vocab());
  std::vector<float> p(static_cast<size_t>(r.n_vocab()));
  s.probabilities(logits.data(), r.n_vocab(), p.data());
  return {p.begin(), p.end()};
}

struct Chi2 {
  double stat = 0;
  int df = 0;
};

// A draft that is the target with its distribution flattened (q proportional to p^0.3 over p's
// support): it overlaps p a lot but is clearly different, so the residual max(0, p - q) matters.
// It runs stories260K itself, from scratch for every proposal (the prompts are short).
class FlattenedTargetProposer final : public Proposer {
 public:
  const char* name() const override { return "flattened-target"; }
  void propose(std::span<ProposalSlot> slots) override {
    const int32_t V = fx().tok.n_vocab();
    size_t rows = 0;
    for (const ProposalSlot& sl : slots) rows += static_cast<size_t>(sl.k);
    q_.resize(rows * static_cast<size_t>(V));
    float* q = q_.data();
    for (ProposalSlot& sl : slots) {
      sl.draft->clear();
      sl.q = q;
      runner_.reset();
      auto logits = runner_.feed(sl.tokens);
      SamplingParams sp = sl.sampler->params();
      Sampler s(sp, V);
      s.copy_history_from(*sl.sampler);
      for (int j = 0; j < sl.k; ++j, q += V) {
        s.probabilities(logits.data(), V, q);
        double total = 0;
        for (int32_t i = 0; i < V; ++i) {
          q[i] = q[i] > 0 ? std::pow(q[i], 0.3f) : 0.0f;
          total += q[i];
        }
        for (int32_t i = 0; i < V; ++i) q[i] = static_cast<float>(q[i] / total);
        const int32_t d = draw_from_weights(q, V, 1.0, rng_.uniform());
        sl.draft->push_back(d);
        s.accept(d);
        if (j + 1 < sl.k) logits = runner_.feed(std::span(&d, 1));
      }
    }
  }

 private:
  static SequenceRunnerOptions options() {
    SequenceRunnerOptions o;
    o.max_ctx = 64;
    return o;
  }
  ThreadPool pool_{1};
  SequenceRunner runner_{*fx().model, pool_, options()};
  Rng rng_{12345};
  std::vector<float> q_;
};

// n sampled requests of 5 tokens; the 2nd and 3rd (chosen by verification: K = 3) are tested
// against the target's conditional distributions given the tokens before them, in groups of at
// least 150 samples. Returns the summed statistic and degrees of freedom.
Chi2 sampled_chi2(EngineConfig cfg, int n, uint64_t seed0) {
  cfg.max_seqs = 64;
  const auto prompt = fx().tok.encode("Once upon a time", true, false);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 6;
  sp.max_tokens = 5;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> outs;
  EngineStats st;
  {
    Engine e(*fx().model, fx().tok, cfg);
    Collector c;
    std::vector<uint64_t> ids;
    for (int i = 0; i < n; ++i) {
      GenerateRequest r;
      r.prompt = prompt;
      r.params = sp;
      r.params.seed = seed0 + static_cast<uint64_t>(i);
      r.detokenize = false;
      ids.push_back(e.submit(std::move(r), c.sink()));
    }
    c.wait(n);
    for (uint64_t id : ids) outs.push_back(c.ids(id));
    st = e.stats();
  }
  EXPECT_GE(st.spec_passes, static_cast<uint64_t>(n)) << "every request must verify";
  EXPECT_LT(st.spec_accepted, st.spec_proposed) << "some proposals must be rejected";
  Chi2 total;
  for (int pos = 1; pos <= 2; ++pos) {
    std::map<std::vector<int32_t>, std::vector<int64_t>> groups;
    for (const auto& o : outs) {
      std::vector<int32_t> ctx(o.begin(), o.begin() + pos);
      auto& g = groups[ctx];
      g.resize(static_cast<size_t>(fx().tok.n_vocab()));
      g[static_cast<size_t>(o[static_cast<size_t>(pos)])]++;
    }
    for (const auto& [ctx, counts] : groups) {
      int64_t m = 0;
      for (int64_t x : counts) m += x;
      if (m < 150) continue;
      std::vector<int32_t> context = prompt;
      context.insert(context.end(), ctx.begin(), ctx.end());
      int df = 0;
      total.stat += test_util::chi_square(target_next(context, sp), counts, &df);
      total.df += df;
    }
  }
  return total;
}

EngineConfig sampled_config(bool flattened, bool broken) {
  EngineConfig cfg =
      spec_config(flattened ? SpecMethod::kNone : SpecMethod::kDraft, flattened ? "" : "q4_0", 3);
  if (flattened) cfg.spec.proposer = std::make_shared<FlattenedTargetProposer>();
  cfg.spec.broken_rejection_for_tests = broken;
  return cfg;
}

TEST(SpecEngine, SampledOutputsFollowTheTargetDistribution) {
  for (bool flattened : {false, true}) {
    SCOPED_TRACE(flattened ? "flattened target as draft" : "q4_0 draft");
    const Chi2 ok = sampled_chi2(sampled_config(flattened, false), 6000, 1000);
    ASSERT_GE(ok.df, 10);
    EXPECT_LT(ok.stat, test_util::chi_square_critical_1e6(ok.df)) << "df " << ok.df;
  }
}

TEST(SpecEngine, BrokenRejectionSamplerFailsTheDistributionTest) {
  const Chi2 bad = sampled_chi2(sampled_config(true, true), 6000, 1000);
  ASSERT_GE(bad.df, 10);
  EXPECT_GT(bad.stat, test_util::chi_square_critical_1e6(bad.df)) << "df " << bad.df;
}

// ---- the draft proposer's own KV cache

TEST(DraftProposer, KeepsValidDraftKvAndReleasesIt) {
  ThreadPool pool(1);
  DraftProposerOptions o;
  o.kv_blocks = 16;
  o.k_max = 4;
  o.max_seqs = 2;
  DraftProposer d(draft_model("q8_0"), pool, o);
  SamplingParams sp;
  sp.temperature = 0;
  Sampler target(sp, fx().tok.n_vocab());
  std::vector<int32_t> tokens = fx().tok.encode("Once upon a time", true, false);
  std::vector<int32_t> draft;
  ProposalSlot s;
  s.id = 7;
  s.tokens = tokens;
  s.k = 4;
  s.sampler = &target;
  s.draft = &draft;
  d.propose(std::span(&s, 1));
  ASSERT_EQ(draft.size(), 4u);
  EXPECT_EQ(s.q, nullptr) << "greedy proposals are one-hot";
  // The q8_0 draft agrees with its F32 target on the first greedy tokens of this story.
  EXPECT_EQ(std::vector<int32_t>(draft.begin(), draft.begin() + 2),
            std::vector<int32_t>(alone(tokens, 2)));
  // Keep two draft tokens and a different third one; propose again from there.
  tokens.insert(tokens.end(), draft.begin(), draft.begin() + 2);
  tokens.push_back(draft[2] == 5 ? 6 : 5);
  d.accepted(7, tokens);
  s.tokens = tokens;
  d.propose(std::span(&s, 1));
  EXPECT_EQ(draft.size(), 4u);
  EXPECT_GT(d.blocks_in_use(), 0);
  d.release(7);
  EXPECT_EQ(d.blocks_in_use(), 0);
  EXPECT_EQ(d.n_sequences(), 0u);
}

}  // namespace
}  // namespace kvasir
