// Flash-style paged attention on the CPU (contract in attention.h).
//
// Work item: a run of up to T consecutive query tokens of one sequence x one KV head. Its "rows"
// are the (token, query head) pairs that share that KV head: T * G rows, G = n_heads/n_kv_heads.
// Each row walks its sequence's KV one tile (= one KV block, at fixed absolute positions) at a
// time and keeps its own online-softmax state; rows share only the tile's K and V rows (converted
// to f32 once when the item has several rows or the cache is quantized, else read from the F16/F32
// cache in place; int8 and fp8 rows are dequantized with SIMD, one rounding of code x scale per
// value, exactly kv_dequantize_row's values; quantized keys are stored rotated, so the row's q
// is rotated the same way first, kv_rotate_key, after its multiplication by the key transform's
// scale where the cache has one, kv/key_transform.h). For one row and one tile:
//   1. scores of the block's keys in groups of 8: s_j = q·K_j with q pre-multiplied by `scale`,
//      as 8-lane partial sums (lane l sums the dimensions d = l mod 8, one fused multiply-add per
//      8 dimensions in increasing order, from zero) reduced by the fixed tree
//      ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)); where the key transform has turning terms, the
//      8 keys' q . turn(p) is added (TurnScores8: 2 multiply-adds per pair over the storage's
//      cos/sin table, pairs in order, from zero); keys after the row's position are -inf;
//   2. m' = max(m, max_j s_j) (a max: any order gives the same value), alpha = exp(m - m')
//      (exactly 1 when m' == m), p_j = exp(s_j - m'), l' = l * alpha + sum_j p_j with the sum
//      taken lane-wise over the block's 8-key groups in order, then the same fixed tree;
//   3. o' = o * alpha + p_0 V_0 + p_1 V_1 + ... in increasing j, lanes over head_dim, up to the
//      row's last visible key.
// Finally out = o / l.
//
// Batch invariance: every number of a row is computed by a sequence of operations that depends
// only on the row's q, its position and the KV content: nothing is reduced across rows, tiles are
// KV blocks, and a block's masked keys contribute exactly nothing (-inf to a max, +0 to a sum).
// Reading K/V in place or from the converted tile gives the same values (the conversion is exact).
// Threads take work items from an atomic counter; which thread runs an item does not matter.
// On AVX3 the scores of keys j and j + 4 (and output chunks c, c + 1) share one zmm, each half
// doing the 8-lane operations above: the same bits as AVX2 (test Attention.Avx3GivesAvx2sBits).
#include "kvasir/kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kvasir/util/error.h"

#ifndef KVASIR_ATTENTION_CC_ONCE
#define KVASIR_ATTENTION_CC_ONCE
namespace kvasir::cpu::detail {
// Query tokens [t0, t1) of sequence `seq`; max_pos is the largest of their positions.
struct AttnChunk {
  int64_t t0 = 0;
  int64_t t1 = 0;
  int32_t seq = 0;
  int32_t max_pos = 0;
};
}  // namespace kvasir::cpu::detail
#endif

// Compile AVX-512 (AVX3), AVX2 and the scalar fallback only.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using detail::AttnChunk;

inline size_t RoundUp(size_t x, size_t m) {
  return (x + m - 1) / m * m;
}

// Grow-only per-thread scratch: sized on first use, reused by every later call on this thread.
float* ThreadScratch(size_t n) {
  static thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  static thread_local size_t cap = 0;
  if (n > cap) {
    buf = hwy::AllocateAligned<float>(n);
    cap = n;
  }
  return buf.get();
}

