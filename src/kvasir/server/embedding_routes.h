// POST /v1/embeddings: one vector per input, OpenAI's shape.
//
// The body is parsed by embedding_request.h and the model chosen (RouteContext::model: a served
// model, not a route). Each text input is encoded with special tokens added and parsed (BOS where
// the vocabulary adds it, as llama-server's embeddings do), token-id inputs are taken as given; an
// input with a token id outside the vocabulary is 400 (param "input"), one longer than the context
// 400 context_length_exceeded naming input[i] (an embedding may fill the whole context: nothing is
// generated after it). Every input is then submitted to the engine at once as an embedding
// request (GenerateRequest::embedding: the server's pooling, ServerConfig::embedding_pooling;
// normalized; `dimensions`), so the inputs batch with each other and with whatever else runs;
// capacity is checked first (429 / 503, check_capacity) and a refusal by the engine (dimensions
// above the model's size) aborts what was submitted and answers 400. While it waits the route
// watches the client: one that hangs up aborts the request (499). With pooling kNone the route
// answers 400 (such a model gives one vector per token).
//
// Answer: {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [floats]
// or "base64 of little-endian float32"}], "model", "usage": {"prompt_tokens", "total_tokens",
// "cost_usd"}}: every input's tokens are prompt tokens, billed at the input price (an embedding
// never takes prefix-cache hits). The request is recorded in the serving metrics as a generation
// with one choice per input (requests_total{finish_reason="stop"} each, prompt tokens and cost
// per key).
#pragma once

#include <string>

#include "kvasir/server/http_types.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void embeddings(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                const ClientState& client, const std::string& key);

// Standard base64 (RFC 4648, with padding) of `n` floats as little-endian IEEE-754 float32 bytes:
// what OpenAI's encoding_format "base64" returns and its SDKs decode.
std::string base64_floats(const float* v, size_t n);

}  // namespace kvasir::server
