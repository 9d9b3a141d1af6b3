// Embedding requests in the engine (GenerateRequest::embedding) on stories260K: the vector equals
// a direct pooling of the model's hidden rows (one ModelRunner pass over the whole input); it is
// bit-identical alone, batched with other embeddings and with generation, under chunked prefill
// and after preemption; embeddings neither take nor leave prefix-cache blocks and free their KV;
// submit() refuses what cannot be pooled.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "kvasir/engine.h"
#include "kvasir/engine/model_runner.h"
#include "kvasir/engine/pooling.h"
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
int dim() {
  return fx().model->config().dim;
}

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::vector<int32_t> t = test_util::random_tokens(n, fx().model->config().n_vocab, seed);
  t[0] = 1;  // BOS
  return t;
}

// Every token's final-norm hidden row, computed in one pass of a fresh ModelRunner.
std::vector<float> hidden_rows(const std::vector<int32_t>& tokens) {
  ThreadPool pool(1);
  ModelRunnerOptions o;
  o.kv_blocks = 64;
  o.max_tokens = 1024;
  o.max_hidden_rows = 1024;
  ModelRunner runner(*fx().model, pool, o);
  std::vector<int32_t> blocks;
  for (int b = 0; b * 16 < static_cast<int>(tokens.size()); ++b) blocks.push_back(b);
  SeqWork w;
  w.tokens = tokens;
  w.blocks = &blocks;
  w.logits = Logits::kNone;
  w.hidden_begin = 0;
  w.hidden_end = static_cast<int>(tokens.size());
  const StepOutput& out = runner.run(std::vector<SeqWork>{w});
  return std::vector<float>(out.hidden.begin(), out.hidden.end());
}

