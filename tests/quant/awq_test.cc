// AWQ (quant/awq.h, quant/awq_fold.h): the scale search finds alpha > 0 and a lower output error
// than plain rounding when a few input channels are loud, never a higher one (alpha = 0 is in the
// grid), respects tied channels; the clip search never raises a group's error; and folding scales
// into stories260K leaves the float model's logits unchanged.
//
// Why "unchanged" can be asserted to a tight tolerance: every fold multiplies a weight column by
// s and divides its input's producer (an RMSNorm weight, a V row, an up row) by s; in exact
// arithmetic the layer's output is identical, and in float each weight picks up at most two
// roundings (relative 2^-24 each), which perturb each dot product by ~1e-7 relative. Through 5
// layers the logits move by far less than 1e-4 of their range (with an f32 KV cache: an f16 one
// rounds the scaled V rows differently, ~5e-4); a fold that were wrong (a scale applied on one
// side only) moves them by O(1), as the negative control shows. With power-of-two scales every
// multiplication is exact and the logits are bit-identical.
#include "kvasir/quant/awq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/format/gguf.h"
#include "kvasir/model/model.h"
#include "kvasir/quant/awq_fold.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/quant/recon_error.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"
#include "test_util/random.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

// Activations with a few loud channels (as LLMs have): x_tj ~ N(0, a_j^2), a_j = 10 for every
// 16th channel, 1 elsewhere; the Gram matrix and mean |x|.
void loud_channels(int64_t cols, int64_t n, uint32_t seed, std::vector<double>& gram,
                   std::vector<double>& mean_abs) {
  const std::vector<float> z = test_util::random_normal(static_cast<size_t>(n * cols), seed);
  gram.assign(static_cast<size_t>(cols * cols), 0.0);
  mean_abs.assign(static_cast<size_t>(cols), 0.0);
  std::vector<double> x(static_cast<size_t>(cols));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < cols; ++j) {
      x[static_cast<size_t>(j)] = z[static_cast<size_t>(t * cols + j)] * (j % 16 == 5 ? 10.0 : 1.0);
      mean_abs[static_cast<size_t>(j)] +=
          std::fabs(x[static_cast<size_t>(j)]) / static_cast<double>(n);
    }
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        gram[static_cast<size_t>(i * cols + j)] +=
            x[static_cast<size_t>(i)] * x[static_cast<size_t>(j)];
  }
}

TEST(Awq, ScaleSearchProtectsLoudChannels) {
  const int64_t rows = 64, cols = 128;
  std::vector<double> g, ma;
  loud_channels(cols, 400, 1, g, ma);
  const std::vector<float> w1 = test_util::random_normal(rows * cols, 2, 0.05f);
  const std::vector<float> w2 = test_util::random_normal(rows * cols / 2, 3, 0.05f);
  const AwqMatrix mats[] = {{w1.data(), rows}, {w2.data(), rows / 2}};
  const AwqScales s = awq_search_scales(mats, cols, g.data(), ma, {}, AwqOptions{});
  EXPECT_GT(s.alpha, 0.0);
  EXPECT_LT(s.loss, 0.9 * s.loss_plain);
  ASSERT_EQ(s.scales.size(), static_cast<size_t>(cols));
  EXPECT_GT(s.scales[5], s.scales[6]);  // the loud channel is scaled up
  // loss_plain is plain min/max rounding's error.
  std::vector<BlockQ4_1> b(rows * cols / 32);
  std::vector<float> d1(w1.size()), d2(w2.size());
  q4_1_round_rows(w1.data(), rows, cols, b.data(), d1.data());
  q4_1_round_rows(w2.data(), rows / 2, cols, b.data(), d2.data());
  const double plain = gram_quadratic(w1.data(), d1.data(), rows, cols, g.data()) +
                       gram_quadratic(w2.data(), d2.data(), rows / 2, cols, g.data());
  EXPECT_NEAR(s.loss_plain, plain, 1e-9 * plain);
}

TEST(Awq, UniformActivationsNeedNoScale) {
  // Equal mean |x| everywhere: every alpha gives s = 1, so the search returns plain rounding.
  const int64_t rows = 8, cols = 64;
  std::vector<double> g(cols * cols, 0.0), ma(cols, 1.0);
  for (int64_t i = 0; i < cols; ++i) g[i * cols + i] = 1;
  const std::vector<float> w = test_util::random_normal(rows * cols, 4, 0.05f);
  const AwqMatrix m{w.data(), rows};
  const AwqScales s = awq_search_scales({&m, 1}, cols, g.data(), ma, {}, AwqOptions{});
  EXPECT_EQ(s.alpha, 0.0);
  for (float v : s.scales) EXPECT_EQ(v, 1.0f);
}

