// GBNF text -> Grammar (parse_gbnf) and back (to_gbnf). The parser follows llama.cpp's
// llama_grammar_parser (grammars/README.md) in what it builds; see grammar.h for the dialect.

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvasir/grammar/grammar_impl.h"
#include "kvasir/util/error.h"

namespace kvasir::grammar {
namespace {

constexpr int64_t kUnbounded = -1;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct LineCol {
  size_t line, column;
};

// 1-based line and column (in code points) of byte offset `off`.
LineCol line_col(std::string_view text, size_t off) {
  off = std::min(off, text.size());
  LineCol lc{1, 1};
  for (size_t i = 0; i < off; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++lc.line;
      lc.column = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++lc.column;
    }
  }
  return lc;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::shared_ptr<Grammar> parse(std::string_view root_name) {
    if (text_.size() > kGbnfMaxTextBytes) {
      error_at(0, fmt::format("the grammar text is {} bytes, more than the limit of {}",
                              text_.size(), kGbnfMaxTextBytes));
    }
    skip_space(true);
    while (pos_ < text_.size()) parse_rule();

    // Every referenced rule must be defined: report the earliest reference to an undefined one.
    size_t bad_site = kNoSite;
    uint32_t bad = 0;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      if (!rules_[r].defined && rules_[r].ref_site < bad_site) {
        bad_site = rules_[r].ref_site;
        bad = r;
      }
    }
    if (bad_site != kNoSite) {
      error_at(bad_site, fmt::format("undefined rule '{}' (expected a rule '{} ::= ...')",
                                     rules_[bad].name, rules_[bad].name));
    }
    auto it = ids_.find(std::string(root_name));
    if (it == ids_.end()) {
      error_at(0, fmt::format("no rule named '{}' (the start rule): expected a rule '{} ::= ...'",
                              root_name, root_name));
    }
    name_helpers();
    auto g = std::make_shared<Grammar>();
    g->root = it->second;
    compile(*g);
    return g;
  }

 private:
  static constexpr size_t kNoSite = ~size_t{0};

  struct Rule {
    std::string name;
    RuleKind kind = RuleKind::kUser;
    bool defined = false;
    size_t origin = kNoSite;    // where it is defined (helpers: the group or repetition)
    size_t ref_site = kNoSite;  // first reference
    uint32_t owner = 0;         // helpers: the user rule they were made for
    std::vector<Element> elems;
  };

  [[noreturn]] void error_at(size_t off, const std::string& msg) const {
    const LineCol lc = line_col(text_, off);
    fail("grammar: line {}, column {}: {}", lc.line, lc.column, msg);
  }

  // The character at `off` quoted ('x'), or "byte 0xXX" for a control byte or a byte that does
  // not start a well-formed UTF-8 character (error messages must stay valid UTF-8: the server
  // returns them in JSON).
  std::string describe(size_t off) const {
    const auto c = static_cast<unsigned char>(text_[off]);
    if (c < 0x20 || c == 0x7F) return fmt::format("byte 0x{:02X}", c);
    uint32_t partial = 0, cp = 0;
    for (size_t i = off; i < text_.size(); ++i) {
      const int r = utf8::push_byte(partial, static_cast<uint8_t>(text_[i]), &cp);
      if (r == 0) break;
      if (r == 1) return fmt::format("'{}'", text_.substr(off, i + 1 - off));
    }
    return fmt::format("byte 0x{:02X}", c);
  }

  // "found 'x'" / "found the end of the line" / "found the end of the input", for errors.
  std::string found() const {
    if (pos_ >= text_.size()) return "found the end of the input";
    const char c = text_[pos_];
    if (c == '\n' || c == '\r') return "found the end of the line";
    return "found " + describe(pos_);
  }

  std::string where(size_t off) const {
    const LineCol lc = line_col(text_, off);
    return fmt::format("line {}, column {}", lc.line, lc.column);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < text_.size() ? text_[pos_ + k] : '\0'; }