// ---- 8-lane vectors: one AVX2 register, or eight floats on the portable target ----------------
// The per-key dot product is defined on 8 lanes whatever the target (lane l sums the dimensions
// d = l (mod 8)), so it is written against this small fixed-width interface.
#undef KVASIR_ATTN_X86
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define KVASIR_ATTN_X86 1
using V8 = __m256;
HWY_INLINE V8 Zero8() { return _mm256_setzero_ps(); }
HWY_INLINE V8 Set8(float f) { return _mm256_set1_ps(f); }
HWY_INLINE V8 Load8(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE V8 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE void Store8(V8 v, float* p) { _mm256_storeu_ps(p, v); }
HWY_INLINE V8 Fma8(V8 a, V8 b, V8 c) { return _mm256_fmadd_ps(a, b, c); }
HWY_INLINE V8 Mul8(V8 a, V8 b) { return _mm256_mul_ps(a, b); }
HWY_INLINE V8 Add8(V8 a, V8 b) { return _mm256_add_ps(a, b); }
HWY_INLINE V8 Sub8(V8 a, V8 b) { return _mm256_sub_ps(a, b); }
HWY_INLINE float Lane0(V8 v) { return _mm256_cvtss_f32(v); }
HWY_INLINE V8 Max8(V8 a, V8 b) { return _mm256_max_ps(a, b); }
HWY_INLINE V8 Exp8(V8 v) {
  const hn::FixedTag<float, 8> d;
  hn::Vec<decltype(d)> x;
  x.raw = v;
  return hn::Exp(d, x).raw;
}
// Scores of 8 keys from their 8-lane partial sums: s_j = ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7))
// of acc[j], for all eight at once (two levels of hadd, then the halves).
HWY_INLINE V8 Reduce8x8(const V8* acc) {
  const V8 h01 = _mm256_hadd_ps(acc[0], acc[1]);
  const V8 h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const V8 h45 = _mm256_hadd_ps(acc[4], acc[5]);
  const V8 h67 = _mm256_hadd_ps(acc[6], acc[7]);
  const V8 q0 = _mm256_hadd_ps(h01, h23);  // lanes 0..3: L of keys 0..3; 4..7: H of keys 0..3
  const V8 q1 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}
// The same tree for one vector.
HWY_INLINE float Reduce8(V8 v) {
  alignas(32) float a[8];
  _mm256_store_ps(a, v);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
HWY_INLINE float MaxLanes8(V8 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
// Lanes j < n keep v, the others become -inf (n may be <= 0 or >= 8).
HWY_INLINE V8 KeepFirst8(V8 v, int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));
  return _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), v, keep);
}
#else
#define KVASIR_ATTN_X86 0
struct V8 {
  float v[8];
};
HWY_INLINE V8 Zero8() { return V8{}; }
HWY_INLINE V8 Set8(float f) {
  V8 r;
  for (float& x : r.v) x = f;
  return r;
}
HWY_INLINE V8 Load8(const float* p) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = p[i];
  return r;
}
HWY_INLINE V8 Load8(const uint16_t* p) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = fp16_to_fp32(p[i]);
  return r;
}
HWY_INLINE void Store8(V8 v, float* p) {
  for (int i = 0; i < 8; ++i) p[i] = v.v[i];
}
// Not fused: the portable target has no FMA instruction (results differ from AVX2 in the last
// bits; batch invariance holds within each target).
HWY_INLINE V8 Fma8(V8 a, V8 b, V8 c) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
  return r;
}
HWY_INLINE V8 Mul8(V8 a, V8 b) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i];
  return r;
}
HWY_INLINE V8 Add8(V8 a, V8 b) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}
HWY_INLINE V8 Sub8(V8 a, V8 b) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] - b.v[i];
  return r;
}
HWY_INLINE float Lane0(V8 v) { return v.v[0]; }
HWY_INLINE V8 Max8(V8 a, V8 b) {
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = std::max(a.v[i], b.v[i]);
  return r;
}
HWY_INLINE V8 Exp8(V8 v) {
  const hn::ScalableTag<float> d;
  V8 r;
  for (int i = 0; i < 8; ++i) r.v[i] = hn::GetLane(hn::Exp(d, hn::Set(d, v.v[i])));
  return r;
}
HWY_INLINE float Reduce8(V8 v) {
  const float* a = v.v;
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
HWY_INLINE V8 Reduce8x8(const V8* acc) {
  V8 r;
  for (int j = 0; j < 8; ++j) r.v[j] = Reduce8(acc[j]);
  return r;
}
HWY_INLINE float MaxLanes8(V8 v) {
  float m = v.v[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, v.v[i]);
  return m;
}
HWY_INLINE V8 KeepFirst8(V8 v, int n) {
  for (int i = std::max(n, 0); i < 8; ++i) v.v[i] = -std::numeric_limits<float>::infinity();
  return v;
}
#endif

// Converts rows [0, rows) of one KV tile (format t, block_size rows of codes then their scales,
// kernels/views.h) to f32 rows of stride `dp` (a multiple of 8), zero-padding dim..dp. Every value
// is exactly kv_dequantize_row's: one rounding of code x scale (fp8 goes through the fp16 bit
// pattern of code / 2^8 for E4M3, an exact rewrite, and the scale x 2^8, also exact).
void TileRowsToF32(KVDType t, const uint8_t* HWY_RESTRICT tile, int rows, int dim, int bs,
                   float* HWY_RESTRICT dst, size_t dp) {
  const KVRowLayout L = kv_row_layout(t, dim);
  const uint8_t* meta = tile + static_cast<size_t>(bs) * L.code_bytes;
  for (int r = 0; r < rows; ++r) {
    float* o = dst + r * dp;
    const uint8_t* codes = tile + static_cast<size_t>(r) * L.code_bytes;
    const uint8_t* m = meta + static_cast<size_t>(r) * L.meta_bytes;
    int i = 0;
    switch (t) {
      case KVDType::F16: {
        const auto* h = reinterpret_cast<const uint16_t*>(codes);
        for (; i + 8 <= dim; i += 8) Store8(Load8(h + i), o + i);
        for (; i < dim; ++i) o[i] = fp16_to_fp32(h[i]);
        break;
      }
      case KVDType::F32: {
        const auto* f = reinterpret_cast<const float*>(codes);
        for (; i < dim; ++i) o[i] = f[i];
        break;
      }
#if KVASIR_ATTN_X86
      case KVDType::Int8: {
        uint16_t sh;
        std::memcpy(&sh, m, 2);
        const __m256 sv = _mm256_set1_ps(fp16_to_fp32(sh));
        for (; i + 8 <= dim; i += 8) {
          const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i));
          _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), sv));
        }
        if (i < dim) kv_dequantize_row(t, codes, m, dim, o);  // ragged head: the whole row
        i = dim;
        break;
      }
      case KVDType::FP8E4M3:
      case KVDType::FP8E5M2: {
        uint16_t sh;
        std::memcpy(&sh, m, 2);
        const bool e4 = t == KVDType::FP8E4M3;
        const float s = fp16_to_fp32(sh);
        const __m256 sv = _mm256_set1_ps(e4 ? s * 256.0f : s);
        const __m128i m7f = _mm_set1_epi16(0x7f);
        const __m128i m80 = _mm_set1_epi16(0x80);
        const __m128i nan = _mm_set1_epi16(0x7e00);
        for (; i + 8 <= dim; i += 8) {
          const __m128i c =
              _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
          __m128i h;
          if (e4) {
            // s eeee mmm -> fp16 s 0eeee mmm0000000 (= value / 2^8); 0x7f (NaN) -> fp16 NaN.
            const __m128i mag = _mm_and_si128(c, m7f);
            h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(c, m80), 8), _mm_slli_epi16(mag, 7));
            h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, m7f), nan));
          } else {
            h = _mm_slli_epi16(c, 8);  // E5M2 is the top byte of an fp16
          }
          _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_cvtph_ps(h), sv));
        }
        if (i < dim) kv_dequantize_row(t, codes, m, dim, o);
        i = dim;
        break;
      }
      case KVDType::Int4: {
        // Groups whose halves are whole 8-lane chunks (sizes a multiple of 16): chunk k of a
        // group of g is the low nibbles of bytes 8k.. for 8k < g/2, else the high nibbles of
        // bytes 8k - g/2..; value fl(fl(unit c - z) x (s / unit)) as kv_dequantize_row's.
        const int tail = dim % L.group;
        if (L.group % 16 != 0 || tail % 16 != 0) {
          kv_dequantize_row(t, codes, m, dim, o);
          i = dim;
          break;
        }
        const auto* zeros =
            reinterpret_cast<const int8_t*>(m + 2 * static_cast<size_t>(L.n_groups));
        const uint8_t* c = codes;
        const __m256i low4 = _mm256_set1_epi32(0xf);
        for (int gi = 0; gi < L.n_groups; ++gi) {
          const int g = std::min(L.group, dim - gi * L.group);
          const int half = g / 2;
          uint16_t sh;
          std::memcpy(&sh, m + 2 * gi, 2);
          const float unit = (sh & 0x8000) ? 1.0f : 8.0f;
          const __m256 uv = _mm256_set1_ps(unit);
          const __m256 zv = _mm256_set1_ps(static_cast<float>(zeros[gi]));
          const __m256 sv = _mm256_set1_ps(fp16_to_fp32(static_cast<uint16_t>(sh & 0x7fff)) / unit);
          for (int k = 0; k < g; k += 8) {
            const bool high = k >= half;
            const __m128i b =
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + (high ? k - half : k)));
            __m256i q = _mm256_cvtepu8_epi32(b);
            q = high ? _mm256_srli_epi32(q, 4) : _mm256_and_si256(q, low4);
            const __m256 cf = _mm256_cvtepi32_ps(q);
            _mm256_storeu_ps(o + i + k,
                             _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(uv, cf), zv), sv));
          }
          i += g;
          c += half;
        }
        break;
      }
