// Prompt scoring: the row math and the per-request accumulator (contract in prompt_scorer.h).
#include "kvasir/engine/prompt_scorer.h"

#include <algorithm>
#include <cmath>

#include "kvasir/util/error.h"

namespace kvasir {

RowScore score_row(const float* logits, int n_vocab, int32_t next) {
  float m = logits[0];
  for (int i = 1; i < n_vocab; ++i) m = std::max(m, logits[i]);
  double s = 0, t = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double d = static_cast<double>(logits[i]) - m;
    const double e = std::exp(d);
    s += e;
    if (e > 0) t += e * d;  // -inf logits: p = 0 and p log p = 0 (not 0 * -inf)
  }
  const double log_s = std::log(s);
  return {log_s - t / s, log_s - (static_cast<double>(logits[next]) - m)};
}

int score_rows_per_step(int n_vocab, int max_batched_tokens) {
  const int64_t fit = kScoreLogitsBytes / (int64_t{4} * std::max(n_vocab, 1));
  return static_cast<int>(
      std::min<int64_t>(max_batched_tokens, std::max<int64_t>(kMinScoreRows, fit)));
}

PromptScorer::PromptScorer(int n_tokens, int n_vocab) : n_tokens_(n_tokens), n_vocab_(n_vocab) {
  if (n_tokens <= 0) fail("prompt scoring: the prompt needs at least one token, got {}", n_tokens);
  if (n_vocab <= 0) fail("prompt scoring: the vocabulary is empty");
}

int PromptScorer::rows_wanted(int start, int n) const {
  return std::max(0, std::min(start + n, n_tokens_ - 1) - start);
}

void PromptScorer::add(int start, int n, const float* rows, std::span<const int32_t> prompt) {
  if (start == 0) {
    next_ = 0;
    sum_entropy_ = sum_nll_ = 0;
  }
  if (start != next_ || n <= 0 || start + n > n_tokens_)
    fail("prompt scorer: a chunk at positions {}..{} does not continue at position {} of {}", start,
         start + n - 1, next_, n_tokens_);
  if (static_cast<int>(prompt.size()) != n_tokens_)
    fail("prompt scorer: the prompt has {} tokens, expected {}", prompt.size(), n_tokens_);
  const int wanted = rows_wanted(start, n);
  if (wanted > 0 && rows == nullptr)
    fail("prompt scorer: the chunk at position {} brought no logits rows ({} needed)", start,
         wanted);
  const auto V = static_cast<size_t>(n_vocab_);
  for (int r = 0; r < wanted; ++r) {
    const RowScore rs = score_row(rows + static_cast<size_t>(r) * V, n_vocab_,
                                  prompt[static_cast<size_t>(start + r + 1)]);
    sum_entropy_ += rs.entropy;
    sum_nll_ += rs.nll;
  }
  next_ = start + n;
}

PromptScore PromptScorer::finish() const {
  if (!complete())
    fail("prompt scorer: the score is asked for at position {} of {}", next_, n_tokens_);
  PromptScore ps;
  ps.n = n_tokens_ - 1;
  if (ps.n > 0) {
    ps.mean_entropy = sum_entropy_ / ps.n;
    ps.mean_nll = sum_nll_ / ps.n;
  }
  return ps;
}

}  // namespace kvasir
