// Flash-style paged attention on the CPU (contract in attention.h).
//
// Work item: a run of up to T consecutive query tokens of one sequence x one KV head. Its "rows"
// are the (token, query head) pairs that share that KV head: T * G rows, G = n_heads/n_kv_heads.
// For each KV tile (one KV block) the item:
//   1. converts the tile's K and V rows to f32 once (F16 cache), shared by all rows;
//   2. computes scores with SIMD lanes over rows: S[j][r] = sum_d Qt[d][r] * K[j][d], one fused
//      multiply-add per d, in increasing d (q is pre-multiplied by `scale`);
//   3. masks keys after each row's position (-inf) and updates the row's online-softmax state:
//      m' = max(m, max_j S), alpha = exp(m - m') (exactly 1 when m' == m), p_j = exp(S_j - m'),
//      l' = l * alpha + (p_0 + p_1 + ...) summed in increasing j;
//   4. rescales the row's accumulator by alpha and adds p_j * V[j] in increasing j, lanes over
//      head_dim, stopping at the row's last visible key.
// Finally out = acc / l.
//
// Batch invariance: every number of a row is computed by a lane-independent sequence of operations
// whose order depends only on the row's q, its position and the KV content (tiles are KV blocks,
// at fixed absolute positions). Grouping rows with others only adds lanes and, for rows whose
// position is before the group's last key, extra masked keys: those contribute exactly nothing
// (max with -inf, +0 to a sum of non-negative terms, alpha exactly 1, accumulator untouched).
// Threads take work items from an atomic counter; which thread runs an item does not matter.
#include "kvasir/kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

// Converts `rows` F16 rows of `dim` values (source row stride `src_stride`) to f32 rows of stride
// `dst_stride` (a multiple of the lane count, dst vector-aligned), zero-padding dim..dst_stride.
void F16RowsToF32(const uint16_t* HWY_RESTRICT src, size_t src_stride, int rows, int dim,
                  float* HWY_RESTRICT dst, size_t dst_stride) {
  for (int r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * src_stride;
    float* o = dst + r * dst_stride;
    size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const size_t N = hn::Lanes(df);
    const auto* sh = reinterpret_cast<const hwy::float16_t*>(s);
    for (; i + N <= static_cast<size_t>(dim); i += N) {
      hn::Store(hn::PromoteTo(df, hn::LoadU(dh, sh + i)), df, o + i);
    }
#endif
    for (; i < static_cast<size_t>(dim); ++i) o[i] = fp16_to_fp32(s[i]);
    for (; i < dst_stride; ++i) o[i] = 0.0f;
  }
}

// Same for f32 rows (used only when head_dim is not a multiple of the lane count).
void F32RowsPadded(const float* HWY_RESTRICT src, size_t src_stride, int rows, int dim,
                   float* HWY_RESTRICT dst, size_t dst_stride) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * src_stride;
    float* o = dst + r * dst_stride;
    size_t i = 0;
    for (; i < static_cast<size_t>(dim); ++i) o[i] = s[i];
    for (; i < dst_stride; ++i) o[i] = 0.0f;
  }
}

// Scores of J keys for one vector of rows: s[j*rp] = sum_d qt[d*rp] * k[j*ks + d], one fused
// multiply-add per d in increasing d, starting from zero.
template <int J>
HWY_INLINE void ScoreKeys(DF df, const float* HWY_RESTRICT qt, size_t rp, int dim,
                          const float* HWY_RESTRICT k, size_t ks, float* HWY_RESTRICT s) {
  VF acc[J];
  for (int j = 0; j < J; ++j) acc[j] = hn::Zero(df);
  for (int d = 0; d < dim; ++d) {
    const VF q = hn::Load(df, qt + d * rp);
    for (int j = 0; j < J; ++j) acc[j] = hn::MulAdd(q, hn::Set(df, k[j * ks + d]), acc[j]);
  }
  for (int j = 0; j < J; ++j) hn::Store(acc[j], df, s + j * rp);
}

// Online-softmax update for one vector of rows over the tile's nc computed keys (key j at
// absolute position start + j). Masks keys after each row's position, overwrites S with p, and
// updates m, l and writes the rescale factor alpha.
HWY_INLINE void SoftmaxTile(DF df, float* HWY_RESTRICT s, size_t rp, int nc, float start,
                            const float* HWY_RESTRICT posf, float* HWY_RESTRICT m,
                            float* HWY_RESTRICT l, float* HWY_RESTRICT alpha) {
  const VF ninf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF pos = hn::Load(df, posf);
  const VF m_old = hn::Load(df, m);
  VF m_tile = ninf;
  for (int j = 0; j < nc; ++j) {
    const auto visible = hn::Le(hn::Set(df, start + static_cast<float>(j)), pos);
    const VF sj = hn::IfThenElse(visible, hn::Load(df, s + j * rp), ninf);
    hn::Store(sj, df, s + j * rp);
    m_tile = hn::Max(m_tile, sj);
  }
  const VF m_new = hn::Max(m_old, m_tile);
  // Exp(-inf) = 0 on the first tile; exactly 1 when the max did not move (also for padding rows,
  // where m stays -inf and m_old - m_new would be NaN).
  const VF a =
      hn::IfThenElse(hn::Eq(m_new, m_old), hn::Set(df, 1.0f), hn::Exp(df, hn::Sub(m_old, m_new)));
  VF psum = hn::Zero(df);
  for (int j = 0; j < nc; ++j) {
    // Masked keys: Exp(-inf) = 0 (Highway's Exp returns 0 below -104, and for NaN).
    const VF p = hn::Exp(df, hn::Sub(hn::Load(df, s + j * rp), m_new));
    hn::Store(p, df, s + j * rp);
    psum = hn::Add(psum, p);
  }
  hn::Store(hn::MulAdd(hn::Load(df, l), a, psum), df, l);
  hn::Store(m_new, df, m);
  hn::Store(a, df, alpha);
}

