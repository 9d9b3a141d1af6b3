#include "kvasir/server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kvasir/server/api_error.h"
#include "kvasir/server/utf8.h"

namespace kvasir::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError::bad_request(message, param);
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& v) {
  bad(field, fmt::format("'{}' must be {}, got {}", field, expected, json_type_name(v)));
}

const Json* get(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> opt_number(const Json& body, const char* key) {
  const Json* v = get(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  return v->get<double>();
}

// An integer (a float with an integral value is accepted, as JSON does not distinguish them).
int64_t as_int(const Json& v, const std::string& field) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(field, fmt::format("'{}' is out of range", field));
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18)
      return static_cast<int64_t>(d);
  }
  wrong_type(field, "an integer", v);
}

std::optional<int64_t> opt_int(const Json& body, const char* key) {
  const Json* v = get(body, key);
  if (!v) return std::nullopt;
  return as_int(*v, key);
}

int32_t to_int32(int64_t v, const std::string& field, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    bad(field, fmt::format("'{}' must be in [{}, {}], got {}", field, lo, hi, v));
  return static_cast<int32_t>(v);
}

std::optional<bool> opt_bool(const Json& body, const char* key) {
  const Json* v = get(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> opt_string(const Json& body, const char* key) {
  const Json* v = get(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Fields shared by both endpoints.
GenerationOptions parse_common(const Json& body, bool chat) {
  GenerationOptions o;
  SamplingParams& sp = o.sampling;
  o.model = opt_string(body, "model");
  if (auto v = opt_number(body, "temperature")) sp.temperature = static_cast<float>(*v);
  if (auto v = opt_number(body, "top_p")) sp.top_p = static_cast<float>(*v);
  if (auto v = opt_int(body, "top_k")) sp.top_k = to_int32(*v, "top_k", -1, kInt32Max);
  if (auto v = opt_number(body, "min_p")) sp.min_p = static_cast<float>(*v);
  if (auto v = opt_number(body, "presence_penalty")) sp.presence_penalty = static_cast<float>(*v);
  if (auto v = opt_number(body, "frequency_penalty")) sp.frequency_penalty = static_cast<float>(*v);
  if (auto v = opt_number(body, "repetition_penalty"))
    sp.repetition_penalty = static_cast<float>(*v);
  if (auto v = opt_int(body, "seed")) sp.seed = static_cast<uint64_t>(*v);

  std::optional<int64_t> max_tokens = opt_int(body, "max_tokens");
  const char* max_name = "max_tokens";
  if (chat) {
    if (auto v = opt_int(body, "max_completion_tokens")) {
      max_tokens = v;
      max_name = "max_completion_tokens";
    }
  }
  if (max_tokens) {
    if (*max_tokens < 1)
      bad(max_name, fmt::format("'{}' must be >= 1, got {}", max_name, *max_tokens));
    sp.max_tokens = to_int32(*max_tokens, max_name, 1, kInt32Max);
  } else {
    sp.max_tokens = -1;
  }

  if (const Json* stop = get(body, "stop")) {
    if (stop->is_string()) {
      sp.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        const Json& s = (*stop)[i];
        if (!s.is_string()) wrong_type(fmt::format("stop[{}]", i), "a string", s);
        sp.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
    for (size_t i = 0; i < sp.stop.size(); ++i)
      if (sp.stop[i].empty()) bad("stop", fmt::format("'stop[{}]' must not be empty", i));
  }
  if (const Json* ids = get(body, "stop_token_ids")) {
    if (!ids->is_array()) wrong_type("stop_token_ids", "an array of integers", *ids);
    for (size_t i = 0; i < ids->size(); ++i) {
      const std::string f = fmt::format("stop_token_ids[{}]", i);
      sp.stop_token_ids.push_back(to_int32(as_int((*ids)[i], f), f, 0, kInt32Max));
    }
  }
  if (auto v = opt_bool(body, "ignore_eos")) sp.ignore_eos = *v;
  if (const Json* bias = get(body, "logit_bias")) {
    if (!bias->is_object()) wrong_type("logit_bias", "an object of token id -> bias", *bias);
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size() || id < 0 || id > kInt32Max)
        bad("logit_bias", fmt::format("'logit_bias' keys must be token ids, got '{}'", key));
      if (!it.value().is_number())
        wrong_type(fmt::format("logit_bias[{}]", key), "a number", it.value());
      sp.logit_bias[static_cast<int32_t>(id)] = it.value().get<float>();
    }
  }

  if (auto v = opt_int(body, "n")) o.n = to_int32(*v, "n", 1, kMaxChoices);
  if (auto v = opt_bool(body, "stream")) o.stream = *v;
  if (const Json* so = get(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!o.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (auto v = opt_bool(*so, "include_usage")) o.include_usage = *v;
  }
  if (const Json* suffix = get(body, "suffix")) {
    if (!suffix->is_string()) wrong_type("suffix", "a string", *suffix);
    if (!suffix->get<std::string>().empty()) bad("suffix", "'suffix' is not supported");
  }
  return o;
}

std::vector<int32_t> token_array(const Json& a, const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string f = fmt::format("{}[{}]", field, i);
    ids.push_back(to_int32(as_int(a[i], f), f, 0, kInt32Max));
  }
  return ids;
}

std::vector<PromptInput> parse_prompt(const Json& body) {
  const Json* p = get(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  std::vector<PromptInput> out;
  if (p->is_string()) {
    out.push_back({false, p->get<std::string>(), {}});
    return out;
  }
  if (!p->is_array())
    wrong_type("prompt", "a string, an array of strings or an array of token ids", *p);
  if (p->empty()) bad("prompt", "'prompt' must not be empty");
  const Json& first = (*p)[0];
  if (first.is_number()) {
    out.push_back({true, {}, token_array(*p, "prompt")});
    return out;
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const Json& e = (*p)[i];
    const std::string f = fmt::format("prompt[{}]", i);
    if (e.is_string()) {
      out.push_back({false, e.get<std::string>(), {}});
    } else if (e.is_array()) {
      if (e.empty()) bad("prompt", fmt::format("'{}' must not be empty", f));
      out.push_back({true, {}, token_array(e, f)});
    } else {
      wrong_type(f, "a string or an array of token ids", e);
    }
  }
  return out;
}

// A message's content: a string, null, or a list of {"type": "text", "text": ...} parts, which
// are joined with newlines (as vLLM does for templates that expect strings).
Json normalize_content(const Json& content, size_t i) {
  if (content.is_null() || content.is_string()) return content;
  const std::string field = fmt::format("messages[{}].content", i);
  if (!content.is_array()) wrong_type(field, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string pf = fmt::format("{}[{}]", field, j);
    if (!part.is_object()) wrong_type(pf, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      bad(pf + ".type", fmt::format("'{}.type' is required and must be a string", pf));
    if (type->get<std::string>() != "text")
      bad(pf + ".type", fmt::format("'{}.type': only \"text\" parts are supported, got \"{}\"", pf,
                                    type->get<std::string>()));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      bad(pf + ".text", fmt::format("'{}.text' is required and must be a string", pf));
    if (j > 0) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

std::string json_type_name(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

Json parse_json_body(std::string_view body) {
  if (auto bad_at = find_invalid_utf8(body))
    throw ApiError::bad_request(
        fmt::format("the request body is not valid UTF-8 (invalid byte 0x{:02X} at offset {})",
                    static_cast<unsigned>(static_cast<unsigned char>(body[*bad_at])), *bad_at),
        {}, "invalid_utf8");
  Json j;
  // Nesting is bounded: deep documents would make later recursive walks (the chat template's
  // tojson, serialization) use unbounded stack.
  Json::parser_callback_t limit_depth = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth)
      throw ApiError::bad_request(
          fmt::format("the request body nests JSON deeper than {} levels", kMaxJsonDepth), {},
          "invalid_json");
    return true;
  };
  try {
    j = Json::parse(body.begin(), body.end(), limit_depth);
  } catch (const nlohmann::json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ApiError::bad_request("the request body is not valid JSON: " + what, {}, "invalid_json");
  }
  if (!j.is_object())
    throw ApiError::bad_request(
        fmt::format("the request body must be a JSON object, got {}", json_type_name(j)), {},
        "invalid_json");
  return j;
}

CompletionRequest parse_completion_request(const Json& body) {
  CompletionRequest r;
  r.options = parse_common(body, /*chat=*/false);
  r.prompts = parse_prompt(body);
  if (r.prompts.size() * static_cast<size_t>(r.options.n) > static_cast<size_t>(kMaxChoices))
    bad("n", fmt::format("{} prompts x n = {} choices is more than the {} allowed",
                         r.prompts.size(), r.prompts.size() * r.options.n, kMaxChoices));
  if (auto v = opt_bool(body, "echo")) r.echo = *v;
  if (auto v = opt_int(body, "logprobs")) {
    r.logprobs = to_int32(*v, "logprobs", 0, SamplingParams::kMaxTopLogprobs);
    r.options.sampling.logprobs = true;
    r.options.sampling.top_logprobs = r.logprobs;
  }
  // OpenAI's default for the legacy completions endpoint.
  if (r.options.sampling.max_tokens < 0) r.options.sampling.max_tokens = 16;
  return r;
}

ChatRequest parse_chat_request(const Json& body) {
  ChatRequest r;
  r.options = parse_common(body, /*chat=*/true);
  const Json* msgs = get(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array()) wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  r.messages = Json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    const std::string f = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(f, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      bad(f + ".role", fmt::format("'{}.role' is required and must be a string", f));
    Json msg = m;
    auto content = m.find("content");
    if (content != m.end()) msg["content"] = normalize_content(*content, i);
    r.messages.push_back(std::move(msg));
  }
  if (const Json* tools = get(body, "tools")) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    r.tools = *tools;
  }
  if (const Json* kw = get(body, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
    r.template_kwargs = *kw;
  }
  if (auto v = opt_bool(body, "add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = opt_bool(body, "logprobs")) r.logprobs = *v;
  if (auto v = opt_int(body, "top_logprobs"))
    r.top_logprobs = to_int32(*v, "top_logprobs", 0, SamplingParams::kMaxTopLogprobs);
  if (r.top_logprobs > 0 && !r.logprobs)
    bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  r.options.sampling.logprobs = r.logprobs;
  r.options.sampling.top_logprobs = r.top_logprobs;
  return r;
}

}  // namespace kvasir::server
