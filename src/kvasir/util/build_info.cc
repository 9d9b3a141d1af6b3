#include "kvasir/util/build_info.h"

// CMake sets these on this one source file (CMakeLists.txt, next to the util module); the
// fallbacks keep the file compiling on its own (e.g. in a tool that globs sources).
#ifndef KVASIR_BUILD_VERSION
#define KVASIR_BUILD_VERSION "unknown"
#endif
#ifndef KVASIR_BUILD_COMMIT
#define KVASIR_BUILD_COMMIT "unknown"
#endif
#ifndef KVASIR_BUILD_TYPE
#define KVASIR_BUILD_TYPE ""
#endif
#ifndef KVASIR_BUILD_FLAGS
#define KVASIR_BUILD_FLAGS ""
#endif

namespace kvasir {

namespace {

std::string or_default(const char* s, const char* fallback) {
  return s && *s ? std::string(s) : std::string(fallback);
}

std::string compiler_name() {
#if defined(__clang__)
  std::string s = "Clang " __clang_version__;
#elif defined(__GNUC__)
  std::string s = "GCC " __VERSION__;
#else
  std::string s = "unknown compiler";
#endif
  while (!s.empty() && s.back() == ' ') s.pop_back();  // __clang_version__ may end in a space
  return s;
}

}  // namespace

const BuildInfo& build_info() {
  static const BuildInfo info{or_default(KVASIR_BUILD_VERSION, "unknown"),
                              or_default(KVASIR_BUILD_COMMIT, "unknown"),
                              or_default(KVASIR_BUILD_TYPE, "none"), compiler_name(),
                              or_default(KVASIR_BUILD_FLAGS, "none")};
  return info;
}

}  // namespace kvasir
