// Optional Node.js references (node-llama-cpp, the openai npm SDK): cache_dir(), the folder the
// install scripts put them in (${KVASIR_CACHE:-$HOME/.cache/kvasir}), and node_available().
// Tests that need them skip themselves, with the reason, when they are missing.
#pragma once

#include <cstdlib>
#include <string>

namespace kvasir::test_util {

inline std::string cache_dir() {
  if (const char* c = std::getenv("KVASIR_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/kvasir";
}

inline bool node_available() {
  return std::system("node --version > /dev/null 2>&1") == 0;
}

}  // namespace kvasir::test_util
