// Prompt scoring in the engine (GenerateRequest::score_prompt) on stories260K: the score equals a
// reference computed here from one ModelRunner pass with every position's logits (entropy and NLL
// by a plain double loop); it is bit-identical alone, chunked, batched with generations (which it
// does not disturb), under speculation, static batching and preemption; its blocks are published
// to the prefix cache though it takes none; a 1-token prompt scores n = 0; submit() refuses the
// combinations that make no sense. Also the pieces: score_row() against the textbook formulas,
// the PromptScorer's chunk order, the per-step row budget and the scheduler's cap on scoring
// tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <random>

#include "kvasir/engine.h"
#include "kvasir/engine/model_runner.h"
#include "kvasir/engine/prompt_scorer.h"
#include "kvasir/engine/scheduler.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"
#include "test_util/greedy.h"
#include "test_util/models.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

test_util::Stories260K& fx() {
  return test_util::Stories260K::get();
}
int n_vocab() {
  return fx().model->config().n_vocab;
}

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::vector<int32_t> t = test_util::random_tokens(n, n_vocab(), seed);
  t[0] = 1;  // BOS
  return t;
}

// Textbook softmax statistics of one row, in double: log Z = m + log sum exp(x - m), p = exp(x -
// log Z), H = -sum p log p, NLL(t) = log Z - x_t.
RowScore reference_row(const float* x, int n, int32_t next) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  const double log_z = m + std::log(s);
  double h = 0;
  for (int i = 0; i < n; ++i) {
    const double lp = double(x[i]) - log_z;
    if (std::isfinite(lp)) h -= std::exp(lp) * lp;
  }
  return {h, log_z - double(x[next])};
}

// The score the contract defines, from every position's logits computed in one pass of a fresh
// ModelRunner (no engine, no chunking, no batching).
PromptScore reference(const std::vector<int32_t>& tokens) {
  ThreadPool pool(1);
  ModelRunnerOptions o;
  o.kv_blocks = 64;
  o.max_tokens = 1024;
  o.max_logit_rows = 1024;
  ModelRunner runner(*fx().model, pool, o);
  std::vector<int32_t> blocks;
  for (int b = 0; b * 16 < static_cast<int>(tokens.size()); ++b) blocks.push_back(b);
  SeqWork w;
  w.tokens = tokens;
  w.blocks = &blocks;
  w.logits = Logits::kAll;
  const StepOutput& out = runner.run(std::vector<SeqWork>{w});
  PromptScore ps;
  ps.n = static_cast<int>(tokens.size()) - 1;
  const auto V = static_cast<size_t>(n_vocab());
  for (int i = 1; i < static_cast<int>(tokens.size()); ++i) {
    const RowScore r =
        reference_row(out.logits.data() + static_cast<size_t>(i - 1) * V, n_vocab(), tokens[i]);
    ps.mean_entropy += r.entropy;
    ps.mean_nll += r.nll;
  }
  if (ps.n > 0) {
    ps.mean_entropy /= ps.n;
    ps.mean_nll /= ps.n;
  }
  return ps;
}

bool same(const PromptScore& a, const PromptScore& b) {
  return a.n == b.n && a.mean_entropy == b.mean_entropy && a.mean_nll == b.mean_nll;
}

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, RequestOutput> final_out;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, int> n_outputs;

  OutputSink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard lk(mu);
      ++n_outputs[o.id];
      for (const auto& t : o.tokens) tokens[o.id].push_back(t.token);
      if (o.finished) {
        final_out[o.id] = o;
        cv.notify_all();
      }
    };
  }
  void wait(size_t n) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return final_out.size() >= n; });
  }
};

GenerateRequest score(std::vector<int32_t> tokens) {
  GenerateRequest r;
  r.prompt = std::move(tokens);
  r.score_prompt = true;
  return r;
}

GenerateRequest greedy(std::vector<int32_t> tokens, int n) {
  GenerateRequest g;
  g.prompt = std::move(tokens);
  g.params.temperature = 0;
  g.params.max_tokens = n;
  g.params.ignore_eos = true;
  return g;
}

