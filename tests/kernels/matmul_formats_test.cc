// matmul on Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K: each kernel against matmul.h's
// contract written here as a scalar loop over ggml's own row layout (bit for bit, every SIMD
// target, tile and batch shape), and against the double-precision dot of the weights as
// dequantize_row (ggml's formula) gives them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/tensor/quant_iq4.h"
#include "kvasir/tensor/quant_k.h"
#include "kvasir/tensor/quant_legacy.h"
#include "kvasir/tensor/quantize.h"
#include "matmul_test_util.h"
#include "test_util/random.h"

namespace kvasir::cpu {
namespace {

using test_util::random_normal;

constexpr DType kFormats[] = {DType::Q4_1,   DType::Q5_0,   DType::Q5_1, DType::IQ4_NL,
                              DType::IQ4_XS, DType::Q2_K,   DType::Q3_K};

// ggml's 32-weight nibble group: weight l in the low nibble of qs[l], weight l + 16 in its high.
int nibble(const uint8_t* qs, int l) {
  return l < 16 ? (qs[l] & 15) : (qs[l - 16] >> 4);
}
int fifth_bit(const uint8_t* qh4, int l) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  return static_cast<int>((qh >> l) & 1);
}

struct Result {
  std::vector<float> y;
  std::vector<double> magnitude;  // sum of |term| over the contract's FMAs, per output
};

// matmul.h's contract for the formats above, from ggml's block structs.
Result contract(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_tokens * nb));
  quantize_row(DType::Q8_0, x.data(), xq.data(), n_tokens * cols);
  Result out{std::vector<float>(static_cast<size_t>(n_tokens * rows)),
             std::vector<double>(static_cast<size_t>(n_tokens * rows))};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w.bytes.data() + static_cast<size_t>(r) * row_bytes(w.type, cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      double mag = 0;
      auto fma = [&](float a, float b) {
        acc = std::fma(a, b, acc);
        mag += std::fabs(double{a} * b);
      };
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0& xb = xq[t * nb + b];
        const float dx = fp16_to_fp32(xb.d);
        int32_t ysum = 0, yh[2] = {0, 0};
        for (int c = 0; c < 32; ++c) {
          ysum += xb.qs[c];
          yh[c / 16] += xb.qs[c];
        }
        int32_t isum = 0;
        switch (w.type) {
          case DType::Q4_1: {
            const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
            for (int c = 0; c < 32; ++c) isum += nibble(blk.qs, c) * xb.qs[c];
            fma(fp16_to_fp32(blk.d) * dx, static_cast<float>(isum));
            fma(fp16_to_fp32(blk.m) * dx, static_cast<float>(ysum));
            break;
          }
          case DType::Q5_1: {
            const auto& blk = reinterpret_cast<const BlockQ5_1*>(row)[b];
            for (int c = 0; c < 32; ++c)
              isum += (nibble(blk.qs, c) | fifth_bit(blk.qh, c) << 4) * xb.qs[c];
            fma(fp16_to_fp32(blk.d) * dx, static_cast<float>(isum));
            fma(fp16_to_fp32(blk.m) * dx, static_cast<float>(ysum));
            break;
          }
          case DType::Q5_0: {
            const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
            for (int c = 0; c < 32; ++c)
              isum += (nibble(blk.qs, c) | fifth_bit(blk.qh, c) << 4) * xb.qs[c];
            fma(fp16_to_fp32(blk.d) * dx, static_cast<float>(isum - 16 * ysum));
            break;
          }
          case DType::IQ4_NL: {
            const auto& blk = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
            for (int c = 0; c < 32; ++c) isum += kIQ4NLValues[nibble(blk.qs, c)] * xb.qs[c];
            fma(fp16_to_fp32(blk.d) * dx, static_cast<float>(isum));
            break;
          }
          case DType::IQ4_XS: {
            const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
            const int g = static_cast<int>(b % 8);
            const int ls = ((blk.scales_l[g / 2] >> (4 * (g % 2))) & 15) |
                           ((blk.scales_h >> (2 * g)) & 3) << 4;
            for (int c = 0; c < 32; ++c)
              isum += kIQ4NLValues[nibble(blk.qs + 16 * g, c)] * xb.qs[c];
            fma(fp16_to_fp32(blk.d) * static_cast<float>(ls - 32) * dx, static_cast<float>(isum));
            break;
          }
          case DType::Q2_K: {
            const auto& blk = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
            for (int h = 0; h < 2; ++h) {
              const int e0 = static_cast<int>(b % 8) * 32 + 16 * h;
              int32_t ih = 0;
              for (int c = 0; c < 16; ++c) {
                const int e = e0 + c;  // weight 128i + 32k + l: bits 2k of qs[32i + l]
                const int code = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                ih += code * xb.qs[16 * h + c];
              }
              const uint8_t s = blk.scales[e0 / 16];
              fma(fp16_to_fp32(blk.d) * static_cast<float>(s & 15) * dx, static_cast<float>(ih));
              fma(-(fp16_to_fp32(blk.dmin) * static_cast<float>(s >> 4) * dx),
                  static_cast<float>(yh[h]));
            }
            break;
          }
          case DType::Q3_K: {
            const auto& blk = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
            for (int h = 0; h < 2; ++h) {
              const int e0 = static_cast<int>(b % 8) * 32 + 16 * h;
              int32_t ih = 0;
              for (int c = 0; c < 16; ++c) {
                const int e = e0 + c;
                const int low = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                const int code = low | ((blk.hmask[e % 32] >> (e / 32)) & 1) << 2;
                ih += code * xb.qs[16 * h + c];
              }
              const int j = e0 / 16;  // ggml's 6-bit scale j, stored + 32
              const int sc = ((j < 8 ? blk.scales[j] : blk.scales[j - 8] >> 4) & 15) |
                             ((blk.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
              fma(fp16_to_fp32(blk.d) * static_cast<float>(sc - 32) * dx,
                  static_cast<float>(ih - 4 * yh[h]));
            }
            break;
          }
          default:
            ADD_FAILURE() << "no contract for " << dtype_name(w.type);
        }
      }
      out.y[t * rows + r] = acc;
      out.magnitude[t * rows + r] = mag;
    }
  }
  return out;
}

