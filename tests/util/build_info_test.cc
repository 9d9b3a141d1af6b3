// util/build_info.h: every fact is filled, and build_flags carries the flags this very build
// compiled with (the tests are compiled with the same CMAKE_CXX_FLAGS_<TYPE> and project options).
#include "kvasir/util/build_info.h"

#include <gtest/gtest.h>

#include <string>

namespace kvasir {
namespace {

bool has(const std::string& s, const char* sub) {
  return s.find(sub) != std::string::npos;
}

TEST(BuildInfo, EveryFactIsFilled) {
  const BuildInfo& b = build_info();
  for (const std::string* s : {&b.version, &b.commit, &b.build_type, &b.compiler, &b.build_flags})
    EXPECT_FALSE(s->empty());
}

TEST(BuildInfo, FlagsAreThoseOfThisBuild) {
  const std::string& f = build_info().build_flags;
  // add_compile_options in CMakeLists.txt, on every target.
  EXPECT_TRUE(has(f, "-Wall -Wextra -Werror")) << f;
  EXPECT_TRUE(has(f, "-ffp-contract=off")) << f;
  EXPECT_FALSE(has(f, "  ")) << f;  // spaces collapsed
#ifdef NDEBUG
  EXPECT_TRUE(has(f, "-DNDEBUG")) << f;  // from CMAKE_CXX_FLAGS_RELEASE (or RELWITHDEBINFO)
#endif
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_TRUE(has(f, "; sanitizers: address,undefined")) << f;
#else
  EXPECT_FALSE(has(f, "sanitizers")) << f;
#endif
}

}  // namespace
}  // namespace kvasir
