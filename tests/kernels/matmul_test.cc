// matmul: correctness against scalar references for every weight dtype and every SIMD target this
// CPU can run, and batch invariance (bit-identical rows whatever the batch and thread count).
#include "kvasir/kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "matmul_test_util.h"
#include "test_util/random.h"

namespace kvasir::cpu {
namespace {

using test_util::random_normal;

constexpr DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

bool is_quant(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0;
}

std::vector<std::string> targets_to_test() {
  return simd_targets();
}

// ---- correctness ----

// Float-family weights vs a double-precision dot of the same (exactly dequantized) weights.
// Any summation order of K float products has error <= K * u * sum|w_k x_k| (u = 2^-24: each
// partial sum is rounded once and is part of at most K additions; FMA rounds the product
// together with the add, never more). The kernel accumulates sequentially (depth K), which this
// order-independent bound covers; a missing or doubled term is far larger.
void check_float_family(DType t, int64_t rows, int64_t cols, int64_t n_tokens, ThreadPool& pool) {
  const Weights w = make_weights(t, rows, cols, 11);
  const std::vector<float> x = random_normal(n_tokens * cols, 12);
  const std::vector<float> y = run_matmul(w, x.data(), n_tokens, pool);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        dot += double{wr[k]} * x[tok * cols + k];
        mag += std::fabs(double{wr[k]} * x[tok * cols + k]);
      }
      const double tol = static_cast<double>(cols) * std::ldexp(1.0, -24) * mag;
      ASSERT_NEAR(y[tok * rows + r], dot, tol) << dtype_name(t) << " r=" << r << " t=" << tok;
    }
  }
}

// Quantized weights, two references:
//  (1) exact: sum over blocks of d_w * d_x * sum(q_w * q_x), with x quantized by the reference
//      Q8_0 quantizer (integer part exact, computed in double). The kernel rounds d_w * d_x once
//      (u), converts the exact integer block sums (|isum| < 2^24, exact) and accumulates nb block
//      terms with FMAs: error <= (nb + 5) * u * sum_b |d_w d_x| * sum_j |q_w q_x| (generous:
//      nb + 1 roundings at most).
//  (2) against the double dot of dequantized W with the unquantized float x: the activation
//      quantization error dominates: |x - d_x q_x| <= 0.5625 d_x (half a step plus fp16 rounding
//      of the scale, 127 * 2^-11 d_x; see quantize_test), so the bound is
//      sum_k |w_k| * 0.5625 * d_x(block of k), plus the float accumulation bound of (1).
void check_quantized(DType t, int64_t rows, int64_t cols, int64_t n_tokens, ThreadPool& pool) {
  const Weights w = make_weights(t, rows, cols, 21);
  const std::vector<float> x = random_normal(n_tokens * cols, 22);
  const std::vector<float> y = run_matmul(w, x.data(), n_tokens, pool);
  const int64_t nb = cols / 32;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_tokens * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n_tokens * cols);
  std::vector<float> wr(static_cast<size_t>(cols));
  std::vector<float> wcode(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    // Weight codes q_w and scales d_w, read back from the dequantized values.
    const auto* wrow = w.bytes.data() + static_cast<size_t>(r) * row_bytes(t, cols);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
      double exact = 0, exact_mag = 0, dot = 0, act_err = 0;
      for (int64_t b = 0; b < nb; ++b) {
        float dw;
        int qw[32];
        if (t == DType::Q8_0) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(wrow) + b;
          dw = fp16_to_fp32(blk->d);
          for (int j = 0; j < 32; ++j) qw[j] = blk->qs[j];
        } else {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(wrow) + b;
          dw = fp16_to_fp32(blk->d);
          for (int j = 0; j < 16; ++j) {
            qw[j] = (blk->qs[j] & 0x0f) - 8;
            qw[j + 16] = (blk->qs[j] >> 4) - 8;
          }
        }
        const BlockQ8_0& xb = xq[tok * nb + b];
        const double dx = fp16_to_fp32(xb.d);
        int64_t isum = 0, imag = 0;
        for (int j = 0; j < 32; ++j) {
          isum += qw[j] * xb.qs[j];
          imag += std::abs(qw[j] * xb.qs[j]);
          ASSERT_EQ(wr[b * 32 + j], static_cast<float>(qw[j]) * dw);  // dequantizer agrees
          const double xv = x[tok * cols + b * 32 + j];
          dot += double{wr[b * 32 + j]} * xv;
          act_err += std::fabs(double{wr[b * 32 + j]}) * 0.5625 * dx;
        }
        exact += double{dw} * dx * static_cast<double>(isum);
        exact_mag += std::fabs(double{dw} * dx) * static_cast<double>(imag);
      }
      const double acc_tol = static_cast<double>(nb + 5) * std::ldexp(1.0, -24) * exact_mag;
      const double got = y[tok * rows + r];
      ASSERT_NEAR(got, exact, acc_tol) << dtype_name(t) << " r=" << r << " t=" << tok;
      ASSERT_NEAR(got, dot, act_err + acc_tol) << dtype_name(t) << " r=" << r << " t=" << tok;
    }
  }
}