// The vector the contract (engine.h, pooling.h) defines, computed here from the rows: mean = the
// double sum of the rows in position order divided by n; cls = row 0; last = row n-1; then the
// first `dimensions` values; then each times 1/sqrt(double sum of squares).
std::vector<float> direct(const std::vector<int32_t>& tokens, const EmbeddingParams& p) {
  const std::vector<float> rows = hidden_rows(tokens);
  const size_t n = tokens.size(), d = static_cast<size_t>(dim());
  std::vector<float> v(d);
  for (size_t i = 0; i < d; ++i) {
    if (p.pooling == Pooling::kMean) {
      double s = 0;
      for (size_t t = 0; t < n; ++t) s += rows[t * d + i];
      v[i] = static_cast<float>(s / static_cast<double>(n));
    } else {
      v[i] = rows[(p.pooling == Pooling::kCls ? 0 : n - 1) * d + i];
    }
  }
  if (p.dimensions > 0) v.resize(static_cast<size_t>(p.dimensions));
  if (p.normalize) {
    double ss = 0;
    for (float x : v) ss += double(x) * x;
    for (float& x : v) x = static_cast<float>(x * (1.0 / std::sqrt(ss)));
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, RequestOutput> final_out;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  int n_outputs = 0;

  OutputSink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard lk(mu);
      ++n_outputs;
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

GenerateRequest embed(std::vector<int32_t> tokens, Pooling pooling, bool normalize = true,
                      int dimensions = 0) {
  GenerateRequest r;
  r.prompt = std::move(tokens);
  r.embedding = EmbeddingParams{pooling, normalize, dimensions};
  return r;
}

EngineConfig small_config() {
  EngineConfig c;
  c.max_seqs = 16;
  c.max_batched_tokens = 256;
  c.max_model_len = 256;
  c.threads = 2;
  return c;
}

// One request in an engine of its own.
RequestOutput run_alone(GenerateRequest r, const EngineConfig& cfg = small_config()) {
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  const uint64_t id = engine.submit(std::move(r), c.sink());
  c.wait(1);
  return c.final_out[id];
}

TEST(EmbeddingEngine, EqualsTheDirectPoolingOfTheHiddenRows) {
  const std::vector<int32_t> toks = prompt(45, 3);
  for (Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast})
    for (bool normalize : {true, false})
      for (int dims : {0, 10}) {
        SCOPED_TRACE(testing::Message() << pooling_name(pooling) << " normalize " << normalize
                                        << " dimensions " << dims);
        const RequestOutput out = run_alone(embed(toks, pooling, normalize, dims));
        EXPECT_EQ(out.finish_reason, FinishReason::kStop);
        EXPECT_TRUE(out.error.empty()) << out.error;
        EXPECT_EQ(out.prompt_tokens, 45);
        EXPECT_EQ(out.completion_tokens, 0);
        EXPECT_EQ(out.cached_tokens, 0);
        EXPECT_TRUE(out.tokens.empty());
        const std::vector<float> want = direct(toks, {pooling, normalize, dims});
        ASSERT_EQ(out.embedding.size(), static_cast<size_t>(dims > 0 ? dims : dim()));
        EXPECT_TRUE(same_bits(out.embedding, want));
        if (normalize) {
          double ss = 0;
          for (float x : out.embedding) ss += double(x) * x;
          EXPECT_NEAR(ss, 1.0, 1e-5);  // float rounding of each value: ~dim * 2^-24
        }
      }
  // The three poolings differ (this input's rows are not all equal).
  const auto mean = run_alone(embed(toks, Pooling::kMean)).embedding;
  const auto cls = run_alone(embed(toks, Pooling::kCls)).embedding;
  const auto last = run_alone(embed(toks, Pooling::kLast)).embedding;
  EXPECT_FALSE(same_bits(mean, cls));
  EXPECT_FALSE(same_bits(mean, last));
  EXPECT_FALSE(same_bits(cls, last));
}

// `dimensions` keeps the first N values of the pooled vector and normalizes those: the result is
// the unit vector along the raw vector's first N values.
TEST(EmbeddingEngine, DimensionsTruncateBeforeNormalizing) {
  const std::vector<int32_t> toks = prompt(30, 4);
  const auto raw = run_alone(embed(toks, Pooling::kMean, /*normalize=*/false)).embedding;
  const auto cut = run_alone(embed(toks, Pooling::kMean, true, 16)).embedding;
  ASSERT_EQ(cut.size(), 16u);
  double ss = 0;
  for (int i = 0; i < 16; ++i) ss += double(raw[i]) * raw[i];
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(cut[i], raw[i] / std::sqrt(ss), 1e-6) << i;
  const auto full = run_alone(embed(toks, Pooling::kMean, true, dim())).embedding;
  EXPECT_TRUE(same_bits(full, run_alone(embed(toks, Pooling::kMean)).embedding))
      << "dimensions = dim is the whole vector";
}

// The acceptance test: the same input gives the same vector alone and batched. 40 embedding
// requests (every pooling, 1..120 tokens, some repeated) and 12 greedy generations submitted at
// once to an engine with a 24-token step budget (so prompts are split into chunks that land in
// different batches with different neighbours) must each equal the request run alone (the
// generations: the greedy reference, token for token).
TEST(EmbeddingEngine, BatchedAndChunkedEqualsAloneBitForBit) {
  std::mt19937 rng(17);
  struct Item {
    GenerateRequest req;
    std::vector<float> want;
  };
  std::vector<Item> items;
  for (int i = 0; i < 40; ++i) {
    const int n = i % 10 == 0 ? 1 : 1 + static_cast<int>(rng() % 120);
    const auto pooling = static_cast<Pooling>(1 + i % 3);
    const uint32_t seed = i % 7 == 0 ? 999u : 100u + static_cast<uint32_t>(i);  // some repeat
    GenerateRequest r = embed(prompt(n, seed), pooling, i % 4 != 0, i % 5 == 0 ? 8 : 0);
    std::vector<float> want = run_alone(r).embedding;
    items.push_back({std::move(r), std::move(want)});
  }
  std::vector<std::vector<int32_t>> gen_prompts;
  for (int i = 0; i < 12; ++i) gen_prompts.push_back(prompt(5 + 9 * i, 500u + i));

  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 24;
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> emb_ids, gen_ids;
  for (size_t i = 0; i < items.size(); ++i) {
    emb_ids.push_back(engine.submit(items[i].req, c.sink()));
    if (i % 3 == 0 && gen_ids.size() < gen_prompts.size()) {
      GenerateRequest g;
      g.prompt = gen_prompts[gen_ids.size()];
      g.params.temperature = 0;
      g.params.max_tokens = 20;
      g.params.ignore_eos = true;
      gen_ids.push_back(engine.submit(std::move(g), c.sink()));
    }
  }
  c.wait(emb_ids.size() + gen_ids.size());
  engine.wait_idle();
  for (size_t i = 0; i < items.size(); ++i) {
    const RequestOutput& o = c.final_out[emb_ids[i]];
    EXPECT_EQ(o.finish_reason, FinishReason::kStop) << i;
    EXPECT_TRUE(same_bits(o.embedding, items[i].want))
        << "embedding " << i << " (" << items[i].req.prompt.size() << " tokens, "
        << pooling_name(items[i].req.embedding->pooling) << ") differs from the same input alone";
  }
  for (size_t i = 0; i < gen_ids.size(); ++i)
    EXPECT_EQ(c.tokens[gen_ids[i]], test_util::greedy_alone(*fx().model, gen_prompts[i], 20))
        << "generation " << i << " was disturbed by the embeddings batched with it";
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0) << "an embedding's blocks are freed when it finishes";
  EXPECT_EQ(s.running + s.waiting, 0);
}

