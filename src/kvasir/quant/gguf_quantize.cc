#include "kvasir/quant/gguf_quantize.h"

#include <cctype>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir {

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return 7;
    case DType::BF16:
      return 32;
    default:
      fail("no llama.cpp file type for {}", dtype_name(t));
  }
}

std::optional<DType> quantize_type_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto t = dtype_from_name(lower);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::BF16 && *t != DType::Q8_0 &&
             *t != DType::Q4_0))
    return std::nullopt;
  return t;
}

namespace {

bool is_weight_matrix(const gguf::TensorInfo& t) {
  return t.shape.size() == 2 && t.name.size() > 7 &&
         t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
}

// The type `t` gets in a file quantized to `target`.
DType output_type(const gguf::TensorInfo& t, DType target) {
  if (!is_weight_matrix(t)) return t.type;
  if (t.shape[0] % dtype_info(target).block_size != 0) return DType::F16;
  return target;
}

bool is_quantized(DType t) {
  return dtype_info(t).block_size > 1;
}

}  // namespace

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, DType target,
                             const QuantizeOptions& options) {
  if (target != DType::F32 && target != DType::F16 && target != DType::BF16 &&
      target != DType::Q8_0 && target != DType::Q4_0)
    fail("quantize: unsupported target type {} (supported: f32, f16, bf16, q8_0, q4_0)",
         dtype_name(target));
  if (in_path == out_path) fail("quantize: output path must differ from the input {}", in_path);
  gguf::GGUFFile in(in_path);
  if (!options.allow_requantize) {
    for (const gguf::TensorInfo& t : in.tensors()) {
      const DType out_t = output_type(t, target);
      if (out_t != t.type && is_quantized(t.type))
        fail(
            "{}: tensor {} is already quantized ({}); converting it again (to {}) starts from "
            "rounded values, not the original: quantize from the f32/f16/bf16 file, or pass "
            "--allow-requantize",
            in_path, t.name, dtype_name(t.type), dtype_name(out_t));
    }
  }
  gguf::GGUFWriter w;
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.alignment") continue;
    w.set(k, v);
  }
  w.set("general.file_type", gguf::Value::u32(llama_file_type(target)));
  w.set("general.quantization_version", gguf::Value::u32(2));

  QuantizeReport rep;
  std::vector<float> buf;
  for (const gguf::TensorInfo& t : in.tensors()) {
    rep.n_tensors++;
    rep.bytes_in += t.nbytes;
    const DType out_t = output_type(t, target);
    if (is_weight_matrix(t) && out_t != target) rep.n_fallback++;
    if (out_t == t.type) {
      w.add_tensor(t.name, t.type, t.shape, t.data, t.nbytes);
      rep.bytes_out += t.nbytes;
      continue;
    }
    const int64_t n = t.n_elements();
    const int64_t cols = t.shape[0];
    buf.resize(static_cast<size_t>(n));
    dequantize_row(t.type, t.data, buf.data(), n);
    std::vector<uint8_t> q = quantize_tensor(out_t, buf.data(), n / cols, cols);
    rep.bytes_out += q.size();
    rep.n_quantized++;
    w.add_tensor_copy(t.name, out_t, t.shape, std::move(q));
  }
  w.write(out_path);
  return rep;
}

}  // namespace kvasir
