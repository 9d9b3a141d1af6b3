// Small Hugging Face folders for the hf tests: a config.json, the tinystories-656k tokenizer
// files (the only real tokenizer we ship) and random weights under the published tensor names,
// written with SafetensorsWriter, so each test can break one thing and check the error.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvasir/format/safetensors.h"
#include "kvasir/tensor/dtype.h"
#include "test_util/files.h"
#include "test_util/paths.h"
#include "test_util/random.h"

namespace kvasir::test_util {

inline std::string tinystories656k_dir() {
  return models_dir() + "/tinystories-656k";
}

struct TinyHfSpec {
  int hidden = 16, layers = 2, heads = 2, kv_heads = 1, ffn = 32, vocab = 2048;
  bool tied = true;
  std::string arch = "LlamaForCausalLM";  // or Qwen2ForCausalLM (biases), Qwen3ForCausalLM
  safetensors::DType dtype = safetensors::DType::F32;  // of every tensor
};

// The tensors (HF names, row-major shapes) of a llama checkpoint of that shape.
inline std::map<std::string, std::vector<int64_t>> tiny_hf_tensors(const TinyHfSpec& s) {
  const int64_t hd = s.hidden / s.heads;
  std::map<std::string, std::vector<int64_t>> t;
  t["model.embed_tokens.weight"] = {s.vocab, s.hidden};
  if (!s.tied) t["lm_head.weight"] = {s.vocab, s.hidden};
  t["model.norm.weight"] = {s.hidden};
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {s.hidden};
    t[p + "post_attention_layernorm.weight"] = {s.hidden};
    t[p + "self_attn.q_proj.weight"] = {s.heads * hd, s.hidden};
    t[p + "self_attn.k_proj.weight"] = {s.kv_heads * hd, s.hidden};
    t[p + "self_attn.v_proj.weight"] = {s.kv_heads * hd, s.hidden};
    t[p + "self_attn.o_proj.weight"] = {s.hidden, s.heads * hd};
    if (s.arch == "Qwen2ForCausalLM") {
      t[p + "self_attn.q_proj.bias"] = {s.heads * hd};
      t[p + "self_attn.k_proj.bias"] = {s.kv_heads * hd};
      t[p + "self_attn.v_proj.bias"] = {s.kv_heads * hd};
    }
    if (s.arch == "Qwen3ForCausalLM") {
      t[p + "self_attn.q_norm.weight"] = {hd};
      t[p + "self_attn.k_norm.weight"] = {hd};
    }
    t[p + "mlp.gate_proj.weight"] = {s.ffn, s.hidden};
    t[p + "mlp.up_proj.weight"] = {s.ffn, s.hidden};
    t[p + "mlp.down_proj.weight"] = {s.hidden, s.ffn};
  }
  return t;
}

inline nlohmann::json tiny_hf_config(const TinyHfSpec& s) {
  return {{"architectures", {s.arch}},
          {"hidden_size", s.hidden},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"intermediate_size", s.ffn},
          {"vocab_size", s.vocab},
          {"max_position_embeddings", 512},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", s.tied},
          {"hidden_act", "silu"}};
}

// Random bytes of the dtype's size, as finite values (norms near 1).
inline std::vector<uint8_t> tiny_tensor_bytes(safetensors::DType dt, int64_t n, uint64_t seed,
                                              bool norm) {
  const std::vector<float> v =
      random_normal(static_cast<size_t>(n), static_cast<uint32_t>(seed), norm ? 0.1f : 0.3f);
  std::vector<uint8_t> out(static_cast<size_t>(n) * safetensors::dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) {
    const float f = norm ? 1.0f + v[static_cast<size_t>(i)] : v[static_cast<size_t>(i)];
    if (dt == safetensors::DType::F32) {
      std::memcpy(out.data() + i * 4, &f, 4);
    } else {
      const uint16_t h = dt == safetensors::DType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

// Writes config.json, the tokenizer files and model.safetensors into a fresh folder `name`
// under the test's temp dir; `edit` may change the tensor list before it is written.
template <class Edit>
std::string write_tiny_hf_folder(const std::string& name, const TinyHfSpec& s, Edit&& edit,
                                 nlohmann::json config = nullptr) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(temp_dir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(fs::path(tinystories656k_dir()) / f, dir / f);
  if (config.is_null()) config = tiny_hf_config(s);
  std::ofstream(dir / "config.json") << config.dump(2);
  struct T {
    safetensors::DType dt;
    std::vector<int64_t> shape;
  };
  std::map<std::string, T> tensors;
  for (auto& [n, shape] : tiny_hf_tensors(s)) tensors[n] = {s.dtype, shape};
  edit(tensors);
  safetensors::SafetensorsWriter w;
  w.set_metadata("format", "pt");
  uint64_t seed = 1;
  for (auto& [n, t] : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    const bool norm = n.find("norm") != std::string::npos;
    w.add_tensor_copy(n, t.dt, t.shape, tiny_tensor_bytes(t.dt, count, seed++, norm));
  }
  w.write((dir / "model.safetensors").string());
  return dir.string();
}

inline std::string write_tiny_hf_folder(const std::string& name, const TinyHfSpec& s = {}) {
  return write_tiny_hf_folder(name, s, [](auto&) {});
}

}  // namespace kvasir::test_util
