#include "kvasir/spec/replay_proposer.h"

#include <algorithm>

#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

ReplayProposer::ReplayProposer(std::vector<std::vector<int32_t>> references, double corrupt_rate,
                               uint64_t seed, std::shared_ptr<Proposer> cost_of)
    : refs_(std::move(references)),
      corrupt_(corrupt_rate),
      rng_(seed),
      cost_of_(std::move(cost_of)) {
  if (!(corrupt_rate >= 0 && corrupt_rate <= 1))
    fail("replay proposer: the corruption rate must be in [0, 1], got {}", corrupt_rate);
}

void ReplayProposer::propose(std::span<ProposalSlot> slots) {
  const double t0 = now_seconds();
  if (cost_of_) cost_of_->propose(slots);
  for (ProposalSlot& s : slots) {
    s.draft->clear();
    s.q = nullptr;
    const size_t len = s.tokens.size();
    for (const auto& ref : refs_) {
      if (ref.size() <= len || !std::equal(s.tokens.begin(), s.tokens.end(), ref.begin())) continue;
      const size_t end = std::min(ref.size(), len + static_cast<size_t>(s.k));
      for (size_t i = len; i < end; ++i) {
        int32_t t = ref[i];
        if (rng_.uniform() < corrupt_) t = t == 0 ? 1 : t - 1;
        s.draft->push_back(t);
      }
      break;
    }
  }
  busy_seconds_ += now_seconds() - t0;
}

void ReplayProposer::accepted(uint64_t id, std::span<const int32_t> tokens) {
  if (cost_of_) cost_of_->accepted(id, tokens);
}

void ReplayProposer::release(uint64_t id) {
  if (cost_of_) cost_of_->release(id);
}

}  // namespace kvasir
