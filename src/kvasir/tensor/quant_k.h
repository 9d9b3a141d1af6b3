// Reference quantize / dequantize of the GGUF block formats Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// bit-identical to ggml's (ggml-quants.c of the pinned llama.cpp). Dispatched from quantize.h. Also
// the Q8_K activation quantizer the k-quant matmul kernels pair with (ggml's
// quantize_row_q8_K_ref).
//
// Every k-quant works on super-blocks of 256 weights split into sub-blocks (16 x 16 or 8 x 32),
// all little-endian, the same bytes as ggml's block_<type>. "q" is the stored code, d and dmin
// fp16 super-block scales, sc / m the per-sub-block quantized scale and min.
//   Q2_K (84 bytes): 16 sub-blocks of 16. scales[16]: sc in the low nibble, m in the high one;
//        qs[64]: 2-bit codes, weight 128*h + 32*k + l in bits 2k..2k+1 of qs[32*h + l];
//        then d, dmin.                                   w = d * sc * q - dmin * m,  q in 0..3
//   Q3_K (110 bytes): 16 sub-blocks of 16. hmask[32]: the third bit of weight 32*k + l in bit k
//        of hmask[l]; qs[64]: low 2 bits, laid out as Q2_K; scales[12]: sixteen 6-bit signed
//        scales stored +32 (low nibbles of 0..7 in bytes 0..7, of 8..15 in the high nibbles of
//        bytes 0..7, the top two bits of scale j in bits 2*(j/4) of byte 8 + j%4); then d.
//        q = low2 | bit3 << 2, in 0..7;                  w = d * (sc - 32) * (q - 4)
//   Q4_K (144 bytes): d, dmin, scales[12], qs[128]. 8 sub-blocks of 32 with 6-bit sc and m: for
//        j < 4 sc_j = scales[j] & 63, m_j = scales[j + 4] & 63; for j >= 4 the low nibbles sit in
//        scales[j + 4] (sc low, m high) and the top two bits in bits 6..7 of scales[j - 4] (sc)
//        and scales[j] (m). qs: sub-blocks 2i and 2i+1 share the 32 bytes qs[32i..], low and high
//        nibble.                                         w = d * sc * q - dmin * m,  q in 0..15
//   Q5_K (176 bytes): d, dmin, scales[12] as Q4_K, qh[32], qs[128] as Q4_K (low 4 bits); the
//        fifth bit of the weight at l of sub-block j is bit j of qh[l].
//                                                        w = d * sc * q - dmin * m,  q in 0..31
//   Q6_K (210 bytes): ql[128], qh[64], int8 scales[16], d. 16 sub-blocks of 16. Per half of 128
//        weights (ql += 64, qh += 32): weight 32*k + l has its low nibble in ql[l + 32*(k&1)]
//        (low nibble for k < 2, high for k >= 2) and its top two bits at bits 2k of qh[l].
//                                                        w = d * sc * (q - 32),      q in 0..63
//   Q8_K (292 bytes): float d, int8 qs[256], int16 bsums[16] (sum of each 16 codes).
//                                                        w = d * q
// Without importance the quantizers are ggml's reference ones: each sub-block gets its own fit
// (weighted min/scale search for the affine formats, weighted least squares with a few
// per-element refinements for the symmetric ones), its scale (and min) are rounded to 4/6/8
// bits against the super-block maxima, and the weights are requantized with the rounded scales.
// With importance (one weight per column) they are ggml's _impl searches: importance-weighted
// sub-block fits, then the sub-block scales themselves fitted with a weighted search.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

constexpr int kQK_K = 256;  // weights per k-quant super-block

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble: scale, high nibble: min, per sub-block of 16
  uint8_t qs[kQK_K / 4];       // 2-bit codes
  uint16_t d;                  // fp16 scale of the scales
  uint16_t dmin;               // fp16 scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // third bit of each code
  uint8_t qs[kQK_K / 4];     // low 2 bits of each code
  uint8_t scales[12];        // sixteen 6-bit scales (+32)
  uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ4_K {
  uint16_t d;          // fp16 scale of the scales
  uint16_t dmin;       // fp16 scale of the mins
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // fifth bit of each code
  uint8_t qs[kQK_K / 2];  // low 4 bits of each code
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits of each code
  uint8_t qh[kQK_K / 4];      // top 2 bits of each code
  int8_t scales[kQK_K / 16];  // per sub-block of 16
  uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// As ggml's quantize_<type>(x, out, rows, cols, importance): importance holds cols weights (one per
// column) or is null (then ggml's reference quantizer, quantize_row_<type>_ref where it exists).
void quantize_rows_k(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                     const float* importance);
// As ggml's dequantize_row_<type>: n floats from row_bytes(t, n) bytes.
void dequantize_row_k(DType t, const void* in, float* out, int64_t n);

// As ggml's quantize_row_q8_K_ref: n (a multiple of 256) floats into n / 256 blocks.
void quantize_row_q8_k(const float* x, BlockQ8_K* out, int64_t n);

}  // namespace kvasir
