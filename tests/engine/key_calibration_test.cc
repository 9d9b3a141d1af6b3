// The key transform's calibration (src/kvasir/engine/key_calibration.h) on stories260K: which
// dtypes get what, the shape and normalisation of the constants, and what it is for: quantized
// keys that cost less perplexity, at the context it was calibrated at and at longer ones.
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
  // stories260K: head_dim 8, every channel turned by RoPE, 4 pairs: each head turns them all, and
  // has no constant shift left.
  ASSERT_EQ(c.rope_dim, c.head_dim);
  EXPECT_EQ(i8->turn_pairs, std::min(kTurnPairs, c.head_dim / 2));
  ASSERT_EQ(i8->turn.size(), static_cast<size_t>(c.n_layers) * c.n_kv_heads * i8->turn_pairs);
  for (float m : i8->shift) EXPECT_EQ(m, 0.0f);
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
  // Each head's terms are distinct pairs (normal RoPE: channels 2i, 2i + 1), largest mean first;
  // the largest means sit in RoPE's slow pairs (stories260K: |mu| up to ~4 in its last layer).
  float slow = 0, fast = 0;
  for (int h = 0; h < c.n_layers * c.n_kv_heads; ++h) {
    std::vector<int> seen;
    const KeyTurn* t = i8->turn.data() + static_cast<size_t>(h) * i8->turn_pairs;
    for (int i = 0; i < i8->turn_pairs; ++i) {
      EXPECT_EQ(t[i].a % 2, 0);
      EXPECT_EQ(t[i].b, t[i].a + 1);
      EXPECT_EQ(std::count(seen.begin(), seen.end(), t[i].a), 0);
      seen.push_back(t[i].a);
      const float norm = std::hypot(t[i].mu_a, t[i].mu_b);
      if (i > 0) {
        EXPECT_LE(norm, std::hypot(t[i - 1].mu_a, t[i - 1].mu_b));
      }
      float& m = t[i].theta < 0.05 ? slow : fast;
      m = std::max(m, norm);
    }
  }
  EXPECT_GT(slow, 1.0f);
  EXPECT_LT(fast, slow / 2);
}

// Mean negative log-likelihood of the second half of each chunk of `chunk` tokens (BOS first),
// as llama-perplexity scores them.
double mean_nll(const std::vector<int32_t>& text, int chunk, int n_chunks, KVCacheType kv,
                bool calibrate) {
  ThreadPool pool(2);
  SequenceRunnerOptions o;
  o.max_ctx = chunk;
  o.max_batch = chunk;
  o.all_logits = true;
  o.kv_type = kv;
  if (calibrate) o.key_transform = calibrate_key_transform(*fx().model, pool, kv.k);
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

// ΔPPL (%) of keys stored in a dtype (V f16) against f16 K and V, over the first n_chunks chunks
// of `chunk` tokens of tinystories-eval; each figure is printed.
struct KeyLoss {
  int chunk, n_chunks;
  std::vector<int32_t> ids;
  double base = 0;
  KeyLoss(int chunk_, int n_chunks_) : chunk(chunk_), n_chunks(n_chunks_) {
    const std::string text = test_util::read_file(test_util::text_dir() + "/tinystories-eval.txt");
    ids = fx().tok.encode(text, false, false);
    if (ids.size() < static_cast<size_t>(chunk) * n_chunks)
      fail("tinystories-eval.txt: {} tokens, fewer than {} chunks of {}", ids.size(), n_chunks,
           chunk);
    base = mean_nll(ids, chunk, n_chunks, {KVDType::F16, KVDType::F16}, false);
  }
  double operator()(KVDType k, bool calibrate) const {
    const double d =
        100.0 * (std::exp(mean_nll(ids, chunk, n_chunks, {k, KVDType::F16}, calibrate) - base) - 1);
    std::printf("[ info ] ctx %d, %s keys, %s transform: dPPL %+.2f%%\n", chunk,
                std::string(kv_dtype_name(k)).c_str(), calibrate ? "with the" : "without a", d);
    return d;
  }
};

TEST(KeyCalibration, QuantizedKeysLoseLessPerplexityWithTheTransform) {
  // 24 chunks of 256 tokens of tinystories-eval (the issue-12 set up, on a slice of it), f16 V
  // throughout so that only the keys differ. The figures on all 382 chunks are in the issue-12
  // note (kvasir perplexity); here the bounds must hold with the transform: int4 keys
  // within 3% (+26% without), fp8 within 0.5% (+1.1% without), int8 within 0.3%. This slice
  // measured +1.08%, +0.09% and +0.01% (Zen 5), so each bound has 3x margin or more.
  const KeyLoss dppl(256, 24);
  const double int4_raw = dppl(KVDType::Int4, false);
  const double int4 = dppl(KVDType::Int4, true);
  const double fp8_raw = dppl(KVDType::FP8E4M3, false);
  const double fp8 = dppl(KVDType::FP8E4M3, true);
  const double int8 = dppl(KVDType::Int8, true);
  EXPECT_GT(int4_raw, 20.0);
  EXPECT_LT(int4, 3.0);
  EXPECT_LT(fp8, fp8_raw);
  EXPECT_LT(fp8, 0.5);
  EXPECT_LT(int8, 0.3);
}

TEST(KeyCalibration, OneCalibrationHoldsAtLongerContexts) {
  // The turning shift is the mean key at every position, so the transform calibrated on 256-token
  // chunks also serves 2048-token ones (a constant shift made for 256 positions cost fp8 keys
  // +13.6% and int4 keys +104% there: key_calibration.h). 2 chunks of 2048 tokens, f16 V.
  const KeyLoss dppl(2048, 2);
  const double int4_raw = dppl(KVDType::Int4, false);
  const double int4 = dppl(KVDType::Int4, true);
  const double fp8_raw = dppl(KVDType::FP8E4M3, false);
  const double fp8 = dppl(KVDType::FP8E4M3, true);
  EXPECT_LT(int4, int4_raw / 2);
  EXPECT_LT(fp8, fp8_raw);
}

}  // namespace
}  // namespace kvasir
