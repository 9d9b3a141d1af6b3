#include "kvasir/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kvasir/util/error.h"
#include "test_util/random.h"

namespace kvasir {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// Double-precision reference: softmax of logits / t over `keep` (all when empty).
std::vector<double> softmax_ref(const std::vector<double>& logits, double t = 1.0,
                                const std::set<int32_t>& keep = {}) {
  double mx = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep.empty() || keep.count(i)) mx = std::max(mx, logits[i]);
  }
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep.empty() || keep.count(i)) sum += p[i] = std::exp((logits[i] - mx) / t);
  }
  for (double& x : p) x /= sum;
  return p;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

SamplingParams seeded(uint64_t seed = 1) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

std::vector<float> probabilities(Sampler& s, const std::vector<float>& logits) {
  std::vector<float> probs(logits.size());
  s.probabilities(logits.data(), static_cast<int32_t>(logits.size()), probs.data());
  return probs;
}

std::set<int32_t> support(const SamplingParams& params, const std::vector<float>& logits) {
  Sampler s(params, static_cast<int32_t>(logits.size()));
  const auto probs = probabilities(s, logits);
  std::set<int32_t> kept;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) kept.insert(static_cast<int32_t>(i));
  }
  // Whatever is kept carries the renormalized (tempered) softmax over the kept set. Tolerance:
  // float exp and the float cast of a double quotient, each ~1e-7 relative.
  const auto ref = softmax_ref(to_double(logits), params.temperature, kept);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(probs[i], ref[i], 1e-6) << "token " << i;
  return kept;
}

std::vector<float> random_logits(int32_t n, uint32_t seed, float scale = 3.0f) {
  return test_util::random_normal(static_cast<size_t>(n), seed, scale);
}

// ---------------------------------------------------------------- greedy

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  const auto logits = random_logits(5000, 1);
  Sampler s(p, 5000);
  EXPECT_EQ(s.sample(logits.data(), 5000),
            std::max_element(logits.begin(), logits.end()) - logits.begin());
  const std::vector<float> tied = {1.0f, 3.0f, 2.0f, 3.0f};
  Sampler t(p, 4);
  EXPECT_EQ(t.sample(tied.data(), 4), 1);
  // Below 1e-5 counts as greedy too, and truncation settings do not matter.
  p.temperature = 1e-6f;
  p.top_k = 1;
  p.top_p = 0.1f;
  Sampler u(p, 4);
  EXPECT_EQ(u.sample(tied.data(), 4), 1);
  EXPECT_EQ(probabilities(u, tied), (std::vector<float>{0, 1, 0, 0}));
}

TEST(Sampler, GreedySkipsNaNAndFollowsInfinity) {
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  Sampler s(p, 4);
  const std::vector<float> a = {std::nanf(""), 1.0f, 2.0f, std::nanf("")};
  EXPECT_EQ(s.sample(a.data(), 4), 2);
  const std::vector<float> b = {1.0f, kInf, 2.0f, 3.0f};
  EXPECT_EQ(s.sample(b.data(), 4), 1);
}

// ---------------------------------------------------------------- randomness

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const auto logits = random_logits(200, 5, 1.0f);
  auto run = [&](uint64_t seed, SamplingParams p) {
    p.seed = seed;
    Sampler s(p, 200);
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) out.push_back(s.sample(logits.data(), 200));
    return out;
  };
  SamplingParams plain;
  SamplingParams truncated;
  truncated.top_k = 50;
  truncated.top_p = 0.9f;
  truncated.min_p = 0.05f;
  truncated.temperature = 0.8f;
  for (const auto& p : {plain, truncated}) {
    EXPECT_EQ(run(42, p), run(42, p));
    EXPECT_NE(run(42, p), run(43, p));
  }
}

