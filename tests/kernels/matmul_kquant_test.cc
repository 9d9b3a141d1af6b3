// matmul on the GGUF formats beyond Q8_0/Q4_0: the Q4_K, Q5_K and Q6_K kernels (on Q8_K
// activations) against matmul.h's contract (bit for bit, every SIMD target, every tile and batch
// shape) and against the double-precision dot of the dequantized weights (the other formats:
// matmul_formats_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/tensor/quant_k.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "matmul_test_util.h"
#include "test_util/random.h"

namespace kvasir::cpu {
namespace {

using test_util::random_normal;

// Q4_K sub-block j (0..7) of a ggml block: scale and min, decoded from the 12-byte 6-bit field
// (ggml-common.h's layout: sub-blocks 0-3 in the low 6 bits of bytes 0-3 / 4-7; 4-7 split
// between the low/high nibbles of bytes 8-11 and the top 2 bits of bytes 0-7).
void q4k_scale_min(const BlockQ4_K& b, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = b.scales[j] & 63;
    *m = b.scales[j + 4] & 63;
  } else {
    *sc = (b.scales[j + 4] & 0x0f) | ((b.scales[j - 4] >> 6) << 4);
    *m = (b.scales[j + 4] >> 4) | ((b.scales[j] >> 6) << 4);
  }
}
int q4k_code(const BlockQ4_K& b, int e) {  // element e (0..255) of the super-block
  const int c = e / 64, l = e % 64;
  return l < 32 ? (b.qs[32 * c + l] & 0x0f) : (b.qs[32 * c + l - 32] >> 4);
}

// Q5_K: the same scales, mins and nibble layout as Q4_K (the first fields of the block coincide),
// plus a fifth bit: bit e / 32 of qh[e % 32].
BlockQ4_K q4k_view(const BlockQ5_K& b) {
  BlockQ4_K v;
  v.d = b.d;
  v.dmin = b.dmin;
  std::memcpy(v.scales, b.scales, sizeof v.scales);
  std::memcpy(v.qs, b.qs, sizeof v.qs);
  return v;
}

// matmul.h's Q4_K / Q5_K contract as a scalar loop over ggml's row layout (independent of the
// packing), on Q8_K activations.
std::vector<float> q4k_contract(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols, ns = cols / 256;
  const SuperActivations xa = quantize_super(x, n_tokens, cols);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  const bool q5 = w.type == DType::Q5_K;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* rowp = w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t s = 0; s < ns; ++s) {
        BlockQ4_K blk;
        const BlockQ5_K* b5 = nullptr;
        if (q5) {
          b5 = reinterpret_cast<const BlockQ5_K*>(rowp) + s;
          blk = q4k_view(*b5);
        } else {
          blk = reinterpret_cast<const BlockQ4_K*>(rowp)[s];
        }
        int32_t total = 0, mins = 0;
        for (int sub = 0; sub < 8; ++sub) {
          int sc, m;
          q4k_scale_min(blk, sub, &sc, &m);
          int32_t isum = 0, xsum = 0;
          for (int j = 0; j < 32; ++j) {
            const int e = sub * 32 + j;
            int code = q4k_code(blk, e);
            if (q5) code |= ((b5->qh[e % 32] >> (e / 32)) & 1) << 4;
            const int8_t q = xa.code(t, s * 256 + e);
            isum += code * q;
            xsum += q;
          }
          total += sc * isum;
          mins += m * xsum;
        }
        const float dx = xa.scale(t, s * 256);
        acc = std::fma(fp16_to_fp32(blk.d) * dx, static_cast<float>(total), acc);
        acc = std::fma(-(fp16_to_fp32(blk.dmin) * dx), static_cast<float>(mins), acc);
      }
      y[t * rows + r] = acc;
    }
  }
  return y;
}

// Q6_K element e (0..255) of a ggml block: code 0..63 (ggml-common.h: ql holds the low 4 bits,
// qh the top 2, in 128-element halves of four 32-element quarters) and its 16-column scale.
int q6k_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
  const uint8_t* ql = b.ql + 64 * h;
  const uint8_t* qh = b.qh + 32 * h;
  const int low = quarter == 0   ? ql[l] & 15
                  : quarter == 1 ? ql[l + 32] & 15
                  : quarter == 2 ? ql[l] >> 4
                                 : ql[l + 32] >> 4;
  return low | ((qh[l] >> (2 * quarter)) & 3) << 4;
}

