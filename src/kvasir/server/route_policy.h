// RoutePolicy: how a route (a model name clients send, e.g. "auto") chooses between a small and a
// large served model. The decision itself is made by model_router.h.
//
// Rules, in order (the first that decides wins; the reason names it):
//   1. key policy: the API key's label maps to "small" or "large" ("auto": the rules below).
//   2. prompt length: a prompt of more than max_small_prompt_tokens tokens (counted with the
//      small model's tokenizer and chat template) goes to the large model (0: no length rule).
//   3. difficulty: with max_small_difficulty > 0 the small model scores the prompt (its mean
//      next-token entropy in nats over the prompt, one prefill pass whose KV stays in the small
//      model's prefix cache); above the threshold the prompt goes to the large model.
//   4. otherwise the small model.
// Then load: when the chosen model is saturated (fallover_waiting or more requests waiting, or
// its KV cache at or above its warning ratio with any request waiting, or it would refuse the
// request with 429) and the other is not, the request falls over to the other model.
#pragma once

#include <map>
#include <string>

namespace kvasir::server {

struct RoutePolicy {
  std::string name = "auto";        // the model id clients send to use this route
  std::string small, large;         // served model names
  int max_small_prompt_tokens = 0;  // 0: no length rule
  double max_small_difficulty = 0;  // nats; 0: no difficulty rule (no scoring pass)
  int fallover_waiting = 1;         // requests waiting that make a model saturated; 0: never
  std::map<std::string, std::string> keys;  // API key label -> "small" | "large" | "auto"
};

}  // namespace kvasir::server
