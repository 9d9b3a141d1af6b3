// Verification of draft tokens against the target model (speculative decoding, Leviathan et al.
// 2023 / Chen et al. 2023), one position at a time so the caller can stop at the first rejection,
// a stop condition or max_tokens, and feed each kept token to the sampler's penalty history
// before the next position is judged.
//
// At a draft position with target logits row L, draft token d and draft distribution q (null:
// one-hot on d, as from an n-gram or a greedy draft):
//   greedy target   the target's own choice t = argmax of L after bias and penalties (exactly
//                   what plain decoding picks); accepted iff t == d, else t replaces d.
//   sampled target  p = the target sampler's distribution (Sampler::probabilities: every option
//                   applied as in plain decoding). Accept d with probability min(1, p(d)/q(d))
//                   (one uniform u from the target's RNG: accepted iff u * q(d) < p(d)); otherwise
//                   draw the replacement from max(0, p - q) normalized (a second uniform). The
//                   token kept at this position is then distributed exactly as p, whatever q is;
//                   with q one-hot the residual is p without d.
// After the last draft position the target's next token (the "bonus") is an ordinary
// Sampler::sample of the following row. Logprobs of kept tokens come from Sampler::score, as
// plain decoding would report them.
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/sampling/sampler.h"

namespace kvasir {

// Tests only: a deliberately wrong rule, to prove the distribution test can fail.
enum class RejectionRule {
  kExact,
  kBrokenResampleFromTarget,  // on rejection draw from p instead of the residual max(0, p - q)
};

struct SpecDecision {
  int32_t token = -1;     // the token kept at this position
  bool accepted = false;  // token == the draft token (verification goes on)
};

// Judges one draft position (see above); fills out (token; logprobs when the request asks for
// them). p_scratch is resized to n_vocab once and reused.
SpecDecision verify_draft_token(Sampler& target, const float* logits, int32_t draft_token,
                                const float* q, std::vector<float>& p_scratch, SampleResult* out,
                                RejectionRule rule = RejectionRule::kExact);

// A draw from weights w[0..n) (non-negative) with total mass `total`, using uniform u in [0, 1):
// the first token where the cumulative mass passes u * total, scanned in id order; the last token
// with mass when rounding runs past the end. Returns -1 when no weight is positive.
int32_t draw_from_weights(const float* w, int32_t n, double total, double u);

}  // namespace kvasir
