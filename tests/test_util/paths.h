// Where the tests find shared data: models_dir() ($KVASIR_MODELS when set and not empty, else the
// shared models folder next to the source tree), stories260k_path() in it, and text_dir() (the
// shared evaluation texts). No library dependency: any test binary can include it.
#pragma once

#include <cstdlib>
#include <string>

namespace kvasir::test_util {

inline std::string models_dir() {
  if (const char* env = std::getenv("KVASIR_MODELS"); env && *env) return env;
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/models";
}

inline std::string stories260k_path() {
  return models_dir() + "/stories260K.gguf";
}

inline std::string text_dir() {
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/text";
}

}  // namespace kvasir::test_util
