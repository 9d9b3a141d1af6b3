// SIMD kernels of matmul.h over PackedMatrix panels (packed_matrix.h), compiled once per Highway
// target (foreach_target) and chosen at run time.
//
// Every output element y[t][r] owns one lane of one 8-lane register for its whole reduction, and
// goes through exactly the sequence of matmul.h's contract:
//   float-family weights: acc = 0; for k in order: acc = fma(w[r][k], x[t][k], acc).
//   Q8_0 / Q4_0 weights (Q8_0 activations): acc = 0; for each 32-column block b in order:
//     isum = exact integer dot of the block's codes; acc = fma(d_w * d_x, (float)isum, acc).
// A tile computes R panels (8 rows each) x T tokens at once; the tile shape only decides which
// elements share a weight load or an activation broadcast, never how one element is reduced,
// which makes every row's result independent of the batch (and bit-identical to the scalar loop
// that is the portable fallback, and to the test's reference).
//
// The other formats (Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K) follow their
// own lines of matmul.h's contract, with the same structure: exact integer sums per block (or
// per 16-column half), then one FMA per scale (and per min). Q4_K, Q5_K and Q6_K read Q8_K
// activations (one scale per 256 columns), so their sub-block scales multiply the integer sums
// (vpmulld) and only one or two FMAs per super-block remain.
//
// Why intrinsics inside Highway's dispatch: the integer dot products need AVX2's maddubs/madd
// (absent from Highway 1.0.3), and the panel layout fixes the vector at 8 lanes of 32 bits, which
// is exactly one AVX2 register (AVX-512 machines run the same 256-bit code with AVX-512VL). Other
// targets run the scalar loop, which computes the same bits.
//
// Integer dot products per block and 8 rows (one lane per row):
//   Q4_0: codes n = q + 8 in 0..15 (unsigned) x activation codes y in [-127, 127] with maddubs:
//     each int16 pair sum is at most 2 * 15 * 127 = 3810 in magnitude, so the 8 groups of a block
//     add up in int16 without overflow (8 * 3810 = 30480 < 32767); madd with ones widens to int32,
//     and sum((n - 8) * y) = sum(n * y) - 8 * sum(y) subtracts the activation block's code sum.
//   Q8_0: |w| (unsigned) x (y with w's sign) with maddubs: pair sums reach 2 * 128 * 127 = 32512,
//     so each group is widened to int32 (madd) before the groups are added. A weight code of -128
//     reads as unsigned 128 through sign(w, w); activation codes never reach -128.
// Floating-point contraction is off for this file: the only fused multiply-adds are explicit.
// Highway compiles AVX3_DL only on request (before any Highway header: it decides HWY_TARGETS).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// Integer sums stay the chains they are written as: reassociating them into trees (legal for
// integers) makes GCC keep every partial product live and spill the register tiles.
#pragma GCC optimize("no-tree-reassoc")
#endif

#include "kvasir/kernels/cpu/matmul_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/quant_iq4.h"

// Targets: AVX3_DL (AVX-512 with VNNI: Ice Lake and later, Zen 4), AVX3 (AVX-512), AVX2 and
// Highway's portable baseline (SCALAR or EMU128).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/matmul_kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>

// Register tiles are arrays indexed by compile-time loops; unless every such loop is unrolled, GCC
// gives the arrays a stack home and stores every accumulator on every iteration.
#ifndef KVASIR_UNROLL
#if defined(__clang__)
#define KVASIR_UNROLL _Pragma("clang loop unroll(full)")
#else
#define KVASIR_UNROLL _Pragma("GCC unroll 16")
#endif
#endif

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu::matmul_detail {
namespace HWY_NAMESPACE {

#undef KVASIR_MATMUL_X86
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define KVASIR_MATMUL_X86 1
#else
#define KVASIR_MATMUL_X86 0
#endif

constexpr int kP = static_cast<int>(kPanelRows);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Independent integer accumulators per output in the 4-bit block dots (U4Dots): 32 vector
// registers hold two sets; AVX2's 16 hold one.
constexpr int kDotChains = 2;
constexpr bool kWideRegs = true;  // 32 vector registers
#else
constexpr bool kWideRegs = false;
constexpr int kDotChains = 1;
#endif
// Quantized formats: a matmul of exactly this many tokens (the speculative verification of K = 4
// draft tokens plus one, the default K) runs as ONE tile of all its tokens, 2 panels wide, so each
// weight block is loaded and unpacked once for all of them instead of by a 4-token tile and again
// by a 1-token tail tile: 2048x5632 from DRAM, 2 Zen 4 threads, 233-282 -> 197-237 us (Q8_0,
// Q4_0, Q4_K). The 10 float + 10 integer accumulators, 5 broadcasts and 2 code vectors need 32
// vector registers (AVX-512), not AVX2's 16. Eight tokens in one tile of 1 panel measured slower
// than two 4-token tiles of 2 panels (Q8_0, Q4_0), so 6-8 tokens keep those.
constexpr int kOneTileTokens = kWideRegs ? 5 : 0;

// What a tile needs to find its inputs and outputs.
struct Job {
  const PackedMatrix* w;
  const Activations* x;
  float* y;
};

// Stores the 8 lanes of panel p, token t (only the rows that exist).
inline void StoreRows(const float* lanes, const Job& j, int64_t p, int64_t t) {
  const int64_t rows = j.w->rows();
  const int64_t r0 = p * kP;
  const int64_t n = std::min<int64_t>(kP, rows - r0);
  std::memcpy(j.y + t * rows + r0, lanes, static_cast<size_t>(n) * sizeof(float));
}

#if KVASIR_MATMUL_X86

inline void Store(__m256 v, const Job& j, int64_t p, int64_t t) {
  const int64_t rows = j.w->rows();
  if ((p + 1) * kP <= rows) {
    _mm256_storeu_ps(j.y + t * rows + p * kP, v);
  } else {
    alignas(32) float lanes[kP];
    _mm256_store_ps(lanes, v);
    StoreRows(lanes, j, p, t);
  }
}

// Software prefetch of the weight stream: each step of a tile's loop asks for the bytes it will
// read kPrefetchBytes later (the `n` bytes that follow p + kPrefetchBytes, n being what one step
// consumes). The hardware prefetchers alone left DRAM idle between requests: with it, cold GEMV
// from DRAM on 2 Zen 4 threads went from 53-57 to 63-67 GB/s (Q4_0) and to 70-76 GB/s (Q8_0),
// and a 2- or 5-token matmul, whose arithmetic used to stall on every miss, overlaps the two.
constexpr int64_t kPrefetchBytes = 4096;
HWY_INLINE void PrefetchAhead(const uint8_t* p, int64_t n) {
  const char* a = reinterpret_cast<const char*>(p) + kPrefetchBytes;
  for (int64_t o = 0; o < n; o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
}

// The R x T accumulators of a tile: zeroed, and stored to y (rows that exist only).
template <int R, int T>
HWY_INLINE void ZeroAcc(__m256 (&acc)[R][T]) {
  KVASIR_UNROLL
  for (int r = 0; r < R; ++r)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) acc[r][i] = _mm256_setzero_ps();
}
template <int R, int T>
HWY_INLINE void StoreAcc(const __m256 (&acc)[R][T], const Job& j, int64_t p, int64_t t) {
  KVASIR_UNROLL
  for (int r = 0; r < R; ++r)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) Store(acc[r][i], j, p + r, t + i);
}
// Panels p .. p+R-1 of a quantized matrix: each panel's unit 0, its codes and its scales (or
// meta); unit u is W.unit_stride() bytes further (packed_matrix.h). When the R panels are one
// group, the tile reads one sequential stream.
template <int R>
HWY_INLINE void PanelPointers(const PackedMatrix& W, int64_t p, const uint8_t* (&codes)[R],
                              const uint8_t* (&scales)[R]) {
  KVASIR_UNROLL
  for (int r = 0; r < R; ++r) {
    codes[r] = W.codes(p + r);
    scales[r] = W.meta(p + r);
  }
}

// ---- float-family weights -----------------------------------------------------------------------

// The vector of a float tile. Ymm: one panel's 8 rows of a column. Zmm (AVX-512 targets): two
// adjacent panels of a group, 16 consecutive elements of the group's column unit
// (packed_matrix.h), so one broadcast and one FMA serve 16 rows. Each lane computes
// acc = fma(w, x, acc) over k in order with either, so both give the same bits.
// Why Zmm: on the Zen 5 VM (AMD EPYC family 26, 2 cores) a zmm FMA issues at the ymm rate (6.6
// against 6.7 G/s per core, 16 independent chains), and llama.cpp's 512-bit F16 GEMM ran
// tinyllama pp512 at 1.48x ours with ymm tiles; Zmm tiles took the hot 2048x2048 x 128 GEMM from
// 200 to 352 GFLOPS (F16; F32 194 -> 344) and pp512 to 1.28x llama.cpp (bench/NOTES.md). Zen 4
// splits a zmm FMA in two halves; the tiles were not measured there.
struct Ymm {
  using V = __m256;
  static constexpr int kPanels = 1;
  static HWY_INLINE V Zero() { return _mm256_setzero_ps(); }
  static HWY_INLINE V Bcast(const float* x) { return _mm256_broadcast_ss(x); }
  static HWY_INLINE V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static HWY_INLINE V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static HWY_INLINE V Splat(float x) { return _mm256_set1_ps(x); }
  template <DType WT>
  static HWY_INLINE V Load(const uint8_t* p) {
    if constexpr (WT == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if constexpr (WT == DType::F16) return _mm256_cvtph_ps(h);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // BF16
    }
  }
  static HWY_INLINE void Put(V v, const Job& j, int64_t p, int64_t t) { Store(v, j, p, t); }
};
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
struct Zmm {
  using V = __m512;
  static constexpr int kPanels = 2;
  static HWY_INLINE V Zero() { return _mm512_setzero_ps(); }
  static HWY_INLINE V Bcast(const float* x) { return _mm512_set1_ps(*x); }
  static HWY_INLINE V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static HWY_INLINE V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static HWY_INLINE V Splat(float x) { return _mm512_set1_ps(x); }
  template <DType WT>
  static HWY_INLINE V Load(const uint8_t* p) {
    if constexpr (WT == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      if constexpr (WT == DType::F16) return _mm512_cvtph_ps(h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // BF16
    }
  }
  // Panel p's rows are the low 8 lanes, panel p + 1's the high 8.
  static HWY_INLINE void Put(V v, const Job& j, int64_t p, int64_t t) {
    Store(_mm512_castps512_ps256(v), j, p, t);
    Store(_mm512_extractf32x8_ps(v, 1), j, p + 1, t);
  }
};
using WideVec = Zmm;
constexpr bool kFloat512 = true;
#else
using WideVec = Ymm;
constexpr bool kFloat512 = false;
#endif

// Panels p .. p+R-1, tokens t .. t+T-1, all columns, in vectors of VT::kPanels panels (Zmm: R
// and p even, so that each pair lies side by side in one group).
template <class VT, DType WT, int R, int T>
HWY_INLINE void TileF(const Job& j, int64_t p, int64_t t) {
  static_assert(R % VT::kPanels == 0);
  constexpr int NV = R / VT::kPanels;
  using V = typename VT::V;
  const int64_t cols = j.w->cols();
  // The tile's T tokens, interleaved (Activations::f32_tiles): token t + i, column k at [k*T + i].
  const float* x = j.x->f32_tiles() + t * cols;
  // A unit is one column (packed_matrix.h): vector v's panels' column k is off[v] bytes after
  // panel p's, and column k + 1 is unit_stride() bytes after column k. One pointer walks all R
  // panels (fewer address registers and increments in the loop than R separate pointers).
  const PackedMatrix& W = *j.w;
  const uint8_t* w = W.codes(p);
  const size_t stride = W.unit_stride();
  size_t off[NV];
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v) off[v] = static_cast<size_t>(W.codes(p + v * VT::kPanels) - w);
  V acc[NV][T];
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) acc[v][i] = VT::Zero();
  const float* const x_end = x + cols * T;
  for (; x != x_end; x += T, w += stride) {
    KVASIR_UNROLL
    for (int v = 0; v < NV; v += static_cast<int>(kGroupPanels) / VT::kPanels) {  // per group
      PrefetchAhead(w + off[v], static_cast<int64_t>(stride));
    }
    V wv[NV];
    KVASIR_UNROLL
    for (int v = 0; v < NV; ++v) wv[v] = VT::template Load<WT>(w + off[v]);
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) {
      const V xb = VT::Bcast(x + i);
      KVASIR_UNROLL
      for (int v = 0; v < NV; ++v) acc[v][i] = VT::Fma(wv[v], xb, acc[v][i]);
    }
  }
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) VT::Put(acc[v][i], j, p + v * VT::kPanels, t + i);
}