TEST_P(PerTarget, MatchesScalarReference) {
  ThreadPool pool(2);
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  for (DType t : kAllTypes) {
    // Odd shapes: rows not a multiple of any tile, cols not a multiple of 256 (nor, for floats,
    // of the vector width), token counts around the tile sizes.
    const Shape shapes_f[] = {{37, 77, 1}, {37, 77, 5}, {64, 320, 3}, {19, 8, 4}, {5, 1, 2}};
    const Shape shapes_q[] = {{37, 96, 1}, {37, 96, 5}, {64, 544, 3}, {3, 32, 9}, {70, 96, 2}};
    if (is_quant(t)) {
      for (const Shape& s : shapes_q) check_quantized(t, s.rows, s.cols, s.n_tokens, pool);
    } else {
      for (const Shape& s : shapes_f) check_float_family(t, s.rows, s.cols, s.n_tokens, pool);
    }
  }
}

// ---- the arithmetic contract (matmul.h), bit for bit ----

// The scalar loop of matmul.h's contract, over the ggml row layout (independent of the packing):
// every target, tile and thread count must produce exactly these bits.
std::vector<float> contract_reference(const Weights& w, const std::vector<float>& x,
                                      int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  if (!is_quant(w.type)) {
    std::vector<float> wr(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w.matrix(), r, wr.data());  // exact for F32, F16 and BF16
      for (int64_t t = 0; t < n_tokens; ++t) {
        float acc = 0.0f;
        for (int64_t k = 0; k < cols; ++k) acc = std::fma(wr[k], x[t * cols + k], acc);
        y[t * rows + r] = acc;
      }
    }
    return y;
  }
  const int64_t nb = cols / 32;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_tokens * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n_tokens * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        uint16_t d;
        for (int j = 0; j < 32; ++j) {
          int32_t q;
          if (w.type == DType::Q8_0) {
            const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
            q = blk->qs[j];
            d = blk->d;
          } else {
            const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
            q = (j < 16 ? (blk->qs[j] & 0x0f) : (blk->qs[j - 16] >> 4)) - 8;
            d = blk->d;
          }
          isum += q * xq[t * nb + b].qs[j];
        }
        const float s = fp16_to_fp32(d) * fp16_to_fp32(xq[t * nb + b].d);
        acc = std::fma(s, static_cast<float>(isum), acc);
      }
      y[t * rows + r] = acc;
    }
  }
  return y;
}

