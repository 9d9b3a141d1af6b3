// SIMD kernels of matmul.h, compiled once per Highway target (foreach_target) and chosen at run
// time. See matmul.h for the contract; this file holds the per-target tiles:
//
//   float-family weights (F32, F16, BF16): each output element y[t][r] has ONE vector accumulator;
//     acc += w[k..k+N) * x[k..k+N) (fused multiply-add) for the full vectors in order, then a fixed
//     horizontal sum (SumOfLanes), then the < N leftover columns added one by one in order.
//   Q8_0 / Q4_0 weights against Q8_0 activations: per 32-element block an exact integer dot
//     product, kept as 8 int32 partial sums (lane j sums elements 4j..4j+3), converted to float and
//     accumulated as acc += (d_w * d_x) * partial (FMA), blocks in order, then a fixed horizontal
//     sum. Targets without the AVX2 byte instructions use a scalar path (one float accumulator,
//     acc += (d_w * d_x) * (float)isum per block).
//
// A tile computes R rows x T tokens at once, but every element goes through exactly the sequence
// above whatever R and T are (the tile only changes which elements share loads), which is what
// makes the result batch-invariant. Floating-point contraction is switched off for this file (GCC
// defaults to -ffp-contract=fast even with -std=c++20): the only fused multiply-adds are the
// explicit ones, so the compiler cannot fuse a product into a sum in one tile shape but not in
// another.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kvasir/kernels/cpu/matmul_kernels.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvasir/tensor/dtype.h"

// Targets: AVX3 (AVX-512 servers), AVX2, SSE4 and Highway's portable fallback (SCALAR or EMU128,
// whichever this Highway build uses as baseline). SSSE3 adds nothing over SSE4 for us and AVX3_DL
// (not built by default in Highway 1.0.3) would only cost compile time.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/matmul_kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu::matmul_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef KVASIR_MATMUL_X86_BYTES
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define KVASIR_MATMUL_X86_BYTES 1
#else
#define KVASIR_MATMUL_X86_BYTES 0
#endif

// Register tile shapes (rows x tokens). AVX3 has 32 vector registers, the others 16.
#if HWY_TARGET == HWY_AVX3
constexpr int kRowsF = 4, kTokensF = 4;
constexpr int kRowsQ = 4, kTokensQ = 4;
#else
constexpr int kRowsF = 4, kTokensF = 2;
constexpr int kRowsQ = 4, kTokensQ = 2;
#endif

// ------------------------------------------------------------------------------------------------
// Float-family weights.

template <DType WT>
struct FloatWeights;

template <>
struct FloatWeights<DType::F32> {
  using T = float;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D df, const T* p) {
    return hn::LoadU(df, p);
  }
  static float Scalar(const T* p) { return *p; }
};

template <>
struct FloatWeights<DType::F16> {
  using T = hwy::float16_t;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D df, const T* p) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
  static float Scalar(const T* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return fp16_to_fp32(bits);
  }
};

template <>
struct FloatWeights<DType::BF16> {
  using T = hwy::bfloat16_t;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D df, const T* p) {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
  static float Scalar(const T* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return bf16_to_fp32(bits);
  }
};