TEST(Sampler, UnsetSeedIsDrawnAndReported) {
  const auto logits = random_logits(200, 6, 1.0f);
  SamplingParams p;  // no seed
  Sampler a(p, 200), b(p, 200);
  EXPECT_NE(a.seed(), b.seed());
  p.seed = a.seed();
  Sampler replay(p, 200);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(a.sample(logits.data(), 200), replay.sample(logits.data(), 200));
  }
}

// The draw is the inverse CDF (scanned in token-id order when nothing is truncated) at
// u = (mt19937_64 output >> 11) * 2^-53, so it can be recomputed independently here; and the
// first tokens for seed 42 are pinned, so a change in the algorithm cannot go unnoticed.
TEST(Sampler, DrawIsInverseCdfOfDocumentedUniform) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const auto logits = log_of(probs);
  Sampler s(seeded(42), 4);
  std::mt19937_64 engine(42);
  std::vector<int32_t> got;
  for (int i = 0; i < 500; ++i) {
    const double u = static_cast<double>(engine() >> 11) * 0x1.0p-53;
    int32_t expected = 0;
    double cum = probs[0];
    while (u >= cum && expected < 3) cum += probs[++expected];
    const int32_t t = s.sample(logits.data(), 4);
    ASSERT_EQ(t, expected) << "draw " << i << " u=" << u;
    if (i < 16) got.push_back(t);
  }
  EXPECT_EQ(got, (std::vector<int32_t>{3, 3, 3, 1, 3, 0, 2, 2, 1, 2, 0, 2, 3, 3, 3, 3}));
}

// Over a vocabulary of many 1024-token blocks, the draw (which skips whole blocks by their mass)
// still lands where the double-precision inverse CDF says, except when u falls within 1e-6 of a
// CDF step, where float weights may legitimately decide the other way.
TEST(Sampler, BlockedDrawMatchesInverseCdf) {
  const int32_t n = 10000;
  const auto logits = random_logits(n, 15, 1.0f);
  const auto ref = softmax_ref(to_double(logits));
  std::vector<double> cdf(n);
  std::partial_sum(ref.begin(), ref.end(), cdf.begin());
  Sampler s(seeded(77), n);
  std::mt19937_64 engine(77);
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    const double u = static_cast<double>(engine() >> 11) * 0x1.0p-53;
    const int32_t expected =
        static_cast<int32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    const int32_t t = s.sample(logits.data(), n);
    const double lo = expected > 0 ? cdf[expected - 1] : 0.0;
    if (u - lo < 1e-6 || cdf[expected] - u < 1e-6) continue;
    ASSERT_EQ(t, expected) << "draw " << i;
    ++checked;
  }
  EXPECT_GT(checked, 1900);
}

// 20000 draws from a known distribution; each count must lie within 4 standard deviations of
// its expectation (binomial sigma = sqrt(n p (1 - p))). The seed is fixed, so this cannot flake;
// a biased sampler (e.g. off-by-one in the CDF scan) moves counts by far more than 4 sigma.
void expect_frequencies(Sampler& s, const std::vector<float>& logits,
                        const std::vector<double>& expected, int n = 20000) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i)
    ++counts[s.sample(logits.data(), static_cast<int32_t>(logits.size()))];
  for (size_t t = 0; t < expected.size(); ++t) {
    const double mean = n * expected[t];
    const double sigma = std::sqrt(n * expected[t] * (1.0 - expected[t]));
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t;
    } else {
      EXPECT_NEAR(counts[t], mean, 4.0 * sigma) << "token " << t;
    }
  }
}

TEST(Sampler, StatisticsMatchDistribution) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const auto logits = log_of(probs);
  Sampler s(seeded(2024), 4);
  expect_frequencies(s, logits, probs);
}

