#include "kvasir/tokenizer/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <nlohmann/json.hpp>

#include "kvasir/tokenizer/unicode.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

using nlohmann::json;
using Kind = NormalizerStep::Kind;

std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

const json* member(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& j, const std::string& source, const std::string& path,
                         const char* name) {
  const json* f = member(j, name);
  if (!f || !f->is_string()) {
    fail("{}: field '{}.{}' = {}: expected a string", source, path, name, show(f ? *f : json()));
  }
  return f->get<std::string>();
}

bool bool_field(const json& j, const std::string& source, const std::string& path,
                const char* name) {
  const json* f = member(j, name);
  if (!f || !f->is_boolean()) {
    fail("{}: field '{}.{}' = {}: expected true or false", source, path, name,
         show(f ? *f : json()));
  }
  return f->get<bool>();
}

void parse_into(const json& j, const std::string& source, const std::string& path,
                std::vector<NormalizerStep>& out) {
  if (j.is_null()) return;
  if (!j.is_object() || !member(j, "type") || !member(j, "type")->is_string()) {
    fail("{}: field '{}' = {}: expected a normalizer object with a 'type'", source, path, show(j));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    const json* seq = member(j, "normalizers");
    if (!seq || !seq->is_array()) {
      fail("{}: field '{}.normalizers' = {}: expected an array", source, path,
           show(seq ? *seq : json()));
    }
    for (size_t i = 0; i < seq->size(); ++i) {
      parse_into((*seq)[i], source, fmt::format("{}.normalizers[{}]", path, i), out);
    }
    return;
  }
  NormalizerStep s;
  if (type == "NFC") {
    s.kind = Kind::kNfc;
  } else if (type == "NFD") {
    s.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    s.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    s.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    s.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    s.kind = Kind::kStrip;
    s.left = bool_field(j, source, path, "strip_left");
    s.right = bool_field(j, source, path, "strip_right");
  } else if (type == "Replace") {
    s.kind = Kind::kReplace;
    const json* pattern = member(j, "pattern");
    const json* str = pattern && pattern->is_object() ? member(*pattern, "String") : nullptr;
    if (!str || !str->is_string()) {
      fail(
          "{}: field '{}.pattern' = {} is not supported (expected {{\"String\": ...}}; Regex "
          "patterns are not supported)",
          source, path, show(pattern ? *pattern : json()));
    }
    s.from = str->get<std::string>();
    s.to = string_field(j, source, path, "content");
  } else if (type == "Prepend") {
    s.kind = Kind::kPrepend;
    s.from = string_field(j, source, path, "prepend");
  } else {
    fail(
        "{}: field '{}.type' = '{}' is not supported (supported normalizers: NFC, NFD, NFKC, "
        "NFKD, Lowercase, Strip, Replace (String pattern), Prepend, Sequence)",
        source, path, type);
  }
  out.push_back(std::move(s));
}

const icu::Normalizer2* icu_normalizer(Kind kind) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (kind) {
    case Kind::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case Kind::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case Kind::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case Kind::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
    default:
      break;
  }
  if (U_FAILURE(status) || n == nullptr) {
    fail("normalizer: ICU cannot provide {} ({})", normalizer_step_name(kind), u_errorName(status));
  }
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

std::string unicode_form(Kind kind, std::string_view s) {
  if (is_ascii(s)) return std::string(s);  // ASCII is invariant under every form
  const icu::Normalizer2* n = icu_normalizer(kind);
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString src =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  const icu::UnicodeString dst = n->normalize(src, status);
  if (U_FAILURE(status)) {
    fail("normalizer: {} failed on the input ({})", normalizer_step_name(kind),
         u_errorName(status));
  }
  std::string out;
  dst.toUTF8String(out);
  return out;
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : unicode::decode_lenient(s)) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      continue;
    }
    // One code point at a time, so that no context (Final_Sigma) applies.
    UChar src[2];
    int32_t n = 0;
    UBool err = false;
    U16_APPEND(src, n, 2, static_cast<UChar32>(cp > 0x10FFFF ? 0xFFFD : cp), err);
    UChar dst[8];
    UErrorCode status = U_ZERO_ERROR;
    const int32_t len = u_strToLower(dst, 8, src, n, "", &status);
    if (U_FAILURE(status) || err) {
      unicode::append_utf8(out, cp);
      continue;
    }
    for (int32_t i = 0; i < len;) {
      UChar32 c;
      U16_NEXT(dst, i, len, c);
      unicode::append_utf8(out, static_cast<uint32_t>(c));
    }
  }
  return out;
}

std::string strip(std::string_view s, bool left, bool right) {
  const std::vector<uint32_t> cps = unicode::decode_lenient(s);
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && unicode::is_whitespace(cps[b])) ++b;
  }
  if (right) {
    while (e > b && unicode::is_whitespace(cps[e - 1])) --e;
  }
  if (b == 0 && e == cps.size()) return std::string(s);
  std::string out;
  for (size_t i = b; i < e; ++i) unicode::append_utf8(out, cps[i]);
  return out;
}

std::string replace(std::string_view s, const std::string& from, const std::string& to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

std::string_view normalizer_step_name(NormalizerStep::Kind kind) {
  switch (kind) {
    case Kind::kNfc:
      return "NFC";
    case Kind::kNfd:
      return "NFD";
    case Kind::kNfkc:
      return "NFKC";
    case Kind::kNfkd:
      return "NFKD";
    case Kind::kLowercase:
      return "Lowercase";
    case Kind::kStrip:
      return "Strip";
    case Kind::kReplace:
      return "Replace";
    case Kind::kPrepend:
      return "Prepend";
  }
  return "?";
}

Normalizer Normalizer::from_json(const json& j, const std::string& source,
                                 const std::string& path) {
  std::vector<NormalizerStep> steps;
  parse_into(j, source, path, steps);
  return Normalizer(std::move(steps));
}

Normalizer Normalizer::from_json_text(std::string_view text, const std::string& source,
                                      const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: '{}' is not valid JSON: {}", source, path, e.what());
  }
  return from_json(j, source, path);
}

std::string Normalizer::to_json_text() const {
  json seq = json::array();
  for (const NormalizerStep& s : steps_) {
    json j = {{"type", std::string(normalizer_step_name(s.kind))}};
    if (s.kind == Kind::kStrip) {
      j["strip_left"] = s.left;
      j["strip_right"] = s.right;
    } else if (s.kind == Kind::kReplace) {
      j["pattern"] = {{"String", s.from}};
      j["content"] = s.to;
    } else if (s.kind == Kind::kPrepend) {
      j["prepend"] = s.from;
    }
    seq.push_back(std::move(j));
  }
  return json{{"type", "Sequence"}, {"normalizers", seq}}.dump(-1, ' ', false,
                                                               json::error_handler_t::replace);
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc:
      case Kind::kNfd:
      case Kind::kNfkc:
      case Kind::kNfkd:
        s = unicode_form(step.kind, s);
        break;
      case Kind::kLowercase:
        s = lowercase(s);
        break;
      case Kind::kStrip:
        s = strip(s, step.left, step.right);
        break;
      case Kind::kReplace:
        s = replace(s, step.from, step.to);
        break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.from);
        break;
    }
  }
  return s;
}

}  // namespace kvasir
