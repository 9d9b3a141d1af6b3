// Contraction off: ggml's libggml-base (where these quantizers live) is built for the x86-64
// baseline, without FMA, so every a * b + c below must stay two roundings to give ggml's bits.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/tensor/quant_iq4.h"

#include <algorithm>

#include "kvasir/tensor/quant_search.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

using quant_detail::kGroupMaxEps;
using quant_detail::nearest_int;
using quant_detail::signed_absmax;
using quant_detail::weight_by_importance;

constexpr int kGroup = 32;  // weights per scale group
constexpr int kTries = 7;   // candidate scales: 2 * kTries + 1 besides the first

// Index of the table level nearest to v (the upper one on a tie; the last for NaN), with the same
// comparisons as ggml's best_index_int8. Its bisection ends on the bracket lo = the last level
// <= v (hi = lo + 1), which a count over the ascending table finds without branching.
inline int nearest_level(float v) {
  const int8_t* t = kIQ4NLValues;
  if (v <= static_cast<float>(t[0])) return 0;
  if (v >= static_cast<float>(t[15])) return 15;
  if (v != v) return 15;  // the bisection's comparisons all fail: it ends on (14, 15), keeps 15
  int lo = 0;
  for (int k = 1; k < 15; ++k) lo += static_cast<float>(t[k]) <= v;
  const int hi = lo + 1;
  return v - static_cast<float>(t[lo]) < static_cast<float>(t[hi]) - v ? lo : hi;
}

// The scale of one 32-weight group: the first value of largest magnitude maps onto the table's
// end, then 15 grids around that are tried and the best weighted fit kept. 0 for a group of
// (near) zeros.
float group_scale(const float* x, const float* w) {
  float amax;
  const float max = signed_absmax(kGroup, x, &amax);
  if (amax < kGroupMaxEps) return 0.0f;
  const float first = static_cast<float>(kIQ4NLValues[0]);
  // Weighted sums of q * x and q^2 for the indices nearest to id * x.
  auto fit = [&](float id, float& sumqx, float& sumq2) {
    sumqx = 0.0f;
    sumq2 = 0.0f;
    for (int j = 0; j < kGroup; ++j) {
      const float q = static_cast<float>(kIQ4NLValues[nearest_level(id * x[j])]);
      sumqx += w[j] * q * x[j];
      sumq2 += w[j] * q * q;
    }
  };
  float sumqx, sumq2;
  const float d0 = -max / first;
  fit(1.0f / d0, sumqx, sumq2);
  float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int t = -kTries; t <= kTries; ++t) {
    fit(static_cast<float>(t + kIQ4NLValues[0]) / max, sumqx, sumq2);
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Per-weight importance of a group: x^2, or importance * sqrt(sigma2 + x^2).
inline void group_weights(const float* x, const float* importance, float sigma2, float* w) {
  if (importance != nullptr) {
    weight_by_importance(kGroup, x, importance, sigma2, w);
  } else {
    for (int j = 0; j < kGroup; ++j) w[j] = x[j] * x[j];
  }
}

// Twice the mean square of n values, summed in order (ggml's sigma2).
inline float sigma2_of(const float* x, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; ++j) s += x[j] * x[j];
  s *= 2.0f / static_cast<float>(n);
  return s;
}