template <DType WT>
struct FloatKernel {
  // One tile of Activations::f32_tiles: TileF reads token t + i of a tile at stride T, which is
  // only right when the kernel's tiles are the activations' tiles.
  static constexpr int kMaxT = static_cast<int>(kFloatTokenTile);
  // Panels per tile for T tokens: at least 8 independent accumulators (FMA latency x 2 ports),
  // at most 12 (16 registers: accumulators + R weight vectors + one broadcast). Zmm tiles (3 to
  // 6 tokens): 4 panels, one group, 6 to 12 accumulators. A GEMM chunk is 4 panels or a multiple
  // (matmul.cc), so wider tiles would leave whole chunks to 1-panel tiles (8 panels measured
  // slower for that reason).
  static constexpr int Rows(int T) {
    if (kFloat512 && T >= 3) return 4;
    return T == 1 ? 8 : T == 2 ? 4 : 2;
  }
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    // p is even for an even R: chunks start on a group (matmul_kernels.h) and such tiles follow
    // each other from there. No runtime check: with a fallback to Ymm in the same function GCC
    // spilled the zmm accumulators (141 against 352 GFLOPS).
    using VT = std::conditional_t<kFloat512 && T >= 3 && R % 2 == 0, WideVec, Ymm>;
    TileF<VT, WT, R, T>(j, p, t);
  }
};

// ---- integer dot products ----------------------------------------------------------------------
// On AVX-512 VNNI (the AVX3_DL target) vpdpbusd adds the four u8 x s8 products of each 32-bit lane
// straight into int32; elsewhere maddubs makes int16 pair sums, which the formats below add in
// int16 as far as their bounds allow and widen with madd. Both are exact (no pair sum saturates:
// see each format's bound), so every target computes the same integer sums.

#if HWY_TARGET == HWY_AVX3_DL
// vpdpbusd in its EVEX (AVX512-VNNI + VL) encoding. Not the intrinsic: Highway's AVX3_DL target
// string also enables AVX-VNNI, and GCC then emits the VEX form, which Zen 4 (AVX512-VNNI without
// AVX-VNNI) faults on.
HWY_INLINE __m256i Dpbusd(__m256i acc, __m256i u, __m256i s) {
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
// acc (int16 pair sums, or int32 on VNNI) += the products of u (unsigned) and s (signed).
HWY_INLINE __m256i DotAcc(__m256i acc, __m256i u, __m256i s) {
  return Dpbusd(acc, u, s);
}
// DotAcc's accumulator as int32 sums of each lane's products.
HWY_INLINE __m256i DotWiden(__m256i acc) {
  return acc;
}
// The sum of two DotAcc accumulators (before DotWiden).
HWY_INLINE __m256i DotAdd(__m256i a, __m256i b) {
  return _mm256_add_epi32(a, b);
}
// acc32 (int32) += the products of one or two groups whose pair sums may add up past int16.
HWY_INLINE __m256i DotAcc32(__m256i acc32, __m256i u, __m256i s) {
  return Dpbusd(acc32, u, s);
}
HWY_INLINE __m256i DotAcc32(__m256i acc32, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return Dpbusd(Dpbusd(acc32, u0, s0), u1, s1);
}
#else
HWY_INLINE __m256i DotAcc(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
}
HWY_INLINE __m256i DotWiden(__m256i acc) {
  return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
}
HWY_INLINE __m256i DotAdd(__m256i a, __m256i b) {
  return _mm256_add_epi16(a, b);
}
HWY_INLINE __m256i DotAcc32(__m256i acc32, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc32, DotWiden(_mm256_maddubs_epi16(u, s)));
}
// Two groups whose pair sums still add up within int16 (Q6_K: 2 * 16002).
HWY_INLINE __m256i DotAcc32(__m256i acc32, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return _mm256_add_epi32(acc32, DotWiden(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0),
                                                           _mm256_maddubs_epi16(u1, s1))));
}
#endif

// ---- Q8_0 / Q4_0 weights ------------------------------------------------------------------------

HWY_INLINE __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Products of signed weight bytes w (Q8_0 codes, IQ4 levels) and signed activation codes, exact
// in int32. On VNNI, vpdpbusd multiplies unsigned by signed bytes: the weights are held as
// w + 128 (w xor 0x80: IYmm::Signed, IZmm::Signed), and 128 * (the block's activation code sum)
// comes off at the end (SignedDotsEnd; |sum| <= 32 * 255 * 128 < 2^21). Elsewhere maddubs takes
// |w| and sign(y, w) (the sign trick). Both give the same integers.
#if HWY_TARGET == HWY_AVX3_DL
constexpr bool kSignedOffset = true;
#else
constexpr bool kSignedOffset = false;
#endif

// acc = fma(d_w * d_x, (float)isum, acc) for the 8 lanes.
HWY_INLINE __m256 BlockFma(__m256 dw, const float* dx, __m256i isum, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(dx)), _mm256_cvtepi32_ps(isum), acc);
}