// matmul.h's Q6_K contract as a scalar loop over ggml's row layout, on Q8_K activations.
std::vector<float> q6k_contract(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols, ns = cols / 256;
  const SuperActivations xa = quantize_super(x, n_tokens, cols);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = reinterpret_cast<const BlockQ6_K*>(
        w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t s = 0; s < ns; ++s) {
        const BlockQ6_K& blk = row[s];
        int32_t total = 0;
        for (int g = 0; g < 16; ++g) {  // ggml's 16-column sub-blocks
          int32_t isum = 0, ysum = 0;
          for (int c = 0; c < 16; ++c) {
            const int8_t q = xa.code(t, s * 256 + 16 * g + c);
            isum += q6k_code(blk, 16 * g + c) * q;
            ysum += q;
          }
          total += blk.scales[g] * (isum - 32 * ysum);
        }
        acc = std::fma(fp16_to_fp32(blk.d) * xa.scale(t, s * 256), static_cast<float>(total), acc);
      }
      y[t * rows + r] = acc;
    }
  }
  return y;
}

using Contract = std::vector<float> (*)(const Weights&, const std::vector<float>&, int64_t);

// Partial panels, odd panel counts, every token tile width and tail; {300, 768, 64} is large
// enough for the activations to be quantized on the pool and for several chunks per thread.
void check_contract(DType t, Contract contract, uint32_t seed) {
  ThreadPool pool(3);
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  const Shape shapes[] = {{37, 256, 1}, {70, 512, 13},  {300, 768, 7}, {8, 256, 4},
                          {3, 256, 5},  {300, 768, 64}, {21, 2304, 3}, {70, 512, 2},
                          {70, 512, 5}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(s.rows) + "x" +
                 std::to_string(s.cols) + " tokens=" + std::to_string(s.n_tokens));
    const Weights w = make_weights(t, s.rows, s.cols, seed);
    const std::vector<float> x = random_normal(s.n_tokens * s.cols, seed + 1);
    const std::vector<float> want = contract(w, x, s.n_tokens);
    const std::vector<float> got = run_matmul(w, x.data(), s.n_tokens, pool);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

TEST_P(PerTarget, Q6KBitIdenticalToTheContractLoop) {
  check_contract(DType::Q6_K, q6k_contract, 211);
}

// The contract's codes and scales are ggml's: the kernel's result equals the dot of the
// dequantized weights with the unquantized activations up to the Q8_K activation rounding and
// float rounding (see Q4KMatchesDequantizedDot).
TEST_P(PerTarget, Q6KMatchesDequantizedDot) {
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 768, n = 3, ns = cols / 256;
  const Weights w = make_weights(DType::Q6_K, rows, cols, 311);
  const std::vector<float> x = random_normal(n * cols, 312);
  const std::vector<float> y = run_matmul(w, x.data(), n, pool);
  const SuperActivations xa = quantize_super(x, n, cols);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0, act_err = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double dx = xa.scale(t, k);
        dot += double{wr[k]} * x[t * cols + k];
        act_err += std::fabs(double{wr[k]}) * 0.5 * dx;  // half a step (the scale is a float)
        mag += std::fabs(double{wr[k]}) * (std::fabs(double{x[t * cols + k]}) + dx);
      }
      // The integer sum I is exact; float(I) rounds once, the scale product and the FMA once
      // each, per super-block, plus the dequantized weights' own float rounding (2 u). I carries
      // the -32 offset: its magnitude is bounded by 64 / |code - 32| times the weight's, so
      // 64 * sum |d sc| |y| covers it.
      const double tol =
          act_err + static_cast<double>(4 * ns + 8) * std::ldexp(1.0, -24) * 64 * mag;
      ASSERT_NEAR(y[t * rows + r], dot, tol) << "r=" << r << " t=" << t;
    }
  }
}

TEST_P(PerTarget, Q5KBitIdenticalToTheContractLoop) {
  check_contract(DType::Q5_K, q4k_contract, 221);
}

// The Q5_K contract's terms against the dequantized weights (ggml's formula, dequantize_row): the
// contract loop computed in double from the same codes must equal the double dot of dequantized
// weights and the Q8_K-rounded activations up to float rounding (the products d * d_x,
// dmin * d_x, float(I), float(M) and the FMAs).
TEST(MatmulKQuant, Q5KDequantizedDotMatchesTheContractTerms) {
  ThreadPool pool(1);
  const int64_t rows = 9, cols = 512;
  const Weights w = make_weights(DType::Q5_K, rows, cols, 231);
  const std::vector<float> x = random_normal(cols, 232);
  const SuperActivations xa = quantize_super(x, 1, cols);
  const std::vector<float> y = run_matmul(w, x.data(), 1, pool);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    double dot = 0, mag = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const double xv = double{xa.scale(0, k)} * xa.code(0, k);
      dot += double{wr[k]} * xv;
      mag += std::fabs(double{wr[k]} * xv) + std::fabs(xv);
    }
    ASSERT_NEAR(y[r], dot, 1e-4 * mag) << r;  // a few roundings per super-block (u = 6e-8)
  }
}

