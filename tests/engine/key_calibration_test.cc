// The key transform's calibration (src/kvasir/engine/key_calibration.h) on stories260K: which
// dtypes get what, the shape and normalisation of the constants, the shift's dependence on the
// context it is made for, and what it is for: quantized keys that cost less perplexity.
#include "kvasir/engine/key_calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/models.h"

namespace kvasir {
namespace {

test_util::Stories260K& fx() {
  return test_util::Stories260K::get();
}

TEST(KeyCalibration, FloatKeysGetNoTransformQuantizedOnesTheirKind) {
  ThreadPool pool(2);
  EXPECT_EQ(calibrate_key_transform(*fx().model, pool, KVDType::F16), nullptr);
  EXPECT_EQ(calibrate_key_transform(*fx().model, pool, KVDType::F32), nullptr);
  const ModelConfig& c = fx().model->config();
  const size_t n = static_cast<size_t>(c.n_layers) * c.n_kv_heads * c.head_dim;
  const auto i8 = calibrate_key_transform(*fx().model, pool, KVDType::Int8);
  const auto e4 = calibrate_key_transform(*fx().model, pool, KVDType::FP8E4M3);
  const auto i4 = calibrate_key_transform(*fx().model, pool, KVDType::Int4);
  ASSERT_TRUE(i8 && e4 && i4);
  EXPECT_EQ(i8->shift.size(), n);
  EXPECT_TRUE(i8->scale.empty());  // int8 and fp8: the shift alone
  EXPECT_TRUE(e4->scale.empty());
  EXPECT_EQ(i8->shift, e4->shift);  // the same text, the same constants: deterministic
  ASSERT_EQ(i4->scale.size(), n);
  EXPECT_EQ(i4->shift, i8->shift);
  EXPECT_NE(i8->source.find("built-in"), std::string::npos) << i8->source;
  EXPECT_NE(i8->source.find("positions < 2048"), std::string::npos) << i8->source;  // ctx_train
  // Each head's scales have a geometric mean of 1, and are not all 1 (channels differ).
  for (int h = 0; h < c.n_layers * c.n_kv_heads; ++h) {
    double log_sum = 0;
    float lo = INFINITY, hi = 0;
    for (int d = 0; d < c.head_dim; ++d) {
      const float s = i4->scale[static_cast<size_t>(h) * c.head_dim + d];
      log_sum += std::log(s);
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
    EXPECT_NEAR(log_sum / c.head_dim, 0.0, 1e-5) << "head " << h;
    EXPECT_GT(hi / lo, 1.2f) << "head " << h;
  }
  // The largest means sit in RoPE's slow pairs (stories260K: |m| up to ~4 in its last layer),
  // the fast pairs' average out.
  float slow = 0, fast = 0;
  for (size_t i = 0; i < n; ++i) {
    float& m = static_cast<int>(i % c.head_dim) >= c.head_dim / 2 ? slow : fast;
    m = std::max(m, std::fabs(i8->shift[i]));
  }
  EXPECT_GT(slow, 1.0f);
  EXPECT_LT(fast, slow / 4);
}

TEST(KeyCalibration, TheShiftFollowsTheContextItIsMadeFor) {
  // A pair that turns by p * theta: averaged over 0 .. P-1, its mean shrinks as P * theta grows.
  // stories260K's slowest pair turns 0.001 a position: 16 positions keep its mean (to 1e-5),
  // 4096 turn it by up to 4 radians and shrink it: |mean of e^{i p theta}| = sin(P theta / 2) /
  // (P sin(theta / 2)) = 0.4336, for every head alike.
  ThreadPool pool(2);
  const auto near = calibrate_key_transform(*fx().model, pool, KVDType::Int8, 16);
  const auto far = calibrate_key_transform(*fx().model, pool, KVDType::Int8, 4096);
  const ModelConfig& c = fx().model->config();
  ASSERT_EQ(c.rope_dim, c.head_dim);
  const int d = c.head_dim;
  double n_near = 0, n_far = 0;
  for (int h = 0; h < c.n_layers * c.n_kv_heads; ++h) {
    const float* a = near->shift.data() + static_cast<size_t>(h) * d;
    const float* b = far->shift.data() + static_cast<size_t>(h) * d;
    n_near += std::hypot(a[d - 2], a[d - 1]);  // the slowest pair (normal RoPE: adjacent)
    n_far += std::hypot(b[d - 2], b[d - 1]);
  }
  EXPECT_NEAR(n_far / n_near, 0.4336, 0.002);
  EXPECT_NE(near->source.find("positions < 16"), std::string::npos) << near->source;
}

// Mean negative log-likelihood of the second half of each chunk of `chunk` tokens (BOS first),
// as llama-perplexity scores them.
double mean_nll(const std::vector<int32_t>& text, int chunk, int n_chunks, KVCacheType kv,
                bool calibrate) {
  ThreadPool pool(2);
  // The transform made for the evaluated context (key_calibration.h).
  SequenceRunnerOptions o;
  o.max_ctx = chunk;
  o.max_batch = chunk;
  o.all_logits = true;
  o.kv_type = kv;
  if (calibrate) o.key_transform = calibrate_key_transform(*fx().model, pool, kv.k, chunk);
  SequenceRunner r(*fx().model, pool, o);
  const int V = r.n_vocab();
  double nll = 0;
  int64_t n = 0;
  for (int c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> ids(text.begin() + c * chunk, text.begin() + (c + 1) * chunk);
    ids[0] = fx().tok.bos_id();
    r.reset();
    const auto lg = r.feed(ids, true);
    for (int j = chunk / 2; j < chunk - 1; ++j) {
      const float* row = lg.data() + static_cast<size_t>(j) * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll -= row[ids[j + 1]] - mx - std::log(sum);
      ++n;
    }
  }
  return nll / static_cast<double>(n);
}

TEST(KeyCalibration, QuantizedKeysLoseLessPerplexityWithTheTransform) {
  // 24 chunks of 256 tokens of tinystories-eval (the issue-12 set up, on a slice of it), f16 V
  // throughout so that only the keys differ. The figures on all 382 chunks are in the issue-12
  // note (kvasir perplexity); here: the transform must cut the ΔPPL of int4 keys from ~+45% to a
  // few percent and that of fp8 keys, and leave int8 keys within 0.3%. Bounds hold ~2x margin
  // over what this slice measured (printed below).
  const std::string text = test_util::read_file(test_util::text_dir() + "/tinystories-eval.txt");
  const std::vector<int32_t> ids = fx().tok.encode(text, false, false);
  constexpr int kChunk = 256, kChunks = 24;
  ASSERT_GE(ids.size(), static_cast<size_t>(kChunk * kChunks));
  const double base = mean_nll(ids, kChunk, kChunks, {KVDType::F16, KVDType::F16}, true);
  auto dppl = [&](KVDType k, bool calibrate) {
    const double d =
        100.0 * (std::exp(mean_nll(ids, kChunk, kChunks, {k, KVDType::F16}, calibrate) - base) - 1);
    std::printf("[ info ] %s keys, %s transform: dPPL %+.2f%%\n",
                std::string(kv_dtype_name(k)).c_str(), calibrate ? "with the" : "without a", d);
    return d;
  };
  const double int4_raw = dppl(KVDType::Int4, false);
  const double int4 = dppl(KVDType::Int4, true);
  const double fp8_raw = dppl(KVDType::FP8E4M3, false);
  const double fp8 = dppl(KVDType::FP8E4M3, true);
  const double int8 = dppl(KVDType::Int8, true);
  EXPECT_GT(int4_raw, 20.0);
  EXPECT_LT(int4, 6.0);
  EXPECT_LT(fp8, fp8_raw);
  EXPECT_LT(fp8, 1.0);
  EXPECT_LT(int8, 0.3);
}

}  // namespace
}  // namespace kvasir
