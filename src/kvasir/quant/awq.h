// AWQ (Lin, Tang, Tang, Yang, Gan, Han 2023, "AWQ: Activation-aware Weight Quantization for LLM
// Compression and Acceleration"; the reference llm-awq and AutoAWQ's auto_scale / auto_clip) for
// the weights that share one input, to GGUF Q4_1 blocks (quant/q4_1_group.h). The math only:
// which tensors a scale is folded into is quant/awq_fold.h's.
//
// Scale search: the weights' input columns are multiplied by s and the input divided by it,
// W X = (W diag(s)) (diag(s)^-1 X), so salient input channels (large mean |x|) get finer
// quantization steps. s = s_x^alpha with s_x the per-channel mean |x| over the calibration
// tokens, normalized as AutoAWQ does (s / sqrt(max(s) * min(s))), for alpha in {0, 1/n, ..., 1}
// (n = n_grid, 20: AutoAWQ's 0 .. 0.95 plus 1); the alpha with the lowest output error
//   sum over the group's matrices of ||W X - Q(W diag(s)) diag(s)^-1 X||^2
// wins (computed from the Gram matrix of X: quant/recon_error.h; AutoAWQ uses a sample of the
// activations themselves). alpha = 0 is plain rounding, so the search never does worse than it
// on the calibration set. Q is round-to-nearest on each group's min/max grid, fp16 d and m, as
// written. Tied channels (tie[j] = the index of its representative) are constrained to one scale,
// whose s_x is the mean of theirs: an attention output channel's scale is folded into the V row
// its heads share (GQA).
//
// Clip search (AutoAWQ's auto_clip, per row and group of 32): the scaled weights are clamped to
// [-f * max|w|, f * max|w|] for f = 1, 1 - 1/clip_grid, ..., 1 - max_shrink before the min/max
// grid is taken, keeping the f with the lowest error of the group's contribution to the output,
// (w - w') G_gg (w - w')^T with G_gg the group's diagonal block of the (scaled) Gram matrix.
// f = 1 is plain rounding. AutoAWQ skips it for Q and K (the attention scores amplify their
// error in ways the per-layer output error does not see); the caller decides.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvasir/quant/q4_1_group.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct AwqOptions {
  int n_grid = 20;          // alpha steps: alpha = i / n_grid, i = 0 .. n_grid
  int clip_grid = 20;       // clip steps: f = 1 - i / clip_grid
  double max_shrink = 0.5;  // the smallest f is 1 - max_shrink
};

// One matrix of a group: rows x cols row-major (cols: the group's input width).
struct AwqMatrix {
  const float* w = nullptr;
  int64_t rows = 0;
};

struct AwqScales {
  std::vector<float> scales;  // cols
  double alpha = 0;
  double loss = 0;        // the summed squared output error at alpha
  double loss_plain = 0;  // at alpha = 0 (plain rounding on the same grid)
};

// gram: cols x cols (sum_t x x^T); mean_abs: cols; tie: empty, or cols indices (tie[j] =
// tie[tie[j]]). Throws kvasir::Error for shapes that do not fit or non-positive statistics
// everywhere.
AwqScales awq_search_scales(std::span<const AwqMatrix> mats, int64_t cols, const double* gram,
                            std::span<const double> mean_abs, std::span<const int64_t> tie,
                            const AwqOptions& options, ThreadPool* pool = nullptr);

// Q4_1 blocks of ws (rows x cols, the weights already multiplied by their scales), with the clip
// search when `clip`, against gram_scaled (the Gram matrix of the scaled input,
// diag(s)^-1 G diag(s)^-1). dequant (rows x cols, optional) receives what the file decodes to.
std::vector<BlockQ4_1> awq_quantize_q4_1(const float* ws, int64_t rows, int64_t cols,
                                         const double* gram_scaled, bool clip,
                                         const AwqOptions& options, float* dequant,
                                         ThreadPool* pool = nullptr);

}  // namespace kvasir