// The integer vectors of a quantized tile, as Ymm and Zmm are a float tile's: IYmm holds one
// panel's 8 rows (8 int32 sums, or the 32 code bytes of a group of columns), IZmm (AVX3_DL) two
// adjacent panels of a group, panel p's in the low 256 bits and panel p + 1's in the high ones.
// `next` is the distance in bytes from panel p's codes (or meta) to panel p + 1's: in the
// 32-column formats the two panels' code parts (and meta parts) lie side by side in a unit
// (packed_matrix.h), so an IZmm load is two aligned 256-bit loads. Every lane computes the same
// exact integer sums and the same float operations with either, so both give the same bits.
// Why IZmm: on the Zen 5 VM a zmm vpdpbusd issues at the ymm rate (6.67 against 6.69 G/s per
// core, 16 independent chains), so a tile of 2-panel vectors does twice the work per instruction;
// on a Zen 4 VM (not probed) the 4-panel IZmm tiles measured 1.3-1.6x the IYmm ones (bench/NOTES.md).
struct IYmm {
  using V = __m256i;
  using F = Ymm;  // the float vectors of the same lanes
  static constexpr int kPanels = 1;
  static HWY_INLINE V Zero() { return _mm256_setzero_si256(); }
  static HWY_INLINE V Bytes(char c) { return _mm256_set1_epi8(c); }
  static HWY_INLINE V Ints(int32_t c) { return _mm256_set1_epi32(c); }
  static HWY_INLINE V And(V a, V b) { return _mm256_and_si256(a, b); }
  static HWY_INLINE V Or(V a, V b) { return _mm256_or_si256(a, b); }
  static HWY_INLINE V Shr16(V a, int n) { return _mm256_srli_epi16(a, n); }
  static HWY_INLINE V Shl16(V a, int n) { return _mm256_slli_epi16(a, n); }
  static HWY_INLINE V Sub32(V a, V b) { return _mm256_sub_epi32(a, b); }
  static HWY_INLINE V Add32(V a, V b) { return _mm256_add_epi32(a, b); }
  static HWY_INLINE V Load(const uint8_t* p, ptrdiff_t /*next*/) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  }
  static HWY_INLINE V Broadcast4(const int8_t* p) { return Bcast4(p); }
  // DotAcc, DotWiden, DotAdd (above).
  static HWY_INLINE V Dot(V acc, V u, V s) { return DotAcc(acc, u, s); }
  static HWY_INLINE V Widen(V a) { return DotWiden(a); }
  static HWY_INLINE V Sum(V a, V b) { return DotAdd(a, b); }
  // The 16 signed levels at p in every 128-bit lane, and their lookup by the codes (0..15) idx.
  static HWY_INLINE V Table(const int8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE V Lookup(V table, V idx) { return _mm256_shuffle_epi8(table, idx); }
  // Signed weight bytes in the form SignedDot takes (w + 128 on VNNI, w elsewhere), and
  // acc (int32) += their products with the signed activation codes y.
  static HWY_INLINE V Signed(V w) {
    if constexpr (kSignedOffset) return _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
    return w;
  }
  static HWY_INLINE V SignedDot(V acc, V w, V y) {
#if HWY_TARGET == HWY_AVX3_DL
    return Dpbusd(acc, w, y);
#else
    return DotAcc32(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
#endif
  }
  // The 8 fp16 values at p (one panel's block scales) as floats.
  static HWY_INLINE F::V Halves(const uint8_t* p, ptrdiff_t /*next*/) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE F::V ToFloat(V a) { return _mm256_cvtepi32_ps(a); }
};
#if HWY_TARGET == HWY_AVX3_DL
struct IZmm {
  using V = __m512i;
  using F = Zmm;
  static constexpr int kPanels = 2;
  static HWY_INLINE V Zero() { return _mm512_setzero_si512(); }
  static HWY_INLINE V Bytes(char c) { return _mm512_set1_epi8(c); }
  static HWY_INLINE V Ints(int32_t c) { return _mm512_set1_epi32(c); }
  static HWY_INLINE V And(V a, V b) { return _mm512_and_si512(a, b); }
  static HWY_INLINE V Or(V a, V b) { return _mm512_or_si512(a, b); }
  static HWY_INLINE V Shr16(V a, int n) { return _mm512_srli_epi16(a, static_cast<unsigned>(n)); }
  static HWY_INLINE V Shl16(V a, int n) { return _mm512_slli_epi16(a, static_cast<unsigned>(n)); }
  static HWY_INLINE V Sub32(V a, V b) { return _mm512_sub_epi32(a, b); }
  static HWY_INLINE V Add32(V a, V b) { return _mm512_add_epi32(a, b); }
  static HWY_INLINE V Load(const uint8_t* p, ptrdiff_t next) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(p))),
        _mm256_load_si256(reinterpret_cast<const __m256i*>(p + next)), 1);
  }
  static HWY_INLINE V Broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  // vpdpbusd by asm, as Dpbusd (Highway's AVX3_DL target string does not enable the intrinsic).
  static HWY_INLINE V Dot(V acc, V u, V s) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
  }
  static HWY_INLINE V Widen(V a) { return a; }
  static HWY_INLINE V Sum(V a, V b) { return _mm512_add_epi32(a, b); }
  static HWY_INLINE V Table(const int8_t* p) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE V Lookup(V table, V idx) { return _mm512_shuffle_epi8(table, idx); }
  static HWY_INLINE V Signed(V w) {
    return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static HWY_INLINE V SignedDot(V acc, V w, V y) { return Dot(acc, w, y); }
  static HWY_INLINE F::V Halves(const uint8_t* p, ptrdiff_t next) {
    const __m128i lo = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_load_si128(reinterpret_cast<const __m128i*>(p + next));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
  }
  static HWY_INLINE F::V ToFloat(V a) { return _mm512_cvtepi32_ps(a); }
};
using IntWideVec = IZmm;
#else
using IntWideVec = IYmm;
#endif
constexpr bool kInt512 = IntWideVec::kPanels > 1;

// isum[r][i] += the products of w (from IV::Signed) with token i's broadcast activations yb[i].
template <class IV, int R, int T>
HWY_INLINE void SignedDots(typename IV::V w, const typename IV::V (&yb)[T], int r,
                           typename IV::V (&isum)[R][T]) {
  KVASIR_UNROLL
  for (int i = 0; i < T; ++i) isum[r][i] = IV::SignedDot(isum[r][i], w, yb[i]);
}
template <class IV, int R, int T>
HWY_INLINE void SignedDotsEnd([[maybe_unused]] const int32_t* xsum, [[maybe_unused]] int64_t nb,
                              [[maybe_unused]] int64_t b,
                              [[maybe_unused]] typename IV::V (&isum)[R][T]) {
  if constexpr (kSignedOffset) {
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) {
      const typename IV::V off = IV::Ints(128 * xsum[i * nb + b]);
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) isum[r][i] = IV::Sub32(isum[r][i], off);
    }
  }
}

// Exact integer dot products of one 32-column block, for R vectors of IV::kPanels panels x T
// tokens: codes[r] points at vector r's (first) panel's codes of block b, the next panel's being
// `next` bytes further (IV::Load), and isum[r][i] holds its rows against token t + i. Codes are
// n - kOffset (Q4_0: 8; Q4_K: 0, its mins are applied by the caller).
template <int kOffset>
struct U4Dots {
  static constexpr size_t kCodeBytes = 128;
  template <class IV, int R, int T>
  static HWY_INLINE void Block(const uint8_t* const* codes, ptrdiff_t next, const BlockQ8_0* xq,
                               const int32_t* xsum, int64_t nb, int64_t b,
                               typename IV::V (&isum)[R][T]) {
    using V = typename IV::V;
    const V mask = IV::Bytes(0x0f);
    // kDotChains independent sums (one per half of the block where 32 vector registers allow),
    // added at the end: two 4-long vpdpbusd chains instead of one 8-long one.
    constexpr int kChains = R * T >= 8 ? 1 : kDotChains;
    V s16[kChains][R][T];
    KVASIR_UNROLL
    for (int c = 0; c < kChains; ++c)
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) s16[c][r][i] = IV::Zero();
    // Per group: the T activation broadcasts first, then each panel's codes are loaded (L1 after
    // the first half), unpacked and used for all T tokens: R*T + R*T + T + 3 live registers.
    KVASIR_UNROLL
    for (int v = 0; v < 4; ++v) {
      KVASIR_UNROLL
      for (int half = 0; half < 2; ++half) {
        V yb[T];
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) yb[i] = IV::Broadcast4(xq[i * nb + b].qs + half * 16 + v * 4);
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) {
          const V raw = IV::Load(codes[r] + v * 32, next);
          const V n = half == 0 ? IV::And(raw, mask) : IV::And(IV::Shr16(raw, 4), mask);
          KVASIR_UNROLL
          for (int i = 0; i < T; ++i) {
            V& acc = s16[half % kChains][r][i];
            acc = IV::Dot(acc, n, yb[i]);
          }
        }
      }
    }
    if constexpr (kChains == 2) {
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) s16[0][r][i] = IV::Sum(s16[0][r][i], s16[1][r][i]);
    }
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) {
      if constexpr (kOffset != 0) {
        const V off = IV::Ints(kOffset * xsum[i * nb + b]);
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) isum[r][i] = IV::Sub32(IV::Widen(s16[0][r][i]), off);
      } else {
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) isum[r][i] = IV::Widen(s16[0][r][i]);
      }
    }
  }
};
using Q4Dots = U4Dots<8>;

// Q5_K's, Q5_0's and Q5_1's codes (0..31: nibble | fifth bit << 4, block layout
// packed_matrix.h), minus kOffset: maddubs pair sums reach 2 * 31 * 127 = 7874, so one half's 4
// groups (31496) fit int16 before madd widens them.
template <int kOffset>
struct U5Dots {
  static constexpr int64_t kCodeBytes = 160;
  template <class IV, int R, int T>
  static HWY_INLINE void Block(const uint8_t* const* codes, ptrdiff_t next, const BlockQ8_0* xq,
                               const int32_t* xsum, int64_t nb, int64_t b,
                               typename IV::V (&isum)[R][T]) {
    using V = typename IV::V;
    const V mask = IV::Bytes(0x0f);
    const V bit4 = IV::Bytes(0x10);
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r)
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) isum[r][i] = IV::Zero();
    KVASIR_UNROLL
    for (int half = 0; half < 2; ++half) {
      V s16[R][T];
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) s16[r][i] = IV::Zero();
      KVASIR_UNROLL
      for (int v = 0; v < 4; ++v) {
        V yb[T];
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) yb[i] = IV::Broadcast4(xq[i * nb + b].qs + half * 16 + v * 4);
        const int bit = 2 * v + half;  // where this code's fifth bit sits
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) {
          const uint8_t* c = codes[r];
          const V raw = IV::Load(c + v * 32, next);
          const V hb = IV::Load(c + 128, next);
          const V top = bit < 4   ? IV::Shl16(hb, bit < 4 ? 4 - bit : 0)
                        : bit > 4 ? IV::Shr16(hb, bit > 4 ? bit - 4 : 0)
                                  : hb;
          const V low = half == 0 ? IV::And(raw, mask) : IV::And(IV::Shr16(raw, 4), mask);
          const V n = IV::Or(low, IV::And(top, bit4));
          KVASIR_UNROLL
          for (int i = 0; i < T; ++i) s16[r][i] = IV::Dot(s16[r][i], n, yb[i]);
        }
      }
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) isum[r][i] = IV::Add32(isum[r][i], IV::Widen(s16[r][i]));
    }
    if constexpr (kOffset != 0) {
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) {
        const V off = IV::Ints(kOffset * xsum[i * nb + b]);
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) isum[r][i] = IV::Sub32(isum[r][i], off);
      }
    }
  }
};