// Indices of a group for inverse scale id, packed: weight j low nibble of byte j, j+16 high.
inline void pack_group(const float* x, float id, uint8_t* qs) {
  for (int j = 0; j < kGroup / 2; ++j) {
    const int lo = nearest_level(id * x[j]);
    const int hi = nearest_level(id * x[j + kGroup / 2]);
    qs[j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void quantize_block_iq4_nl(const float* x, const float* importance, BlockIQ4_NL* y) {
  float w[kGroup];
  group_weights(x, importance, sigma2_of(x, kGroup), w);
  const float d = group_scale(x, w);
  y->d = fp32_to_fp16(d);
  pack_group(x, d != 0.0f ? 1.0f / d : 0.0f, y->qs);
}

void quantize_block_iq4_xs(const float* x, const float* importance, BlockIQ4_XS* y) {
  constexpr int kGroups = kQKIQ4_XS / kGroup;
  const float sigma2 = sigma2_of(x, kQKIQ4_XS);
  float scales[kGroups];
  float w[kGroup];
  for (int g = 0; g < kGroups; ++g) {
    const float* xg = x + g * kGroup;
    group_weights(xg, importance != nullptr ? importance + g * kGroup : nullptr, sigma2, w);
    scales[g] = group_scale(xg, w);
  }
  const float max_scale = signed_absmax(kGroups, scales);
  // Group scales onto d * (ls - 32), ls in 0..63; the largest lands on -32.
  const float d = -max_scale / 32.0f;
  y->d = fp32_to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->scales_h = 0;
  std::fill(y->scales_l, y->scales_l + kGroups / 2, uint8_t{0});
  for (int g = 0; g < kGroups; ++g) {
    const int l = std::clamp(nearest_int(id * scales[g]), -32, 31);
    const float dl = d * static_cast<float>(l);
    pack_group(x + g * kGroup, dl != 0.0f ? 1.0f / dl : 0.0f, y->qs + g * (kGroup / 2));
    const unsigned ls = static_cast<unsigned>(l + 32);
    y->scales_l[g / 2] = static_cast<uint8_t>(y->scales_l[g / 2] | (ls & 0xf) << (4 * (g % 2)));
    y->scales_h = static_cast<uint16_t>(y->scales_h | (ls >> 4) << (2 * g));
  }
}

inline void dequantize_group(const uint8_t* qs, float d, float* out) {
  for (int j = 0; j < kGroup / 2; ++j) {
    out[j] = d * static_cast<float>(kIQ4NLValues[qs[j] & 0xf]);
    out[j + kGroup / 2] = d * static_cast<float>(kIQ4NLValues[qs[j] >> 4]);
  }
}

}  // namespace

void quantize_rows_iq4(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                       const float* importance) {
  int bs;
  switch (t) {
    case DType::IQ4_NL:
      bs = kQK4_NL;
      break;
    case DType::IQ4_XS:
      bs = kQKIQ4_XS;
      break;
    default:
      fail("quantize: {} is not an IQ4 format", dtype_name(t));
  }
  if (cols % bs != 0) fail("quantize: row length {} is not a multiple of {}", cols, bs);
  const int64_t nb = cols / bs;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    for (int64_t b = 0; b < nb; ++b) {
      const float* qw = importance != nullptr ? importance + b * bs : nullptr;
      if (t == DType::IQ4_NL) {
        quantize_block_iq4_nl(xr + b * bs, qw, static_cast<BlockIQ4_NL*>(out) + r * nb + b);
      } else {
        quantize_block_iq4_xs(xr + b * bs, qw, static_cast<BlockIQ4_XS*>(out) + r * nb + b);
      }
    }
  }
}

void dequantize_row_iq4(DType t, const void* in, float* out, int64_t n) {
  switch (t) {
    case DType::IQ4_NL: {
      if (n % kQK4_NL != 0) fail("dequantize: row length {} is not a multiple of 32", n);
      const auto* b = static_cast<const BlockIQ4_NL*>(in);
      for (int64_t i = 0; i < n / kQK4_NL; ++i) {
        dequantize_group(b[i].qs, fp16_to_fp32(b[i].d), out + i * kQK4_NL);
      }
      break;
    }
    case DType::IQ4_XS: {
      if (n % kQKIQ4_XS != 0) fail("dequantize: row length {} is not a multiple of 256", n);
      const auto* b = static_cast<const BlockIQ4_XS*>(in);
      for (int64_t i = 0; i < n / kQKIQ4_XS; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int g = 0; g < kQKIQ4_XS / kGroup; ++g) {
          const int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0xf) |
                         ((b[i].scales_h >> (2 * g)) & 3) << 4;
          dequantize_group(b[i].qs + g * (kGroup / 2), d * static_cast<float>(ls - 32),
                           out + i * kQKIQ4_XS + g * kGroup);
        }
      }
      break;
    }
    default:
      fail("dequantize: {} is not an IQ4 format", dtype_name(t));
  }
}

}  // namespace kvasir