EngineConfig small_config() {
  EngineConfig c;
  c.max_seqs = 16;
  c.max_batched_tokens = 256;
  c.max_model_len = 256;
  c.threads = 2;
  return c;
}

RequestOutput run_alone(GenerateRequest r, const EngineConfig& cfg = small_config()) {
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  const uint64_t id = engine.submit(std::move(r), c.sink());
  c.wait(1);
  return c.final_out[id];
}

// The engine's score equals the reference. The logits rows are the same bits (batch-invariant
// kernels: a row does not depend on the batch or the chunk it was computed in, which the
// embedding and generation tests rely on too), so the two differ only by the double-precision
// formulas (log S - T/S against -sum p log p, and a different summation order within a row):
// a few ulps of values around 1..10 nats, i.e. ~1e-14; 1e-9 leaves ample room while any real
// error (an off-by-one position, a wrong row, float accumulation) is orders of magnitude larger.
TEST(PromptScore, EqualsAReferenceFromEveryPositionsLogits) {
  for (int n : {2, 3, 17, 45, 128, 255}) {
    SCOPED_TRACE(testing::Message() << n << " tokens");
    const std::vector<int32_t> toks = prompt(n, 100u + static_cast<uint32_t>(n));
    const RequestOutput out = run_alone(score(toks));
    EXPECT_EQ(out.finish_reason, FinishReason::kStop);
    EXPECT_TRUE(out.error.empty()) << out.error;
    EXPECT_EQ(out.prompt_tokens, n);
    EXPECT_EQ(out.completion_tokens, 0);
    EXPECT_EQ(out.cached_tokens, 0);
    EXPECT_TRUE(out.tokens.empty());
    EXPECT_TRUE(out.text.empty());
    ASSERT_TRUE(out.prompt_score.has_value());
    const PromptScore want = reference(toks);
    EXPECT_EQ(out.prompt_score->n, n - 1);
    EXPECT_NEAR(out.prompt_score->mean_entropy, want.mean_entropy, 1e-9);
    EXPECT_NEAR(out.prompt_score->mean_nll, want.mean_nll, 1e-9);
    EXPECT_GT(out.prompt_score->mean_entropy, 0);
    EXPECT_LT(out.prompt_score->mean_entropy, std::log(n_vocab()) + 1e-9);  // H <= log V
  }
}

// The score means something: a story the model was trained on is far less surprising than random
// tokens from its vocabulary.
TEST(PromptScore, NaturalTextScoresLowerThanRandomTokens) {
  const std::vector<int32_t> story = fx().tok.encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball.",
      true, false);
  const std::vector<int32_t> noise = prompt(static_cast<int>(story.size()), 5);
  const PromptScore a = *run_alone(score(story)).prompt_score;
  const PromptScore b = *run_alone(score(noise)).prompt_score;
  EXPECT_LT(a.mean_nll + 1.0, b.mean_nll);
}

TEST(PromptScore, OneTokenPromptScoresNothing) {
  const RequestOutput out = run_alone(score({1}));
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  ASSERT_TRUE(out.prompt_score.has_value());
  EXPECT_EQ(out.prompt_score->n, 0);
  EXPECT_EQ(out.prompt_score->mean_entropy, 0);
  EXPECT_EQ(out.prompt_score->mean_nll, 0);
  EXPECT_EQ(out.prompt_tokens, 1);
  EXPECT_EQ(out.completion_tokens, 0);
}

// Chunked prefill: budgets far below the prompt cut it into chunks of 1..32 tokens; the score is
// bit-identical to the one-chunk score (rows scored in position order, summed in double). Also:
// a prompt may fill the whole context (nothing is generated after it).
TEST(PromptScore, ChunkedEqualsOneChunkBitForBit) {
  const std::vector<int32_t> toks = prompt(200, 9);
  const PromptScore whole = *run_alone(score(toks)).prompt_score;
  for (int budget : {1, 7, 16, 32}) {
    EngineConfig cfg = small_config();
    cfg.max_batched_tokens = budget;
    const RequestOutput out = run_alone(score(toks), cfg);
    ASSERT_TRUE(out.prompt_score.has_value()) << out.error;
    EXPECT_TRUE(same(*out.prompt_score, whole)) << "budget " << budget;
  }
  const std::vector<int32_t> full = prompt(small_config().max_model_len, 10);
  const RequestOutput out = run_alone(score(full));
  ASSERT_TRUE(out.prompt_score.has_value()) << out.error;
  EXPECT_EQ(out.prompt_score->n, small_config().max_model_len - 1);
  EXPECT_NEAR(out.prompt_score->mean_nll, reference(full).mean_nll, 1e-9);
}

