#include "kvasir/server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>

#include "kvasir/grammar/json_schema.h"
#include "kvasir/server/api_error.h"
#include "kvasir/server/utf8.h"
#include "kvasir/util/error.h"

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

// A number that must satisfy `in_range` (checked in double precision, before narrowing to the
// float SamplingParams holds, so 1e300 is refused rather than turned into inf); `range` says the
// accepted values in the error ("in [0, 2]").
std::optional<float> opt_float(const Json& body, const char* key, bool (*in_range)(double),
                               const char* range) {
  const Json* v = get(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double d = v->get<double>();
  if (!in_range(d)) bad(key, fmt::format("'{}' must be {}, got {}", key, range, d));
  return static_cast<float>(d);
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

// seed: OpenAI takes any integer, llama-server reads -1 as "pick a random seed" (and many clients
// send -1 meaning just that). The sampler's seed is a uint64, so every value in [0, 2^64-1] is
// used exactly as given, -1 means no seed (random, as if absent), and other negative values are
// refused rather than wrapped around to huge unsigned seeds.
std::optional<uint64_t> parse_seed(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  const int64_t s = as_int(v, "seed");
  if (s == -1) return std::nullopt;
  if (s < 0)
    bad("seed", fmt::format("'seed' must be an integer in [0, 2^64-1], or -1 for a random seed, "
                            "got {}",
                            s));
  return static_cast<uint64_t>(s);
}

// Fields shared by both endpoints.
// The body fields each endpoint honours. Anything else is refused by name rather than silently
// ignored (a client asking for response_format or tool_choice must not get an answer that looks
// like it honoured them). `user` is OpenAI's end-user id for abuse monitoring: it changes nothing
// in the answer there either, so it is accepted. A null value counts as absent.
constexpr std::string_view kCommonFields[] = {"model",
                                              "max_tokens",
                                              "temperature",
                                              "top_p",
                                              "top_k",
                                              "min_p",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "repetition_penalty",
                                              "seed",
                                              "stop",
                                              "stop_token_ids",
                                              "ignore_eos",
                                              "speculative",
                                              "logit_bias",
                                              "n",
                                              "stream",
                                              "stream_options",
                                              "response_format",
                                              "grammar",
                                              "user"};
constexpr std::string_view kCompletionFields[] = {"prompt", "suffix", "echo", "logprobs"};
constexpr std::string_view kChatFields[] = {"messages",
                                            "max_completion_tokens",
                                            "logprobs",
                                            "top_logprobs",
                                            "tools",
                                            "chat_template_kwargs",
                                            "add_generation_prompt",
                                            "tool_choice",
                                            "parallel_tool_calls"};

void refuse_unknown_fields(const Json& body, bool chat) {
  auto known = [&](std::string_view key) {
    auto in = [&](const auto& list) {
      return std::find(std::begin(list), std::end(list), key) != std::end(list);
    };
    return in(kCommonFields) || (chat ? in(kChatFields) : in(kCompletionFields));
  };
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.value().is_null() || known(it.key())) continue;
    bad(it.key(), fmt::format("'{}' is not supported by this server{}", it.key(),
                              chat ? "" : " on /v1/completions"));
  }
}

// Refuses keys of an object field that are not in `known`, naming them as field.key.
void refuse_unknown_keys(const Json& obj, const std::string& field,
                         std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (it.value().is_null()) continue;
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      bad(field + "." + it.key(),
          fmt::format("'{}.{}' is not supported by this server", field, it.key()));
  }
}