  void skip_space(bool newline_ok) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view read_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  uint32_t add_rule(Rule r, size_t site) {
    if (rules_.size() >= kGbnfMaxRules) {
      error_at(site, fmt::format("the grammar needs more than {} rules (helper rules of groups and "
                                 "repetitions included), the limit",
                                 kGbnfMaxRules));
    }
    rules_.push_back(std::move(r));
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  // The id of the user rule `name`, created on first mention. `site`: a reference's offset.
  uint32_t symbol(std::string_view name, size_t site, bool is_reference) {
    auto it = ids_.find(std::string(name));
    uint32_t id;
    if (it != ids_.end()) {
      id = it->second;
    } else {
      Rule r;
      r.name = std::string(name);
      id = add_rule(std::move(r), site);
      ids_.emplace(std::string(name), id);
    }
    if (is_reference && rules_[id].ref_site == kNoSite) rules_[id].ref_site = site;
    return id;
  }

  uint32_t new_helper(RuleKind kind, size_t origin) {
    Rule r;
    r.kind = kind;
    r.defined = true;
    r.origin = origin;
    r.owner = current_rule_;
    return add_rule(std::move(r), origin);
  }

  void emit(std::vector<Element>& out, ElementType type, uint32_t value) {
    if (++n_elements_ > kGbnfMaxElements) {
      error_at(pos_, fmt::format("the grammar compiles to more than {} elements, the limit "
                                 "(large repetition counts multiply what they repeat)",
                                 kGbnfMaxElements));
    }
    out.push_back({type, value});
  }

  void parse_rule() {
    const size_t start = pos_;
    if (!is_word_char(peek())) {
      error_at(pos_,
               fmt::format("expected a rule name ([a-zA-Z0-9-]+) to start a rule, {}", found()));
    }
    const std::string name(read_name());
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") {
      error_at(pos_, fmt::format("expected '::=' after the rule name '{}', {}", name, found()));
    }
    pos_ += 3;
    const uint32_t id = symbol(name, start, false);
    if (rules_[id].defined) {
      error_at(start, fmt::format("rule '{}' is defined twice (first at {})", name,
                                  where(rules_[id].origin)));
    }
    rules_[id].defined = true;
    rules_[id].origin = start;
    current_rule_ = id;
    skip_space(true);
    std::vector<Element> out;
    parse_alternates(false, out);
    rules_[id].elems = std::move(out);
    if (!at_end()) {
      if (peek() != '\n' && peek() != '\r') {
        error_at(pos_, fmt::format("expected a term, '|' or the end of the line in rule '{}', {}",
                                   name, found()));
      }
      ++pos_;
    }
    skip_space(true);
  }

  void parse_alternates(bool nested, std::vector<Element>& out) {
    parse_sequence(nested, out);
    for (;;) {
      if (peek() == '|' && !at_end()) {
        ++pos_;
        skip_space(true);
        emit(out, ElementType::kAlt, 0);
        parse_sequence(nested, out);
        continue;
      }
      if (!nested) {
        // A top-level rule continues on a following line that starts with '|'.
        const size_t save = pos_;
        skip_space(true);
        if (peek() == '|' && !at_end()) continue;
        pos_ = save;
      }
      break;
    }
    emit(out, ElementType::kEnd, 0);
  }

