// One GGUF Q4_1 group (32 consecutive weights of a row, tensor/quant_legacy.h) as the calibrated
// quantizers (GPTQ, AWQ) use it: the grid w = d * q + m, q in 0..15, with d and m already rounded
// to fp16 as the file stores them, chosen *before* the group's weights are rounded. So a
// quantizer that feeds the rounding error forward (GPTQ) works with exactly the values the file
// decodes to: q4_1_value() is ggml's dequantize_row_q4_1 arithmetic (fp32 product, then sum).
//
// The grid of a range [lo, hi] is the min/max one of the GPTQ reference quantizer and of ggml's
// quantize_row_q4_1_ref: d = (hi - lo) / 15, m = lo. It differs from ggml's RTN only in that
// codes are rounded against the fp16 d and m (ggml rounds against the fp32 ones, then stores
// fp16): q = clamp(round((w - m) / d), 0, 15).
#pragma once

#include <cstdint>

#include "kvasir/tensor/quant_legacy.h"

namespace kvasir {

constexpr int kQ4_1Group = 32;

struct Q4_1Grid {
  uint16_t d16 = 0, m16 = 0;  // as stored
  float d = 0, m = 0;         // their fp32 values
};

// The grid spanning [lo, hi] (lo <= hi, both finite). Throws kvasir::Error when d or m do not
// fit fp16 (|value| > 65504).
Q4_1Grid q4_1_grid(float lo, float hi);

// The code of w on the grid (0 for a grid with d = 0).
int q4_1_code(const Q4_1Grid& g, float w);

// What the file decodes code q to.
float q4_1_value(const Q4_1Grid& g, int q);

// The stored block: the grid and 32 codes (code j in the low nibble of byte j % 16 for j < 16,
// the high nibble for j >= 16).
BlockQ4_1 q4_1_pack(const Q4_1Grid& g, const uint8_t* codes);

// Round to nearest on the min/max grid of each group: rows x cols (cols a multiple of 32)
// row-major floats to rows * cols / 32 blocks; `dequant` (optional) receives the decoded values.
void q4_1_round_rows(const float* w, int64_t rows, int64_t cols, BlockQ4_1* out, float* dequant);

}  // namespace kvasir
