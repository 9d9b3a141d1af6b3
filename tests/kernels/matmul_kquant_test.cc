// matmul on the GGUF formats beyond Q8_0/Q4_0: the Q4_K, Q5_K and Q6_K kernels against matmul.h's
// contract (bit for bit, every SIMD target, every tile and batch shape) and against the
// double-precision dot of the dequantized weights (the other formats: matmul_formats_test.cc).
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
// packing).
std::vector<float> q4k_contract(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_tokens * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n_tokens * cols);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  const bool q5 = w.type == DType::Q5_K;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* rowp = w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        BlockQ4_K blk;
        const BlockQ5_K* b5 = nullptr;
        if (q5) {
          b5 = reinterpret_cast<const BlockQ5_K*>(rowp) + b / 8;
          blk = q4k_view(*b5);
        } else {
          blk = reinterpret_cast<const BlockQ4_K*>(rowp)[b / 8];
        }
        const int sub = static_cast<int>(b % 8);
        int sc, m;
        q4k_scale_min(blk, sub, &sc, &m);
        const BlockQ8_0& xb = xq[t * nb + b];
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < 32; ++j) {
          const int e = sub * 32 + j;
          int code = q4k_code(blk, e);
          if (q5) code |= ((b5->qh[e % 32] >> (e / 32)) & 1) << 4;
          isum += code * xb.qs[j];
          xsum += xb.qs[j];
        }
        const float dx = fp16_to_fp32(xb.d);
        const float db = fp16_to_fp32(blk.d) * static_cast<float>(sc);
        const float mb = fp16_to_fp32(blk.dmin) * static_cast<float>(m);
        acc = std::fma(db * dx, static_cast<float>(isum), acc);
        acc = std::fma(-(mb * dx), static_cast<float>(xsum), acc);
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

// matmul.h's Q6_K contract as a scalar loop over ggml's row layout.
std::vector<float> q6k_contract(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_tokens * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n_tokens * cols);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = reinterpret_cast<const BlockQ6_K*>(
        w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ6_K& blk = row[b / 8];
        const BlockQ8_0& xb = xq[t * nb + b];
        const float dx = fp16_to_fp32(xb.d);
        for (int h = 0; h < 2; ++h) {
          const int e0 = static_cast<int>(b % 8) * 32 + 16 * h;
          int32_t isum = 0, ysum = 0;
          for (int c = 0; c < 16; ++c) {
            isum += q6k_code(blk, e0 + c) * xb.qs[16 * h + c];
            ysum += xb.qs[16 * h + c];
          }
          const float dd = fp16_to_fp32(blk.d) * static_cast<float>(blk.scales[e0 / 16]);
          acc = std::fma(dd * dx, static_cast<float>(isum - 32 * ysum), acc);
        }
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
                          {3, 256, 5},  {300, 768, 64}, {21, 2304, 3}};
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

// The contract's codes and scales are ggml's: its terms, summed in double, equal the dot of the
// dequantized weights with the Q8_0-rounded activations up to float rounding (2 nb + 8 roundings
// against the magnitude sum; see Q4KMatchesDequantizedDot for the activation bound).
TEST_P(PerTarget, Q6KMatchesDequantizedDot) {
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 768, n = 3, nb = cols / 32;
  const Weights w = make_weights(DType::Q6_K, rows, cols, 311);
  const std::vector<float> x = random_normal(n * cols, 312);
  const std::vector<float> y = run_matmul(w, x.data(), n, pool);
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n * cols);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0, act_err = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double dx = fp16_to_fp32(xq[t * nb + k / 32].d);
        dot += double{wr[k]} * x[t * cols + k];
        act_err += std::fabs(double{wr[k]}) * 0.5625 * dx;
        mag += std::fabs(double{wr[k]}) * (std::fabs(double{x[t * cols + k]}) + dx);
      }
      // Both halves' i_h carry the -32 offset: their magnitude is bounded by 64 / |code - 32|
      // times the weight's; 64 * sum |d sc| |y| covers it.
      const double tol =
          act_err + static_cast<double>(2 * nb + 8) * std::ldexp(1.0, -24) * 64 * mag;
      ASSERT_NEAR(y[t * rows + r], dot, tol) << "r=" << r << " t=" << t;
    }
  }
}