  void parse_sequence(bool nested, std::vector<Element>& out) {
    size_t last_sym_start = out.size();
    while (!at_end()) {
      const char c = peek();
      const size_t at = pos_;
      if (c == '"') {
        ++pos_;
        last_sym_start = out.size();
        for (;;) {
          if (at_end()) {
            error_at(at, "unterminated string literal: expected a closing '\"'");
          }
          if (peek() == '"') {
            ++pos_;
            break;
          }
          emit(out, ElementType::kChar, parse_char());
        }
      } else if (c == '[') {
        ++pos_;
        ElementType start_type = ElementType::kChar;
        if (peek() == '^' && !at_end()) {
          ++pos_;
          start_type = ElementType::kCharNot;
        }
        last_sym_start = out.size();
        for (;;) {
          if (at_end()) error_at(at, "unterminated character class: expected a closing ']'");
          if (peek() == ']') {
            ++pos_;
            break;
          }
          const size_t lo_at = pos_;
          const uint32_t lo = parse_char();
          emit(out, out.size() > last_sym_start ? ElementType::kCharAlt : start_type, lo);
          if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
            ++pos_;
            const uint32_t hi = parse_char();
            if (hi < lo) {
              error_at(lo_at, fmt::format("character range U+{:04X}-U+{:04X} ends below its start "
                                          "(expected the lower bound first)",
                                          lo, hi));
            }
            emit(out, ElementType::kCharRangeUpper, hi);
          }
        }
        if (out.size() == last_sym_start) {
          error_at(at, "empty character class: expected at least one character before ']'");
        }
      } else if (is_word_char(c)) {
        const std::string_view name = read_name();
        const uint32_t id = symbol(name, at, true);
        last_sym_start = out.size();
        emit(out, ElementType::kRuleRef, id);
      } else if (c == '(') {
        ++pos_;
        if (++depth_ > kGbnfMaxNesting) {
          error_at(at,
                   fmt::format("parentheses nested more than {} deep, the limit", kGbnfMaxNesting));
        }
        const uint32_t sub = new_helper(RuleKind::kGroup, at);
        skip_space(true);
        std::vector<Element> sub_out;
        parse_alternates(true, sub_out);
        if (peek() != ')' || at_end()) {
          error_at(pos_,
                   fmt::format("expected ')' to close the '(' at {}, {}", where(at), found()));
        }
        ++pos_;
        --depth_;
        rules_[sub].elems = std::move(sub_out);
        last_sym_start = out.size();
        emit(out, ElementType::kRuleRef, sub);
      } else if (c == '.') {
        ++pos_;
        last_sym_start = out.size();
        emit(out, ElementType::kCharAny, 0);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last_sym_start == out.size()) {
          error_at(at, fmt::format("expected a string, class, rule name, group or '.' before '{}' "
                                   "(a repetition applies to the term before it)",
                                   c));
        }
        ++pos_;
        int64_t min = 0, max = kUnbounded;
        if (c == '+') {
          min = 1;
        } else if (c == '?') {
          max = 1;
        } else if (c == '{') {
          skip_space(nested);
          if (is_digit(peek()) && !at_end()) {
            min = parse_count();
            skip_space(nested);
            if (peek() == '}') {
              max = min;
            } else if (peek() == ',') {
              ++pos_;
              skip_space(nested);
              if (is_digit(peek()) && !at_end()) max = parse_count();
            } else {
              error_at(pos_, fmt::format("expected ',' or '}}' in the repetition opened at {}, {}",
                                         where(at), found()));
            }
          } else if (peek() == ',') {
            ++pos_;
            skip_space(nested);
            if (!is_digit(peek()) || at_end()) {
              error_at(pos_, fmt::format("expected a number after '{{,', {}", found()));
            }
            max = parse_count();
          } else {
            error_at(pos_, fmt::format("expected a number or ',' after '{{', {}", found()));
          }
          skip_space(nested);
          if (peek() != '}' || at_end()) {
            error_at(pos_, fmt::format("expected '}}' to close the repetition opened at {}, {}",
                                       where(at), found()));
          }
          ++pos_;
          if (max != kUnbounded && max < min) {
            error_at(at, fmt::format("repetition {{{},{}}}: expected the maximum to be at least "
                                     "the minimum",
                                     min, max));
          }
        }
        handle_repetition(out, last_sym_start, min, max, at);
      } else {
        break;
      }
      skip_space(nested);
    }
  }

  int64_t parse_count() {
    const size_t at = pos_;
    int64_t v = 0;
    while (!at_end() && is_digit(peek())) {
      v = v * 10 + (peek() - '0');
      if (v > kGbnfMaxRepetition) {
        error_at(at, fmt::format("repetition count above the limit of {}", kGbnfMaxRepetition));
      }
      ++pos_;
    }
    return v;
  }

  // llama.cpp's handle_repetitions: S{m,n} -> S x m, then n - m nested optional helpers
  // (h1 ::= S | "", h2 ::= S h1 | "", ...); S{m,} -> S x m, then h ::= S h | "".
  void handle_repetition(std::vector<Element>& out, size_t start, int64_t min, int64_t max,
                         size_t at) {
    const std::vector<Element> prev(out.begin() + static_cast<ptrdiff_t>(start), out.end());
    const int64_t n_opt = max == kUnbounded ? 1 : max - min;
    const int64_t copies = std::max<int64_t>(min, 1) - 1 + n_opt;
    if (n_elements_ + static_cast<size_t>(copies) * (prev.size() + 3) > kGbnfMaxElements) {
      error_at(at, fmt::format("this repetition makes the grammar larger than {} elements, the "
                               "limit (large repetition counts multiply what they repeat)",
                               kGbnfMaxElements));
    }
    if (min == 0) {
      n_elements_ -= prev.size();
      out.resize(start);
    } else {
      for (int64_t i = 1; i < min; ++i)
        for (const Element& e : prev) emit(out, e.type, e.value);
    }
    uint32_t last = 0;
    for (int64_t i = 0; i < n_opt; ++i) {
      const uint32_t id = new_helper(RuleKind::kRepetition, at);
      std::vector<Element> rec;
      rec.reserve(prev.size() + 3);
      for (const Element& e : prev) emit(rec, e.type, e.value);
      if (i > 0 || max == kUnbounded)
        emit(rec, ElementType::kRuleRef, max == kUnbounded ? id : last);
      emit(rec, ElementType::kAlt, 0);
      emit(rec, ElementType::kEnd, 0);
      rules_[id].elems = std::move(rec);
      last = id;
    }
    if (n_opt > 0) emit(out, ElementType::kRuleRef, last);
  }

  uint32_t parse_hex(size_t n, char esc, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      const int d = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
      if (d < 0) {
        error_at(pos_, fmt::format("expected {} hex digits after '\\{}', {}", n, esc, found()));
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) {
      error_at(at, fmt::format("code point 0x{:X} is beyond U+10FFFF", v));
    }
    return v;
  }

  // One character of a literal or class (escapes decoded), as a code point.
  uint32_t parse_char() {
    const size_t at = pos_;
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) {
        error_at(at, "expected an escape after '\\', found the end of the input");
      }
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'x':
          return parse_hex(2, e, at);
        case 'u':
          return parse_hex(4, e, at);
        case 'U':
          return parse_hex(8, e, at);
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          return static_cast<uint32_t>(e);
        default:
          error_at(at, fmt::format("unknown escape {} after '\\': expected one of \\n \\r \\t "
                                   "\\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH \\UHHHHHHHH",
                                   describe(at + 1)));
      }
    }
    uint32_t partial = 0, cp = 0;
    for (;;) {
      if (pos_ >= text_.size()) error_at(at, "invalid UTF-8 in the grammar text");
      const int r = utf8::push_byte(partial, static_cast<uint8_t>(text_[pos_]), &cp);
      if (r == 0) error_at(at, "invalid UTF-8 in the grammar text");
      ++pos_;
      if (r == 1) return cp;
    }
  }

  void name_helpers() {
    std::unordered_set<std::string> taken;
    for (const Rule& r : rules_)
      if (r.kind == RuleKind::kUser) taken.insert(r.name);
    std::unordered_map<uint32_t, int> counter;
    for (Rule& r : rules_) {
      if (r.kind == RuleKind::kUser) continue;
      const std::string& base = rules_[r.owner].name;
      int& n = counter[r.owner];
      std::string name;
      do {
        name = fmt::format("{}-{}", base, ++n);
      } while (taken.count(name));
      taken.insert(name);
      r.name = std::move(name);
    }
  }

  void compile(Grammar& g);

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, uint32_t> ids_;
  size_t n_elements_ = 0;
  int depth_ = 0;
  uint32_t current_rule_ = 0;
};

