// Internal to the matmul implementation: the SIMD entry points (compiled once per Highway target
// in matmul_kernels.cc and chosen at run time) that matmul.cc drives from its thread pool.
// Callers have validated shapes and dtypes; these functions do not check again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvasir/kernels/cpu/matmul.h"

namespace kvasir::cpu::matmul_detail {

// y[t * w.rows() + r] for every token t of x and every row r of panels [p0, p1). p0 must be a
// multiple of kGroupPanels (the 512-bit float tiles pair panels 2i and 2i + 1 of a group).
void matmul_panels(const PackedMatrix& w, const Activations& x, float* y, int64_t p0, int64_t p1);

// Quantizes 32-float blocks [b0, b1) of x to Q8_0 exactly as kvasir::quantize_block_q8_0 does,
// also storing each block's scale as a float (scales[b] == fp16_to_fp32(q[b].d)) and the sum of
// its 32 codes (sums[b]) and of its first 16 (sums_lo[b]).
void quantize_q8_0_blocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                          int32_t* sums_lo, int64_t b0, int64_t b1);

// Quantizes 256-float super-blocks [s0, s1) of x as kvasir::quantize_superblock_q8 does, into 8
// blocks each (q[8s + j].qs = codes 32j .. 32j + 31, q[8s + j].d = fp16 of the scale), with
// scales[8s + j] = the float scale and the blocks' code sums as quantize_q8_0_blocks's.
void quantize_q8_k_superblocks(const float* x, BlockQ8_0* q, float* scales, int32_t* sums,
                               int32_t* sums_lo, int64_t s0, int64_t s1);

// out[k * T + i] = x[i * cols + k] for i < T (1 <= T <= kFloatTokenTile), k < cols: one token
// tile of Activations::f32_tiles().
void interleave_tokens(const float* x, int64_t T, int64_t cols, float* out);

const char* chosen_target_name();
std::vector<std::string> runnable_target_names();
bool force_target(const std::string& name);

}  // namespace kvasir::cpu::matmul_detail
