// Contraction off: q4_1_value must be ggml's two roundings (product, then sum), never an FMA.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/quant/q4_1_group.h"

#include <algorithm>
#include <cmath>

#include "kvasir/tensor/dtype.h"
#include "kvasir/util/error.h"

namespace kvasir {

Q4_1Grid q4_1_grid(float lo, float hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || std::fabs(lo) > 65504.0f ||
      std::fabs(hi - lo) / 15 > 65504.0f)
    fail("Q4_1: a group spanning [{}, {}] does not fit fp16 scales", lo, hi);
  Q4_1Grid g;
  g.d16 = fp32_to_fp16((hi - lo) / 15);
  g.m16 = fp32_to_fp16(lo);
  g.d = fp16_to_fp32(g.d16);
  g.m = fp16_to_fp32(g.m16);
  return g;
}

int q4_1_code(const Q4_1Grid& g, float w) {
  if (g.d == 0) return 0;
  const float q = std::nearbyint((w - g.m) / g.d);
  return static_cast<int>(std::clamp(q, 0.0f, 15.0f));
}

float q4_1_value(const Q4_1Grid& g, int q) {
  return static_cast<float>(q) * g.d + g.m;
}

BlockQ4_1 q4_1_pack(const Q4_1Grid& g, const uint8_t* codes) {
  BlockQ4_1 b;
  b.d = g.d16;
  b.m = g.m16;
  for (int j = 0; j < kQ4_1Group / 2; ++j)
    b.qs[j] = static_cast<uint8_t>((codes[j] & 0x0f) | (codes[j + kQ4_1Group / 2] & 0x0f) << 4);
  return b;
}

void q4_1_round_rows(const float* w, int64_t rows, int64_t cols, BlockQ4_1* out, float* dequant) {
  if (cols % kQ4_1Group != 0) fail("Q4_1: rows of {} are not a multiple of 32", cols);
  const int64_t groups = cols / kQ4_1Group;
  uint8_t codes[kQ4_1Group];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w + r * cols + g * kQ4_1Group;
      const auto [lo, hi] = std::minmax_element(x, x + kQ4_1Group);
      const Q4_1Grid grid = q4_1_grid(*lo, *hi);
      for (int j = 0; j < kQ4_1Group; ++j) {
        codes[j] = static_cast<uint8_t>(q4_1_code(grid, x[j]));
        if (dequant) dequant[r * cols + g * kQ4_1Group + j] = q4_1_value(grid, codes[j]);
      }
      out[r * groups + g] = q4_1_pack(grid, codes);
    }
}

}  // namespace kvasir