// A KV pool too small for everyone at once: two long generations fill most of it, embeddings
// admitted behind them (the most recently admitted, so the first victims) are preempted mid-prompt
// when a generation needs its next block, and recompute their prompt later; the vectors do not
// change (the pooler starts over at position 0; batch invariance makes the recomputed rows
// bit-identical), nor do the generations.
TEST(EmbeddingEngine, PreemptionDoesNotChangeTheVector) {
  EngineConfig cfg = small_config();
  cfg.max_model_len = 128;
  cfg.kv_blocks = 16;  // 8 blocks hold one full-length sequence
  cfg.max_batched_tokens = 32;
  std::vector<GenerateRequest> reqs;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(embed(prompt(60 + 5 * i, 40u + i), static_cast<Pooling>(1 + i % 3)));
    want.push_back(run_alone(reqs.back()).embedding);
  }
  std::vector<std::vector<int32_t>> gen_prompts = {prompt(100, 7), prompt(98, 8)};
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> gen_ids, ids;
  for (const auto& p : gen_prompts) {
    GenerateRequest g;
    g.prompt = p;
    g.params.temperature = 0;
    g.params.max_tokens = 25;
    g.params.ignore_eos = true;
    gen_ids.push_back(engine.submit(std::move(g), c.sink()));
  }
  for (const auto& r : reqs) ids.push_back(engine.submit(r, c.sink()));
  c.wait(ids.size() + gen_ids.size());
  engine.wait_idle();
  EXPECT_GT(engine.stats().preemptions, 0u) << "the test must exercise preemption";
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_TRUE(same_bits(c.final_out[ids[i]].embedding, want[i])) << "request " << i;
  for (size_t i = 0; i < gen_ids.size(); ++i)
    EXPECT_EQ(c.tokens[gen_ids[i]], test_util::greedy_alone(*fx().model, gen_prompts[i], 25));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// Embeddings compute every token: a prompt already in the prefix cache is not taken from it, and
