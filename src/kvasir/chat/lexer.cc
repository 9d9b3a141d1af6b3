#include "kvasir/chat/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kvasir/chat/error.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t p = find_tag(pos);
      if (p == std::string::npos) {
        emit_data(src_.substr(pos), pos);
        break;
      }
      char kind = src_[p + 1];
      size_t after = p + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_end = kind == '%' ? match_raw_begin(p) : 0;
      std::string text = src_.substr(pos, p - pos);
      strip_before(text, sign, kind != '{', line_starting);
      emit_data(std::move(text), pos);
      if (raw_end) {
        line_starting = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(p, after);
      } else {
        pos = lex_tag(p, after, kind);
      }
      line_starting = last_match_newline_;
    }
    Token eof{Tok::Eof, {}, 0, 0, 0, 0};
    locate(eof, src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool last_match_newline_ = false;

  void locate(Token& t, size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = it - line_starts_.begin();
    t.line = static_cast<int>(line);
    t.column = static_cast<int>(pos - line_starts_[line - 1] + 1);
  }

  [[noreturn]] void fail(size_t pos, std::string msg) const {
    Token t;
    locate(t, pos);
    throw TemplateError(ErrorKind::Syntax, std::move(msg), t.line, t.column);
  }

  void push(Tok type, size_t pos, std::string text = {}) {
    Token t{type, std::move(text), 0, 0, 0, 0};
    locate(t, pos);
    tokens_.push_back(std::move(t));
  }

  void emit_data(std::string text, size_t pos) {
    if (!text.empty()) push(Tok::Data, pos, std::move(text));
  }

  // Earliest "{{", "{%" or "{#" at or after pos.
  size_t find_tag(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
    }
    return std::string::npos;
  }

  static bool py_space_at(const std::string& s, size_t i, size_t* len) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      *len = 1;
      return unicode::is_space(b);
    }
    std::u32string one =
        unicode::decode(std::string_view(s).substr(i, std::min<size_t>(4, s.size() - i)));
    if (one.empty()) return false;
    std::string enc;
    unicode::append(enc, one[0]);
    *len = enc.size();
    return unicode::is_space(one[0]);
  }

  size_t skip_space(size_t i) const {
    size_t len;
    while (i < src_.size() && py_space_at(src_, i, &len)) i += len;
    return i;
  }

  static std::string rstrip(const std::string& s) {
    std::u32string u = unicode::decode(s);
    while (!u.empty() && unicode::is_space(u.back())) u.pop_back();
    return unicode::encode(u);
  }

  // Whitespace control of the data before a tag (Jinja2's OptionalLStrip rule).
  static void strip_before(std::string& text, char sign, bool lstrip_applies, bool line_starting) {
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
        std::u32string tail = unicode::decode(std::string_view(text).substr(l_pos));
        if (std::all_of(tail.begin(), tail.end(), unicode::is_space)) text.resize(l_pos);
      }
    }
  }

  // "{%[-+]? raw [-]?%}" at p: returns the end of the match, or 0.
  size_t match_raw_begin(size_t p) const {
    size_t i = p + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_space(i);
    if (src_.compare(i, 3, "raw") != 0) return 0;
    i = skip_space(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) {
      size_t end = skip_space(i + 3);
      return end;
    }
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return 0;
  }

  // Block end after a tag: "+%}", "-%}" + whitespace, or "%}" + one newline (trim_blocks).
  // Returns the end position or 0 when there is no block end at i.
  size_t match_block_end(size_t i) {
    if (src_.compare(i, 3, "+%}") == 0) return i + 3;
    if (src_.compare(i, 3, "-%}") == 0) return skip_space(i + 3);
    if (src_.compare(i, 2, "%}") == 0)
      return (i + 2 < src_.size() && src_[i + 2] == '\n') ? i + 3 : i + 2;
    return 0;
  }

  size_t lex_raw(size_t start, bool line_starting) {
    for (size_t p = src_.find("{%", start); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t i = p + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = skip_space(i);
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i = skip_space(i + 6);
      size_t end = match_block_end(i);
      if (!end) continue;
      std::string text = src_.substr(start, p - start);
      strip_before(text, sign, true, line_starting);
      emit_data(std::move(text), start);
      last_match_newline_ = src_[end - 1] == '\n';
      return end;
    }
    fail(start, "Missing end of raw directive");
  }

  size_t lex_comment(size_t begin, size_t content) {
    size_t k = src_.find("#}", content);
    if (k == std::string::npos) fail(begin, "Missing end of comment tag");
    size_t end;
    if (k > content && src_[k - 1] == '-') {
      end = skip_space(k + 2);
    } else if (k > content && src_[k - 1] == '+') {
      end = k + 2;
    } else {
      end = (k + 2 < src_.size() && src_[k + 2] == '\n') ? k + 3 : k + 2;
    }
    last_match_newline_ = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t begin, size_t i, char kind) {
    push(kind == '%' ? Tok::BlockBegin : Tok::VarBegin, begin);
    std::vector<char> balance;
    while (true) {
      if (i >= src_.size()) {
        last_match_newline_ = false;
        return i;  // the parser reports the unexpected end of template
      }
      if (balance.empty()) {
        if (kind == '%') {
          if (size_t end = match_block_end(i)) {
            push(Tok::BlockEnd, i);
            last_match_newline_ = src_[end - 1] == '\n';
            return end;
          }
        } else if (src_.compare(i, 3, "-}}") == 0) {
          push(Tok::VarEnd, i);
          size_t end = skip_space(i + 3);
          last_match_newline_ = src_[end - 1] == '\n';
          return end;
        } else if (src_.compare(i, 2, "}}") == 0) {
          push(Tok::VarEnd, i);
          last_match_newline_ = false;
          return i + 2;
        }
      }
      size_t len;
      if (py_space_at(src_, i, &len)) {
        i = skip_space(i);
        continue;
      }
      if (size_t n = match_float(i)) {
        std::string digits;
        for (size_t k = i; k < i + n; ++k)
          if (src_[k] != '_') digits += src_[k];
        Token t{Tok::Float, src_.substr(i, n), 0, std::strtod(digits.c_str(), nullptr), 0, 0};
        locate(t, i);
        tokens_.push_back(std::move(t));
        i += n;
        continue;
      }
      if (size_t n = lex_int(i)) {
        i += n;
        continue;
      }
      char c = src_[i];
      if (c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
          static_cast<unsigned char>(c) >= 0x80) {
        size_t j = i;
        while (j < src_.size() &&
               (src_[j] == '_' || std::isalnum(static_cast<unsigned char>(src_[j])) ||
                static_cast<unsigned char>(src_[j]) >= 0x80)) {
          if (static_cast<unsigned char>(src_[j]) >= 0x80 && py_space_at(src_, j, &len)) break;
          ++j;
        }
        push(Tok::Name, i, src_.substr(i, j - i));
        i = j;
        continue;
      }
      if (c == '\'' || c == '"') {
        i = lex_string(i);
        continue;
      }
      static constexpr const char* kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : kTwo) {
        if (src_.compare(i, 2, op) == 0) {
          push(Tok::Op, i, op);
          i += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
          if (balance.empty()) fail(i, std::string("unexpected '") + c + "'");
          char expected = balance.back();
          balance.pop_back();
          if (expected != c)
            fail(i, std::string("unexpected '") + c + "', expected '" + expected + "'");
        }
        push(Tok::Op, i, std::string(1, c));
        ++i;
        continue;
      }
      std::string ch;
      unicode::append(ch, unicode::decode(std::string_view(src_).substr(i, 4))[0]);
      fail(i, std::string("unexpected char ") + repr_char(ch) + " at " + std::to_string(i));
    }
  }

  static std::string repr_char(const std::string& ch) {
    return ch == "'" ? "\"'\"" : std::string("'") + ch + "'";
  }

  // Digits with single underscores between them ("1_000"); returns the length matched.
  size_t digits_at(size_t i) const {
    size_t j = i;
    if (j >= src_.size() || !is_ascii_digit(src_[j])) return 0;
    while (j < src_.size()) {
      if (is_ascii_digit(src_[j])) {
        ++j;
      } else if (src_[j] == '_' && j + 1 < src_.size() && is_ascii_digit(src_[j + 1])) {
        j += 2;
      } else {
        break;
      }
    }
    return j - i;
  }

  size_t match_float(size_t i) const {
    if (i > 0 && src_[i - 1] == '.') return 0;
    size_t n = digits_at(i);
    if (!n) return 0;
    size_t j = i + n;
    bool frac = false;
    if (j < src_.size() && src_[j] == '.') {
      if (size_t f = digits_at(j + 1)) {
        j += 1 + f;
        frac = true;
      }
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (size_t e = digits_at(k)) return k + e - i;
    }
    return frac ? j - i : 0;
  }

  size_t lex_int(size_t i) {
    if (!is_ascii_digit(src_[i])) return 0;
    int base = 10;
    size_t j = i;
    std::string digits;
    if (src_[i] == '0' && i + 1 < src_.size() &&
        std::string_view("bBoOxX").find(src_[i + 1]) != std::string_view::npos) {
      char b = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[i + 1])));
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      j = i + 2;
      auto ok = [&](char c) {
        if (base == 2) return c == '0' || c == '1';
        if (base == 8) return c >= '0' && c <= '7';
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      };
      while (j < src_.size()) {
        if (src_[j] == '_' && j + 1 < src_.size() && ok(src_[j + 1])) {
          ++j;
        } else if (ok(src_[j])) {
          digits += src_[j++];
        } else {
          break;
        }
      }
      if (digits.empty()) {  // just "0": the letter is lexed as a name
        j = i + 1;
        digits.assign(1, '0');
        base = 10;
      }
    } else if (src_[i] == '0') {
      j = i + 1;
      while (j < src_.size() &&
             (src_[j] == '0' || (src_[j] == '_' && j + 1 < src_.size() && src_[j + 1] == '0')))
        ++j;
      digits.assign(1, '0');
    } else {
      size_t n = digits_at(i);
      j = i + n;
      for (size_t k = i; k < j; ++k)
        if (src_[k] != '_') digits += src_[k];
    }
    errno = 0;
    unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail(i, std::string("integer literal ") + src_.substr(i, j - i) + " is too large");
    Token t{Tok::Int, src_.substr(i, j - i), static_cast<int64_t>(v), 0, 0, 0};
    locate(t, i);
    tokens_.push_back(std::move(t));
    return j - i;
  }

  size_t lex_string(size_t i) {
    char q = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != q) {
      if (src_[j] == '\\') ++j;
      ++j;
    }
    if (j >= src_.size())
      fail(i, std::string("unexpected char ") + repr_char(std::string(1, q)) + " at " +
                  std::to_string(i));
    push(Tok::String, i, unescape(src_.substr(i + 1, j - i - 1), i));
    return j + 1;
  }

  // Python's "unicode-escape" decoding of a string literal's body.
  std::string unescape(const std::string& s, size_t pos) const {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out += s[i];
        continue;
      }
      char c = s[++i];
      auto hex = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int k = 1; k <= n; ++k) {
          if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k])))
            fail(pos, std::string("truncated \\") + c + std::string(n, 'X') + " escape");
          char h = s[i + k];
          v = v * 16 + (is_ascii_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        i += n;
        return v;
      };
      switch (c) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          unicode::append(out, hex(2));
          break;
        case 'u':
          unicode::append(out, hex(4));
          break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10FFFF) fail(pos, "illegal Unicode character");
          unicode::append(out, v);
          break;
        }
        case '0':
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7': {
          char32_t v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + (s[++i] - '0');
          unicode::append(out, v);
          break;
        }
        case 'N':
          fail(pos, "\\N{...} escapes are not supported");
        default:
          out += '\\';
          out += c;
      }
    }
    return out;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace kvasir::chat
