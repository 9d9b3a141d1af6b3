// Reference quantize / dequantize of the GGUF block formats Q4_1, Q5_0, Q5_1 (and the
// importance-weighted Q4_0), bit-identical to ggml's (ggml-quants.c of the pinned llama.cpp).
// Dispatched from quantize.h.
//
// Block layouts (32 weights per block, all little-endian, same bytes as ggml's block_<type>):
//   Q4_1 (20 bytes): fp16 scale d, fp16 min m, 16 bytes of nibbles (byte j: weight j in the low
//        nibble, weight j+16 in the high one);                        w = d * q + m,   q in 0..15
//   Q5_0 (22 bytes): fp16 scale d, 32 bits qh (bit j is the 5th bit of weight j), 16 bytes of low
//        nibbles as in Q4_1;                                          w = d * (q - 16), q in 0..31
//   Q5_1 (24 bytes): fp16 scale d, fp16 min m, qh and nibbles as Q5_0; w = d * q + m,   q in 0..31
// Without importance the quantizers are ggml's round-to-nearest reference ones (min/max or
// signed absmax scale). With importance (one weight per column) they are ggml's searches: per
// block, weights w_j = importance_j * sqrt(sigma2 + x_j^2) with sigma2 the row's mean square;
// Q4_0 / Q5_0 try 19 scales around -amax/nmax and keep the best weighted least-squares fit
// (make_qx_quants), Q4_1 / Q5_1 try 37 (scale, min) pairs (make_qkx3_quants).
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;

struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 min (the value of code 0)
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;     // fp16 scale
  uint8_t qh[4];  // 5th bits, as one little-endian uint32 (bit j: weight j)
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;     // fp16 scale
  uint16_t m;     // fp16 min
  uint8_t qh[4];  // 5th bits, as one little-endian uint32 (bit j: weight j)
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// As ggml's quantize_<type>(x, out, rows, cols, importance): importance holds cols weights (one per
// column) or is null (then ggml's reference quantizer, quantize_row_<type>_ref where it exists).
// Takes Q4_1, Q5_0, Q5_1 (with or without importance) and Q4_0 (with importance; without, Q4_0
// is quantize.cc's own reference quantizer, which this also falls back to).
void quantize_rows_legacy(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                          const float* importance);
// As ggml's dequantize_row_<type>: n floats from row_bytes(t, n) bytes (Q4_1, Q5_0, Q5_1).
void dequantize_row_legacy(DType t, const void* in, float* out, int64_t n);

}  // namespace kvasir
