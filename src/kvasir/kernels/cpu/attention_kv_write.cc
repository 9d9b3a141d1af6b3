// kv_write(): stores new K/V rows into their paged-cache slots (contract in attention.h).
// Keys go through their transform ((k - shift(p)) / scale, kv/key_transform.h) and then their
// rotation (kv_rotate_key) first.
//
// F16 uses the F16C conversion (round to nearest even) on AVX2/AVX-512. It matches
// kvasir::fp32_to_fp16 bit for bit except for NaN payloads, so NaN lanes are first replaced by a
// quiet NaN of the same sign whose conversion is exactly fp32_to_fp16's 0x7e00 | sign. The scalar
// target (no F16C) calls fp32_to_fp16 directly.
//
// The quantized formats (tensor/kv_quant.h) are encoded here with 8-lane float vectors on AVX2 and
// AVX-512 and write exactly the reference quantizer's bytes (kv_quantize_row; the tests compare
// them on every target): every step is an exact IEEE operation (division by the row scale,
// round-to-nearest-even, fp8 rounding done on the float's bits), and int4's grid search sums its
// squared errors in the lane order kv_int4_sq_error defines. The scalar parts (row scales, the
// int4 grids) are the reference's own. Other targets, and int4 rows whose head size is not a
// multiple of 8, call the reference. BM_KVWrite (bench/micro/attention_bench.cc) measures them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvasir/kernels/cpu/attention.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/util/error.h"

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/attention_kv_write.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void F32ToF16Row(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t n) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const auto sign = hn::BitCast(df, hn::Set(du, 0x80000000u));
  const auto qnan = hn::BitCast(df, hn::Set(du, 0x7fc00000u));
  auto* out = reinterpret_cast<hwy::float16_t*>(dst);
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(df, src + i);
    v = hn::IfThenElse(hn::IsNaN(v), hn::Or(hn::And(v, sign), qnan), v);
    hn::StoreU(hn::DemoteTo(dh, v), dh, out + i);
  }
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128  // the SIMD encoders
// Eight float lanes on every SIMD target: int4's error sums must follow kv_int4_sq_error's lanes.
using D8 = hn::CappedTag<float, 8>;

// Stores an int8/fp8 row's fp16 scale in its meta and returns its value; 0 when the row cannot be
// scaled (a NaN or infinity in it, or all zeros), its codes then all 0 as the reference writes.
float RowScale(KVDType t, const float* HWY_RESTRICT x, int dim, uint8_t* HWY_RESTRICT c,
               uint8_t* meta) {
  const uint16_t sh = kv_row_scale(t, x, dim);
  std::memcpy(meta, &sh, 2);
  const float s = fp16_to_fp32(sh);
  if (s > 0.0f && std::isfinite(s)) return s;
  std::memset(c, 0, static_cast<size_t>(dim));
  return 0.0f;
}

// int8: c = clamp(nearbyint(x / s), -127, 127).
void Int8Row(const float* HWY_RESTRICT x, int dim, int8_t* HWY_RESTRICT c, uint8_t* meta) {
  const float s = RowScale(KVDType::Int8, x, dim, reinterpret_cast<uint8_t*>(c), meta);
  if (s == 0.0f) return;
  const D8 d;
  const hn::RebindToSigned<D8> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const auto vs = hn::Set(d, s);
  const auto lo = hn::Set(d, -127.0f);
  const auto hi = hn::Set(d, 127.0f);
  int i = 0;
  for (; i + 8 <= dim; i += 8) {
    const auto q = hn::Min(hn::Max(hn::Round(hn::Div(hn::LoadU(d, x + i), vs)), lo), hi);
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, q)), d8, c + i);
  }
  for (; i < dim; ++i)
    c[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f));
}