#endif
      default:
        kv_dequantize_row(t, codes, m, dim, o);
        i = dim;
        break;
    }
    for (; i < static_cast<int>(dp); ++i) o[i] = 0.0f;
  }
}

// Where one tile's K and V rows are read from: the cache itself (stride dim, F16 or F32) or a
// converted, zero-padded f32 copy (stride dp).
struct TileRows {
  const void* k;
  const void* v;
  size_t stride;
  bool f16;
};

template <class E>
HWY_INLINE const E* Row(const void* base, size_t stride, int j) {
  return static_cast<const E*>(base) + static_cast<size_t>(j) * stride;
}

#if HWY_TARGET == HWY_AVX3
// AVX-512: two 8-lane vectors in one zmm (the low 256 bits and the high 256 bits), each lane
// computing the same operations as its V8 lane: half the instructions, the same bits.
HWY_INLINE __m512 LoadPair(const float* lo, const float* hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(hi), 1);
}
HWY_INLINE __m512 LoadPair(const uint16_t* lo, const uint16_t* hi) {
  return _mm512_cvtph_ps(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(lo))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1));
}
// 16 consecutive values (two adjacent 8-lane chunks).
HWY_INLINE __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
HWY_INLINE __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif

// s[j] = dot(q, K_j) for the 8 keys j0 .. j0+7: per key, 8-lane partial sums over the dp/8
// chunks of q in increasing order (one FMA each, from zero), then the fixed tree of Reduce8.
template <class E>
HWY_INLINE V8 Score8(const float* HWY_RESTRICT q, int chunks, const void* k, size_t stride,
                     int j0) {
#if HWY_TARGET == HWY_AVX3
  // Keys j0 + j (low half) and j0 + j + 4 (high half) in one zmm accumulator: each half is the
  // V8 loop's accumulator of its key, lane for lane.
  __m512 acc2[4];
  for (int j = 0; j < 4; ++j) acc2[j] = _mm512_setzero_ps();
  for (int c = 0; c < chunks; ++c) {
    const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + c * 8));
    for (int j = 0; j < 4; ++j) {
      acc2[j] = _mm512_fmadd_ps(qv,
                                LoadPair(Row<E>(k, stride, j0 + j) + c * 8,
                                         Row<E>(k, stride, j0 + j + 4) + c * 8),
                                acc2[j]);
    }
  }
  V8 acc[8];
  for (int j = 0; j < 4; ++j) {
    acc[j] = _mm512_castps512_ps256(acc2[j]);
    acc[j + 4] = _mm512_extractf32x8_ps(acc2[j], 1);
  }
  return Reduce8x8(acc);
