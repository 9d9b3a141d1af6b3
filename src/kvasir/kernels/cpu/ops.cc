// Element-wise and row-wise transformer operations (contract in ops.h).
//
// Every reduction runs in float in an order fixed by the length and the SIMD target only (lane
// partial sums, then the lanes, then a scalar tail), so results are per-row deterministic.
//
// RoPE angles: theta = pos * inv_freq[i] is formed and its cos/sin evaluated in double, then
// rounded to float. Forming theta in float (as llama.cpp does) has an angle error of up to
// pos * 2^-24 rad, about 1e-4 rad at position 2000, which is an output error of ~1e-4 relative;
// double keeps the result within a few float ulps of the exact rotation for any position. The
// cost is rope_dim/2 cos+sin per row, shared by all heads of the row: negligible next to the
// matmuls. The rotation itself is float: x0' = x0*c - x1*s, x1' = x0*s + x1*c.
#include "kvasir/kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvasir/util/error.h"

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/ops.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- rms_norm ----
void RmsNormImpl(const float* x, const float* w, float* out, int64_t n_rows, int64_t dim,
                 float eps) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t n = static_cast<size_t>(dim);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    VF s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
    size_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
      const VF a = hn::LoadU(df, xr + i), b = hn::LoadU(df, xr + i + N);
      const VF c = hn::LoadU(df, xr + i + 2 * N), d = hn::LoadU(df, xr + i + 3 * N);
      s0 = hn::MulAdd(a, a, s0);
      s1 = hn::MulAdd(b, b, s1);
      s2 = hn::MulAdd(c, c, s2);
      s3 = hn::MulAdd(d, d, s3);
    }
    for (; i + N <= n; i += N) {
      const VF a = hn::LoadU(df, xr + i);
      s0 = hn::MulAdd(a, a, s0);
    }
    float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    for (; i < n; ++i) sum += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    const VF vs = hn::Set(df, scale);
    i = 0;
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, xr + i), vs), hn::LoadU(df, w + i)), df, o + i);
    }
    for (; i < n; ++i) o[i] = (xr[i] * scale) * w[i];
  }
}

// ---- rope ----
// Per row: cs[i] = cos(theta_i), sn[i] = sin(theta_i) for i < half, in a per-thread table.
void RopeImpl(float* x, const int32_t* pos, int64_t n_rows, int n_heads, int head_dim, int rope_dim,
              const float* inv_freq, bool neox) {
  const DF df;
  const size_t N = hn::Lanes(df);
  (void)N;  // unused on the scalar target
  const int half = rope_dim / 2;
  static thread_local std::vector<float> table;
  // neox: [cos(half) | sin(half)]; normal: [cos cos ...(rope_dim) | -sin sin ...(rope_dim)].
  table.resize(2 * static_cast<size_t>(rope_dim));
  float* cs = table.data();
  float* sn = cs + rope_dim;
  int32_t table_pos = -1;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (r == 0 || pos[r] != table_pos) {
      table_pos = pos[r];
      for (int i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos[r]) * static_cast<double>(inv_freq[i]);
        const float c = static_cast<float>(std::cos(theta));
        const float s = static_cast<float>(std::sin(theta));
        if (neox) {
          cs[i] = c;
          sn[i] = s;
        } else {
          cs[2 * i] = cs[2 * i + 1] = c;
          sn[2 * i] = -s;
          sn[2 * i + 1] = s;
        }
      }
    }
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (r * n_heads + h) * static_cast<int64_t>(head_dim);
      size_t i = 0;
      if (neox) {
        float* x0 = xh;
        float* x1 = xh + half;
#if HWY_TARGET != HWY_SCALAR
        for (; i + N <= static_cast<size_t>(half); i += N) {
          const VF a = hn::LoadU(df, x0 + i), b = hn::LoadU(df, x1 + i);
          const VF c = hn::LoadU(df, cs + i), s = hn::LoadU(df, sn + i);
          hn::StoreU(hn::MulSub(a, c, hn::Mul(b, s)), df, x0 + i);
          hn::StoreU(hn::MulAdd(a, s, hn::Mul(b, c)), df, x1 + i);
        }
#endif
        for (; i < static_cast<size_t>(half); ++i) {
          const float a = x0[i], b = x1[i];
          x0[i] = a * cs[i] - b * sn[i];
          x1[i] = a * sn[i] + b * cs[i];
        }
      } else {
#if HWY_TARGET != HWY_SCALAR
        // Lanes (2i, 2i+1) hold a pair (N is even); swapping them gives the partner element.
        for (; i + N <= static_cast<size_t>(rope_dim); i += N) {
          const VF v = hn::LoadU(df, xh + i);
          const VF c = hn::LoadU(df, cs + i), s = hn::LoadU(df, sn + i);
          hn::StoreU(hn::MulAdd(v, c, hn::Mul(hn::Shuffle2301(v), s)), df, xh + i);
        }
#endif
        for (; i < static_cast<size_t>(rope_dim); i += 2) {
          const float a = xh[i], b = xh[i + 1];
          xh[i] = a * cs[i] + b * sn[i];  // sn[i] = -sin
          xh[i + 1] = b * cs[i + 1] + a * sn[i + 1];
        }
      }
    }
  }
}

