// Prompt scoring: from the model's raw logits at every position of a prompt (delivered chunk by
// chunk as the prompt is prefilled) to a PromptScore (include/kvasir/engine.h): the mean entropy
// of the next-token distributions and the mean negative log-likelihood of the prompt's own next
// tokens. A router asks a small model for it to judge how hard a prompt is.
//
// A PromptScorer belongs to one score_prompt request. Position i's logits predict token i + 1, so
// positions 0 .. n_tokens - 2 are scored and the last position's logits are not needed. For each
// prefill chunk it says how many of the chunk's leading logits rows it needs (rows_wanted) and
// takes them (add). Chunks arrive in position order; a chunk that starts at position 0 starts
// over (a preempted sequence recomputes its prompt). Each row's entropy and NLL depend only on
// that row's values, and both are summed in double precision in position order, so the result
// does not depend on how the prompt was chunked or batched: equal rows give a bit-identical score.
//
// score_row() is the per-row math: max over the row (float), then one pass accumulating, in
// double, S = sum exp(x - max) and T = sum exp(x - max) * (x - max); log Z = max + log S, the
// entropy is log S - T / S and the NLL of token t is log S - (x_t - max). Tokens whose logit is
// -inf contribute nothing (p = 0, and 0 * log 0 = 0).
//
// Memory: a scoring chunk needs one logits row (n_vocab floats) per token, far more than a decode
// step's one row per sequence. The engine bounds the logits rows scoring may take in one step by
// score_rows_per_step() (SchedulerConfig::max_score_tokens caps the tokens of scoring sequences
// scheduled in a step; the runner is sized for that many more rows), so scoring never asks the
// runner for more rows than it holds, whatever the vocabulary.
#pragma once

#include <cstdint>
#include <span>

#include "kvasir/engine.h"

namespace kvasir {

struct RowScore {
  double entropy = 0;  // H(softmax(row)), nats
  double nll = 0;      // -log softmax(row)[next], nats
};

// The entropy of softmax(logits[0, n_vocab)) and the NLL of `next` (in [0, n_vocab)).
RowScore score_row(const float* logits, int n_vocab, int32_t next);

// Bytes of logits rows the engine lets prompt scoring use in one step, and the rows that makes:
// kScoreLogitsBytes / (4 * n_vocab), at least kMinScoreRows, at most max_batched_tokens (a step
// has no more tokens than that). 64 Ki-token vocabularies get 128 rows, 150k ones 55.
constexpr int64_t kScoreLogitsBytes = int64_t{32} << 20;
constexpr int kMinScoreRows = 16;
int score_rows_per_step(int n_vocab, int max_batched_tokens);

class PromptScorer {
 public:
  // `n_tokens`: the prompt's length (>= 1); `n_vocab`: the logits rows' width. Throws
  // kvasir::Error for a prompt with no tokens or a vocabulary with none.
  PromptScorer(int n_tokens, int n_vocab);

  // For a chunk of tokens at positions [start, start + n): how many of its leading logits rows
  // (positions start, start + 1, ...) the score needs: those of positions below n_tokens - 1.
  int rows_wanted(int start, int n) const;
  // Takes the chunk's rows_wanted(start, n) rows (n_vocab floats each; may be null when none are
  // wanted) and scores them against `prompt` (the whole prompt: position i's row against token
  // i + 1). Throws kvasir::Error for a chunk that does not continue the previous one (or start
  // at 0) or a prompt of another length.
  void add(int start, int n, const float* rows, std::span<const int32_t> prompt);
  // True once every position of the prompt has been added.
  bool complete() const { return next_ == n_tokens_; }
  // The score (complete() must hold; throws kvasir::Error otherwise). n = n_tokens - 1; the means
  // are 0 when n is 0.
  PromptScore finish() const;

 private:
  int n_tokens_;
  int n_vocab_;
  int next_ = 0;            // the next position expected
  double sum_entropy_ = 0;  // over the scored positions of [0, next_), in position order
  double sum_nll_ = 0;
};

}  // namespace kvasir
