#include "kvasir/server/tool_calls.h"

#include <algorithm>
#include <random>

#include "kvasir/grammar/grammar.h"
#include "kvasir/grammar/json_schema.h"
#include "kvasir/util/error.h"

namespace kvasir::server {
namespace {

using OJson = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}
bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
// Characters of a function name where the syntax writes it bare (Mistral v11, DeepSeek): OpenAI's
// [a-zA-Z0-9_-] plus '.' and ':', which some models use.
bool is_name_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == '.' || c == ':';
}
size_t skip_name(std::string_view s, size_t i) {
  while (i < s.size() && is_name_char(s[i])) ++i;
  return i;
}

// ---- Markers ----------------------------------------------------------------------------------

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kLlamaIpython = "<|start_header_id|>ipython<|end_header_id|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kGraniteCall = "<|tool_call|>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// The strings that start a call unit, per family (kLlama3 also starts one at a leading '{').
std::vector<std::string_view> start_markers(ToolFamily f) {
  switch (f) {
    case ToolFamily::kHermes:
      return {kHermesOpen};
    case ToolFamily::kLlama3:
      return {kPythonTag};
    case ToolFamily::kMistral:
    case ToolFamily::kMistralV11:
      return {kMistralCalls};
    case ToolFamily::kGranite:
      return {kGraniteCall};
    case ToolFamily::kDeepSeek:
      return {kDsCallsBegin, kDsCallBegin};
    case ToolFamily::kNone:
      break;
  }
  return {};
}

enum class Match { kYes, kPartial, kNo };
// Whether s[i..] starts with `lit`; kPartial when s ends inside it (only while more may come).
Match match(std::string_view s, size_t i, std::string_view lit, bool at_end) {
  const size_t avail = s.size() - i;
  if (avail >= lit.size()) return s.compare(i, lit.size(), lit) == 0 ? Match::kYes : Match::kNo;
  if (!at_end && s.substr(i) == lit.substr(0, avail)) return Match::kPartial;
  return Match::kNo;
}

// ---- JSON scanning ----------------------------------------------------------------------------
// Where a JSON value that starts at s[i] ends, without building it, deciding as early as the
// text allows: kInvalid as soon as no continuation can make it valid JSON, kIncomplete when the
// text ends inside it. Strict RFC 8259 syntax (UTF-8 validity is left to nlohmann's parser).

enum class Status { kComplete, kIncomplete, kInvalid };
struct Scan {
  Status status;
  size_t end = 0;  // one past the value, when complete
};
constexpr size_t kMaxJsonDepth = 256;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

Scan scan_string(std::string_view s, size_t i) {  // s[i] == '"'
  for (++i; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') return {Status::kComplete, i + 1};
    if (c < 0x20) return {Status::kInvalid};
    if (c != '\\') continue;
    if (++i >= s.size()) return {Status::kIncomplete};
    const char e = s[i];
    if (e == 'u') {
      for (int k = 0; k < 4; ++k) {
        if (++i >= s.size()) return {Status::kIncomplete};
        if (!is_hex(s[i])) return {Status::kInvalid};
      }
    } else if (std::string_view("\"\\/bfnrt").find(e) == npos) {
      return {Status::kInvalid};
    }
  }
  return {Status::kIncomplete};
}

Scan scan_number(std::string_view s, size_t i) {
  const size_t n = s.size();
  if (s[i] == '-') ++i;
  if (i >= n) return {Status::kIncomplete};
  if (s[i] == '0') {
    ++i;
  } else if (is_digit(s[i])) {
    while (i < n && is_digit(s[i])) ++i;
  } else {
    return {Status::kInvalid};
  }
  if (i < n && s[i] == '.') {
    if (++i >= n) return {Status::kIncomplete};
    if (!is_digit(s[i])) return {Status::kInvalid};
    while (i < n && is_digit(s[i])) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    if (++i >= n) return {Status::kIncomplete};
    if (s[i] == '+' || s[i] == '-') ++i;
    if (i >= n) return {Status::kIncomplete};
    if (!is_digit(s[i])) return {Status::kInvalid};
    while (i < n && is_digit(s[i])) ++i;
  }
  // A number that reaches the end of the text may still grow.
  return i >= n ? Scan{Status::kIncomplete} : Scan{Status::kComplete, i};
}