TEST_P(PerTarget, BitIdenticalToTheContractLoop) {
  ThreadPool pool(3);
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  // Rows leaving partial panels and odd panel counts; token counts covering every tile width
  // (1..6) and their tails; float columns that are no multiple of anything.
  // {40, 320, 64} is large enough for the activations to be prepared (tiled or quantized) on the
  // pool; {21, 1100, 13} has long rows (activation tiles of 26 KB) with partial panels, full and
  // ragged token tiles.
  // {30, 40, 7} and {60, 40, 6}: a 4-panel (512-bit on AVX-512) tile whose last panel is partial.
  // (Vectors: the two lists differ in length, and `?:` below picks one.)
  const std::vector<Shape> shapes_f = {{37, 77, 1}, {70, 33, 13},  {300, 160, 7},  {8, 5, 6},
                                       {3, 1, 2},   {40, 320, 64}, {21, 1100, 13}, {70, 33, 2},
                                       {70, 33, 5}, {30, 40, 7},   {60, 40, 6}};
  const std::vector<Shape> shapes_q = {{37, 96, 1},    {70, 64, 13}, {300, 544, 7},
                                       {8, 32, 4},     {3, 32, 5},   {40, 320, 64},
                                       {21, 1120, 13}, {70, 64, 2},  {70, 64, 5}};
  for (DType t : kAllTypes) {
    for (const Shape& s : is_quant(t) ? shapes_q : shapes_f) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(s.rows) + "x" +
                   std::to_string(s.cols) + " tokens=" + std::to_string(s.n_tokens));
      const Weights w = make_weights(t, s.rows, s.cols, 101);
      const std::vector<float> x = random_normal(s.n_tokens * s.cols, 102);
      const std::vector<float> want = contract_reference(w, x, s.n_tokens);
      const std::vector<float> got = run_matmul(w, x.data(), s.n_tokens, pool);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    }
  }
}

// A weight code of -128 (valid Q8_0, though ggml's quantizer never writes it) and extreme
// activations: the integer dot products must neither saturate nor overflow.
TEST_P(PerTarget, ExtremeCodesDoNotSaturate) {
  ThreadPool pool(1);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    Weights w = make_weights(t, 16, 64, 111);
    for (int64_t r = 0; r < w.rows; ++r) {
      auto* row = w.bytes.data() + static_cast<size_t>(r) * row_bytes(t, w.cols);
      for (int b = 0; b < 2; ++b) {
        if (t == DType::Q8_0) {
          auto* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
          for (int j = 0; j < 32; ++j) blk->qs[j] = static_cast<int8_t>(r % 2 ? -128 : 127);
        } else {
          auto* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
          for (int j = 0; j < 16; ++j) blk->qs[j] = r % 2 ? 0x00 : 0xff;  // codes -8 or +7
        }
      }
    }
    // Activations that quantize to +-127 everywhere, with both signs.
    std::vector<float> x(2 * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 64 == 0) ? 1.0f : -1.0f;
    const std::vector<float> want = contract_reference(w, x, 2);
    const std::vector<float> got = run_matmul(w, x.data(), 2, pool);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << dtype_name(t);
  }
}

// ---- batch invariance ----

// y[t][r] must be bit-identical (memcmp) whether token t is computed alone, in a batch, with other
// neighbours, at another position, and with 1 or 3 threads.
void check_batch_invariance(DType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
               std::to_string(cols) + " tokens=" + std::to_string(n_tokens));
  const Weights w = make_weights(t, rows, cols, 31);
  const std::vector<float> x = random_normal(n_tokens * cols, 32);
  ThreadPool one(1), three(3);
  const std::vector<float> batch = run_matmul(w, x.data(), n_tokens, one);
  const std::vector<float> batch3 = run_matmul(w, x.data(), n_tokens, three);
  ASSERT_EQ(std::memcmp(batch.data(), batch3.data(), batch.size() * 4), 0) << "1 vs 3 threads";

  // Each token alone, with both pools.
  for (int64_t tok = 0; tok < n_tokens; ++tok) {
    for (ThreadPool* pool : {&one, &three}) {
      const std::vector<float> alone = run_matmul(w, x.data() + tok * cols, 1, *pool);
      ASSERT_EQ(std::memcmp(alone.data(), batch.data() + tok * rows, rows * 4), 0)
          << "token " << tok << " alone, " << pool->size() << " threads";
    }
  }

  // The same tokens reversed, with fresh random tokens interleaved: different tile neighbours and
  // tile positions (including the tail tile).
  const std::vector<float> other = random_normal(n_tokens * cols, 33);
  std::vector<float> mixed;
  std::vector<int64_t> origin;  // index into x, or -1 for a foreign token
  for (int64_t i = n_tokens - 1; i >= 0; --i) {
    mixed.insert(mixed.end(), x.begin() + i * cols, x.begin() + (i + 1) * cols);
    origin.push_back(i);
    if (i % 2 == 0) {
      mixed.insert(mixed.end(), other.begin() + i * cols, other.begin() + (i + 1) * cols);
      origin.push_back(-1);
    }
  }
  const auto n_mixed = static_cast<int64_t>(origin.size());
  const std::vector<float> ym = run_matmul(w, mixed.data(), n_mixed, three);
  for (int64_t i = 0; i < n_mixed; ++i) {
    if (origin[i] < 0) continue;
    ASSERT_EQ(std::memcmp(ym.data() + i * rows, batch.data() + origin[i] * rows, rows * 4), 0)
        << "token " << origin[i] << " at position " << i << " of a mixed batch";
  }
}

