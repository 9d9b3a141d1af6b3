// Usage and cost: token counts of one response and what they cost at the configured prices.
//
// Prices are USD per 1M tokens. cost = (prompt - cached) * input + cached * cached_input +
// completion * output, all / 1e6. When no cached-input price is set (negative), cached tokens
// are billed at the input price. to_json() gives OpenAI's usage object plus the extension field
// cost_usd: {prompt_tokens, completion_tokens, total_tokens,
// prompt_tokens_details: {cached_tokens}, cost_usd}, and when speculative decoding verified any of
// the response's tokens, speculative: {proposed_tokens, accepted_tokens, verify_passes,
// acceptance_rate (accepted / proposed), tokens_per_pass (tokens the passes produced / passes)}.
#pragma once

#include <nlohmann/json.hpp>

namespace kvasir::server {

struct Prices {
  double input = 0;          // USD per 1M prompt tokens not served from the cache
  double output = 0;         // USD per 1M generated tokens
  double cached_input = -1;  // USD per 1M prompt tokens from the prefix cache; < 0: = input
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t spec_proposed = 0;  // draft tokens the target judged
  int64_t spec_accepted = 0;  // ... and accepted
  int64_t spec_passes = 0;    // target passes that verified a proposal

  int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
  double cost_usd(const Prices& p) const;
  nlohmann::ordered_json to_json(const Prices& p) const;
};

}  // namespace kvasir::server