Scan scan_literal(std::string_view s, size_t i, std::string_view lit) {
  switch (match(s, i, lit, /*at_end=*/false)) {
    case Match::kYes:
      return {Status::kComplete, i + lit.size()};
    case Match::kPartial:
      return {Status::kIncomplete};
    case Match::kNo:
      break;
  }
  return {Status::kInvalid};
}

Scan scan_json(std::string_view s, size_t i) {
  enum class Expect { kValue, kValueOrClose, kKey, kKeyOrClose, kColon, kCommaOrClose };
  std::vector<char> stack;  // '{' or '[' of each open container
  Expect e = Expect::kValue;
  const size_t n = s.size();
  for (;;) {
    i = skip_ws(s, i);
    if (i >= n) return {Status::kIncomplete};
    const char c = s[i];
    bool value_done = false;
    switch (e) {
      case Expect::kValue:
      case Expect::kValueOrClose: {
        if (e == Expect::kValueOrClose && c == ']') {
          stack.pop_back();
          ++i;
          value_done = true;
          break;
        }
        if (c == '{' || c == '[') {
          if (stack.size() >= kMaxJsonDepth) return {Status::kInvalid};
          stack.push_back(c);
          ++i;
          e = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
          break;
        }
        Scan r;
        if (c == '"') {
          r = scan_string(s, i);
        } else if (c == '-' || is_digit(c)) {
          r = scan_number(s, i);
        } else if (c == 't') {
          r = scan_literal(s, i, "true");
        } else if (c == 'f') {
          r = scan_literal(s, i, "false");
        } else if (c == 'n') {
          r = scan_literal(s, i, "null");
        } else {
          return {Status::kInvalid};
        }
        if (r.status != Status::kComplete) return r;
        i = r.end;
        value_done = true;
        break;
      }
      case Expect::kKey:
      case Expect::kKeyOrClose: {
        if (e == Expect::kKeyOrClose && c == '}') {
          stack.pop_back();
          ++i;
          value_done = true;
          break;
        }
        if (c != '"') return {Status::kInvalid};
        const Scan r = scan_string(s, i);
        if (r.status != Status::kComplete) return r;
        i = r.end;
        e = Expect::kColon;
        break;
      }
      case Expect::kColon:
        if (c != ':') return {Status::kInvalid};
        ++i;
        e = Expect::kValue;
        break;
      case Expect::kCommaOrClose: {
        const char top = stack.back();
        if (c == ',') {
          ++i;
          e = top == '{' ? Expect::kKey : Expect::kValue;
        } else if (c == (top == '{' ? '}' : ']')) {
          stack.pop_back();
          ++i;
          value_done = true;
        } else {
          return {Status::kInvalid};
        }
        break;
      }
    }
    if (value_done) {
      if (stack.empty()) return {Status::kComplete, i};
      e = Expect::kCommaOrClose;
    }
  }
}

// ---- Calls ------------------------------------------------------------------------------------

struct RawCall {
  std::string name, arguments, model_id;
};
struct Unit {
  Status status = Status::kInvalid;
  size_t end = 0;  // one past the unit, when complete
  std::vector<RawCall> calls = {};
};
Unit invalid() {
  return {};
}
Unit need_more(bool at_end) {
  return {at_end ? Status::kInvalid : Status::kIncomplete};
}

