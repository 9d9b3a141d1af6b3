#include "kvasir/quant/gguf_quantize.h"

#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir {

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    default: fail("no llama.cpp file type for {}", dtype_name(t));
  }
}

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path,
                             DType target) {
  if (target != DType::F32 && target != DType::F16 && target != DType::BF16 &&
      target != DType::Q8_0 && target != DType::Q4_0)
    fail("quantize: unsupported target type {} (supported: f32, f16, bf16, q8_0, q4_0)",
         dtype_name(target));
  if (in_path == out_path) fail("quantize: output path must differ from the input {}", in_path);
  gguf::GGUFFile in(in_path);
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
    const bool is_matrix = t.shape.size() == 2 && t.name.size() > 7 &&
                           t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    DType out_t = t.type;
    if (is_matrix) {
      out_t = target;
      if (t.shape[0] % dtype_info(target).block_size != 0) {
        out_t = DType::F16;
        rep.n_fallback++;
      }
    }
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