TEST_P(PerTarget, Q4KBitIdenticalToTheContractLoop) {
  check_contract(DType::Q4_K, q4k_contract, 201);
}

// Against the double-precision dot of the dequantized weights (dequantize_row: ggml's formula)
// with the unquantized activations. The contract's integer sums are exact; the error is the
// activation quantization, |x - d_x q_x| <= d_x / 2 (half a step: the Q8_K scale is a float), and
// float rounding: per super-block float(I), float(M), the two scale products and the two FMAs
// round once each (u = 2^-24) against magnitudes bounded by sum |w_k| |x_k| plus the min terms,
// plus the dequantized weights' own rounding; (4 ns + 8) u times that magnitude is a generous
// bound. A wrong code, scale, min or sub-block index is off by far more.
TEST_P(PerTarget, Q4KMatchesDequantizedDot) {
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 768, n = 3, ns = cols / 256;
  const Weights w = make_weights(DType::Q4_K, rows, cols, 301);
  const std::vector<float> x = random_normal(n * cols, 302);
  const std::vector<float> y = run_matmul(w, x.data(), n, pool);
  const SuperActivations xa = quantize_super(x, n, cols);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    const auto* row = reinterpret_cast<const BlockQ4_K*>(
        w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols));
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0, act_err = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double dx = xa.scale(t, k);
        dot += double{wr[k]} * x[t * cols + k];
        act_err += std::fabs(double{wr[k]}) * 0.5 * dx;
        // The two partial terms the kernel adds: d_b * code * x and m_b * x.
        const BlockQ4_K& blk = row[k / 256];
        int sc, m;
        q4k_scale_min(blk, static_cast<int>((k % 256) / 32), &sc, &m);
        const double xv = std::fabs(double{x[t * cols + k]}) + dx;
        mag += (fp16_to_fp32(blk.d) * sc * q4k_code(blk, static_cast<int>(k % 256)) +
                fp16_to_fp32(blk.dmin) * m) *
               xv;
      }
      const double tol = act_err + static_cast<double>(4 * ns + 8) * std::ldexp(1.0, -24) * mag;
      ASSERT_NEAR(y[t * rows + r], dot, tol) << "r=" << r << " t=" << t;
    }
  }
}

// Q4_K, Q5_K and Q6_K panels are whole super-blocks (a head of meta, then codes; a group's 4
// panels interleaved: one sequential stream per group) at about the file's bits per weight.
TEST(MatmulKQuant, PackedInSuperBlocksAtTheirOwnSize) {
  ThreadPool pool(1);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Weights w = make_weights(t, 16, 512, 401);
    const PackedMatrix m(w.matrix(), pool);
    EXPECT_EQ(m.meta(0), nullptr);  // the meta is inside each super-block
    EXPECT_EQ(m.super_bytes(), kSuperMetaBytes + 8 * m.block_code_bytes());
    EXPECT_EQ(m.super_bytes() % 32, 0u);  // the codes stay 32-byte aligned
    // Per panel: its 2 super-blocks one after the other (head, then 8 blocks of codes each); the
    // 4 panels of a group one after the other.
    EXPECT_TRUE(m.per_panel());
    EXPECT_EQ(m.group_bytes(), (kGroupPanels * 2 * m.super_bytes() + 63) / 64 * 64);
    EXPECT_EQ(m.codes(0), m.head(0) + kSuperMetaBytes);
    EXPECT_EQ(m.head(1), m.head(0) + 2 * m.super_bytes());
    EXPECT_EQ(m.codes(1), m.codes(0) + 2 * m.super_bytes());
    EXPECT_EQ(m.head(4), m.head(0) + m.group_bytes());
    EXPECT_EQ(m.block_stride(), m.block_code_bytes());
    const double file = static_cast<double>(row_bytes(t, 4096)) * 64;
    const double packed = static_cast<double>(packed_bytes(t, 64, 4096));
    EXPECT_GE(packed, file);
    EXPECT_LE(packed, file * 1.05);
  }
}

// Instantiated per SIMD target with the other PerTarget tests, in matmul_test.cc.

}  // namespace
}  // namespace kvasir::cpu
