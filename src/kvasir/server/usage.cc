#include "kvasir/server/usage.h"

#include <algorithm>

namespace kvasir::server {

double Usage::cost_usd(const Prices& p) const {
  const double cached_price = p.cached_input < 0 ? p.input : p.cached_input;
  const int64_t cached = std::clamp<int64_t>(cached_tokens, 0, prompt_tokens);
  return (static_cast<double>(prompt_tokens - cached) * p.input +
          static_cast<double>(cached) * cached_price +
          static_cast<double>(completion_tokens) * p.output) /
         1e6;
}

nlohmann::ordered_json Usage::to_json(const Prices& p) const {
  nlohmann::ordered_json u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = total_tokens();
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  u["cost_usd"] = cost_usd(p);
  if (spec_passes > 0) {
    u["speculative"] = {
        {"proposed_tokens", spec_proposed},
        {"accepted_tokens", spec_accepted},
        {"verify_passes", spec_passes},
        {"acceptance_rate",
         spec_proposed > 0 ? static_cast<double>(spec_accepted) / static_cast<double>(spec_proposed)
                           : 0.0},
        {"tokens_per_pass",
         static_cast<double>(spec_accepted + spec_passes) / static_cast<double>(spec_passes)}};
  }
  return u;
}

}  // namespace kvasir::server
