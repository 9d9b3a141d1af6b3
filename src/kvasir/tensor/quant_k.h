// Reference quantize / dequantize of the GGUF block formats Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, bit-identical to ggml's
// (ggml-quants.c of the pinned llama.cpp). Dispatched from quantize.h.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

// As ggml's quantize_<type>(x, out, rows, cols, importance): importance holds cols weights (one per
// column) or is null (then ggml's reference quantizer, quantize_row_<type>_ref where it exists).
void quantize_rows_k(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                      const float* importance);
// As ggml's dequantize_row_<type>: n floats from row_bytes(t, n) bytes.
void dequantize_row_k(DType t, const void* in, float* out, int64_t n);

}  // namespace kvasir
