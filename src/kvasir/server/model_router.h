// Model routing: which served model answers a request sent to a route (route_policy.h has the
// rules and their order).
//
// decide_route() applies the policy to one request given its prompts as the small model's tokens:
// the key policy, then the prompt length (the longest prompt; a prompt that does not fit the small
// model's context with its max_tokens goes to the large model as a length decision), then the
// difficulty score (the small model scores every prompt in one engine request each, Engine's
// score_prompt; the highest mean entropy counts), then the default (small), then load: a chosen
// model that is saturated falls over to the other when that one is not. Saturated: requests are
// queued beyond its batch (running + waiting - max_seqs >= fallover_waiting), or its KV cache is at
// or above the warning ratio while requests wait, or max_queue would refuse the request. When the
// small model is saturated before any difficulty is scored, the scoring pass is skipped (it would
// queue too) and the request goes to the large model.
//
// The decision is counted in the route metrics here (kvasir_route_requests_total,
// kvasir_route_fallovers_total, kvasir_route_difficulty); its cost is counted when the request
// finishes (job.cc). to_json() is the usage.route object responses carry:
//   {"name", "model", "reason", "detail", "difficulty" (when scored), "fell_over_from" (when
//   load moved it)}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvasir/server/route_context.h"

namespace kvasir::server {

struct RouteDecision {
  ModelSlot* model = nullptr;
  std::string route;
  std::string reason;      // key_policy, prompt_length, difficulty, default or fallover
  std::string detail;      // for people: "prompt 40 tokens <= 512; difficulty 1.92 <= 2.50 nats"
  double difficulty = -1;  // < 0: not scored
  std::string fell_over_from;  // the model the rules chose, when load moved the request

  Json to_json() const;
};

// `small_prompts`: the request's prompts as the small model's tokens (not yet checked against its
// context); `n_new`: engine requests the request will submit; `max_tokens`: its max_tokens (0:
// none). Throws ApiError 400 when scoring fails for a reason the request caused.
RouteDecision decide_route(RouteContext& ctx, const RoutePolicy& policy, const std::string& key,
                           const std::vector<std::vector<int32_t>>& small_prompts, int n_new,
                           int max_tokens);

// True when `m` should not take `n_new` more requests while another model could (see above).
bool saturated(const RouteContext& ctx, const ModelSlot& m, const RoutePolicy& policy, int n_new);

}  // namespace kvasir::server
