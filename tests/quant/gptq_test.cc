// GPTQ to Q4_1 (quant/gptq.h) on synthetic layers: with correlated activations its output error
// ||WX - W'X|| is lower than round-to-nearest's (the point of the method), with a diagonal
// Hessian there is no error to feed forward and it is round-to-nearest exactly, the blocks decode
// to exactly the values the algorithm assumed, and the bytes do not depend on the thread count.
// Also the Q4_1 group grid (quant/q4_1_group.h) against ggml's own Q4_1 rounding.
#include "kvasir/quant/gptq.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvasir/quant/q4_1_group.h"
#include "kvasir/quant/recon_error.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "test_util/random.h"

namespace kvasir {
namespace {

// n tokens of cols activations with strongly correlated columns and a few loud channels, as
// transformer activations have: x = z M with M mixing neighbouring channels, then some columns
// scaled up. Returns the Gram matrix X^T X.
std::vector<double> correlated_gram(int64_t cols, int64_t n, uint32_t seed) {
  const std::vector<float> z = test_util::random_normal(static_cast<size_t>(n * cols), seed);
  std::vector<double> x(static_cast<size_t>(n * cols));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < cols; ++j) {
      double v = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double w = std::exp(-std::fabs(static_cast<double>(j - k)) / 6.0);
        v += z[static_cast<size_t>(t * cols + k)] * w;
      }
      if (j % 17 == 3) v *= 8;  // outlier channels
      x[static_cast<size_t>(t * cols + j)] = v;
    }
  std::vector<double> g(static_cast<size_t>(cols * cols), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        g[static_cast<size_t>(i * cols + j)] +=
            x[static_cast<size_t>(t * cols + i)] * x[static_cast<size_t>(t * cols + j)];
  return g;
}

std::vector<float> decode(const std::vector<BlockQ4_1>& blocks, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = row_bytes(DType::Q4_1, cols);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(DType::Q4_1, reinterpret_cast<const uint8_t*>(blocks.data()) + r * rb,
                   out.data() + r * cols, cols);
  return out;
}

std::vector<float> ggml_rtn(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q(static_cast<size_t>(rows) * row_bytes(DType::Q4_1, cols));
  quantize_rows(DType::Q4_1, w.data(), q.data(), rows, cols, nullptr);
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(DType::Q4_1, q.data() + r * row_bytes(DType::Q4_1, cols), out.data() + r * cols,
                   cols);
  return out;
}

TEST(Q4_1Group, RoundToNearestIsGgmlsUpToTheFp16Grid) {
  const int64_t rows = 64, cols = 256;
  const std::vector<float> w = test_util::random_normal(rows * cols, 3, 0.05f);
  std::vector<BlockQ4_1> blocks(rows * cols / 32);
  std::vector<float> deq(w.size());
  q4_1_round_rows(w.data(), rows, cols, blocks.data(), deq.data());
  EXPECT_EQ(decode(blocks, rows, cols), deq);
  // ggml rounds against the fp32 scale and min, we against the fp16 ones it stores: the same
  // d and m, and codes that differ (by one) only for weights right at a rounding boundary.
  std::vector<uint8_t> ref(static_cast<size_t>(rows) * row_bytes(DType::Q4_1, cols));
  quantize_rows(DType::Q4_1, w.data(), ref.data(), rows, cols, nullptr);
  const auto* rb = reinterpret_cast<const BlockQ4_1*>(ref.data());
  int differ = 0;
  const std::vector<float> rd = ggml_rtn(w, rows, cols);
  for (size_t b = 0; b < blocks.size(); ++b) {
    EXPECT_EQ(blocks[b].d, rb[b].d);
    EXPECT_EQ(blocks[b].m, rb[b].m);
  }
  for (size_t i = 0; i < w.size(); ++i) differ += deq[i] != rd[i];
  EXPECT_LT(differ, static_cast<int>(w.size() / 30));
}

TEST(Q4_1Group, GridDecodesItsEnds) {
  const Q4_1Grid g = q4_1_grid(-1.0f, 2.0f);
  EXPECT_EQ(q4_1_code(g, -5.0f), 0);
  EXPECT_EQ(q4_1_code(g, 5.0f), 15);
  EXPECT_NEAR(q4_1_value(g, 0), -1.0f, 1e-3f);
  EXPECT_NEAR(q4_1_value(g, 15), 2.0f, 2e-3f);
  const Q4_1Grid flat = q4_1_grid(0.25f, 0.25f);
  EXPECT_EQ(q4_1_code(flat, 0.25f), 0);
  EXPECT_EQ(q4_1_value(flat, 0), 0.25f);
  EXPECT_THROW(q4_1_grid(-1e6f, 1e6f), Error);
}

TEST(Gptq, BeatsRoundToNearestOnCorrelatedActivations) {
  const int64_t rows = 48, cols = 128;
  const std::vector<double> g = correlated_gram(cols, 512, 11);
  const std::vector<float> w = test_util::random_normal(rows * cols, 12, 0.05f);
  const double rtn =
      relative_output_error(w.data(), ggml_rtn(w, rows, cols).data(), rows, cols, g.data());
  for (bool act_order : {false, true}) {
    GptqOptions o;
    o.act_order = act_order;
    const GptqResult r = gptq_q4_1(w.data(), rows, cols, g.data(), o);
    const double err = relative_output_error(w.data(), r.dequant.data(), rows, cols, g.data());
    EXPECT_LT(err, 0.8 * rtn) << "act_order " << act_order << ": gptq " << err << ", rtn " << rtn;
    EXPECT_EQ(decode(r.blocks, rows, cols), r.dequant) << act_order;
    EXPECT_EQ(r.damp, 0.01);
  }
}

TEST(Gptq, DiagonalHessianIsRoundToNearest) {
  // No correlation between inputs: U is diagonal, nothing is fed forward, and each weight is
  // rounded on its group's min/max grid, whatever the column order or block width.
  const int64_t rows = 20, cols = 160;
  const std::vector<float> w = test_util::random_normal(rows * cols, 5, 0.1f);
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0.5, 4.0);
  std::vector<double> g(cols * cols, 0.0);
  for (int64_t i = 0; i < cols; ++i) g[i * cols + i] = u(rng);
  std::vector<BlockQ4_1> rtn(rows * cols / 32);
  q4_1_round_rows(w.data(), rows, cols, rtn.data(), nullptr);
  for (bool act_order : {false, true})
    for (int block : {32, 128}) {
      GptqOptions o;
      o.act_order = act_order;
      o.block = block;
      const GptqResult r = gptq_q4_1(w.data(), rows, cols, g.data(), o);
      ASSERT_EQ(r.blocks.size(), rtn.size());
      EXPECT_EQ(std::memcmp(r.blocks.data(), rtn.data(), rtn.size() * sizeof(BlockQ4_1)), 0)
          << act_order << " " << block;
    }
}