// Scores and greedy generations submitted together to an engine with a small step budget (so
// scoring chunks share steps with decodes and other prefills): every score equals the score alone
// bit for bit and every generation equals the greedy reference token for token. Run plainly, with
// n-gram speculation (verification rows and scoring rows in one step) and with static batching.
void mixed(EngineConfig cfg) {
  std::mt19937 rng(23);
  std::vector<std::vector<int32_t>> score_prompts, gen_prompts;
  std::vector<PromptScore> want;
  for (int i = 0; i < 10; ++i) {
    score_prompts.push_back(prompt(i == 0 ? 1 : 2 + static_cast<int>(rng() % 150), 300u + i));
    want.push_back(*run_alone(score(score_prompts.back())).prompt_score);
  }
  for (int i = 0; i < 8; ++i) {
    // Repetitive prompts, so n-gram speculation finds proposals.
    std::vector<int32_t> p = prompt(6 + 7 * i, 700u + i);
    const std::vector<int32_t> rep(p.begin() + 1, p.end());
    p.insert(p.end(), rep.begin(), rep.end());
    gen_prompts.push_back(p);
  }
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> score_ids, gen_ids;
  for (size_t i = 0; i < score_prompts.size(); ++i) {
    if (i < gen_prompts.size())
      gen_ids.push_back(engine.submit(greedy(gen_prompts[i], 24), c.sink()));
    score_ids.push_back(engine.submit(score(score_prompts[i]), c.sink()));
  }
  c.wait(score_ids.size() + gen_ids.size());
  engine.wait_idle();
  for (size_t i = 0; i < score_ids.size(); ++i) {
    const RequestOutput& o = c.final_out[score_ids[i]];
    EXPECT_EQ(o.finish_reason, FinishReason::kStop) << i;
    ASSERT_TRUE(o.prompt_score.has_value()) << i << ": " << o.error;
    EXPECT_TRUE(same(*o.prompt_score, want[i]))
        << "score " << i << " (" << score_prompts[i].size() << " tokens) differs from alone";
    EXPECT_EQ(c.n_outputs[score_ids[i]], 1) << "a score has one output, the final one";
  }
  for (size_t i = 0; i < gen_ids.size(); ++i) {
    EXPECT_EQ(c.tokens[gen_ids[i]], test_util::greedy_alone(*fx().model, gen_prompts[i], 24))
        << "generation " << i << " was disturbed by the scores batched with it";
    EXPECT_FALSE(c.final_out[gen_ids[i]].prompt_score.has_value());
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  if (cfg.spec.enabled()) {
    EXPECT_GT(s.spec_passes, 0u) << "the test must exercise verification";
  }
}

TEST(PromptScore, BatchedWithGenerationsChangesNeither) {
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 24;
  mixed(cfg);
}

TEST(PromptScore, BatchedWithSpeculatingGenerations) {
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 40;
  cfg.spec.method = SpecMethod::kNgram;
  cfg.spec.k = 3;
  mixed(cfg);
}

TEST(PromptScore, StaticBatching) {
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 24;
  cfg.static_batching = true;
  mixed(cfg);
}

// A KV pool too small for everyone: two long generations fill most of it and the scores admitted
// behind them are preempted mid-prompt; they recompute from position 0 (the scorer starts over)
// and give the score they give alone, bit for bit; the generations are unchanged.
TEST(PromptScore, PreemptionRestartsTheScoreCorrectly) {
  EngineConfig cfg = small_config();
  cfg.max_model_len = 128;
  cfg.kv_blocks = 16;  // 8 blocks hold one full-length sequence
  cfg.max_batched_tokens = 32;
  std::vector<std::vector<int32_t>> toks;
  std::vector<PromptScore> want;
  for (int i = 0; i < 6; ++i) {
    toks.push_back(prompt(60 + 5 * i, 40u + i));
    want.push_back(*run_alone(score(toks.back())).prompt_score);
    EXPECT_NEAR(want.back().mean_nll, reference(toks.back()).mean_nll, 1e-9);
  }
  std::vector<std::vector<int32_t>> gen_prompts = {prompt(100, 7), prompt(98, 8)};
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> gen_ids, ids;
  for (const auto& p : gen_prompts) gen_ids.push_back(engine.submit(greedy(p, 25), c.sink()));
  for (const auto& t : toks) ids.push_back(engine.submit(score(t), c.sink()));
  c.wait(ids.size() + gen_ids.size());
  engine.wait_idle();
  EXPECT_GT(engine.stats().preemptions, 0u) << "the test must exercise preemption";
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestOutput& o = c.final_out[ids[i]];
    ASSERT_TRUE(o.prompt_score.has_value()) << i << ": " << o.error;
    EXPECT_TRUE(same(*o.prompt_score, want[i])) << "request " << i;
  }
  for (size_t i = 0; i < gen_ids.size(); ++i)
    EXPECT_EQ(c.tokens[gen_ids[i]], test_util::greedy_alone(*fx().model, gen_prompts[i], 25));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// A score publishes its full blocks: a generation of the same prompt afterwards is served from
// the prefix cache (64 of 70 tokens: 4 full blocks). A score never takes cached blocks (it needs
// every position's logits): scoring a cached prompt computes all of it, gives the same score and
// leaves the hit counters alone.
TEST(PromptScore, PublishesItsBlocksButTakesNone) {
  Engine engine(*fx().model, fx().tok, small_config());
  Collector c;
  auto submit_wait = [&](GenerateRequest r) {
    size_t finished;
    {
      std::lock_guard lk(c.mu);
      finished = c.final_out.size();
    }
    const uint64_t id = engine.submit(std::move(r), c.sink());
    c.wait(finished + 1);
    engine.wait_idle();
    return c.final_out[id];
  };
  const std::vector<int32_t> p = prompt(70, 61);
  const RequestOutput first = submit_wait(score(p));
  ASSERT_TRUE(first.prompt_score.has_value());
  EXPECT_EQ(first.cached_tokens, 0);
  const EngineStats before = engine.stats();
  const RequestOutput gen = submit_wait(greedy(p, 4));
  EXPECT_EQ(gen.cached_tokens, 64) << "the score's blocks were not published";
  EXPECT_EQ(c.tokens[gen.id], test_util::greedy_alone(*fx().model, p, 4));
  EXPECT_EQ(engine.stats().prefix_hits, before.prefix_hits + 64);

  const EngineStats mid = engine.stats();
  const RequestOutput again = submit_wait(score(p));
  EXPECT_EQ(again.cached_tokens, 0);
  ASSERT_TRUE(again.prompt_score.has_value());
  EXPECT_TRUE(same(*again.prompt_score, *first.prompt_score));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.prefix_hits, mid.prefix_hits) << "a score took prefix-cache blocks";
  EXPECT_EQ(s.prefix_queries, mid.prefix_queries) << "a score does not look its prompt up";
  EXPECT_EQ(s.prompt_tokens, mid.prompt_tokens + 70) << "every token is computed";
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST(PromptScore, AbortedScoreFreesItsBlocks) {
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 8;  // many steps for one long prompt
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  const uint64_t id = engine.submit(score(prompt(250, 7)), c.sink());
  engine.abort(id);
  c.wait(1);
  engine.wait_idle();
  EXPECT_EQ(c.final_out[id].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(c.final_out[id].prompt_score.has_value());
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(PromptScore, SubmitRefusesCombinationsThatMakeNoSense) {
  EngineConfig cfg = small_config();
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  auto refused = [&](GenerateRequest r) {
    try {
      engine.submit(std::move(r), c.sink());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto with = [](auto edit) {
    GenerateRequest r = score(prompt(5, 1));
    edit(r);
    return r;
  };
  auto refused_as = [&](GenerateRequest r, const std::string& word) {
    const std::string e = refused(std::move(r));
    EXPECT_EQ(e.rfind("score_prompt", 0), 0u) << e;
    EXPECT_NE(e.find(word), std::string::npos) << e;
  };
  refused_as(with([](GenerateRequest& r) { r.embedding = EmbeddingParams{}; }), "embed");
  refused_as(with([](GenerateRequest& r) { r.grammar = "root ::= \"a\""; }), "grammar");
  refused_as(with([](GenerateRequest& r) { r.params.logit_bias[5] = 2.0f; }), "logit_bias");
  refused_as(with([](GenerateRequest& r) { r.params.repetition_penalty = 1.3f; }), "penalties");
  refused_as(with([](GenerateRequest& r) { r.params.presence_penalty = 0.5f; }), "penalties");
  refused_as(with([](GenerateRequest& r) { r.params.logprobs = true; }), "logprobs");
  refused_as(with([](GenerateRequest& r) { r.params.top_logprobs = 3; }), "logprobs");
  EXPECT_NE(refused(score({})), "");
  EXPECT_NE(refused(score(prompt(cfg.max_model_len + 1, 1))), "");
  // Sampling options that do not touch the logits are ignored, as is max_tokens (even one that
  // could not fit after the prompt): nothing is sampled.
  EXPECT_EQ(refused(with([](GenerateRequest& r) {
              r.params.temperature = 0.3f;
              r.params.top_k = 5;
              r.params.max_tokens = 10000;
              r.params.stop = {"x"};
            })),
            "");
  c.wait(1);
  const RequestOutput& o = c.final_out.begin()->second;
  ASSERT_TRUE(o.prompt_score.has_value());
  EXPECT_TRUE(o.tokens.empty());
}

// score_row against the textbook formulas, on a row with a wide range and -inf entries (a token
// with p = 0 adds nothing to the entropy); a uniform row has entropy log V.
TEST(PromptScore, ScoreRowMatchesTheDefinition) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 8.0f);
  std::vector<float> row(1000);
  for (float& x : row) x = d(rng);
  row[10] = row[500] = -std::numeric_limits<float>::infinity();
  for (int32_t t : {0, 17, 999}) {
    const RowScore a = score_row(row.data(), 1000, t), b = reference_row(row.data(), 1000, t);
    EXPECT_NEAR(a.entropy, b.entropy, 1e-12);
    EXPECT_NEAR(a.nll, b.nll, 1e-12);
  }
  EXPECT_EQ(score_row(row.data(), 1000, 10).nll, std::numeric_limits<double>::infinity());
  const std::vector<float> flat(64, 3.5f);
  EXPECT_NEAR(score_row(flat.data(), 64, 5).entropy, std::log(64.0), 1e-12);
  EXPECT_NEAR(score_row(flat.data(), 64, 5).nll, std::log(64.0), 1e-12);
}

// The scorer takes chunks in order, wants no row for the last position, starts over at 0, and
// refuses a score asked for too early.
TEST(PromptScore, ScorerTakesChunksInOrder) {
  const int V = 4;
  const std::vector<int32_t> p = {0, 1, 2};
  // Three rows; row i predicts p[i + 1]; only rows 0 and 1 are ever used.
  const std::vector<float> rows = {0, 1, 0, 0, 0, 0, 2, 0, 9, 9, 9, 9};
  PromptScorer s(3, V);
  EXPECT_EQ(s.rows_wanted(0, 3), 2);
  EXPECT_EQ(s.rows_wanted(0, 2), 2);
  EXPECT_EQ(s.rows_wanted(2, 1), 0);
  EXPECT_EQ(s.rows_wanted(1, 2), 1);
  s.add(0, 1, rows.data(), p);
  EXPECT_FALSE(s.complete());
  EXPECT_THROW(s.finish(), Error);
  EXPECT_THROW(s.add(2, 1, nullptr, p), Error) << "position 1 skipped";
  EXPECT_THROW(s.add(1, 1, nullptr, p), Error) << "a row is needed";
  s.add(0, 2, rows.data(), p);  // starts over
  s.add(2, 1, nullptr, p);
  ASSERT_TRUE(s.complete());
  const PromptScore ps = s.finish();
  const RowScore r0 = reference_row(rows.data(), V, 1), r1 = reference_row(rows.data() + V, V, 2);
  EXPECT_EQ(ps.n, 2);
  EXPECT_NEAR(ps.mean_entropy, (r0.entropy + r1.entropy) / 2, 1e-15);
  EXPECT_NEAR(ps.mean_nll, (r0.nll + r1.nll) / 2, 1e-15);
  EXPECT_THROW(PromptScorer(0, V), Error);
}

// The logits budget: 32 MiB of rows, at least 16, at most the step's tokens.
TEST(PromptScore, RowsPerStep) {
  EXPECT_EQ(score_rows_per_step(512, 256), 256);
  EXPECT_EQ(score_rows_per_step(32000, 512), 262);
  EXPECT_EQ(score_rows_per_step(65536, 512), 128);
  EXPECT_EQ(score_rows_per_step(151936, 2048), 55);
  EXPECT_EQ(score_rows_per_step(1 << 22, 512), 16);
  EXPECT_EQ(score_rows_per_step(1 << 22, 8), 8);
}

// The scheduler keeps the tokens of scoring sequences in a step within max_score_tokens, while
// other sequences still get the rest of the budget, and a scoring sequence never takes prefix-cache
// hits.
TEST(PromptScore, SchedulerCapsScoringTokensPerStep) {
  KVCacheManager kv(64, 16, /*prefix_caching=*/true);
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 64;
  cfg.max_score_tokens = 10;
  Scheduler sched(cfg, kv);
  std::vector<std::unique_ptr<Sequence>> seqs;
  auto add = [&](int n, bool scoring) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    for (int i = 0; i < n; ++i) s->tokens.push_back(1 + i);
    s->n_prompt = n;
    s->max_tokens = scoring ? 0 : 100;
    if (scoring) s->scorer = std::make_unique<PromptScorer>(n, 512);
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  };
  // A generation caches 48 tokens' blocks first.
  Sequence* g0 = add(48, false);
  std::vector<ScheduledSeq> out;
  std::vector<Sequence*> pre;
  sched.schedule(out, pre);
  ASSERT_EQ(out.size(), 1u);
  g0->num_computed = 48;
  kv.cache_full_blocks(g0->kv, g0->tokens, 48);
  g0->tokens.push_back(7);
  // Waiting, in order: a score of a cached prompt (g0's first 40 tokens), a generation that
  // shares g0's first block, another score (blocked in the first steps: the cap is spent, and it
  // waits, in order, rather than let the queue behind it pass).
  Sequence* a = add(40, true);
  Sequence* g = add(30, false);
  Sequence* b = add(30, true);
  int total_a = 0, total_b = 0;
  for (int step = 0; step < 20 && (a->num_computed < 40 || b->num_computed < 30); ++step) {
    sched.schedule(out, pre);
    ASSERT_TRUE(pre.empty());
    int scoring = 0, all = 0;
    for (const ScheduledSeq& ss : out) {
      if (ss.seq->scorer) scoring += ss.n_new;
      all += ss.n_new;
      if (ss.seq == g && step == 0) {
        EXPECT_EQ(ss.n_new, 30 - 16) << "g: its cached prefix";
      }
      ss.seq->num_computed += ss.n_new;
      kv.cache_full_blocks(ss.seq->kv, ss.seq->tokens, ss.seq->num_computed);
      if (!ss.seq->scorer && ss.seq->num_computed == static_cast<int>(ss.seq->tokens.size()))
        ss.seq->tokens.push_back(7);
      if (ss.seq == a) total_a += ss.n_new;
      if (ss.seq == b) total_b += ss.n_new;
    }
    EXPECT_LE(scoring, 10) << "step " << step;
    EXPECT_LE(all, 64);
    if (step == 0) {
      EXPECT_EQ(scoring, 10) << "the cap is used";
    }
  }
  EXPECT_EQ(a->cached_tokens, 0);
  EXPECT_EQ(total_a, 40) << "a scoring sequence computes its whole prompt";
  EXPECT_EQ(total_b, 30);
  EXPECT_EQ(sched.prefix_queries(), 48u + 30u) << "scores are not looked up";
}

}  // namespace
}  // namespace kvasir