// IQ4_NL's and IQ4_XS's codes index kIQ4NLValues (vpshufb looks the nibbles up in each 128-bit
// lane); the signed levels times the signed activation codes go through maddubs as |w| times
// sign(y, w) (no level is 0). Pair sums reach 2 * 127 * 127 = 32258, so each group is widened
// to int32 (madd) before the groups are added.
struct IQ4Dots {
  static constexpr size_t kCodeBytes = 128;
  template <class IV, int R, int T>
  static HWY_INLINE void Block(const uint8_t* const* codes, ptrdiff_t next, const BlockQ8_0* xq,
                               const int32_t* xsum, int64_t nb, int64_t b,
                               typename IV::V (&isum)[R][T]) {
    using V = typename IV::V;
    const V mask = IV::Bytes(0x0f);
    const V table = IV::Signed(IV::Table(kIQ4NLValues));
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r)
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) isum[r][i] = IV::Zero();
    KVASIR_UNROLL
    for (int v = 0; v < 4; ++v) {
      KVASIR_UNROLL
      for (int half = 0; half < 2; ++half) {
        V yb[T];
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) yb[i] = IV::Broadcast4(xq[i * nb + b].qs + half * 16 + v * 4);
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) {
          const V raw = IV::Load(codes[r] + v * 32, next);
          const V n = half == 0 ? IV::And(raw, mask) : IV::And(IV::Shr16(raw, 4), mask);
          SignedDots<IV, R, T>(IV::Lookup(table, n), yb, r, isum);
        }
      }
    }
    SignedDotsEnd<IV, R, T>(xsum, nb, b, isum);
  }
};

// Q2_K's and (kQ3) Q3_K's codes (2-bit planes, plus Q3_K's third bits; packed_matrix.h): per half
// h of a 32-column block, isum[h] = the sum of code * y over its 16 columns. maddubs pair sums
// reach 2 * 7 * 127 = 1778, so a half's 4 groups add up in int16.
template <bool kQ3>
struct CrumbDots {
  static constexpr int64_t kCodeBytes = kQ3 ? 96 : 64;
  template <int R, int T>
  static HWY_INLINE void Block(const uint8_t* const* codes, const BlockQ8_0* xq, int64_t nb,
                               int64_t b, __m256i (&isum)[2][R][T]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i bit2 = _mm256_set1_epi8(4);
    KVASIR_UNROLL
    for (int h = 0; h < 2; ++h) {
      __m256i s16[R][T];
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) s16[r][i] = _mm256_setzero_si256();
      KVASIR_UNROLL
      for (int v = 0; v < 4; ++v) {
        __m256i yb[T];
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) yb[i] = Bcast4(xq[i * nb + b].qs + h * 16 + v * 4);
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) {
          const uint8_t* c = codes[r];
          const __m256i L = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + 32 * h));
          __m256i n = _mm256_and_si256(v == 0 ? L : _mm256_srli_epi16(L, v == 0 ? 0 : 2 * v), m3);
          if constexpr (kQ3) {
            // The third bit of this code (bit 2v + h of its byte) to bit 2.
            const int bit = 2 * v + h;
            const __m256i H = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + 64));
            const __m256i top = bit < 2   ? _mm256_slli_epi16(H, bit < 2 ? 2 - bit : 0)
                                : bit > 2 ? _mm256_srli_epi16(H, bit > 2 ? bit - 2 : 0)
                                          : H;
            n = _mm256_or_si256(n, _mm256_and_si256(top, bit2));
          }
          KVASIR_UNROLL
          for (int i = 0; i < T; ++i)
            s16[r][i] = DotAcc(s16[r][i], n, yb[i]);
        }
      }
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) isum[h][r][i] = DotWiden(s16[r][i]);
    }
  }
};

struct Q8Dots {
  static constexpr size_t kCodeBytes = 256;
  template <class IV, int R, int T>
  static HWY_INLINE void Block(const uint8_t* const* codes, ptrdiff_t next, const BlockQ8_0* xq,
                               const int32_t* xsum, int64_t nb, int64_t b,
                               typename IV::V (&isum)[R][T]) {
    using V = typename IV::V;
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r)
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) isum[r][i] = IV::Zero();
    KVASIR_UNROLL
    for (int g = 0; g < 8; ++g) {
      V yb[T];
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) yb[i] = IV::Broadcast4(xq[i * nb + b].qs + g * 4);
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r)
        SignedDots<IV, R, T>(IV::Signed(IV::Load(codes[r] + g * 32, next)), yb, r, isum);
    }
    SignedDotsEnd<IV, R, T>(xsum, nb, b, isum);
  }
};

// Panels p .. p+R-1, tokens t .. t+T-1, in vectors of IV::kPanels panels (IZmm: R and p even, so
// that each pair lies side by side in one group): per block, the exact integer dots, then
// acc = fma(d_w * d_x, (float)isum, acc).
// Q4_1 and Q5_1 (kMin): then acc = fma(m_w * d_x, (float)xsum, acc) after each block's term;
// their scales area holds per block the 8 rows' d, then their m.
template <class IV, class Dots, bool kMin, int R, int T>
HWY_INLINE void TileQ(const Job& j, int64_t p, int64_t t) {
  static_assert(R % IV::kPanels == 0);
  constexpr int NV = R / IV::kPanels;
  using F = typename IV::F;
  using FV = typename F::V;
  using V = typename IV::V;
  const PackedMatrix& W = *j.w;
  const int64_t nb = W.cols() / kQK8_0;
  const BlockQ8_0* xq = j.x->q8() + t * nb;
  const float* xs = j.x->q8_scales() + t * nb;
  const int32_t* xsum = j.x->q8_sums() + t * nb;
  const uint8_t* codes[NV];
  const uint8_t* scales[NV];
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v) {
    codes[v] = W.codes(p + v * IV::kPanels);
    scales[v] = W.meta(p + v * IV::kPanels);
  }
  // From a vector's first panel to its second (IZmm): constant within a group.
  const ptrdiff_t cnext = IV::kPanels > 1 ? W.codes(p + 1) - W.codes(p) : 0;
  const ptrdiff_t snext = IV::kPanels > 1 ? W.meta(p + 1) - W.meta(p) : 0;
  const auto stride = static_cast<int64_t>(W.unit_stride());  // one unit = one block
  FV acc[NV][T];
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) acc[v][i] = F::Zero();
  for (int64_t b = 0; b < nb; ++b) {
    V isum[NV][T];
    const uint8_t* cp[NV];
    KVASIR_UNROLL
    for (int v = 0; v < NV; ++v) cp[v] = codes[v] + b * stride;
    PrefetchAhead(cp[0], stride);  // the group's unit (R panels of one group: one stream)
    Dots::template Block<IV, NV, T>(cp, cnext, xq, xsum, nb, b, isum);
    KVASIR_UNROLL
    for (int v = 0; v < NV; ++v) {
      const uint8_t* sc = scales[v] + b * stride;
      const FV dw = IV::Halves(sc, snext);
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) {
        acc[v][i] =
            F::Fma(F::Mul(dw, F::Bcast(xs + i * nb + b)), IV::ToFloat(isum[v][i]), acc[v][i]);
      }
      if constexpr (kMin) {
        const FV mw = IV::Halves(sc + 16, snext);
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) {
          acc[v][i] = F::Fma(F::Mul(mw, F::Bcast(xs + i * nb + b)),
                             F::Splat(static_cast<float>(xsum[i * nb + b])), acc[v][i]);
        }
      }
    }
  }
  KVASIR_UNROLL
  for (int v = 0; v < NV; ++v)
    KVASIR_UNROLL
    for (int i = 0; i < T; ++i) F::Put(acc[v][i], j, p + v * IV::kPanels, t + i);
}

template <class Dots, bool kMin = false>
struct QuantKernel {
  static constexpr int kMaxT = 4;
  // 16 registers: R x T float accumulators + R x T integer sums + R code vectors + T broadcasts;
  // 4 panels for the GEMV keep 4 weight streams in flight (memory-level parallelism). With 32
  // registers (AVX-512) a GEMM tile of 2 panels x 4 tokens shares each broadcast between 2
  // panels and each unpacked code vector between 4 tokens, and 2 tokens take a whole group of 4
  // panels (one dense stream instead of two passes over half of each unit: 2048x5632 Q4_0 from
  // DRAM, 2 tokens, 183-224 -> 160-175 us). With IZmm vectors (AVX3_DL) a tile is 4 panels (one
  // group, 2 vectors), which keeps those register counts with twice the rows per instruction.
  static constexpr int Rows(int T) {
    if (kInt512) return 4;
    return T == 1 ? 4 : T == 2 ? (kWideRegs ? 4 : 2) : kWideRegs ? 2 : 1;
  }
  static constexpr int kOneTileT = kOneTileTokens;
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    // p is even for an even R (chunks start on a group); see FloatKernel::Tile.
    using IV = std::conditional_t<kInt512 && R % 2 == 0, IntWideVec, IYmm>;
    TileQ<IV, Dots, kMin, R, T>(j, p, t);
  }
};