TEST(Sampler, StatisticsWithTemperatureAndTopK) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const auto logits = log_of(probs);
  // T = 0.5 squares the probabilities: 0.01, 0.04, 0.09, 0.16 over 0.30.
  SamplingParams p = seeded(7);
  p.temperature = 0.5f;
  Sampler a(p, 4);
  expect_frequencies(a, logits, {0.01 / 0.3, 0.04 / 0.3, 0.09 / 0.3, 0.16 / 0.3});
  // top_k = 2 keeps 0.3 and 0.4, renormalized (the kept set is scanned best first).
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler b(p, 4);
  expect_frequencies(b, logits, {0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0});
}

// ---------------------------------------------------------------- truncation

TEST(Sampler, TopKKeepsExactlyKWithLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 2.0f, 0.0f};
  SamplingParams p = seeded();
  p.top_k = 2;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 3}));
  p.top_k = 3;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2, 3}));
  p.top_k = 6;  // k >= n_vocab: off
  EXPECT_EQ(support(p, logits).size(), 6u);
  p.top_k = 0;
  EXPECT_EQ(support(p, logits).size(), 6u);
  const std::vector<float> tied = {2.0f, 1.0f, 1.0f, 1.0f, 0.0f};
  p.top_k = 2;
  EXPECT_EQ(support(p, tied), (std::set<int32_t>{0, 1}));
  p.top_k = 3;
  EXPECT_EQ(support(p, tied), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, TopKLargeVocabMatchesSortedReference) {
  const int32_t n = 32000;
  auto logits = random_logits(n, 9);
  for (int i = 0; i < n; i += 3) logits[i] = std::round(logits[i]);  // plenty of ties
  for (int32_t k : {1, 40, 256, 257, 1000}) {
    SamplingParams p = seeded();
    p.top_k = k;
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    EXPECT_EQ(support(p, logits), std::set<int32_t>(ids.begin(), ids.begin() + k)) << "k=" << k;
  }
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.1, 0.4, 0.2, 0.3 (best first: 1, 3, 2, 0; cumulative 0.4, 0.7, 0.9, 1.0).
  const auto logits = log_of({0.1, 0.4, 0.2, 0.3});
  SamplingParams p = seeded();
  p.top_p = 0.35f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1}));
  p.top_p = 0.5f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 3}));  // the crossing token is kept
  p.top_p = 0.72f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 3, 2}));
  p.top_p = 0.95f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, TopPTiesGoToLowestId) {
  const auto logits = log_of({0.2, 0.2, 0.2, 0.4});
  SamplingParams p = seeded();
  p.top_p = 0.5f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{3, 0}));
  p.top_p = 0.7f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{3, 0, 1}));
}

TEST(Sampler, TopPAppliesAfterTemperatureAndTopK) {
  const auto logits = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = seeded();
  p.top_p = 0.72f;  // alone: 0.4, 0.7 < 0.72, 0.9 -> three tokens
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2}));
  p.top_k = 3;  // renormalized 0.444, 0.778 -> two tokens
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1}));
  p.top_k = -1;
  p.top_p = 0.8f;  // T = 1: 0.4, 0.7, 0.9 -> three tokens
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2}));
  p.temperature = 0.5f;  // squared: 0.533, 0.833 -> two tokens
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, TopPFlatLargeVocab) {
  // A flat distribution over 152k tokens: top_p = 0.5 needs tens of thousands of tokens, too many
  // to sort, so the histogram path decides.
  const int32_t n = 152064;
  const auto logits = random_logits(n, 12, 0.5f);
  SamplingParams p = seeded();
  p.top_p = 0.5f;
  Sampler s(p, n);
  const auto probs = probabilities(s, logits);
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const auto ref = softmax_ref(to_double(logits));
  size_t kept = 0;
  for (float x : probs) kept += x > 0.0f;
  ASSERT_GT(kept, 1000u);
  // The kept set is the best `kept` tokens, and it is the shortest prefix reaching 0.5 (the sums
  // are accurate to ~1e-6 relative, far below one token's share of ~1e-5).
  double cum = 0.0;
  for (size_t j = 0; j < kept; ++j) {
    ASSERT_GT(probs[ids[j]], 0.0f) << "rank " << j;
    if (j + 1 < kept) cum += ref[ids[j]];
  }
  EXPECT_LT(cum, 0.5);
  EXPECT_GE(cum + ref[ids[kept - 1]], 0.5);
}

