// Memory read-bandwidth probe (BENCH.md, "The memory-bandwidth limit").
//
// Every thread of the pool sums its own contiguous share of one buffer much larger than the
// last-level cache (AVX2 256-bit loads where the CPU has them, else 64-bit loads); a pass is
// timed with a monotonic clock from dispatch to the last thread's finish. The buffer is allocated
// and written once (so every page is mapped) before the first timed pass. The result of a probe
// is the best pass in GB/s (10^9 bytes/s): interference only ever makes a pass slower.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvasir/util/thread_pool.h"

namespace kvasir::bench {

struct BandwidthOptions {
  size_t bytes = 0;  // buffer size; 0 = default_probe_bytes()
  int passes = 5;    // timed passes per probe; the best counts
};

// Last-level cache size in bytes from sysfs/sysconf (0 when unknown).
size_t last_level_cache_bytes();

// max(1 GiB, 8 x last-level cache), capped at 4 GiB.
size_t default_probe_bytes();

// A reusable probe: owns the buffer so repeated measurements do not re-allocate.
class BandwidthProbe {
 public:
  // Allocates and fills the buffer (rounded up to a multiple of 4 KiB). Throws kvasir::Error
  // when the allocation fails or opt is invalid.
  BandwidthProbe(ThreadPool& pool, const BandwidthOptions& opt = {});
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  size_t bytes() const { return bytes_; }

  // Runs opt.passes timed passes and returns the best in GB/s.
  double measure_gbs();

  // The sum of the buffer's 64-bit words computed by the last pass (wrap-around arithmetic):
  // lets tests check that every byte was read exactly once.
  uint64_t last_checksum() const { return checksum_; }

 private:
  ThreadPool& pool_;
  BandwidthOptions opt_;
  size_t bytes_ = 0;
  uint64_t* data_ = nullptr;
  uint64_t checksum_ = 0;
};

}  // namespace kvasir::bench
