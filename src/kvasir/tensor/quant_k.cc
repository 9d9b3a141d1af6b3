// Contraction off: ggml-base (where ggml's quantizers live) is built for the plain x86-64
// baseline, without FMA, so every a * b + c below must stay two roundings to be bit-identical.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/tensor/quant_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvasir/tensor/quant_search.h"
#include "kvasir/util/error.h"

// The searches below follow ggml's arithmetic operation for operation (same operand order, same
// int -> float conversion points, float accumulators summed in index order): that is what makes
// the output bytes identical, so resist "simplifying" an expression such as w * x * l.

namespace kvasir {
namespace {

using quant_detail::fit_affine;
using quant_detail::fit_symmetric;
using quant_detail::kGroupMaxEps;
using quant_detail::nearest_int;
using quant_detail::signed_absmax;
using quant_detail::weight_by_importance;

inline int clamp_int(int v, int lo, int hi) {
  return std::max(lo, std::min(hi, v));
}

// ---- sub-block fits used by k-quants only (the shared ones are in quant_search.h) ----

// Q3_K's reference sub-block fit (ggml's make_q3_quants with do_rmse): absmax codes in
// [-nmax, nmax), then up to five passes moving single codes to their least-squares optimum
// (weights x^2) while that improves the fit. L gets l + nmax (or 0 for an all-zero group).
float fit_q3(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_absmax(n, x, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    bool changed = false;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0.0f)) continue;
      float sl2 = suml2 - w * li * li;
      const int nl = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      const float fl = static_cast<float>(nl);
      slx += w * x[i] * fl;
      sl2 += w * fl * fl;
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        changed = true;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Fit of non-negative values (sub-block scales or mins) to codes in [0, nmax] with weights qw
// (ggml's make_qp_quants): best of nine inverse scales around nmax / max by weighted squared
// error, then up to five passes of single-code least-squares moves. Codes are stored as uint8
// exactly as ggml stores its ints (so even out-of-range ones wrap the same way).
float fit_positive(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0.0f;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1.0f / iscale;
  float best_mse = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int step = -4; step <= 4; ++step) {
    if (step == 0) continue;
    const float iscale_s = (0.1f * static_cast<float>(step) + static_cast<float>(nmax)) / max;
    const float scale_s = 1.0f / iscale_s;
    float mse = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_s * x[i]));
      const float diff = x[i] - scale_s * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_s;
    }
  }
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    const float fl = static_cast<float>(l);
    sumlx += qw[i] * x[i] * fl;
    suml2 += qw[i] * fl * fl;
  }
  for (int pass = 0; pass < 5; ++pass) {
    bool changed = false;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (!(slx > 0.0f && sl2 > 0.0f)) continue;
      const int nl = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (nl == static_cast<int>(L[i])) continue;
      const float fl = static_cast<float>(nl);
      slx += w * x[i] * fl;
      sl2 += w * fl * fl;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<uint8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ---- bit packing shared by several formats ----

// Four 2-bit codes per byte: byte 32*h + l holds codes 128*h + 32*k + l at bits 2k (Q2_K, Q3_K).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < kQK_K / 128; ++h) {
    const uint8_t* c = L + 128 * h;
    for (int l = 0; l < 32; ++l)
      qs[32 * h + l] =
          static_cast<uint8_t>(c[l] | (c[l + 32] << 2) | (c[l + 64] << 4) | (c[l + 96] << 6));
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K scales[12] array.
inline void get_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Stores sub-block j's codes into scales[12]; the j < 4 entries must be written first (the upper
// four OR their top bits into them). Values are written unmasked, as ggml does.
inline void put_scale_min(int j, uint8_t ls, uint8_t lm, uint8_t* s) {
  if (j < 4) {
    s[j] = ls;
    s[j + 4] = lm;
  } else {
    s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    s[j - 4] = static_cast<uint8_t>(s[j - 4] | ((ls >> 4) << 6));
    s[j] = static_cast<uint8_t>(s[j] | ((lm >> 4) << 6));
  }
}

// Q3_K's sixteen 6-bit scales (code l in 0..63 for sub-block j).
inline void q3_put_scale(int j, int l, uint8_t* s) {
  if (j < 8) {
    s[j] = static_cast<uint8_t>(l & 0xF);
  } else {
    s[j - 8] = static_cast<uint8_t>(s[j - 8] | ((l & 0xF) << 4));
  }
  l >>= 4;
  s[j % 4 + 8] = static_cast<uint8_t>(s[j % 4 + 8] | (l << (2 * (j / 4))));
}
inline int q3_get_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  return (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

// ---- Q2_K ----

// Requantizes with the block's rounded scales and mins, then packs (both Q2_K quantizers).
void q2k_finish(const float* x, uint8_t* L, BlockQ2_K* b) {
  const float d_all = fp16_to_fp32(b->d);
  const float m_all = fp16_to_fp32(b->dmin);
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = d_all * static_cast<float>(b->scales[j] & 0xF);
    if (d == 0.0f) continue;
    const float dm = m_all * static_cast<float>(b->scales[j] >> 4);
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
  }
  pack_2bit(L, b->qs);
}

void quantize_block_q2_k_ref(const float* x, BlockQ2_K* b) {
  uint8_t L[kQK_K], Laux[16];
  float w[16], scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < 16; ++i) w[i] = std::fabs(x[16 * j + i]);
    scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  constexpr float kLevels = 15.0f;
  if (max_scale > 0.0f) {
    const float iscale = kLevels / max_scale;
    for (int j = 0; j < 16; ++j)
      b->scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    b->d = fp32_to_fp16(max_scale / kLevels);
  } else {
    std::memset(b->scales, 0, sizeof b->scales);
    b->d = fp32_to_fp16(0.0f);
  }
  if (max_min > 0.0f) {
    const float iscale = kLevels / max_min;
    for (int j = 0; j < 16; ++j)
      b->scales[j] = static_cast<uint8_t>(b->scales[j] | (nearest_int(iscale * mins[j]) << 4));
    b->dmin = fp32_to_fp16(max_min / kLevels);
  } else {
    b->dmin = fp32_to_fp16(0.0f);
  }
  q2k_finish(x, L, b);
}

