// Contraction off: ggml's libggml-base (where these quantizers live) is built for the x86-64
// baseline, without FMA, so every a * b + c below must stay two roundings to give ggml's bits.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/tensor/quant_legacy.h"

#include <algorithm>
#include <cfloat>

#include "kvasir/tensor/quant_search.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

using quant_detail::fit_affine;
using quant_detail::fit_symmetric;
using quant_detail::signed_absmax;
using quant_detail::weight_by_importance;

constexpr int kQK = 32;  // every legacy format has 32 weights per block

// C's float -> integer conversion as x86-64 performs it (cvttss2si): truncation, and INT32_MIN for
// NaN or out-of-range values. ggml's (int8_t)v / (uint8_t)v casts keep the low byte of this.
inline int32_t trunc_i32(float v) {
  if (v >= -2147483648.0f && v < 2147483648.0f) return static_cast<int32_t>(v);
  return INT32_MIN;
}
inline int8_t trunc_i8(float v) {
  return static_cast<int8_t>(trunc_i32(v));
}
inline uint8_t trunc_u8(float v) {
  return static_cast<uint8_t>(trunc_i32(v));
}

// ggml's MIN(hi, (int8_t)v) stored into a uint8_t.
inline uint8_t trunc_min(float v, int hi) {
  return static_cast<uint8_t>(std::min<int>(hi, trunc_i8(v)));
}

inline void store_u32_le(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
}
inline uint32_t load_u32_le(const uint8_t* p) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(p[k]) << (8 * k);
  return v;
}

// Packs 32 codes of up to 5 bits: low nibbles into qs (weight j and j+16 share byte j), 5th bits
// into the little-endian word qh (bit j for weight j). qh may be null for 4-bit codes.
template <typename Code>
void pack_codes(const Code* q, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint32_t lo = static_cast<uint8_t>(q[j]);
    const uint32_t hi = static_cast<uint8_t>(q[j + kQK / 2]);
    qs[j] = static_cast<uint8_t>((lo & 0x0f) | (hi & 0x0f) << 4);
    high |= ((lo & 0x10u) >> 4) << j;
    high |= ((hi & 0x10u) >> 4) << (j + kQK / 2);
  }
  if (qh != nullptr) store_u32_le(qh, high);
}

// The (lowest, highest) of a block, scanning as ggml does from (FLT_MAX, -FLT_MAX).
inline void block_min_max(const float* x, float& lo, float& hi) {
  lo = FLT_MAX;
  hi = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    const float v = x[j];
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
}

// ---- round-to-nearest reference quantizers (no importance) ----

void ref_block_q4_1(const float* x, BlockQ4_1* y) {
  float lo, hi;
  block_min_max(x, lo, hi);
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  y->m = fp32_to_fp16(lo);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_min((x[j] - lo) * id + 0.5f, 15);
  pack_codes(q, y->qs, nullptr);
}

void ref_block_q5_0(const float* x, BlockQ5_0* y) {
  const float max = signed_absmax(kQK, x);
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_min(x[j] * id + 16.5f, 31);
  pack_codes(q, y->qs, y->qh);
}

void ref_block_q5_1(const float* x, BlockQ5_1* y) {
  float lo, hi;
  block_min_max(x, lo, hi);
  const float d = (hi - lo) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  y->m = fp32_to_fp16(lo);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_u8((x[j] - lo) * id + 0.5f);
  pack_codes(q, y->qs, y->qh);
}

// ---- importance-weighted quantizers (ggml's quantize_row_q4_0_impl ... q5_1_impl) ----

// The row's mean square, summed in column order.
float mean_square(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s / static_cast<float>(n);
}

// Packs a block's codes, with their fifth bits where the format has them (Q5_0, Q5_1).
template <typename Block, typename Code>
void pack_block(const Code* L, Block* y) {
  if constexpr (requires { y->qh; }) {
    pack_codes(L, y->qs, y->qh);
  } else {
    pack_codes(L, y->qs, nullptr);
  }
}

// Q4_0 (nmax 8) and Q5_0 (nmax 16): each block's symmetric fit, codes L - nmax.
template <typename Block>
void weighted_row_sym(int nmax, const float* x, Block* y, int64_t n, const float* importance) {
  const float sigma2 = mean_square(x, n);
  float w[kQK];
  int8_t L[kQK];
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    weight_by_importance(kQK, xb, importance + b * kQK, sigma2, w);
    y[b].d = fp32_to_fp16(fit_symmetric(kQK, nmax, xb, L, w));
    pack_block(L, &y[b]);
  }
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): each block's affine fit, as ggml's make_qkx3_quants call
// (squared error, rmin -0.9, rdelta 0.05, 36 steps).
template <typename Block>
void weighted_row_asym(int nmax, const float* x, Block* y, int64_t n, const float* importance) {
  const float sigma2 = mean_square(x, n);
  float w[kQK];
  uint8_t L[kQK], Laux[kQK];
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    weight_by_importance(kQK, xb, importance + b * kQK, sigma2, w);
    float neg_min;
    const float d = fit_affine(kQK, nmax, xb, w, L, &neg_min, Laux, -0.9f, 0.05f, 36, false);
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(-neg_min);
    pack_block(L, &y[b]);
  }
}

