#include "kvasir/sampling/rng.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

TEST(Rng, IsTheStandardMt19937_64) {
  // The C++ standard fixes the 10000th output of mt19937_64 with the default seed 5489.
  Rng rng(5489);
  uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = rng.next();
  EXPECT_EQ(x, 9981545732273789042ull);
}

TEST(Rng, UniformIsTop53BitsOfOneOutput) {
  Rng a(123), b(123);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t raw = a.next();
    const double u = b.uniform();
    EXPECT_EQ(u, static_cast<double>(raw >> 11) / 9007199254740992.0);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Rng, SeedsGiveDifferentStreams) {
  Rng a(1), b(2);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a.next() == b.next();
  EXPECT_EQ(same, 0);
}

}  // namespace
}  // namespace kvasir