// Q4_K and Q5_K on Q8_K activations (d_x: the super-block's scale): per super-block s,
//   I = sum over sub-blocks of sc * isum (isum = sum of code * y over the sub-block, codes 0..15 or
//   0..31), M = sum over sub-blocks of m * xsum (the activation codes' sum), both exact in int32
//   (|I| <= 8 * 63 * 32 * 31 * 127 < 2^26, |M| <= 8 * 63 * 32 * 127 < 2^21);
//   acc = fma(fp16(d) * d_x, (float)I, acc); acc = fma(-(fp16(dmin) * d_x), (float)M, acc).
template <bool kQ5, int R, int T>
HWY_INLINE void TileQ4K(const Job& j, int64_t p, int64_t t) {
  const PackedMatrix& W = *j.w;
  const int64_t nb = W.cols() / kQK8_0;
  const int64_t ns = W.cols() / kQK_K;
  const BlockQ8_0* xq = j.x->q8() + t * nb;
  const float* xs = j.x->q8_scales() + t * nb;
  const int32_t* xsum = j.x->q8_sums() + t * nb;
  const auto sb = static_cast<int64_t>(W.super_bytes());  // super-block s: s * sb further
  const auto bs = static_cast<int64_t>(W.block_stride());
  const uint8_t* base[R];  // super-block heads (meta)
  const uint8_t* codes[R];
  KVASIR_UNROLL
  for (int r = 0; r < R; ++r) {
    base[r] = W.head(p + r);
    codes[r] = W.codes(p + r);
  }
  __m256 acc[R][T];
  ZeroAcc(acc);
  for (int64_t s = 0; s < ns; ++s) {
    __m256i isc[R][T];
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r)
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) isc[r][i] = _mm256_setzero_si256();
    for (int sub = 0; sub < 8; ++sub) {
      const int64_t b = s * 8 + sub;
      __m256i isum[R][T];
      const uint8_t* cp[R];
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) {
        cp[r] = codes[r] + s * sb + sub * bs;
        PrefetchAhead(cp[r], sb / 8);  // each panel is its own stream
      }
      if constexpr (kQ5) {
        U5Dots<0>::template Block<IYmm, R, T>(cp, 0, xq, xsum, nb, b, isum);
      } else {
        U4Dots<0>::template Block<IYmm, R, T>(cp, 0, xq, xsum, nb, b, isum);
      }
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) {
        const uint8_t* m = base[r] + s * sb;
        const __m256i sc = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + 32 + sub * 8)));
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i)
          isc[r][i] = _mm256_add_epi32(isc[r][i], _mm256_mullo_epi32(isum[r][i], sc));
      }
    }
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r) {
      const uint8_t* m = base[r] + s * sb;
      __m256i imn[T];
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) imn[i] = _mm256_setzero_si256();
      KVASIR_UNROLL
      for (int sub = 0; sub < 8; ++sub) {
        const __m256i mn = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + 96 + sub * 8)));
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) {
          imn[i] = _mm256_add_epi32(
              imn[i], _mm256_mullo_epi32(mn, _mm256_set1_epi32(xsum[i * nb + s * 8 + sub])));
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m + 16)));
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) {
        const __m256 dx = _mm256_broadcast_ss(xs + i * nb + s * 8);
        acc[r][i] =
            _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isc[r][i]), acc[r][i]);
        const __m256 neg_m = _mm256_xor_ps(_mm256_mul_ps(dmin, dx), _mm256_set1_ps(-0.0f));
        acc[r][i] = _mm256_fmadd_ps(neg_m, _mm256_cvtepi32_ps(imn[i]), acc[r][i]);
      }
    }
  }
  StoreAcc(acc, j, p, t);
}

// Q6_K on Q8_K activations: per super-block s, for each 32-column block b and half h (columns
// 16h .. 16h + 15: ggml's 16-column sub-block 2 * sub + h, int8 scale sc_h),
//   I += sc_h * (sum of code * y over the half - 32 * (sum of the half's y))   (codes 0..63)
// exact in int32 (|I| <= 16 * 128 * 16 * 32 * 127 < 2^27); then
//   acc = fma(fp16(d) * d_x, (float)I, acc).
// maddubs pair sums reach 2 * 63 * 127 = 16002, so two of them still fit int16 before madd
// widens them.
template <int R, int T>
HWY_INLINE void TileQ6K(const Job& j, int64_t p, int64_t t) {
  const PackedMatrix& W = *j.w;
  const int64_t nb = W.cols() / kQK8_0;
  const int64_t ns = W.cols() / kQK_K;
  const auto bs = static_cast<int64_t>(W.block_stride());
  const BlockQ8_0* xq = j.x->q8() + t * nb;
  const float* xs = j.x->q8_scales() + t * nb;
  const int32_t* xsum = j.x->q8_sums() + t * nb;
  const int32_t* xlo = j.x->q8_sums_lo() + t * nb;
  const auto sb = static_cast<int64_t>(W.super_bytes());  // super-block s: s * sb further
  const uint8_t* base[R];  // super-block heads (meta)
  const uint8_t* codes[R];
  KVASIR_UNROLL
  for (int r = 0; r < R; ++r) {
    base[r] = W.head(p + r);
    codes[r] = W.codes(p + r);
  }
  __m256 acc[R][T];
  ZeroAcc(acc);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  for (int64_t s = 0; s < ns; ++s) {
    __m256i isc[R][T];
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r)
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) isc[r][i] = _mm256_setzero_si256();
    for (int sub = 0; sub < 8; ++sub) {
      const int64_t b = s * 8 + sub;
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) PrefetchAhead(codes[r] + s * sb + sub * bs, sb / 8);
      KVASIR_UNROLL
      for (int h = 0; h < 2; ++h) {  // half: low nibbles (columns 0-15), high (16-31)
        __m256i isum[R][T];
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r)
          KVASIR_UNROLL
          for (int i = 0; i < T; ++i) isum[r][i] = _mm256_setzero_si256();
        KVASIR_UNROLL
        for (int vp = 0; vp < 2; ++vp) {  // code vectors vp and vp + 2 share a top-bits vector
          __m256i yb[2][T];
          KVASIR_UNROLL
          for (int k = 0; k < 2; ++k)
            KVASIR_UNROLL
            for (int i = 0; i < T; ++i)
              yb[k][i] = Bcast4(xq[i * nb + b].qs + h * 16 + (vp + 2 * k) * 4);
          KVASIR_UNROLL
          for (int r = 0; r < R; ++r) {
            const uint8_t* c = codes[r] + s * sb + sub * bs;
            const __m256i H =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(c + 128 + vp * 32));
            __m256i n[2];
            KVASIR_UNROLL
            for (int k = 0; k < 2; ++k) {
              const __m256i raw =
                  _mm256_load_si256(reinterpret_cast<const __m256i*>(c + (vp + 2 * k) * 32));
              const __m256i low = h == 0 ? _mm256_and_si256(raw, m4)
                                         : _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
              // Top bits of this code to bits 4-5: vector vp uses bits 0-3 of H, vp + 2 bits
              // 4-7; within those, the low-nibble code's pair first.
              const int shift = (k == 0 ? 4 : 0) - (h == 0 ? 0 : 2);
              const __m256i top = shift > 0   ? _mm256_slli_epi16(H, shift > 0 ? shift : 0)
                                  : shift < 0 ? _mm256_srli_epi16(H, shift < 0 ? -shift : 0)
                                              : H;
              n[k] = _mm256_or_si256(low, _mm256_and_si256(top, m30));
            }
            KVASIR_UNROLL
            for (int i = 0; i < T; ++i) {
              isum[r][i] = DotAcc32(isum[r][i], n[0], yb[0][i], n[1], yb[1][i]);
            }
          }
        }
        // The half's offset and scale, in integers.
        __m256i off[T];
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) {
          const int32_t lo = xlo[i * nb + b];
          off[i] = _mm256_set1_epi32(32 * (h == 0 ? lo : xsum[i * nb + b] - lo));
        }
        KVASIR_UNROLL
        for (int r = 0; r < R; ++r) {
          const uint8_t* m = base[r] + s * sb;
          const __m256i sc = _mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + 16 + (2 * sub + h) * 8)));
          KVASIR_UNROLL
          for (int i = 0; i < T; ++i) {
            isc[r][i] = _mm256_add_epi32(
                isc[r][i], _mm256_mullo_epi32(_mm256_sub_epi32(isum[r][i], off[i]), sc));
          }
        }
      }
    }
    KVASIR_UNROLL
    for (int r = 0; r < R; ++r) {
      const uint8_t* m = base[r] + s * sb;
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
      KVASIR_UNROLL
      for (int i = 0; i < T; ++i) {
        const __m256 dx = _mm256_broadcast_ss(xs + i * nb + s * 8);
        acc[r][i] =
            _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isc[r][i]), acc[r][i]);
      }
    }
  }
  StoreAcc(acc, j, p, t);
}

