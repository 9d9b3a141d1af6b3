// Helpers for the bench tests: a per-process temp folder and tiny synthetic models written on
// demand (random weights, fixed seed) with the project's GGUF writer.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "kvasir/model/synth.h"

namespace kvasir::bench::testing {

inline std::string temp_dir() {
  auto d =
      std::filesystem::temp_directory_path() / ("kvasir-bench-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// A 2-layer GQA llama small enough for a test to decode many steps in milliseconds.
inline SynthSpec tiny_spec(DType dtype, bool tied = false) {
  SynthSpec s;
  s.dim = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_dim = 128;
  s.n_vocab = 256;
  s.ctx = 512;
  s.dtype = dtype;
  s.tied_output = tied;
  s.seed = 5;
  return s;
}

// Writes (once per process) the model and returns its path.
inline std::string tiny_model(DType dtype, bool tied = false) {
  std::string path =
      temp_dir() + "/tiny_" + std::string(dtype_name(dtype)) + (tied ? "_tied" : "") + ".gguf";
  if (!std::filesystem::exists(path)) write_synthetic_model(tiny_spec(dtype, tied), path);
  return path;
}

}  // namespace kvasir::bench::testing
