// The serving engine end to end on stories260K: many concurrent requests, batch invariance
// (each greedy output equals the same request run alone), preemption under a small KV pool,
// prefix caching, chunked prefill, abort, and request validation.
#include "kvasir/engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"
#include "test_util/greedy.h"
#include "test_util/models.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

test_util::Stories260K& fx() {
  return test_util::Stories260K::get();
}

// Greedy continuation computed alone, token by token, with the offline runner.
std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int n, KVCacheType kv = {}) {
  return test_util::greedy_alone(*fx().model, prompt, n, kv);
}

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, RequestOutput> final_out;
  std::map<uint64_t, std::string> text;
  int done = 0;

  OutputSink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard lk(mu);
      for (const auto& t : o.tokens) tokens[o.id].push_back(t.token);
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
};

GenerateRequest greedy(std::vector<int32_t> prompt, int n) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  return r;
}

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> n_out;
};

Workload make_workload(int n, uint32_t seed, int max_prompt, int max_out) {
  std::mt19937 rng(seed);
  Workload w;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(1 + rng() % static_cast<uint32_t>(max_prompt));
    p[0] = 1;
    for (size_t j = 1; j < p.size(); ++j) p[j] = 3 + static_cast<int32_t>(rng() % 509);
    w.prompts.push_back(p);
    w.n_out.push_back(1 + static_cast<int>(rng() % static_cast<uint32_t>(max_out)));
  }
  return w;
}

void run_and_check(const EngineConfig& cfg, const Workload& w, EngineStats* stats_out) {
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < w.prompts.size(); ++i)
    ids.push_back(engine.submit(greedy(w.prompts[i], w.n_out[i]), c.sink()));
  c.wait(static_cast<int>(ids.size()));
  engine.wait_idle();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto expect = alone(w.prompts[i], w.n_out[i], cfg.kv_type);
    ASSERT_EQ(c.tokens[ids[i]], expect) << "request " << i << " (prompt " << w.prompts[i].size()
                                        << " tokens) differs from the same request run alone";
    EXPECT_EQ(c.final_out[ids[i]].finish_reason, FinishReason::kLength);
    EXPECT_EQ(c.final_out[ids[i]].completion_tokens, w.n_out[i]);
    EXPECT_EQ(c.final_out[ids[i]].prompt_tokens, static_cast<int>(w.prompts[i].size()));
  }
  EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0) << "KV blocks must all return to the pool";
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  // The engine thread's time: every step ran the model, inside the busy loop iterations.
  EXPECT_GT(s.steps, 0u);
  EXPECT_GT(s.forward_seconds, 0.0);
  EXPECT_GE(s.busy_seconds, s.forward_seconds);
  if (stats_out) *stats_out = s;
}

TEST(Engine, TwoHundredConcurrentRequestsMatchRunningAlone) {
  EngineConfig cfg;
  cfg.max_seqs = 32;
  cfg.max_batched_tokens = 256;
  cfg.max_model_len = 256;
  cfg.threads = 2;
  EngineStats s;
  run_and_check(cfg, make_workload(200, 1, 120, 64), &s);
  EXPECT_EQ(s.preemptions, 0u);
}

TEST(Engine, PreemptionUnderASmallPoolKeepsOutputsIdentical) {
  EngineConfig cfg;
  cfg.max_seqs = 16;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 192;
  cfg.kv_blocks = 192 / 16 + 4;  // one full sequence plus a little: heavy pressure
  cfg.threads = 2;
  EngineStats s;
  run_and_check(cfg, make_workload(40, 2, 100, 80), &s);
  EXPECT_GT(s.preemptions, 0u) << "the pool was meant to be too small for the load";
}

TEST(Engine, ChunkedPrefillWithTinyBudget) {
  EngineConfig cfg;
  cfg.max_seqs = 4;
  cfg.max_batched_tokens = 7;
  cfg.max_model_len = 256;
  cfg.threads = 1;
  run_and_check(cfg, make_workload(12, 3, 150, 20), nullptr);
}

TEST(Engine, PrefixCacheHitGivesIdenticalOutput) {
  EngineConfig cfg;
  cfg.max_model_len = 512;
  cfg.max_seqs = 4;
  Engine engine(*fx().model, fx().tok, cfg);
  auto w = make_workload(1, 4, 1, 1);
  std::vector<int32_t> shared(300);
  std::mt19937 rng(5);
  shared[0] = 1;
  for (size_t i = 1; i < shared.size(); ++i) shared[i] = 3 + static_cast<int32_t>(rng() % 509);
  std::vector<int32_t> a = shared, b = shared;
  a.insert(a.end(), {10, 20, 30});
  b.insert(b.end(), {40, 50});
  Collector c;
  uint64_t ia = engine.submit(greedy(a, 20), c.sink());
  c.wait(1);
  uint64_t ib = engine.submit(greedy(b, 20), c.sink());
  uint64_t ia2 = engine.submit(greedy(a, 20), c.sink());
  c.wait(3);
  EXPECT_EQ(c.final_out[ia].cached_tokens, 0);
  EXPECT_EQ(c.final_out[ib].cached_tokens, 288);   // 18 full blocks of the shared 300 tokens
  EXPECT_EQ(c.final_out[ia2].cached_tokens, 288);  // a's 303 tokens: 18 full blocks
  EXPECT_EQ(c.tokens[ia], alone(a, 20));
  EXPECT_EQ(c.tokens[ib], alone(b, 20));
  EXPECT_EQ(c.tokens[ia2], c.tokens[ia]);
  EngineStats s = engine.stats();
  EXPECT_EQ(s.prefix_hits, 576u);
  EXPECT_EQ(s.prefix_queries, a.size() * 2 + b.size());
}

