// The parts of OpenAI response bodies: response ids and timestamps, logprobs in both endpoints'
// shapes, finish reasons, JSON serialization, and the framing of one server-sent event. The
// bodies themselves are assembled where they are sent: the streamed chunks in sse_stream.cc, the
// non-streamed body in full_response.cc.
//
// Completions logprobs: {"tokens": [str], "token_logprobs": [float], "top_logprobs":
// [{str: float}], "text_offset": [int]}. Chat logprobs: {"content": [{"token", "logprob",
// "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}. A token's string
// is its piece (special tokens rendered); pieces that are not whole UTF-8 characters show U+FFFD
// in "token" while "bytes" keeps the exact bytes. JSON is always serialized with invalid UTF-8
// replaced, so no output can make serialization throw.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::server {

using Json = nlohmann::ordered_json;

// "cmpl-..." / "chatcmpl-...": prefix + 24 random hex digits.
std::string make_response_id(const std::string& prefix);
int64_t unix_time_now();

std::string dump_json(const Json& j);
// "data: <json>\n\n".
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Logprobs of `tokens` for /v1/completions; `offset` is the text offset of the first token and
// advances by each piece's length.
Json completion_logprobs(const std::vector<TokenInfo>& tokens, const Tokenizer& tok,
                         int64_t& offset);
// Appends to an existing completions logprobs object (for accumulating a non-streamed choice).
void append_completion_logprobs(Json& into, const Json& more);
// The "content" array of chat logprobs for `tokens`; top_n limits the alternatives shown.
Json chat_logprobs_content(const std::vector<TokenInfo>& tokens, const Tokenizer& tok, int top_n);

// The finish_reason string clients see: "stop", "length", "abort"; "error" when error is set.
Json finish_reason_json(FinishReason r, const std::string& error);

}  // namespace kvasir::server