TEST(Sampler, TopPPeakedLargeVocab) {
  // A peaked row: the kept prefix is found among a few sorted candidates.
  const int32_t n = 50000;
  auto logits = random_logits(n, 13, 2.0f);
  for (int i = 0; i < 30; ++i) logits[i * 997] = 12.0f - 0.25f * i;
  SamplingParams p = seeded();
  p.top_p = 0.8f;
  Sampler s(p, n);
  const auto probs = probabilities(s, logits);
  const auto ref = softmax_ref(to_double(logits));
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double cum = 0.0;
  size_t expect = 0;
  while (cum < 0.8) cum += ref[ids[expect++]];
  size_t kept = 0;
  for (float x : probs) kept += x > 0.0f;
  EXPECT_EQ(kept, expect);
  for (size_t j = 0; j < expect; ++j) EXPECT_GT(probs[ids[j]], 0.0f) << "rank " << j;
}

TEST(Sampler, MinPLargeVocabMatchesReference) {
  // Min-p alone takes the logit pre-filter path; check it against the definition in double,
  // skipping tokens within 1e-5 (relative) of the threshold, where float rounding may decide.
  const int32_t n = 152064;
  const auto logits = random_logits(n, 14, 2.0f);
  SamplingParams p = seeded();
  p.temperature = 0.7f;
  p.min_p = 0.05f;
  Sampler s(p, n);
  const auto probs = probabilities(s, logits);
  const double mx = *std::max_element(logits.begin(), logits.end());
  int kept = 0;
  for (int32_t i = 0; i < n; ++i) {
    const double rel = std::exp((logits[i] - mx) / 0.7);
    if (std::fabs(rel - 0.05) < 1e-5 * 0.05) continue;
    ASSERT_EQ(probs[i] > 0.0f, rel >= 0.05) << "token " << i << " rel " << rel;
    kept += rel >= 0.05;
  }
  EXPECT_GT(kept, 10);
}

TEST(Sampler, MinPKeepsTokensWithinFactorOfBest) {
  // Relative to the best: 1, 0.5, 0.3, 0.2.
  const auto logits = log_of({0.5, 0.25, 0.15, 0.1});
  SamplingParams p = seeded();
  p.min_p = 0.25f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.45f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1}));
  p.min_p = 1.0f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0}));
  p.temperature = 2.0f;  // relative: 1, 0.707, 0.548, 0.447
  p.min_p = 0.45f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, MinPIsInclusiveForTiesWithTheBest) {
  const std::vector<float> logits = {2.0f, 1.0f, 2.0f};
  SamplingParams p = seeded();
  p.min_p = 1.0f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 2}));
}

TEST(Sampler, MinPAfterTopKAndTopP) {
  const auto logits = log_of({0.5, 0.25, 0.15, 0.1});
  SamplingParams p = seeded();
  p.top_p = 0.95f;  // keeps all four
  p.min_p = 0.25f;  // then drops 0.1
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2}));
  p.top_k = 2;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1}));
}

// ---------------------------------------------------------------- penalties and bias

// Hand-computed: logits 2, -1, 0.5, 3, -2, 0; prompt [0, 1]; output [3, 3, 4].
// repetition 2 (prompt + output), frequency 0.5 and presence 0.25 (output only):
//   t0 prompt:       2 / 2 = 1
//   t1 prompt:      -1 * 2 = -2
//   t2 absent:       0.5
//   t3 output x2:    3 / 2 - (0.5 * 2 + 0.25) = 0.25
//   t4 output x1:   -2 * 2 - (0.5 * 1 + 0.25) = -4.75
//   t5 absent:       0
const std::vector<float> kPenaltyLogits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};

