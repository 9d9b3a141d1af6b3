// The generation routes' handlers: POST /v1/completions and POST /v1/chat/completions.
//
// Each parses the body (openai_request.h), checks the model and the sampling parameters
// (request_validation.h), tokenizes the prompt and checks it against the vocabulary and the
// context, and submits a Job (job.h); the answer is streamed (sse_stream.h) or whole
// (full_response.h) as the request asks. Completions: a text prompt is encoded with special
// tokens added (BOS), token ids are taken as given, and each prompt of a batch is its own; echo
// keeps each prompt's text. Chat: the messages are rendered with the chat template and encoded
// without special tokens added (the template writes BOS itself, as vLLM); without a template the
// route answers 400 no_chat_template. A text too long for the context is refused before it is
// tokenized (check_text_size). Both throw ApiError for every refusal; the router (routes.h) has
// already authorized the request (`key` is its key's label) and answers what they throw.
#pragma once

#include <string>

#include "kvasir/server/http_types.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                 const ClientState& client, const std::string& key);
void chat_completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                      const ClientState& client, const std::string& key);

}  // namespace kvasir::server
