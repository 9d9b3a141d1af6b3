// Sampler step 0, the allowed set of constrained decoding: it must act exactly as a logit_bias of
// -inf on every token outside it (same tokens, same seeded draws, same processed logprobs), never
// let an outside token through, leave raw logprobs alone, and apply to one call only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kvasir/sampling/sampler.h"

namespace kvasir {
namespace {

constexpr int32_t kVocab = 300;  // not a multiple of 64: the last mask word is partial

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(kVocab);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint64_t> mask_of(const std::vector<bool>& allowed) {
  std::vector<uint64_t> m((allowed.size() + 63) / 64, 0);
  for (size_t t = 0; t < allowed.size(); ++t)
    if (allowed[t]) m[t / 64] |= uint64_t{1} << (t % 64);
  return m;
}

std::vector<bool> random_allowed(uint32_t seed, double p) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution b(p);
  std::vector<bool> a(kVocab);
  for (int32_t t = 0; t < kVocab; ++t) a[static_cast<size_t>(t)] = b(rng);
  a[static_cast<size_t>(seed % kVocab)] = true;  // at least one
  return a;
}

SamplingParams params(float temp, uint64_t seed) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.seed = seed;
  p.logprobs = true;
  p.top_logprobs = 5;
  return p;
}

TEST(SamplerAllowed, EqualsALogitBiasOfMinusInfinity) {
  for (uint32_t trial = 0; trial < 40; ++trial) {
    const std::vector<float> logits = random_logits(trial);
    const std::vector<bool> allowed = random_allowed(trial, trial % 2 ? 0.05 : 0.6);
    const std::vector<uint64_t> mask = mask_of(allowed);
    const float temp = trial % 3 == 0 ? 0.0f : 0.9f;
    SamplingParams masked_p = params(temp, trial);
    SamplingParams biased_p = masked_p;
    for (int32_t t = 0; t < kVocab; ++t)
      if (!allowed[static_cast<size_t>(t)])
        biased_p.logit_bias[t] = -std::numeric_limits<float>::infinity();
    Sampler masked(masked_p, kVocab), biased(biased_p, kVocab);
    for (int step = 0; step < 8; ++step) {
      SampleResult a, b;
      const int32_t ta = masked.sample(logits.data(), kVocab, &a, mask.data());
      const int32_t tb = biased.sample(logits.data(), kVocab, &b);
      ASSERT_EQ(ta, tb) << "trial " << trial << " step " << step;
      ASSERT_TRUE(allowed[static_cast<size_t>(ta)]);
      EXPECT_EQ(a.logprob, b.logprob);
      ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
      for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
        EXPECT_EQ(a.top_logprobs[i].token, b.top_logprobs[i].token);
        EXPECT_EQ(a.top_logprobs[i].logprob, b.top_logprobs[i].logprob);
      }
    }
  }
}

TEST(SamplerAllowed, AppliesToOneCallOnly) {
  const std::vector<float> logits = random_logits(5);
  int32_t best = 0;
  for (int32_t t = 1; t < kVocab; ++t)
    if (logits[static_cast<size_t>(t)] > logits[static_cast<size_t>(best)]) best = t;
  std::vector<bool> allowed(kVocab, false);
  const int32_t only = (best + 17) % kVocab;
  allowed[static_cast<size_t>(only)] = true;
  const std::vector<uint64_t> mask = mask_of(allowed);
  Sampler s(params(0.0f, 1), kVocab);
  EXPECT_EQ(s.sample(logits.data(), kVocab, nullptr, mask.data()), only);
  EXPECT_EQ(s.sample(logits.data(), kVocab), best);  // the next call is unconstrained
}

TEST(SamplerAllowed, RawLogprobsIgnoreTheMask) {
  const std::vector<float> logits = random_logits(9);
  std::vector<bool> allowed(kVocab, false);
  allowed[3] = allowed[200] = true;
  const std::vector<uint64_t> mask = mask_of(allowed);
  SamplingParams p = params(0.0f, 1);
  p.logprobs_mode = LogprobsMode::kRaw;
  Sampler masked(p, kVocab), plain(p, kVocab);
  SampleResult a, b;
  const int32_t t = masked.sample(logits.data(), kVocab, &a, mask.data());
  EXPECT_TRUE(t == 3 || t == 200);
  plain.score(logits.data(), kVocab, t, &b);
  EXPECT_EQ(a.logprob, b.logprob);  // the model's own distribution
  ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
  for (size_t i = 0; i < a.top_logprobs.size(); ++i)
    EXPECT_EQ(a.top_logprobs[i].token, b.top_logprobs[i].token);
}

}  // namespace
}  // namespace kvasir