// The same guarantees with a quantized KV cache: a row's quantization depends on that row only,
// so batching, preemption (recompute) and prefix-cache hits change nothing.
class EngineKVDtype : public ::testing::TestWithParam<KVDType> {};

TEST_P(EngineKVDtype, ConcurrentRequestsUnderPreemptionMatchRunningAlone) {
  EngineConfig cfg;
  cfg.kv_type = {GetParam(), GetParam()};
  cfg.max_seqs = 16;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 192;
  cfg.kv_blocks = 192 / 16 + 6;
  cfg.threads = 2;
  EngineStats s;
  run_and_check(cfg, make_workload(40, 6, 100, 60), &s);
  EXPECT_GT(s.preemptions, 0u) << "the pool was meant to be too small for the load";
}

TEST_P(EngineKVDtype, PrefixCacheHitGivesIdenticalOutput) {
  EngineConfig cfg;
  cfg.kv_type = {GetParam(), GetParam()};
  cfg.max_model_len = 256;
  cfg.max_seqs = 4;
  Engine engine(*fx().model, fx().tok, cfg);
  std::vector<int32_t> shared(100);
  std::mt19937 rng(7);
  shared[0] = 1;
  for (size_t i = 1; i < shared.size(); ++i) shared[i] = 3 + static_cast<int32_t>(rng() % 509);
  std::vector<int32_t> a = shared, b = shared;
  a.insert(a.end(), {10, 20, 30});
  b.insert(b.end(), {40, 50});
  Collector c;
  uint64_t ia = engine.submit(greedy(a, 30), c.sink());
  c.wait(1);
  uint64_t ib = engine.submit(greedy(b, 30), c.sink());
  uint64_t ia2 = engine.submit(greedy(a, 30), c.sink());
  c.wait(3);
  EXPECT_EQ(c.final_out[ib].cached_tokens, 96);
  EXPECT_EQ(c.final_out[ia2].cached_tokens, 96);
  EXPECT_EQ(c.tokens[ia], alone(a, 30, cfg.kv_type));
  EXPECT_EQ(c.tokens[ib], alone(b, 30, cfg.kv_type));
  EXPECT_EQ(c.tokens[ia2], c.tokens[ia]);
}

INSTANTIATE_TEST_SUITE_P(KVDtypes, EngineKVDtype,
                         ::testing::Values(KVDType::Int8, KVDType::FP8E4M3, KVDType::FP8E5M2,
                                           KVDType::Int4, KVDType::F32),
                         [](const ::testing::TestParamInfo<KVDType>& i) {
                           return std::string(kv_dtype_name(i.param));
                         });

TEST(Engine, WholePromptCachedStillComputesLastToken) {
  EngineConfig cfg;
  cfg.max_model_len = 256;
  Engine engine(*fx().model, fx().tok, cfg);
  std::vector<int32_t> p(64, 0);  // exactly 4 blocks
  for (size_t i = 0; i < p.size(); ++i) p[i] = 3 + static_cast<int32_t>(i * 7 % 500);
  Collector c;
  uint64_t x = engine.submit(greedy(p, 8), c.sink());
  c.wait(1);
  uint64_t y = engine.submit(greedy(p, 8), c.sink());
  c.wait(2);
  EXPECT_EQ(c.final_out[y].cached_tokens, 48);  // the last block is recomputed for its logits
  EXPECT_EQ(c.tokens[x], c.tokens[y]);
}

TEST(Engine, AbortFreesBlocks) {
  EngineConfig cfg;
  cfg.max_model_len = 2048;
  cfg.max_seqs = 2;
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  uint64_t id = engine.submit(greedy({1, 403, 407}, 2000), c.sink());
  while (true) {
    std::lock_guard lk(c.mu);
    if (c.tokens[id].size() >= 5) break;
  }
  engine.abort(id);
  c.wait(1);
  engine.wait_idle();
  EXPECT_EQ(c.final_out[id].finish_reason, FinishReason::kAbort);
  EXPECT_LT(c.tokens[id].size(), 2000u);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  engine.abort(12345);  // unknown ids are ignored
}

TEST(Engine, StreamsTextAndStopsOnStopString) {
  EngineConfig cfg;
  cfg.max_model_len = 512;
  Engine engine(*fx().model, fx().tok, cfg);
  Collector c;
  GenerateRequest r = greedy({1}, 256);
  r.strip_leading_space = true;
  r.params.stop = {"Lily."};
  uint64_t id = engine.submit(r, c.sink());
  c.wait(1);
  EXPECT_EQ(c.text[id], "Once upon a time, there was a little girl named ");
  EXPECT_EQ(c.final_out[id].finish_reason, FinishReason::kStop);
}