void quantize_block_q2_k_imp(const float* x, const float* qw, BlockQ2_K* b) {
  uint8_t L[kQK_K], Laux[16], Ls[16], Lm[16];
  float w[16], scales[16], mins[16], sw[16];
  float sumx2 = 0.0f;
  for (int i = 0; i < kQK_K; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = sumx2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    const float* xs = x + 16 * j;
    weight_by_importance(16, xs, qw + 16 * j, sigma2, w);
    sw[j] = 0.0f;
    for (int i = 0; i < 16; ++i) sw[j] += w[i];
    scales[j] = fit_affine(16, 3, xs, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
  }
  const float dm = fit_positive(16, 15, scales, Ls, sw);
  const float mm = fit_positive(16, 15, mins, Lm, sw);
  b->d = fp32_to_fp16(dm);
  b->dmin = fp32_to_fp16(mm);
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
  q2k_finish(x, L, b);
}

void quantize_block_q2_k(const float* x, const float* qw, BlockQ2_K* b) {
  if (qw)
    quantize_block_q2_k_imp(x, qw, b);
  else
    quantize_block_q2_k_ref(x, b);
}

void dequantize_block_q2_k(const BlockQ2_K* b, float* y) {
  const float d = fp16_to_fp32(b->d);
  const float dmin = fp16_to_fp32(b->dmin);
  // Sub-block s = 8h + 2k + p covers weights 128h + 32k + 16p + l: bits 2k of qs[32h + 16p + l].
  for (int s = 0; s < 16; ++s) {
    const int h = s / 8, k = (s / 2) % 4, p = s % 2;
    const uint8_t sc = b->scales[s];
    const float dl = d * static_cast<float>(sc & 0xF);
    const float ml = dmin * static_cast<float>(sc >> 4);
    const uint8_t* q = b->qs + 32 * h + 16 * p;
    for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> (2 * k)) & 3) - ml;
  }
}

// ---- Q3_K ----

// Requantizes with the block's rounded scales, then packs high bits and low 2 bits.
void q3k_finish(const float* x, int8_t* L, BlockQ3_K* b) {
  const float d_all = fp16_to_fp32(b->d);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(q3_get_scale(j, b->scales));
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
  }
  std::memset(b->hmask, 0, sizeof b->hmask);
  uint8_t low[kQK_K];
  for (int j = 0; j < kQK_K; ++j) {
    int v = L[j];
    if (v > 3) {
      b->hmask[j % 32] = static_cast<uint8_t>(b->hmask[j % 32] | (1 << (j / 32)));
      v -= 4;
    }
    low[j] = static_cast<uint8_t>(v);
  }
  pack_2bit(low, b->qs);
}

