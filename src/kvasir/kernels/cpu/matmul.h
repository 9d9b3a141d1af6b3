// Matrix multiplication y = x · Wᵀ for every weight dtype, on the CPU.
//
// W is a weight matrix of `rows` output features by `cols` input features, in the dtype it was
// stored in (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS). It is repacked once (PackedMatrix, packed_matrix.h) into panels of 8
// interleaved rows, the layout the kernels stream. x holds n_tokens rows of `cols` floats; y
// receives n_tokens rows of `rows` floats (y[t*rows + r] = dot(W[r], x[t])).
//
// n_tokens == 1 is the decode GEMV; n_tokens > 1 the prefill / batched-decode GEMM (tiles of up
// to 8 panels x 6 tokens share weight loads and activation broadcasts; threads take chunks of
// panels that stay in L2 while every token tile passes over them). For the quantized formats the
// activations are first quantized to 8-bit codes (once per input, see Activations) and the dot
// products run in integers, as ggml does: Q8_0 blocks (one fp16 scale per 32 columns) for the
// 32-column formats, Q8_K-style super-blocks (one float scale per 256 columns,
// quantize_superblock_q8) for Q4_K, Q5_K and Q6_K, whose sub-block scales then multiply exact
// integer sums, leaving one or two float FMAs per 256 columns.
//
// The arithmetic of one output element is fixed (this is the contract every path implements, the
// scalar fallback included, so results are bit-identical across tiles, batches, threads and SIMD
// targets):
//   F32/F16/BF16: acc = 0; for k = 0 .. cols-1: acc = fma(float(W[r][k]), x[t][k], acc).
//   Q8_0/Q4_0:    acc = 0; for each 32-column block b in order:
//                   isum = sum of the block's 32 products q_w * q_x (exact, int32);
//                   acc = fma(fp16(d_w) * d_x, float(isum), acc)   (the product rounded once).
//   Q4_K, Q5_K:   (Q8_K activations: d_x is the super-block's) acc = 0; for each 256-column
//                   super-block in order: I = sum over its 8 sub-blocks b of sc_b * (sum of code *
//                   q_x over b), M = sum over b of m_b * (sum of q_x over b) (exact, int32; codes
//                   0..15, Q5_K 0..31, sc_b and m_b the 6-bit scales and mins);
//                   acc = fma(fp16(d) * d_x, float(I), acc); acc = fma(-(fp16(dmin) * d_x),
//                   float(M), acc).
//   Q6_K:         (Q8_K activations) acc = 0; per super-block: I = sum over its 16 sub-blocks h of
//                   16 columns of sc_h * (sum of code * q_x - 32 * sum of q_x, over h) (exact,
//                   int32; codes 0..63, sc_h int8); acc = fma(fp16(d) * d_x, float(I), acc).
//   Q4_1, Q5_1:   acc = 0; per block: isum = sum of code * q_x (codes 0..15 / 0..31), xsum = sum
//                   of q_x; acc = fma(fp16(d) * d_x, float(isum), acc);
//                   acc = fma(fp16(m) * d_x, float(xsum), acc).
//   Q5_0:         as Q4_0 with isum = sum of code * q_x - 16 * xsum (codes 0..31).
//   IQ4_NL:       as Q4_0 with isum = sum of kIQ4NLValues[code] * q_x.
//   IQ4_XS:       acc = 0; per 32-column block: d_b = fp16(d) * (ls - 32) (exact), isum as
//                   IQ4_NL's; acc = fma(d_b * d_x, float(isum), acc).
//   Q2_K:         acc = 0; per block and half h (16 columns, scale byte of sub-block 2 sub + h):
//                   d_h = fp16(d) * sc_h, m_h = fp16(dmin) * m_h (exact), i_h = sum over the half
//                   of code * q_x (codes 0..3), y_h = sum of the half's q_x;
//                   acc = fma(d_h * d_x, float(i_h), acc); acc = fma(-(m_h * d_x), float(y_h),
//                   acc); h = 0 then 1.
//   Q3_K:         as Q6_K with codes 0..7, an offset of 4 instead of 32 and d_h = fp16(d) *
//                   (sc_h - 32).
// Batch invariance follows: y[t][r] depends only on W[r] and x[t].
//
// Threads split the output rows (in chunks that are a multiple of 16 rows: a cache line of y).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvasir/kernels/cpu/packed_matrix.h"
#include "kvasir/kernels/views.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

// Tokens per activation tile of the float-family GEMM (F32/F16/BF16 weights).
constexpr int64_t kFloatTokenTile = 6;