// acc[0 .. K*N) = acc * alpha + sum_{j < nv} p[j*rp] * v[j*vs + ...], in increasing j.
template <int K>
HWY_INLINE void AccumulateV(DF df, float* HWY_RESTRICT acc, float alpha,
                            const float* HWY_RESTRICT p, size_t rp, const float* HWY_RESTRICT v,
                            size_t vs, int nv) {
  const size_t N = hn::Lanes(df);
  VF o[K];
  const VF a = hn::Set(df, alpha);
  for (int k = 0; k < K; ++k) o[k] = hn::Mul(hn::Load(df, acc + k * N), a);
  for (int j = 0; j < nv; ++j) {
    const VF pj = hn::Set(df, p[j * rp]);
    const float* vj = v + j * vs;
    for (int k = 0; k < K; ++k) o[k] = hn::MulAdd(pj, hn::LoadU(df, vj + k * N), o[k]);
  }
  for (int k = 0; k < K; ++k) hn::Store(o[k], df, acc + k * N);
}

void AccumulateRow(DF df, float* HWY_RESTRICT acc, size_t dp, float alpha,
                   const float* HWY_RESTRICT p, size_t rp, const float* HWY_RESTRICT v, size_t vs,
                   int nv) {
  const size_t N = hn::Lanes(df);
  size_t c = 0;
  for (; c + 8 * N <= dp; c += 8 * N) AccumulateV<8>(df, acc + c, alpha, p, rp, v + c, vs, nv);
  if (c + 4 * N <= dp) {
    AccumulateV<4>(df, acc + c, alpha, p, rp, v + c, vs, nv);
    c += 4 * N;
  }
  if (c + 2 * N <= dp) {
    AccumulateV<2>(df, acc + c, alpha, p, rp, v + c, vs, nv);
    c += 2 * N;
  }
  if (c < dp) AccumulateV<1>(df, acc + c, alpha, p, rp, v + c, vs, nv);
}

