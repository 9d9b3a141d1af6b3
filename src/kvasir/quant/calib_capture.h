// Calibration activations for the calibrated quantizers (quant/gptq.h, quant/awq.h): for each
// input group of a layer's linear weights, the Gram matrix G = sum_t x_t x_t^T (in double) of the
// activations x_t the weights are multiplied by, and the sum of |x| per column, over every token
// of the calibration text.
//
// The weights of a group see the same input (model/matmul_observer.h), so they share one entry,
// named after the group's first weight:
//   blk.N.attn_q.weight       attn_q, attn_k, attn_v (the attention RMSNorm's output)
//   blk.N.attn_output.weight  attn_output (the heads' outputs, concatenated)
//   blk.N.ffn_gate.weight     ffn_gate, ffn_up (the FFN RMSNorm's output)
//   blk.N.ffn_down.weight     ffn_down (silu(gate) * up)
// calib_group() maps a weight name to its entry.
//
// The activations are those of the model as loaded (the unquantized one): every layer is
// calibrated on what the float model feeds it, not on the output of the layers already
// quantized (GPTQ's and AWQ's reference code run layer by layer on the quantized prefix; the
// simple way here costs some accuracy in deep models and none of the plumbing). The Gram
// matrices are cols x cols per group, which bounds this to models whose widest layer input fits
// in memory squared (fine up to ~16k columns).
//
// The text is cut into chunks of ctx tokens (the last one may be shorter), each run from an empty
// cache with its first token replaced by BOS (bos_id >= 0), as perplexity and imatrix do.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/model/matmul_observer.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

// The statistics of one input group.
struct CalibStats {
  int64_t cols = 0;
  int64_t n_tokens = 0;
  std::vector<double> gram;     // cols x cols, symmetric, sum over tokens of x x^T
  std::vector<double> sum_abs;  // cols: sum over tokens of |x|
  double mean_abs(int64_t j) const {
    return n_tokens > 0 ? sum_abs[static_cast<size_t>(j)] / static_cast<double>(n_tokens) : 0;
  }
};

// "blk.3.attn_v.weight" -> "blk.3.attn_q.weight", "blk.3.ffn_up.weight" ->
// "blk.3.ffn_gate.weight"; attn_q, attn_output, ffn_gate, ffn_down map to themselves; anything
// else (output.weight, norms) to "".
std::string calib_group(std::string_view weight);

// The observer: adds every matmul input of a group's first weight to that group's statistics
// (the other weights of the group see the same rows and are skipped). The Gram matrix is summed
// in double, each entry in token order by one thread, so it does not depend on the thread count.
class CalibCapture : public MatmulObserver {
 public:
  explicit CalibCapture(ThreadPool* pool = nullptr) : pool_(pool) {}
  void on_matmul(std::string_view weight, const float* x, int64_t n_rows, int64_t cols) override;
  // The statistics so far, Gram matrices made symmetric.
  std::map<std::string, CalibStats> stats() const;

 private:
  ThreadPool* pool_;
  std::map<std::string, CalibStats, std::less<>> stats_;  // Gram: lower triangle only
  std::vector<float> xt_;                                 // the step's rows, transposed
};

struct CalibOptions {
  int ctx = 512;           // tokens per chunk
  int64_t max_tokens = 0;  // use at most this many tokens of the text (0: all)
  int bos_id = -1;         // replaces each chunk's first token when >= 0
};

struct CalibResult {
  std::map<std::string, CalibStats> stats;
  int64_t tokens = 0;  // tokens run
  int chunks = 0;
  double seconds = 0;
};

// Throws kvasir::Error for fewer than 16 tokens, a ctx under 16, or non-finite statistics.
// `progress(tokens_done, tokens_total)` after each chunk.
CalibResult capture_calibration(const Model& model, ThreadPool& pool,
                                std::span<const int32_t> tokens, const CalibOptions& options,
                                const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kvasir
