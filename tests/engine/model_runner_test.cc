// The model runner (src/kvasir/engine/model_runner.h) on stories260K: logits rows in work order
// and bit-identical to each sequence run alone, sampling from the last row, refusals before any
// work, static padding rows, and one const Model shared by runners on several threads.
#include "kvasir/engine/model_runner.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/kv/block_pool.h"
#include "kvasir/model/forward_state.h"
#include "kvasir/util/error.h"
#include "test_util/models.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

const Model& model() {
  return *test_util::Stories260K::get().model;
}
int n_vocab() {
  return model().config().n_vocab;
}

// Every token's logits of `tokens` run alone from position 0.
std::vector<float> alone_all(const std::vector<int32_t>& tokens) {
  ThreadPool pool(1);
  SequenceRunnerOptions o;
  o.max_ctx = 64;
  o.all_logits = true;
  SequenceRunner r(model(), pool, o);
  auto lg = r.feed(tokens, true);
  return {lg.begin(), lg.end()};
}

bool rows_equal(const float* a, const float* b, int n_rows) {
  return std::memcmp(a, b, sizeof(float) * static_cast<size_t>(n_rows) * n_vocab()) == 0;
}

struct Fixture {
  ThreadPool pool{2};
  BlockPool blocks{64};
  ModelRunner runner;
  explicit Fixture(ModelRunnerOptions o) : runner(model(), pool, with_defaults(o)) {}
  static ModelRunnerOptions with_defaults(ModelRunnerOptions o) {
    if (o.kv_blocks == 0) o.kv_blocks = 64;
    return o;
  }
  std::vector<int32_t> table(int n_positions) {
    std::vector<int32_t> t;
    EXPECT_TRUE(blocks.allocate((n_positions + 15) / 16, t));
    return t;
  }
};

ModelRunnerOptions sized(int max_tokens, int max_logit_rows) {
  ModelRunnerOptions o;
  o.max_tokens = max_tokens;
  o.max_logit_rows = max_logit_rows;
  return o;
}

Sampler greedy_sampler() {
  SamplingParams greedy;
  greedy.temperature = 0;
  return Sampler(greedy, n_vocab());
}

SeqWork work(uint64_t id, const std::vector<int32_t>& tokens, int start,
             const std::vector<int32_t>& table, Logits logits) {
  SeqWork w;
  w.id = id;
  w.tokens = tokens;
  w.start = start;
  w.blocks = &table;
  w.logits = logits;
  return w;
}

TEST(ModelRunner, LogitsRowsComeInWorkOrderAndEqualEachSequenceAlone) {
  Fixture f(sized(32, 8));
  const auto a = test_util::random_tokens(5, n_vocab(), 1),
             b = test_util::random_tokens(3, n_vocab(), 2),
             c = test_util::random_tokens(2, n_vocab(), 3);
  const auto ta = f.table(5), tb = f.table(3), tc = f.table(2);
  const SeqWork w[] = {work(1, a, 0, ta, Logits::kAll), work(2, b, 0, tb, Logits::kLast),
                       work(3, c, 0, tc, Logits::kNone)};
  const StepOutput& out = f.runner.run(w);
  EXPECT_EQ(out.first_row, (std::vector<int32_t>{0, 5, -1}));
  ASSERT_EQ(out.logits.size(), 6u * n_vocab());
  EXPECT_EQ(out.n_padding, 0);
  EXPECT_TRUE(rows_equal(out.logits.data(), alone_all(a).data(), 5));
  EXPECT_TRUE(
      rows_equal(out.logits.data() + 5 * n_vocab(), alone_all(b).data() + 2 * n_vocab(), 1));
  // The batch: one sequence per work item, every token with its slot.
  const Batch& batch = f.runner.last_batch();
  EXPECT_EQ(batch.n_tokens(), 10);
  EXPECT_EQ(batch.seqs.size(), 3u);
  EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{0, 1, 2, 3, 4, 7}));
  EXPECT_EQ(batch.slots[5], tb[0] * 16);
}

TEST(ModelRunner, ContinuesAChunkedSequenceAndSamplesTheLastRow) {
  Fixture f(sized(16, 2));
  const auto t = test_util::random_tokens(9, n_vocab(), 4);
  const auto table = f.table(9);
  const std::vector<int32_t> head(t.begin(), t.begin() + 6), tail(t.begin() + 6, t.end());
  f.runner.run(std::vector<SeqWork>{work(1, head, 0, table, Logits::kNone)});
  Sampler sampler = greedy_sampler();
  SeqWork w = work(1, tail, 6, table, Logits::kLast);
  w.sampler = &sampler;
  w.logprobs = true;
  const StepOutput& out = f.runner.run(std::span(&w, 1));
  const auto ref = alone_all(t);
  const float* last = ref.data() + 8 * static_cast<size_t>(n_vocab());
  EXPECT_TRUE(rows_equal(out.logits.data(), last, 1)) << "chunked = whole";
  EXPECT_EQ(out.samples[0].token, test_util::argmax(last, n_vocab()));
  EXPECT_LE(out.samples[0].logprob, 0.0f);
}

