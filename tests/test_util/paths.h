// Where the tests find shared data: models_dir() ($KVASIR_MODELS when set and not empty, else the
// shared models folder next to the source tree), stories260k_path() in it, text_dir() (the
// shared evaluation texts) and shared_templates_dir() (real chat templates). No library dependency:
// any test binary can include it.
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

// The shared real chat templates (../shared/templates).
inline std::string shared_templates_dir() {
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/templates";
}

}  // namespace kvasir::test_util
