#include "kvasir/bench/bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvasir::bench {
namespace {

constexpr size_t kPage = 4096;

// Sum of n 64-bit words (n a multiple of 16) with plain loads.
uint64_t sum_words_scalar(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
// Same sum with 256-bit loads, four independent accumulators (128 bytes per iteration) so the
// loop is limited by the loads, not by the add latency. p is 32-byte aligned.
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t sum_words(const uint64_t* p, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return sum_words_avx2(p, n);
#endif
  return sum_words_scalar(p, n);
}

// Parses sysfs cache sizes like "32768K" or "8M".
size_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  size_t mult = 1;
  std::string num = s;
  char last = num.back();
  if (last == 'K' || last == 'k') mult = size_t{1} << 10;
  if (last == 'M' || last == 'm') mult = size_t{1} << 20;
  if (mult != 1) num.pop_back();
  try {
    return static_cast<size_t>(std::stoull(num)) * mult;
  } catch (...) {
    return 0;
  }
}

}  // namespace

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (f >> s) best = std::max(best, parse_size(s));
  }
  if (best == 0) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) best = static_cast<size_t>(l3);
  }
  return best;
}

size_t default_probe_bytes() {
  const size_t gib = size_t{1} << 30;
  return std::min(4 * gib, std::max(gib, 8 * last_level_cache_bytes()));
}

BandwidthProbe::BandwidthProbe(ThreadPool& pool, const BandwidthOptions& opt)
    : pool_(pool), opt_(opt) {
  if (opt.passes < 1) fail("bandwidth probe: passes must be >= 1, got {}", opt.passes);
  size_t want = opt.bytes ? opt.bytes : default_probe_bytes();
  bytes_ = (want + kPage - 1) / kPage * kPage;
  data_ = static_cast<uint64_t*>(std::aligned_alloc(kPage, bytes_));
  if (!data_) fail("bandwidth probe: cannot allocate {} bytes", bytes_);
  // Write every page from the threads that will read it, with a known pattern.
  const size_t words = bytes_ / sizeof(uint64_t);
  uint64_t* d = data_;
  pool_.parallel_for(static_cast<int64_t>(words), [d](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) d[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  });
}

BandwidthProbe::~BandwidthProbe() {
  std::free(data_);
}

double BandwidthProbe::measure_gbs() {
  const size_t words = bytes_ / sizeof(uint64_t);
  const int nth = pool_.size();
  // Shares are whole 128-byte chunks (16 words) so every thread can use the unrolled loop.
  const size_t chunks = words / 16;
  struct alignas(64) Partial {
    uint64_t sum = 0;
  };
  std::vector<Partial> partial(static_cast<size_t>(nth));
  double best = 0;
  for (int pass = 0; pass < opt_.passes; ++pass) {
    const double t0 = now_seconds();
    pool_.run([&](int ith, int n) {
      const size_t per = (chunks + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
      const size_t b = std::min(chunks, per * static_cast<size_t>(ith));
      const size_t e = std::min(chunks, b + per);
      partial[static_cast<size_t>(ith)].sum = b < e ? sum_words(data_ + b * 16, (e - b) * 16) : 0;
    });
    const double dt = now_seconds() - t0;
    uint64_t sum = 0;
    for (const Partial& p : partial) sum += p.sum;
    checksum_ = sum;
    if (dt > 0) best = std::max(best, static_cast<double>(chunks * 128) / dt / 1e9);
  }
  return best;
}

}  // namespace kvasir::bench
