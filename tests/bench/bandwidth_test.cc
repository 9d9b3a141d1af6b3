// The bandwidth probe reads every byte of its buffer once per pass (checked through the sum of
// the known fill pattern), whatever the thread count, and reports a positive rate.
#include "kvasir/bench/bandwidth.h"

#include <gtest/gtest.h>

#include "kvasir/util/error.h"

namespace kvasir::bench {
namespace {

// The probe fills word i with i * 0x9E3779B97F4A7C15 (mod 2^64); the sum of that over all words
// is the checksum a complete pass must produce.
uint64_t expected_checksum(size_t bytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < bytes / 8; ++i) sum += i * 0x9E3779B97F4A7C15ull;
  return sum;
}

TEST(Bandwidth, EveryWordIsReadOncePerPass) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    BandwidthOptions o;
    o.bytes = (1 << 20) + 100;  // rounded up to whole pages; not a multiple of the thread count
    o.passes = 2;
    BandwidthProbe probe(pool, o);
    EXPECT_EQ(probe.bytes() % 4096, 0u);
    EXPECT_GE(probe.bytes(), o.bytes);
    double gbs = probe.measure_gbs();
    EXPECT_GT(gbs, 0.0);
    EXPECT_EQ(probe.last_checksum(), expected_checksum(probe.bytes())) << threads << " threads";
  }
}

TEST(Bandwidth, DefaultBufferIsFarLargerThanTheCache) {
  const size_t llc = last_level_cache_bytes();
  const size_t def = default_probe_bytes();
  EXPECT_GE(def, size_t{1} << 30);
  EXPECT_LE(def, size_t{4} << 30);
  if (llc > 0 && 8 * llc <= (size_t{4} << 30)) {
    EXPECT_GE(def, 8 * llc);
  }
}

TEST(Bandwidth, RejectsZeroPasses) {
  ThreadPool pool(1);
  BandwidthOptions o;
  o.bytes = 4096;
  o.passes = 0;
  EXPECT_THROW(BandwidthProbe(pool, o), Error);
}

}  // namespace
}  // namespace kvasir::bench
