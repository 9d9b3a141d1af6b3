#include "kvasir/sampling/row_math.h"

#include <limits>

namespace kvasir {

namespace {
constexpr int kLanes = 8;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define KVASIR_ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KVASIR_ROW_CLONES
#endif

KVASIR_ROW_CLONES float row_max(const float* x, int32_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lane[kLanes];
  for (float& l : lane) l = kNegInf;
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  }
  float mx = kNegInf;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;  // NaN compares false and is skipped
  for (float l : lane) mx = l > mx ? l : mx;
  return mx;
}

KVASIR_ROW_CLONES double exp_shifted(const float* x, int32_t n, float max, float scale,
                                     float* out) {
  for (int32_t i = 0; i < n; ++i) out[i] = fast_exp(shifted(x[i], max) * scale);
  float lane[kLanes] = {};
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += out[i + j];
  }
  double sum = 0.0;
  for (float l : lane) sum += l;
  for (; i < n; ++i) sum += out[i];
  return sum;
}

KVASIR_ROW_CLONES int32_t collect_at_least(const float* x, int32_t n, float threshold,
                                           int32_t* ids) {
  constexpr int32_t kChunk = 32;
  int32_t m = 0;
  int32_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    float lane[kLanes];
    for (float& l : lane) l = -std::numeric_limits<float>::infinity();
    for (int c = 0; c < kChunk; c += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] = x[i + c + j] > lane[j] ? x[i + c + j] : lane[j];
    }
    bool any = false;
    for (float l : lane) any |= l >= threshold;
    if (!any) continue;
    for (int32_t j = i; j < i + kChunk; ++j) {
      if (x[j] >= threshold) ids[m++] = j;
    }
  }
  for (; i < n; ++i) {
    if (x[i] >= threshold) ids[m++] = i;
  }
  return m;
}

}  // namespace kvasir