void quantize_block_q3_k_ref(const float* x, BlockQ3_K* b) {
  int8_t L[kQK_K];
  float scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
  const float max_scale = signed_absmax(16, scales);
  std::memset(b->scales, 0, sizeof b->scales);
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      // ggml keeps the rounded value in an int8 before clamping; mirror the narrowing.
      const int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      q3_put_scale(j, clamp_int(l, -32, 31) + 32, b->scales);
    }
    b->d = fp32_to_fp16(1.0f / iscale);
  } else {
    b->d = fp32_to_fp16(0.0f);
  }
  q3k_finish(x, L, b);
}

void quantize_block_q3_k_imp(const float* x, const float* qw, BlockQ3_K* b) {
  int8_t L[kQK_K], Ls[16];
  float w[16], scales[16], sw[16];
  float sumx2 = 0.0f;
  for (int i = 0; i < kQK_K; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = 2 * sumx2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    const float* xs = x + 16 * j;
    weight_by_importance(16, xs, qw + 16 * j, sigma2, w);
    float sumw = 0.0f;
    for (int i = 0; i < 16; ++i) sumw += w[i];
    sw[j] = sumw;
    scales[j] = fit_symmetric(16, 4, xs, L + 16 * j, w);
  }
  std::memset(b->scales, 0, sizeof b->scales);
  const float d_block = fit_symmetric(16, 32, scales, Ls, sw);
  for (int j = 0; j < 16; ++j) q3_put_scale(j, Ls[j], b->scales);
  b->d = fp32_to_fp16(d_block);
  q3k_finish(x, L, b);
}

void quantize_block_q3_k(const float* x, const float* qw, BlockQ3_K* b) {
  if (qw)
    quantize_block_q3_k_imp(x, qw, b);
  else
    quantize_block_q3_k_ref(x, b);
}

void dequantize_block_q3_k(const BlockQ3_K* b, float* y) {
  const float d_all = fp16_to_fp32(b->d);
  // Sub-block s = 8h + 2k + p: weights 128h + 32k + 16p + l, low bits 2k of qs[32h + 16p + l],
  // high bit 4h + k of hmask[16p + l] (a clear bit means code - 4).
  for (int s = 0; s < 16; ++s) {
    const int h = s / 8, k = (s / 2) % 4, p = s % 2;
    const float dl = d_all * static_cast<float>(q3_get_scale(s, b->scales));
    const uint8_t* q = b->qs + 32 * h + 16 * p;
    const uint8_t* hm = b->hmask + 16 * p;
    const int bit = 4 * h + k;
    for (int l = 0; l < 16; ++l) {
      const int v = ((q[l] >> (2 * k)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
      *y++ = dl * static_cast<float>(v);
    }
  }
}

// ---- Q4_K and Q5_K (same scales, 4 or 5 bit codes) ----

// Requantizes the codes (0..nmax) of the 8 sub-blocks with the block's rounded scales and mins.
void requantize_k4(const float* x, uint16_t d16, uint16_t dmin16, const uint8_t* s, int nmax,
                   uint8_t* L) {
  const float d_all = fp16_to_fp32(d16);
  const float m_all = fp16_to_fp32(dmin16);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min(j, s, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = m_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] =
          static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
  }
}

// The reference (no importance) Q4_K / Q5_K scale search; fills scales[12], d, dmin.
void scales_k4_ref(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                   uint8_t* s, uint16_t* d16, uint16_t* dmin16) {
  uint8_t Laux[32];
  float w[32], scales[8], mins[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xs[i]);
    scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    // ggml narrows the rounded value to uint8 first, then caps it at 63.
    const auto ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    const auto lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    put_scale_min(j, std::min<uint8_t>(63, ls), std::min<uint8_t>(63, lm), s);
  }
  *d16 = fp32_to_fp16(max_scale / 63.0f);
  *dmin16 = fp32_to_fp16(max_min / 63.0f);
}

// The importance-weighted Q4_K / Q5_K scale search. ggml caps the scale codes at 63 for Q5_K
// but not for Q4_K (cap63); they only differ for codes that wrapped, which needs negative fits.
void scales_k4_imp(const float* x, const float* qw, int nmax, bool cap63, uint8_t* L, uint8_t* s,
                   uint16_t* d16, uint16_t* dmin16) {
  uint8_t Laux[32], Ls[8], Lm[8];
  float w[32], scales[8], mins[8], sw[8];
  float sum_x2 = 0.0f;
  for (int i = 0; i < kQK_K; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    weight_by_importance(32, xs, qw + 32 * j, sigma2, w);
    float sumw = 0.0f;
    for (int i = 0; i < 32; ++i) sumw += w[i];
    sw[j] = sumw;
    scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
  }
  const float d_block = fit_positive(8, 63, scales, Ls, sw);
  const float m_block = fit_positive(8, 63, mins, Lm, sw);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = Ls[j], lm = Lm[j];
    if (cap63) {
      ls = std::min<uint8_t>(63, ls);
      lm = std::min<uint8_t>(63, lm);
    }
    put_scale_min(j, ls, lm, s);
  }
  *d16 = fp32_to_fp16(d_block);
  *dmin16 = fp32_to_fp16(m_block);
}

