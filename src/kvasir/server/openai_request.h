// Parsing of OpenAI request bodies into what the server submits to the engine.
//
// parse_json_body() checks the body is UTF-8 and a JSON object, in time linear in its size.
// parse_completion_request() and parse_chat_request() check every field they know for its JSON
// type and range, and map it to SamplingParams (OpenAI / vLLM names: max_tokens,
// max_completion_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
// repetition_penalty, seed, stop, n, logprobs, top_logprobs, logit_bias, stop_token_ids,
// ignore_eos, stream, stream_options, and Kvasir's speculative: false to opt out of speculative
// decoding). A null value means "absent". Unknown fields are refused by name.
// Structured output: response_format {"type": "text" | "json_object" | "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}} (OpenAI; llama-server's
// {"type": "json_object", "schema": {...}} too) and llama-server's "grammar" (GBNF text) on both
// endpoints; at most one of them. Chat: tools (each {"type": "function", "function": {"name",
// "description", "parameters", "strict"}}), tool_choice ("none", "auto", "required" or
// {"type": "function", "function": {"name"}} naming one of the tools), parallel_tool_calls.
// Assistant messages' tool_calls arguments given as JSON text are handed to the chat template as
// objects (templates write them with `| tojson`, as transformers expects).
// Every problem is an ApiError (400) naming the field in `param`. Ranges (OpenAI's where OpenAI
// has the field, else vLLM's): temperature [0, 2], top_p (0, 1], top_k -1 or >= 0, min_p [0, 1],
// presence_penalty and frequency_penalty [-2, 2], repetition_penalty > 0, logit_bias values
// [-100, 100], n 1..kMaxChoices, logprobs and top_logprobs 0..20, max_tokens >= 1, seed
// 0..2^64-1 or -1 (= random, as llama-server). Chat message roles: system, user, assistant, tool,
// developer, function. Ranges that need the model (vocabulary size, context) are checked later by
// the server with SamplingParams::validate and the tokenized prompt.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/sampling/sampling_params.h"

namespace kvasir::server {

using Json = nlohmann::ordered_json;

// The most choices one request may ask for (n, times the number of prompts).
inline constexpr int kMaxChoices = 128;
// The deepest JSON nesting a request body may have: at most this many arrays and objects open at
// once (`[[1]]` nests 2 deep).
inline constexpr int kMaxJsonDepth = 128;

struct GenerationOptions {
  std::optional<std::string> model;
  SamplingParams sampling;  // max_tokens = -1 when the request did not set it
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool speculative = true;     // extension: false opts this request out of speculative decoding
  // The GBNF grammar the output must follow ("" none), from response_format or grammar, and
  // which field it came from (for errors).
  std::string grammar;
  std::string grammar_field;
  // Which of the fields a model may carry defaults for (SamplingDefaults) the request set itself
  // (max_tokens: max_tokens or max_completion_tokens).
  struct Given {
    bool temperature = false, top_k = false, top_p = false, min_p = false,
         repetition_penalty = false, max_tokens = false;
  } given;
};

// Gives the sampling fields the request left unset the model's defaults `d` (ModelInfo::
// sampling_defaults): temperature, top_k, top_p, min_p, repetition_penalty (with the model's
// penalty_last_n when that penalty comes from `d`), and max_tokens, cut to `room` (the tokens the
// context leaves after the longest prompt, as vLLM cuts its default) and at least 1. Fields the
// request set are left alone.
void apply_sampling_defaults(GenerationOptions& o, const SamplingDefaults& d, int room);

enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

// One prompt of /v1/completions: text, or token ids.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  GenerationOptions options;
  std::vector<PromptInput> prompts;  // a batch: each gets n choices
  bool echo = false;
  int logprobs = -1;  // -1: off; N >= 0: chosen token + top N
};

struct ChatRequest {
  GenerationOptions options;
  Json messages;  // content parts flattened to strings
  Json tools;     // null when absent or empty
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;  // kFunction: its name
  bool parallel_tool_calls = true;
  Json template_kwargs = Json::object();  // chat_template_kwargs (vLLM extension)
  bool add_generation_prompt = true;
  bool logprobs = false;
  int top_logprobs = 0;
};

// Throws ApiError 400: bad UTF-8 (with the byte offset), malformed JSON, nesting deeper than
// kMaxJsonDepth, not an object.
Json parse_json_body(std::string_view body);

CompletionRequest parse_completion_request(const Json& body);
ChatRequest parse_chat_request(const Json& body);

// The JSON type name used in error messages ("string", "number", "array", ...).
std::string json_type_name(const Json& v);

}  // namespace kvasir::server