#else
  V8 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = Zero8();
  for (int c = 0; c < chunks; ++c) {
    const V8 qv = Load8(q + c * 8);
    for (int j = 0; j < 8; ++j) acc[j] = Fma8(qv, Load8(Row<E>(k, stride, j0 + j) + c * 8), acc[j]);
  }
  return Reduce8x8(acc);
#endif
}

// o = o * alpha + sum_{j < n} p[j] * V_j, in increasing j; o has `chunks` 8-lane chunks.
template <class E, int C>
HWY_INLINE void AccumulateFixed(float* HWY_RESTRICT o, float alpha, const float* HWY_RESTRICT p,
                                const void* v, size_t stride, int n) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (C % 2 == 0) {  // chunks c and c + 1 in one zmm, lane for lane the same operations
    __m512 acc2[C / 2];
    const __m512 a = _mm512_set1_ps(alpha);
    for (int c = 0; c < C / 2; ++c) acc2[c] = _mm512_mul_ps(_mm512_loadu_ps(o + c * 16), a);
    for (int j = 0; j < n; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const E* vj = Row<E>(v, stride, j);
      for (int c = 0; c < C / 2; ++c) acc2[c] = _mm512_fmadd_ps(pj, Load16(vj + c * 16), acc2[c]);
    }
    for (int c = 0; c < C / 2; ++c) _mm512_storeu_ps(o + c * 16, acc2[c]);
    return;
  }
#endif
  V8 acc[C];
  const V8 a = Set8(alpha);
  for (int c = 0; c < C; ++c) acc[c] = Mul8(Load8(o + c * 8), a);
  for (int j = 0; j < n; ++j) {
    const V8 pj = Set8(p[j]);
    const E* vj = Row<E>(v, stride, j);
    for (int c = 0; c < C; ++c) acc[c] = Fma8(pj, Load8(vj + c * 8), acc[c]);
  }
  for (int c = 0; c < C; ++c) Store8(acc[c], o + c * 8);
}

