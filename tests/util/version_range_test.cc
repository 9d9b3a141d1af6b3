// util/version_range.h: every operator against a brute-force reference (each clause's meaning
// written out as comparisons over a grid of versions), conjunction of clauses, and the error
// message for each kind of malformed requirement.
#include "kvasir/util/version_range.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

bool in(std::string_view range, std::string_view version) {
  return VersionRange::parse(range).contains(parse_version(version));
}

std::string error_of(std::string_view range, std::string_view what = "require.engine") {
  try {
    VersionRange::parse(range, what);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Version, ParsesWithMissingPartsZero) {
  EXPECT_EQ(parse_version("0.1.0"), (Version{0, 1, 0}));
  EXPECT_EQ(parse_version("0.1"), (Version{0, 1, 0}));
  EXPECT_EQ(parse_version("2"), (Version{2, 0, 0}));
  EXPECT_EQ(parse_version(" 10.20.30 "), (Version{10, 20, 30}));
  EXPECT_EQ(parse_version("1.2.3").str(), "1.2.3");
  EXPECT_LT(parse_version("0.9.9"), parse_version("0.10.0"));  // numeric, not lexical
  EXPECT_THROW(parse_version("1.2.3.4"), Error);
  EXPECT_THROW(parse_version("1.x"), Error);  // a version, not a pattern
  EXPECT_THROW(parse_version("1.2.3-rc1"), Error);
  EXPECT_THROW(parse_version(""), Error);
  EXPECT_THROW(parse_version("1..2"), Error);
  EXPECT_THROW(parse_version("1234567890"), Error);  // more than 9 digits
  try {
    parse_version("v1", "build version");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "build version: cannot parse version 'v1': 'v1' is not a number");
  }
}

// Each single-clause requirement against its meaning written as plain comparisons, over every
// version with parts in 0..3.
TEST(VersionRange, EachOperatorMatchesItsDefinition) {
  using Pred = std::function<bool(Version)>;
  const Version v123{1, 2, 3};
  struct Case {
    const char* range;
    Pred want;
  };
  const std::vector<Case> cases = {
      {"=1.2.3", [&](Version v) { return v == v123; }},
      {"==1.2.3", [&](Version v) { return v == v123; }},
      {"1.2.3", [&](Version v) { return v == v123; }},
      {"=1.2",
       [](Version v) {
         return v == Version{1, 2, 0};
       }},
      {"!=1.2.3", [&](Version v) { return v != v123; }},
      {">1.2.3", [&](Version v) { return v > v123; }},
      {">=1.2.3", [&](Version v) { return v >= v123; }},
      {"<1.2.3", [&](Version v) { return v < v123; }},
      {"<=1.2.3", [&](Version v) { return v <= v123; }},
      {">=1.2",
       [](Version v) {
         return v >= Version{1, 2, 0};
       }},
      {"<2",
       [](Version v) {
         return v < Version{2, 0, 0};
       }},
      {"^1.2.3",
       [&](Version v) {
         return v >= v123 && v < Version{2, 0, 0};
       }},
      {"^0.2.3",
       [](Version v) {
         return v >= Version{0, 2, 3} && v < Version{0, 3, 0};
       }},
      {"^0.0.3",
       [](Version v) {
         return v == Version{0, 0, 3};
       }},
      {"^0.0",
       [](Version v) {
         return v < Version{0, 1, 0};
       }},
      {"^0",
       [](Version v) {
         return v < Version{1, 0, 0};
       }},
      {"^0.1",
       [](Version v) {
         return v >= Version{0, 1, 0} && v < Version{0, 2, 0};
       }},
      {"^1",
       [](Version v) {
         return v >= Version{1, 0, 0} && v < Version{2, 0, 0};
       }},
      {"~1.2.3",
       [&](Version v) {
         return v >= v123 && v < Version{1, 3, 0};
       }},
      {"~1.2",
       [](Version v) {
         return v >= Version{1, 2, 0} && v < Version{1, 3, 0};
       }},
      {"~1",
       [](Version v) {
         return v >= Version{1, 0, 0} && v < Version{2, 0, 0};
       }},
      {"~0.0.1",
       [](Version v) {
         return v >= Version{0, 0, 1} && v < Version{0, 1, 0};
       }},
      {"1.2.*", [](Version v) { return v.major == 1 && v.minor == 2; }},
      {"1.2.x", [](Version v) { return v.major == 1 && v.minor == 2; }},
      {"=1.X", [](Version v) { return v.major == 1; }},
      {"1.*.*", [](Version v) { return v.major == 1; }},
      {"*", [](Version) { return true; }},
      {"!=1.*", [](Version v) { return v.major != 1; }},
      {">= 0.1, < 0.2", [](Version v) { return v.major == 0 && v.minor == 1; }},
      {">1, <=3.0.1, !=2.2.2",
       [](Version v) {
         return v > Version{1, 0, 0} && v <= Version{3, 0, 1} && v != Version{2, 2, 2};
       }},
  };
  for (const Case& c : cases) {
    const VersionRange r = VersionRange::parse(c.range);
    for (uint32_t a = 0; a <= 3; ++a)
      for (uint32_t b = 0; b <= 3; ++b)
        for (uint32_t p = 0; p <= 3; ++p) {
          const Version v{a, b, p};
          EXPECT_EQ(r.contains(v), c.want(v)) << c.range << " vs " << v.str();
        }
  }
}