// y[t * y_stride + r] = dot(w row r, x row t) for r < R, t < T.
template <DType WT, int R, int T>
HWY_INLINE void TileF(const typename FloatWeights<WT>::T* w, int64_t w_stride, const float* x,
                      int64_t x_stride, int64_t cols, float* y, int64_t y_stride) {
  using Traits = FloatWeights<WT>;
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<decltype(df)> acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(df);

  int64_t k = 0;
  for (; k + N <= cols; k += N) {
    hn::Vec<decltype(df)> xv[T];
    for (int t = 0; t < T; ++t) xv[t] = hn::LoadU(df, x + t * x_stride + k);
    for (int r = 0; r < R; ++r) {
      const auto wv = Traits::Load(df, w + r * w_stride + k);
      for (int t = 0; t < T; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
      for (int64_t kk = k; kk < cols; ++kk) {
        const float p = Traits::Scalar(w + r * w_stride + kk) * x[t * x_stride + kk];
        s += p;
      }
      y[t * y_stride + r] = s;
    }
  }
}

template <DType WT>
void RowsF(const Matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
  using WTy = typename FloatWeights<WT>::T;
  const auto* wd = static_cast<const WTy*>(w.data);
  const int64_t cols = w.cols;
  const int64_t ys = w.rows;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokensF) {
    const int64_t tt = std::min<int64_t>(kTokensF, n_tokens - t0);
    const float* xt = x + t0 * cols;
    float* yt = y + t0 * ys;
    int64_t r = r0;
    for (; r + kRowsF <= r1; r += kRowsF) {
      if (tt == kTokensF) {
        TileF<WT, kRowsF, kTokensF>(wd + r * cols, cols, xt, cols, cols, yt + r, ys);
      } else {
        for (int64_t t = 0; t < tt; ++t)
          TileF<WT, kRowsF, 1>(wd + r * cols, cols, xt + t * cols, cols, cols, yt + t * ys + r, ys);
      }
    }
    for (; r < r1; ++r) {
      if (tt == kTokensF) {
        TileF<WT, 1, kTokensF>(wd + r * cols, cols, xt, cols, cols, yt + r, ys);
      } else {
        for (int64_t t = 0; t < tt; ++t)
          TileF<WT, 1, 1>(wd + r * cols, cols, xt + t * cols, cols, cols, yt + t * ys + r, ys);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Q8_0 / Q4_0 weights against Q8_0 activations.

#if KVASIR_MATMUL_X86_BYTES

HWY_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// An fp16 scale broadcast to all 8 lanes as float.
HWY_INLINE __m256 BroadcastHalf(uint16_t h) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
}

// Exact int32 partial sums (lane j: elements 4j..4j+3) of one Q8_0 weight block times one Q8_0
// activation block, via the sign trick: |w| (unsigned) x (y with w's sign) with maddubs. Activation
// codes lie in [-127, 127] (see QuantizeQ8Blocks), so negating y never overflows; a weight code of
// -128 (which ggml's quantizer never writes) still works, |-128| reading as unsigned 128, and a
// pair sums to at most 2 * 128 * 127 < 2^15, so maddubs never saturates.
struct Q8Weights {
  using Block = BlockQ8_0;
  struct Unpacked {
    __m256i w;    // the codes
    __m256i abs;  // |w| as unsigned bytes
  };
  struct TokenCtx {};
  static HWY_INLINE Unpacked Unpack(const Block* b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    return {w, _mm256_sign_epi8(w, w)};
  }
  static HWY_INLINE TokenCtx Prepare(__m256i) { return {}; }
  static HWY_INLINE __m256i Dot16(const Unpacked& u, __m256i y, TokenCtx) {
    return _mm256_maddubs_epi16(u.abs, _mm256_sign_epi8(y, u.w));
  }
};

// Q4_0: the nibbles n (0..15) are used unsigned with maddubs, and 8 * (pair sums of y) is
// subtracted: sum (n - 8) * y computed exactly (pair sums stay within int16), in the same lanes.
struct Q4Weights {
  using Block = BlockQ4_0;
  struct Unpacked {
    __m256i n;  // bytes 0..15: low nibbles (elements 0..15); 16..31: high nibbles (16..31)
  };
  struct TokenCtx {
    __m256i offset;  // maddubs(8, y): 8 * (y[2i] + y[2i+1])
  };
  static HWY_INLINE Unpacked Unpack(const Block* b) {
    // The 16 bytes in both halves; the upper half shifted right by 4 (one 64-bit variable shift),
    // then the low nibble of every byte kept.
    const __m256i raw =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    const __m256i shifted = _mm256_srlv_epi64(raw, _mm256_set_epi64x(4, 4, 0, 0));
    return {_mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))};
  }
  static HWY_INLINE TokenCtx Prepare(__m256i y) {
    return {_mm256_maddubs_epi16(_mm256_set1_epi8(8), y)};
  }
  static HWY_INLINE __m256i Dot16(const Unpacked& u, __m256i y, TokenCtx c) {
    return _mm256_sub_epi16(_mm256_maddubs_epi16(u.n, y), c.offset);
  }
};

template <class WQ, int R, int T>
HWY_INLINE void TileQ(const uint8_t* w, size_t w_stride, const BlockQ8_0* x, const float* xs,
                      int64_t x_stride, int64_t nb, float* y, int64_t y_stride) {
  using Block = typename WQ::Block;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i yq[T];
    __m256 dx[T];
    typename WQ::TokenCtx ctx[T];
    for (int t = 0; t < T; ++t) {
      yq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t * x_stride + b].qs));
      dx[t] = _mm256_broadcast_ss(xs + t * x_stride + b);
      ctx[t] = WQ::Prepare(yq[t]);
    }
    for (int r = 0; r < R; ++r) {
      const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
      const auto u = WQ::Unpack(blk);
      const __m256 dw = BroadcastHalf(blk->d);
      for (int t = 0; t < T; ++t) {
        const __m256i p32 = _mm256_madd_epi16(WQ::Dot16(u, yq[t], ctx[t]), ones);
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[t]), _mm256_cvtepi32_ps(p32), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = HorizontalSum(acc[r][t]);
}