// fp8 with M mantissa bits and exponent bias B: y = x / s rounded to nearest even on the float's
// bits (binades from the smallest normal up; below it, in multiples of the subnormal quantum
// 2^(1 - B - M), an exact scaling), saturated to the largest finite code, with y's sign.
template <int M, int B, uint32_t kMaxCode>
void Fp8Row(KVDType t, const float* HWY_RESTRICT x, int dim, uint8_t* HWY_RESTRICT c,
            uint8_t* meta) {
  const float s = RowScale(t, x, dim, c, meta);
  if (s == 0.0f) return;
  const D8 d;
  const hn::RebindToUnsigned<D8> du;
  const hn::RebindToSigned<D8> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  constexpr int kDrop = 23 - M;  // float mantissa bits below fp8's
  const auto vs = hn::Set(d, s);
  const auto min_normal = hn::Set(d, std::ldexp(1.0f, 1 - B));
  const auto to_sub = hn::Set(d, std::ldexp(1.0f, B - 1 + M));
  const auto half_m1 = hn::Set(du, (1u << (kDrop - 1)) - 1);
  const auto one = hn::Set(du, 1u);
  const auto rebias = hn::Set(du, static_cast<uint32_t>(127 - B) << M);
  const auto max_code = hn::Set(du, kMaxCode);
  const auto sign_bit = hn::Set(du, 0x80u);
  int i = 0;
  for (; i + 8 <= dim; i += 8) {
    const auto y = hn::Div(hn::LoadU(d, x + i), vs);
    const auto sign = hn::And(hn::ShiftRight<24>(hn::BitCast(du, y)), sign_bit);
    const auto a = hn::Abs(y);
    const auto ab = hn::BitCast(du, a);
    const auto lsb = hn::And(hn::ShiftRight<kDrop>(ab), one);
    const auto normal = hn::Sub(hn::ShiftRight<kDrop>(hn::Add(hn::Add(ab, half_m1), lsb)), rebias);
    const auto sub = hn::BitCast(du, hn::ConvertTo(di, hn::Round(hn::Mul(a, to_sub))));
    const auto code =
        hn::Min(hn::IfThenElse(hn::RebindMask(du, hn::Lt(a, min_normal)), sub, normal), max_code);
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, hn::Or(code, sign))), d8, c + i);
  }
  for (; i < dim; ++i) {
    const float y = x[i] / s;
    c[i] = t == KVDType::FP8E4M3 ? fp32_to_e4m3(y) : fp32_to_e5m2(y);
  }
}

// The int4 codes of g values (g a multiple of 8) under a grid, and their squared error.
struct Int4Lanes {
  hn::Vec<D8> lo, inv, unit, zero, step, top;
  explicit Int4Lanes(const KVInt4Grid& gr)
      : lo(hn::Set(D8(), gr.lo)),
        inv(hn::Set(D8(), gr.inv)),
        unit(hn::Set(D8(), gr.unit)),
        zero(hn::Set(D8(), static_cast<float>(gr.zero))),
        step(hn::Set(D8(), gr.step)),
        top(hn::Set(D8(), 15.0f)) {}
  hn::Vec<D8> code(hn::Vec<D8> v) const {
    return hn::Min(hn::Max(hn::Round(hn::Mul(hn::Sub(v, lo), inv)), hn::Zero(D8())), top);
  }
};

float Int4SqError(const float* HWY_RESTRICT x, int g, const KVInt4Grid& gr) {
  if (gr.s == 0.0f) return 0.0f;
  const D8 d;
  const Int4Lanes L(gr);
  auto acc = hn::Zero(d);
  for (int i = 0; i < g; i += 8) {
    const auto v = hn::LoadU(d, x + i);
    const auto e = hn::Sub(v, hn::Mul(hn::Sub(hn::Mul(L.unit, L.code(v)), L.zero), L.step));
    acc = hn::Add(acc, hn::Mul(e, e));
  }
  HWY_ALIGN float lane[8];
  hn::Store(acc, d, lane);
  float sum = 0.0f;
  for (float v : lane) sum += v;
  return sum;
}

