// Where the tokenizer tests find shared test data: $KVASIR_MODELS if set, else the shared
// models folder next to the source tree.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvasir::testing {

inline std::string models_dir() {
  if (const char* env = std::getenv("KVASIR_MODELS"); env && *env) return env;
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/models";
}

inline std::string text_dir() {
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/text";
}

inline bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace kvasir::testing
