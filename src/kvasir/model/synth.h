// Synthetic models: GGUF files with random weights (fixed seed) and a real shape, for tests
// (small llama/qwen2 variants: GQA, MQA, NeoX RoPE, tied or untied output) and for speed
// benchmarks (the shapes of BENCH.md). Weights are N(0, 0.02²)-like so activations stay sane;
// norms are around 1. The tokenizer metadata can be copied from a vocabulary GGUF so llama.cpp
// loads the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

struct SynthSpec {
  std::string arch = "llama";  // llama | qwen2 | qwen3
  int dim = 64;
  int n_layers = 2;
  int n_heads = 4;
  int n_kv_heads = 4;
  int ffn_dim = 128;
  int n_vocab = 256;
  int ctx = 2048;
  float rope_base = 10000.0f;
  bool tied_output = false;
  DType dtype = DType::F32;         // matrices (norms and biases stay F32)
  std::optional<DType> output_dtype;  // defaults to dtype
  uint64_t seed = 1;
  std::string vocab_from;  // optional vocab GGUF whose tokenizer.* keys are copied
  std::string name = "synthetic";
};

// A named shape from BENCH.md: "llama-110m", "tinyllama-1.1b", "llama3-8b", or "llama-tiny" (for
// tests: dim 256, 4 layers, 4 / 2 heads, ffn 768, 32000 tokens). Throws on unknown.
SynthSpec synth_shape(const std::string& name);

// Writes the model; throws kvasir::Error on failure.
void write_synthetic_model(const SynthSpec& spec, const std::string& path);

}  // namespace kvasir