template <typename Block, typename Fn>
void each_block(const float* x, void* out, int64_t n, Fn fn) {
  auto* y = static_cast<Block*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) fn(x + b * kQK, y + b);
}

}  // namespace

void quantize_rows_legacy(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                          const float* importance) {
  if (cols % kQK != 0) fail("quantize: row length {} is not a multiple of 32", cols);
  const size_t rb = row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    void* yr = static_cast<uint8_t*>(out) + static_cast<size_t>(r) * rb;
    switch (t) {
      case DType::Q4_0:
        if (importance != nullptr) {
          weighted_row_sym(8, xr, static_cast<BlockQ4_0*>(yr), cols, importance);
        } else {
          each_block<BlockQ4_0>(xr, yr, cols, quantize_block_q4_0);
        }
        break;
      case DType::Q4_1:
        if (importance != nullptr) {
          weighted_row_asym(15, xr, static_cast<BlockQ4_1*>(yr), cols, importance);
        } else {
          each_block<BlockQ4_1>(xr, yr, cols, ref_block_q4_1);
        }
        break;
      case DType::Q5_0:
        if (importance != nullptr) {
          weighted_row_sym(16, xr, static_cast<BlockQ5_0*>(yr), cols, importance);
        } else {
          each_block<BlockQ5_0>(xr, yr, cols, ref_block_q5_0);
        }
        break;
      case DType::Q5_1:
        if (importance != nullptr) {
          weighted_row_asym(31, xr, static_cast<BlockQ5_1*>(yr), cols, importance);
        } else {
          each_block<BlockQ5_1>(xr, yr, cols, ref_block_q5_1);
        }
        break;
      default:
        fail("quantize: {} is not a legacy block format", dtype_name(t));
    }
  }
}

void dequantize_row_legacy(DType t, const void* in, float* out, int64_t n) {
  if (n % kQK != 0) fail("dequantize: row length {} is not a multiple of 32", n);
  const int64_t nb = n / kQK;
  constexpr int kHalf = kQK / 2;
  switch (t) {
    case DType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(in);
      for (int64_t i = 0; i < nb; ++i, out += kQK) {
        const float d = fp16_to_fp32(b[i].d);
        const float m = fp16_to_fp32(b[i].m);
        for (int j = 0; j < kHalf; ++j) {
          out[j] = static_cast<float>(b[i].qs[j] & 0x0f) * d + m;
          out[j + kHalf] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
        }
      }
      break;
    }
    case DType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(in);
      for (int64_t i = 0; i < nb; ++i, out += kQK) {
        const float d = fp16_to_fp32(b[i].d);
        const uint32_t qh = load_u32_le(b[i].qh);
        for (int j = 0; j < kHalf; ++j) {
          const int q0 = static_cast<int>((b[i].qs[j] & 0x0fu) | ((qh >> j) & 1u) << 4);
          const int q1 = static_cast<int>((b[i].qs[j] >> 4) | ((qh >> (j + kHalf)) & 1u) << 4);
          out[j] = static_cast<float>(q0 - 16) * d;
          out[j + kHalf] = static_cast<float>(q1 - 16) * d;
        }
      }
      break;
    }
    case DType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(in);
      for (int64_t i = 0; i < nb; ++i, out += kQK) {
        const float d = fp16_to_fp32(b[i].d);
        const float m = fp16_to_fp32(b[i].m);
        const uint32_t qh = load_u32_le(b[i].qh);
        for (int j = 0; j < kHalf; ++j) {
          const uint32_t q0 = (b[i].qs[j] & 0x0fu) | ((qh >> j) & 1u) << 4;
          const uint32_t q1 = (b[i].qs[j] >> 4) | ((qh >> (j + kHalf)) & 1u) << 4;
          out[j] = static_cast<float>(q0) * d + m;
          out[j + kHalf] = static_cast<float>(q1) * d + m;
        }
      }
      break;
    }
    default:
      fail("dequantize: {} is not a legacy block format", dtype_name(t));
  }
}

}  // namespace kvasir
