// Helpers for the bench tests: tiny synthetic models (random weights, fixed seed), written on
// demand through test_util::synth_model.
#pragma once

#include <string>

#include "kvasir/model/synth.h"
#include "test_util/models.h"

namespace kvasir::bench::testing {

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
  return test_util::synth_model(tiny_spec(dtype, tied),
                                "tiny_" + std::string(dtype_name(dtype)) + (tied ? "_tied" : ""));
}

}  // namespace kvasir::bench::testing