// Symbol length in elements from position p (a symbol start).
size_t symbol_size(const std::vector<Element>& e, size_t p) {
  if (e[p].type != ElementType::kChar && e[p].type != ElementType::kCharNot) return 1;
  size_t q = p + 1;
  while (e[q].type == ElementType::kCharAlt || e[q].type == ElementType::kCharRangeUpper) ++q;
  return q - p;
}

CharSet build_charset(const std::vector<Element>& e, size_t p, size_t n) {
  std::vector<std::pair<uint32_t, uint32_t>> rs;
  bool negated = false;
  if (e[p].type == ElementType::kCharAny) {
    rs.emplace_back(0, kMaxCodePoint);
  } else {
    negated = e[p].type == ElementType::kCharNot;
    for (size_t i = p; i < p + n; ++i) {
      if (e[i].type == ElementType::kCharRangeUpper) {
        rs.back().second = e[i].value;
      } else {
        rs.emplace_back(e[i].value, e[i].value);
      }
    }
  }
  std::sort(rs.begin(), rs.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : rs) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> comp;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) comp.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) comp.emplace_back(next, kMaxCodePoint);
    merged = std::move(comp);
  }
  CharSet cs;
  for (auto [lo, hi] : merged) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 127); ++c)
      cs.ascii[c >> 6] |= 1ull << (c & 63);
    if (hi >= 128) cs.ranges.emplace_back(std::max<uint32_t>(lo, 128), hi);
  }
  return cs;
}

uint32_t sat_add(uint32_t a, uint32_t b) {
  return std::min<uint32_t>(kInfLen, a + b);
}

}  // namespace