void Int4Group(const float* HWY_RESTRICT x, int g, uint8_t* HWY_RESTRICT codes, uint8_t* scale,
               int8_t* zero) {
  const int half = g / 2;
  bool finite = true;
  for (int i = 0; i < g; ++i) finite &= std::isfinite(x[i]);
  if (!finite) {
    const uint16_t nan = 0x7e00;
    std::memcpy(scale, &nan, 2);
    *zero = 0;
    std::memset(codes, 0, static_cast<size_t>(half));
    return;
  }
  KVInt4Grid grids[kKVInt4MaxGrids];
  const int n = kv_int4_grids(x, g, grids);
  const KVInt4Grid& gr =
      grids[kv_int4_best_grid(grids, n, [&](const KVInt4Grid& c) { return Int4SqError(x, g, c); })];
  std::memcpy(scale, &gr.scale, 2);
  *zero = gr.zero;
  if (gr.s == 0.0f) {
    std::memset(codes, 0, static_cast<size_t>(half));
    return;
  }
  const D8 d;
  const hn::RebindToSigned<D8> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const Int4Lanes L(gr);
  HWY_ALIGN uint8_t q[32];
  for (int i = 0; i < g; i += 8)
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, L.code(hn::LoadU(d, x + i)))), d8, q + i);
  for (int j = 0; j < half; ++j) codes[j] = static_cast<uint8_t>(q[j] | q[j + half] << 4);
}

void Int4Row(const float* HWY_RESTRICT x, int dim, uint8_t* HWY_RESTRICT c, uint8_t* meta) {
  const KVRowLayout L = kv_row_layout(KVDType::Int4, dim);
  auto* zeros = reinterpret_cast<int8_t*>(meta + 2 * static_cast<size_t>(L.n_groups));
  for (int gi = 0; gi < L.n_groups; ++gi) {
    const int g0 = gi * L.group;
    const int g = std::min(L.group, dim - g0);
    Int4Group(x + g0, g, c, meta + 2 * gi, zeros + gi);
    c += g / 2;
  }
}
#endif  // SIMD encoders

// One row (token, KV head) of K or V into its tile (block, head): codes at row `offset`, then,
// for the quantized formats, its scales after the tile's block_size rows of codes.
void WriteRow(KVDType type, const float* HWY_RESTRICT src, int dim, uint8_t* tile, int bs,
              size_t offset) {
  if (type == KVDType::F16) {
    F32ToF16Row(src, reinterpret_cast<uint16_t*>(tile) + offset * dim, static_cast<size_t>(dim));
    return;
  }
  if (type == KVDType::F32) {
    float* d = reinterpret_cast<float*>(tile) + offset * dim;
    for (int i = 0; i < dim; ++i) d[i] = src[i];
    return;
  }
  const KVRowLayout L = kv_row_layout(type, dim);
  uint8_t* codes = tile + offset * L.code_bytes;
  uint8_t* meta = tile + static_cast<size_t>(bs) * L.code_bytes + offset * L.meta_bytes;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  switch (type) {
    case KVDType::Int8:
      Int8Row(src, dim, reinterpret_cast<int8_t*>(codes), meta);
      return;
    case KVDType::FP8E4M3:
      Fp8Row<3, 7, 0x7e>(type, src, dim, codes, meta);
      return;
    case KVDType::FP8E5M2:
      Fp8Row<2, 15, 0x7b>(type, src, dim, codes, meta);
      return;
    case KVDType::Int4:
      if (dim % 8 == 0) {
        Int4Row(src, dim, codes, meta);
        return;
      }
      break;
    default:
      break;
  }
#endif
  kv_quantize_row(type, src, dim, codes, meta);  // the reference quantizer (tensor/kv_quant.cc)
}

