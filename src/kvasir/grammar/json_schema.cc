// JSON Schema → GBNF. See json_schema.h for what is admitted and what is refused.
//
// The converter walks the schema once, emitting one GBNF rule per named part (a property's value,
// its key-value pair, an array's items, a $ref target, ...) and the shared primitives (space,
// string, integer, ...) once each. A $ref becomes a reference to the rule of its target, reserved
// before the target is visited, so recursive schemas give recursive rules. allOf and a $ref with
// constraining siblings are merged into one schema before they are visited; anyOf/oneOf become
// alternatives (siblings distributed into each alternative). Sections below: GBNF text helpers,
// primitives, numeric ranges, the regex subset of `pattern`, and the schema walk.
#include "kvasir/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kvasir/grammar/grammar.h"
#include "kvasir/util/error.h"

namespace kvasir::grammar {
namespace {

using json = nlohmann::ordered_json;

// ---- limits (protect the server against hostile schemas) ----
constexpr int kMaxDepth = 64;                 // nested schemas, merges and $ref hops on one path
constexpr size_t kMaxGrammarBytes = 1 << 20;  // total GBNF text
constexpr int64_t kMaxRepetition = 4096;      // minLength/maxLength/minItems/maxItems/{m,n}/tuples
constexpr int kMaxPatternNesting = 32;        // parentheses in a pattern
constexpr size_t kMaxRuleNameChars = 80;
constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits: llama.cpp's integral-part

// ---- GBNF text helpers ----

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Code points of UTF-8 text; nullopt when it is not valid UTF-8.
std::optional<std::vector<uint32_t>> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = 0;  // continuation bytes
    if ((b & 0xE0) == 0xC0) {
      n = 1;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3;
    } else if (b >= 0x80) {
      return std::nullopt;
    }
    static constexpr uint32_t kLeadMask[4] = {0x7F, 0x1F, 0x0F, 0x07};
    uint32_t cp = b & kLeadMask[n];
    if (n > 0 && i + static_cast<size_t>(n) >= s.size()) return std::nullopt;
    for (int k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

// One code point written for the inside of a GBNF character class.
std::string class_char(uint32_t cp) {
  switch (cp) {
    case ']':
      return "\\]";
    case '[':
      return "\\[";
    case '\\':
      return "\\\\";
    case '-':
      return "\\-";
    case '^':
      return "\\x5E";
    case '"':
      return "\\\"";
    default:
      break;
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

// "a b" joined by a space, skipping empty parts.
std::string join2(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

bool is_rule_name(std::string_view e) {
  return !e.empty() && std::all_of(e.begin(), e.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// Whether `e` is one GBNF term that a postfix operator may follow without parentheses: a rule
// name, a literal, a class or one parenthesized group.
bool is_single_term(std::string_view e) {
  if (e.empty()) return false;
  if (is_rule_name(e)) return true;
  const char open = e.front();
  const char close = open == '"' ? '"' : open == '[' ? ']' : open == '(' ? ')' : 0;
  if (!close) return false;
  int depth = 0;
  bool in_str = false, in_cls = false;
  for (size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (in_str || in_cls) {
      if (c == '\\') {
        ++i;
      } else if ((in_str && c == '"') || (in_cls && c == ']')) {
        in_str = in_cls = false;
        if (depth == 0) return i + 1 == e.size();
      }
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '[') {
      in_cls = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth == 0) return i + 1 == e.size();
    }
  }
  return false;
}

std::string term(const std::string& e) {
  return is_single_term(e) ? e : "(" + e + ")";
}

// x repeated lo..hi times (hi: nullopt = unbounded), as llama.cpp writes it.
std::string repeat(const std::string& x, int64_t lo, std::optional<int64_t> hi) {
  if (hi && *hi == 0) return "";
  const std::string t = term(x);
  if (lo == 0 && hi == 1) return t + "?";
  if (lo == 0 && !hi) return t + "*";
  if (lo == 1 && !hi) return t + "+";
  if (hi && lo == *hi) return lo == 1 ? t : fmt::format("{}{{{}}}", t, lo);
  if (!hi) return fmt::format("{}{{{},}}", t, lo);
  return fmt::format("{}{{{},{}}}", t, lo, *hi);
}

// item ("," space item)* with lo..hi items in all (llama.cpp's build_repetition with separator).
std::string repeat_separated(const std::string& item, int64_t lo, std::optional<int64_t> hi) {
  if (hi && *hi == 0) return "";
  if (lo == 0 && hi == 1) return term(item) + "?";
  const std::string rest = repeat("\",\" space " + item, lo > 0 ? lo - 1 : 0,
                                  hi ? std::optional<int64_t>(*hi - 1) : std::nullopt);
  const std::string seq = join2(item, rest);
  return lo == 0 ? "(" + seq + ")?" : seq;
}

// ---- JSON pointers ----

std::string pointer_token(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string child_ptr(const std::string& ptr, std::string_view key) {
  return ptr + "/" + pointer_token(key);
}
std::string child_ptr(const std::string& ptr, size_t index) {
  return ptr + "/" + std::to_string(index);
}
std::string show(const std::string& ptr) {
  return ptr.empty() ? "/" : ptr;
}

const char* type_name(const json& v) {
  return v.type_name();
}

std::string dump(const json& v) {
  return v.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

// ---- primitives (llama.cpp's PRIMITIVE_RULES and STRING_FORMAT_RULES; the date is exact) ----

struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};

const std::vector<Primitive>& primitives() {
  static const std::vector<Primitive> kPrimitives = {
      {"space", R"(| " " | "\n"{1,2} [ \t]{0,20})", {}},
      {"boolean", R"(("true" | "false") space)", {"space"}},
      {"null", R"("null" space)", {"space"}},
      {"decimal-part", R"([0-9]{1,16})", {}},
      {"integral-part", R"([0] | [1-9] [0-9]{0,15})", {}},
      {"number",
       R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)",
       {"integral-part", "decimal-part", "space"}},
      {"integer", R"(("-"? integral-part) space)", {"integral-part", "space"}},
      {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}))", {}},
      {"string", R"("\"" char* "\"" space)", {"char", "space"}},
      {"value",
       R"(object | array | string | number | boolean | null)",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object",
       R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)",
       {"string", "value", "space"}},
      {"array", R"("[" space ( value ("," space value)* )? "]" space)", {"value", "space"}},
      {"uuid",
       R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space)",
       {"space"}},
      // Gregorian dates: days per month, 02-29 only in leap years (divisible by 4, centuries
      // only when divisible by 400).
      {"date",
       R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | ( [0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [048] | [2468] [048] | [13579] [26] ) "00" ) "-02-29")",
       {}},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"date-string", R"("\"" date "\"" space)", {"date", "space"}},
      {"time-string", R"("\"" time "\"" space)", {"time", "space"}},
      {"date-time-string", R"("\"" date-time "\"" space)", {"date-time", "space"}},
  };
  return kPrimitives;
}

const Primitive* find_primitive(std::string_view name) {
  for (const auto& p : primitives()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

// ---- integer ranges as digit rules ----

std::string digits_any(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return fmt::format("[0-9]{{{}}}", n);
}

std::string digit_class(char x, char y) {
  if (x == y) return gbnf_literal(std::string(1, x));
  return fmt::format("[{}-{}]", x, y);
}

// Digit `c` then `rest`, one literal when `rest` is one ("5" "0" → "50").
std::string digit_then(char c, const std::string& rest) {
  const bool rest_is_digits =
      rest.size() >= 3 && rest.front() == '"' && rest.back() == '"' &&
      std::all_of(rest.begin() + 1, rest.end() - 1, [](char d) { return d >= '0' && d <= '9'; });
  if (rest_is_digits) return "\"" + std::string(1, c) + rest.substr(1);
  return join2(gbnf_literal(std::string(1, c)), rest);
}

// Decimal strings of a's length from a to b (a <= b, same length).
std::string same_length_range(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  size_t p = 0;
  while (p < n && a[p] == b[p]) ++p;
  const std::string prefix = p ? gbnf_literal(a.substr(0, p)) : "";
  if (p == n) return prefix;
  const char x = a[p], y = b[p];
  const std::string ar = a.substr(p + 1), br = b.substr(p + 1);
  const size_t m = n - p - 1;
  const bool lo_full = std::all_of(ar.begin(), ar.end(), [](char c) { return c == '0'; });
  const bool hi_full = std::all_of(br.begin(), br.end(), [](char c) { return c == '9'; });
  std::vector<std::string> alts;
  if (!lo_full) alts.push_back(digit_then(x, same_length_range(ar, std::string(m, '9'))));
  const char s = lo_full ? x : static_cast<char>(x + 1);
  const char e = hi_full ? y : static_cast<char>(y - 1);
  if (s <= e) alts.push_back(join2(digit_class(s, e), digits_any(m)));
  if (!hi_full) alts.push_back(digit_then(y, same_length_range(std::string(m, '0'), br)));
  return join2(prefix, alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")");
}

// "1" followed by len - 1 zeros.
std::string power_of_ten(size_t len) {
  std::string s(len, '0');
  s[0] = '1';
  return s;
}

// Decimal integers from a to b (0 <= a <= b), without leading zeros, as alternatives.
std::string nonneg_range(int64_t a, int64_t b) {
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  std::vector<std::string> alts;
  size_t run_from = 0, run_to = 0;  // a run of lengths whose whole range is admitted
  auto flush = [&] {
    if (!run_from) return;
    alts.push_back(run_from == run_to
                       ? fmt::format("[1-9] {}", digits_any(run_from - 1))
                       : fmt::format("[1-9] [0-9]{{{},{}}}", run_from - 1, run_to - 1));
    run_from = run_to = 0;
  };
  for (size_t len = sa.size(); len <= sb.size(); ++len) {
    const std::string lo = len == sa.size() ? sa : power_of_ten(len);
    const std::string hi = len == sb.size() ? sb : std::string(len, '9');
    if (len >= 2 && lo == power_of_ten(len) && hi == std::string(len, '9')) {
      if (!run_from) run_from = len;
      run_to = len;
      continue;
    }
    flush();
    alts.push_back(same_length_range(lo, hi));
  }
  flush();
  return join(alts, " | ");
}

// Integers lo..hi (each within ±kMaxInteger), without "-0".
std::string integer_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) alts.push_back("\"-\" " + term(nonneg_range(hi < 0 ? -hi : 1, -lo)));
  if (hi >= 0) alts.push_back(nonneg_range(std::max<int64_t>(lo, 0), hi));
  return join(alts, " | ");
}

struct Bound {
  int64_t value;
  bool exclusive;
};

// Decimals A[.F] >= 0 (no exponent) with lower bound `lo` (value >= 0) and optional upper bound.
std::vector<std::string> nonneg_decimal(Bound lo, std::optional<Bound> hi) {
  static const std::string kFracAny = "(\".\" decimal-part)?";
  static const std::string kFracZero = "(\".\" \"0\"{1,16})?";
  static const std::string kFracNonzero = "\".\" [0-9]{0,15} [1-9] [0-9]{0,15}";
  std::vector<std::string> alts;
  const int64_t any_from = lo.exclusive ? lo.value + 1 : lo.value;
  const int64_t any_to = hi ? hi->value - 1 : kMaxInteger;
  if (any_from <= std::min(any_to, kMaxInteger)) {
    alts.push_back(term(nonneg_range(any_from, std::min(any_to, kMaxInteger))) + " " + kFracAny);
  }
  // (l, l+1): the integer part l with a nonzero fraction, below any upper bound (u > l).
  if (lo.exclusive && lo.value <= kMaxInteger && (!hi || hi->value > lo.value)) {
    alts.push_back(gbnf_literal(std::to_string(lo.value)) + " " + kFracNonzero);
  }
  // Exactly u (u >= the lower bound).
  if (hi && !hi->exclusive && (hi->value > lo.value || (hi->value == lo.value && !lo.exclusive))) {
    alts.push_back(gbnf_literal(std::to_string(hi->value)) + " " + kFracZero);
  }
  return alts;
}

// Numbers within [lo, hi] bounds (whole-number bounds), written without an exponent.
std::string number_range(std::optional<Bound> lo, std::optional<Bound> hi) {
  std::vector<std::string> alts;
  // x < 0, as "-" y with y = -x > 0.
  if (!lo || lo->value < 0) {
    Bound ylo{0, true};
    if (hi && hi->value < 0) ylo = Bound{-hi->value, hi->exclusive};
    std::optional<Bound> yhi;
    if (lo) yhi = Bound{-lo->value, lo->exclusive};
    const auto neg = nonneg_decimal(ylo, yhi);
    if (!neg.empty()) alts.push_back("\"-\" " + term(join(neg, " | ")));
  }
  // x >= 0.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    Bound xlo{0, false};
    if (lo && lo->value >= 0) xlo = *lo;
    for (auto& a : nonneg_decimal(xlo, hi)) alts.push_back(std::move(a));
  }
  return join(alts, " | ");
}

