// Smoke test of the benchmark runner on a tiny synthetic model: every figure asked for is
// produced, in order, with sane statistics and the byte accounting of the roofline. Tests check
// behaviour, not speed.
#include "kvasir/bench/model_bench.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bench_test_util.h"
#include "kvasir/util/error.h"

namespace kvasir::bench {
namespace {

BenchOptions small_options() {
  BenchOptions o;
  o.reps = 2;
  o.pp = 32;
  o.tg = 8;
  o.tg_prompt = 4;
  o.batches = {2, 3};
  o.batch_prompt = 6;
  o.ctx_prefill = 40;
  o.bandwidth_bytes = 1 << 20;
  o.bandwidth_passes = 1;
  o.warmup_steps = 2;
  return o;
}

TEST(ModelBench, ProducesEveryFigureWithSaneStatistics) {
  auto model = Model::load(testing::tiny_model(DType::Q8_0));
  ThreadPool pool(2);
  BenchOptions o = small_options();
  std::vector<std::string> streamed;
  auto results =
      run_model_bench(*model, pool, o, [&](const BenchResult& r) { streamed.push_back(r.name); });
  std::vector<std::string> names;
  for (const auto& r : results) names.push_back(r.name);
  const std::vector<std::string> want{"bandwidth", "pp32", "tg8", "tg8@40", "tg2", "tg3"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(streamed, want);

  const double bw = results[0].stats.median;
  for (const auto& r : results) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(r.stats.n, o.reps);
    EXPECT_GT(r.stats.min, 0.0);
    EXPECT_LE(r.stats.min, r.stats.median);
    EXPECT_LE(r.stats.median, r.stats.max);
    EXPECT_TRUE(std::isfinite(r.stats.max));
    EXPECT_EQ(r.unit, r.name == "bandwidth" ? "GB/s" : "tok/s");
    const bool decode = r.name.rfind("tg", 0) == 0;
    EXPECT_EQ(r.roofline_pct.has_value(), decode);
    if (decode) {
      // roofline = steps/s x bytes per step / bandwidth.
      EXPECT_NEAR(*r.roofline_pct, r.stats.median / r.seqs * r.bytes_per_step / (bw * 1e9) * 100,
                  1e-9 * *r.roofline_pct);
    }
  }
  EXPECT_EQ(results[2].seqs, 1);
  EXPECT_EQ(results[4].seqs, 2);
  EXPECT_EQ(results[5].seqs, 3);

  // Bytes per step of tg2: the streamed weights once, plus each sequence's K/V rows for
  // positions 0..n_past (prompt 6, then steps k = 0..7 read 7+k positions), averaged over steps.
  const double kv_tok = static_cast<double>(model->kv_shape().bytes_per_token());
  double positions = 0;
  for (int k = 0; k < o.tg; ++k) positions += o.batch_prompt + k + 1;
  const double want_bytes =
      static_cast<double>(streamed_weight_bytes(*model)) + kv_tok * positions * 2 / o.tg;
  EXPECT_DOUBLE_EQ(results[4].bytes_per_step, want_bytes);
  // The long-context figure reads more KV per step than the short one.
  EXPECT_GT(results[3].bytes_per_step, results[2].bytes_per_step);
}

TEST(ModelBench, SkipsWhatIsSwitchedOff) {
  auto model = Model::load(testing::tiny_model(DType::F32));
  ThreadPool pool(1);
  BenchOptions o = small_options();
  o.bandwidth = false;
  o.pp = 0;
  o.ctx_prefill = 0;
  o.batches = {};
  auto results = run_model_bench(*model, pool, o);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].name, "tg8");
  EXPECT_FALSE(results[0].roofline_pct.has_value());  // no bandwidth measured
  o.tg = 0;
  EXPECT_TRUE(run_model_bench(*model, pool, o).empty());
}

TEST(ModelBench, StreamedWeightsSkipTheEmbeddingTableUnlessTied) {
  for (bool tied : {false, true}) {
    auto model = Model::load(testing::tiny_model(DType::F32, tied));
    size_t all = 0, embd = 0;
    for (const auto& t : model->file().tensors()) {
      all += t.nbytes;
      if (t.name == "token_embd.weight") embd = t.nbytes;
    }
    ASSERT_GT(embd, 0u);
    EXPECT_EQ(streamed_weight_bytes(*model), tied ? all : all - embd) << "tied=" << tied;
  }
}

TEST(ModelBench, RejectsBadOptions) {
  auto model = Model::load(testing::tiny_model(DType::F32));
  BenchOptions o = small_options();
  o.reps = 0;
  EXPECT_THROW(validate(o, nullptr), Error);
  o = small_options();
  o.batches = {4, 0};
  EXPECT_THROW(validate(o, nullptr), Error);
  o = small_options();
  o.ctx_prefill = 600;  // the tiny model's context is 512
  try {
    validate(o, model.get());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ctx-prefill"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir::bench