void KVWriteImpl(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
                 const int32_t* positions, int64_t n_tokens) {
  const int dim = kv.head_dim;
  const size_t row = static_cast<size_t>(kv.n_kv_heads) * static_cast<size_t>(dim);
  const size_t k_tile = kv.k_tile_bytes();
  const size_t v_tile = kv.v_tile_bytes();
  const bool rotate = kv_rotates_keys(kv.k_type);
  const bool transform = kv.k_shift != nullptr;
  // Scratch for one transformed key row, per thread, grown once: nothing is allocated per step.
  static thread_local std::vector<float> key;
  if ((rotate || transform) && key.size() < static_cast<size_t>(dim))
    key.resize(static_cast<size_t>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const size_t block = static_cast<size_t>(slots[t] / kv.block_size);
    const size_t offset = static_cast<size_t>(slots[t] % kv.block_size);
    for (int g = 0; g < kv.n_kv_heads; ++g) {
      const size_t tile = block * static_cast<size_t>(kv.n_kv_heads) + static_cast<size_t>(g);
      const size_t src = static_cast<size_t>(t) * row + static_cast<size_t>(g) * dim;
      const float* krow = k + src;
      if (transform) {  // the cache's key transform (kv/key_transform.h)
        const float* m = kv.k_shift + static_cast<size_t>(g) * dim;
        const float* sc = kv.k_scale ? kv.k_scale + static_cast<size_t>(g) * dim : nullptr;
        for (int d = 0; d < dim; ++d) key[static_cast<size_t>(d)] = krow[d] - m[d];
        if (kv.k_turn) {  // the turning part of the shift at this row's position
          const size_t p = static_cast<size_t>(positions[t]);
          const KeyTurnPair* tp = kv.k_turn + static_cast<size_t>(g) * kv.k_turn_pairs;
          for (int i = 0; i < kv.k_turn_pairs; ++i) {
            const float c = tp[i].cos[p], sn = tp[i].sin[p];
            key[static_cast<size_t>(tp[i].a)] -= tp[i].mu_a * c - tp[i].mu_b * sn;
            key[static_cast<size_t>(tp[i].b)] -= tp[i].mu_a * sn + tp[i].mu_b * c;
          }
        }
        if (sc)
          for (int d = 0; d < dim; ++d) key[static_cast<size_t>(d)] /= sc[d];
        krow = key.data();
      }
      if (rotate) {  // quantized keys are stored rotated (tensor/kv_quant.h)
        if (krow != key.data()) std::copy(krow, krow + dim, key.begin());
        kv_rotate_key(key.data(), dim);
        krow = key.data();
      }
      WriteRow(kv.k_type, krow, dim, static_cast<uint8_t*>(kv.k) + tile * k_tile, kv.block_size,
               offset);
      WriteRow(kv.v_type, v + src, dim, static_cast<uint8_t*>(kv.v) + tile * v_tile, kv.block_size,
               offset);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvasir::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvasir::cpu {

HWY_EXPORT(KVWriteImpl);

void kv_write(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
              const int32_t* positions, int64_t n_tokens) {
  if (kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.n_blocks < 0) {
    fail("kv_write: bad KV layout (block_size {}, n_kv_heads {}, head_dim {}, n_blocks {})",
         kv.block_size, kv.n_kv_heads, kv.head_dim, kv.n_blocks);
  }
  if (n_tokens <= 0) return;
  if (!k || !v || !slots || !kv.k || !kv.v) fail("kv_write: null K/V rows, slots or storage");
  const int64_t n_slots = kv.n_blocks * kv.block_size;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0 || slots[t] >= n_slots) {
      fail("kv_write: token {} has slot {}, outside the cache's {} slots ({} blocks of {})", t,
           slots[t], n_slots, kv.n_blocks, kv.block_size);
    }
  }
  if (kv.k_turn) {
    if (!kv.k_shift) fail("kv_write: a key transform with turning terms needs its constant shift");
    if (!positions) fail("kv_write: the key transform turns with the position: positions needed");
    for (int64_t t = 0; t < n_tokens; ++t) {
      if (positions[t] < 0 || positions[t] >= kv.k_turn_positions) {
        fail("kv_write: token {} has position {}, outside the key transform's {} positions", t,
             positions[t], kv.k_turn_positions);
      }
    }
  }
  HWY_DYNAMIC_DISPATCH(KVWriteImpl)(kv, k, v, slots, positions, n_tokens);
}

}  // namespace kvasir::cpu
#endif  // HWY_ONCE
