#include "kvasir/sampling/sampling_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvasir {

std::optional<std::string> SamplingParams::validate(int32_t n_vocab) const {
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return fmt::format("temperature: must be a finite number >= 0 (0 = greedy), got {}",
                       temperature);
  }
  if (top_k < -1) {
    return fmt::format("top_k: must be -1 or 0 (disabled) or a positive count, got {}", top_k);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return fmt::format("top_p: must be in (0, 1] (1 = disabled), got {}", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return fmt::format("min_p: must be in [0, 1] (0 = disabled), got {}", min_p);
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f)) {
    return fmt::format("repetition_penalty: must be a finite number > 0 (1 = disabled), got {}",
                       repetition_penalty);
  }
  const float pmax = kMaxFrequencyPresencePenalty;
  if (!(frequency_penalty >= -pmax && frequency_penalty <= pmax)) {
    return fmt::format("frequency_penalty: must be in [-{}, {}], got {}", pmax, pmax,
                       frequency_penalty);
  }
  if (!(presence_penalty >= -pmax && presence_penalty <= pmax)) {
    return fmt::format("presence_penalty: must be in [-{}, {}], got {}", pmax, pmax,
                       presence_penalty);
  }
  if (penalty_last_n < -1) {
    return fmt::format(
        "penalty_last_n: must be -1 (all tokens), 0 (off) or a positive count, got {}",
        penalty_last_n);
  }
  if (max_tokens != -1 && max_tokens < 1) {
    return fmt::format("max_tokens: must be >= 1 (or -1 = until the context is full), got {}",
                       max_tokens);
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return fmt::format("stop[{}]: stop strings must not be empty", i);
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    const int32_t t = stop_token_ids[i];
    if (t < 0 || (n_vocab > 0 && t >= n_vocab)) {
      return fmt::format("stop_token_ids[{}]: token id {} is outside the vocabulary [0, {})", i, t,
                         n_vocab > 0 ? n_vocab : INT32_MAX);
    }
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return fmt::format("top_logprobs: must be in [0, {}], got {}", kMaxTopLogprobs, top_logprobs);
  }
  if (top_logprobs > 0 && !logprobs) {
    return fmt::format("top_logprobs: requires logprobs to be enabled (got top_logprobs = {})",
                       top_logprobs);
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (n_vocab > 0 && token >= n_vocab)) {
      return fmt::format("logit_bias: token id {} is outside the vocabulary [0, {})", token,
                         n_vocab > 0 ? n_vocab : INT32_MAX);
    }
    const bool ban = std::isinf(bias) && bias < 0;
    if (!ban && !(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return fmt::format("logit_bias[{}]: must be in [-{}, {}] or -inf, got {}", token,
                         kMaxLogitBias, kMaxLogitBias, bias);
    }
  }
  return std::nullopt;
}

bool SamplingParams::stops_on_token(int32_t token, std::span<const int32_t> eos_token_ids) const {
  if (std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end()) {
    return true;
  }
  return !ignore_eos &&
         std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

std::string SamplingDefaults::describe() const {
  std::string out;
  auto add = [&](const char* name, const auto& v) {
    if (!v) return;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", name, *v);
  };
  add("temperature", temperature);
  add("top_k", top_k);
  add("top_p", top_p);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  add("penalty_last_n", penalty_last_n);
  add("max_tokens", max_tokens);
  return out;
}

}  // namespace kvasir
