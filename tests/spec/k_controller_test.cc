// The auto-K model: E(K) / C(K) from the fitted target step time and the proposer's cost.
#include "kvasir/spec/k_controller.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvasir {
namespace {

// A target whose step costs 10 ms + 1 ms per token per sequence, a proposer at 0.5 ms a token.
void feed(KController& c) {
  for (int i = 0; i < 20; ++i) {
    const double n = 1 + i % 5;
    c.record_target_step(n, 0.010 + 0.001 * n);
    c.record_proposer(4, 4 * 0.0005);
  }
}

TEST(KController, AnswersTheInitialKUntilMeasured) {
  KController c(3, 8);
  EXPECT_EQ(c.choose(0.9), 3);
}

TEST(KController, ExpectedSpeedupFollowsTheModel) {
  KController c(4, 8);
  feed(c);
  const double a = 0.8, k = 4;
  const double e = (1 - std::pow(a, k + 1)) / (1 - a);
  const double cost = (0.010 + 0.001 * (1 + k) + k * 0.0005) / 0.011;
  EXPECT_NEAR(c.expected_speedup(4, a), e / cost, 1e-6);
  EXPECT_DOUBLE_EQ(c.expected_speedup(0, a), 1.0);
}

TEST(KController, HigherAcceptanceChoosesLongerProposals) {
  KController c(4, 8);
  feed(c);
  const int k_low = c.choose(0.3), k_mid = c.choose(0.7), k_high = c.choose(0.95);
  EXPECT_LE(k_low, k_mid);
  EXPECT_LE(k_mid, k_high);
  EXPECT_LT(k_low, k_high);
  EXPECT_EQ(c.choose(1.0), 8);
  // The choice is the argmax of the model.
  for (double a : {0.3, 0.7, 0.95})
    for (int k = 1; k <= 8; ++k)
      EXPECT_LE(c.expected_speedup(k, a), c.expected_speedup(c.choose(a), a) * 1.001 + 1e-12);
}

}  // namespace
}  // namespace kvasir