TEST(Gptq, BlockWidthAndThreadsDoNotChangeTheAlgorithm) {
  const int64_t rows = 40, cols = 192;
  const std::vector<double> g = correlated_gram(cols, 256, 21);
  const std::vector<float> w = test_util::random_normal(rows * cols, 22, 0.05f);
  GptqOptions o;
  o.act_order = true;
  const GptqResult one = gptq_q4_1(w.data(), rows, cols, g.data(), o);
  ThreadPool pool(3);
  const GptqResult three = gptq_q4_1(w.data(), rows, cols, g.data(), o, &pool);
  EXPECT_EQ(std::memcmp(one.blocks.data(), three.blocks.data(), one.blocks.size() * 20), 0);
  // Lazy batches are a reordering of the same updates: the errors agree to rounding.
  o.block = 32;
  const GptqResult narrow = gptq_q4_1(w.data(), rows, cols, g.data(), o);
  const double a = relative_output_error(w.data(), one.dequant.data(), rows, cols, g.data());
  const double b = relative_output_error(w.data(), narrow.dequant.data(), rows, cols, g.data());
  EXPECT_NEAR(a, b, 0.02 * a);
}

TEST(Gptq, DeadInputsAndBadShapes) {
  const int64_t rows = 4, cols = 64;
  std::vector<double> g = correlated_gram(cols, 128, 31);
  for (int64_t j = 0; j < cols; ++j) g[5 * cols + j] = g[j * cols + 5] = 0;  // input 5 never fires
  const std::vector<float> w = test_util::random_normal(rows * cols, 32, 0.05f);
  const GptqResult r = gptq_q4_1(w.data(), rows, cols, g.data(), GptqOptions{});
  EXPECT_EQ(r.blocks.size(), static_cast<size_t>(rows * cols / 32));
  EXPECT_THROW(gptq_q4_1(w.data(), 2, 48, g.data(), GptqOptions{}), Error);
  GptqOptions bad;
  bad.block = 48;
  EXPECT_THROW(gptq_q4_1(w.data(), rows, cols, g.data(), bad), Error);
}

}  // namespace
}  // namespace kvasir