// The JSON value at s[i] (which must be `open`), scanned and parsed. nullopt + status when not
// complete or not valid.
struct Parsed {
  Status status;
  size_t end = 0;
  OJson value = {};
};
Parsed parse_json_at(std::string_view s, size_t i, bool at_end) {
  if (i >= s.size()) return {at_end ? Status::kInvalid : Status::kIncomplete};
  const Scan r = scan_json(s, i);
  if (r.status == Status::kIncomplete) return {at_end ? Status::kInvalid : Status::kIncomplete};
  if (r.status == Status::kInvalid) return {Status::kInvalid};
  OJson v = OJson::parse(s.substr(i, r.end - i), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return {Status::kInvalid};  // e.g. invalid UTF-8 inside a string
  return {Status::kComplete, r.end, std::move(v)};
}

// Compact JSON of an arguments value: an object, or a string holding one.
std::optional<std::string> arguments_text(const OJson& args) {
  if (args.is_string()) {
    OJson inner =
        OJson::parse(args.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (!inner.is_object()) return std::nullopt;
    return inner.dump(-1, ' ', false, OJson::error_handler_t::replace);
  }
  if (!args.is_object()) return std::nullopt;
  return args.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

// A call object {"name": ..., "arguments"|"parameters": {...}}. `bare` (kLlama3's marker-less
// form): only the keys name, parameters/arguments and type ("function") are allowed, and the
// arguments are required.
std::optional<RawCall> call_from_object(const OJson& o, bool bare) {
  if (!o.is_object()) return std::nullopt;
  auto name = o.find("name");
  if (name == o.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  if (bare) {
    for (const auto& [k, v] : o.items()) {
      if (k == "type" ? v != "function" : k != "name" && k != "parameters" && k != "arguments")
        return std::nullopt;
    }
  }
  auto args = o.find("arguments");
  if (args == o.end()) args = o.find("parameters");
  RawCall c;
  c.name = name->get<std::string>();
  if (args == o.end()) {
    if (bare) return std::nullopt;
    c.arguments = "{}";
  } else {
    auto text = arguments_text(*args);
    if (!text) return std::nullopt;
    c.arguments = std::move(*text);
  }
  auto id = o.find("id");
  if (!bare && id != o.end() && id->is_string()) c.model_id = id->get<std::string>();
  return c;
}

// A JSON array of call objects, or one call object (kMistral, kGranite).
Unit parse_call_list(std::string_view s, size_t i, bool at_end) {
  if (i >= s.size()) return need_more(at_end);
  if (s[i] != '[' && s[i] != '{') return invalid();
  Parsed p = parse_json_at(s, i, at_end);
  if (p.status != Status::kComplete) return {p.status};
  Unit u{Status::kComplete, p.end, {}};
  if (p.value.is_object()) {
    auto c = call_from_object(p.value, /*bare=*/false);
    if (!c) return invalid();
    u.calls.push_back(std::move(*c));
    return u;
  }
  if (p.value.empty()) return invalid();
  for (const OJson& el : p.value) {
    auto c = call_from_object(el, /*bare=*/false);
    if (!c) return invalid();
    u.calls.push_back(std::move(*c));
  }
  return u;
}

Unit parse_hermes(std::string_view s, size_t q, bool at_end) {
  switch (match(s, q, kHermesOpen, at_end)) {
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      return invalid();
    case Match::kYes:
      break;
  }
  const size_t i = skip_ws(s, q + kHermesOpen.size());
  if (i >= s.size()) return need_more(at_end);
  if (s[i] != '{') return invalid();
  Parsed p = parse_json_at(s, i, at_end);
  if (p.status != Status::kComplete) return {p.status};
  auto c = call_from_object(p.value, /*bare=*/false);
  if (!c) return invalid();
  const size_t j = skip_ws(s, p.end);
  Unit u{Status::kComplete, 0, {std::move(*c)}};
  u.calls[0].model_id.clear();
  switch (match(s, j, kHermesClose, at_end)) {
    case Match::kYes:
      u.end = j + kHermesClose.size();
      return u;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      break;
  }
  if (at_end && j == s.size()) {  // the text ended right after the object: tolerated
    u.end = p.end;
    return u;
  }
  return invalid();
}

// Whether the complete members at the start of the object at s[i] == '{' already rule out a
// kLlama3 call (a key other than name/parameters/arguments/type, a name that is not a string, a
// type other than "function"), so that JSON that is not a call is released without waiting for
// its end. Looks only at what the text shows: false while undecided.
bool llama_object_rejects(std::string_view s, size_t i) {
  const size_t n = s.size();
  size_t k = skip_ws(s, i + 1);
  for (;;) {
    if (k >= n || s[k] != '"') return false;  // '}' or bad JSON: left to the full parse
    const Scan key_scan = scan_string(s, k);
    if (key_scan.status != Status::kComplete) return false;
    const std::string_view key = s.substr(k + 1, key_scan.end - k - 2);
    if (key.find('\\') != npos) return false;  // escaped: left to the full parse
    if (key != "name" && key != "parameters" && key != "arguments" && key != "type") return true;
    k = skip_ws(s, key_scan.end);
    if (k >= n || s[k] != ':') return false;
    k = skip_ws(s, k + 1);
    if (k >= n) return false;
    if (key == "name" && s[k] != '"') return true;
    const Scan v = scan_json(s, k);
    if (v.status != Status::kComplete) return false;
    if (key == "type" &&
        OJson::parse(s.substr(k, v.end - k), nullptr, /*allow_exceptions=*/false) != "function")
      return true;
    k = skip_ws(s, v.end);
    if (k >= n || s[k] != ',') return false;
    k = skip_ws(s, k + 1);
  }
}

Unit parse_llama3(std::string_view s, size_t q, bool at_end) {
  size_t i = q;
  if (s[i] == ';') i = skip_ws(s, i + 1);
  switch (match(s, i, kPythonTag, at_end)) {
    case Match::kYes:
      i = skip_ws(s, i + kPythonTag.size());
      break;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      break;
  }
  if (i >= s.size()) return need_more(at_end);
  if (s[i] != '{' || llama_object_rejects(s, i)) return invalid();
  Parsed p = parse_json_at(s, i, at_end);
  if (p.status != Status::kComplete) return {p.status};
  auto c = call_from_object(p.value, /*bare=*/true);
  if (!c) return invalid();
  return {Status::kComplete, p.end, {std::move(*c)}};
}

Unit parse_mistral(std::string_view s, size_t q, bool at_end) {
  switch (match(s, q, kMistralCalls, at_end)) {
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      return invalid();
    case Match::kYes:
      break;
  }
  size_t i = skip_ws(s, q + kMistralCalls.size());
  if (i >= s.size()) return need_more(at_end);
  if (s[i] == '[' || s[i] == '{') {
    Unit u = parse_call_list(s, i, at_end);
    return u;
  }
  // v11: NAME ([CALL_ID]ID)? [ARGS]{...}
  const size_t name_end = skip_name(s, i);
  if (name_end >= s.size()) return need_more(at_end);
  if (name_end == i) return invalid();
  RawCall c;
  c.name = std::string(s.substr(i, name_end - i));
  i = name_end;
  const Match id_m = match(s, i, kMistralCallId, at_end);
  if (id_m == Match::kYes) {
    const size_t id_start = i + kMistralCallId.size();
    size_t k = id_start;
    while (k < s.size() && is_alnum(s[k])) ++k;
    if (k >= s.size()) return need_more(at_end);
    c.model_id = std::string(s.substr(id_start, k - id_start));
    i = k;
  }
  switch (match(s, i, kMistralArgs, at_end)) {
    case Match::kYes:
      break;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      if (id_m == Match::kPartial) return need_more(at_end);
      return invalid();
  }
  i = skip_ws(s, i + kMistralArgs.size());
  if (i >= s.size()) return need_more(at_end);
  if (s[i] != '{') return invalid();
  Parsed p = parse_json_at(s, i, at_end);
  if (p.status != Status::kComplete) return {p.status};
  auto args = arguments_text(p.value);
  if (!args) return invalid();
  c.arguments = std::move(*args);
  return {Status::kComplete, p.end, {std::move(c)}};
}

Unit parse_granite(std::string_view s, size_t q, bool at_end) {
  switch (match(s, q, kGraniteCall, at_end)) {
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      return invalid();
    case Match::kYes:
      break;
  }
  Unit u = parse_call_list(s, skip_ws(s, q + kGraniteCall.size()), at_end);
  for (RawCall& c : u.calls) c.model_id.clear();
  return u;
}

// Expects `lit` at s[*i] and moves past it; otherwise the unit's status.
std::optional<Unit> expect(std::string_view s, size_t* i, std::string_view lit, bool at_end) {
  switch (match(s, *i, lit, at_end)) {
    case Match::kYes:
      *i += lit.size();
      return std::nullopt;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      break;
  }
  return invalid();
}

Unit parse_deepseek(std::string_view s, size_t q, bool at_end) {
  size_t i = q;
  switch (match(s, i, kDsCallsBegin, at_end)) {
    case Match::kYes:
      i = skip_ws(s, i + kDsCallsBegin.size());
      break;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      break;
  }
  if (auto u = expect(s, &i, kDsCallBegin, at_end)) return *u;
  const size_t w_end = skip_name(s, i);
  if (w_end >= s.size()) return need_more(at_end);
  const std::string_view word = s.substr(i, w_end - i);
  i = w_end;
  if (auto u = expect(s, &i, kDsSep, at_end)) return *u;
  if (i >= s.size()) return need_more(at_end);
  RawCall c;
  size_t json_at;
  const bool fenced = s[i] != '{';
  if (!fenced) {  // V3.1: NAME<｜tool▁sep｜>{...}
    if (word.empty()) return invalid();
    c.name = std::string(word);
    json_at = i;
  } else {  // V3 / R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    if (word.empty()) return invalid();
    const size_t name_end = skip_name(s, i);
    if (name_end >= s.size()) return need_more(at_end);
    if (name_end == i) return invalid();
    c.name = std::string(s.substr(i, name_end - i));
    i = skip_ws(s, name_end);
    if (i >= s.size()) return need_more(at_end);
    if (auto u = expect(s, &i, "```", at_end)) return *u;
    switch (match(s, i, "json", at_end)) {
      case Match::kYes:
        i += 4;
        break;
      case Match::kPartial:
        return need_more(at_end);
      case Match::kNo:
        break;
    }
    json_at = skip_ws(s, i);
  }
  if (json_at >= s.size()) return need_more(at_end);
  if (s[json_at] != '{') return invalid();
  Parsed p = parse_json_at(s, json_at, at_end);
  if (p.status != Status::kComplete) return {p.status};
  auto args = arguments_text(p.value);
  if (!args) return invalid();
  c.arguments = std::move(*args);
  i = skip_ws(s, p.end);
  if (fenced) {
    if (i >= s.size()) return need_more(at_end);
    if (auto u = expect(s, &i, "```", at_end)) return *u;
    i = skip_ws(s, i);
  }
  if (i >= s.size()) return need_more(at_end);
  if (auto u = expect(s, &i, kDsCallEnd, at_end)) return *u;
  Unit u{Status::kComplete, i, {std::move(c)}};
  // An optional <｜tool▁calls▁end｜> after the call belongs to it.
  const size_t j = skip_ws(s, i);
  switch (match(s, j, kDsCallsEnd, at_end)) {
    case Match::kYes:
      u.end = j + kDsCallsEnd.size();
      break;
    case Match::kPartial:
      return need_more(at_end);
    case Match::kNo:
      break;
  }
  return u;
}

Unit parse_unit(ToolFamily f, std::string_view s, size_t q, bool at_end) {
  switch (f) {
    case ToolFamily::kHermes:
      return parse_hermes(s, q, at_end);
    case ToolFamily::kLlama3:
      return parse_llama3(s, q, at_end);
    case ToolFamily::kMistral:
    case ToolFamily::kMistralV11:
      return parse_mistral(s, q, at_end);
    case ToolFamily::kGranite:
      return parse_granite(s, q, at_end);
    case ToolFamily::kDeepSeek:
      return parse_deepseek(s, q, at_end);
    case ToolFamily::kNone:
      break;
  }
  return invalid();
}

// End of s[start, end) without an incomplete UTF-8 character at its very end.
size_t utf8_complete_end(std::string_view s, size_t start, size_t end) {
  size_t k = end;
  int cont = 0;
  while (k > start && cont < 3 && (static_cast<unsigned char>(s[k - 1]) & 0xC0) == 0x80) {
    --k;
    ++cont;
  }
  if (k == start) return end;
  const auto lead = static_cast<unsigned char>(s[k - 1]);
  const int len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return len > 1 && cont + 1 < len ? k - 1 : end;
}

std::string random_alnum(size_t n) {
  static constexpr std::string_view kChars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{[] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }()};
  std::uniform_int_distribution<size_t> pick(0, kChars.size() - 1);
  std::string out(n, ' ');
  for (char& c : out) c = kChars[pick(rng)];
  return out;
}

bool is_mistral(ToolFamily f) {
  return f == ToolFamily::kMistral || f == ToolFamily::kMistralV11;
}

}  // namespace

const char* tool_family_name(ToolFamily f) {
  switch (f) {
    case ToolFamily::kNone:
      return "none";
    case ToolFamily::kHermes:
      return "hermes";
    case ToolFamily::kLlama3:
      return "llama3";
    case ToolFamily::kMistral:
      return "mistral";
    case ToolFamily::kMistralV11:
      return "mistral-v11";
    case ToolFamily::kGranite:
      return "granite";
    case ToolFamily::kDeepSeek:
      return "deepseek";
  }
  return "?";
}

std::optional<ToolFamily> tool_family_from_name(std::string_view name) {
  for (ToolFamily f :
       {ToolFamily::kNone, ToolFamily::kHermes, ToolFamily::kLlama3, ToolFamily::kMistral,
        ToolFamily::kMistralV11, ToolFamily::kGranite, ToolFamily::kDeepSeek})
    if (name == tool_family_name(f)) return f;
  return std::nullopt;
}

ToolFamily detect_tool_family(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != npos; };
  if (has(kDsCallsBegin)) return ToolFamily::kDeepSeek;
  if (has(kGraniteCall)) return ToolFamily::kGranite;
  if (has(kMistralCalls)) return has(kMistralArgs) ? ToolFamily::kMistralV11 : ToolFamily::kMistral;
  if (has(kHermesOpen)) return ToolFamily::kHermes;
  if (has(kLlamaIpython) || has(kPythonTag)) return ToolFamily::kLlama3;
  return ToolFamily::kNone;
}

// ---- Parsing driver ---------------------------------------------------------------------------

ToolCallStreamParser::ToolCallStreamParser(ToolFamily family) : family_(family) {}

size_t ToolCallStreamParser::find_candidate(bool at_end) const {
  const std::string_view s = text_;
  size_t best = npos;
  if (family_ == ToolFamily::kLlama3) {
    // A '{' (or, after a call, a ';') that is the segment's first non-blank character.
    // Nothing sent in this segment yet means [seg_start_, scanned_) is blank.
    if (emitted_ == seg_start_) {
      const size_t f = skip_ws(s, std::max(seg_start_, scanned_));
      if (f < s.size() && f >= pos_ && (s[f] == '{' || (after_call_ && s[f] == ';'))) best = f;
    }
  }
  const std::vector<std::string_view> markers = start_markers(family_);
  if (markers.empty()) return best;
  for (size_t q = pos_; q < s.size() && q < best; ++q) {
    if (s[q] != markers[0][0]) continue;  // every family's markers share their first byte
    for (std::string_view m : markers)
      if (match(s, q, m, at_end) != Match::kNo) return q;
  }
  return best;
}

void ToolCallStreamParser::emit_content(size_t upto, Close close, std::string& out) {
  const std::string_view s = text_;
  // One forward pass over the text not seen before: [emitted_, scanned_) is held white space.
  size_t first = npos, last = npos;  // first non-blank and one past the last, in the new text
  for (size_t i = std::max(scanned_, emitted_); i < upto; ++i) {
    if (is_ws(s[i])) continue;
    if (first == npos) first = i;
    last = i + 1;
  }
  // Trailing blanks wait: if a call follows they are dropped.
  size_t end = close == Close::kByEnd ? upto : last == npos ? emitted_ : last;
  scanned_ = upto;
  if (close == Close::kOpen) {
    const size_t whole = utf8_complete_end(s, emitted_, end);
    if (whole != end) scanned_ = emitted_;  // a character cut short: look again next time
    end = whole;
  }
  // After a call, the segment's leading blanks are dropped.
  size_t start = emitted_;
  if (after_call_ && emitted_ == seg_start_) start = first == npos ? end : std::min(first, end);
  if (end > start) {
    out.append(s.substr(start, end - start));
    emitted_ = end;
  }
}

std::string ToolCallStreamParser::new_id(const std::string& model_id) {
  std::string id;
  if (is_mistral(family_)) {
    const bool ok = model_id.size() == 9 && std::all_of(model_id.begin(), model_id.end(), is_alnum);
    id = ok && !ids_.count(model_id) ? model_id : random_alnum(9);
    while (ids_.count(id)) id = random_alnum(9);
  } else {
    do id = "call_" + random_alnum(24);
    while (ids_.count(id));
  }
  ids_.insert(id);
  return id;
}

void ToolCallStreamParser::advance(bool at_end, std::string& content,
                                   std::vector<ToolCall>& calls) {
  const size_t n = text_.size();
  for (;;) {
    const size_t q = find_candidate(at_end);
    if (q == npos) {
      emit_content(n, at_end ? Close::kByEnd : Close::kOpen, content);
      pos_ = n;
      return;
    }
    Unit u = parse_unit(family_, text_, q, at_end);
    if (u.status == Status::kIncomplete && at_end) u.status = Status::kInvalid;  // cannot happen
    if (u.status == Status::kInvalid) {
      pos_ = q + 1;
      continue;
    }
    if (u.status == Status::kIncomplete) {
      emit_content(q, Close::kOpen, content);
      pos_ = q;
      return;
    }
    emit_content(q, Close::kByCall, content);
    for (RawCall& c : u.calls)
      calls.push_back(ToolCall{new_id(c.model_id), std::move(c.name), std::move(c.arguments)});
    seg_start_ = pos_ = emitted_ = scanned_ = u.end;
    after_call_ = true;
  }
}

namespace {
// Completed calls as OpenAI streams them: a delta with index, id and name, then the arguments.
// Returns the number of calls sent after these.
int add_deltas(std::vector<ToolCall>& done, int index, StreamEvents& ev) {
  for (ToolCall& c : done) {
    ev.tool_calls.push_back(ToolCallDelta{index, std::move(c.id), std::move(c.name), ""});
    ev.tool_calls.push_back(
        ToolCallDelta{index, std::nullopt, std::nullopt, std::move(c.arguments)});
    ++index;
  }
  return index;
}
}  // namespace

StreamEvents ToolCallStreamParser::push(std::string_view text) {
  StreamEvents ev;
  if (finished_) fail("tool call parser: push() after finish()");
  if (family_ == ToolFamily::kNone) {
    text_.append(text);
    const size_t end = utf8_complete_end(text_, emitted_, text_.size());
    ev.content = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return ev;
  }
  text_.append(text);
  std::vector<ToolCall> done;
  advance(/*at_end=*/false, ev.content, done);
  calls_ = add_deltas(done, calls_, ev);
  return ev;
}

StreamEvents ToolCallStreamParser::finish() {
  StreamEvents ev;
  if (finished_) return ev;
  finished_ = true;
  if (family_ == ToolFamily::kNone) {
    ev.content = text_.substr(emitted_);
    emitted_ = text_.size();
    return ev;
  }
  std::vector<ToolCall> done;
  advance(/*at_end=*/true, ev.content, done);
  calls_ = add_deltas(done, calls_, ev);
  return ev;
}

ParsedOutput parse_tool_calls(ToolFamily family, std::string_view text) {
  ParsedOutput out;
  if (family == ToolFamily::kNone) {
    out.content = std::string(text);
    return out;
  }
  ToolCallStreamParser p(family);
  p.text_ = std::string(text);
  p.advance(/*at_end=*/true, out.content, out.calls);
  p.finished_ = true;
  return out;
}

// ---- Grammar ----------------------------------------------------------------------------------

namespace {

using grammar::gbnf_literal;

bool is_rule_char(char c) {
  return is_alnum(c) || c == '-';
}

// The grammar `gbnf` with every rule name (definitions and references) prefixed by `prefix`, so
// that the rule sets of several functions cannot clash. Literals, character classes, repetition
// braces and comments are copied as they are.
std::string prefix_rule_names(std::string_view g, std::string_view prefix) {
  std::string out;
  out.reserve(g.size() * 5 / 4);
  size_t i = 0;
  auto copy_delimited = [&](char close) {  // from the opening char to `close`, with escapes
    out += g[i++];
    while (i < g.size() && g[i] != close) {
      if (g[i] == '\\' && i + 1 < g.size()) out += g[i++];
      out += g[i++];
    }
    if (i < g.size()) out += g[i++];
  };
  while (i < g.size()) {
    const char c = g[i];
    if (c == '"') {
      copy_delimited('"');
    } else if (c == '[') {
      copy_delimited(']');
    } else if (c == '{') {
      copy_delimited('}');
    } else if (c == '#') {
      while (i < g.size() && g[i] != '\n') out += g[i++];
    } else if (is_rule_char(c)) {
      out += prefix;
      while (i < g.size() && is_rule_char(g[i])) out += g[i++];
    } else {
      out += g[i++];
    }
  }
  return out;
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return is_alnum(c) || c == '_' || c == '-'; });
}