// The input a weight dtype's kernel reads: floats, Q8_0 blocks or Q8_K-style super-blocks.
enum class ActivationFormat { kFloat, kQ8_0, kQ8_K };
ActivationFormat activation_format(DType t);
const char* activation_format_name(ActivationFormat f);

// Activations prepared for one weight dtype family (one ActivationFormat). Reused across all
// matmuls that read the same input (e.g. Q, K and V projections), so quantization happens once
// per input per step. Buffers grow on first use and are then reused: no allocation in steady state.
class Activations {
 public:
  // Points at x (n_tokens x cols floats, not copied) and quantizes it if `for_type` needs it.
  // For float-family weights and several tokens it also copies x into token tiles (f32_tiles()).
  void prepare(const float* x, int64_t n_tokens, int64_t cols, DType for_type, ThreadPool& pool);

  const float* f32() const { return x_; }
  // x regrouped for the float-family GEMM: tokens in tiles of kFloatTokenTile (the last tile holds
  // the remaining T tokens); the tile that starts at token t begins at f32_tiles() + t * cols and
  // holds its T tokens interleaved column by column: element (t + i, k) is at [k * T + i]. So one
  // stream feeds a tile's broadcasts. With one token this is x itself (the same layout).
  const float* f32_tiles() const { return tiles_ != nullptr ? tiles_ : x_; }
  // The 8-bit codes in 32-column blocks (block b of token t at [t * cols / 32 + b]). Q8_0: each
  // block its own fp16 scale d. Q8_K: the 8 blocks of a 256-column super-block share one float
  // scale (quantize_superblock_q8); d holds it rounded to fp16 (kernels read q8_scales()).
  const BlockQ8_0* q8() const { return q8_.data(); }
  // Scale of each block as a float: Q8_0 fp16_to_fp32(q8()[i].d), so kernels skip the
  // conversion; Q8_K the super-block's float scale, repeated for its 8 blocks.
  const float* q8_scales() const { return q8_scale_.data(); }
  // Sum of the 32 codes of each Q8_0 block (Q4_0 kernels subtract 8 x this: codes are q + 8).
  const int32_t* q8_sums() const { return q8_sum_.data(); }
  // Sum of the first 16 codes of each block (Q6_K's sub-blocks are 16 columns wide).
  const int32_t* q8_sums_lo() const { return q8_sum_lo_.data(); }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t cols() const { return cols_; }
  DType prepared_for() const { return for_type_; }
  ActivationFormat format() const { return activation_format(for_type_); }

 private:
  const float* x_ = nullptr;
  int64_t n_tokens_ = 0;
  int64_t cols_ = 0;
  DType for_type_ = DType::F32;
  const float* tiles_ = nullptr;  // tile_buf_.data() when tiles were built, else null
  std::vector<float> tile_buf_;
  std::vector<BlockQ8_0> q8_;
  std::vector<float> q8_scale_;
  std::vector<int32_t> q8_sum_;
  std::vector<int32_t> q8_sum_lo_;
};

// y = x · Wᵀ. `x` must have been prepared for w.type() or a type of the same ActivationFormat
// (Q8_0 and Q4_0 share Q8_0 activations; Q4_K and Q6_K share Q8_K ones). Throws kvasir::Error on
// a dtype or shape mismatch (checked once per call, outside the inner loops).
void matmul(const PackedMatrix& w, const Activations& x, float* y, ThreadPool& pool);

// Several matrices that read the same activations (Q, K and V; gate and up) in ONE parallel
// region: their chunks share one work queue, so the threads meet once instead of once per matrix.
// Each output is exactly what matmul(*out.w, x, out.y, pool) writes. At most 8 outputs.
struct MatmulOutput {
  const PackedMatrix* w;
  float* y;
};
void matmul(std::span<const MatmulOutput> outputs, const Activations& x, ThreadPool& pool);

// Convenience (tests, one-off calls): packs `w` first, and prepares the activations.
void matmul(const MatrixView& w, const Activations& x, float* y, ThreadPool& pool);
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Copies row `row` of W to `out` as floats (embedding lookup for any dtype).
void dequantize_row(const MatrixView& w, int64_t row, float* out);

// Name of the SIMD target Highway's dispatch chose on this machine (e.g. "AVX2").
const char* simd_target_name();

// For tests and benchmarks: the SIMD targets compiled into these kernels that this CPU can run,
// best first (e.g. {"AVX2", "SSE4", "SCALAR"}), and a way to restrict dispatch to one of them
// (an empty name restores the default). Forcing changes Highway's process-wide dispatch, so call
// it only while no kernel runs. Throws kvasir::Error for a name not in simd_targets().
std::vector<std::string> simd_targets();
void force_simd_target(const std::string& name);

}  // namespace kvasir::cpu