// response_format and grammar → GenerationOptions::grammar (GBNF).
void parse_structured_output(const Json& body, GenerationOptions& o) {
  const Json* rf = get(body, "response_format");
  const Json* gr = get(body, "grammar");
  if (gr) {
    if (!gr->is_string()) wrong_type("grammar", "a string (GBNF)", *gr);
    if (!gr->get_ref<const std::string&>().empty()) {
      o.grammar = gr->get<std::string>();
      o.grammar_field = "grammar";
    }
  }
  if (!rf) return;
  if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
  auto type = rf->find("type");
  if (type == rf->end() || !type->is_string())
    bad("response_format.type",
        "'response_format.type' is required: \"text\", \"json_object\" "
        "or \"json_schema\"");
  const std::string& t = type->get_ref<const std::string&>();
  std::string g;
  try {
    if (t == "text") {
      refuse_unknown_keys(*rf, "response_format", {"type"});
      return;
    } else if (t == "json_object") {
      // llama-server also takes a schema here.
      refuse_unknown_keys(*rf, "response_format", {"type", "schema"});
      auto schema = rf->find("schema");
      if (schema != rf->end() && !schema->is_null()) {
        if (!schema->is_object() && !schema->is_boolean())
          wrong_type("response_format.schema", "an object (a JSON Schema)", *schema);
        g = grammar::json_schema_to_gbnf(*schema);
      } else {
        g = grammar::json_object_gbnf();
      }
    } else if (t == "json_schema") {
      refuse_unknown_keys(*rf, "response_format", {"type", "json_schema"});
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        bad("response_format.json_schema",
            "'response_format.json_schema' is required with type \"json_schema\" and must be an "
            "object {\"name\", \"schema\", \"strict\"}");
      refuse_unknown_keys(*js, "response_format.json_schema",
                          {"name", "schema", "strict", "description"});
      auto name = js->find("name");
      if (name == js->end() || !name->is_string())
        bad("response_format.json_schema.name",
            "'response_format.json_schema.name' is required and must be a string");
      grammar::JsonSchemaOptions jo;
      if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null()) {
        if (!strict->is_boolean())
          wrong_type("response_format.json_schema.strict", "a boolean", *strict);
        jo.strict = strict->get<bool>();
      }
      auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null()) {
        g = grammar::json_schema_to_gbnf(Json::object(), jo);  // any JSON value
      } else {
        if (!schema->is_object() && !schema->is_boolean())
          wrong_type("response_format.json_schema.schema", "an object (a JSON Schema)", *schema);
        g = grammar::json_schema_to_gbnf(*schema, jo);
      }
    } else {
      bad("response_format.type",
          fmt::format("'response_format.type' must be \"text\", \"json_object\" or "
                      "\"json_schema\", got \"{}\"",
                      t));
    }
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    bad("response_format", e.what());
  }
  if (!o.grammar.empty()) bad("grammar", "'grammar' and 'response_format' cannot be used together");
  o.grammar = std::move(g);
  o.grammar_field = "response_format";
}

