// Job: one generation request (/v1/completions or /v1/chat/completions) after parsing,
// validation and tokenization, and its submission to the engine.
//
// A Job has prompts.size() * n choices; choice c answers prompt c / n. submit() checks capacity
// first (check_capacity, request_validation.h), then registers a Generation in ctx.live and
// submits every choice as its own engine request (with a seed and n > 1, choice c uses
// seed + c % n). If the engine refuses a choice, the choices already submitted are aborted and
// ApiError 400 is thrown. When the last choice finishes, the generation's usage and cost are
// recorded in ctx.metrics and it leaves ctx.live (live_cv is notified).
//
// usage_of() is the usage a response reports: every prompt counted once, with the cached tokens
// of its first choice, and the completion tokens of all choices. usage_json() is its JSON at the
// model's prices, with usage.route when a route chose the model.
//
// A Job runs on one served model (`model`); when a route chose it, `route` holds the decision and
// the request's cost is also counted against the route, beside what it would have cost on the
// route's large model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/model_router.h"
#include "kvasir/server/route_context.h"
#include "kvasir/server/tool_calls.h"
#include "kvasir/server/usage.h"

namespace kvasir::server {

// What one generation request asks for, after parsing and tokenization.
struct Job {
  ModelSlot* model = nullptr;          // the served model that runs it
  std::optional<RouteDecision> route;  // set when a route chose `model`
  Prices route_large_prices;           // the route's large model's prices
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // completions with echo: each prompt's text
  int n = 1;
  SamplingParams sp;
  std::string key;
  bool stream = false;
  bool include_usage = false;
  bool speculative = true;
  int completion_logprobs = -1;  // -1: off
  bool chat_logprobs = false;
  int chat_top_logprobs = 0;
  std::string grammar;  // GBNF the output follows ("" none): GenerateRequest::grammar
  // Chat with tools: the output is parsed for the template family's tool calls (tool_calls.h).
  ToolFamily tool_family = ToolFamily::kNone;
  bool parse_tool_calls = false;
  bool parallel_tool_calls = true;  // false: only the first call is returned (tool_choice auto)

  int n_choices() const { return static_cast<int>(prompts.size()) * n; }
  int prompt_of(int choice) const { return choice / n; }
};

Usage usage_of(const Job& job, const Generation& g);
Json usage_json(const Job& job, const Generation& g);

// `start` is the request's arrival time (now_seconds()).
std::shared_ptr<Generation> submit(RouteContext& ctx, const std::shared_ptr<const Job>& job,
                                   double start);

}  // namespace kvasir::server
