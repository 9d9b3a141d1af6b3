// Embedding pooling: from the final-norm hidden rows of a sequence's tokens (Model::forward's
// hidden rows, delivered chunk by chunk as the prompt is prefilled) to one vector.
//
// A Pooler belongs to one embedding request (EmbeddingParams, include/kvasir/engine.h). For each
// prefill chunk it says which rows it needs (rows_wanted: mean every row, cls the row of position
// 0, last the row of the prompt's last position) and takes them (add). Rows arrive in position
// order; a chunk that starts at position 0 starts over (a preempted sequence recomputes its
// prompt). The result depends only on the rows' values, never on how the prompt was chunked or
// batched: the mean is summed in double precision in position order and divided by the token
// count once, so equal rows give a bit-identical vector. finish() then keeps the first
// `dimensions` values (when set) and divides by their L2 norm (when normalize; the norm summed in
// double, as llama.cpp's common_embd_normalize; a zero vector stays zero).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kvasir/engine.h"

namespace kvasir {

const char* pooling_name(Pooling p);  // "none", "mean", "cls", "last"
// "none" | "mean" | "cls" | "last" (llama.cpp's --pooling spellings); nullopt for anything else.
std::optional<Pooling> parse_pooling(std::string_view name);
// llama.cpp's enum llama_pooling_type as a GGUF's `<arch>.pooling_type` stores it: 0 none,
// 1 mean, 2 cls, 3 last. nullopt for 4 (rank: a reranker's classification head, which Kvasir does
// not run) and any other value.
std::optional<Pooling> pooling_from_gguf(int64_t type);

class Pooler {
 public:
  // `n_tokens`: the prompt's length; `dim`: the model's hidden size. Throws kvasir::Error for
  // pooling kNone, dimensions outside [0, dim] or a prompt with no tokens.
  Pooler(const EmbeddingParams& params, int dim, int n_tokens);

  // For a chunk of tokens at positions [start, start + n): the indices [begin, end) within the
  // chunk whose hidden rows the pooling needs (begin == end: none).
  std::pair<int, int> rows_wanted(int start, int n) const;
  // Takes the rows rows_wanted(start, n) named: end - begin rows of dim floats. Throws
  // kvasir::Error for a chunk that does not continue the previous one (or start at 0).
  void add(int start, int n, const float* rows);
  // True once every position of the prompt has been added.
  bool complete() const { return next_ == n_tokens_; }
  // The embedding (complete() must hold): pooled, truncated, normalized as asked.
  std::vector<float> finish() const;

 private:
  EmbeddingParams params_;
  int dim_;
  int n_tokens_;
  int next_ = 0;             // the next position expected
  std::vector<double> sum_;  // kMean: the sum of the rows of positions [0, next_)
  std::vector<float> row_;   // kCls, kLast: the row kept
};

}  // namespace kvasir