TEST_P(PerTarget, Q5KBitIdenticalToTheContractLoop) {
  check_contract(DType::Q5_K, q4k_contract, 221);
}

// The Q5_K contract's terms against the dequantized weights (ggml's formula, dequantize_row): the
// contract loop computed in double from the same codes must equal the double dot of dequantized
// weights and Q8_0-rounded activations up to float rounding of the products d * sc, dmin * m.
TEST(MatmulKQuant, Q5KDequantizedDotMatchesTheContractTerms) {
  ThreadPool pool(1);
  const int64_t rows = 9, cols = 512, nb = cols / 32;
  const Weights w = make_weights(DType::Q5_K, rows, cols, 231);
  const std::vector<float> x = random_normal(cols, 232);
  std::vector<BlockQ8_0> xq(static_cast<size_t>(nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), cols);
  const std::vector<float> y = run_matmul(w, x.data(), 1, pool);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    double dot = 0, mag = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const double xv = fp16_to_fp32(xq[k / 32].d) * xq[k / 32].qs[k % 32];
      dot += double{wr[k]} * xv;
      mag += std::fabs(double{wr[k]} * xv) + std::fabs(xv);
    }
    ASSERT_NEAR(y[r], dot, 1e-4 * mag) << r;  // float accumulation of 2 nb terms
  }
}

TEST_P(PerTarget, Q4KBitIdenticalToTheContractLoop) {
  check_contract(DType::Q4_K, q4k_contract, 201);
}

// Against the double-precision dot of the dequantized weights (dequantize_row: ggml's formula)
// with the unquantized activations. The contract's terms are exact but for the activation
// quantization, |x - d_x q_x| <= 0.5625 d_x (half a step plus the fp16 rounding of the scale, see
// quantize_test), and float rounding: each of the 2 nb FMAs and the scale products rounds once
// (u = 2^-24) against magnitudes bounded by sum |w_k| |x_k| plus the min terms; (2 nb + 8) u times
// that magnitude is a generous bound. A wrong code, scale, min or sub-block index is off by far
// more.
TEST_P(PerTarget, Q4KMatchesDequantizedDot) {
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 768, n = 3, nb = cols / 32;
  const Weights w = make_weights(DType::Q4_K, rows, cols, 301);
  const std::vector<float> x = random_normal(n * cols, 302);
  const std::vector<float> y = run_matmul(w, x.data(), n, pool);
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n * cols);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w.matrix(), r, wr.data());
    const auto* row = reinterpret_cast<const BlockQ4_K*>(
        w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols));
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0, act_err = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double dx = fp16_to_fp32(xq[t * nb + k / 32].d);
        dot += double{wr[k]} * x[t * cols + k];
        act_err += std::fabs(double{wr[k]}) * 0.5625 * dx;
        // The two partial terms the kernel adds: d_b * code * x and m_b * x.
        const BlockQ4_K& blk = row[k / 256];
        int sc, m;
        q4k_scale_min(blk, static_cast<int>((k % 256) / 32), &sc, &m);
        const double xv = std::fabs(double{x[t * cols + k]}) + dx;
        mag += (fp16_to_fp32(blk.d) * sc * q4k_code(blk, static_cast<int>(k % 256)) +
                fp16_to_fp32(blk.dmin) * m) *
               xv;
      }
      const double tol = act_err + static_cast<double>(2 * nb + 8) * std::ldexp(1.0, -24) * mag;
      ASSERT_NEAR(y[t * rows + r], dot, tol) << "r=" << r << " t=" << t;
    }
  }
}

// Instantiated per SIMD target with the other PerTarget tests, in matmul_test.cc.

}  // namespace
}  // namespace kvasir::cpu