TEST_P(PerTarget, BatchInvariant) {
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  // Rows not multiples of the 4-row tile nor of the 16-row chunk; cols not multiples of 256 (and
  // for float weights not of the vector width: exercises the scalar tail); token counts that
  // leave a tail tile for both the 2- and 4-token tiles. 300 rows x 3 threads gives several
  // chunks per thread.
  const Shape shapes_f[] = {{37, 77, 7}, {300, 160, 5}, {6, 16, 3}};
  const Shape shapes_q[] = {{37, 96, 7}, {300, 544, 5}, {6, 32, 3}};
  for (DType t : kAllTypes) {
    for (const Shape& s : is_quant(t) ? shapes_q : shapes_f) {
      check_batch_invariance(t, s.rows, s.cols, s.n_tokens);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matmul, PerTarget, ::testing::ValuesIn(targets_to_test()),
                         [](const auto& info) { return info.param; });

// Larger GEMM: multiple L2 chunks and many token tiles, checked against single-token GEMVs.
TEST(Matmul, PrefillEqualsPerTokenGemv) {
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::F16}) {
    const int64_t rows = 512, cols = 1024, n = 33;
    const Weights w = make_weights(t, rows, cols, 41);
    const std::vector<float> x = random_normal(n * cols, 42);
    const std::vector<float> y = run_matmul(w, x.data(), n, pool);
    for (int64_t tok = 0; tok < n; tok += 8) {
      const std::vector<float> alone = run_matmul(w, x.data() + tok * cols, 1, pool);
      ASSERT_EQ(std::memcmp(alone.data(), y.data() + tok * rows, rows * 4), 0) << tok;
    }
  }
}

// ---- activations ----

TEST(Activations, QuantizationMatchesReferenceQuantizer) {
  ThreadPool pool(2);
  for (const std::string& target : simd_targets()) {
    force_simd_target(target);
    const int64_t n = 40, cols = 512;  // 640 blocks: above the threshold for threading
    std::vector<float> x = random_normal(n * cols, 51, 3.0f);
    // Exact ties after scaling: a block whose amax is 127 has d = 1, so k + 0.5 rounds away from 0.
    for (int j = 0; j < 32; ++j) x[j] = (j == 0) ? 127.0f : static_cast<float>(j - 16) + 0.5f;
    for (int j = 32; j < 64; ++j) x[j] = 0.0f;
    Activations a;
    a.prepare(x.data(), n, cols, DType::Q4_0, pool);
    std::vector<BlockQ8_0> ref(static_cast<size_t>(n * cols / 32));
    quantize_row(DType::Q8_0, x.data(), ref.data(), n * cols);
    ASSERT_EQ(std::memcmp(a.q8(), ref.data(), ref.size() * sizeof(BlockQ8_0)), 0) << target;
    for (size_t b = 0; b < ref.size(); ++b) {
      ASSERT_EQ(a.q8_scales()[b], fp16_to_fp32(ref[b].d));
      int32_t sum = 0, lo = 0;
      for (int j = 0; j < 32; ++j) sum += ref[b].qs[j];
      for (int j = 0; j < 16; ++j) lo += ref[b].qs[j];
      ASSERT_EQ(a.q8_sums()[b], sum) << "block " << b;
      ASSERT_EQ(a.q8_sums_lo()[b], lo) << "block " << b;
    }
    EXPECT_EQ(a.n_tokens(), n);
    EXPECT_EQ(a.prepared_for(), DType::Q4_0);
  }
  force_simd_target("");
}