template <class E>
void Accumulate(float* HWY_RESTRICT o, int chunks, float alpha, const float* HWY_RESTRICT p,
                const void* v, size_t stride, int n) {
  // Register blocks of 8, 4, 2, 1 chunks; each output lane gets the same sequence of operations
  // whichever block it falls in.
  int c = 0;
  for (; c + 8 <= chunks; c += 8)
    AccumulateFixed<E, 8>(o + c * 8, alpha, p, Row<E>(v, 1, c * 8), stride, n);
  if (c + 4 <= chunks) {
    AccumulateFixed<E, 4>(o + c * 8, alpha, p, Row<E>(v, 1, c * 8), stride, n);
    c += 4;
  }
  if (c + 2 <= chunks) {
    AccumulateFixed<E, 2>(o + c * 8, alpha, p, Row<E>(v, 1, c * 8), stride, n);
    c += 2;
  }
  if (c < chunks) AccumulateFixed<E, 1>(o + c * 8, alpha, p, Row<E>(v, 1, c * 8), stride, n);
}

// The turning part of a key transform's shift for one row (kernels/views.h): its KV head's
// pairs, the row's coefficients (A_i, B_i) = (q_a mu_a + q_b mu_b, q_b mu_a - q_a mu_b) of the
// scaled query, and the tile's first position. q . turn(p) = sum_i A_i cos_i[p] + B_i sin_i[p].
struct TurnRow {
  const KeyTurnPair* pairs = nullptr;
  int n = 0;
  const float* ab = nullptr;
  int64_t start = 0;
};

// q . turn(p) for the 8 keys j0 .. j0 + 7 of the tile: multiply-adds in increasing pair order,
// A then B, from zero.
HWY_INLINE V8 TurnScores8(const TurnRow& tr, int j0) {
  const size_t p = static_cast<size_t>(tr.start + j0);
  V8 c = Zero8();
  for (int i = 0; i < tr.n; ++i) {
    c = Fma8(Set8(tr.ab[2 * i]), Load8(tr.pairs[i].cos + p), c);
    c = Fma8(Set8(tr.ab[2 * i + 1]), Load8(tr.pairs[i].sin + p), c);
  }
  return c;
}

// Online-softmax state of one row (a query token x head).
struct RowState {
  float m;  // running max of the scores seen
  float l;  // running sum of exp(score - m)
};

// One tile (KV block starting at absolute position `start`, `nvr` keys visible to this row,
// nvr >= 1) for one row: scores, mask, online-softmax update, V accumulation. `s` is scratch of
// `slots` floats (bs rounded up to 8).
template <class E>
HWY_INLINE void RowTile(const float* HWY_RESTRICT q, int chunks, const TileRows& t, int nvr,
                        int slots, const TurnRow& tr, float* HWY_RESTRICT s, RowState& st,
                        float* HWY_RESTRICT o) {
  // Scores in groups of 8 keys; keys past the row's last visible one are -inf (a group is
  // computed whole: keys past nvr inside the block may hold anything, and are discarded).
  V8 mv = Set8(-std::numeric_limits<float>::infinity());
  for (int j0 = 0; j0 < slots; j0 += 8) {
    V8 sv = j0 < nvr ? Score8<E>(q, chunks, t.k, t.stride, j0)
                     : Set8(-std::numeric_limits<float>::infinity());
    if (tr.n > 0 && j0 < nvr) sv = Add8(sv, TurnScores8(tr, j0));  // s_j += q . turn(p_j)
    if (j0 + 8 > nvr) sv = KeepFirst8(sv, nvr - j0);
    Store8(sv, s + j0);
    mv = Max8(mv, sv);
  }
  const float m_new = std::max(st.m, MaxLanes8(mv));
  // exp(-inf) = 0 on the row's first tile; exactly 1 when the max did not move.
  const float alpha = m_new == st.m ? 1.0f : Lane0(Exp8(Set8(st.m - m_new)));
  // p = exp(s - m_new) (masked keys: exp(-inf) = 0), and their sum: lane-wise over the groups in
  // order, then the fixed tree.
  V8 psum = Zero8();
  const V8 mn = Set8(m_new);  // finite: the row sees at least one key
  for (int j0 = 0; j0 < slots; j0 += 8) {
    const V8 p = Exp8(Sub8(Load8(s + j0), mn));
    Store8(p, s + j0);
    psum = Add8(psum, p);
  }
  st.l = st.l * alpha + Reduce8(psum);
  st.m = m_new;
  Accumulate<E>(o, chunks, alpha, s, t.v, t.stride, nvr);
}

// Rows per work item from which converting the tile's K and V to f32 once (shared by the rows)
// beats converting on the fly in every row's loads (decode of MHA models has one row per item).
constexpr int kConvertRows = 4;
// How many KV blocks ahead a work item prefetches.
constexpr int64_t kPrefetchBlocks = 1;

