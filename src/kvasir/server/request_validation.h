// Request validation that needs the model or the server's state, after openai_request.h has
// checked the body's JSON types and simple ranges.
//
// Each check returns normally or throws the ApiError the client gets:
// Each check that needs a model takes the served model (ModelSlot) the request runs on; which one
// that is, or a 404 model_not_found, RouteContext::target() / model() decide.
//   check_sampling  400 for what SamplingParams::validate refuses for this vocabulary; param is
//                   the field the message starts with (param_of).
//   check_prompt    400 for a prompt with no tokens or a token id outside the vocabulary; 400
//                   context_length_exceeded when the prompt leaves no room in the context, or
//                   prompt + max_tokens does not fit it. `field` names the prompt in messages and
//                   param ("prompt", "messages").
//   check_capacity  503 server_shutting_down while shutting down; 429 server_overloaded when
//                   max_queue is set, requests are waiting, and n_new more would exceed it.
//   check_text_size 400 context_length_exceeded, before tokenizing, for a text so long that it
//                   cannot fit the context however it tokenizes: a token covers at most the
//                   vocabulary's longest token text (raw bytes per token are never more; at least
//                   4, a whole UTF-8 character as one unknown token), so a text of B bytes has at
//                   least B / that many tokens. Tokenizing a 30 MB prompt first would cost a GB.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/sampling/sampling_params.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

// "temperature: must be ..." -> "temperature"; "stop[0]: ..." -> "stop"; "" if no such prefix.
std::string param_of(const std::string& message);

void check_sampling(const ModelSlot& m, const SamplingParams& sp);
void check_prompt(const ModelSlot& m, const std::vector<int32_t>& ids, const SamplingParams& sp,
                  const char* field);
void check_capacity(const RouteContext& ctx, const ModelSlot& m, int n_new);
// `ctx_len`: the context the text must fit (the model's; a route's largest).
void check_text_size(const ModelSlot& m, int ctx_len, std::string_view text, const char* field);

}  // namespace kvasir::server
