// The acceptance monitor: fallback below the threshold once the window is full, probes every
// reprobe_steps, recovery when a probe accepts enough, and the per-token estimate.
#include "kvasir/spec/acceptance_monitor.h"

#include <gtest/gtest.h>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

TEST(AcceptanceMonitor, FallsBackOnlyOnceTheWindowIsFullAndLow) {
  AcceptanceMonitor m({0.6, 4, 10, 2});
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(m.speculate());
    EXPECT_FALSE(m.record(4, 0)) << "the window is not full yet";
  }
  EXPECT_TRUE(m.record(4, 0));
  EXPECT_TRUE(m.fallback());
  EXPECT_EQ(m.warnings(), 1u);
  EXPECT_DOUBLE_EQ(m.window_rate(), 0.0);
}

TEST(AcceptanceMonitor, StaysOnWhileAcceptanceIsHigh) {
  AcceptanceMonitor m({0.6, 4, 10, 2});
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(m.speculate());
    EXPECT_FALSE(m.record(4, 3));  // 75%
  }
  EXPECT_FALSE(m.fallback());
  EXPECT_DOUBLE_EQ(m.window_rate(), 0.75);
  // 3 accepted per rejection: the per-token estimate is 3 / 4.
  EXPECT_DOUBLE_EQ(m.token_acceptance(), 0.75);
}

TEST(AcceptanceMonitor, ProbesPeriodicallyAndRecovers) {
  AcceptanceMonitor m({0.6, 2, 5, 2});
  m.record(4, 0);
  ASSERT_TRUE(m.record(4, 0));
  // Four plain steps, then the fifth probes.
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(m.speculate());
  EXPECT_TRUE(m.speculate());
  EXPECT_EQ(m.probes(), 1u);
  m.record(4, 1);
  EXPECT_TRUE(m.speculate()) << "still probing: one of two proposals judged";
  m.record(4, 0);  // 1 of 8: the probe fails
  EXPECT_TRUE(m.fallback());
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(m.speculate());
  EXPECT_TRUE(m.speculate());
  m.record(4, 4);
  m.record(4, 3);  // 7 of 8: recovered
  EXPECT_FALSE(m.fallback());
  EXPECT_TRUE(m.speculate());
  EXPECT_EQ(m.warnings(), 1u);
}

TEST(AcceptanceMonitor, RefusesBadConfig) {
  EXPECT_THROW(AcceptanceMonitor({0.6, 0, 5, 2}), Error);
  EXPECT_THROW(AcceptanceMonitor({1.5, 4, 5, 2}), Error);
  EXPECT_THROW(AcceptanceMonitor({0.6, 4, 0, 2}), Error);
  EXPECT_THROW(AcceptanceMonitor({0.6, 4, 5, 0}), Error);
}

}  // namespace
}  // namespace kvasir