TEST(ModelRunner, RefusesWorkThatDoesNotFitBeforeAnyWork) {
  Fixture f(sized(8, 2));
  const auto t = test_util::random_tokens(9, n_vocab(), 5);
  const auto table = f.table(32);
  const std::vector<int32_t> one = {t[0]}, none;
  const std::vector<int32_t> short_table;
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(1, t, 0, table, Logits::kLast)}), Error)
      << "9 tokens > max_tokens 8";
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(
                   1, std::vector<int32_t>(t.begin(), t.begin() + 3), 0, table, Logits::kAll)}),
               Error)
      << "3 rows > max_logit_rows 2";
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(1, one, 32, table, Logits::kLast)}), Error)
      << "position 32 is outside a 2-block table";
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(1, one, 0, short_table, Logits::kLast)}),
               Error);
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(1, none, 0, table, Logits::kLast)}), Error);
  Sampler sampler = greedy_sampler();
  SeqWork s = work(1, one, 0, table, Logits::kNone);
  s.sampler = &sampler;
  EXPECT_THROW(f.runner.run(std::span(&s, 1)), Error) << "a sampler needs logits";
  const std::vector<int32_t> bad = {n_vocab()};
  EXPECT_THROW(f.runner.run(std::vector<SeqWork>{work(1, bad, 0, table, Logits::kLast)}), Error);
  // Still usable.
  const StepOutput& out = f.runner.run(std::vector<SeqWork>{work(1, one, 0, table, Logits::kLast)});
  EXPECT_TRUE(rows_equal(out.logits.data(), alone_all(one).data(), 1));
}

TEST(ModelRunner, StaticPaddingKeepsFinishedMembersAsRowsUntilTheNextBatch) {
  ModelRunnerOptions o = sized(32, 4);
  o.static_padding = true;
  o.max_seqs = 4;
  o.max_positions = 64;
  Fixture f(o);
  const auto a = test_util::random_tokens(4, n_vocab(), 6),
             b = test_util::random_tokens(6, n_vocab(), 7);
  const auto ta = f.table(8), tb = f.table(8);
  const StepOutput* out = &f.runner.run(
      std::vector<SeqWork>{work(1, a, 0, ta, Logits::kLast), work(2, b, 0, tb, Logits::kLast)});
  EXPECT_EQ(out->n_padding, 0);
  const std::vector<int32_t> next_b = {5};
  const uint64_t finished[] = {1};
  out = &f.runner.run(std::vector<SeqWork>{work(2, next_b, 6, tb, Logits::kLast)}, finished);
  EXPECT_EQ(out->n_padding, 1) << "a finished: its row is padding";
  EXPECT_EQ(f.runner.last_batch().n_tokens(), 2);
  EXPECT_EQ(f.runner.last_batch().positions[1], 4) << "where a would have computed next";
  std::vector<int32_t> b7 = b;
  b7.push_back(5);
  EXPECT_TRUE(rows_equal(out->logits.data(), alone_all(b7).data() + 6 * n_vocab(), 1))
      << "padding leaves real rows unchanged";
  // The padding row writes a block of its own, outside the caller's blocks.
  EXPECT_EQ(f.runner.last_batch().slots[1] / 16, 64);
  out = &f.runner.run(std::vector<SeqWork>{work(2, std::vector<int32_t>{6}, 7, tb, Logits::kLast)});
  EXPECT_EQ(out->n_padding, 1);
  EXPECT_EQ(f.runner.last_batch().positions[1], 5);
  // A sequence the batch has not seen: the next static batch, no padding.
  const auto tc = f.table(2);
  out =
      &f.runner.run(std::vector<SeqWork>{work(3, std::vector<int32_t>{1, 2}, 0, tc, Logits::kLast)},
                    std::vector<uint64_t>{2});
  EXPECT_EQ(out->n_padding, 0);
}

// Weights are shared, state is not: runners on several threads read one const Model at once and
// each gets exactly what it gets alone.
TEST(ModelRunner, RunnersOnSeveralThreadsShareOneModel) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> want;
  for (uint32_t i = 0; i < 3; ++i) {
    prompts.push_back(test_util::random_tokens(20 + 5 * static_cast<int>(i), n_vocab(), 10 + i));
    want.push_back(alone_all(prompts.back()));
  }
  std::vector<int> ok(prompts.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      ThreadPool pool(1);
      SequenceRunnerOptions o;
      o.max_ctx = 64;
      o.all_logits = true;
      SequenceRunner r(model(), pool, o);
      for (int rep = 0; rep < 20; ++rep) {
        r.reset();
        auto lg = r.feed(prompts[i], true);
        ok[i] += rows_equal(lg.data(), want[i].data(), static_cast<int>(prompts[i].size()));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(ok[i], 20) << "thread " << i;
}

TEST(ForwardState, IsSizedOnceAndBelongsToOneModel) {
  ThreadPool pool(1);
  auto backend = make_backend(BackendKind::kCpu, pool);
  EXPECT_THROW(ForwardState(model(), *backend, 0, 1), Error);
  ForwardState state(model(), *backend, 4, 1);
  const ModelConfig& c = model().config();
  EXPECT_GE(
      state.bytes(),
      sizeof(float) * (4u * (2 * c.dim + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.ffn_dim) + c.dim));
  EXPECT_EQ(state.logits, nullptr) << "the CPU writes logits straight to the caller";
  KVStorage kv(model().kv_shape(), 4, *backend);
  std::vector<int32_t> table = {0};
  Batch b;
  const int32_t s = b.add_seq(table);
  for (int p = 0; p < 5; ++p) b.add_token(1, p, s, 16, p == 4);
  std::vector<float> logits(static_cast<size_t>(n_vocab()));
  EXPECT_THROW(model().forward(b, kv, state, logits.data()), Error) << "5 tokens > 4";
  auto other = Model::load(test_util::stories260k_path());
  Batch one;
  const int32_t s1 = one.add_seq(table);
  one.add_token(1, 0, s1, 16, true);
  EXPECT_THROW(other->forward(one, kv, state, logits.data()), Error) << "another model's state";
  EXPECT_NO_THROW(model().forward(one, kv, state, logits.data()));
}

}  // namespace
}  // namespace kvasir