// ---- pattern: the regex subset llama.cpp supports, as GBNF over JSON string content ----

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [a, b] : r) {
    if (!out.empty() && a <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [a, b] : normalize(r)) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

// Code points in both (normalized) range lists.
Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

bool contains(const Ranges& r, uint32_t cp) {
  return std::any_of(r.begin(), r.end(),
                     [&](const auto& x) { return x.first <= cp && cp <= x.second; });
}

// Code points a JSON string must escape (and llama.cpp's char rule writes escaped: also DEL).
bool needs_json_escape(uint32_t cp) {
  return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F;
}

// The hex digits d (0..15) where bit d of `mask` is set, as a class with both letter cases.
std::string hex_digits_class(unsigned mask) {
  std::string cls;
  for (unsigned d = 0; d < 16; ++d) {
    if (!(mask >> d & 1)) continue;
    if (d < 10) {
      cls += static_cast<char>('0' + d);
    } else {
      cls += static_cast<char>('a' + d - 10);
      cls += static_cast<char>('A' + d - 10);
    }
  }
  return "[" + cls + "]";
}

// The JSON spellings of one code point that must be escaped (the short escape where JSON has
// one, else \u00XX with either case of hex letters).
std::string escaped_spelling(uint32_t cp) {
  switch (cp) {
    case '"':
      return gbnf_literal("\\\"");
    case '\\':
      return gbnf_literal("\\\\");
    case '\b':
      return gbnf_literal("\\b");
    case '\f':
      return gbnf_literal("\\f");
    case '\n':
      return gbnf_literal("\\n");
    case '\r':
      return gbnf_literal("\\r");
    case '\t':
      return gbnf_literal("\\t");
    default:
      break;
  }
  if ((cp & 0xF) < 10) return gbnf_literal(fmt::format("\\u{:04X}", cp));
  return join2(gbnf_literal(fmt::format("\\u00{:X}", cp >> 4)), hex_digits_class(1u << (cp & 0xF)));
}

// One JSON-string character (as written in the JSON text) whose decoded code point is in `set`.
// Empty when the set is empty.
std::string char_set_expr(const Ranges& set_in) {
  const Ranges set = normalize(set_in);
  std::vector<std::string> alts;
  // Characters written as themselves.
  const Ranges raw =
      intersect(set, complement({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}));
  if (!raw.empty()) {
    std::string cls = "[";
    for (const auto& [a, b] : raw) {
      cls += class_char(a);
      if (b > a) cls += (b > a + 1 ? "-" : "") + class_char(b);
    }
    alts.push_back(cls + "]");
  }
  // Characters that must be escaped.
  bool all_controls = true;
  for (uint32_t cp = 0; cp < 0x20; ++cp) all_controls = all_controls && contains(set, cp);
  if (all_controls) {
    alts.push_back(R"([\\] [bfnrt])");
    alts.push_back(R"("\\u00" [01] [0-9a-fA-F])");
  } else {
    // The short escape of each control that has one, \u00XX for the others (one class of low
    // hex digits per high digit).
    std::string short_letters;
    for (const auto& [cp, letter] : {std::pair<uint32_t, char>{'\b', 'b'},
                                     {'\f', 'f'},
                                     {'\n', 'n'},
                                     {'\r', 'r'},
                                     {'\t', 't'}}) {
      if (contains(set, cp)) short_letters += letter;
    }
    if (short_letters.size() == 1) {
      alts.push_back(gbnf_literal(std::string(1, '\\') + short_letters));
    } else if (!short_letters.empty()) {
      alts.push_back("[\\\\] [" + short_letters + "]");
    }
    for (uint32_t high = 0; high < 2; ++high) {
      unsigned mask = 0;
      for (uint32_t d = 0; d < 16; ++d) {
        const uint32_t cp = high * 16 + d;
        const bool has_short = cp == '\b' || cp == '\f' || cp == '\n' || cp == '\r' || cp == '\t';
        if (contains(set, cp) && !has_short) mask |= 1u << d;
      }
      if (mask) {
        alts.push_back(join2(gbnf_literal(fmt::format("\\u00{}", high)), hex_digits_class(mask)));
      }
    }
  }
  for (const uint32_t cp : {uint32_t{'"'}, uint32_t{'\\'}, uint32_t{0x7F}}) {
    if (contains(set, cp)) alts.push_back(escaped_spelling(cp));
  }
  if (alts.size() == 1) return alts[0];
  return "(" + join(alts, " | ") + ")";
}

// Parses an ECMA-262 regex subset: literals, escapes (\d \w \s \D \W \S, \t \n \r \f \v \0,
// \xHH, \uHHHH, \cX, escaped punctuation), classes with ranges, `.`, groups ( (...), (?:...),
// (?<name>...) ), alternation, ? * + {m} {m,} {m,n} (lazy forms too: same language), ^ at the
// start and $ at the end of a top-level alternative. The whole value must match (the anchors are
// implied, as in llama.cpp).
class PatternConverter {
 public:
  PatternConverter(std::vector<uint32_t> src, std::string ptr)
      : src_(std::move(src)), ptr_(std::move(ptr)) {}

  std::string convert() {
    std::string e = alternation(0);
    if (pos_ < src_.size()) bad("unbalanced ')'");
    return e;
  }

 private:
  struct Piece {
    std::string expr;  // GBNF, when !is_text
    std::string text;  // JSON text to match literally, when is_text
    bool is_text = false;
  };

  [[noreturn]] void unsupported(std::string_view what) const {
    fail("json_schema: unsupported keyword 'pattern' at {}: {} at offset {} is not supported",
         show(ptr_), what, pos_);
  }
  [[noreturn]] void bad(std::string_view what) const {
    fail("json_schema: invalid 'pattern' at {}: {} at offset {}", show(ptr_), what, pos_);
  }

  bool at_end() const { return pos_ >= src_.size(); }
  uint32_t peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : 0; }

  std::string alternation(int nesting) {
    if (nesting > kMaxPatternNesting) bad("groups nested too deeply");
    std::vector<std::string> alts;
    bool has_empty = false;
    for (;;) {
      std::string s = sequence(nesting);
      if (s.empty()) {
        has_empty = true;
      } else {
        alts.push_back(std::move(s));
      }
      if (!at_end() && peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (alts.empty()) return "";
    std::string e = alts.size() == 1 ? alts[0] : join(alts, " | ");
    if (has_empty) return "(" + e + ")?";
    return e;
  }

  std::string sequence(int nesting) {
    std::vector<Piece> pieces;
    bool start = true;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const uint32_t c = peek();
      if (c == '^') {
        if (nesting != 0 || !start) unsupported("'^' not at the start");
        ++pos_;
        continue;
      }
      if (c == '$') {
        ++pos_;
        if (nesting != 0 || !(at_end() || peek() == '|')) {
          --pos_;
          unsupported("'$' not at the end");
        }
        continue;
      }
      start = false;
      Piece p = atom(nesting);
      quantify(p);
      pieces.push_back(std::move(p));
    }
    // Merge runs of literal text into one GBNF string literal.
    std::vector<std::string> out;
    std::string text;
    for (auto& p : pieces) {
      if (p.is_text) {
        text += p.text;
        continue;
      }
      if (!text.empty()) out.push_back(gbnf_literal(text)), text.clear();
      if (!p.expr.empty()) out.push_back(p.expr);
    }
    if (!text.empty()) out.push_back(gbnf_literal(text));
    return join(out, " ");
  }

  // A literal code point: its JSON text when written as itself, else its escaped spelling.
  static Piece literal(uint32_t cp) {
    Piece p;
    if (needs_json_escape(cp)) {
      p.expr = escaped_spelling(cp);
    } else {
      p.is_text = true;
      append_utf8(p.text, cp);
    }
    return p;
  }

  static Piece set_piece(const Ranges& r) {
    Piece p;
    p.expr = char_set_expr(r);
    return p;
  }

  Piece atom(int nesting) {
    const uint32_t c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        if (peek(1) == ':') {
          pos_ += 2;
        } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
          pos_ += 2;
          while (!at_end() && peek() != '>') ++pos_;
          if (at_end()) bad("unterminated group name");
          ++pos_;
        } else {
          unsupported("lookaround or group flag '(?'");
        }
      }
      Piece p;
      const std::string inner = alternation(nesting + 1);
      p.expr = inner.empty() ? "" : term(inner);
      if (at_end() || peek() != ')') bad("missing ')'");
      ++pos_;
      return p;
    }
    if (c == '[') return set_piece(char_class());
    if (c == '.') {
      ++pos_;
      return set_piece(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '*' || c == '+' || c == '?') bad("nothing to repeat");
    if (c == '{' && quantifier_at(pos_)) bad("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      if (at_end()) bad("'\\' at the end");
      const uint32_t e = peek();
      if (e == 'b' || e == 'B') unsupported("word boundary '\\b'");
      if (e >= '1' && e <= '9') unsupported("backreference");
      if (e == 'k') unsupported("named backreference '\\k'");
      if (e == 'p' || e == 'P') unsupported("Unicode property escape");
      if (auto r = class_escape(e)) {
        ++pos_;
        return set_piece(*r);
      }
      return literal(char_escape());
    }
    ++pos_;
    return literal(c);
  }

  // \d \w \s and their complements.
  static std::optional<Ranges> class_escape(uint32_t e) {
    static const Ranges kDigit = {{'0', '9'}};
    static const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const Ranges kSpace = {
        {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    switch (e) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      default:
        return std::nullopt;
    }
  }

  uint32_t hex(size_t n) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = static_cast<int>(h - '0');
      if (h >= 'a' && h <= 'f') d = static_cast<int>(h - 'a' + 10);
      if (h >= 'A' && h <= 'F') d = static_cast<int>(h - 'A' + 10);
      if (d < 0) bad("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // A single-character escape after '\' (pos_ at the character after the backslash).
  uint32_t char_escape() {
    const uint32_t e = peek();
    ++pos_;
    switch (e) {
      case 't':
        return '\t';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        if (peek() >= '0' && peek() <= '9') unsupported("octal escape");
        return 0;
      case 'x':
        return hex(2);
      case 'u': {
        if (peek() == '{') unsupported("'\\u{...}'");
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          pos_ += 2;
          const uint32_t lo = hex(4);
          if (lo < 0xDC00 || lo > 0xDFFF) bad("unpaired surrogate");
          v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        } else if (v >= 0xD800 && v <= 0xDFFF) {
          bad("unpaired surrogate");
        }
        return v;
      }
      case 'c': {
        const uint32_t l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) bad("bad '\\c' escape");
        ++pos_;
        return l % 32;
      }
      default:
        break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
      --pos_;
      unsupported(fmt::format("escape '\\{}'", static_cast<char>(e)));
    }
    return e;  // escaped punctuation stands for itself
  }

  Ranges char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges r;
    for (;;) {
      if (at_end()) bad("missing ']'");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      // One class atom: a code point, or a set (\d ...).
      auto class_atom = [&]() -> std::pair<std::optional<uint32_t>, Ranges> {
        const uint32_t c = peek();
        if (c != '\\') {
          ++pos_;
          return {c, {}};
        }
        ++pos_;
        if (at_end()) bad("'\\' at the end");
        const uint32_t e = peek();
        if (auto s = class_escape(e)) {
          ++pos_;
          return {std::nullopt, *s};
        }
        if (e == 'b') {
          ++pos_;
          return {uint32_t{'\b'}, {}};
        }
        if (e == '-') {
          ++pos_;
          return {uint32_t{'-'}, {}};
        }
        if (e == 'p' || e == 'P') unsupported("Unicode property escape");
        return {char_escape(), {}};
      };
      auto [a, set_a] = class_atom();
      if (a && peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;  // '-'
        auto [b, set_b] = class_atom();
        if (!b) unsupported("a class escape as a range end");
        if (*b < *a) bad("range out of order in character class");
        r.emplace_back(*a, *b);
        continue;
      }
      if (a) {
        r.emplace_back(*a, *a);
      } else {
        r.insert(r.end(), set_a.begin(), set_a.end());
      }
    }
    if (negated) return complement(r);
    if (r.empty()) unsupported("the empty class '[]'");
    return normalize(r);
  }

  // Whether a {m}, {m,} or {m,n} quantifier starts at `at`.
  bool quantifier_at(size_t at) const {
    if (at >= src_.size() || src_[at] != '{') return false;
    size_t i = at + 1;
    size_t digits = 0;
    for (; i < src_.size() && src_[i] >= '0' && src_[i] <= '9'; ++i) ++digits;
    if (!digits) return false;
    if (i < src_.size() && src_[i] == ',') {
      ++i;
      while (i < src_.size() && src_[i] >= '0' && src_[i] <= '9') ++i;
    }
    return i < src_.size() && src_[i] == '}';
  }

  int64_t number() {
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepetition) {
        unsupported(fmt::format("a repetition count above {}", kMaxRepetition));
      }
      ++pos_;
    }
    return v;
  }

  void quantify(Piece& p) {
    if (at_end()) return;
    int64_t lo = 0;
    std::optional<int64_t> hi;
    const uint32_t c = peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      lo = 1;
    } else if (c == '?') {
      ++pos_;
      hi = 1;
    } else if (c == '{' && quantifier_at(pos_)) {
      ++pos_;
      lo = number();
      if (peek() == ',') {
        ++pos_;
        if (peek() != '}') hi = number();
      } else {
        hi = lo;
      }
      ++pos_;  // '}'
      if (hi && *hi < lo) bad("repetition {m,n} with n < m");
    } else {
      return;
    }
    if (!at_end() && peek() == '?') ++pos_;  // lazy: the same language
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || quantifier_at(pos_))) {
      bad("nothing to repeat");
    }
    const std::string e = p.is_text ? gbnf_literal(p.text) : p.expr;
    p.is_text = false;
    p.text.clear();
    p.expr = e.empty() ? "" : repeat(e, lo, hi);
  }

  std::vector<uint32_t> src_;
  std::string ptr_;
  size_t pos_ = 0;
};