// IQ4_XS: per 32-column block b (group sub of super-block s), d_b = fp16(d) * (ls - 32) (exact:
// 11 x 6 significant bits): acc = fma(d_b * d_x, (float)isum, acc).
template <int R, int T>
HWY_INLINE void TileIQ4XS(const Job& j, int64_t p, int64_t t) {
  const PackedMatrix& W = *j.w;
  const int64_t nb = W.cols() / kQK8_0;
  const int64_t ns = W.cols() / kQK_K;
  const BlockQ8_0* xq = j.x->q8() + t * nb;
  const float* xs = j.x->q8_scales() + t * nb;
  const int32_t* xsum = j.x->q8_sums() + t * nb;
  const uint8_t* codes[R];
  const uint8_t* meta[R];
  PanelPointers(W, p, codes, meta);
  const auto stride = static_cast<int64_t>(W.unit_stride());  // one unit = one super-block
  const auto bstride = static_cast<int64_t>(W.block_stride());  // block k of a unit: k * bstride
  __m256 acc[R][T];
  ZeroAcc(acc);
  for (int64_t s = 0; s < ns; ++s) {
    for (int sub = 0; sub < 8; ++sub) {
      const int64_t b = s * 8 + sub;
      __m256i isum[R][T];
      const uint8_t* cp[R];
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) cp[r] = codes[r] + s * stride + sub * bstride;
      PrefetchAhead(cp[0], stride / 8);
      IQ4Dots::template Block<IYmm, R, T>(cp, 0, xq, xsum, nb, b, isum);
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) {
        const uint8_t* m = meta[r] + s * stride;
        const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
        const __m256 db = _mm256_mul_ps(
            d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + 16 + sub * 8)))));
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) acc[r][i] = BlockFma(db, xs + i * nb + b, isum[r][i], acc[r][i]);
      }
    }
  }
  StoreAcc(acc, j, p, t);
}

struct IQ4XSKernel {
  static constexpr int kMaxT = 4;
  static constexpr int Rows(int T) { return T == 1 ? 4 : T == 2 ? 2 : kWideRegs ? 2 : 1; }
  static constexpr int kOneTileT = kOneTileTokens;
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    TileIQ4XS<R, T>(j, p, t);
  }
};

// Q2_K and (kQ3) Q3_K: 16-column sub-blocks, two per 32-column block b (halves h = 0, 1 of
// ggml's sub-blocks 2 sub + h), y_h = the sum of the half's activation codes:
//   Q2_K: d_h = fp16(d) * sc_h, m_h = fp16(dmin) * m_h (exact);
//         acc = fma(d_h * d_x, (float)i_h, acc); acc = fma(-(m_h * d_x), (float)y_h, acc).
//   Q3_K: d_h = fp16(d) * (sc_h - 32) (exact); acc = fma(d_h * d_x, (float)(i_h - 4 y_h), acc).
template <bool kQ3, int R, int T>
HWY_INLINE void TileK16(const Job& j, int64_t p, int64_t t) {
  const PackedMatrix& W = *j.w;
  const int64_t nb = W.cols() / kQK8_0;
  const int64_t ns = W.cols() / kQK_K;
  const BlockQ8_0* xq = j.x->q8() + t * nb;
  const float* xs = j.x->q8_scales() + t * nb;
  const int32_t* xsum = j.x->q8_sums() + t * nb;
  const int32_t* xlo = j.x->q8_sums_lo() + t * nb;
  const uint8_t* codes[R];
  const uint8_t* meta[R];
  PanelPointers(W, p, codes, meta);
  const auto stride = static_cast<int64_t>(W.unit_stride());  // one unit = one super-block
  const auto bstride = static_cast<int64_t>(W.block_stride());  // block k of a unit: k * bstride
  __m256 acc[R][T];
  ZeroAcc(acc);
  const __m256 neg = _mm256_set1_ps(-0.0f);
  for (int64_t s = 0; s < ns; ++s) {
    for (int sub = 0; sub < 8; ++sub) {
      const int64_t b = s * 8 + sub;
      __m256i isum[2][R][T];
      const uint8_t* cp[R];
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) cp[r] = codes[r] + s * stride + sub * bstride;
      PrefetchAhead(cp[0], stride / 8);
      CrumbDots<kQ3>::template Block<R, T>(cp, xq, nb, b, isum);
      KVASIR_UNROLL
      for (int r = 0; r < R; ++r) {
        const uint8_t* m = meta[r] + s * stride;
        const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
        __m256 dh[2], mh[2];
        KVASIR_UNROLL
        for (int h = 0; h < 2; ++h) {
          if constexpr (kQ3) {
            dh[h] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                         reinterpret_cast<const __m128i*>(m + 16 + (2 * sub + h) * 8)))));
          } else {
            const __m256i sb = _mm256_cvtepu8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + 32 + (2 * sub + h) * 8)));
            const __m256 dmin =
                _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m + 16)));
            dh[h] = _mm256_mul_ps(
                d, _mm256_cvtepi32_ps(_mm256_and_si256(sb, _mm256_set1_epi32(15))));
            mh[h] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(sb, 4)));
          }
        }
        KVASIR_UNROLL
        for (int i = 0; i < T; ++i) {
          const __m256 dx = _mm256_broadcast_ss(xs + i * nb + b);
          const int32_t y[2] = {xlo[i * nb + b], xsum[i * nb + b] - xlo[i * nb + b]};
          KVASIR_UNROLL
          for (int h = 0; h < 2; ++h) {
            if constexpr (kQ3) {
              const __m256i ih = _mm256_sub_epi32(isum[h][r][i], _mm256_set1_epi32(4 * y[h]));
              acc[r][i] =
                  _mm256_fmadd_ps(_mm256_mul_ps(dh[h], dx), _mm256_cvtepi32_ps(ih), acc[r][i]);
            } else {
              acc[r][i] = _mm256_fmadd_ps(_mm256_mul_ps(dh[h], dx),
                                          _mm256_cvtepi32_ps(isum[h][r][i]), acc[r][i]);
              acc[r][i] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(mh[h], dx), neg),
                                          _mm256_set1_ps(static_cast<float>(y[h])), acc[r][i]);
            }
          }
        }
      }
    }
  }
  StoreAcc(acc, j, p, t);
}

template <bool kQ3>
struct K16Kernel {
  static constexpr int kMaxT = 4;
  static constexpr int Rows(int T) { return T == 1 ? 4 : T == 2 ? 2 : kWideRegs ? 2 : 1; }
  static constexpr int kOneTileT = kOneTileTokens;
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    TileK16<kQ3, R, T>(j, p, t);
  }
};

// Q4_K, Q5_K, Q6_K GEMV: one panel per tile. Their panels are stored whole, one after the other
// (packed_matrix.h), so a thread walking its panels one at a time reads ONE sequential stream;
// 4-panel tiles read 4 streams ~9 KiB apart. Cold GEMV, TinyLlama's 2048-column shapes, 2
// threads, Zen 4: Q4_K 28-30 -> 38-51 GB/s, Q6_K 26-29 -> 36-51 (bench/NOTES.md).
struct Q6KKernel {
  static constexpr int kMaxT = 4;
  static constexpr int Rows(int T) { return T == 1 ? 1 : T == 2 ? 2 : kWideRegs ? 2 : 1; }
  static constexpr int kOneTileT = kOneTileTokens;
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    TileQ6K<R, T>(j, p, t);
  }
};

// Q4_K and Q5_K (the same scales and mins; Q5_K's codes have a fifth bit).
template <bool kQ5>
struct Q4KKernel {
  static constexpr int kMaxT = 4;
  // One panel per GEMV tile: see Q6KKernel.
  static constexpr int Rows(int T) { return T == 1 ? 1 : T == 2 ? 2 : kWideRegs ? 2 : 1; }
  static constexpr int kOneTileT = kOneTileTokens;
  template <int R, int T>
  static HWY_INLINE void Tile(const Job& j, int64_t p, int64_t t) {
    TileQ4K<kQ5, R, T>(j, p, t);
  }
};

// Panels [p0, p1) for tokens [t, t + T): tiles of Rows(T) panels, then single panels.
template <class K, int T>
void PanelsForTokens(const Job& j, int64_t p0, int64_t p1, int64_t t) {
  constexpr int R = K::Rows(T);
  int64_t p = p0;
  for (; p + R <= p1; p += R) K::template Tile<R, T>(j, p, t);
  for (; p < p1; ++p) K::template Tile<1, T>(j, p, t);
}

// K::kOneTileT where the kernel has it (the quantized ones), else 0.
template <class K>
constexpr int OneTileTokens() {
  if constexpr (requires { K::kOneTileT; }) {
    return K::kOneTileT;
  } else {
    return 0;
  }
}

template <class K>
void Panels(const Job& j, int64_t p0, int64_t p1) {
  const int64_t n = j.x->n_tokens();
  if constexpr (OneTileTokens<K>() == 5) {
    if (n == 5) return PanelsForTokens<K, 5>(j, p0, p1, 0);
  }
  int64_t t = 0;
  for (; t + K::kMaxT <= n; t += K::kMaxT) PanelsForTokens<K, K::kMaxT>(j, p0, p1, t);
  switch (n - t) {  // the tail: fewer tokens than a full tile
    case 0:
      break;
    case 1:
      PanelsForTokens<K, 1>(j, p0, p1, t);
      break;
    case 2:
      PanelsForTokens<K, 2>(j, p0, p1, t);
      break;
    case 3:
      if constexpr (K::kMaxT > 3) PanelsForTokens<K, 3>(j, p0, p1, t);
      break;
    case 4:
      if constexpr (K::kMaxT > 4) PanelsForTokens<K, 4>(j, p0, p1, t);
      break;
    case 5:
      if constexpr (K::kMaxT > 5) PanelsForTokens<K, 5>(j, p0, p1, t);
      break;
    default:
      break;
  }
}