void pack_q4_k(const uint8_t* L, BlockQ4_K* b) {
  for (int h = 0; h < kQK_K / 64; ++h) {
    const uint8_t* c = L + 64 * h;
    for (int l = 0; l < 32; ++l) b->qs[32 * h + l] = static_cast<uint8_t>(c[l] | (c[l + 32] << 4));
  }
}

void pack_q5_k(const uint8_t* L, BlockQ5_K* b) {
  std::memset(b->qh, 0, sizeof b->qh);
  for (int h = 0; h < kQK_K / 64; ++h) {
    const uint8_t* c = L + 64 * h;
    for (int l = 0; l < 32; ++l) {
      int lo = c[l], hi = c[l + 32];
      int bits = 0;
      if (lo > 15) {
        lo -= 16;
        bits |= 1;
      }
      if (hi > 15) {
        hi -= 16;
        bits |= 2;
      }
      b->qh[l] = static_cast<uint8_t>(b->qh[l] | (bits << (2 * h)));
      b->qs[32 * h + l] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_block_q4_k(const float* x, const float* qw, BlockQ4_K* b) {
  uint8_t L[kQK_K];
  if (qw)
    scales_k4_imp(x, qw, 15, false, L, b->scales, &b->d, &b->dmin);
  else
    scales_k4_ref(x, 15, -1.0f, 0.1f, 20, L, b->scales, &b->d, &b->dmin);
  requantize_k4(x, b->d, b->dmin, b->scales, 15, L);
  pack_q4_k(L, b);
}

void quantize_block_q5_k(const float* x, const float* qw, BlockQ5_K* b) {
  uint8_t L[kQK_K];
  if (qw)
    scales_k4_imp(x, qw, 31, true, L, b->scales, &b->d, &b->dmin);
  else
    scales_k4_ref(x, 31, -0.5f, 0.1f, 15, L, b->scales, &b->d, &b->dmin);
  requantize_k4(x, b->d, b->dmin, b->scales, 31, L);
  pack_q5_k(L, b);
}

void dequantize_block_q4_k(const BlockQ4_K* b, float* y) {
  const float d = fp16_to_fp32(b->d);
  const float dmin = fp16_to_fp32(b->dmin);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    get_scale_min(s, b->scales, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const uint8_t* q = b->qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
  }
}

void dequantize_block_q5_k(const BlockQ5_K* b, float* y) {
  const float d = fp16_to_fp32(b->d);
  const float dmin = fp16_to_fp32(b->dmin);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    get_scale_min(s, b->scales, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const uint8_t* q = b->qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) + (((b->qh[l] >> s) & 1) ? 16 : 0);
      *y++ = dl * static_cast<float>(v) - ml;
    }
  }
}

// ---- Q6_K ----

// ggml's reference and importance quantizers differ only in the sub-block fit's weights: x^2 or
// the raw importance (the _impl does not fold the row's sigma^2 in for Q6_K).
void quantize_block_q6_k(const float* x, const float* qw, BlockQ6_K* b) {
  int8_t L[kQK_K];
  float scales[16];
  for (int j = 0; j < 16; ++j)
    scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j, qw ? qw + 16 * j : nullptr);
  float max_abs;
  const float max_scale = signed_absmax(16, scales, &max_abs);
  if (max_abs < kGroupMaxEps) {
    std::memset(b, 0, sizeof *b);
    b->d = fp32_to_fp16(0.0f);
    return;
  }
  const float iscale = -128.0f / max_scale;
  b->d = fp32_to_fp16(1.0f / iscale);
  for (int j = 0; j < 16; ++j)
    b->scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
  const float d_all = fp16_to_fp32(b->d);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(b->scales[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
  }
  for (int h = 0; h < kQK_K / 128; ++h) {
    const int8_t* c = L + 128 * h;
    uint8_t* ql = b->ql + 64 * h;
    uint8_t* qh = b->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int c0 = c[l], c1 = c[l + 32], c2 = c[l + 64], c3 = c[l + 96];
      ql[l] = static_cast<uint8_t>((c0 & 0xF) | ((c2 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((c1 & 0xF) | ((c3 & 0xF) << 4));
      qh[l] =
          static_cast<uint8_t>((c0 >> 4) | ((c1 >> 4) << 2) | ((c2 >> 4) << 4) | ((c3 >> 4) << 6));
    }
  }
}

void dequantize_block_q6_k(const BlockQ6_K* b, float* y) {
  const float d = fp16_to_fp32(b->d);
  for (int h = 0; h < kQK_K / 128; ++h) {
    const uint8_t* ql = b->ql + 64 * h;
    const uint8_t* qh = b->qh + 32 * h;
    const int8_t* sc = b->scales + 8 * h;
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q0);
      out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
      out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
      out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
    }
  }
}

// ---- row drivers ----

template <typename Block, typename F>
void for_each_block(const float* x, void* out, int64_t rows, int64_t cols, F&& f) {
  const int64_t nb = cols / kQK_K;
  auto* o = static_cast<Block*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < nb; ++i) f(x + r * cols + i * kQK_K, i, o + r * nb + i);
}

