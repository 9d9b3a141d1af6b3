// Round-to-nearest quantization of a whole GGUF model to one weight format (f32, f16, bf16,
// q8_0, q4_0), as `llama-quantize --pure` does: every 2-D weight matrix becomes the target type;
// 1-D tensors (norms, biases, rope factors) stay F32. A matrix whose row length is not a multiple
// of the target's block size falls back to F16 (llama.cpp's rule for 32-element block types).
// Metadata is copied, general.file_type updated.
//
// As llama-quantize, a tensor that is already quantized (q8_0, q4_0, k-quants: anything but
// f32/f16/bf16) is not converted again unless allow_requantize: quantizing twice compounds the
// error, so the caller should start from the f32/f16/bf16 original. A tensor already of its
// target type is copied as it is, which is not requantizing. The check runs before any work.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

struct QuantizeReport {
  int n_tensors = 0;
  int n_quantized = 0;
  int n_fallback = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

struct QuantizeOptions {
  bool allow_requantize = false;
};

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, DType target,
                             const QuantizeOptions& options = {});

// A target type by name, case-insensitively as llama-quantize ("q4_0", "Q4_0", "F16"); nullopt
// for a name that is not one of f32, f16, bf16, q8_0, q4_0.
std::optional<DType> quantize_type_from_name(std::string_view name);

// llama.cpp's LLAMA_FTYPE value for a pure file of `t` (general.file_type).
uint32_t llama_file_type(DType t);

}  // namespace kvasir