void MatmulPanels(const PackedMatrix& w, const Activations& x, float* y, int64_t p0, int64_t p1) {
  const Job j{&w, &x, y};
  switch (w.type()) {
    case DType::F32:
      return Panels<FloatKernel<DType::F32>>(j, p0, p1);
    case DType::F16:
      return Panels<FloatKernel<DType::F16>>(j, p0, p1);
    case DType::BF16:
      return Panels<FloatKernel<DType::BF16>>(j, p0, p1);
    case DType::Q8_0:
      return Panels<QuantKernel<Q8Dots>>(j, p0, p1);
    case DType::Q4_0:
      return Panels<QuantKernel<Q4Dots>>(j, p0, p1);
    case DType::Q4_1:
      return Panels<QuantKernel<U4Dots<0>, true>>(j, p0, p1);
    case DType::Q5_0:
      return Panels<QuantKernel<U5Dots<16>>>(j, p0, p1);
    case DType::Q5_1:
      return Panels<QuantKernel<U5Dots<0>, true>>(j, p0, p1);
    case DType::IQ4_NL:
      return Panels<QuantKernel<IQ4Dots>>(j, p0, p1);
    case DType::IQ4_XS:
      return Panels<IQ4XSKernel>(j, p0, p1);
    case DType::Q2_K:
      return Panels<K16Kernel<false>>(j, p0, p1);
    case DType::Q3_K:
      return Panels<K16Kernel<true>>(j, p0, p1);
    case DType::Q4_K:
      return Panels<Q4KKernel<false>>(j, p0, p1);
    case DType::Q5_K:
      return Panels<Q4KKernel<true>>(j, p0, p1);
    case DType::Q6_K:
      return Panels<Q6KKernel>(j, p0, p1);
    default:
      return;  // rejected by the caller
  }
}

#else  // portable scalar path: the same operations, one lane at a time

float WeightAt(DType t, const uint8_t* panel, int64_t k, int lane) {
  const size_t i = static_cast<size_t>(k) * kP + static_cast<size_t>(lane);
  uint16_t h;
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, panel + i * 4, 4);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, panel + i * 2, 2);
      return fp16_to_fp32(h);
    default:
      std::memcpy(&h, panel + i * 2, 2);
      return bf16_to_fp32(h);
  }
}

// The code of column c (0..31) of lane `lane` in a panel block of the nibble layout (with the
// fifth-bit plane when `fifth`) or of the 2-bit layout (with the third-bit plane when `third`).
int NibbleCode(const uint8_t* cb, int lane, int c, bool fifth) {
  const int v = (c % 16) / 4, h = c / 16;
  const uint8_t byte = cb[v * 32 + lane * 4 + c % 4];
  int code = h == 0 ? (byte & 15) : (byte >> 4);
  if (fifth) code |= ((cb[128 + lane * 4 + c % 4] >> (2 * v + h)) & 1) << 4;
  return code;
}
int CrumbCode(const uint8_t* cb, int lane, int c, bool third) {
  const int v = (c % 16) / 4, h = c / 16;
  int code = (cb[h * 32 + lane * 4 + c % 4] >> (2 * v)) & 3;
  if (third) code |= ((cb[64 + lane * 4 + c % 4] >> (2 * v + h)) & 1) << 2;
  return code;
}
float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Block b of lane `lane`, token t, for Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K: acc after
// matmul.h's terms of the block.
float FormatBlock(DType type, const PackedMatrix& w, int64_t p, int64_t b, int lane,
                  const Activations& x, int64_t t, float acc) {
  const int64_t nb = w.cols() / kQK8_0;
  const BlockQ8_0& xb = x.q8()[t * nb + b];
  const float dx = x.q8_scales()[t * nb + b];
  const int32_t xsum = x.q8_sums()[t * nb + b];
  const int32_t yh[2] = {x.q8_sums_lo()[t * nb + b], xsum - x.q8_sums_lo()[t * nb + b]};
  // The unit holding block b (a block, or the super-block of IQ4_XS, Q2_K and Q3_K) and its meta.
  const bool super = type == DType::IQ4_XS || type == DType::Q2_K || type == DType::Q3_K;
  const auto stride = static_cast<int64_t>(w.unit_stride());
  const int64_t unit = super ? b / 8 : b;
  const uint8_t* cb =
      w.codes(p) + unit * stride + (super ? (b % 8) * static_cast<int64_t>(w.block_stride()) : 0);
  const uint8_t* um = w.meta(p) + unit * stride;
  int32_t isum = 0;
  switch (type) {
    case DType::Q4_1:
    case DType::Q5_1: {
      for (int c = 0; c < 32; ++c) isum += NibbleCode(cb, lane, c, type == DType::Q5_1) * xb.qs[c];
      const uint8_t* s = um;
      acc = std::fma(HalfAt(s + lane * 2) * dx, static_cast<float>(isum), acc);
      return std::fma(HalfAt(s + 16 + lane * 2) * dx, static_cast<float>(xsum), acc);
    }
    case DType::Q5_0:
      for (int c = 0; c < 32; ++c) isum += NibbleCode(cb, lane, c, true) * xb.qs[c];
      return std::fma(HalfAt(um + lane * 2) * dx, static_cast<float>(isum - 16 * xsum),
                      acc);
    case DType::IQ4_NL:
    case DType::IQ4_XS: {
      for (int c = 0; c < 32; ++c) isum += kIQ4NLValues[NibbleCode(cb, lane, c, false)] * xb.qs[c];
      float d;
      if (type == DType::IQ4_NL) {
        d = HalfAt(um + lane * 2);
      } else {
        const uint8_t* m = um;
        d = HalfAt(m + lane * 2) * static_cast<float>(static_cast<int8_t>(m[16 + (b % 8) * 8 + lane]));
      }
      return std::fma(d * dx, static_cast<float>(isum), acc);
    }
    case DType::Q2_K:
    case DType::Q3_K: {
      const bool q3 = type == DType::Q3_K;
      int32_t ih[2] = {0, 0};
      for (int c = 0; c < 32; ++c) ih[c / 16] += CrumbCode(cb, lane, c, q3) * xb.qs[c];
      const int64_t g0 = 2 * (b % 8);
      const uint8_t* m = um;
      for (int h = 0; h < 2; ++h) {
        if (q3) {
          const float dh =
              HalfAt(m + lane * 2) * static_cast<float>(static_cast<int8_t>(m[16 + (g0 + h) * 8 + lane]));
          acc = std::fma(dh * dx, static_cast<float>(ih[h] - 4 * yh[h]), acc);
        } else {
          const uint8_t byte = m[32 + (g0 + h) * 8 + lane];
          const float dh = HalfAt(m + lane * 2) * static_cast<float>(byte & 15);
          const float mh = HalfAt(m + 16 + lane * 2) * static_cast<float>(byte >> 4);
          acc = std::fma(dh * dx, static_cast<float>(ih[h]), acc);
          acc = std::fma(-(mh * dx), static_cast<float>(yh[h]), acc);
        }
      }
      return acc;
    }
    default:
      return acc;
  }
}

// Super-block s of lane `lane`, token t, for Q4_K, Q5_K and Q6_K (Q8_K activations): acc after
// matmul.h's terms of the super-block.
float SuperBlock(DType type, const PackedMatrix& w, int64_t p, int64_t s, int lane,
                 const Activations& x, int64_t t, float acc) {
  const int64_t nb = w.cols() / kQK8_0;
  const float dx = x.q8_scales()[t * nb + s * 8];
  const auto cbytes = static_cast<int64_t>(w.block_stride());  // block k: k * cbytes further
  const uint8_t* m = w.head(p) + s * static_cast<int64_t>(w.super_bytes());  // the meta
  const uint8_t* sub_codes = w.codes(p) + s * static_cast<int64_t>(w.super_bytes());
  if (type == DType::Q6_K) {
    int32_t total = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const int64_t b = s * 8 + sub;
      const BlockQ8_0& xb = x.q8()[t * nb + b];
      const uint8_t* cb = sub_codes + sub * cbytes;
      int32_t ih[2] = {0, 0}, yh[2] = {0, 0};
      for (int c = 0; c < 32; ++c) {
        const int v = (c % 16) / 4, h = c / 16;
        const uint8_t byte = cb[v * 32 + lane * 4 + c % 4];
        const uint8_t top = cb[128 + (v % 2) * 32 + lane * 4 + c % 4];
        const int bits = (top >> (v < 2 ? 0 : 4)) & 15;
        const int code = (h == 0 ? (byte & 15) | (bits & 3) << 4 : (byte >> 4) | (bits >> 2) << 4);
        ih[h] += code * int32_t{xb.qs[c]};
        yh[h] += xb.qs[c];
      }
      for (int h = 0; h < 2; ++h) {
        const auto sc = static_cast<int8_t>(m[16 + (2 * sub + h) * 8 + lane]);
        total += sc * (ih[h] - 32 * yh[h]);
      }
    }
    return std::fma(HalfAt(m + lane * 2) * dx, static_cast<float>(total), acc);
  }
  int32_t total = 0, mins = 0;
  for (int sub = 0; sub < 8; ++sub) {
    const int64_t b = s * 8 + sub;
    const BlockQ8_0& xb = x.q8()[t * nb + b];
    int32_t isum = 0;
    for (int c = 0; c < 32; ++c)
      isum +=
          NibbleCode(sub_codes + sub * cbytes, lane, c, type == DType::Q5_K) * int32_t{xb.qs[c]};
    total += m[32 + sub * 8 + lane] * isum;
    mins += m[96 + sub * 8 + lane] * x.q8_sums()[t * nb + b];
  }
  acc = std::fma(HalfAt(m + lane * 2) * dx, static_cast<float>(total), acc);
  return std::fma(-(HalfAt(m + 16 + lane * 2) * dx), static_cast<float>(mins), acc);
}

