// Helpers shared by the model tests: where the shared test models live, and small random-weight
// models written on demand with the GGUF writer (cached per test binary run in a temp folder).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kvasir/model/synth.h"

namespace kvasir::testing {

inline std::string models_dir() {
  if (const char* env = std::getenv("KVASIR_MODELS")) return env;
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/models";
}

inline std::string stories260k() { return models_dir() + "/stories260K.gguf"; }

inline std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("kvasir-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// Writes (once per process) a synthetic model for `spec` and returns its path.
inline std::string synth_model(const SynthSpec& spec, const std::string& name) {
  std::string path = temp_dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(path)) write_synthetic_model(spec, path);
  return path;
}

}  // namespace kvasir::testing
