// Rejection sampling against a scalar-simple oracle: whatever the draft distribution q, the token
// kept at a draft position is distributed as the target's p (chi-square over 200k draws, fixed
// seeds), greedy keeps exactly the target's argmax, tokens the target's chain removed (top-k) are
// never kept, and the deliberately broken rule fails the same test.
#include "kvasir/spec/rejection_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "chi_square.h"
#include "kvasir/sampling/rng.h"

namespace kvasir {
namespace {

constexpr int kV = 8;
const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.5f};

SamplingParams sampled(int top_k = -1) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = top_k;
  p.seed = 1234;
  return p;
}

std::vector<double> target_p(const SamplingParams& sp) {
  Sampler s(sp, kV);
  std::vector<float> p(kV);
  s.probabilities(kLogits.data(), kV, p.data());
  return {p.begin(), p.end()};
}

// Kept-token counts over n trials with the draft drawing from q (null: a fixed one-hot token).
std::vector<int64_t> kept_counts(const SamplingParams& sp, const std::vector<float>* q,
                                 int32_t fixed_draft, int n, RejectionRule rule,
                                 double* acceptance = nullptr) {
  Sampler target(sp, kV);
  Rng draft_rng(99);
  std::vector<float> scratch;
  std::vector<int64_t> counts(kV, 0);
  SampleResult sr;
  int64_t accepted = 0;
  for (int i = 0; i < n; ++i) {
    int32_t d = fixed_draft;
    if (q) d = draw_from_weights(q->data(), kV, 1.0, draft_rng.uniform());
    const SpecDecision dec =
        verify_draft_token(target, kLogits.data(), d, q ? q->data() : nullptr, scratch, &sr, rule);
    counts[static_cast<size_t>(dec.token)]++;
    accepted += dec.accepted;
    EXPECT_EQ(sr.token, dec.token);
  }
  if (acceptance) *acceptance = static_cast<double>(accepted) / n;
  return counts;
}

double chi2_of(const std::vector<double>& p, const std::vector<int64_t>& c, int* df) {
  return test_util::chi_square(p, c, df);
}

TEST(RejectionSampler, KeptTokensFollowTheTargetForAnyDraft) {
  const auto sp = sampled();
  const auto p = target_p(sp);
  // A draft far from p: most of its mass where p has little.
  const std::vector<float> q = {0.02f, 0.02f, 0.30f, 0.30f, 0.02f, 0.30f, 0.02f, 0.02f};
  double acc = 0;
  const auto counts = kept_counts(sp, &q, -1, 200000, RejectionRule::kExact, &acc);
  int df = 0;
  const double x2 = chi2_of(p, counts, &df);
  EXPECT_LT(x2, test_util::chi_square_critical_1e6(df)) << "df " << df;
  // The acceptance probability is sum_x min(p(x), q(x)).
  double expect_acc = 0;
  for (int i = 0; i < kV; ++i) expect_acc += std::min<double>(p[i], q[i]);
  EXPECT_NEAR(acc, expect_acc, 0.01);
}

TEST(RejectionSampler, BrokenRuleFailsTheSameTest) {
  const auto sp = sampled();
  const auto p = target_p(sp);
  const std::vector<float> q = {0.02f, 0.02f, 0.30f, 0.30f, 0.02f, 0.30f, 0.02f, 0.02f};
  const auto counts = kept_counts(sp, &q, -1, 200000, RejectionRule::kBrokenResampleFromTarget);
  int df = 0;
  const double x2 = chi2_of(p, counts, &df);
  EXPECT_GT(x2, test_util::chi_square_critical_1e6(df))
      << "resampling from p after a rejection skews the output toward the draft";
}

TEST(RejectionSampler, OneHotProposalsKeepTheTargetDistribution) {
  const auto sp = sampled();
  const auto p = target_p(sp);
  const auto counts = kept_counts(sp, nullptr, 3, 200000, RejectionRule::kExact);
  int df = 0;
  const double x2 = chi2_of(p, counts, &df);
  EXPECT_LT(x2, test_util::chi_square_critical_1e6(df));
}

TEST(RejectionSampler, TokensOutsideTheTargetsSupportAreNeverKept) {
  const auto sp = sampled(/*top_k=*/3);
  const auto p = target_p(sp);
  const auto counts = kept_counts(sp, nullptr, 3, 20000, RejectionRule::kExact);
  for (int i = 0; i < kV; ++i)
    if (p[static_cast<size_t>(i)] == 0) {
      EXPECT_EQ(counts[static_cast<size_t>(i)], 0) << i;
    }
  int df = 0;
  const double x2 = chi2_of(p, counts, &df);
  EXPECT_LT(x2, test_util::chi_square_critical_1e6(df));
}

TEST(RejectionSampler, GreedyKeepsTheArgmax) {
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, kV);
  std::vector<float> scratch;
  SampleResult sr;
  for (int32_t d = 0; d < kV; ++d) {
    const SpecDecision dec = verify_draft_token(s, kLogits.data(), d, nullptr, scratch, &sr);
    EXPECT_EQ(dec.token, 6);
    EXPECT_EQ(dec.accepted, d == 6);
  }
}

TEST(RejectionSampler, LogprobsAreThoseOfPlainSampling) {
  SamplingParams sp = sampled();
  sp.logprobs = true;
  sp.top_logprobs = 3;
  Sampler a(sp, kV), b(sp, kV);
  std::vector<float> scratch;
  SampleResult spec, plain;
  const SpecDecision dec = verify_draft_token(a, kLogits.data(), 1, nullptr, scratch, &spec);
  b.score(kLogits.data(), kV, dec.token, &plain);
  EXPECT_EQ(spec.logprob, plain.logprob);
  ASSERT_EQ(spec.top_logprobs.size(), 3u);
  EXPECT_EQ(spec.top_logprobs[0].token, 6);
  // score() agrees with sample()'s logprob for the same token.
  SampleResult drawn;
  Sampler c(sp, kV);
  const int32_t t = c.sample(kLogits.data(), kV, &drawn);
  SampleResult scored;
  c.score(kLogits.data(), kV, t, &scored);
  EXPECT_EQ(drawn.logprob, scored.logprob);
}

TEST(DrawFromWeights, ScansCumulativeMass) {
  const std::vector<float> w = {0.0f, 1.0f, 0.0f, 3.0f};
  EXPECT_EQ(draw_from_weights(w.data(), 4, 4.0, 0.0), 1);
  EXPECT_EQ(draw_from_weights(w.data(), 4, 4.0, 0.24), 1);
  EXPECT_EQ(draw_from_weights(w.data(), 4, 4.0, 0.26), 3);
  EXPECT_EQ(draw_from_weights(w.data(), 4, 4.0, 0.999999), 3);
  const std::vector<float> z(4, 0.0f);
  EXPECT_EQ(draw_from_weights(z.data(), 4, 0.0, 0.5), -1);
}

}  // namespace
}  // namespace kvasir
