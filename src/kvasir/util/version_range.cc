#include "kvasir/util/version_range.h"

#include <fmt/format.h>

#include <array>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A version as written in a clause: up to three numeric parts, then possibly a wildcard.
struct Written {
  std::array<uint32_t, 3> part{};
  int numbers = 0;        // numeric parts written (0..3)
  bool wildcard = false;  // ended in `*` / `x` / `X`
  Version version() const { return {part[0], part[1], part[2]}; }
};

// Parses `s`; returns the reason it is not a version ("" when it is).
std::string parse_written(std::string_view s, bool allow_wildcard, Written& out) {
  if (s.empty()) return "no version";
  int parts = 0;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    const std::string_view p =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (++parts > 3) return "more than 3 version parts (MAJOR.MINOR.PATCH)";
    if (p.empty()) return "an empty version part";
    if (p == "*" || p == "x" || p == "X") {
      if (!allow_wildcard) return fmt::format("'{}' is not a number", p);
      out.wildcard = true;
    } else {
      if (out.wildcard) return fmt::format("a number ('{}') after a wildcard", p);
      if (p.size() > 9) return fmt::format("'{}' has more than 9 digits", p);
      uint32_t v = 0;
      for (char c : p) {
        if (c < '0' || c > '9')
          return fmt::format("'{}' is not a number{}", p,
                             allow_wildcard ? " or a wildcard (*, x)" : "");
        v = v * 10 + static_cast<uint32_t>(c - '0');
      }
      out.part[out.numbers++] = v;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return "";
}

// Parts are at most 9 digits, so +1 never overflows.
Version next_patch(Version v) {
  return {v.major, v.minor, v.patch + 1};
}
Version next_minor(Version v) {
  return {v.major, v.minor + 1, 0};
}
Version next_major(Version v) {
  return {v.major + 1, 0, 0};
}

}  // namespace

std::string Version::str() const {
  return fmt::format("{}.{}.{}", major, minor, patch);
}

Version parse_version(std::string_view text, std::string_view what) {
  Written w;
  const std::string why = parse_written(trim(text), /*allow_wildcard=*/false, w);
  if (!why.empty()) fail("{}: cannot parse version '{}': {}", what, text, why);
  return w.version();
}

VersionRange VersionRange::parse(std::string_view text, std::string_view what) {
  VersionRange r;
  r.text_ = std::string(trim(text));
  auto bad = [&](std::string_view clause, const std::string& why) {
    fail("{}: cannot parse '{}': clause '{}': {}", what, r.text_, clause, why);
  };
  if (r.text_.empty()) fail("{}: cannot parse '': an empty requirement", what);
  std::string_view rest = r.text_;
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view clause = trim(rest.substr(0, comma));
    if (clause.empty()) fail("{}: cannot parse '{}': an empty clause", what, r.text_);
    static constexpr std::string_view kOps[] = {">=", "<=", "==", "!=", ">", "<", "=", "^", "~"};
    std::string_view op;
    for (std::string_view o : kOps)
      if (clause.substr(0, o.size()) == o) {
        op = o;
        break;
      }
    Written w;
    const std::string why = parse_written(trim(clause.substr(op.size())), true, w);
    if (!why.empty()) bad(clause, why);
    const Version v = w.version();
    Clause c;
    if (w.wildcard) {
      if (!(op.empty() || op == "=" || op == "==" || op == "!="))
        bad(clause,
            fmt::format("a wildcard version with '{}' (only with =, == or != or alone)", op));
      c.negated = op == "!=";
      if (w.numbers >= 1) c.lo = v;
      if (w.numbers == 1) c.hi = next_major(v);
      if (w.numbers == 2) c.hi = next_minor(v);
    } else if (op.empty() || op == "=" || op == "==" || op == "!=") {
      c.lo = v;
      c.hi = next_patch(v);
      c.negated = op == "!=";
    } else if (op == ">") {
      c.lo = next_patch(v);
    } else if (op == ">=") {
      c.lo = v;
    } else if (op == "<") {
      c.hi = v;
    } else if (op == "<=") {
      c.hi = next_patch(v);
    } else if (op == "^") {
      c.lo = v;
      if (v.major > 0 || w.numbers == 1)
        c.hi = next_major(v);
      else if (v.minor > 0 || w.numbers == 2)
        c.hi = next_minor(v);
      else
        c.hi = next_patch(v);
    } else {  // "~"
      c.lo = v;
      c.hi = w.numbers >= 2 ? next_minor(v) : next_major(v);
    }
    r.clauses_.push_back(c);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return r;
}

bool VersionRange::contains(const Version& v) const {
  for (const Clause& c : clauses_) {
    const bool in = (!c.lo || v >= *c.lo) && (!c.hi || v < *c.hi);
    if (in == c.negated) return false;
  }
  return true;
}

}  // namespace kvasir
