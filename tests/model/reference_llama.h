// A straightforward scalar llama/qwen2/qwen3 forward pass used as the oracle in tests: weights
// dequantized to float with the reference dequantizers, every dot product and the softmax in
// double, attention materialised in full, RoPE angles in double. Slow, obviously correct.
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/format/gguf.h"

namespace kvasir::testing {

// Logits (n_vocab floats) for every position of `tokens`, processed as one sequence from
// position 0.
std::vector<std::vector<float>> reference_logits(const gguf::GGUFFile& f,
                                                 const std::vector<int32_t>& tokens);

}  // namespace kvasir::testing
