// The GBNF test set (arithmetic, JSON, a 3-column CSV, a C-like identifier list) and, for each, an
// independent recognizer of exactly the same language written without the grammar engine: a
// recursive-descent parser, nlohmann::json plus a number-size check, and two hand scanners. The
// grammar tests check the engine against these on chosen and mutated strings; the token tests
// check that constrained generation only produces strings they accept.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::grammar::test {

// Arithmetic with optional single spaces around operators and inside parentheses.
inline constexpr const char* kArithGbnf = R"GBNF(root   ::= ws expr ws
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" ws factor
number ::= [0-9]+
ws     ::= " "?
)GBNF";

// RFC 8259 JSON (any value, JSON white space), with numbers bounded as llama.cpp's json.gbnf
// bounds them (up to 16 integer digits, 16 fraction digits, 2 exponent digits) and \u escapes
// that nlohmann accepts (surrogates only as a high-low pair).
inline constexpr const char* kJsonGbnf = R"GBNF(# JSON, as nlohmann::json::accept reads it.
root   ::= ws value
value  ::= (object | array | string | number | "true" | "false" | "null") ws
object ::= "{" ws ( member ("," ws member)* )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ("," ws value)* )? "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" u4 )
u4     ::= [0-9a-cA-CeEfF] hex hex hex
         | [dD] [0-7] hex hex
         | [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex
hex    ::= [0-9a-fA-F]
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
ws     ::= [ \t\n\r]*
)GBNF";

// Three comma-separated fields per line, each plain or quoted ("" inside quotes), CRLF or LF.
inline constexpr const char* kCsvGbnf = R"GBNF(root  ::= row+
row   ::= field "," field "," field "\r"? "\n"
field ::= [^,"\r\n]* | "\"" ( [^"] | "\"\"" )* "\""
)GBNF";

// C identifiers (at most 32 characters) separated by "," or ", ".
inline constexpr const char* kIdentsGbnf = R"GBNF(root  ::= ident ("," " "? ident)*
ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,31}
)GBNF";

// --- independent recognizers -------------------------------------------------------------------

class ArithRecognizer {
 public:
  static bool accepts(std::string_view s) {
    ArithRecognizer r(s);
    r.ws();
    if (!r.expr()) return false;
    r.ws();
    return r.i_ == s.size();
  }

 private:
  explicit ArithRecognizer(std::string_view s) : s_(s) {}
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void ws() {
    if (at(' ')) ++i_;
  }
  bool binary(bool (ArithRecognizer::*operand)(), const char* ops) {
    if (!(this->*operand)()) return false;
    for (;;) {
      const size_t save = i_;
      ws();
      if (i_ < s_.size() && (s_[i_] == ops[0] || s_[i_] == ops[1])) {
        ++i_;
        ws();
        if (!(this->*operand)()) return false;
      } else {
        i_ = save;
        return true;
      }
    }
  }
  bool expr() { return binary(&ArithRecognizer::term, "+-"); }
  bool term() { return binary(&ArithRecognizer::factor, "*/"); }
  bool factor() {
    if (++depth_ > 2000) return false;
    bool ok;
    if (at('(')) {
      ++i_;
      ws();
      ok = expr();
      if (ok) {
        ws();
        ok = at(')');
        if (ok) ++i_;
      }
    } else if (at('-')) {
      ++i_;
      ws();
      ok = factor();
    } else {
      const size_t start = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      ok = i_ > start;
    }
    --depth_;
    return ok;
  }
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

// nlohmann's parser, plus the grammar's bounds on number sizes (checked on the numbers outside
// strings once nlohmann has accepted the text).
inline bool json_recognizer(std::string_view s) {
  if (!nlohmann::json::accept(s)) return false;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      for (++i; s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (c == '-') ++i;
      auto digits = [&] {
        size_t n = 0;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++n;
        return n;
      };
      if (digits() > 16) return false;
      if (i < s.size() && s[i] == '.') {
        ++i;
        if (digits() > 16) return false;
      }
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (s[i] == '+' || s[i] == '-') ++i;
        if (digits() > 2) return false;
      }
    } else {
      ++i;
    }
  }
  return true;
}

inline bool csv_recognizer(std::string_view s) {
  size_t i = 0, rows = 0;
  while (i < s.size()) {
    for (int f = 0; f < 3; ++f) {
      if (f > 0) {
        if (i >= s.size() || s[i] != ',') return false;
        ++i;
      }
      if (i < s.size() && s[i] == '"') {
        ++i;
        for (;;) {
          if (i >= s.size()) return false;
          if (s[i] == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          ++i;
        }
      } else {
        while (i < s.size() && s[i] != ',' && s[i] != '"' && s[i] != '\r' && s[i] != '\n') ++i;
      }
    }
    if (i < s.size() && s[i] == '\r') ++i;
    if (i >= s.size() || s[i] != '\n') return false;
    ++i;
    ++rows;
  }
  // Unquoted fields may hold any bytes but , " CR LF; the grammar matches code points, so the
  // text must also be valid UTF-8.
  for (size_t k = 0; k < s.size();) {
    const auto b = static_cast<unsigned char>(s[k]);
    size_t n = b < 0x80                 ? 1
               : b >= 0xC2 && b <= 0xDF ? 2
               : b >= 0xE0 && b <= 0xEF ? 3
               : b >= 0xF0 && b <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || k + n > s.size()) return false;
    for (size_t j = 1; j < n; ++j)
      if ((static_cast<unsigned char>(s[k + j]) & 0xC0) != 0x80) return false;
    const auto b1 = static_cast<unsigned char>(n > 1 ? s[k + 1] : 0);
    if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F) || (b == 0xF0 && b1 < 0x90) ||
        (b == 0xF4 && b1 > 0x8F))
      return false;
    k += n;
  }
  return rows > 0;
}

inline bool idents_recognizer(std::string_view s) {
  auto first = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto rest = [&](char c) { return first(c) || (c >= '0' && c <= '9'); };
  size_t i = 0;
  for (;;) {
    if (i >= s.size() || !first(s[i])) return false;
    size_t n = 1;
    for (++i; i < s.size() && rest(s[i]); ++i) ++n;
    if (n > 32) return false;
    if (i == s.size()) return true;
    if (s[i] != ',') return false;
    ++i;
    if (i < s.size() && s[i] == ' ') ++i;
  }
}

struct TestGrammar {
  const char* name;
  const char* gbnf;
  bool (*recognizer)(std::string_view);
};

inline const std::vector<TestGrammar>& test_grammars() {
  static const std::vector<TestGrammar> all = {
      {"arith", kArithGbnf, &ArithRecognizer::accepts},
      {"json", kJsonGbnf, &json_recognizer},
      {"csv", kCsvGbnf, &csv_recognizer},
      {"idents", kIdentsGbnf, &idents_recognizer},
  };
  return all;
}

}  // namespace kvasir::grammar::test