TEST(VersionRange, TheBriefsExamples) {
  EXPECT_TRUE(in(">=0.1.0, <0.2", "0.1.0"));
  EXPECT_TRUE(in(">=0.1.0, <0.2", "0.1.99"));
  EXPECT_FALSE(in(">=0.1.0, <0.2", "0.2.0"));
  EXPECT_FALSE(in(">=0.1.0, <0.2", "0.0.9"));
  EXPECT_TRUE(in("=0.1.0", "0.1.0"));
  EXPECT_FALSE(in("=0.1.0", "0.1.1"));
  EXPECT_TRUE(in("0.1.*", "0.1.7"));
  EXPECT_FALSE(in("0.1.*", "1.1.7"));
  EXPECT_TRUE(in("^0.1", "0.1.4"));
  EXPECT_FALSE(in("^0.1", "0.2.0"));
  EXPECT_TRUE(in(">=0.2", "0.10.0"));  // numeric order
  EXPECT_EQ(VersionRange::parse("  >=0.1 ,<0.2  ").text(), ">=0.1 ,<0.2");
  EXPECT_TRUE(in("999999999.999999999.999999999", "999999999.999999999.999999999"));
  EXPECT_TRUE(in(">999999999.999999999.999999998", "999999999.999999999.999999999"));
}

TEST(VersionRange, MalformedRequirementsSayWhy) {
  EXPECT_EQ(error_of(">=0.1.x.y"),
            "require.engine: cannot parse '>=0.1.x.y': clause '>=0.1.x.y': more than 3 version "
            "parts (MAJOR.MINOR.PATCH)");
  EXPECT_EQ(error_of(">=0.1, "), "require.engine: cannot parse '>=0.1,': an empty clause");
  EXPECT_EQ(error_of(""), "require.engine: cannot parse '': an empty requirement");
  EXPECT_EQ(error_of(">=0.1,,<1"), "require.engine: cannot parse '>=0.1,,<1': an empty clause");
  EXPECT_EQ(error_of(">=0.*"),
            "require.engine: cannot parse '>=0.*': clause '>=0.*': a wildcard version with '>=' "
            "(only with =, == or != or alone)");
  EXPECT_EQ(error_of("1.*.3"),
            "require.engine: cannot parse '1.*.3': clause '1.*.3': a number ('3') after a "
            "wildcard");
  EXPECT_EQ(error_of("=>1.0"),
            "require.engine: cannot parse '=>1.0': clause '=>1.0': '>1' is not a number or a "
            "wildcard (*, x)");
  EXPECT_EQ(error_of("1..2"),
            "require.engine: cannot parse '1..2': clause '1..2': an empty version part");
  EXPECT_EQ(error_of(">="), "require.engine: cannot parse '>=': clause '>=': no version");
  EXPECT_EQ(error_of("0.1.0-beta"),
            "require.engine: cannot parse '0.1.0-beta': clause '0.1.0-beta': '0-beta' is not a "
            "number or a wildcard (*, x)");
  EXPECT_EQ(error_of("1 2"),
            "require.engine: cannot parse '1 2': clause '1 2': '1 2' is not a number or a "
            "wildcard (*, x)");
  EXPECT_EQ(error_of("1.0000000000"),
            "require.engine: cannot parse '1.0000000000': clause '1.0000000000': '0000000000' has "
            "more than 9 digits");
  EXPECT_EQ(error_of("^1", "x").rfind("(no error)", 0), 0u);
}

}  // namespace
}  // namespace kvasir