GenerationOptions parse_common(const Json& body, bool chat) {
  refuse_unknown_fields(body, chat);
  GenerationOptions o;
  SamplingParams& sp = o.sampling;
  o.model = opt_string(body, "model");
  // Ranges are OpenAI's documented ones where OpenAI has the field, else vLLM's; each check is
  // written so that NaN fails it.
  // temperature: OpenAI documents [0, 2] and answers 400 above 2. vLLM only requires >= 0 and
  // llama-server checks nothing (a negative value means greedy there); we follow OpenAI, whose
  // API we serve, as values above 2 only flatten the distribution towards uniform noise and a
  // client sending 1e10 has a bug we should report rather than hide.
  if (auto v = opt_float(
          body, "temperature", [](double x) { return x >= 0 && x <= 2; }, "in [0, 2]")) {
    sp.temperature = *v;
    o.given.temperature = true;
  }
  // top_p: OpenAI documents 0..1; 0 would keep no token, so (0, 1] as vLLM.
  if (auto v = opt_float(
          body, "top_p", [](double x) { return x > 0 && x <= 1; }, "in (0, 1]")) {
    sp.top_p = *v;
    o.given.top_p = true;
  }
  // top_k (vLLM): -1 or 0 = off, else a count.
  if (auto v = opt_int(body, "top_k")) {
    sp.top_k = to_int32(*v, "top_k", -1, kInt32Max);
    o.given.top_k = true;
  }
  // min_p (vLLM): [0, 1].
  if (auto v = opt_float(
          body, "min_p", [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]")) {
    sp.min_p = *v;
    o.given.min_p = true;
  }
  // presence_penalty, frequency_penalty: OpenAI's [-2, 2].
  if (auto v = opt_float(
          body, "presence_penalty", [](double x) { return x >= -2 && x <= 2; }, "in [-2, 2]"))
    sp.presence_penalty = *v;
  if (auto v = opt_float(
          body, "frequency_penalty", [](double x) { return x >= -2 && x <= 2; }, "in [-2, 2]"))
    sp.frequency_penalty = *v;
  // repetition_penalty (vLLM): > 0 (1 = off), finite as a float.
  if (auto v = opt_float(
          body, "repetition_penalty",
          [](double x) { return x > 0 && x <= std::numeric_limits<float>::max(); },
          "a finite number > 0 (1 = off)")) {
    sp.repetition_penalty = *v;
    o.given.repetition_penalty = true;
  }
  if (const Json* v = get(body, "seed")) sp.seed = parse_seed(*v);

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
    o.given.max_tokens = true;
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
  if (auto v = opt_bool(body, "speculative")) o.speculative = *v;
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
      const std::string field = fmt::format("logit_bias[{}]", key);
      if (!it.value().is_number()) wrong_type(field, "a number", it.value());
      // OpenAI's range.
      const double b = it.value().get<double>();
      const double lim = SamplingParams::kMaxLogitBias;
      // param is "logit_bias", as for the vocabulary check the server does later.
      if (!(b >= -lim && b <= lim))
        bad("logit_bias", fmt::format("'{}' must be in [-{}, {}], got {}", field, lim, lim, b));
      sp.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
    }
  }

  if (auto v = opt_int(body, "n")) o.n = to_int32(*v, "n", 1, kMaxChoices);
  if (auto v = opt_bool(body, "stream")) o.stream = *v;
  if (const Json* so = get(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!o.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (auto v = opt_bool(*so, "include_usage")) o.include_usage = *v;
  }
  parse_structured_output(body, o);
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

// OpenAI's message roles, and "function" (the legacy function-calling role). Templates are
// written for these; anything else is refused here rather than rendered into a prompt the model
// was never trained on.
constexpr std::array<std::string_view, 6> kRoles = {"system", "user",      "assistant",
                                                    "tool",   "developer", "function"};

void check_role(const std::string& role, const std::string& msg_field) {
  for (std::string_view r : kRoles)
    if (role == r) return;
  // Quote at most 64 bytes of the role, cut at a UTF-8 character boundary.
  size_t n = std::min<size_t>(role.size(), 64);
  while (n > 0 && n < role.size() && (static_cast<unsigned char>(role[n]) & 0xC0) == 0x80) --n;
  const std::string shown = role.substr(0, n) + (n < role.size() ? "..." : "");
  bad(msg_field + ".role",
      fmt::format("'{}.role' must be one of system, user, assistant, tool, developer, function; "
                  "got \"{}\"",
                  msg_field, shown));
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

// Builds the parsed body for nlohmann's SAX parser, in time linear in the body's size.
//
// nlohmann's own DOM builders are not linear: with a parser_callback (the obvious way to limit
// depth), every closed object or array makes the builder scan its whole parent container for
// discarded values (quadratic in the number of elements of a container of objects: 320k `{}` in
// one array took 17.5 s); and without one, ordered_json's ordered_map inserts each key after a
// linear search for it (quadratic in the keys of one object: a 1 MB logit_bias took minutes).
// This builder keeps the same results (key order of first appearance, the last value of a
// duplicate key wins, as nlohmann does) with a small hash index per large object, and limits the
// nesting as each container opens: at most kMaxJsonDepth nested arrays and objects.
class BodyBuilder {
 public:
  explicit BodyBuilder(Json& root) : root_(root) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(Json::number_integer_t v) { return put(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(v); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return put(v); }
  bool string(Json::string_t& v) { return put(std::move(v)); }
  bool binary(Json::binary_t& v) { return put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& k) {
    Frame& f = stack_.back();
    Entries& obj = f.container->get_ref<Json::object_t&>();
    if (obj.size() < kLinearKeys) {
      for (auto& [name, value] : obj) {
        if (name == k) {
          slot_ = &value;
          return true;
        }
      }
    } else {
      if (f.index.size() < 2 * (obj.size() + 1)) reindex(f, obj);
      const size_t mask = f.index.size() - 1;
      for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
        const size_t e = f.index[i];
        if (e == 0) {
          f.index[i] = obj.size() + 1;
          break;
        }
        if (obj[e - 1].first == k) {
          slot_ = &obj[e - 1].second;
          return true;
        }
      }
    }
    // Appended without ordered_map's own (linear) search: the key is known to be new.
    obj.emplace_back(std::move(k), nullptr);
    slot_ = &obj.back().second;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
    error_ = e.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  // The vector under ordered_json's object type.
  using Entries = Json::object_t::Container;
  // Objects with fewer keys are searched linearly; larger ones get a hash index.
  static constexpr size_t kLinearKeys = 16;

  struct Frame {
    Json* container;
    // Open addressing over the object's entries: 0 = empty, i + 1 = entry i. At most half full.
    std::vector<size_t> index;
  };

  static size_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  static void reindex(Frame& f, const Entries& obj) {
    size_t cap = 64;
    while (cap < 4 * (obj.size() + 1)) cap *= 2;
    f.index.assign(cap, 0);
    for (size_t e = 0; e < obj.size(); ++e) {
      size_t i = hash(obj[e].first) & (cap - 1);
      while (f.index[i] != 0) i = (i + 1) & (cap - 1);
      f.index[i] = e + 1;
    }
  }

  // Stores a value where the parser is: the root, the end of the open array, or the slot of the
  // key just read. Pointers to open containers stay valid: an open container is the last value
  // added to its parent, which grows again only after it closes.
  template <class V>
  Json* place(V&& v) {
    if (stack_.empty()) {
      root_ = Json(std::forward<V>(v));
      return &root_;
    }
    Json* top = stack_.back().container;
    if (top->is_array()) {
      Json::array_t& a = top->get_ref<Json::array_t&>();
      a.emplace_back(std::forward<V>(v));
      return &a.back();
    }
    *slot_ = Json(std::forward<V>(v));
    return slot_;
  }
  template <class V>
  bool put(V&& v) {
    place(std::forward<V>(v));
    return true;
  }
  bool open(Json container) {
    // Deep documents would make later recursive walks (the chat template's tojson,
    // serialization) use unbounded stack.
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth))
      throw ApiError::bad_request(
          fmt::format("the request body nests JSON deeper than {} levels", kMaxJsonDepth), {},
          "invalid_json");
    stack_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  Json* slot_ = nullptr;
  std::vector<Frame> stack_;
  std::string error_;
};

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
  BodyBuilder builder(j);
  bool ok = false;
  try {
    ok = Json::sax_parse(body.begin(), body.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    builder.parse_error(0, {}, e);
  }
  if (!ok) {
    // The message is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = builder.error();
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

namespace {

// Assistant messages' tool call arguments, given as JSON text (OpenAI's form), become objects for
// the template; text that is not a JSON object stays as it is.
void arguments_as_objects(Json& msg) {
  auto calls = msg.find("tool_calls");
  if (calls == msg.end() || !calls->is_array()) return;
  for (Json& c : *calls) {
    if (!c.is_object()) continue;
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args == fn->end() || !args->is_string()) continue;
    Json parsed =
        Json::parse(args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) *args = std::move(parsed);
  }
}

void parse_tools(const Json& body, ChatRequest& r) {
  if (const Json* tools = get(body, "tools")) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string f = fmt::format("tools[{}]", i);
      if (!t.is_object()) wrong_type(f, "an object", t);
      refuse_unknown_keys(t, f, {"type", "function"});
      auto type = t.find("type");
      if (type == t.end() || *type != "function")
        bad(f + ".type", fmt::format("'{}.type' must be \"function\"", f));
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object())
        bad(f + ".function", fmt::format("'{}.function' is required and must be an object", f));
      refuse_unknown_keys(*fn, f + ".function", {"name", "description", "parameters", "strict"});
      auto name = fn->find("name");
      auto valid_name = [](const std::string& n) {
        return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        });
      };
      // OpenAI's rule for function names.
      if (name == fn->end() || !name->is_string() ||
          !valid_name(name->get_ref<const std::string&>()))
        bad(f + ".function.name",
            fmt::format("'{}.function.name' is required: 1 to 64 of a-z, A-Z, 0-9, _ and -", f));
      auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null() && !params->is_object())
        wrong_type(f + ".function.parameters", "an object (a JSON Schema)", *params);
    }
    if (!tools->empty()) r.tools = *tools;
  }
  if (const Json* tc = get(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string& s = tc->get_ref<const std::string&>();
      if (s == "none") {
        r.tool_choice = ToolChoice::kNone;
      } else if (s == "auto") {
        r.tool_choice = ToolChoice::kAuto;
      } else if (s == "required") {
        r.tool_choice = ToolChoice::kRequired;
      } else {
        bad("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" "
                                       "or {{\"type\": \"function\", \"function\": {{\"name\": "
                                       "...}}}}, got \"{}\"",
                                       s));
      }
    } else if (tc->is_object()) {
      refuse_unknown_keys(*tc, "tool_choice", {"type", "function"});
      auto fn = tc->find("function");
      auto type = tc->find("type");
      if (type == tc->end() || *type != "function" || fn == tc->end() || !fn->is_object() ||
          !fn->contains("name") || !(*fn)["name"].is_string())
        bad("tool_choice",
            "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
            "{\"name\": \"...\"}}");
      r.tool_choice = ToolChoice::kFunction;
      r.tool_choice_function = (*fn)["name"].get<std::string>();
      bool found = false;
      if (r.tools.is_array())
        for (const Json& t : r.tools)
          found = found || t["function"]["name"] == r.tool_choice_function;
      if (!found)
        bad("tool_choice", fmt::format("'tool_choice' names the function \"{}\", which is not in "
                                       "'tools'",
                                       r.tool_choice_function));
    } else {
      wrong_type("tool_choice", "a string or an object", *tc);
    }
    if ((r.tool_choice == ToolChoice::kRequired) && r.tools.is_null())
      bad("tool_choice", "'tool_choice' \"required\" needs a non-empty 'tools'");
  }
  if (auto v = opt_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *v;
}

}  // namespace

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
    check_role(role->get_ref<const std::string&>(), f);
    Json msg = m;
    auto content = m.find("content");
    if (content != m.end()) msg["content"] = normalize_content(*content, i);
    arguments_as_objects(msg);
    r.messages.push_back(std::move(msg));
  }
  parse_tools(body, r);
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

void apply_sampling_defaults(GenerationOptions& o, const SamplingDefaults& d, int room) {
  SamplingParams& sp = o.sampling;
  if (d.temperature && !o.given.temperature) sp.temperature = *d.temperature;
  if (d.top_k && !o.given.top_k) sp.top_k = *d.top_k;
  if (d.top_p && !o.given.top_p) sp.top_p = *d.top_p;
  if (d.min_p && !o.given.min_p) sp.min_p = *d.min_p;
  if (d.repetition_penalty && !o.given.repetition_penalty) {
    sp.repetition_penalty = *d.repetition_penalty;
    if (d.penalty_last_n) sp.penalty_last_n = *d.penalty_last_n;
  }
  if (d.max_tokens && !o.given.max_tokens)
    sp.max_tokens = std::max(1, std::min(*d.max_tokens, room));
}

}  // namespace kvasir::server