struct Function {
  std::string name;
  std::string args_rule;  // the rule name of its arguments
  std::string rules;      // the GBNF rules of its arguments
};

std::vector<Function> read_functions(const OJson& tools,
                                     const std::optional<std::string>& only_function) {
  if (!tools.is_array() || tools.empty()) fail("tools: expected a non-empty array of tools");
  std::vector<Function> fns;
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OJson& t = tools[i];
    if (!t.is_object()) fail("tools[{}]: expected an object, got {}", i, t.type_name());
    auto type = t.find("type");
    if (type == t.end() || *type != "function") fail("tools[{}].type: expected \"function\"", i);
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) fail("tools[{}].function: expected an object", i);
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
      fail("tools[{}].function.name: expected a string", i);
    const std::string& nm = name->get_ref<const std::string&>();
    if (!valid_function_name(nm))
      fail("tools[{}].function.name: \"{}\" must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
           i, nm);
    if (!names.insert(nm).second)
      fail("tools[{}].function.name: \"{}\" is already the name of an earlier tool", i, nm);
    if (only_function && nm != *only_function) continue;
    Function f;
    f.name = nm;
    const std::string prefix = fmt::format("fn{}-", i);
    auto params = fn->find("parameters");
    if (params == fn->end() || params->is_null()) {
      f.args_rule = prefix + "args";
      f.rules = f.args_rule + " ::= \"{\" [ \\t\\n]* \"}\"\n";
    } else {
      if (!params->is_object())
        fail("tools[{}].function.parameters: expected an object (a JSON Schema), got {}", i,
             params->type_name());
      OJson schema = *params;
      auto st = schema.find("type");
      if (st != schema.end() && *st != "object")
        fail("tools[{}].function.parameters.type: expected \"object\" (arguments are an object)",
             i);
      const bool composed = schema.contains("anyOf") || schema.contains("oneOf") ||
                            schema.contains("allOf") || schema.contains("$ref") ||
                            schema.contains("enum") || schema.contains("const");
      if (st == schema.end() && !composed) schema["type"] = "object";
      grammar::JsonSchemaOptions opt;
      auto strict = fn->find("strict");
      opt.strict = strict != fn->end() && strict->is_boolean() && strict->get<bool>();
      std::string g;
      try {
        g = grammar::json_schema_to_gbnf(schema, opt);
      } catch (const Error& e) {
        fail("tools[{}].function.parameters: {}", i, e.what());
      }
      f.args_rule = prefix + opt.root;
      f.rules = prefix_rule_names(g, prefix);
    }
    fns.push_back(std::move(f));
  }
  if (only_function && fns.empty())
    fail("tool_choice: the function \"{}\" is not in tools", *only_function);
  return fns;
}

}  // namespace

