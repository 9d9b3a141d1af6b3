// ReplayProposer: a test and benchmark hook that proposes a known continuation at a controlled
// acceptance rate. Given reference sequences (prompt + the target's own greedy output), it
// proposes for a sequence that is a prefix of one of them the reference's next k tokens, each
// replaced by another token with probability corrupt_rate (independently), so a greedy target
// accepts each draft position with probability 1 - corrupt_rate until the first corrupted one.
// With `cost_of` set (e.g. a DraftProposer over a real draft model), that proposer runs first on
// the same slots, so a step pays a real draft's time, and its tokens are then replaced. Proposals
// are one-hot (q null): meant for greedy requests. A sequence matching no reference gets none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvasir/sampling/rng.h"
#include "kvasir/spec/proposer.h"

namespace kvasir {

class ReplayProposer final : public Proposer {
 public:
  ReplayProposer(std::vector<std::vector<int32_t>> references, double corrupt_rate,
                 uint64_t seed = 1, std::shared_ptr<Proposer> cost_of = nullptr);
  const char* name() const override { return "replay"; }
  void propose(std::span<ProposalSlot> slots) override;
  void accepted(uint64_t id, std::span<const int32_t> tokens) override;
  void release(uint64_t id) override;

 private:
  std::vector<std::vector<int32_t>> refs_;
  double corrupt_;
  Rng rng_;
  std::shared_ptr<Proposer> cost_of_;
};

}  // namespace kvasir