// Q8_K activations (Q4_K, Q5_K, Q6_K weights): every SIMD target's quantizer gives the reference's
// codes and float scale per 256-column super-block, and the blocks' code sums.
TEST(Activations, SuperBlockQuantizationMatchesReferenceQuantizer) {
  ThreadPool pool(2);
  for (const std::string& target : simd_targets()) {
    force_simd_target(target);
    const int64_t n = 40, cols = 512;  // 640 blocks: above the threshold for threading
    std::vector<float> x = random_normal(n * cols, 53, 3.0f);
    // Ties after scaling: a super-block whose amax is 127 has d = 1, so k + 0.5 rounds away from 0;
    // and an all-zero super-block (d = 0, codes 0).
    for (int j = 0; j < 256; ++j) x[j] = (j == 0) ? 127.0f : static_cast<float>(j % 64 - 32) + 0.5f;
    for (int j = 256; j < 512; ++j) x[j] = 0.0f;
    Activations a;
    a.prepare(x.data(), n, cols, DType::Q6_K, pool);
    EXPECT_EQ(a.format(), ActivationFormat::kQ8_K);
    std::vector<int8_t> codes(256);
    for (int64_t s = 0; s < n * cols / 256; ++s) {
      const float d = quantize_superblock_q8(x.data() + s * 256, codes.data());
      for (int k = 0; k < 8; ++k) {
        const int64_t b = s * 8 + k;
        ASSERT_EQ(std::memcmp(a.q8()[b].qs, codes.data() + 32 * k, 32), 0) << target << " " << b;
        ASSERT_EQ(a.q8_scales()[b], d) << b;
        int32_t sum = 0, lo = 0;
        for (int j = 0; j < 32; ++j) sum += codes[32 * k + j];
        for (int j = 0; j < 16; ++j) lo += codes[32 * k + j];
        ASSERT_EQ(a.q8_sums()[b], sum) << "block " << b;
        ASSERT_EQ(a.q8_sums_lo()[b], lo) << "block " << b;
      }
    }
    EXPECT_EQ(a.q8_scales()[0], 1.0f);
    EXPECT_EQ(a.q8()[0].qs[1], -31);  // -30.5 rounds away from zero
    EXPECT_EQ(a.q8_scales()[8], 0.0f);
  }
  force_simd_target("");
}

TEST(Activations, ReusedAcrossMatmulsOfTheSameFamily) {
  ThreadPool pool(1);
  const Weights w8 = make_weights(DType::Q8_0, 8, 64, 61);
  const Weights w4 = make_weights(DType::Q4_0, 8, 64, 62);
  const std::vector<float> x = random_normal(3 * 64, 63);
  Activations a;
  a.prepare(x.data(), 3, 64, DType::Q8_0, pool);
  std::vector<float> y(24);
  matmul(w4.matrix(), a, y.data(), pool);  // Q8_0-prepared activations serve Q4_0 too
  EXPECT_EQ(y, run_matmul(w4, x.data(), 3, pool));
  matmul(w8.matrix(), a, y.data(), pool);
  EXPECT_EQ(y, run_matmul(w8, x.data(), 3, pool));
  // Q8_K activations serve Q4_K, Q5_K and Q6_K alike.
  const std::vector<float> xk = random_normal(3 * 256, 64);
  Activations k;
  k.prepare(xk.data(), 3, 256, DType::Q4_K, pool);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const Weights wk = make_weights(t, 8, 256, 65);
    matmul(wk.matrix(), k, y.data(), pool);
    EXPECT_EQ(y, run_matmul(wk, xk.data(), 3, pool)) << dtype_name(t);
  }
}