#else  // portable scalar path

struct Q8Weights {
  using Block = BlockQ8_0;
  static void Unpack(const Block* b, int8_t* out) { std::memcpy(out, b->qs, kQK8_0); }
};

struct Q4Weights {
  using Block = BlockQ4_0;
  static void Unpack(const Block* b, int8_t* out) {
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      out[j] = static_cast<int8_t>((b->qs[j] & 0x0f) - 8);
      out[j + kQK4_0 / 2] = static_cast<int8_t>((b->qs[j] >> 4) - 8);
    }
  }
};

template <class WQ, int R, int T>
HWY_INLINE void TileQ(const uint8_t* w, size_t w_stride, const BlockQ8_0* x, const float* xs,
                      int64_t x_stride, int64_t nb, float* y, int64_t y_stride) {
  using Block = typename WQ::Block;
  float acc[R][T] = {};
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const Block* blk = reinterpret_cast<const Block*>(w + r * w_stride) + b;
      int8_t wq[32];
      WQ::Unpack(blk, wq);
      const float dw = fp16_to_fp32(blk->d);
      for (int t = 0; t < T; ++t) {
        const int8_t* yq = x[t * x_stride + b].qs;
        int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += int32_t{wq[j]} * int32_t{yq[j]};
        const float scale = dw * xs[t * x_stride + b];
        const float p = scale * static_cast<float>(s);
        acc[r][t] += p;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = acc[r][t];
}

#endif  // KVASIR_MATMUL_X86_BYTES

template <class WQ>
void RowsQ(const Matrix& w, const Activations& x, float* y, int64_t r0, int64_t r1) {
  const auto* wd = static_cast<const uint8_t*>(w.data);
  const size_t wrb = row_bytes(w.type, w.cols);
  const int64_t nb = w.cols / kQK8_0;
  const BlockQ8_0* xq = x.q8();
  const float* xs = x.q8_scales();
  const int64_t n_tokens = x.n_tokens();
  const int64_t ys = w.rows;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokensQ) {
    const int64_t tt = std::min<int64_t>(kTokensQ, n_tokens - t0);
    const BlockQ8_0* xt = xq + t0 * nb;
    const float* st = xs + t0 * nb;
    float* yt = y + t0 * ys;
    int64_t r = r0;
    for (; r + kRowsQ <= r1; r += kRowsQ) {
      const uint8_t* wr = wd + static_cast<size_t>(r) * wrb;
      if (tt == kTokensQ) {
        TileQ<WQ, kRowsQ, kTokensQ>(wr, wrb, xt, st, nb, nb, yt + r, ys);
      } else {
        for (int64_t t = 0; t < tt; ++t)
          TileQ<WQ, kRowsQ, 1>(wr, wrb, xt + t * nb, st + t * nb, nb, nb, yt + t * ys + r, ys);
      }
    }
    for (; r < r1; ++r) {
      const uint8_t* wr = wd + static_cast<size_t>(r) * wrb;
      if (tt == kTokensQ) {
        TileQ<WQ, 1, kTokensQ>(wr, wrb, xt, st, nb, nb, yt + r, ys);
      } else {
        for (int64_t t = 0; t < tt; ++t)
          TileQ<WQ, 1, 1>(wr, wrb, xt + t * nb, st + t * nb, nb, nb, yt + t * ys + r, ys);
      }
    }
  }
}

