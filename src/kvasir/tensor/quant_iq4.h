// Reference quantize / dequantize of the GGUF block formats IQ4_NL, IQ4_XS, bit-identical to
// ggml's (ggml-quants.c of the pinned llama.cpp). Dispatched from quantize.h.
//
// Both store 4-bit indices into the fixed non-linear table kIQ4NLValues (int8 levels, denser
// near zero); a 32-weight group's 16 bytes put weight j in the low nibble of byte j and weight
// j+16 in its high nibble.
//   IQ4_NL (32 weights, 18 bytes): fp16 scale d, 16 bytes of indices;
//          w = d * kIQ4NLValues[q]
//   IQ4_XS (256 weights, 136 bytes): fp16 super-scale d, 8 six-bit group scales ls in 0..63
//          (low 4 bits in scales_l: group g in nibble g % 2 of byte g / 2; high 2 bits in
//          scales_h: bits 2g, 2g+1), then 8 groups of 16 bytes of indices;
//          w = d * (ls_g - 32) * kIQ4NLValues[q]
// Quantizing searches, per 32-weight group, 16 candidate scales around -amax/127 for the best
// weighted least-squares fit (weights x^2 without importance, importance * sqrt(sigma2 + x^2)
// with it), as ggml's quantize_row_iq4_nl_impl; IQ4_XS then rounds the group scales onto the
// 6-bit grid of the super-scale and re-picks the indices.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

constexpr int kQK4_NL = 32;
constexpr int kQKIQ4_XS = 256;

// The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl), ascending.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

struct BlockIQ4_NL {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockIQ4_XS {
  uint16_t d;                        // fp16 super-scale
  uint16_t scales_h;                 // high 2 bits of the 8 group scales
  uint8_t scales_l[kQKIQ4_XS / 64];  // low 4 bits of the 8 group scales
  uint8_t qs[kQKIQ4_XS / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// As ggml's quantize_<type>(x, out, rows, cols, importance): importance holds cols weights (one per
// column) or is null (then, exactly as ggml's quantize_iq4_nl / quantize_iq4_xs, the same search
// with weights x^2; ggml's quantize_row_iq4_nl_ref, a cheaper variant, is not what it dispatches).
void quantize_rows_iq4(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                       const float* importance);
// As ggml's dequantize_row_<type>: n floats from row_bytes(t, n) bytes.
void dequantize_row_iq4(DType t, const void* in, float* out, int64_t n);

}  // namespace kvasir