void Parser::compile(Grammar& g) {
  const size_t n_rules = rules_.size();
  g.rule_names.resize(n_rules);
  g.rule_kind.resize(n_rules);
  g.rule_start.resize(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    g.rule_names[r] = rules_[r].name;
    g.rule_kind[r] = rules_[r].kind;
    g.rule_start[r] = static_cast<uint32_t>(g.elements.size());
    g.elements.insert(g.elements.end(), rules_[r].elems.begin(), rules_[r].elems.end());
  }
  auto& e = g.elements;
  g.next.assign(e.size(), kNone);
  g.charset.assign(e.size(), kNone);
  g.min_tail.assign(e.size(), kInfLen);
  g.alt_begin.assign(n_rules + 1, 0);

  // Alternatives, next positions, character sets; per alternative, what the min-length pass needs.
  struct Alt {
    uint32_t rule, first;  // first symbol position or kNone
    uint32_t terminals = 0, pending = 0, sum = 0;
  };
  std::vector<Alt> alts;
  std::vector<std::vector<uint32_t>> uses(n_rules);  // rule -> alternatives referencing it
  for (uint32_t r = 0; r < n_rules; ++r) {
    g.alt_begin[r] = static_cast<uint32_t>(g.alt_pos.size());
    size_t p = g.rule_start[r];
    for (;;) {
      Alt a{r, kNone};
      const uint32_t alt_id = static_cast<uint32_t>(alts.size());
      if (e[p].type != ElementType::kAlt && e[p].type != ElementType::kEnd) {
        a.first = static_cast<uint32_t>(p);
      }
      while (e[p].type != ElementType::kAlt && e[p].type != ElementType::kEnd) {
        const size_t n = symbol_size(e, p);
        if (e[p + n].type != ElementType::kAlt && e[p + n].type != ElementType::kEnd) {
          g.next[p] = static_cast<uint32_t>(p + n);
        }
        if (e[p].type == ElementType::kRuleRef) {
          ++a.pending;
          uses[e[p].value].push_back(alt_id);
        } else {
          ++a.terminals;
          g.charset[p] = static_cast<uint32_t>(g.charsets.size());
          g.charsets.push_back(build_charset(e, p, n));
        }
        p += n;
      }
      g.alt_pos.push_back(a.first);
      alts.push_back(a);
      if (e[p].type == ElementType::kEnd) break;
      ++p;
    }
  }
  g.alt_begin[n_rules] = static_cast<uint32_t>(g.alt_pos.size());

  // Fewest code points each rule derives: Knuth's generalization of Dijkstra to grammars.
  g.rule_min.assign(n_rules, kInfLen);
  std::vector<bool> done(n_rules, false);
  using Item = std::pair<uint32_t, uint32_t>;  // (length, rule)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> pq;
  for (const Alt& a : alts)
    if (a.pending == 0) pq.emplace(a.terminals, a.rule);
  while (!pq.empty()) {
    const auto [len, r] = pq.top();
    pq.pop();
    if (done[r]) continue;
    done[r] = true;
    g.rule_min[r] = len;
    for (uint32_t ai : uses[r]) {
      Alt& a = alts[ai];
      a.sum = sat_add(a.sum, len);
      if (--a.pending == 0) pq.emplace(sat_add(a.terminals, a.sum), a.rule);
    }
  }
  // min_tail per position, from the end of each alternative backwards.
  for (uint32_t r = 0; r < n_rules; ++r) {
    for (uint32_t k = g.alt_begin[r]; k < g.alt_begin[r + 1]; ++k) {
      std::vector<uint32_t> syms;
      for (uint32_t p = g.alt_pos[k]; p != kNone; p = g.next[p]) syms.push_back(p);
      uint32_t tail = 0;
      for (size_t i = syms.size(); i-- > 0;) {
        const uint32_t p = syms[i];
        const uint32_t own = e[p].type == ElementType::kRuleRef ? g.rule_min[e[p].value] : 1;
        tail = sat_add(tail, own);
        g.min_tail[p] = tail;
      }
    }
  }

  if (g.rule_min[g.root] >= kInfLen) {
    error_at(rules_[g.root].origin,
             fmt::format("the start rule '{}' can never finish: every alternative refers to "
                         "rules that recurse forever (expected some alternative that ends)",
                         rules_[g.root].name));
  }

  // Left recursion: an edge r -> q when q can come first in r (after nullable symbols only).
  std::vector<std::vector<uint32_t>> first(n_rules);
  for (uint32_t r = 0; r < n_rules; ++r) {
    for (uint32_t k = g.alt_begin[r]; k < g.alt_begin[r + 1]; ++k) {
      for (uint32_t p = g.alt_pos[k]; p != kNone; p = g.next[p]) {
        if (e[p].type != ElementType::kRuleRef) break;
        first[r].push_back(e[p].value);
        if (g.rule_min[e[p].value] != 0) break;
      }
    }
  }
  // Iterative DFS with colors; a back edge is a cycle.
  std::vector<uint8_t> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < n_rules; ++s) {
    if (color[s]) continue;
    path.emplace_back(s, 0);
    color[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == first[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t q = first[r][i++];
      if (color[q] == 0) {
        color[q] = 1;
        path.emplace_back(q, 0);
      } else if (color[q] == 1) {
        std::string chain;
        size_t from = 0;
        while (path[from].first != q) ++from;
        for (size_t j = from; j < path.size(); ++j)
          chain += "'" + rules_[path[j].first].name + "' -> ";
        chain += "'" + rules_[q].name + "'";
        const Rule& rq = rules_[q];
        std::string what =
            rq.kind == RuleKind::kRepetition
                ? "left recursion: the repeated item can match the empty string, so its "
                  "repetition never advances"
                : fmt::format(
                      "left recursion: rule '{}' can reach itself before consuming any "
                      "input (expected a rule that starts with a terminal or with rules "
                      "that cannot match the empty string)",
                      rq.name);
        error_at(rq.origin, fmt::format("{} ({})", what, chain));
      }
    }
  }
}

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  Parser p(text);
  return p.parse(root);
}