TEST(Awq, TiedChannelsShareOneScale) {
  const int64_t rows = 16, cols = 64;
  std::vector<double> g, ma;
  loud_channels(cols, 200, 5, g, ma);
  std::vector<int64_t> tie(cols);
  for (int64_t j = 0; j < cols; ++j) tie[j] = j % 32;  // two "heads" of 32 share a "KV head"
  const std::vector<float> w = test_util::random_normal(rows * cols, 6, 0.05f);
  const AwqMatrix m{w.data(), rows};
  const AwqScales s = awq_search_scales({&m, 1}, cols, g.data(), ma, tie, AwqOptions{});
  for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(s.scales[j], s.scales[tie[j]]) << j;
  std::vector<int64_t> bad(cols, 1);  // channel 0 tied to 1, but 1 tied to 0: no representative
  bad[1] = 0;
  EXPECT_THROW(awq_search_scales({&m, 1}, cols, g.data(), ma, bad, AwqOptions{}), Error);
}

TEST(Awq, ClipSearchNeverRaisesAGroupsError) {
  // A block-diagonal Gram matrix (here diagonal), so the output error is the sum of the groups'.
  const int64_t rows = 32, cols = 128;
  std::vector<double> g(cols * cols, 0.0);
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int64_t i = 0; i < cols; ++i) g[i * cols + i] = u(rng);
  std::vector<float> w = test_util::random_normal(rows * cols, 7, 0.05f);
  for (int64_t r = 0; r < rows; ++r) w[r * cols + (r * 7) % cols] = 0.4f;  // an outlier weight
  std::vector<float> plain(w.size()), clipped(w.size());
  awq_quantize_q4_1(w.data(), rows, cols, g.data(), false, AwqOptions{}, plain.data());
  awq_quantize_q4_1(w.data(), rows, cols, g.data(), true, AwqOptions{}, clipped.data());
  for (int64_t r = 0; r < rows; ++r) {
    const double e0 =
        gram_quadratic(w.data() + r * cols, plain.data() + r * cols, 1, cols, g.data());
    const double e1 =
        gram_quadratic(w.data() + r * cols, clipped.data() + r * cols, 1, cols, g.data());
    EXPECT_LE(e1, e0 * (1 + 1e-12)) << r;
  }
  const double t0 = gram_quadratic(w.data(), plain.data(), rows, cols, g.data());
  const double t1 = gram_quadratic(w.data(), clipped.data(), rows, cols, g.data());
  EXPECT_LT(t1, t0);
}

// --- folding, on the real model ---

std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& tokens,
                             KVDType kv) {
  auto model = Model::load(path);
  ThreadPool pool(2);
  ModelRunnerOptions ro;
  ro.kv_blocks = (static_cast<int64_t>(tokens.size()) + 15) / 16;
  ro.max_tokens = static_cast<int>(tokens.size());
  ro.max_logit_rows = static_cast<int>(tokens.size());
  ro.kv_type = KVCacheType{kv, kv};
  ModelRunner runner(*model, pool, ro);
  std::vector<int32_t> table;
  for (int b = 0; b < ro.kv_blocks; ++b) table.push_back(b);
  SeqWork w;
  w.tokens = tokens;
  w.blocks = &table;
  w.logits = Logits::kAll;
  std::vector<SeqWork> work{w};
  const StepOutput& out = runner.run(work);
  return {out.logits.begin(), out.logits.end()};
}