void ProcessItem(const PagedKVLayer& kv, const AttentionArgs& a, const AttnChunk& c, int g) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const int dim = kv.head_dim;
  const int bs = kv.block_size;
  const int G = a.n_heads / kv.n_kv_heads;
  const int R = static_cast<int>(c.t1 - c.t0) * G;
  const size_t rp = RoundUp(static_cast<size_t>(R), N);
  const size_t dp = RoundUp(static_cast<size_t>(dim), N);
  const bool f16 = kv.type == DType::F16;
  const bool v_direct = !f16 && dim % static_cast<int>(N) == 0;

  // Scratch regions, each a multiple of N floats so all stay vector-aligned.
  const size_t total =
      dim * rp + bs * rp + R * dp + (f16 ? bs * dp : 0) + (v_direct ? 0 : bs * dp) + 3 * rp + rp;
  float* p = ThreadScratch(total);
  float* qt = p;  // [dim][rp], q * scale transposed
  p += dim * rp;
  float* S = p;  // [bs][rp], scores then probabilities of the current tile
  p += bs * rp;
  float* O = p;  // [R][dp], unnormalised output accumulators
  p += R * dp;
  float* kf = nullptr;  // [bs][dp], converted K tile
  if (f16) {
    kf = p;
    p += bs * dp;
  }
  float* vf = nullptr;  // [bs][dp], converted V tile
  if (!v_direct) {
    vf = p;
    p += bs * dp;
  }
  float* posf = p;  // row positions as floats (exact below 2^24); -1 for padding rows
  p += rp;
  float* m = p;
  p += rp;
  float* l = p;
  p += rp;
  float* alpha = p;

  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * dim;
  for (size_t r = 0; r < rp; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
    alpha[r] = 1.0f;
    if (r < static_cast<size_t>(R)) {
      const int64_t t = c.t0 + static_cast<int64_t>(r) / G;
      const int h = g * G + static_cast<int>(r) % G;
      posf[r] = static_cast<float>(a.positions[t]);
      const float* qrow = a.q + t * q_stride + static_cast<int64_t>(h) * dim;
      for (int d = 0; d < dim; ++d) qt[d * rp + r] = qrow[d] * a.scale;
    } else {
      posf[r] = -1.0f;
      for (int d = 0; d < dim; ++d) qt[d * rp + r] = 0.0f;
    }
  }
  std::fill(O, O + static_cast<size_t>(R) * dp, 0.0f);

  const int32_t* table = a.seqs[c.seq].block_table;
  const size_t head_elems = static_cast<size_t>(bs) * dim;
  const int64_t n_tiles = c.max_pos / bs + 1;
  for (int64_t b = 0; b < n_tiles; ++b) {
    const int64_t start = b * bs;
    const int nv = static_cast<int>(std::min<int64_t>(bs, c.max_pos - start + 1));
    // Keys are scored in groups of 8 (for ILP); the extra keys past nv (still inside the block)
    // are masked, so their content does not matter.
    const int nc = std::min(bs, static_cast<int>(RoundUp(static_cast<size_t>(nv), 8)));
    const size_t off = (static_cast<size_t>(table[b]) * kv.n_kv_heads + g) * head_elems;
    if (b + 1 < n_tiles) {
      // Blocks are scattered in memory, so the hardware prefetcher cannot guess the next one:
      // request the next tile's K and V while this one is computed.
      const size_t next = (static_cast<size_t>(table[b + 1]) * kv.n_kv_heads + g) * head_elems;
      const size_t bytes = head_elems * (f16 ? 2 : 4);
      const char* kn = static_cast<const char*>(kv.k) + next * (f16 ? 2 : 4);
      const char* vn = static_cast<const char*>(kv.v) + next * (f16 ? 2 : 4);
      for (size_t i = 0; i < bytes; i += 64) {
        hwy::Prefetch(kn + i);
        hwy::Prefetch(vn + i);
      }
    }

    const float* kp;
    size_t ks;
    const float* vp;
    size_t vs;
    if (f16) {
      F16RowsToF32(static_cast<const uint16_t*>(kv.k) + off, dim, nc, dim, kf, dp);
      F16RowsToF32(static_cast<const uint16_t*>(kv.v) + off, dim, nv, dim, vf, dp);
      kp = kf;
      ks = dp;
      vp = vf;
      vs = dp;
    } else {
      kp = static_cast<const float*>(kv.k) + off;
      ks = dim;
      if (v_direct) {
        vp = static_cast<const float*>(kv.v) + off;
        vs = dim;
      } else {
        F32RowsPadded(static_cast<const float*>(kv.v) + off, dim, nv, dim, vf, dp);
        vp = vf;
        vs = dp;
      }
    }

    for (size_t rv = 0; rv < rp; rv += N) {
      int j = 0;
      for (; j + 8 <= nc; j += 8)
        ScoreKeys<8>(df, qt + rv, rp, dim, kp + j * ks, ks, S + j * rp + rv);
      for (; j + 4 <= nc; j += 4)
        ScoreKeys<4>(df, qt + rv, rp, dim, kp + j * ks, ks, S + j * rp + rv);
      for (; j < nc; ++j) ScoreKeys<1>(df, qt + rv, rp, dim, kp + j * ks, ks, S + j * rp + rv);
      SoftmaxTile(df, S + rv, rp, nc, static_cast<float>(start), posf + rv, m + rv, l + rv,
                  alpha + rv);
    }

    for (int r = 0; r < R; ++r) {
      const int64_t pos = a.positions[c.t0 + r / G];
      const int nvr = static_cast<int>(std::min<int64_t>(nv, pos - start + 1));
      if (nvr <= 0) continue;  // tile entirely after this row's position: nothing changes
      AccumulateRow(df, O + r * dp, dp, alpha[r], S + r, rp, vp, vs, nvr);
    }
  }

  for (int r = 0; r < R; ++r) {
    const int64_t t = c.t0 + r / G;
    const int h = g * G + r % G;
    float* dst = a.out + t * q_stride + static_cast<int64_t>(h) * dim;
    const float* src = O + r * dp;
    const VF lv = hn::Set(df, l[r]);
    size_t d = 0;
    for (; d + N <= static_cast<size_t>(dim); d += N) {
      hn::StoreU(hn::Div(hn::Load(df, src + d), lv), df, dst + d);
    }
    for (; d < static_cast<size_t>(dim); ++d) dst[d] = src[d] / l[r];
  }
}

void AttentionImpl(const PagedKVLayer& kv, const AttentionArgs& a, const AttnChunk* chunks,
                   int64_t n_chunks, ThreadPool& pool) {
  const int64_t n_kv = kv.n_kv_heads;
  const int64_t n_items = n_chunks * n_kv;
  std::atomic<int64_t> next{0};
  auto work = [&](int, int) {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_items) break;
      // Last chunks first: in a causal prefill they have the most keys.
      ProcessItem(kv, a, chunks[n_chunks - 1 - i / n_kv], static_cast<int>(i % n_kv));
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
  if (kv.type != DType::F16 && kv.type != DType::F32) {
    fail("{}: KV dtype {} unsupported (expected f16 or f32)", what, dtype_name(kv.type));
  }
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
    // Positions are compared as floats inside the kernel: exact below 2^24.
    if (pos < 0 || pos >= (1 << 24)) {
      fail("attention: token {} has position {} (supported: 0 .. 2^24-1)", t, pos);
    }
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
  for (const detail::AttnChunk& c : chunks) {
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