// One work item: the chunk's tokens x KV heads g0 .. g0 + ng - 1. With ng > 1 (decode of many
// sequences) the item walks each KV block once for all its heads, whose tiles are adjacent in the
// cache (kernels/views.h): one contiguous read per block instead of ng scattered ones. Every row's
// operations are those of ng = 1.
void ProcessItem(const PagedKVLayer& kv, const AttentionArgs& a, const AttnChunk& c, int g0,
                 int ng) {
  const int dim = kv.head_dim;
  const int bs = kv.block_size;
  const int G = a.n_heads / kv.n_kv_heads;
  const int R = static_cast<int>(c.t1 - c.t0) * G;  // rows per KV head
  const int RT = R * ng;                            // rows of the item
  const size_t dp = RoundUp(static_cast<size_t>(dim), 8);
  const int chunks = static_cast<int>(dp / 8);
  const int slots = static_cast<int>(RoundUp(static_cast<size_t>(bs), 8));
  // Reading the cache in place needs f16 or f32 for both K and V, whole 8-lane chunks and whole
  // 8-key groups inside a block; the quantized formats are always dequantized into the f32 tile.
  const bool plain = kv.k_type == kv.v_type && !kv_dtype_is_quantized(kv.k_type);
  const bool f16 = kv.k_type == KVDType::F16;
  const bool convert = !plain || R >= kConvertRows || dim % 8 != 0 || bs % 8 != 0;
  const bool rotate_q = kv_rotates_keys(kv.k_type);
  const float* k_scale = kv.k_scale;
  const int np = kv.k_turn ? kv.k_turn_pairs : 0;

  // Scratch: Q (scaled, padded) and O per row, the tile's scores, the converted K and V tiles,
  // and the per-row online-softmax state.
  const size_t total = 2 * static_cast<size_t>(RT) * dp + static_cast<size_t>(slots) +
                       (convert ? 2 * static_cast<size_t>(slots) * dp : 0) +
                       2 * static_cast<size_t>(RT) + 2 * static_cast<size_t>(RT) * np + 8;
  float* p = ThreadScratch(total);
  float* Q = p;
  p += static_cast<size_t>(RT) * dp;
  float* O = p;
  p += static_cast<size_t>(RT) * dp;
  float* S = p;
  p += slots;
  float* kf = nullptr;
  float* vf = nullptr;
  if (convert) {
    kf = p;
    p += static_cast<size_t>(slots) * dp;
    vf = p;
    p += static_cast<size_t>(slots) * dp;
    // Padding key rows (bs .. slots) are scored and then masked: keep them finite.
    std::fill(kf + static_cast<size_t>(bs) * dp, kf + static_cast<size_t>(slots) * dp, 0.0f);
  }
  float* AB = p;  // per row: the turning pairs' coefficients
  p += 2 * static_cast<size_t>(RT) * np;
  auto* st = reinterpret_cast<RowState*>(p);

  // Row gi * R + r: KV head g0 + gi, token c.t0 + r / G, query head (g0 + gi) * G + r % G.
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * dim;
  for (int gi = 0; gi < ng; ++gi) {
    for (int r = 0; r < R; ++r) {
      const int64_t t = c.t0 + r / G;
      const int h = (g0 + gi) * G + r % G;
      const float* qrow = a.q + t * q_stride + static_cast<int64_t>(h) * dim;
      float* qr = Q + static_cast<size_t>(gi * R + r) * dp;
      for (int d = 0; d < dim; ++d) qr[d] = qrow[d] * a.scale;
      if (np > 0) {  // the turning shift's coefficients, from the scaled query
        const KeyTurnPair* tp = kv.k_turn + static_cast<size_t>(g0 + gi) * np;
        float* ab = AB + static_cast<size_t>(gi * R + r) * 2 * np;
        for (int i = 0; i < np; ++i) {
          const float qa = qr[tp[i].a], qb = qr[tp[i].b];
          ab[2 * i] = qa * tp[i].mu_a + qb * tp[i].mu_b;
          ab[2 * i + 1] = qb * tp[i].mu_a - qa * tp[i].mu_b;
        }
      }
      if (k_scale) {  // keys are stored divided by the transform's scale (kv/key_transform.h)
        const float* sc = k_scale + static_cast<size_t>(g0 + gi) * dim;
        for (int d = 0; d < dim; ++d) qr[d] *= sc[d];
      }
      for (size_t d = static_cast<size_t>(dim); d < dp; ++d) qr[d] = 0.0f;
      if (rotate_q) kv_rotate_key(qr, dim);  // quantized keys are stored rotated
      st[gi * R + r] = {-std::numeric_limits<float>::infinity(), 0.0f};
    }
  }
  std::fill(O, O + static_cast<size_t>(RT) * dp, 0.0f);

  const int32_t* table = a.seqs[c.seq].block_table;
  const size_t k_tile = kv.k_tile_bytes();
  const size_t v_tile = kv.v_tile_bytes();
  const int64_t n_tiles = c.max_pos / bs + 1;
  for (int64_t b = 0; b < n_tiles; ++b) {
    const int64_t start = b * bs;
    const int nv = static_cast<int>(std::min<int64_t>(bs, c.max_pos - start + 1));
    for (int gi = 0; gi < ng; ++gi) {
      const int g = g0 + gi;
      const size_t tile_index = static_cast<size_t>(table[b]) * kv.n_kv_heads + g;
      if (ng > 1 && gi == 0 && b + 1 < n_tiles) {
        // All heads: the block's tiles are one contiguous run, which the hardware prefetcher
        // follows once started; start the next block's K and V runs early.
        const size_t next = static_cast<size_t>(table[b + 1]) * kv.n_kv_heads + g0;
        const char* kn = static_cast<const char*>(kv.k) + next * k_tile;
        const char* vn = static_cast<const char*>(kv.v) + next * v_tile;
        for (size_t i = 0; i < 4 * 64; i += 64) {
          hwy::Prefetch(kn + i);
          hwy::Prefetch(vn + i);
        }
      }
      if (ng == 1 && b + kPrefetchBlocks < n_tiles) {
        // Blocks are scattered in memory, so the hardware prefetcher cannot guess the next one:
        // request head g's tile of a block ahead while this one is computed.
        const size_t next = static_cast<size_t>(table[b + kPrefetchBlocks]) * kv.n_kv_heads + g;
        const char* kn = static_cast<const char*>(kv.k) + next * k_tile;
        const char* vn = static_cast<const char*>(kv.v) + next * v_tile;
        for (size_t i = 0; i < k_tile; i += 64) hwy::Prefetch(kn + i);
        for (size_t i = 0; i < v_tile; i += 64) hwy::Prefetch(vn + i);
      }
      const auto* kt = static_cast<const uint8_t*>(kv.k) + tile_index * k_tile;
      const auto* vt = static_cast<const uint8_t*>(kv.v) + tile_index * v_tile;
      TileRows tile{kt, vt, static_cast<size_t>(dim), f16};
      if (convert) {
        // Keys are scored in groups of 8: convert every row a group may read (inside the block).
        const int nk = std::min(bs, static_cast<int>(RoundUp(static_cast<size_t>(nv), 8)));
        TileRowsToF32(kv.k_type, kt, nk, dim, bs, kf, dp);
        TileRowsToF32(kv.v_type, vt, nv, dim, bs, vf, dp);
        tile = TileRows{kf, vf, dp, false};
      }
      for (int r = 0; r < R; ++r) {
        const int64_t pos = a.positions[c.t0 + r / G];
        const int nvr = static_cast<int>(std::min<int64_t>(nv, pos - start + 1));
        if (nvr <= 0) continue;  // tile entirely after this row's position: nothing changes
        const size_t row = static_cast<size_t>(gi * R + r);
        float* qr = Q + row * dp;
        float* orow = O + row * dp;
        const TurnRow tr{np > 0 ? kv.k_turn + static_cast<size_t>(g) * np : nullptr, np,
                         AB + row * 2 * np, start};
        if (tile.f16) {
          RowTile<uint16_t>(qr, chunks, tile, nvr, slots, tr, S, st[row], orow);
        } else {
          RowTile<float>(qr, chunks, tile, nvr, slots, tr, S, st[row], orow);
        }
      }
    }
  }

  for (int gi = 0; gi < ng; ++gi) {
    for (int r = 0; r < R; ++r) {
      const int64_t t = c.t0 + r / G;
      const int h = (g0 + gi) * G + r % G;
      float* dst = a.out + t * q_stride + static_cast<int64_t>(h) * dim;
      const size_t row = static_cast<size_t>(gi * R + r);
      const float* src = O + row * dp;
      const float l = st[row].l;
      for (int d = 0; d < dim; ++d) dst[d] = src[d] / l;
    }
  }
}