template <typename Block, typename F>
void dequantize_blocks(const void* in, float* out, int64_t n, F&& f) {
  const auto* b = static_cast<const Block*>(in);
  for (int64_t i = 0; i < n / kQK_K; ++i) f(b + i, out + i * kQK_K);
}

}  // namespace

void quantize_rows_k(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                     const float* importance) {
  if (cols % kQK_K != 0)
    fail("quantize {}: row length {} is not a multiple of 256", dtype_name(t), cols);
  // Importance (when given) is per column: block i of every row uses importance[256 i ...].
  auto qw = [importance](int64_t i) { return importance ? importance + i * kQK_K : nullptr; };
  switch (t) {
    case DType::Q2_K:
      return for_each_block<BlockQ2_K>(
          x, out, rows, cols,
          [&](const float* xb, int64_t i, auto* b) { quantize_block_q2_k(xb, qw(i), b); });
    case DType::Q3_K:
      return for_each_block<BlockQ3_K>(
          x, out, rows, cols,
          [&](const float* xb, int64_t i, auto* b) { quantize_block_q3_k(xb, qw(i), b); });
    case DType::Q4_K:
      return for_each_block<BlockQ4_K>(
          x, out, rows, cols,
          [&](const float* xb, int64_t i, auto* b) { quantize_block_q4_k(xb, qw(i), b); });
    case DType::Q5_K:
      return for_each_block<BlockQ5_K>(
          x, out, rows, cols,
          [&](const float* xb, int64_t i, auto* b) { quantize_block_q5_k(xb, qw(i), b); });
    case DType::Q6_K:
      return for_each_block<BlockQ6_K>(
          x, out, rows, cols,
          [&](const float* xb, int64_t i, auto* b) { quantize_block_q6_k(xb, qw(i), b); });
    default:
      fail("quantize: {} is not a k-quant format", dtype_name(t));
  }
}

void dequantize_row_k(DType t, const void* in, float* out, int64_t n) {
  if (n % kQK_K != 0)
    fail("dequantize {}: row length {} is not a multiple of 256", dtype_name(t), n);
  switch (t) {
    case DType::Q2_K:
      return dequantize_blocks<BlockQ2_K>(in, out, n, dequantize_block_q2_k);
    case DType::Q3_K:
      return dequantize_blocks<BlockQ3_K>(in, out, n, dequantize_block_q3_k);
    case DType::Q4_K:
      return dequantize_blocks<BlockQ4_K>(in, out, n, dequantize_block_q4_k);
    case DType::Q5_K:
      return dequantize_blocks<BlockQ5_K>(in, out, n, dequantize_block_q5_k);
    case DType::Q6_K:
      return dequantize_blocks<BlockQ6_K>(in, out, n, dequantize_block_q6_k);
    default:
      fail("dequantize: {} is not a k-quant format", dtype_name(t));
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* out, int64_t n) {
  if (n % kQK_K != 0) fail("quantize q8_k: row length {} is not a multiple of 256", n);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    BlockQ8_K& b = out[i];
    float amax;
    const float max = signed_absmax(kQK_K, x, &amax);
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof b.qs);
      // ggml leaves bsums as they were here; zero them so the block is fully defined (the sums
      // of zero codes are zero, which is what any consumer computes from qs anyway).
      std::memset(b.bsums, 0, sizeof b.bsums);
      continue;
    }
    // -127 rather than -128: the code range stays symmetric (ggml's choice, kept for its kernels).
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j)
      b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
      b.bsums[g] = static_cast<int16_t>(sum);
    }
    b.d = 1.0f / iscale;
  }
}

}  // namespace kvasir
