// Parsing of a /v1/embeddings request body (OpenAI's shape) into what the route submits.
//
// Fields: input (required): a string, an array of strings, an array of token ids, or an array of
// arrays of token ids (strings and id arrays may be mixed in one array, as /v1/completions
// allows); model (a string; the route checks it); encoding_format "float" (default) or "base64"
// (each vector as the base64 of its little-endian float32 bytes, what the openai SDKs ask for by
// default); dimensions (an integer >= 1: keep the first N values and normalize them again, as
// OpenAI's text-embedding-3 models do; the engine refuses N above the model's size); user (a
// string, ignored, as OpenAI documents it for abuse monitoring). A null value means "absent".
// Every other field is refused by name, and every problem is an ApiError 400 whose `param` names
// the field: an empty string or array (input[i] named in the message), more than
// kMaxEmbeddingInputs inputs, a token id that is not an integer in [0, 2^31-1] (the vocabulary
// is checked by the route).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvasir/server/openai_request.h"

namespace kvasir::server {

// OpenAI's limit on the inputs of one request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::optional<std::string> model;
  std::vector<PromptInput> inputs;  // in the request's order (a string input is one entry)
  bool batch = false;  // input was an array of strings / id arrays: messages name input[i]
  bool base64 = false;
  int dimensions = 0;  // 0: all
};

EmbeddingRequest parse_embedding_request(const Json& body);

}  // namespace kvasir::server
