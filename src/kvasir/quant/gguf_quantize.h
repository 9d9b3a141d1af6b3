// Round-to-nearest quantization of a whole GGUF model to one weight format (f32, f16, bf16,
// q8_0, q4_0), as `llama-quantize --pure` does: every 2-D weight matrix becomes the target type;
// 1-D tensors (norms, biases, rope factors) stay F32. A matrix whose row length is not a multiple
// of the target's block size falls back to F16 (llama.cpp's rule for 32-element block types).
// Metadata is copied, general.file_type updated.
#pragma once

#include <string>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

struct QuantizeReport {
  int n_tensors = 0;
  int n_quantized = 0;
  int n_fallback = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path,
                             DType target);

// llama.cpp's LLAMA_FTYPE value for a pure file of `t` (general.file_type).
uint32_t llama_file_type(DType t);

}  // namespace kvasir
