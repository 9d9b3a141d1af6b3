// An observer of the forward pass's weight multiplications, for calibration: llama.cpp's
// importance matrix (quant/imatrix_collect.h) and, later, other activation statistics.
//
// When a ForwardState has one (ForwardState::matmul_observer), Model::forward() calls
// on_matmul() before every matrix multiplication by a weight matrix, once per weight, with the
// activations that weight is about to be multiplied by: x holds n_rows rows of `cols` floats
// (row t = batch token t; for the output matrix, the rows that asked for logits, in output
// order), y = x · Wᵀ. What each weight sees:
//   blk.N.attn_q/attn_k/attn_v.weight  the attention RMSNorm's output
//   blk.N.attn_output.weight           the attention output (heads concatenated)
//   blk.N.ffn_gate/ffn_up.weight       the FFN RMSNorm's output
//   blk.N.ffn_down.weight              silu(gate) * up
//   output.weight                      the final RMSNorm's output (token_embd.weight when the
//                                      output matrix is tied to the embeddings)
// x points into the backend's memory and is valid only during the call; on a backend that does
// not share host memory (ForwardState::backend().shares_host_memory()) the observer must copy it
// to the host first. The call runs on the thread that called forward(), between two kernels.
// Without an observer forward() does no extra work.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvasir {

class MatmulObserver {
 public:
  virtual ~MatmulObserver() = default;
  // `weight`: the matrix's GGUF tensor name, e.g. "blk.3.ffn_down.weight".
  virtual void on_matmul(std::string_view weight, const float* x, int64_t n_rows, int64_t cols) = 0;
};

}  // namespace kvasir