// ---- element-wise ----
// Applies op to [0, n) in full vectors, and to the tail through a padded stack buffer, so every
// element sees the same vector arithmetic.
template <class Op>
HWY_INLINE void ForEachVector(size_t n, Op op) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) op(i, N);
  if (i < n) op(i, n - i);
}

HWY_INLINE VF LoadPart(DF df, const float* p, size_t count, float pad) {
  if (count == hn::Lanes(df)) return hn::LoadU(df, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  for (size_t k = 0; k < hn::Lanes(df); ++k) buf[k] = k < count ? p[k] : pad;
  return hn::Load(df, buf);
}

HWY_INLINE void StorePart(DF df, VF v, float* p, size_t count) {
  if (count == hn::Lanes(df)) return hn::StoreU(v, df, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
  hn::Store(v, df, buf);
  for (size_t k = 0; k < count; ++k) p[k] = buf[k];
}

void SwigluImpl(const float* gate, const float* up, float* out, int64_t n) {
  const DF df;
  const VF one = hn::Set(df, 1.0f);
  const VF inf = hn::Set(df, std::numeric_limits<float>::infinity());
  const VF big = hn::Set(df, 88.0f);  // exp(88) ~ 1.65e38 still fits a float
  ForEachVector(static_cast<size_t>(n), [&](size_t i, size_t cnt) {
    const VF g = LoadPart(df, gate + i, cnt, 0.0f);
    const VF u = LoadPart(df, up + i, cnt, 0.0f);
    const VF ng = hn::Neg(g);
    // exp(-g) overflows to inf for g < -88: silu(g) -> -0, as the exact value underflows.
    const VF e = hn::IfThenElse(hn::Gt(ng, big), inf, hn::Exp(df, ng));
    StorePart(df, hn::Mul(hn::Div(g, hn::Add(one, e)), u), out + i, cnt);
  });
}

void AddImpl(float* x, const float* y, int64_t n) {
  const DF df;
  ForEachVector(static_cast<size_t>(n), [&](size_t i, size_t cnt) {
    StorePart(df, hn::Add(LoadPart(df, x + i, cnt, 0.0f), LoadPart(df, y + i, cnt, 0.0f)), x + i,
              cnt);
  });
}

void SoftmaxImpl(float* x, int64_t n) {
  const DF df;
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t len = static_cast<size_t>(n);
  VF vmax = hn::Set(df, ninf);
  ForEachVector(
      len, [&](size_t i, size_t cnt) { vmax = hn::Max(vmax, LoadPart(df, x + i, cnt, ninf)); });
  const VF mx = hn::MaxOfLanes(df, vmax);
  // The sum runs in float lanes over blocks of kBlock elements, each block's total added to a
  // double: a vocabulary-sized row (32k) keeps ~1e-7 relative accuracy on every target.
  constexpr size_t kBlock = 256;
  double total = 0.0;
  for (size_t b = 0; b < len; b += kBlock) {
    VF vsum = hn::Zero(df);
    ForEachVector(std::min(kBlock, len - b), [&](size_t i, size_t cnt) {
      // Padding lanes hold -inf: exp gives 0 and the sum is unchanged.
      const VF e = hn::Exp(df, hn::Sub(LoadPart(df, x + b + i, cnt, ninf), mx));
      vsum = hn::Add(vsum, e);
      StorePart(df, e, x + b + i, cnt);
    });
    total += hn::GetLane(hn::SumOfLanes(df, vsum));
  }
  const VF inv = hn::Set(df, static_cast<float>(1.0 / total));
  ForEachVector(len, [&](size_t i, size_t cnt) {
    StorePart(df, hn::Mul(LoadPart(df, x + i, cnt, 0.0f), inv), x + i, cnt);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kvasir::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvasir::cpu {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(RopeImpl);
HWY_EXPORT(SwigluImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(SoftmaxImpl);

namespace {

// Below this many floats an operation runs inline on the calling thread: it costs about a
// nanosecond per float, waking the pool a few microseconds.
constexpr int64_t kMinParallelFloats = int64_t{1} << 15;

// fn(r0, r1) over [0, n_rows), split by rows over the pool when the rows hold enough floats.
template <class F>
void for_rows(ThreadPool& pool, int64_t n_rows, int64_t floats_per_row, F&& fn) {
  if (pool.size() == 1 || n_rows < 2 || n_rows * floats_per_row < kMinParallelFloats) {
    fn(int64_t{0}, n_rows);
  } else {
    pool.parallel_for(n_rows, [&](int64_t r0, int64_t r1, int) { fn(r0, r1); });
  }
}

// Element-wise operations split [0, n) in chunks of whole SIMD-friendly runs; an element's
// result does not depend on where a chunk starts (the tails use the same vector code).
constexpr int64_t kElementChunk = 64;

template <class F>
void for_elements(ThreadPool& pool, int64_t n, F&& fn) {
  const int64_t n_chunks = (n + kElementChunk - 1) / kElementChunk;
  for_rows(pool, n_chunks, kElementChunk, [&](int64_t c0, int64_t c1) {
    const int64_t i0 = c0 * kElementChunk;
    fn(i0, std::min(n, c1 * kElementChunk) - i0);
  });
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
              float eps, ThreadPool& pool) {
  if (n_rows < 0 || dim <= 0) fail("rms_norm: bad shape ({} rows of {})", n_rows, dim);
  for_rows(pool, n_rows, dim, [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x + r0 * dim, weight, out + r0 * dim, r1 - r0, dim, eps);
  });
}

void rope(float* x, const int32_t* pos, int64_t n_rows, int n_heads, int head_dim, int rope_dim,
          const float* inv_freq, bool neox, ThreadPool& pool) {
  if (n_rows < 0 || n_heads <= 0 || head_dim <= 0 || rope_dim < 0 || rope_dim > head_dim ||
      rope_dim % 2 != 0) {
    fail(
        "rope: bad shape (n_rows {}, n_heads {}, head_dim {}, rope_dim {}: rope_dim must be even "
        "and <= head_dim)",
        n_rows, n_heads, head_dim, rope_dim);
  }
  if (n_rows == 0 || rope_dim == 0) return;
  const int64_t width = int64_t{n_heads} * head_dim;
  for_rows(pool, n_rows, width, [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RopeImpl)
    (x + r0 * width, pos + r0, r1 - r0, n_heads, head_dim, rope_dim, inv_freq, neox);
  });
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool) {
  if (n < 0) fail("swiglu: negative length {}", n);
  for_elements(pool, n, [&](int64_t i, int64_t len) {
    HWY_DYNAMIC_DISPATCH(SwigluImpl)(gate + i, up + i, out + i, len);
  });
}

void add(float* x, const float* y, int64_t n, ThreadPool& pool) {
  if (n < 0) fail("add: negative length {}", n);
  for_elements(pool, n, [&](int64_t i, int64_t len) {
    HWY_DYNAMIC_DISPATCH(AddImpl)(x + i, y + i, len);
  });
}

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, ThreadPool& pool) {
  if (n_rows < 0 || dim <= 0) fail("add_bias: bad shape ({} rows of {})", n_rows, dim);
  for_rows(pool, n_rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) HWY_DYNAMIC_DISPATCH(AddImpl)(x + r * dim, bias, dim);
  });
}

void softmax(float* x, int64_t n) {
  if (n < 0) fail("softmax: negative length {}", n);
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n);
}

}  // namespace kvasir::cpu
#endif  // HWY_ONCE