// Partial panels, odd panel counts, every token tile width and tail, several chunks per thread.
TEST_P(PerTarget, EveryFormatBitIdenticalToTheContractLoop) {
  ThreadPool pool(3);
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  // 2 and 5 tokens over 9 panels: the one-tile paths (a whole group for 2 tokens, 2 panels x 5
  // tokens for a K = 4 verification) with their leftover panels.
  const Shape shapes[] = {{37, 256, 1}, {70, 512, 13}, {8, 256, 4},  {3, 256, 5},
                          {300, 768, 7}, {21, 2304, 3}, {70, 512, 2}, {70, 512, 5}};
  uint32_t seed = 501;
  for (DType t : kFormats) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(s.rows) + "x" +
                   std::to_string(s.cols) + " tokens=" + std::to_string(s.n_tokens));
      const Weights w = make_weights(t, s.rows, s.cols, ++seed);
      const std::vector<float> x = random_normal(s.n_tokens * s.cols, ++seed);
      const Result want = contract(w, x, s.n_tokens);
      const std::vector<float> got = run_matmul(w, x.data(), s.n_tokens, pool);
      ASSERT_EQ(std::memcmp(got.data(), want.y.data(), want.y.size() * sizeof(float)), 0);
    }
  }
}

// The contract's codes and scales are ggml's: the kernel's result equals the double dot of the
// weights dequantize_row gives (ggml's formula, a separate decoder) with the Q8_0-rounded
// activations, up to float rounding: each FMA rounds its product of two rounded factors and the
// sum, at most 4 roundings per term (u = 2^-24) against sum |term|, plus the dequantized
// weights' own float rounding (2 u of |d q| + |m|, also within sum |term|). 8 u sum |term| is a
// bound; a wrong code, scale, min, offset or sub-block is off by whole terms.
TEST(MatmulFormats, MatchTheDequantizedDot) {
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 768, n = 3, nb = cols / 32;
  uint32_t seed = 601;
  for (DType t : kFormats) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Weights w = make_weights(t, rows, cols, ++seed);
    const std::vector<float> x = random_normal(n * cols, ++seed);
    const std::vector<float> y = run_matmul(w, x.data(), n, pool);
    const Result terms = contract(w, x, n);
    std::vector<BlockQ8_0> xq(static_cast<size_t>(n * nb));
    quantize_row(DType::Q8_0, x.data(), xq.data(), n * cols);
    std::vector<float> wr(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w.matrix(), r, wr.data());
      for (int64_t tok = 0; tok < n; ++tok) {
        double dot = 0;
        for (int64_t k = 0; k < cols; ++k) {
          const BlockQ8_0& xb = xq[tok * nb + k / 32];
          dot += double{wr[k]} * fp16_to_fp32(xb.d) * xb.qs[k % 32];
        }
        const double tol = 8 * std::ldexp(1.0, -24) * terms.magnitude[tok * rows + r];
        ASSERT_NEAR(y[tok * rows + r], dot, tol) << "r=" << r << " t=" << tok;
      }
    }
  }
}

// Every format is computed in its own packed layout (no conversion at load), at about its own
// bits per weight: a panel of 8 rows x 256 columns takes the format's bytes plus the unpacked
// sub-block scales, rounded up to a cache line.
TEST(MatmulFormats, PackedInTheirOwnFormatAtTheirOwnSize) {
  for (DType t : kFormats) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_EQ(packed_type(t), t);
    const double file = static_cast<double>(row_bytes(t, 4096)) * 64;
    const double packed = static_cast<double>(packed_bytes(t, 64, 4096));
    EXPECT_GE(packed, file * 0.99);
    EXPECT_LE(packed, file * 1.25);
  }
}

}  // namespace
}  // namespace kvasir::cpu