// ---- errors and helpers ----

TEST(Matmul, RejectsBadInput) {
  ThreadPool pool(1);
  const Weights w = make_weights(DType::Q4_0, 4, 64, 71);
  const std::vector<float> x(64 * 2, 1.0f);
  std::vector<float> y(8);
  Activations f32;
  f32.prepare(x.data(), 2, 64, DType::F32, pool);
  EXPECT_THROW(matmul(w.matrix(), f32, y.data(), pool), Error);  // not quantized
  Activations wrong_cols;
  wrong_cols.prepare(x.data(), 1, 128, DType::Q4_0, pool);
  EXPECT_THROW(matmul(w.matrix(), wrong_cols, y.data(), pool), Error);
  // A format kvasir does not compute with (checked before any data is read).
  MatrixView unsupported{DType::IQ2_XXS, 4, 256, w.bytes.data()};
  EXPECT_THROW(matmul(unsupported, x.data(), 1, y.data(), pool), Error);
  // A k-quant whose rows are not a multiple of its 256-element super-block.
  MatrixView ragged{DType::Q4_K, 4, 64, w.bytes.data()};
  EXPECT_THROW(matmul(ragged, x.data(), 1, y.data(), pool), Error);
  Activations a;
  EXPECT_THROW(a.prepare(x.data(), 1, 48, DType::Q8_0, pool), Error);  // not a block multiple
  // Q8_K activations need whole 256-column super-blocks.
  const std::vector<float> x512(512, 1.0f);
  EXPECT_THROW(a.prepare(x512.data(), 1, 96, DType::Q4_K, pool), Error);
  // Q8_0 activations given to a weight that reads Q8_K ones, and the reverse: refused by name.
  const Weights wk = make_weights(DType::Q4_K, 8, 256, 72);
  Activations q80;
  q80.prepare(x512.data(), 1, 256, DType::Q4_0, pool);
  std::vector<float> yk(8);
  try {
    matmul(wk.matrix(), q80, yk.data(), pool);
    ADD_FAILURE() << "q8_0 activations accepted by a q4_k weight";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_k"), std::string::npos) << e.what();
  }
  Activations q8k;
  q8k.prepare(x512.data(), 1, 256, DType::Q6_K, pool);
  const Weights w40 = make_weights(DType::Q4_0, 8, 256, 73);
  EXPECT_THROW(matmul(w40.matrix(), q8k, yk.data(), pool), Error);
  EXPECT_THROW(dequantize_row(w.matrix(), 4, y.data()), Error);
  EXPECT_THROW(force_simd_target("NOT_A_TARGET"), Error);
  try {
    matmul(w.matrix(), f32, y.data(), pool);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
  }
}

TEST(Matmul, EmptyBatchIsANoOp) {
  ThreadPool pool(2);
  const Weights w = make_weights(DType::F16, 4, 16, 81);
  float sentinel = 42.0f;
  matmul(w.matrix(), nullptr, 0, &sentinel, pool);
  EXPECT_EQ(sentinel, 42.0f);
}

TEST(Matmul, DequantizeRowMatchesReference) {
  for (DType t : kAllTypes) {
    const Weights w = make_weights(t, 3, 64, 91);
    std::vector<float> got(64), want(64);
    dequantize_row(w.matrix(), 2, got.data());
    kvasir::dequantize_row(t, w.bytes.data() + 2 * row_bytes(t, 64), want.data(), 64);
    EXPECT_EQ(got, want) << dtype_name(t);
  }
}

TEST(Matmul, ReportsSimdTarget) {
  const std::string name = simd_target_name();
  const std::vector<std::string> all = simd_targets();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(name, all.front());  // dispatch picks the best runnable target
  force_simd_target(all.back());
  EXPECT_EQ(std::string(simd_target_name()), all.back());
  force_simd_target("");
  EXPECT_EQ(std::string(simd_target_name()), name);
}

}  // namespace
}  // namespace kvasir::cpu