void MatmulRows(const Matrix& w, const Activations& x, float* y, int64_t r0, int64_t r1) {
  switch (w.type) {
    case DType::F32:
      return RowsF<DType::F32>(w, x.f32(), x.n_tokens(), y, r0, r1);
    case DType::F16:
      return RowsF<DType::F16>(w, x.f32(), x.n_tokens(), y, r0, r1);
    case DType::BF16:
      return RowsF<DType::BF16>(w, x.f32(), x.n_tokens(), y, r0, r1);
    case DType::Q8_0:
      return RowsQ<Q8Weights>(w, x, y, r0, r1);
    case DType::Q4_0:
      return RowsQ<Q4Weights>(w, x, y, r0, r1);
    default:
      return;  // rejected by the caller
  }
}

// ------------------------------------------------------------------------------------------------
// Activation quantization, bit-identical to kvasir::quantize_block_q8_0 for finite input.

void QuantizeQ8Blocks(const float* x, BlockQ8_0* q, float* scales, int64_t b0, int64_t b1) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  constexpr int64_t kBlock = kQK8_0;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto half = hn::Set(df, 0.5f);
  const auto one = hn::Set(df, 1.0f);
  const auto lo = hn::Set(df, -128.0f);
  const auto hi = hn::Set(df, 127.0f);
  for (int64_t b = b0; b < b1; ++b) {
    const float* v = x + b * kBlock;
    auto vmax = hn::Zero(df);
    for (int64_t j = 0; j < kBlock; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, v + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    q[b].d = fp32_to_fp16(d);
    scales[b] = fp16_to_fp32(q[b].d);
    const auto vid = hn::Set(df, id);
    for (int64_t j = 0; j < kBlock; j += N) {
      const auto s = hn::Mul(hn::LoadU(df, v + j), vid);
      // roundf (ties away from zero): truncate, then step away from zero when the dropped
      // fraction (exact: s - trunc(s) needs no rounding) is at least one half.
      auto r = hn::Trunc(s);
      const auto frac = hn::Abs(hn::Sub(s, r));
      r = hn::Add(r, hn::IfThenElseZero(frac >= half, hn::CopySignToAbs(one, s)));
      r = hn::Min(hn::Max(r, lo), hi);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, q[b].qs + j);
    }
  }
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvasir::cpu::matmul_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvasir::cpu::matmul_detail {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(QuantizeQ8Blocks);
HWY_EXPORT(TargetName);

void matmul_rows(const Matrix& w, const Activations& x, float* y, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(MatmulRows)(w, x, y, r0, r1);
}

void quantize_q8_0_blocks(const float* x, BlockQ8_0* q, float* scales, int64_t b0, int64_t b1) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8Blocks)(x, q, scales, b0, b1);
}

const char* chosen_target_name() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

namespace {
// Targets compiled into this file that the CPU supports, best (lowest bit) first. Ignores any
// active force_target() restriction.
std::vector<int64_t> RunnableTargets() {
  std::vector<int64_t> out;
  for (int i = 0; i < 63; ++i) {
    const int64_t bit = int64_t{1} << i;
    if ((HWY_TARGETS & bit) != 0) out.push_back(bit);
  }
  return out;
}
}  // namespace

std::vector<std::string> runnable_target_names() {
  // Computed once, before any force_target() (which calls this first) can mock the CPU's targets.
  static const std::vector<std::string> names = [] {
    const int64_t supported = hwy::SupportedTargets();
    std::vector<std::string> out;
    for (int64_t t : RunnableTargets()) {
      if ((supported & t) != 0) out.emplace_back(hwy::TargetName(t));
    }
    return out;
  }();
  return names;
}

bool force_target(const std::string& name) {
  if (name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    return true;
  }
  const std::vector<std::string> runnable = runnable_target_names();
  if (std::find(runnable.begin(), runnable.end(), name) == runnable.end()) return false;
  for (int64_t t : RunnableTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  }
  return false;
}

}  // namespace kvasir::cpu::matmul_detail
#endif  // HWY_ONCE
