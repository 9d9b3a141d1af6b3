// Versions and version requirements, for kvasir.toml's `[require] engine = ">=0.1, <0.2"`: a
// deployment refuses to start on an engine outside the range it was tested with.
//
// A version is MAJOR[.MINOR[.PATCH]], each part a decimal number of 1 to 9 digits; missing parts
// are 0 ("0.1" is 0.1.0). Nothing else is accepted (no pre-release or build suffix).
//
// A requirement is one or more comma-separated clauses, all of which must hold. Spaces are
// allowed around clauses and between an operator and its version. A clause is
//   [OP] VERSION
// where OP is one of  =  ==  !=  >  >=  <  <=  ^  ~  and VERSION may end in a wildcard part
// (`*`, `x` or `X`) in place of MINOR or PATCH, or be `*` alone. Meanings (Cargo's rules):
//   =V, ==V, V    exactly V (missing parts 0): "=0.1" is 0.1.0 only
//   !=V           anything but V
//   >V  >=V  <V  <=V   compared part by part (missing parts 0): ">=0.1, <0.2" is 0.1.x
//   ^V            compatible with V, the leftmost non-zero part fixed:
//                   ^1.2.3 := >=1.2.3, <2.0.0   ^0.2.3 := >=0.2.3, <0.3.0
//                   ^0.0.3 := >=0.0.3, <0.0.4   ^0.0 := >=0.0.0, <0.1.0   ^0 := >=0.0.0, <1.0.0
//   ~V            patch updates only when MINOR is written:
//                   ~1.2.3 := >=1.2.3, <1.3.0   ~1.2 := >=1.2.0, <1.3.0   ~1 := >=1.0.0, <2.0.0
//   W (a wildcard, with no OP or with = / ==): any version the written parts match:
//                   0.1.* := >=0.1.0, <0.2.0   1.* := >=1.0.0, <2.0.0   * := any version
//   !=W           any version the written parts do not match
// A wildcard with any other operator, a wildcard before a number ("1.*.3"), more than three parts,
// an empty clause, or anything else is an error naming the whole requirement, the clause and
// why: "require.engine: cannot parse '>=0.1.x.y': clause '>=0.1.x.y': more than 3 version parts
// (MAJOR.MINOR.PATCH)".
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

struct Version {
  uint32_t major = 0, minor = 0, patch = 0;
  auto operator<=>(const Version&) const = default;
  std::string str() const;  // "0.1.0"
};

// Throws kvasir::Error "<what>: cannot parse version '<text>': <why>".
Version parse_version(std::string_view text, std::string_view what = "version");

class VersionRange {
 public:
  // Throws kvasir::Error "<what>: cannot parse '<text>': <why>".
  static VersionRange parse(std::string_view text, std::string_view what = "version range");

  bool contains(const Version& v) const;
  // The requirement as written (trimmed), for messages.
  const std::string& text() const { return text_; }

 private:
  // Every clause is an interval [lo, hi) of versions (no bound: unset), or its complement.
  struct Clause {
    std::optional<Version> lo;  // inclusive
    std::optional<Version> hi;  // exclusive
    bool negated = false;
  };
  std::string text_;
  std::vector<Clause> clauses_;
};

}  // namespace kvasir
