#include "kvasir/spec/rejection_sampler.h"

#include <algorithm>

namespace kvasir {

int32_t draw_from_weights(const float* w, int32_t n, double total, double u) {
  const double target = u * total;
  double acc = 0;
  int32_t last = -1;
  for (int32_t i = 0; i < n; ++i) {
    if (!(w[i] > 0.0f)) continue;
    acc += w[i];
    last = i;
    if (target < acc) return i;
  }
  return last;
}

SpecDecision verify_draft_token(Sampler& target, const float* logits, int32_t draft_token,
                                const float* q, std::vector<float>& p, SampleResult* out,
                                RejectionRule rule) {
  const int32_t n = target.n_vocab();
  SpecDecision d;
  if (target.params().is_greedy()) {
    d.token = target.sample(logits, n, out);
    d.accepted = d.token == draft_token;
    return d;
  }
  p.resize(static_cast<size_t>(n));
  target.probabilities(logits, n, p.data());
  const double qd = q != nullptr ? static_cast<double>(q[draft_token]) : 1.0;
  const double u = target.rng().uniform();
  if (u * qd < static_cast<double>(p[static_cast<size_t>(draft_token)])) {
    d.token = draft_token;
    d.accepted = true;
  } else {
    // Residual max(0, p - q), built in place over p.
    double total = 0;
    if (rule == RejectionRule::kExact) {
      for (int32_t i = 0; i < n; ++i) {
        const float qi = q != nullptr ? q[i] : (i == draft_token ? 1.0f : 0.0f);
        const float r = std::max(0.0f, p[static_cast<size_t>(i)] - qi);
        p[static_cast<size_t>(i)] = r;
        total += r;
      }
    } else {
      for (int32_t i = 0; i < n; ++i) total += p[static_cast<size_t>(i)];
    }
    const double u2 = target.rng().uniform();
    int32_t t = total > 0 ? draw_from_weights(p.data(), n, total, u2) : -1;
    // No residual mass (p <= q everywhere up to rounding: rejection had probability ~0): keep
    // the draft token, which p allows.
    if (t < 0) t = draft_token;
    d.token = t;
    d.accepted = t == draft_token;
  }
  target.score(logits, n, d.token, out);
  return d;
}

}  // namespace kvasir