// ---- the schema walk ----

bool is_annotation(std::string_view k) {
  static const std::set<std::string_view> kAnnotations = {
      "title",      "description",     "examples",         "$schema",       "$id",
      "$comment",   "default",         "deprecated",       "readOnly",      "writeOnly",
      "$anchor",    "contentEncoding", "contentMediaType", "contentSchema", "$defs",
      "definitions"};
  return kAnnotations.count(k) > 0;
}

// Keywords that constrain values and are not implemented.
bool is_unsupported(std::string_view k, const json& v) {
  static const std::set<std::string_view> kUnsupported = {"multipleOf",
                                                          "not",
                                                          "if",
                                                          "then",
                                                          "else",
                                                          "dependentRequired",
                                                          "dependentSchemas",
                                                          "dependencies",
                                                          "patternProperties",
                                                          "propertyNames",
                                                          "minProperties",
                                                          "maxProperties",
                                                          "contains",
                                                          "minContains",
                                                          "maxContains",
                                                          "unevaluatedProperties",
                                                          "unevaluatedItems",
                                                          "$dynamicRef",
                                                          "$recursiveRef",
                                                          "uniqueItems"};
  if (!kUnsupported.count(k)) return false;
  // Forms that constrain nothing.
  if (k == "uniqueItems" && v.is_boolean() && !v.get<bool>()) return false;
  if (k == "minProperties" && v.is_number_integer() && v.get<int64_t>() == 0) return false;
  return true;
}

