// Reference quantize / dequantize of the GGUF block formats IQ4_NL, IQ4_XS, bit-identical to ggml's
// (ggml-quants.c of the pinned llama.cpp). Dispatched from quantize.h.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

// As ggml's quantize_<type>(x, out, rows, cols, importance): importance holds cols weights (one per
// column) or is null (then ggml's reference quantizer, quantize_row_<type>_ref where it exists).
void quantize_rows_iq4(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                      const float* importance);
// As ggml's dequantize_row_<type>: n floats from row_bytes(t, n) bytes.
void dequantize_row_iq4(DType t, const void* in, float* out, int64_t n);

}  // namespace kvasir