class AwqFold : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::make_unique<gguf::GGUFFile>(in_);
    c_ = Model::load(in_, Model::LoadOptions{.pack = false})->config();
    ASSERT_NE(c_.n_heads, c_.n_kv_heads);  // GQA: the attention output tie matters
    for (int l = 0; l < c_.n_layers; ++l)
      for (const auto& names : {fold_attn_input_tensors(l), fold_ffn_input_tensors(l),
                                fold_attn_output_tensors(c_, l), fold_ffn_down_tensors(l)})
        for (const std::string& n : names) t_[n] = load_float_tensor(*file_, n);
  }
  // Every fold of every layer with scales 2^e, e uniform in [-2, 2] (rounded to an integer when
  // pow2), attention output scales tied per KV head.
  void fold_all(bool pow2) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> e(-2.0f, 2.0f);
    auto scales = [&](int n) {
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = std::exp2(pow2 ? std::round(e(rng)) : e(rng));
      return s;
    };
    const std::vector<int64_t> tie = attn_output_tie(c_);
    for (int l = 0; l < c_.n_layers; ++l) {
      fold_attn_input(t_, c_, l, scales(c_.dim));
      std::vector<float> so = scales(c_.q_dim());
      for (size_t j = 0; j < so.size(); ++j) so[j] = so[static_cast<size_t>(tie[j])];
      fold_attn_output(t_, c_, l, so);
      fold_ffn_input(t_, c_, l, scales(c_.dim));
      fold_ffn_down(t_, c_, l, scales(c_.ffn_dim));
    }
  }
  std::string write(const FloatTensors& ft, const std::string& name) {
    std::map<std::string, TensorOverride> ov;
    for (const auto& [n, v] : ft) {
      std::vector<uint8_t> bytes(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
      ov[n] = TensorOverride{DType::F32, std::move(bytes), "folded"};
    }
    QuantizeOptions qo;
    qo.overrides = &ov;
    const std::string out = dir_ + "/" + name;
    quantize_gguf(in_, out, DType::F32, qo);
    return out;
  }
  std::string in_ = test_util::stories260k_path();
  std::string dir_ = test_util::temp_dir("kvasir-awq-fold");
  std::unique_ptr<gguf::GGUFFile> file_;
  ModelConfig c_;
  FloatTensors t_;
  std::vector<int32_t> tokens_ = test_util::random_tokens(48, 512, 3);
};

TEST_F(AwqFold, PowerOfTwoScalesLeaveTheLogitsUnchangedWithAnF16Cache) {
  // Multiplying by 2^k is exact in floating point and commutes with rounding to f16 (outside the
  // subnormal range), so the folded model computes the original's values times powers of two even
  // through an f16 KV cache, and the logits agree far more tightly than with arbitrary scales.
  // (They are not asserted bit for bit: a few values land in f16/fp32 subnormals or go through
  // kernel paths whose rounding the test does not pin down.)
  fold_all(/*pow2=*/true);
  const std::vector<float> a = logits_of(in_, tokens_, KVDType::F16);
  const std::vector<float> b = logits_of(write(t_, "pow2.gguf"), tokens_, KVDType::F16);
  ASSERT_EQ(a.size(), b.size());
  double range = 0, diff = 0;
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    range = std::max(range, std::fabs(double{a[i]}));
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    same += a[i] == b[i];
  }
  EXPECT_LT(diff, 1e-5 * range) << "max |diff| " << diff << " of logits up to " << range
                                << "; identical: " << same << " of " << a.size();
}

TEST_F(AwqFold, AnyScalesLeaveTheLogitsUnchangedToRounding) {
  fold_all(/*pow2=*/false);
  // An f32 cache: an f16 one would round V (scaled by 1/s) differently, ~5e-4 relative.
  const std::vector<float> a = logits_of(in_, tokens_, KVDType::F32);
  const std::vector<float> b = logits_of(write(t_, "folded.gguf"), tokens_, KVDType::F32);
  ASSERT_EQ(a.size(), b.size());
  double range = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    range = std::max(range, std::fabs(double{a[i]}));
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
  }
  EXPECT_LT(diff, 1e-4 * range) << "max |diff| " << diff << " of logits up to " << range;

  // Negative control: the norm left unfolded in one layer changes the output visibly.
  FloatTensors wrong = t_;
  wrong.at(layer_tensor(0, "attn_norm.weight")) =
      load_float_tensor(*file_, layer_tensor(0, "attn_norm.weight"));
  const std::vector<float> w = logits_of(write(wrong, "wrong.gguf"), tokens_, KVDType::F32);
  double wdiff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    wdiff = std::max(wdiff, std::fabs(double{a[i]} - double{w[i]}));
  EXPECT_GT(wdiff, 1e-2 * range);
}

TEST_F(AwqFold, AttentionOutputScalesMustRespectGqa) {
  std::vector<float> untied(static_cast<size_t>(c_.q_dim()), 1.0f);
  untied[static_cast<size_t>(c_.q_dim() - 1)] = 2.0f;  // last head differs from its group's first
  EXPECT_THROW(fold_attn_output(t_, c_, 0, untied), Error);
  std::vector<float> zero(static_cast<size_t>(c_.dim), 0.0f);
  EXPECT_THROW(fold_attn_input(t_, c_, 0, zero), Error);
}

}  // namespace
}  // namespace kvasir