void MatmulPanels(const PackedMatrix& w, const Activations& x, float* y, int64_t p0, int64_t p1) {
  const Job j{&w, &x, y};
  const int64_t n = x.n_tokens();
  const int64_t cols = w.cols();
  const DType type = w.type();
  const int64_t nb = cols / kQK8_0;
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = w.codes(p);  // floats: the whole panel; else unit 0's codes
    const auto stride = static_cast<int64_t>(w.unit_stride());
    for (int64_t t = 0; t < n; ++t) {
      float lanes[kP];
      for (int lane = 0; lane < kP; ++lane) {
        float acc = 0.0f;
        if (type == DType::F32 || type == DType::F16 || type == DType::BF16) {
          // Token t in its tile of Activations::f32_tiles (the layout the SIMD path reads).
          const int64_t t0 = t - t % kFloatTokenTile;
          const int64_t T = std::min(kFloatTokenTile, n - t0);
          const float* xt = x.f32_tiles() + t0 * cols + (t - t0);
          for (int64_t k = 0; k < cols; ++k)
            acc = std::fma(WeightAt(type, panel + k * stride, 0, lane), xt[k * T], acc);
        } else if (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K) {
          for (int64_t s = 0; s < cols / kQK_K; ++s)
            acc = SuperBlock(type, w, p, s, lane, x, t, acc);
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            if (type != DType::Q8_0 && type != DType::Q4_0) {
              acc = FormatBlock(type, w, p, b, lane, x, t, acc);
              continue;
            }
            const BlockQ8_0& xb = x.q8()[t * nb + b];
            int32_t isum = 0;
            for (int c = 0; c < 32; ++c) {
              int32_t code;
              if (type == DType::Q8_0) {
                code = static_cast<int8_t>(panel[b * stride + (c / 4) * 32 + lane * 4 + c % 4]);
              } else {
                const int v = (c % 16) / 4;
                const uint8_t byte = panel[b * stride + v * 32 + lane * 4 + c % 4];
                code = (c < 16 ? (byte & 0x0f) : (byte >> 4)) - 8;
              }
              isum += code * int32_t{xb.qs[c]};
            }
            uint16_t dh;
            std::memcpy(&dh, w.meta(p) + b * stride + lane * 2, 2);
            const float s = fp16_to_fp32(dh) * x.q8_scales()[t * nb + b];
            acc = std::fma(s, static_cast<float>(isum), acc);
          }
        }
        lanes[lane] = acc;
      }
      StoreRows(lanes, j, p, t);
    }
  }
}

#endif  // KVASIR_MATMUL_X86

// ------------------------------------------------------------------------------------------------
// Token tiles of the float GEMM (a transpose of T <= 6 rows: pure data movement).

void InterleaveTokens(const float* x, int64_t T, int64_t cols, float* out) {
  int64_t k = 0;
#if KVASIR_MATMUL_X86
  if (T == kFloatTokenTile) {
    // Full tiles (all but the last): 8 columns at a time, an 8x8 transpose of the 6 rows (two
    // zero rows), then 6 floats per column as a 4-float and a 2-float store (AMD's masked stores
    // are microcoded and were the slower choice). The ragged last tile takes the scalar loop.
    static_assert(kFloatTokenTile == 6);
    const __m256 z = _mm256_setzero_ps();
    for (; k + 8 <= cols; k += 8) {
      const __m256 r0 = _mm256_loadu_ps(x + k), r1 = _mm256_loadu_ps(x + cols + k);
      const __m256 r2 = _mm256_loadu_ps(x + 2 * cols + k), r3 = _mm256_loadu_ps(x + 3 * cols + k);
      const __m256 r4 = _mm256_loadu_ps(x + 4 * cols + k), r5 = _mm256_loadu_ps(x + 5 * cols + k);
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      // Rows 4 and 5 only: lanes 0-1 (and 4-5) of each column's upper half.
      const __m256 u4 = _mm256_shuffle_ps(t4, z, 0x44), u5 = _mm256_shuffle_ps(t4, z, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, z, 0x44), u7 = _mm256_shuffle_ps(t5, z, 0xEE);
      const __m256 c[8] = {
          _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
          _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
          _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
          _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      KVASIR_UNROLL
      for (int c8 = 0; c8 < 8; ++c8) {
        float* o = out + (k + c8) * 6;
        _mm_storeu_ps(o, _mm256_castps256_ps128(c[c8]));
        _mm_storel_pi(reinterpret_cast<__m64*>(o + 4), _mm256_extractf128_ps(c[c8], 1));
      }
    }
  }
#endif
  for (; k < cols; ++k) {
    for (int64_t i = 0; i < T; ++i) out[k * T + i] = x[i * cols + k];
  }
}

// ------------------------------------------------------------------------------------------------
// Activation quantization, bit-identical to kvasir::quantize_block_q8_0 (Q8_0) and
// kvasir::quantize_superblock_q8 (Q8_K) for finite input.

// Codes of one 32-float block at v with inverse scale id, and their sums (all 32, first 16).
HWY_INLINE void QuantizeCodes(const float* v, float id, int8_t* qs, int32_t* sum,
                              int32_t* sum_lo) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  constexpr int64_t kBlock = kQK8_0;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto half = hn::Set(df, 0.5f);
  const auto one = hn::Set(df, 1.0f);
  const auto lo = hn::Set(df, -128.0f);
  const auto hi = hn::Set(df, 127.0f);
  const auto vid = hn::Set(df, id);
  auto isum = hn::Zero(di);
  for (int64_t j = 0; j < kBlock; j += N) {
    const auto s = hn::Mul(hn::LoadU(df, v + j), vid);
    // roundf (ties away from zero): truncate, then step away from zero when the dropped
    // fraction (exact: s - trunc(s) needs no rounding) is at least one half.
    auto r = hn::Trunc(s);
    const auto frac = hn::Abs(hn::Sub(s, r));
    r = hn::Add(r, hn::IfThenElseZero(frac >= half, hn::CopySignToAbs(one, s)));
    r = hn::Min(hn::Max(r, lo), hi);
    const auto ri = hn::ConvertTo(di, r);
    isum = hn::Add(isum, ri);
    hn::StoreU(hn::DemoteTo(d8, ri), d8, qs + j);
    // The first half's sum (16-column sub-blocks): the vector width divides 16 here.
    if (j + N == kBlock / 2) *sum_lo = hn::GetLane(hn::SumOfLanes(di, isum));
  }
  *sum = hn::GetLane(hn::SumOfLanes(di, isum));
  if (N > kBlock / 2) {  // vectors wider than half a block (none of the targets built today)
    int32_t l = 0;
    for (int64_t k = 0; k < kBlock / 2; ++k) l += qs[k];
    *sum_lo = l;
  }
}

// max |v[k]| for k < n (a multiple of the vector width).
HWY_INLINE float AbsMax(const float* v, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto vmax = hn::Zero(df);
  for (int64_t j = 0; j < n; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, v + j)));
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
}

void QuantizeQ8Blocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                      int32_t* sums_lo, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* v = x + b * kQK8_0;
    const float d = AbsMax(v, kQK8_0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    q[b].d = fp32_to_fp16(d);
    scales[b] = fp16_to_fp32(q[b].d);
    QuantizeCodes(v, id, q[b].qs, sums + b, sums_lo + b);
  }
}

void QuantizeQ8KSuperblocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                            int32_t* sums_lo, int64_t s0, int64_t s1) {
  constexpr int64_t kSub = kQK_K / kQK8_0;
  for (int64_t s = s0; s < s1; ++s) {
    const float* v = x + s * kQK_K;
    const float d = AbsMax(v, kQK_K) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = fp32_to_fp16(d);
    for (int64_t k = 0; k < kSub; ++k) {
      const int64_t b = s * kSub + k;
      q[b].d = dh;
      scales[b] = d;
      QuantizeCodes(v + k * kQK8_0, id, q[b].qs, sums + b, sums_lo + b);
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

HWY_EXPORT(MatmulPanels);
HWY_EXPORT(QuantizeQ8Blocks);
HWY_EXPORT(QuantizeQ8KSuperblocks);
HWY_EXPORT(InterleaveTokens);
HWY_EXPORT(TargetName);

void matmul_panels(const PackedMatrix& w, const Activations& x, float* y, int64_t p0, int64_t p1) {
  HWY_DYNAMIC_DISPATCH(MatmulPanels)(w, x, y, p0, p1);
}

void quantize_q8_0_blocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                          int32_t* sums_lo, int64_t b0, int64_t b1) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8Blocks)(x, q, scales, sums, sums_lo, b0, b1);
}

void quantize_q8_k_superblocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                               int32_t* sums_lo, int64_t s0, int64_t s1) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8KSuperblocks)(x, q, scales, sums, sums_lo, s0, s1);
}

void interleave_tokens(const float* x, int64_t T, int64_t cols, float* out) {
  HWY_DYNAMIC_DISPATCH(InterleaveTokens)(x, T, cols, out);
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