std::string tool_call_grammar(ToolFamily family, const nlohmann::ordered_json& tools,
                              const std::optional<std::string>& only_function, bool parallel) {
  if (family == ToolFamily::kNone)
    fail("tools: this chat template has no tool call syntax to force a call in");
  const std::vector<Function> fns = read_functions(tools, only_function);
  if (only_function || family == ToolFamily::kLlama3) parallel = false;

  // One alternative per function: the family's call syntax around the arguments rule.
  std::string call = "call ::=";
  for (size_t k = 0; k < fns.size(); ++k) {
    const Function& f = fns[k];
    std::string before, after;
    switch (family) {
      case ToolFamily::kHermes:
        before = "<tool_call>\n{\"name\": \"" + f.name + "\", \"arguments\": ";
        after = "}\n</tool_call>";
        break;
      case ToolFamily::kLlama3:
        before = "{\"name\": \"" + f.name + "\", \"parameters\": ";
        after = "}";
        break;
      case ToolFamily::kMistral:
      case ToolFamily::kGranite:
        before = "{\"name\": \"" + f.name + "\", \"arguments\": ";
        after = "}";
        break;
      case ToolFamily::kMistralV11:
        before = std::string(kMistralCalls) + f.name + std::string(kMistralArgs);
        break;
      case ToolFamily::kDeepSeek:
        before =
            std::string(kDsCallBegin) + "function" + std::string(kDsSep) + f.name + "\n```json\n";
        after = "\n```" + std::string(kDsCallEnd);
        break;
      case ToolFamily::kNone:
        break;
    }
    call += fmt::format("{} {} {}{}", k ? "\n  |" : "", gbnf_literal(before), f.args_rule,
                        after.empty() ? "" : " " + gbnf_literal(after));
  }
  call += "\n";

  std::string root;
  switch (family) {
    case ToolFamily::kHermes:
      root = parallel ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n";
      break;
    case ToolFamily::kLlama3:
      root = "root ::= call\n";
      break;
    case ToolFamily::kMistralV11:
      root = parallel ? "root ::= call+\n" : "root ::= call\n";
      break;
    case ToolFamily::kMistral:
    case ToolFamily::kGranite: {
      const std::string open = gbnf_literal(
          std::string(family == ToolFamily::kMistral ? kMistralCalls : kGraniteCall) + "[");
      root = "root ::= " + open + (parallel ? " call (\", \" call)*" : " call") + " \"]\"\n";
      break;
    }
    case ToolFamily::kDeepSeek:
      root = "root ::= " + gbnf_literal(kDsCallsBegin) +
             (parallel ? " call (\"\\n\" call)* " : " call ") + gbnf_literal(kDsCallsEnd) + "\n";
      break;
    case ToolFamily::kNone:
      break;
  }
  std::string out = root + call;
  for (const Function& f : fns) out += f.rules;
  return out;
}

}  // namespace kvasir::server