// an embedding's blocks are not registered there (a later generation of the same prompt finds
// nothing). The control — a generation repeated — does hit, so the test would notice either.
TEST(EmbeddingEngine, NeverTakesNorLeavesPrefixCacheBlocks) {
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
  auto gen = [](std::vector<int32_t> p) {
    GenerateRequest g;
    g.prompt = std::move(p);
    g.params.temperature = 0;
    g.params.max_tokens = 2;
    return g;
  };
  const std::vector<int32_t> p = prompt(70, 61), q = prompt(70, 62);

  // p cached by a generation, then embedded twice: all 70 tokens computed each time.
  submit_wait(gen(p));
  EngineStats before = engine.stats();
  for (int rep = 0; rep < 2; ++rep) {
    const RequestOutput o = submit_wait(embed(p, Pooling::kMean));
    EXPECT_EQ(o.cached_tokens, 0);
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.prefix_hits, before.prefix_hits) << "an embedding took prefix-cache blocks";
    EXPECT_EQ(s.prompt_tokens, before.prompt_tokens + 70) << "every token is computed";
    before = s;
  }
  // q embedded first: a generation of q afterwards finds nothing cached ...
  submit_wait(embed(q, Pooling::kLast));
  EXPECT_EQ(submit_wait(gen(q)).cached_tokens, 0) << "an embedding registered its blocks";
  // ... while a generation repeated hits (64 of 70 tokens: 4 full blocks).
  EXPECT_EQ(submit_wait(gen(q)).cached_tokens, 64);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(EmbeddingEngine, AnAbortedEmbeddingFreesItsBlocks) {
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 8;  // many steps for one long input
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  const uint64_t id = engine.submit(embed(prompt(250, 7), Pooling::kMean), c.sink());
  engine.abort(id);
  c.wait(1);
  engine.wait_idle();
  EXPECT_EQ(c.final_out[id].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(c.final_out[id].embedding.empty());
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(EmbeddingEngine, SubmitRefusesWhatCannotBePooled) {
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
  EXPECT_NE(refused(embed(prompt(5, 1), Pooling::kNone)).find("none"), std::string::npos);
  EXPECT_EQ(refused(embed(prompt(5, 1), Pooling::kMean, true, dim() + 1)).rfind("dimensions", 0),
            0u);
  EXPECT_EQ(refused(embed(prompt(5, 1), Pooling::kMean, true, -1)).rfind("dimensions", 0), 0u);
  EXPECT_NE(refused(embed({}, Pooling::kMean)), "");
  EXPECT_NE(refused(embed({1, 100000}, Pooling::kMean)), "") << "token outside the vocabulary";
  EXPECT_NE(refused(embed(prompt(cfg.max_model_len + 1, 1), Pooling::kMean)), "");
  // An embedding generates nothing after its input: the input may fill the whole context (a
  // generation's prompt may not).
  GenerateRequest full = embed(prompt(cfg.max_model_len, 2), Pooling::kLast);
  EXPECT_EQ(refused(full), "");
  GenerateRequest gen_full;
  gen_full.prompt = full.prompt;
  EXPECT_NE(refused(gen_full), "");
  c.wait(1);
  EXPECT_EQ(c.final_out.begin()->second.embedding.size(), static_cast<size_t>(dim()));
}

// The names --pooling and a GGUF's pooling_type map to.
TEST(Pooling, NamesAndGgufTypes) {
  for (Pooling p : {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast})
    EXPECT_EQ(parse_pooling(pooling_name(p)), p);
  EXPECT_EQ(parse_pooling("max"), std::nullopt);
  EXPECT_EQ(pooling_from_gguf(0), Pooling::kNone);
  EXPECT_EQ(pooling_from_gguf(1), Pooling::kMean);
  EXPECT_EQ(pooling_from_gguf(2), Pooling::kCls);
  EXPECT_EQ(pooling_from_gguf(3), Pooling::kLast);
  EXPECT_EQ(pooling_from_gguf(4), std::nullopt) << "rank: a reranker's head";
  EXPECT_EQ(pooling_from_gguf(-1), std::nullopt);
  EXPECT_EQ(fx().model->config().pooling_type, -1) << "stories260K has no pooling metadata";
}

// The pooler refuses chunks out of order and a result asked for too early, and starts over at
// position 0 (a preempted sequence's recomputation).
TEST(Pooling, PoolerTakesChunksInOrder) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // 3 rows of dim 2
  Pooler p({Pooling::kMean, false, 0}, 2, 3);
  EXPECT_EQ(p.rows_wanted(0, 2), (std::pair{0, 2}));
  p.add(0, 2, rows.data());
  EXPECT_FALSE(p.complete());
  EXPECT_THROW(p.finish(), Error);
  EXPECT_THROW(p.add(1, 1, rows.data()), Error) << "position 1 again";
  p.add(0, 1, rows.data());  // starts over
  p.add(1, 2, rows.data() + 2);
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.finish(), (std::vector<float>{3, 4}));
  Pooler last({Pooling::kLast, true, 0}, 2, 3);
  EXPECT_EQ(last.rows_wanted(0, 2), (std::pair{0, 0}));
  EXPECT_EQ(last.rows_wanted(2, 1), (std::pair{0, 1}));
  Pooler cls({Pooling::kCls, true, 0}, 2, 3);
  EXPECT_EQ(cls.rows_wanted(0, 3), (std::pair{0, 1}));
  EXPECT_EQ(cls.rows_wanted(1, 2), (std::pair{0, 0}));
  Pooler zero({Pooling::kCls, true, 0}, 2, 1);
  const std::vector<float> z = {0, 0};
  zero.add(0, 1, z.data());
  EXPECT_EQ(zero.finish(), z) << "a zero vector stays zero";
}

}  // namespace
}  // namespace kvasir
