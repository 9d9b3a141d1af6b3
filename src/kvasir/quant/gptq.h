// GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022, "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers"; Algorithm 1 and the reference implementation's gptq.py,
// github.com/IST-DASLab/gptq) for one weight matrix, to GGUF Q4_1 blocks (asymmetric 4-bit,
// groups of 32 input columns, fp16 scale and min: quant/q4_1_group.h).
//
// W is rows x cols (GGUF's layout: a row is an output channel, groups run along it). With H =
// 2 X^T X over the calibration activations (any positive multiple of the Gram matrix gives the
// same result; the factor 2 cancels), the columns are quantized one at a time and each one's
// rounding error is spread over the columns not yet quantized through the upper Cholesky factor
// U of H^-1 (err = (w_q - q(w_q)) / U[q][q]; w_j -= err * U[q][j]), which minimizes
// ||WX - W'X|| column by column (Optimal Brain Surgeon). As in the reference:
//  - dead inputs (H[i][i] = 0) get H[i][i] = 1 and weight 0 (they never reach the output);
//  - dampening: H += damp * mean(diag H) * I (damp 0.01 default); if H or H^-1 still does not
//    factor, damp is multiplied by 10 (up to 3 times) and the raised value reported;
//  - lazy batch updates: errors are applied at once within a block of `block` columns (128) and
//    to the columns after it in one rank-`block` update when the block is done;
//  - act_order: columns are processed in descending order of diag(H) (the most active inputs
//    first, while the most error-feedback freedom remains).
// Rows are independent given U, so they are split over the thread pool (tiles of 8 rows) and the
// result does not depend on the thread count.
//
// Group grids (min/max, q4_1_grid) are fixed when a group's first column comes up, from the
// current values of all 32 of its columns (the error feedback received so far included, lazy
// updates still pending applied), and the grid's d and m are fp16-rounded before any column of
// the group is rounded: the file decodes to exactly the values the error feedback assumed.
// Without act_order this is the reference's behaviour (a group's grid is found at its first
// column). With act_order the reference forms groups of consecutive *permuted* columns and
// stores a g_idx map; GGUF Q4_1 cannot (its groups are 32 consecutive columns in the original
// order), so the groups stay the file's and each grid is fixed lazily as above. The reference's
// static_groups option instead fixes every grid up front from the unquantized weights; fixing it
// late sees the feedback the earlier columns pushed into the group, which never does worse on
// the groups' own range. Group sizes other than 32 need the GPTQ (HF) layout and are refused by
// the caller.
//
// grid_search (the reference quantizer's `mse` option, weighted as AWQ's clip search): instead of
// the group's min/max, the grid of [f lo, f hi] for f = 1, 0.95, ..., 0.5 with the lowest
// (w - w') G_gg (w - w')^T, G_gg the group's diagonal block of the Gram matrix and w the group's
// current values (the error feedback still to come is not foreseen). f = 1 is min/max, so a
// group's own weighted error never rises. Off by default: on stories260K and TinyStories-656K
// (with act-order) it raised perplexity slightly (4.3113 -> 4.3200, 27.78 -> 27.94).
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/quant/q4_1_group.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct GptqOptions {
  double damp = 0.01;        // fraction of mean(diag H) added to the diagonal
  bool act_order = false;    // process columns by descending diag(H)
  int block = 128;           // lazy-batch width, a positive multiple of 32
  bool grid_search = false;  // shrink each group's range (see above) instead of min/max
};

struct GptqResult {
  std::vector<BlockQ4_1> blocks;  // rows * cols / 32, row by row (the tensor's bytes)
  std::vector<float> dequant;     // rows x cols: what the file decodes to
  double damp = 0;                // the dampening used (options.damp unless it had to be raised)
};

// w: rows x cols row-major; gram: cols x cols, symmetric, sum_t x_t x_t^T. cols must be a
// multiple of 32. Throws kvasir::Error for bad shapes or options, non-finite input, or an H
// that does not factor even with raised dampening.
GptqResult gptq_q4_1(const float* w, int64_t rows, int64_t cols, const double* gram,
                     const GptqOptions& options, ThreadPool* pool = nullptr);

}  // namespace kvasir
