// Models for tests: synth_model(spec, name), a small random-weight model written once per test
// process with the project's GGUF writer (kvasir/model/synth.h), and Stories260K::get(), the
// shared stories260K model and its tokenizer loaded once per test process. Needs kvasir_model
// (and kvasir_tokenizer for Stories260K); the paths themselves are in test_util/paths.h.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kvasir/model/model.h"
#include "kvasir/model/synth.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir::test_util {

// Writes (once per process) a synthetic model for `spec` as temp_dir()/NAME.gguf; returns its path.
inline std::string synth_model(const SynthSpec& spec, const std::string& name) {
  std::string path = temp_dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(path)) write_synthetic_model(spec, path);
  return path;
}

// stories260K and its tokenizer, loaded once per process and shared by every test in it (the
// Model is const; each runner or engine keeps its own scratch).
struct Stories260K {
  std::unique_ptr<Model> model = Model::load(stories260k_path());
  Tokenizer tok = Tokenizer::from_gguf(model->file());

  static Stories260K& get() {
    static Stories260K m;
    return m;
  }
};

}  // namespace kvasir::test_util
