// Reference (scalar) conversion of float rows to and from the weight dtypes: F32, F16, BF16, Q8_0
// and Q4_0 here; Q4_1, Q5_0, Q5_1 (quant_legacy.h), Q2_K .. Q6_K (quant_k.h), IQ4_NL and IQ4_XS
// (quant_iq4.h) through the same entry points.
//
// The quantizers are bit-identical to ggml's reference quantizers (quantize_row_q8_0_ref,
// quantize_row_q4_0_ref, and its fp16/bf16 round-to-nearest-even conversions), so a file we write
// is byte-for-byte the file llama.cpp would write from the same floats:
//   Q8_0: per block of 32, d = amax / 127, q = roundf(x / d)           (ties away from zero)
//   Q4_0: per block of 32, m = the value of largest magnitude (with its sign), d = m / -8,
//         q = min(15, trunc(x / d + 8.5))                               (so m itself maps to 0)
// In both, the division is a multiplication by id = 1/d (0 when d == 0), as ggml does, and d is
// stored as fp16 while id is computed from the unrounded float d.
// Non-finite inputs produce unspecified (but defined, never UB) codes.
//
// Dequantization is w = d * q exactly as ggml computes it. These functions are the reference the
// SIMD kernels are tested against; they are not the hot path (except dequantize_row for embedding
// lookup, which touches one row per token).
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

// Whether quantize_row / dequantize_row support dtype t.
bool has_reference_quantizer(DType t);
// Whether quantize_rows' importance changes the result for t (ggml ignores it for f32, f16, bf16
// and q8_0).
bool uses_importance(DType t);

// Quantizes rows x cols floats (row-major) as llama-quantize does: ggml's quantize_<type>(x, out,
// rows, cols, importance). importance: cols weights (an imatrix entry: the mean squared activation
// of each input column) or null; with null every type is its reference quantizer
// (quantize_row), bit for bit. Writes rows * row_bytes(t, cols) bytes. Same errors as
// quantize_row.
void quantize_rows(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                   const float* importance = nullptr);

// Writes row_bytes(t, n) bytes to out. Throws kvasir::Error if t is unsupported or n is not a
// multiple of t's block size.
void quantize_row(DType t, const float* x, void* out, int64_t n);

// Reads row_bytes(t, n) bytes from in and writes n floats. Same errors as quantize_row.
void dequantize_row(DType t, const void* in, float* out, int64_t n);

// Quantizes a rows x cols matrix of floats (row-major) into rows * row_bytes(t, cols) bytes.
std::vector<uint8_t> quantize_tensor(DType t, const float* x, int64_t rows, int64_t cols);

// Block-level reference routines (one block of 32 values), exposed for the kernels' activation
// quantizer tests.
void quantize_block_q8_0(const float* x, BlockQ8_0* out);
// The activation format of the super-block kernels (Q4_K, Q5_K, Q6_K), ggml's Q8_K in spirit:
// 256 values share one float scale d = amax / 127 (not rounded to fp16), codes round(x / d)
// (ties away from zero, as Q8_0's). Writes 256 codes and returns d.
float quantize_superblock_q8(const float* x, int8_t* codes);
void quantize_block_q4_0(const float* x, BlockQ4_0* out);

}  // namespace kvasir
