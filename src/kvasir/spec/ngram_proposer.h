// The n-gram proposer (prompt lookup decoding): the latest n tokens of a sequence are looked up
// earlier in the same sequence (prompt and output so far), longest n first from n_max down to
// n_min, and the tokens that followed the most recent earlier occurrence are proposed. It costs
// no model pass and wins where the output repeats its input: rewriting, editing, code, extraction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvasir/spec/proposer.h"

namespace kvasir {

// Writes at most k tokens into out (cleared first): the continuation of the most recent earlier
// occurrence of the longest suffix of tokens (n_max down to n_min tokens long) that occurs
// earlier. Returns the n of the match, 0 when none. O(len * n_max).
int ngram_lookup(std::span<const int32_t> tokens, int n_min, int n_max, int k,
                 std::vector<int32_t>& out);

class NgramProposer final : public Proposer {
 public:
  // Throws kvasir::Error unless 1 <= n_min <= n_max.
  NgramProposer(int n_min, int n_max);
  const char* name() const override { return "ngram"; }
  void propose(std::span<ProposalSlot> slots) override;

 private:
  int n_min_, n_max_;
};

}  // namespace kvasir