void AttentionImpl(const PagedKVLayer& kv, const AttentionArgs& a, const AttnChunk* chunks,
                   int64_t n_chunks, ThreadPool& pool) {
  // Items of one KV head, or (decode: one token per chunk, enough chunks to share out) of all KV
  // heads of a chunk, walking each of its KV blocks once.
  bool decode = n_chunks >= 4 * static_cast<int64_t>(pool.size());
  for (int64_t i = 0; decode && i < n_chunks; ++i) decode = chunks[i].t1 - chunks[i].t0 == 1;
  const int ng = decode ? kv.n_kv_heads : 1;
  const int64_t n_kv = kv.n_kv_heads / ng;  // items per chunk
  const int64_t n_items = n_chunks * n_kv;
  std::atomic<int64_t> next{0};
  auto work = [&](int, int) {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_items) break;
      // Last chunks first: in a causal prefill they have the most keys.
      ProcessItem(kv, a, chunks[n_chunks - 1 - i / n_kv], static_cast<int>(i % n_kv) * ng, ng);
    }
  };
  // Small jobs (tiny models, short contexts) cost less than waking another thread: run them on
  // the caller. About 64K multiply-adds is a few microseconds, comparable to a wake-up.
  int64_t macs = 0;
  for (int64_t t = 0; t < a.n_tokens; ++t) macs += a.positions[t] + 1;
  macs *= static_cast<int64_t>(a.n_heads) * kv.head_dim * 2;
  if (pool.size() == 1 || n_items == 1 || macs < (int64_t{1} << 16)) {
    work(0, 1);
  } else {
    pool.run(work);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvasir::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvasir::cpu {

HWY_EXPORT(AttentionImpl);

namespace {

// Rows (token x query head) per work item to aim for in prefill: enough to amortise the K/V tile
// conversion and fill SIMD lanes, small enough for the item's scratch to stay in L1/L2.
constexpr int kTargetRows = 32;

void check_layer(const PagedKVLayer& kv, const char* what) {
  if (kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.n_blocks < 0) {
    fail("{}: bad KV layout (block_size {}, n_kv_heads {}, head_dim {}, n_blocks {})", what,
         kv.block_size, kv.n_kv_heads, kv.head_dim, kv.n_blocks);
  }
  if (kv.n_blocks > 0 && (kv.k == nullptr || kv.v == nullptr)) fail("{}: KV storage is null", what);
}

}  // namespace

void attention(const PagedKVLayer& kv, const AttentionArgs& a, ThreadPool& pool) {
  check_layer(kv, "attention");
  if (a.n_tokens < 0) fail("attention: n_tokens {} < 0", a.n_tokens);
  if (a.n_tokens == 0) return;
  if (a.n_heads <= 0 || a.n_heads % kv.n_kv_heads != 0) {
    fail("attention: n_heads {} is not a positive multiple of n_kv_heads {}", a.n_heads,
         kv.n_kv_heads);
  }
  if (!a.q || !a.out || !a.positions || !a.seq_index || !a.seqs) {
    fail("attention: q, out, positions, seq_index and seqs must all be set");
  }

  // Group consecutive tokens of the same sequence into chunks of at most T tokens, validating
  // every index on the way (workers never see bad input).
  static thread_local std::vector<detail::AttnChunk> chunks;
  chunks.clear();
  const int G = a.n_heads / kv.n_kv_heads;
  const int64_t T = std::max(1, kTargetRows / G);
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int32_t s = a.seq_index[t];
    const int32_t pos = a.positions[t];
    if (s < 0 || (a.n_seqs >= 0 && s >= a.n_seqs)) {
      fail("attention: token {} has seq_index {} (n_seqs {})", t, s, a.n_seqs);
    }
    if (pos < 0) fail("attention: token {} has negative position {}", t, pos);
    if (pos / kv.block_size >= a.seqs[s].n_blocks || a.seqs[s].block_table == nullptr) {
      fail("attention: token {} at position {} needs {} KV blocks but sequence {} has {}", t, pos,
           pos / kv.block_size + 1, s, a.seqs[s].n_blocks);
    }
    if (!chunks.empty() && chunks.back().seq == s && chunks.back().t1 == t &&
        t - chunks.back().t0 < T) {
      chunks.back().t1 = t + 1;
      chunks.back().max_pos = std::max(chunks.back().max_pos, pos);
    } else {
      chunks.push_back({t, t + 1, s, pos});
    }
  }
  if (kv.k_turn && !kv.k_shift)
    fail("attention: a key transform with turning terms needs its constant shift");
  for (const detail::AttnChunk& c : chunks) {
    if (kv.k_turn &&
        (c.max_pos / kv.block_size + 1) * int64_t{kv.block_size} > kv.k_turn_positions) {
      fail("attention: position {} is past the key transform's {} positions", c.max_pos,
           kv.k_turn_positions);
    }
    const int32_t* table = a.seqs[c.seq].block_table;
    for (int32_t b = 0; b <= c.max_pos / kv.block_size; ++b) {
      if (table[b] < 0 || table[b] >= kv.n_blocks) {
        fail("attention: sequence {} block table entry {} is block {} (cache has {} blocks)", c.seq,
             b, table[b], kv.n_blocks);
      }
    }
  }
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(kv, a, chunks.data(), n_chunks, pool);
}

}  // namespace kvasir::cpu
#endif  // HWY_ONCE