Sampler penalized_sampler(SamplingParams p) {
  p.seed = 1;
  Sampler s(p, 6);
  const std::vector<int32_t> prompt = {0, 1};
  s.accept_prompt(prompt);
  for (int32_t t : {3, 3, 4}) s.accept(t);
  return s;
}

void expect_distribution(Sampler& s, const std::vector<double>& logits) {
  const auto probs = probabilities(s, kPenaltyLogits);
  const auto ref = softmax_ref(logits);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(probs[i], ref[i], 1e-6) << "token " << i;
}

TEST(Sampler, PenaltiesHandComputed) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s = penalized_sampler(p);
  expect_distribution(s, {1.0, -2.0, 0.5, 0.25, -4.75, 0.0});
}

TEST(Sampler, EachPenaltyAlone) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler rep = penalized_sampler(p);
  expect_distribution(rep, {1.0, -2.0, 0.5, 1.5, -4.0, 0.0});
  p = SamplingParams();
  p.frequency_penalty = 0.5f;
  Sampler freq = penalized_sampler(p);
  expect_distribution(freq, {2.0, -1.0, 0.5, 2.0, -2.5, 0.0});  // prompt tokens not counted
  p = SamplingParams();
  p.presence_penalty = -1.5f;  // negative: encourages repeats
  Sampler pres = penalized_sampler(p);
  expect_distribution(pres, {2.0, -1.0, 0.5, 4.5, -0.5, 0.0});
}

TEST(Sampler, PenaltyWindowLimitsTheTokensCounted) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.penalty_last_n = 2;  // window: the last two tokens, [3, 4]
  Sampler s = penalized_sampler(p);
  expect_distribution(s, {2.0, -1.0, 0.5, 3.0 / 2 - 0.75, -4.75, 0.0});
  p.penalty_last_n = 0;  // off
  Sampler off = penalized_sampler(p);
  expect_distribution(off, to_double(kPenaltyLogits));
}

TEST(Sampler, LogitBiasThenPenalties) {
  // Token 1: logit 1, bias +1 = 2, then repetition penalty 2 (it is in the prompt) = 1.
  // The other order would give 1 / 2 + 1 = 1.5.
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, 0.2f};
  SamplingParams p = seeded();
  p.logit_bias = {{1, 1.0f}, {2, -kInf}, {3, -0.2f}};
  p.repetition_penalty = 2.0f;
  Sampler s(p, 4);
  const std::vector<int32_t> prompt = {1};
  s.accept_prompt(prompt);
  const auto probs = probabilities(s, logits);
  const auto ref = softmax_ref({0.0, 1.0, -INFINITY, 0.0});
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(probs[i], ref[i], 1e-6) << "token " << i;
  EXPECT_EQ(probs[2], 0.0f);  // banned
  for (int i = 0; i < 1000; ++i) ASSERT_NE(s.sample(logits.data(), 4), 2);
}

TEST(Sampler, LogitBiasSteersGreedy) {
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f};
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  p.logit_bias = {{1, 5.0f}};
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(logits.data(), 3), 1);
}

// ---------------------------------------------------------------- logprobs

// Tolerance: logits are O(10); the sampler computes log-softmax with a double sum and float
// results, so errors are a few float ulps of O(10) values, i.e. ~1e-6; 1e-5 leaves margin.
constexpr double kLogprobTol = 1e-5;

std::vector<double> log_softmax_ref(const std::vector<double>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (double v : x) sum += std::exp(v - mx);
  std::vector<double> out;
  for (double v : x) out.push_back(v - mx - std::log(sum));
  return out;
}