// A client that has its last token and then reads the metrics must find every token counted:
// the engine counts a step's tokens before it hands them out.
TEST(Engine, StatsCountTokensBeforeTheyAreDelivered) {
  EngineConfig cfg;
  cfg.max_model_len = 128;
  Engine engine(*fx().model, fx().tok, cfg);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  uint64_t delivered = 0;
  std::vector<uint64_t> counted;  // stats().generation_tokens seen at each delivery
  engine.submit(greedy({1}, 12), [&](const RequestOutput& o) {
    const uint64_t c = engine.stats().generation_tokens;
    std::lock_guard lk(mu);
    delivered += o.tokens.size();
    counted.push_back(c);
    EXPECT_GE(c, delivered) << "a token reached the client before the engine counted it";
    if (o.finished) {
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
  EXPECT_EQ(delivered, 12u);
  ASSERT_FALSE(counted.empty());
  EXPECT_EQ(counted.back(), 12u);
}

TEST(Engine, RefusesRequestsThatCanNeverBeServed) {
  EngineConfig cfg;
  cfg.max_model_len = 64;
  Engine engine(*fx().model, fx().tok, cfg);
  EXPECT_THROW(engine.submit(greedy({}, 4), nullptr), Error);
  EXPECT_THROW(engine.submit(greedy(std::vector<int32_t>(64, 5), 1), nullptr), Error);
  EXPECT_THROW(engine.submit(greedy(std::vector<int32_t>(60, 5), 10), nullptr), Error);
  EXPECT_THROW(engine.submit(greedy({1, 99999}, 4), nullptr), Error);
  GenerateRequest bad = greedy({1, 2}, 4);
  bad.params.top_p = 2;
  EXPECT_THROW(engine.submit(bad, nullptr), Error);
}

TEST(Engine, RefusesAPlanThatCannotHoldOneSequence) {
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.kv_blocks = 10;
  EXPECT_THROW(Engine(*fx().model, fx().tok, cfg), Error);
}

TEST(Engine, StaticBatchingProducesTheSameOutputs) {
  EngineConfig cfg;
  cfg.max_seqs = 8;
  cfg.max_model_len = 256;
  cfg.static_batching = true;
  // Padded (the default): finished rows keep being computed until their batch ends, reading and
  // writing only the model runner's own padding block (outside the cache's pool, so every block
  // of the pool returns); every real output is unchanged.
  EngineStats s;
  run_and_check(cfg, make_workload(20, 6, 60, 30), &s);
  EXPECT_GT(s.padding_tokens, 0u);
  // Unpadded: the batch shrinks as its rows finish.
  cfg.static_padding = false;
  run_and_check(cfg, make_workload(20, 6, 60, 30), &s);
  EXPECT_EQ(s.padding_tokens, 0u);
}

// Under a small KV pool usage swings across the warning threshold many times a second (a
// finishing sequence frees its blocks, the next one takes them back): the warning is logged once
// when usage first crosses it and at most once per 30 s while it stays high, not at every swing.
TEST(Engine, KvPressureWarningIsRateLimited) {
  EngineConfig cfg;
  cfg.max_seqs = 16;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 192;
  cfg.kv_blocks = 192 / 16 + 4;
  cfg.threads = 2;
  const auto count = [](const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  const Workload w = make_workload(60, 12, 100, 40);
  const double t0 = now_seconds();
  testing::internal::CaptureStderr();
  EngineStats s;
  {
    Engine engine(*fx().model, fx().tok, cfg);
    Collector c;
    for (size_t i = 0; i < w.prompts.size(); ++i)
      engine.submit(greedy(w.prompts[i], w.n_out[i]), c.sink());
    c.wait(static_cast<int>(w.prompts.size()));
    engine.wait_idle();
    s = engine.stats();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const double elapsed = now_seconds() - t0;
  const int warnings = count(err, "KV cache usage");
  const int recovered = count(err, "KV cache usage back to");
  EXPECT_GT(s.preemptions, 0u) << "the pool was meant to be too small for the load";
  EXPECT_GE(s.kv_pressure_warnings, 1u) << "usage crossed 90% but nothing was logged";
  // Once at the first crossing, then at most once per 30 s while above.
  EXPECT_LE(s.kv_pressure_warnings, 1u + static_cast<uint64_t>(elapsed / 30.0))
      << "over " << elapsed << " s:\n"
      << err;
  EXPECT_EQ(static_cast<uint64_t>(warnings - recovered), s.kv_pressure_warnings) << err;
  // One info line per logged episode that ended (usage is back to 0 at the end).
  EXPECT_LE(recovered, static_cast<int>(s.kv_pressure_warnings)) << err;
  EXPECT_GE(recovered, 1) << err;
}

}  // namespace
}  // namespace kvasir
