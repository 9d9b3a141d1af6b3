#include "kvasir/spec/ngram_proposer.h"

#include <algorithm>

#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

int ngram_lookup(std::span<const int32_t> tokens, int n_min, int n_max, int k,
                 std::vector<int32_t>& out) {
  out.clear();
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return 0;
  for (int n = std::min(n_max, len - 1); n >= n_min; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Most recent occurrence that ends before the suffix starts, so it has a continuation.
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      const int from = i + n;
      const int to = std::min(len, from + k);
      out.assign(tokens.begin() + from, tokens.begin() + to);
      return n;
    }
  }
  return 0;
}

NgramProposer::NgramProposer(int n_min, int n_max) : n_min_(n_min), n_max_(n_max) {
  if (n_min < 1 || n_max < n_min)
    fail("the n-gram proposer needs 1 <= n_min <= n_max, got n_min {} and n_max {}", n_min, n_max);
}

void NgramProposer::propose(std::span<ProposalSlot> slots) {
  const double t0 = now_seconds();
  for (ProposalSlot& s : slots) {
    ngram_lookup(s.tokens, n_min_, n_max_, s.k, *s.draft);
    s.q = nullptr;
  }
  busy_seconds_ += now_seconds() - t0;
}

}  // namespace kvasir