TEST(Sampler, LogprobsAreLogSoftmaxAfterPenaltiesBeforeTemperature) {
  const int32_t n = 1000;
  const auto logits = random_logits(n, 21);
  SamplingParams p = seeded(5);
  p.temperature = 0.7f;
  p.top_k = 5;
  p.logprobs = true;
  p.top_logprobs = 5;
  p.logit_bias = {{10, 3.0f}};
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  Sampler s(p, n);
  const std::vector<int32_t> prompt = {10, 11};
  s.accept_prompt(prompt);
  s.accept(12);
  // Reference processed logits in double.
  std::vector<double> x = to_double(logits);
  x[10] += 3.0;
  for (int t : {10, 11, 12}) x[t] = x[t] > 0 ? x[t] / 1.3 : x[t] * 1.3;
  x[12] -= 0.5;
  const auto ref = log_softmax_ref(x);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });

  SampleResult r;
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(logits.data(), n, &r);
    ASSERT_EQ(r.token, t);
    EXPECT_NEAR(r.logprob, ref[t], kLogprobTol);
    ASSERT_EQ(r.top_logprobs.size(), 5u);
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(r.top_logprobs[j].token, order[j]);
      EXPECT_NEAR(r.top_logprobs[j].logprob, ref[order[j]], kLogprobTol);
    }
  }
}

TEST(Sampler, RawLogprobsIgnoreBiasAndPenalties) {
  const int32_t n = 300;
  const auto logits = random_logits(n, 22);
  SamplingParams p = seeded(5);
  p.logprobs = true;
  p.logprobs_mode = LogprobsMode::kRaw;
  p.logit_bias = {{7, -kInf}};
  p.frequency_penalty = 1.0f;
  Sampler s(p, n);
  s.accept(3);
  const auto ref = log_softmax_ref(to_double(logits));
  SampleResult r;
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(logits.data(), n, &r);
    EXPECT_NE(t, 7);
    EXPECT_NEAR(r.logprob, ref[t], kLogprobTol);
    EXPECT_TRUE(r.top_logprobs.empty());
  }
}

TEST(Sampler, GreedyLogprobsAndBannedTokenLogprob) {
  const std::vector<float> logits = {1.0f, 4.0f, 2.0f};
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 3;
  p.logit_bias = {{2, -kInf}};
  Sampler s(p, 3);
  SampleResult r;
  EXPECT_EQ(s.sample(logits.data(), 3, &r), 1);
  const auto ref = log_softmax_ref({1.0, 4.0, -INFINITY});
  EXPECT_NEAR(r.logprob, ref[1], kLogprobTol);
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[2].token, 2);
  EXPECT_EQ(r.top_logprobs[2].logprob, -kInf);
}

// ---------------------------------------------------------------- edges and errors

TEST(Sampler, DegenerateRows) {
  SamplingParams p = seeded();
  p.logit_bias = {{0, -kInf}, {1, -kInf}, {2, -kInf}};
  Sampler banned(p, 3);
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(banned.sample(logits.data(), 3), 0);  // nothing possible: lowest id
  Sampler s(seeded(), 3);
  const std::vector<float> nan_row = {std::nanf(""), 0.0f, std::nanf("")};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s.sample(nan_row.data(), 3), 1);
  const std::vector<float> inf_row = {0.0f, kInf, 5.0f};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s.sample(inf_row.data(), 3), 1);
}

TEST(Sampler, ContractViolationsThrow) {
  SamplingParams bad;
  bad.top_p = 0.0f;
  EXPECT_THROW(Sampler(bad, 10), Error);
  SamplingParams biased;
  biased.logit_bias = {{10, 1.0f}};
  EXPECT_THROW(Sampler(biased, 10), Error);  // token id outside this vocabulary
  EXPECT_THROW(Sampler(SamplingParams(), 0), Error);
  Sampler s(seeded(), 10);
  const std::vector<float> logits(11, 0.0f);
  EXPECT_THROW(s.sample(logits.data(), 11), Error);
  EXPECT_THROW(s.accept(10), Error);
  EXPECT_THROW(s.accept(-1), Error);
  const std::vector<int32_t> prompt = {1, 99};
  EXPECT_THROW(s.accept_prompt(prompt), Error);
}

}  // namespace
}  // namespace kvasir
