// Sampler: chooses a request's next token from one row of logits. One Sampler per request; it
// owns the request's seeded RNG, its penalty window (fed by accept_prompt() and accept()) and the
// scratch buffers, which are sized on first use and reused, so sample() does not allocate in
// steady state and never throws for valid input. SamplingParams are validated by the constructor.
//
// The chain, in this order (see sampling_params.h for each parameter's exact meaning):
//   0. allowed set           (optional, per call: constrained decoding) logit[t] = -inf for every
//                            token outside it, as a logit_bias of -inf would
//   1. logit_bias            logit[t] += bias[t]
//   2. penalties             repetition (prompt + output in the window), then frequency and
//                            presence (output in the window)
//   -- logprobs are taken here (log-softmax of these logits), or from the raw logits (kRaw) --
//   3. greedy                if temperature < 1e-5: argmax, ties -> lowest id; done
//   4. temperature           logit / T
//   5. top-k                 keep the k best (ties -> lowest id)
//   6. top-p                 keep the smallest most-probable prefix reaching mass top_p, with
//                            probabilities renormalized over what top-k kept
//   7. min-p                 keep p >= min_p * p_max
//   8. softmax + draw        one uniform double u in [0, 1) from the RNG (exactly one per
//                            non-greedy sample; greedy draws none); the token where the
//                            cumulative mass, scanned in a fixed order (id order when nothing was
//                            truncated), passes u * total.
// Logits that are NaN count as -inf. If every logit is -inf the lowest id is returned.
// Exponentials use fast_exp (fast_exp.h), not libm, and sums are accumulated in a fixed order,
// so a seed reproduces the same tokens on every machine.
//
// Cost per call at n_vocab = 152k: greedy and top-k touch each logit about once (no sort, no
// exponential outside the top k); plain sampling, top-p and logprobs add one vectorized
// exponential pass; top-p sorts only the tokens that can matter (p >= (1 - top_p) / n_vocab of
// the mass) and narrows them with a mass histogram first when a flat distribution leaves many;
// min-p alone pre-filters on logits.
//
// Thread safety: none; a Sampler is used by one thread at a time (the engine's step loop).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kvasir/sampling/penalty_window.h"
#include "kvasir/sampling/rng.h"
#include "kvasir/sampling/sampling_params.h"
#include "kvasir/sampling/top_tokens.h"

namespace kvasir {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  // Filled when params.logprobs: the chosen token's logprob (may be -inf for a banned token), and
  // the params.top_logprobs most likely tokens, most likely first (ties -> lowest id). The vector
  // is cleared and refilled, so reusing one SampleResult keeps its capacity.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

class Sampler {
 public:
  // Throws kvasir::Error when params are invalid for this vocabulary or n_vocab <= 0.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  // Feeds tokens to the penalty window: the prompt once, before the first sample(), and every
  // token accepted into the output. Throws kvasir::Error for a token outside [0, n_vocab).
  void accept_prompt(std::span<const int32_t> tokens);
  void accept(int32_t token);

  // Chooses the next token from logits[0..n_vocab) (n_vocab must equal the constructor's, else
  // kvasir::Error). Does not accept() the token: the caller does, once it keeps it. out may be
  // null. `allowed` (null: every token) is a bit set over the vocabulary (word i holds tokens
  // 64 i .. 64 i + 63) of the tokens that may be chosen (step 0); it must hold at least one.
  int32_t sample(const float* logits, int32_t n_vocab, SampleResult* out = nullptr,
                 const uint64_t* allowed = nullptr);

  // The distribution sample() draws from, written densely to probs[0..n_vocab) (zeros for tokens
  // the chain removed; one-hot for greedy). Consumes no randomness. For rejection sampling in
  // speculative decoding, and for tests.
  void probabilities(const float* logits, int32_t n_vocab, float* probs);

  // Fills out (token, and with params.logprobs its logprob and top logprobs) as sample() would
  // have had it chosen `token` from this row, without drawing: for tokens that speculative
  // decoding accepts from a proposal. Throws kvasir::Error for a token outside the vocabulary.
  void score(const float* logits, int32_t n_vocab, int32_t token, SampleResult* out);

  // Makes this sampler's penalty window equal to other's (same parameters expected): a draft
  // model's sampler follows its target's accepted history this way. Keeps its own RNG.
  void copy_history_from(const Sampler& other) { window_ = other.window_; }

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }
  uint64_t seed() const { return seed_; }  // the seed in use, drawn at random if unset
  Rng& rng() { return rng_; }
  const PenaltyWindow& penalty_window() const { return window_; }

 private:
  void check_vocab(int32_t n_vocab) const;
  // Steps 0-2. Returns the row to continue from: logits itself when nothing applies, else work_.
  const float* apply_bias_and_penalties(const float* logits);
  bool is_allowed(int32_t t) const { return !allowed_ || ((allowed_[t >> 6] >> (t & 63)) & 1u); }
  // The chosen token's logit after steps 1-2, recomputed bit-identically from the raw row.
  float processed_logit(const float* logits, int32_t token) const;
  // Log-softmax normalizer of row and out->top_logprobs; logprob_of() then maps a logit of row.
  void prepare_logprobs(const float* row, SampleResult* out);
  float logprob_of(float logit) const;
  int32_t argmax(const float* row) const;  // ties -> lowest id, NaN ignored
  void ensure_buffers();
  // Steps 4-7 on row (post-penalty logits). Leaves unnormalized probabilities (max = 1) in work_,
  // and sets kept_all_ (every token, id order) or ids_[0..n_kept_) (in the order draw() scans:
  // best first after top-k or a sorted top-p, else id order, which min-p filtering preserves).
  void truncate(const float* row);
  // Step 6 when every token is still a candidate.
  void top_p_dense(double target);
  // Total mass of the kept set.
  double kept_mass() const;
  // Step 8: one uniform draw over the kept set.
  int32_t draw();

  SamplingParams params_;
  int32_t n_vocab_;
  bool greedy_;
  bool use_penalties_;
  std::vector<std::pair<int32_t, float>> bias_;
  const uint64_t* allowed_ = nullptr;  // step 0's set, during one sample() call only
  PenaltyWindow window_;
  uint64_t seed_;
  Rng rng_;

  float log_min_p_ = 0.0f;  // for the logit-space min-p pre-filter

  // Scratch, sized on first use (about 8 bytes per vocabulary entry). work_: the processed
  // logits, then the weights exp((x - max) / T) (best token = 1). ids_: the kept tokens when not
  // all are kept. block_mass_: per-block weight sums of a dense row. hist_mass_: top-p's
  // probability-mass histogram.
  std::vector<float> work_;
  std::vector<int32_t> ids_;
  std::vector<double> block_mass_;
  std::vector<double> hist_mass_;
  int32_t n_kept_ = 0;
  bool kept_all_ = false;
  TopTokens top_;
  float lp_max_ = 0.0f;
  double lp_log_sum_ = 0.0;
};

}  // namespace kvasir