const std::set<std::string_view>& known_types() {
  static const std::set<std::string_view> kTypes = {"string", "number", "integer", "boolean",
                                                    "null",   "object", "array"};
  return kTypes;
}

bool value_has_type(const json& v, std::string_view t) {
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

class Converter {
 public:
  Converter(const json& root, const JsonSchemaOptions& options) : root_(root), opt_(options) {
    if (!is_rule_name(opt_.root)) {
      fail("json_schema: the root rule name '{}' is not a GBNF rule name ([a-zA-Z0-9-]+)",
           opt_.root);
    }
    if (find_primitive(opt_.root)) {
      fail("json_schema: the root rule name '{}' is the name of a primitive rule", opt_.root);
    }
  }

  std::string convert() {
    const std::string root = reserve(opt_.root);
    ref_rules_[""] = root;
    define(root, visit(root_, "", "", 0));
    std::string out = root + " ::= " + rules_.at(root).body + "\n";
    for (const auto& [name, rule] : rules_) {
      if (name != root) out += name + " ::= " + rule.body + "\n";
    }
    return out;
  }

 private:
  struct Rule {
    std::string body;
    bool reserved = false;  // a $ref target being visited: its body is not known yet
  };

  static std::string sanitize(std::string_view name) {
    std::string out;
    for (const char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (ok) {
        out += c;
      } else if (!out.empty() && out.back() != '-') {
        out += '-';
      }
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    if (out.size() > kMaxRuleNameChars) out.resize(kMaxRuleNameChars);
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? "rule" : out;
  }

  // The name of the rule for a child part: "prefix-suffix", or "suffix" at the top.
  static std::string sub(const std::string& prefix, std::string_view suffix) {
    return prefix.empty() ? std::string(suffix) : prefix + "-" + std::string(suffix);
  }
  std::string named(const std::string& name) const { return name.empty() ? opt_.root : name; }

  void account(size_t bytes) {
    bytes_ += bytes;
    if (bytes_ > kMaxGrammarBytes) {
      fail("json_schema: the grammar for this schema exceeds {} bytes", kMaxGrammarBytes);
    }
  }

  // Adds `name ::= body`, or reuses a rule of that name with the same body; a different body
  // under a taken name gets "name-2", "name-3", ...
  std::string add_rule(const std::string& name, const std::string& body) {
    const std::string base = sanitize(name);
    for (int i = 1;; ++i) {
      const std::string key = i == 1 ? base : fmt::format("{}-{}", base, i);
      if (find_primitive(key)) continue;
      auto it = rules_.find(key);
      if (it == rules_.end()) {
        rules_[key] = Rule{body, false};
        account(key.size() + body.size() + 6);
        return key;
      }
      if (!it->second.reserved && it->second.body == body) return key;
    }
  }

  std::string reserve(const std::string& name) {
    const std::string base = sanitize(name);
    for (int i = 1;; ++i) {
      const std::string key = i == 1 ? base : fmt::format("{}-{}", base, i);
      if (find_primitive(key) || rules_.count(key)) continue;
      rules_[key] = Rule{"", true};
      return key;
    }
  }

  void define(const std::string& key, const std::string& body) {
    if (body == key) fail("json_schema: the schema of rule '{}' refers only to itself", key);
    Rule& r = rules_.at(key);
    r.body = body;
    r.reserved = false;
    account(key.size() + body.size() + 6);
  }

  std::string prim(const std::string& name) {
    const Primitive* p = find_primitive(name);
    if (!rules_.count(name)) {
      rules_[name] = Rule{p->body, false};
      account(name.size() + std::string_view(p->body).size() + 6);
      for (const char* d : p->deps) prim(d);
    }
    return name;
  }

  // A rule name for `s`: the expression itself when it is one, else a new rule `name`.
  std::string rule_for(const json& s, const std::string& name, const std::string& ptr, int depth) {
    const std::string e = visit(s, name, ptr, depth);
    if (is_rule_name(e)) return e;
    return add_rule(named(name), e);
  }

  static bool has_constraints(const json& s, std::initializer_list<std::string_view> besides) {
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k)) continue;
      if (std::find(besides.begin(), besides.end(), k) != besides.end()) continue;
      return true;
    }
    return false;
  }

  static std::optional<int64_t> count(const json& s, std::string_view key, const std::string& ptr) {
    auto it = s.find(std::string(key));
    if (it == s.end()) return std::nullopt;
    const json& v = *it;
    const std::string at = child_ptr(ptr, key);
    int64_t n = -1;
    if (v.is_number_unsigned() || v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        n = INT64_MAX;
      } else {
        n = v.get<int64_t>();
      }
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      n = v.get<double>() > 1e18 ? INT64_MAX : static_cast<int64_t>(v.get<double>());
    }
    if (n < 0) {
      fail("json_schema: '{}' at {} must be a non-negative integer, got {}", key, at, dump(v));
    }
    if (n > kMaxRepetition) {
      fail("json_schema: unsupported keyword '{}' at {}: {} exceeds the supported maximum {}", key,
           at, n, kMaxRepetition);
    }
    return n;
  }

  // Follows a local reference ("#", "#/json/pointer", percent-encoded) to its target.
  std::pair<const json*, std::string> resolve(const json& ref, const std::string& ptr) const {
    if (!ref.is_string()) {
      fail("json_schema: '$ref' at {} must be a string, got {}", show(ptr), type_name(ref));
    }
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      fail(
          "json_schema: unsupported keyword '$ref' at {}: only local references (\"#...\") are "
          "supported, got '{}'",
          show(ptr), r);
    }
    std::string frag;
    for (size_t i = 1; i < r.size(); ++i) {
      if (r[i] == '%' && i + 2 < r.size() && std::isxdigit(static_cast<unsigned char>(r[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(r[i + 2]))) {
        frag += static_cast<char>(std::stoi(r.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        frag += r[i];
      }
    }
    if (!frag.empty() && frag[0] != '/') {
      fail(
          "json_schema: unsupported keyword '$ref' at {}: anchor references ('{}') are not "
          "supported, only JSON pointers",
          show(ptr), r);
    }
    const json* node = &root_;
    std::string at;
    size_t i = 0;
    while (i < frag.size()) {
      const size_t next = frag.find('/', i + 1);
      std::string token =
          frag.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      i = next == std::string::npos ? frag.size() : next;
      std::string key;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() &&
            (token[k + 1] == '0' || token[k + 1] == '1')) {
          key += token[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += token[k];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
        at = child_ptr(at, key);
      } else if (node->is_array() && !key.empty() &&
                 std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                 key.size() < 10 && std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
        at = child_ptr(at, key);
      } else {
        fail("json_schema: '$ref' '{}' at {} does not resolve (no '{}' at {})", r, show(ptr), key,
             show(at));
      }
    }
    return {node, at};
  }

  // The rule of a $ref's target, visited once; references to it while it is being visited
  // (recursion) refer to the reserved rule. Chains of bare $refs are followed to the first
  // schema with content, so every rule of the chain is that one rule.
  std::string ref_rule(const json& ref, const std::string& ptr, int depth) {
    auto [target, at] = resolve(ref, ptr);
    std::set<std::string> seen{at};
    for (;;) {
      if (auto it = ref_rules_.find(at); it != ref_rules_.end()) return it->second;
      if (!(target->is_object() && target->contains("$ref") &&
            !has_constraints(*target, {"$ref"}))) {
        break;
      }
      const std::string next_ptr = child_ptr(at, "$ref");
      std::tie(target, at) = resolve((*target)["$ref"], next_ptr);
      if (!seen.insert(at).second) {
        fail("json_schema: '$ref' at {} is a cycle of references with no schema in between",
             show(next_ptr));
      }
    }
    const std::string name = reserve(at.empty() ? opt_.root : at.substr(at.rfind('/') + 1));
    ref_rules_[at] = name;
    define(name, visit(*target, name, at, depth + 1));
    return name;
  }

  // Merges `b` into `a` (both plain schemas without $ref/allOf): the values both admit, with
  // objects merged as llama.cpp merges them (properties and required united; see flatten for
  // additionalProperties). `keep_additional`: a's additionalProperties stands.
  static void merge(json& a, const json& b, const std::string& ptr, bool keep_additional) {
    for (const auto& [k, v] : b.items()) {
      if (is_annotation(k)) continue;
      if (k == "additionalProperties" && keep_additional) continue;
      if (!a.contains(k)) {
        a[k] = v;
        continue;
      }
      json& x = a[k];
      if (x == v) continue;
      if (k == "properties") {
        if (!x.is_object() || !v.is_object()) {
          fail("json_schema: 'properties' at {} must be an object", show(ptr));
        }
        for (const auto& [name, schema] : v.items()) {
          if (!x.contains(name)) {
            x[name] = schema;
          } else if (x[name] != schema) {
            x[name] = json{{"allOf", json::array({x[name], schema})}};
          }
        }
      } else if (k == "required") {
        if (!x.is_array() || !v.is_array()) {
          fail("json_schema: 'required' at {} must be an array of strings", show(ptr));
        }
        for (const auto& r : v) {
          if (std::find(x.begin(), x.end(), r) == x.end()) x.push_back(r);
        }
      } else if (k == "type") {
        auto as_list = [&](const json& t) {
          std::vector<std::string> out;
          if (t.is_string()) {
            out.push_back(t.get<std::string>());
          } else if (t.is_array()) {
            for (const auto& e : t) {
              if (e.is_string()) out.push_back(e.get<std::string>());
            }
          }
          return out;
        };
        json both = json::array();
        const auto tb = as_list(v);
        for (const auto& t : as_list(x)) {
          if (std::find(tb.begin(), tb.end(), t) != tb.end() ||
              (t == "integer" && std::find(tb.begin(), tb.end(), "number") != tb.end())) {
            both.push_back(t);
          } else if (t == "number" && std::find(tb.begin(), tb.end(), "integer") != tb.end()) {
            both.push_back("integer");
          }
        }
        if (both.empty()) {
          fail("json_schema: allOf at {} combines types {} and {} that share no value", show(ptr),
               dump(x), dump(v));
        }
        x = both.size() == 1 ? both[0] : both;
      } else if (k == "enum") {
        if (!x.is_array() || !v.is_array()) {
          fail("json_schema: 'enum' at {} must be an array", show(ptr));
        }
        json both = json::array();
        for (const auto& e : x) {
          if (std::find(v.begin(), v.end(), e) != v.end()) both.push_back(e);
        }
        if (both.empty()) {
          fail("json_schema: allOf at {} combines enums with no common value", show(ptr));
        }
        x = both;
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
        if (!x.is_number() || !v.is_number()) {
          fail("json_schema: '{}' at {} must be a number", k, show(ptr));
        }
        if (v > x) x = v;
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        if (!x.is_number() || !v.is_number()) {
          fail("json_schema: '{}' at {} must be a number", k, show(ptr));
        }
        if (v < x) x = v;
      } else if (k == "items" && x.is_object() && v.is_object()) {
        x = json{{"allOf", json::array({x, v})}};
      } else if (k == "anyOf" || k == "oneOf") {
        fail(
            "json_schema: unsupported keyword '{}' at {}: allOf of two schemas that both have "
            "'{}' is not supported",
            k, show(ptr), k);
      } else {
        fail(
            "json_schema: unsupported keyword 'allOf' at {}: the schemas combined disagree on "
            "'{}' ({} and {})",
            show(ptr), k, dump(x), dump(v));
      }
    }
  }

  // `s` with its $ref target and allOf parts merged in (recursively), without $ref/allOf. Whether
  // an object admits further properties is decided by the schema that holds the allOf/$ref when it
  // says so, else by the parts, which must agree (llama.cpp's merge: JSON Schema would apply each
  // part's additionalProperties to the properties the other parts declare).
  json flatten(const json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) {
      fail("json_schema: schemas nested deeper than {} levels at {}", kMaxDepth, show(ptr));
    }
    check_keywords(s, ptr);
    json out = json::object();
    for (const auto& [k, v] : s.items()) {
      if (k != "$ref" && k != "allOf") out[k] = v;
    }
    const bool keep_additional = s.contains("additionalProperties");
    if (s.contains("$ref")) {
      auto [target, at] = resolve(s["$ref"], child_ptr(ptr, "$ref"));
      merge_part(out, *target, at, depth, keep_additional);
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      const std::string at = child_ptr(ptr, "allOf");
      if (!all.is_array() || all.empty()) {
        fail("json_schema: 'allOf' at {} must be a non-empty array of schemas", at);
      }
      for (size_t i = 0; i < all.size(); ++i) {
        merge_part(out, all[i], child_ptr(at, i), depth, keep_additional);
      }
    }
    return out;
  }

  void merge_part(json& out, const json& part, const std::string& ptr, int depth,
                  bool keep_additional) {
    if (part.is_boolean()) {
      if (part.get<bool>()) return;
      fail("json_schema: the schema 'false' at {} admits no value", show(ptr));
    }
    if (!part.is_object()) {
      fail("json_schema: expected a schema (an object or a boolean) at {}, got {}", show(ptr),
           type_name(part));
    }
    if (part.contains("$ref") || part.contains("allOf")) {
      merge(out, flatten(part, ptr, depth + 1), ptr, keep_additional);
    } else {
      check_keywords(part, ptr);
      merge(out, part, ptr, keep_additional);
    }
  }

  static void check_keywords(const json& s, const std::string& ptr) {
    for (const auto& [k, v] : s.items()) {
      if (is_unsupported(k, v)) {
        fail("json_schema: unsupported keyword '{}' at {}", k, child_ptr(ptr, k));
      }
    }
  }

  // The types a schema admits: its "type", or those whose keywords it uses; empty = any.
  static std::vector<std::string> types_of(const json& s, const std::string& ptr) {
    std::vector<std::string> out;
    if (auto it = s.find("type"); it != s.end()) {
      const std::string at = child_ptr(ptr, "type");
      auto add = [&](const json& t) {
        if (!t.is_string()) {
          fail("json_schema: 'type' at {} must be a type name or an array of them, got {}", at,
               dump(t));
        }
        const std::string name = t.get<std::string>();
        if (!known_types().count(name)) {
          fail(
              "json_schema: unknown type '{}' at {} (expected string, number, integer, boolean, "
              "null, object or array)",
              name, at);
        }
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
      };
      if (it->is_array()) {
        if (it->empty()) fail("json_schema: 'type' at {} is an empty array", at);
        for (const auto& t : *it) add(t);
      } else {
        add(*it);
      }
      return out;
    }
    auto uses = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (uses({"properties", "additionalProperties", "required"})) out.push_back("object");
    if (uses({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) {
      out.push_back("array");
    }
    const bool numeric_format = s.contains("format") && s["format"].is_string() &&
                                std::set<std::string>{"int32", "int64", "float", "double"}.count(
                                    s["format"].get<std::string>());
    if (uses({"minLength", "maxLength", "pattern"}) || (s.contains("format") && !numeric_format)) {
      out.push_back("string");
    }
    if (uses({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) || numeric_format) {
      out.push_back("number");
    }
    return out;
  }

  std::string visit(const json& s, const std::string& name, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) {
      fail("json_schema: schemas nested deeper than {} levels at {}", kMaxDepth, show(ptr));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return prim("value");
      fail("json_schema: the schema 'false' at {} admits no value", show(ptr));
    }
    if (!s.is_object()) {
      fail("json_schema: expected a schema (an object or a boolean) at {}, got {}", show(ptr),
           type_name(s));
    }
    check_keywords(s, ptr);

    if (s.contains("$ref") && !has_constraints(s, {"$ref"})) {
      return ref_rule(s["$ref"], child_ptr(ptr, "$ref"), depth);
    }
    if (s.contains("$ref") || s.contains("allOf")) {
      return visit(flatten(s, ptr, depth + 1), name, ptr, depth + 1);
    }

    if (auto it = s.find("nullable"); it != s.end()) {
      if (!it->is_boolean()) {
        fail("json_schema: 'nullable' at {} must be a boolean", child_ptr(ptr, "nullable"));
      }
      if (it->get<bool>()) {
        json rest = s;
        rest.erase("nullable");
        return rule_for(rest, sub(named(name), "value"), ptr, depth + 1) + " | " + prim("null");
      }
    }

    if (s.contains("anyOf") && s.contains("oneOf")) {
      fail("json_schema: unsupported keyword 'oneOf' at {}: anyOf and oneOf in one schema",
           child_ptr(ptr, "oneOf"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (s.contains(key)) return visit_alternatives(s, key, name, ptr, depth);
    }

    const std::vector<std::string> types = types_of(s, ptr);
    // const/enum values are filtered by an explicit type only (inferred types are no constraint).
    const std::vector<std::string> filter = s.contains("type") ? types : std::vector<std::string>{};
    if (s.contains("const")) {
      return literal_alternatives(json::array({s["const"]}), filter, ptr, "const");
    }
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        fail("json_schema: 'enum' at {} must be a non-empty array", child_ptr(ptr, "enum"));
      }
      return literal_alternatives(*it, filter, ptr, "enum");
    }
    if (types.empty()) return prim("value");
    if (types.size() > 1) {
      std::vector<std::string> alts;
      for (const auto& t : types) {
        json one = s;
        one["type"] = t;
        alts.push_back(rule_for(one, sub(named(name), t), ptr, depth + 1));
      }
      return join(alts, " | ");
    }
    const std::string& t = types[0];
    if (t == "string") return visit_string(s, ptr);
    if (t == "integer") return visit_integer(s, ptr);
    if (t == "number") return visit_number(s, ptr);
    if (t == "boolean") return prim("boolean");
    if (t == "null") return prim("null");
    if (t == "object") return visit_object(s, name, ptr, depth);
    return visit_array(s, name, ptr, depth);
  }

  std::string visit_alternatives(const json& s, const char* key, const std::string& name,
                                 const std::string& ptr, int depth) {
    const json& alts = s[key];
    const std::string at = child_ptr(ptr, key);
    if (!alts.is_array() || alts.empty()) {
      fail("json_schema: '{}' at {} must be a non-empty array of schemas", key, at);
    }
    json siblings = json::object();
    for (const auto& [k, v] : s.items()) {
      if (k != key && !is_annotation(k)) siblings[k] = v;
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < alts.size(); ++i) {
      const json& alt = alts[i];
      if (alt.is_boolean() && !alt.get<bool>()) continue;  // admits nothing
      json one = alt;
      if (!siblings.empty()) {  // the siblings hold the alternative as an allOf part
        one = siblings;
        one["allOf"] = json::array({alt});
      }
      const std::string r =
          rule_for(one, sub(named(name), std::to_string(i)), child_ptr(at, i), depth + 1);
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    if (out.empty()) {
      fail("json_schema: '{}' at {} admits no value (all alternatives are false)", key, at);
    }
    return join(out, " | ");
  }

  // A JSON value, exactly, with the space rule between its tokens (not after it).
  std::string literal(const json& v, int depth) {
    if (depth > kMaxDepth) {
      fail("json_schema: a 'const' or 'enum' value nested deeper than {}", kMaxDepth);
    }
    if (v.is_object()) {
      std::vector<std::string> members;
      for (const auto& [k, x] : v.items()) {
        members.push_back(gbnf_literal(dump(json(k))) + " space \":\" space " +
                          literal(x, depth + 1) + " space");
      }
      return "\"{\" space " + join2(join(members, " \",\" space "), "\"}\"");
    }
    if (v.is_array()) {
      std::vector<std::string> items;
      for (const auto& x : v) items.push_back(literal(x, depth + 1) + " space");
      return "\"[\" space " + join2(join(items, " \",\" space "), "\"]\"");
    }
    return gbnf_literal(dump(v));
  }

  std::string literal_alternatives(const json& values, const std::vector<std::string>& types,
                                   const std::string& ptr, const char* key) {
    std::vector<std::string> alts;
    for (const auto& v : values) {
      const bool typed =
          types.empty() || std::any_of(types.begin(), types.end(),
                                       [&](const auto& t) { return value_has_type(v, t); });
      if (!typed) continue;
      std::string l = literal(v, 0);
      if (std::find(alts.begin(), alts.end(), l) == alts.end()) alts.push_back(std::move(l));
    }
    if (alts.empty()) {
      fail("json_schema: no '{}' value at {} has the schema's type {}", key, child_ptr(ptr, key),
           join(types, "/"));
    }
    prim("space");
    if (alts.size() == 1) return alts[0] + " space";
    return "(" + join(alts, " | ") + ") space";
  }

  std::string visit_string(const json& s, const std::string& ptr) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (auto it = s.find("format"); it != s.end()) {
      const std::string at = child_ptr(ptr, "format");
      if (!it->is_string()) fail("json_schema: 'format' at {} must be a string", at);
      const std::string f = it->get<std::string>();
      if (f == "date" || f == "time" || f == "date-time" || f == "uuid") {
        for (const char* k : {"pattern", "minLength", "maxLength"}) {
          if (s.contains(k)) {
            fail("json_schema: unsupported keyword '{}' at {}: cannot be combined with 'format'", k,
                 child_ptr(ptr, k));
          }
        }
        return prim(f == "uuid" ? "uuid" : f + "-string");
      }
      fail(
          "json_schema: unsupported keyword 'format' ('{}') at {}: the supported string formats "
          "are date, time, date-time and uuid",
          f, at);
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      const std::string at = child_ptr(ptr, "pattern");
      if (!it->is_string()) fail("json_schema: 'pattern' at {} must be a string", at);
      for (const char* k : {"minLength", "maxLength"}) {
        if (s.contains(k)) {
          fail("json_schema: unsupported keyword '{}' at {}: cannot be combined with 'pattern'", k,
               child_ptr(ptr, k));
        }
      }
      auto cps = decode_utf8(it->get<std::string>());
      if (!cps) fail("json_schema: 'pattern' at {} is not valid UTF-8", at);
      const std::string e = PatternConverter(std::move(*cps), at).convert();
      prim("space");
      return join2(join2("\"\\\"\"", e.empty() ? "" : term(e)), "\"\\\"\" space");
    }
    if (has_len) {
      const int64_t lo = count(s, "minLength", ptr).value_or(0);
      const std::optional<int64_t> hi = count(s, "maxLength", ptr);
      if (hi && *hi < lo) {
        fail("json_schema: 'minLength' {} is above 'maxLength' {} at {}", lo, *hi, show(ptr));
      }
      prim("space");
      return join2(join2("\"\\\"\"", repeat(prim("char"), lo, hi)), "\"\\\"\" space");
    }
    return prim("string");
  }

  // Bounds on a number from minimum/maximum/exclusiveMinimum/exclusiveMaximum (draft 4's boolean
  // exclusive forms too), as exact values rounded into the integers where `integer`.
  struct NumericBounds {
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
    std::string lo_key, hi_key;
  };

  static NumericBounds bounds_of(const json& s, const std::string& ptr) {
    NumericBounds b;
    auto number = [&](const char* k) -> std::optional<double> {
      auto it = s.find(k);
      if (it == s.end() || it->is_boolean()) return std::nullopt;
      if (!it->is_number()) fail("json_schema: '{}' at {} must be a number", k, child_ptr(ptr, k));
      return it->get<double>();
    };
    auto flag = [&](const char* k) {
      auto it = s.find(k);
      return it != s.end() && it->is_boolean() && it->get<bool>();
    };
    auto tighten_lo = [&](std::optional<double> v, bool excl, const char* k) {
      if (!v) return;
      if (!b.lo || *v > *b.lo || (*v == *b.lo && excl)) {
        b.lo = v;
        b.lo_excl = excl;
        b.lo_key = k;
      }
    };
    auto tighten_hi = [&](std::optional<double> v, bool excl, const char* k) {
      if (!v) return;
      if (!b.hi || *v < *b.hi || (*v == *b.hi && excl)) {
        b.hi = v;
        b.hi_excl = excl;
        b.hi_key = k;
      }
    };
    tighten_lo(number("minimum"), flag("exclusiveMinimum"), "minimum");
    tighten_lo(number("exclusiveMinimum"), true, "exclusiveMinimum");
    tighten_hi(number("maximum"), flag("exclusiveMaximum"), "maximum");
    tighten_hi(number("exclusiveMaximum"), true, "exclusiveMaximum");
    return b;
  }

  std::string visit_integer(const json& s, const std::string& ptr) {
    NumericBounds b = bounds_of(s, ptr);
    if (auto it = s.find("format"); it != s.end()) {
      const std::string f = it->is_string() ? it->get<std::string>() : dump(*it);
      if (f == "int32") {
        if (!b.lo || *b.lo < -2147483648.0) {
          b.lo = -2147483648.0;
          b.lo_excl = false;
          b.lo_key = "format";
        }
        if (!b.hi || *b.hi > 2147483647.0) {
          b.hi = 2147483647.0;
          b.hi_excl = false;
          b.hi_key = "format";
        }
      } else if (f != "int64") {
        fail(
            "json_schema: unsupported keyword 'format' ('{}') at {}: the supported integer formats "
            "are int32 and int64",
            f, child_ptr(ptr, "format"));
      }
    }
    if (!b.lo && !b.hi) return prim("integer");
    constexpr double kLimit = static_cast<double>(kMaxInteger);
    int64_t lo = -kMaxInteger, hi = kMaxInteger;
    if (b.lo) {
      const double v = b.lo_excl ? std::floor(*b.lo) + 1 : std::ceil(*b.lo);
      if (v > kLimit) {
        fail("json_schema: unsupported keyword '{}' at {}: integers are limited to 16 digits",
             b.lo_key, child_ptr(ptr, b.lo_key));
      }
      lo = v < -kLimit ? -kMaxInteger : static_cast<int64_t>(v);
    }
    if (b.hi) {
      const double v = b.hi_excl ? std::ceil(*b.hi) - 1 : std::floor(*b.hi);
      if (v < -kLimit) {
        fail("json_schema: unsupported keyword '{}' at {}: integers are limited to 16 digits",
             b.hi_key, child_ptr(ptr, b.hi_key));
      }
      hi = v > kLimit ? kMaxInteger : static_cast<int64_t>(v);
    }
    if (lo > hi) fail("json_schema: no integer lies within the bounds at {}", show(ptr));
    prim("space");
    return term(integer_range(lo, hi)) + " space";
  }

  std::string visit_number(const json& s, const std::string& ptr) {
    if (auto it = s.find("format"); it != s.end()) {
      const std::string f = it->is_string() ? it->get<std::string>() : dump(*it);
      if (f != "float" && f != "double") {
        fail(
            "json_schema: unsupported keyword 'format' ('{}') at {}: the supported number formats "
            "are float and double",
            f, child_ptr(ptr, "format"));
      }
    }
    const NumericBounds b = bounds_of(s, ptr);
    if (!b.lo && !b.hi) return prim("number");
    auto whole = [&](std::optional<double> v, bool excl,
                     const std::string& key) -> std::optional<Bound> {
      if (!v) return std::nullopt;
      if (std::floor(*v) != *v || std::fabs(*v) > static_cast<double>(kMaxInteger)) {
        fail(
            "json_schema: unsupported keyword '{}' at {}: bounds of a 'number' must be whole "
            "numbers of at most 16 digits (got {})",
            key, child_ptr(ptr, key), *v);
      }
      return Bound{static_cast<int64_t>(*v), excl};
    };
    const auto lo = whole(b.lo, b.lo_excl, b.lo_key);
    const auto hi = whole(b.hi, b.hi_excl, b.hi_key);
    const std::string e = number_range(lo, hi);
    if (e.empty()) fail("json_schema: no number lies within the bounds at {}", show(ptr));
    prim("decimal-part");
    prim("space");
    return term(e) + " space";
  }

  std::string visit_object(const json& s, const std::string& name, const std::string& ptr,
                           int depth) {
    std::vector<std::pair<std::string, json>> props;
    std::vector<std::string> prop_ptrs;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) {
        fail("json_schema: 'properties' at {} must be an object", child_ptr(ptr, "properties"));
      }
      for (const auto& [k, v] : it->items()) {
        props.emplace_back(k, v);
        prop_ptrs.push_back(child_ptr(child_ptr(ptr, "properties"), k));
      }
    }
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      const std::string at = child_ptr(ptr, "required");
      if (!it->is_array()) fail("json_schema: 'required' at {} must be an array of strings", at);
      for (const auto& r : *it) {
        if (!r.is_string()) fail("json_schema: 'required' at {} must be an array of strings", at);
        if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end()) {
          required.push_back(r.get<std::string>());
        }
      }
    }
    json additional = !opt_.strict;
    std::string additional_ptr = child_ptr(ptr, "additionalProperties");
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!it->is_boolean() && !it->is_object()) {
        fail("json_schema: 'additionalProperties' at {} must be a boolean or a schema",
             additional_ptr);
      }
      additional = *it;
    }
    const bool additional_allowed = !(additional.is_boolean() && !additional.get<bool>());
    if (props.empty() && required.empty() && additional.is_boolean()) {
      if (additional.get<bool>()) return prim("object");
      prim("space");
      return "\"{\" space \"}\" space";
    }
    // Required names without a declared schema take additionalProperties' schema.
    for (const auto& r : required) {
      const bool declared =
          std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == r; });
      if (declared) continue;
      if (!additional_allowed) {
        fail(
            "json_schema: required property '{}' at {} is not in 'properties' and additional "
            "properties are not allowed",
            r, child_ptr(ptr, "required"));
      }
      props.emplace_back(r, additional);
      prop_ptrs.push_back(additional_ptr);
    }

    prim("space");
    std::vector<std::string> required_kvs, optional_kvs, optional_names;
    for (size_t i = 0; i < props.size(); ++i) {
      const auto& [key, schema] = props[i];
      const bool is_required = std::find(required.begin(), required.end(), key) != required.end();
      if (schema.is_boolean() && !schema.get<bool>()) {
        if (is_required) {
          fail("json_schema: required property '{}' has the schema 'false' at {}", key,
               prop_ptrs[i]);
        }
        continue;  // may never appear
      }
      const std::string value_name = sub(name, key);
      const std::string value = rule_for(schema, value_name, prop_ptrs[i], depth + 1);
      const std::string kv = add_rule(
          value_name + "-kv", gbnf_literal(dump(json(key))) + " space \":\" space " + value);
      if (is_required) {
        required_kvs.push_back(kv);
      } else {
        optional_kvs.push_back(kv);
        optional_names.push_back(value_name);
      }
    }
    std::string additional_kv;
    if (additional_allowed) {
      const std::string base = sub(name, "additional");
      const std::string value = additional.is_boolean() ? prim("value")
                                                        : rule_for(additional, base + "-value",
                                                                   additional_ptr, depth + 1);
      std::string key_rule = prim("string");
      if (!props.empty()) {
        std::vector<std::string> keys;
        for (const auto& p : props) keys.push_back(p.first);
        key_rule = add_rule(base + "-k", not_strings(keys, ptr));
      }
      additional_kv = add_rule(base + "-kv", key_rule + " \":\" space " + value);
    }

    std::string body = "\"{\" space";
    const std::string more_additional =
        additional_kv.empty() ? "" : "(\",\" space " + additional_kv + ")*";
    if (!required_kvs.empty()) {
      body = join2(body, join(required_kvs, " \",\" space "));
      for (const auto& o : optional_kvs) body += " (\",\" space " + o + ")?";
      body = join2(body, more_additional);
    } else if (!optional_kvs.empty() || !additional_kv.empty()) {
      // The first property present has no comma before it: one alternative per possible first
      // property, each followed by a chain of "-rest" rules for those after it (linear size).
      const size_t n = optional_kvs.size();
      std::vector<std::string> rest(n);  // what may follow optional i
      for (size_t j = n; j-- > 0;) {
        std::string r;
        if (j + 1 < n) {
          r = join2("(\",\" space " + optional_kvs[j + 1] + ")?", rest[j + 1]);
        } else {
          r = more_additional;
        }
        rest[j] = r.empty() || is_rule_name(r) ? r : add_rule(optional_names[j] + "-rest", r);
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < n; ++i) alts.push_back(join2(optional_kvs[i], rest[i]));
      if (!additional_kv.empty()) alts.push_back(join2(additional_kv, more_additional));
      body += " (" + join(alts, " | ") + ")?";
    }
    return body + " \"}\" space";
  }

  // A JSON string (with its quotes and trailing space) that is none of `keys`. Property names
  // that JSON writes escaped are refused here; a name written with needless escapes ("\u0061"
  // for "a") counts as a different string, as in llama.cpp.
  std::string not_strings(const std::vector<std::string>& keys, const std::string& ptr) {
    struct Trie {
      std::map<uint32_t, Trie> kids;
      bool end = false;
    };
    Trie trie;
    for (const auto& k : keys) {
      auto cps = decode_utf8(k);
      if (!cps) fail("json_schema: a property name at {} is not valid UTF-8", show(ptr));
      Trie* t = &trie;
      for (const uint32_t cp : *cps) {
        if (needs_json_escape(cp)) {
          fail(
              "json_schema: unsupported property name {} at {}: names with characters JSON "
              "escapes cannot be combined with additional properties",
              dump(json(k)), child_ptr(ptr, "properties"));
        }
        t = &t->kids[cp];
      }
      t->end = true;
    }
    const std::string ch = prim("char");
    const std::string quote = "\"\\\"\"";
    auto rest = [&](auto&& self, const Trie& t) -> std::string {
      std::vector<std::string> alts;
      if (!t.end) alts.push_back(quote);
      std::string excluded;
      for (const auto& [cp, kid] : t.kids) {
        // (Appends, not "[" + ...: GCC 12 reports a false -Wrestrict on that form.)
        std::string alt = "[";
        alt += class_char(cp);
        alt += "] ";
        alt += self(self, kid);
        alts.push_back(std::move(alt));
        excluded += class_char(cp);
      }
      alts.push_back("( [^\"\\\\\\x7F\\x00-\\x1F" + excluded +
                     R"(] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}) ) )" + ch + "* " + quote);
      return "(" + join(alts, " | ") + ")";
    };
    return quote + " " + rest(rest, trie) + " space";
  }

  std::string visit_array(const json& s, const std::string& name, const std::string& ptr,
                          int depth) {
    std::vector<std::string> prefix;     // rule of each tuple position
    std::optional<size_t> prefix_limit;  // a `false` position ends the tuple there
    auto add_prefix = [&](const json& arr, const char* key) {
      const std::string at = child_ptr(ptr, key);
      if (!arr.is_array()) fail("json_schema: '{}' at {} must be an array of schemas", key, at);
      if (static_cast<int64_t>(arr.size()) > kMaxRepetition) {
        fail("json_schema: unsupported keyword '{}' at {}: more than {} tuple items", key, at,
             kMaxRepetition);
      }
      for (size_t i = 0; i < arr.size(); ++i) {
        if (arr[i].is_boolean() && !arr[i].get<bool>()) {
          prefix_limit = i;
          break;
        }
        prefix.push_back(
            rule_for(arr[i], sub(name, fmt::format("tuple-{}", i)), child_ptr(at, i), depth + 1));
      }
    };
    const json* rest_schema = nullptr;
    std::string rest_ptr;
    const json* items = s.contains("items") ? &s["items"] : nullptr;
    if (s.contains("prefixItems")) {
      add_prefix(s["prefixItems"], "prefixItems");
      if (items) {
        if (items->is_array()) {
          fail("json_schema: 'items' at {} must be a schema when 'prefixItems' is given",
               child_ptr(ptr, "items"));
        }
        rest_schema = items;
        rest_ptr = child_ptr(ptr, "items");
      }
    } else if (items && items->is_array()) {  // draft 7 tuples
      add_prefix(*items, "items");
      if (s.contains("additionalItems")) {
        rest_schema = &s["additionalItems"];
        rest_ptr = child_ptr(ptr, "additionalItems");
      }
    } else if (items) {
      rest_schema = items;
      rest_ptr = child_ptr(ptr, "items");
    }
    const int64_t min_items = count(s, "minItems", ptr).value_or(0);
    std::optional<int64_t> max_items = count(s, "maxItems", ptr);
    if (prefix_limit) {
      max_items =
          std::min<int64_t>(max_items.value_or(INT64_MAX), static_cast<int64_t>(*prefix_limit));
    }
    std::string rest_rule;  // empty: nothing after the tuple
    if (!prefix_limit) {
      if (!rest_schema || (rest_schema->is_boolean() && rest_schema->get<bool>())) {
        rest_rule = prim("value");
      } else if (rest_schema->is_boolean()) {
        max_items =
            std::min<int64_t>(max_items.value_or(INT64_MAX), static_cast<int64_t>(prefix.size()));
      } else {
        rest_rule = rule_for(*rest_schema, sub(name, "item"), rest_ptr, depth + 1);
      }
    }
    if (max_items && *max_items < min_items) {
      fail("json_schema: no array satisfies 'minItems' {} and the items allowed ({}) at {}",
           min_items, *max_items, show(ptr));
    }
    prim("space");
    // Elements from index i on (each after a comma when i > 0), with min..max in all.
    const size_t k = prefix.size();
    auto elements = [&](auto&& self, size_t i) -> std::string {
      if (max_items && static_cast<int64_t>(i) >= *max_items) return "";
      if (i < k) {
        const std::string el = (i ? "\",\" space " : "") + prefix[i];
        const std::string seq = join2(el, self(self, i + 1));
        return static_cast<int64_t>(i) >= min_items ? "(" + seq + ")?" : seq;
      }
      if (rest_rule.empty()) return "";
      const int64_t lo = std::max<int64_t>(0, min_items - static_cast<int64_t>(k));
      const std::optional<int64_t> hi =
          max_items ? std::optional<int64_t>(*max_items - static_cast<int64_t>(k)) : std::nullopt;
      if (k == 0) return repeat_separated(rest_rule, lo, hi);
      return repeat("\",\" space " + rest_rule, lo, hi);
    };
    if (k == 0 && rest_rule == "value" && min_items == 0 && !max_items) return prim("array");
    return join2(join2("\"[\" space", elements(elements, 0)), "\"]\" space");
  }

  const json& root_;
  JsonSchemaOptions opt_;
  std::map<std::string, Rule> rules_;             // sorted: deterministic output
  std::map<std::string, std::string> ref_rules_;  // target pointer → rule
  size_t bytes_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options) {
  return Converter(schema, options).convert();
}

std::string json_object_gbnf() {
  return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}}, JsonSchemaOptions{});
}

}  // namespace kvasir::grammar