namespace {

void print_char(std::string& out, uint32_t c, bool in_class, bool first_in_class) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\\':
      out += "\\\\";
      return;
    default:
      break;
  }
  if (!in_class && c == '"') {
    out += "\\\"";
  } else if (in_class && (c == ']' || c == '[' || c == '-')) {
    out += '\\';
    out += static_cast<char>(c);
  } else if (in_class && first_in_class && c == '^') {
    out += "\\x5E";
  } else if (c < 0x20 || c == 0x7F) {
    out += fmt::format("\\x{:02X}", c);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c <= 0xFFFF) {
    out += fmt::format("\\u{:04X}", c);
  } else {
    out += fmt::format("\\U{:08X}", c);
  }
}

}  // namespace

std::string to_gbnf(const Grammar& g) {
  std::string out;
  const auto& e = g.elements;
  // Rules in the order a reader meets them: the first rule, then the rules it references in
  // order, and so on (unreferenced ones after), so the printed text parses back to the same ids
  // and prints the same.
  const size_t n_rules = g.rule_names.size();
  std::vector<uint32_t> order;
  std::vector<bool> seen(n_rules, false);
  for (uint32_t start = 0; start < n_rules; ++start) {
    if (seen[start]) continue;
    seen[start] = true;
    order.push_back(start);
    for (size_t i = order.size() - 1; i < order.size(); ++i) {
      const uint32_t r = order[i];
      for (uint32_t k = g.alt_begin[r]; k < g.alt_begin[r + 1]; ++k) {
        for (uint32_t p = g.alt_pos[k]; p != kNone; p = g.next[p]) {
          if (e[p].type == ElementType::kRuleRef && !seen[e[p].value]) {
            seen[e[p].value] = true;
            order.push_back(e[p].value);
          }
        }
      }
    }
  }
  for (const uint32_t r : order) {
    out += g.rule_names[r];
    out += " ::=";
    for (uint32_t k = g.alt_begin[r]; k < g.alt_begin[r + 1]; ++k) {
      if (k > g.alt_begin[r]) out += " |";
      if (g.alt_pos[k] == kNone) {
        out += " \"\"";
        continue;
      }
      bool in_literal = false;
      for (uint32_t p = g.alt_pos[k]; p != kNone; p = g.next[p]) {
        const Element& x = e[p];
        const bool single = x.type == ElementType::kChar && symbol_size(e, p) == 1;
        if (single) {
          if (!in_literal) out += " \"";
          in_literal = true;
          print_char(out, x.value, false, false);
          continue;
        }
        if (in_literal) out += '"';
        in_literal = false;
        out += ' ';
        if (x.type == ElementType::kRuleRef) {
          out += g.rule_names[x.value];
        } else if (x.type == ElementType::kCharAny) {
          out += '.';
        } else {
          out += '[';
          if (x.type == ElementType::kCharNot) out += '^';
          const size_t n = symbol_size(e, p);
          for (size_t i = p; i < p + n; ++i) {
            if (e[i].type == ElementType::kCharRangeUpper) out += '-';
            print_char(out, e[i].value, true, i == p);
          }
          out += ']';
        }
      }
      if (in_literal) out += '"';
    }
    out += '\n';
  }
  return out;
}

std::string gbnf_literal(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\x{:02X}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace kvasir::grammar
